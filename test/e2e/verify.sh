#!/usr/bin/env bash
# The plan verifier (bigc verify) on compiled programs: every program `bigc compile` writes is
# proven safe (plain, recompute, micro-batches, bf16 + offload with its four streams); then faults
# injected into a compiled offload program are each found and named, `bigc run` refuses the unsafe
# program (exit 1, naming the problem) unless --no-verify:
#   1. an activation's offset moved onto a neighbour it is live with;
#   2. the wait of a d2h copy on the instruction that computes what it copies, dropped;
#   3. the device arena shrunk below a buffer's end;
#   4. two adjacent compute instructions swapped where the second reads what the first writes;
#   5. in a program of 4 ranks (--zero 2, offload), the wait for a reduce-scatter dropped;
#   6. in the evaluation's own plan (eval.plan, bigc eval), an activation moved onto one it is live
#      with there;
#   7. the evaluation plan's device arena shrunk below a buffer's end.
# (The loader's own checks catch some of these first, from the buffers' live intervals; either way
# the message names the buffers or instruction.)
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
"$BIN/bigc" gen gpt --preset tiny -o "$d/m.mlir" > /dev/null
for opts in "" "--recompute full" "--micro-batches 2" "--precision bf16 --offload cpu" "--precision fp16 --offload cpu --offload-params host"; do
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/p.bigc" $opts --quiet
  "$BIN/bigc" verify "$d/p.bigc" > "$d/ok.txt" || { echo "FAIL: a compiled program ($opts) did not verify"; cat "$d/ok.txt"; exit 1; }
  grep -q "verified:" "$d/ok.txt"
done
cat "$d/ok.txt"
"$BIN/bigc" compile "$d/m.mlir" -o "$d/off.bigc" --offload cpu --quiet
for z in 0 1 2 3; do
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/z$z.bigc" --ranks 4 --zero $z --offload cpu --quiet
  "$BIN/bigc" verify "$d/z$z.bigc" > /dev/null || { echo "FAIL: a 4-rank zero $z program did not verify"; exit 1; }
done

$PY - "$d/off.bigc" "$d" <<'PY'
import json, sys
src, d = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
p0 = json.loads(raw[raw.index(b"\n") + 1:])

def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h

def save(p, name):
    body = json.dumps(p).encode()
    open(f"{d}/{name}.bigc", "wb").write(b"BIGC-PROGRAM %d %d %016x\n" % (p["version"], len(body), fnv(body)) + body)

ins, bufs = p0["instructions"], p0["buffers"]
def live(b): return b["live"]
expect = {}

# 1. move an activation onto a neighbour live at the same time (same space, different place).
p = json.loads(json.dumps(p0))
acts = [b for b in p["buffers"] if b["role"] == "activation" and b["space"] == "device" and b["bytes"] >= 64]
together = set()
for x in p["instructions"]:
    ids = x["in"] + x["out"]
    together |= {(i, j) for i in ids for j in ids}
done = False
for a in acts:
    for b in acts:
        if a is b or a["offset"] == b["offset"] or b["bytes"] > a["bytes"] or (a["id"], b["id"]) in together: continue
        if max(live(a)[0], live(b)[0]) < min(live(a)[1], live(b)[1]) - 1:
            b["offset"] = a["offset"]
            expect["moved"] = [f"'{a['name']}'", f"'{b['name']}'", "while both"]
            done = True
            break
    if done: break
assert done
save(p, "moved")

# 2. drop the wait of the first d2h copy.
p = json.loads(json.dumps(p0))
k = next(i for i, x in enumerate(p["instructions"]) if x.get("stream") == "d2h")
w = p["instructions"][k]["wait"][0]
p["instructions"][k]["wait"] = []
expect["nowait"] = [f"instruction {k} (copy on stream d2h", f"instruction {w} ({p['instructions'][w]['op']} on stream compute", "nothing orders"]
save(p, "nowait")

# 3. shrink the device arena below its last buffer.
p = json.loads(json.dumps(p0))
dev = next(s for s in p["spaces"] if s["name"] == "device")
dev["arena_bytes"] -= 64
expect["shrunk"] = ["arena"]
save(p, "shrunk")

