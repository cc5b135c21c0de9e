#!/usr/bin/env python3
"""What the device arena's peak would be if bigc-memory-plan's joins were transitive (a finding, not
yet the planner's rule): a side-stream instruction's buffers now stay live until the compute stream
waits for that instruction's own event (or a later one of its stream), although a wait for a later
instruction of another stream that waited for it (the comm stream's gathers reading an h2d copy)
implies it too. Replays the program's streams and waits with vector clocks (as the plan verifier,
format/Verifier.cpp, does), ends each non-persistent device buffer at the first compute instruction
known to follow its last access, and prints the peak of the live bytes with the planned lives and
with those. (The planned lives' peak is near the arena's lower bound, a check of the replay: 29.64
against 29.64 GiB for the 65,536-wide tiled plan of docs/performance.md "Tiles", 21.33 against
21.03 GiB for the untiled 1T plan with --prefetch 0; with transitive joins 23.83 and 19.60 GiB.)

  python3 bench/memory/transitive_lives.py PROGRAM.bigc
"""
import json, sys
raw = open(sys.argv[1], 'rb').read(); head, rest = raw.split(b'\n', 1)
p = json.loads(rest[:int(head.split()[2])])
ins, bufs = p['instructions'], p['buffers']
streams = sorted({i.get('stream', 'compute') for i in ins})
pos = {}   # instruction -> (stream, position in stream)
cnt = {s: 0 for s in streams}
for k, x in enumerate(ins):
    s = x.get('stream', 'compute'); pos[k] = (s, cnt[s]); cnt[s] += 1
# vector clocks: know[s] = {t: number of t's ops known complete by stream s}; clock of each op at issue
know = {s: {t: 0 for t in streams} for s in streams}
clock = {}
for k, x in enumerate(ins):
    s = x.get('stream', 'compute')
    for w in x.get('wait', []):
        t, q = pos[w]
        know[s][t] = max(know[s][t], q + 1)
        for u in streams: know[s][u] = max(know[s][u], clock[w][u])
    know[s][s] = pos[k][1]  # its own earlier ops are done (in order) when it runs
    clock[k] = dict(know[s]); clock[k][s] = pos[k][1] + 1
# the compute stream's knowledge at each compute instruction: first index at which op a is known done
known_at = {}
kn = {t: 0 for t in streams}
order = {s: [k for k in range(len(ins)) if pos[k][0] == s] for s in streams}
ptr = {t: 0 for t in streams}
for k, x in enumerate(ins):
    if x.get('stream', 'compute') != 'compute': continue
    for t in streams:
        n = clock[k][t] if t != 'compute' else pos[k][1] + 1
        while ptr[t] < min(n, len(order[t])):
            known_at[order[t][ptr[t]]] = k; ptr[t] += 1
end = len(ins)
acc = {}
for k, x in enumerate(ins):
    for b in x['in'] + x['out']: acc.setdefault(b, []).append(k)
def peak(space, newlife):
    delta = [0] * (end + 2)
    for b in bufs:
        if b['space'] != space or b['role'] in ('param', 'master', 'optimizer'): continue
        if newlife:
            if b['id'] not in acc: continue
            first = min(acc[b['id']]); last = max(known_at.get(a, end) if ins[a].get('stream', 'compute') != 'compute' else a for a in acc[b['id']])
        else:
            first, last = b['live']
            if last < 0: continue
        delta[first] += b['bytes']; delta[min(last, end) + 1] -= b['bytes']
    m = c = 0
    for d in delta: c += d; m = max(m, c)
    return m
for sp in ('device',):
    a, b = peak(sp, False), peak(sp, True)
    print(f"{sp}: live bytes peak (without persistent) planned lives {a/2**30:.2f} GiB, with transitive joins {b/2**30:.2f} GiB")