# 4. swap a compute instruction with the next one that reads its output.
p = json.loads(json.dumps(p0))
I = p["instructions"]
for i in range(len(I) - 1):
    a, b = I[i], I[i + 1]
    if a.get("stream", "compute") == b.get("stream", "compute") == "compute" and not a.get("wait") and not b.get("wait") \
            and a["op"] not in ("reshape", "fill") and any(o in b["in"] for o in a["out"]):
        I[i], I[i + 1] = b, a
        # Caught by the loader's live-interval check or by the verifier's read-before-write proof.
        expect["swapped"] = [f"instruction {i} ({b['op']}"]
        break
assert "swapped" in expect
save(p, "swapped")

# 5. a multi-rank program: drop the compute stream's wait for a reduce-scatter.
raw = open(f"{d}/z2.bigc", "rb").read()
p = json.loads(raw[raw.index(b"\n") + 1:])
I = p["instructions"]
comm = {i for i, x in enumerate(I) if x.get("stream") == "comm" and x["op"] == "reduce_scatter"}
k = next(i for i, x in enumerate(I) if x.get("stream", "compute") != "comm" and comm & set(x.get("wait", [])))
c = next(w for w in I[k]["wait"] if w in comm)
I[k]["wait"] = [w for w in I[k]["wait"] if w != c]
expect["collective"] = [f"on stream comm", "reduce_scatter", "nothing orders"]
save(p, "collective")
# 6. the evaluation's own plan: an activation moved onto another it is live with in the evaluation.
p = json.loads(json.dumps(p0))
plan = p["eval"]["plan"]
E = [p["instructions"][i] for i in p["eval"]["instructions"]]
first, last = {}, {}
for j, x in enumerate(E):
    for b in x["in"] + x["out"]:
        first.setdefault(b, j)
        last[b] = j
at = dict(zip(plan["buffers"], plan["offsets"]))
B = p["buffers"]
cands = [b for b in plan["buffers"] if B[b]["role"] == "activation" and B[b]["space"] == "device" and b in first]
pair = next((a, b) for a in cands for b in cands if a != b and at[a] != at[b] and B[b]["bytes"] <= B[a]["bytes"]
            and first[a] < first[b] < last[a])
plan["offsets"][plan["buffers"].index(pair[1])] = at[pair[0]]
expect["evalmoved"] = ["evaluation", f"'{B[pair[0]]['name']}'", f"'{B[pair[1]]['name']}'"]
save(p, "evalmoved")
# 7. the evaluation plan's device arena shrunk below its last buffer.
p = json.loads(json.dumps(p0))
p["eval"]["plan"]["arenas"]["device"] -= 64
expect["evalshrunk"] = ["eval.plan", "lies outside the plan's 'device' arena"]
save(p, "evalshrunk")
json.dump(expect, open(f"{d}/expect.json", "w"))
PY

for f in moved nowait shrunk swapped collective evalmoved evalshrunk; do
  if "$BIN/bigc" verify "$d/$f.bigc" > "$d/$f.out" 2>&1; then echo "FAIL: bigc verify accepted the '$f' fault"; exit 1; fi
  $PY - "$d/expect.json" "$d/$f.out" "$f" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))[sys.argv[3]]
got = open(sys.argv[2]).read()
missing = [w for w in want if w not in got]
print(("FAIL " if missing else "ok   ") + f"{sys.argv[3]}: {got.strip().splitlines()[-1][:220]}")
sys.exit(1 if missing else 0)
PY
  if "$BIN/bigc" run "$d/$f.bigc" --steps 1 --quiet > "$d/$f.run" 2>&1; then echo "FAIL: bigc run ran the unsafe '$f' program"; exit 1; fi
  grep -q -E "unsafe|arena|live|overlap" "$d/$f.run" || { echo "FAIL: bigc run's message for '$f'"; cat "$d/$f.run"; exit 1; }
done
# --no-verify skips the verifier (the loader's own checks still run): the dropped wait runs.
"$BIN/bigc" run "$d/nowait.bigc" --steps 1 --quiet --no-verify
echo PASS
