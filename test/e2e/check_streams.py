#!/usr/bin/env python3
"""Checks the stream discipline of a bigc program (format versions 2 and 3) by reading its file.

usage: check_streams.py model.bigc [--expect-host] [--expect-params-host] [--expect-nvme]

Happens-before: instruction i precedes j when they run on one stream and i < j, or i is in j's
`wait` list, or transitively. For every two instructions on different streams that touch
memory that overlaps (the same buffer, or two buffers whose places in one space's arena
overlap) with at least one of them writing it, the earlier one (in program order) must precede
the later one: otherwise the runtime's threads could race. Also checks that every `wait` index
is earlier and on another stream, that side-stream instructions read/write the spaces their
stream says (d2h: device -> host, h2d: host -> device, host: host only, nvme: copies between the
nvme space and the host only, and nothing else touches the nvme space, comm, comm_tp and comm_cp:
collectives on device memory, comm_tp those of the tensor axis, comm_cp the context axis's ring
shifts and all-to-alls, p2p: the sends and receives of
pipeline stages on device memory), and that a buffer an
asynchronous instruction touches is live until that instruction is joined by the compute stream.
A pipelined program is checked stage by stage. Exit 0 and one summary line (per stage) when all
holds; 1 with the first violations otherwise.
"""
import json
import sys


def load(path):
    data = open(path, "rb").read()
    nl = data.index(b"\n")
    return json.loads(data[nl + 1:])


def main():
    path = sys.argv[1]
    top = load(path)
    # A pipelined program: every stage's program (stage 0 is the top payload).
    status = 0
    for p in [top] + top.get("stages", []):
        label = path if "stages" not in top else f"{path} stage {p.get('pipeline', {}).get('stage', 0)}"
        status |= check(p, label)
    return status


def check(p, path):
    expect_host = "--expect-host" in sys.argv
    expect_params_host = "--expect-params-host" in sys.argv
    expect_nvme = "--expect-nvme" in sys.argv
    ins = p["instructions"]
    bufs = p["buffers"]
    n = len(ins)
    errors = []
    stream = [x.get("stream", "compute") for x in ins]

    # Happens-before as bitsets (Python ints): hb[j] has bit i when i precedes j.
    hb = [0] * n
    last_on = {}
    for j in range(n):
        s = stream[j]
        h = 0
        if s in last_on:
            i = last_on[s]
            h |= hb[i] | (1 << i)
        for w in ins[j].get("wait", []):
            if not (0 <= w < j):
                errors.append(f"instruction {j}: wait index {w} is not an earlier instruction")
                continue
            if stream[w] == s:
                errors.append(f"instruction {j}: waits for {w} on its own stream {s}")
            h |= hb[w] | (1 << w)
        hb[j] = h
        last_on[s] = j

    # Spaces of transfers.
    space = [b["space"] for b in bufs]
    for j, x in enumerate(ins):
        s = stream[j]
        ins_sp = {space[b] for b in x["in"]}
        out_sp = {space[b] for b in x["out"]}
        if s == "d2h" and not (ins_sp <= {"device"} and out_sp <= {"host"}):
            errors.append(f"instruction {j} ({x['op']}, d2h) reads {ins_sp} writes {out_sp}")
        if s == "h2d" and not (ins_sp <= {"host"} and out_sp <= {"device"}):
            errors.append(f"instruction {j} ({x['op']}, h2d) reads {ins_sp} writes {out_sp}")
        if s == "host" and not (ins_sp | out_sp) <= {"host"}:
            errors.append(f"instruction {j} ({x['op']}, host) touches {ins_sp | out_sp}")
        if s in ("comm", "comm_tp", "comm_cp") and not (ins_sp | out_sp) <= {"device"}:
            errors.append(f"instruction {j} ({x['op']}, {s}) touches {ins_sp | out_sp}: collectives move device memory")
        if s in ("comm", "comm_tp") and x["op"] not in ("all_reduce", "reduce_scatter", "all_gather"):
            errors.append(f"instruction {j} ({x['op']}) on the {s} stream is not a collective")
        if (s == "comm_cp") != (x["op"] in ("ring_shift", "cp_all_to_all")):
            errors.append(f"instruction {j} ({x['op']}) on stream {s}: comm_cp runs the context axis's ring shifts "
                          "and all-to-alls, and only them")
            errors.append(f"instruction {j} ({x['op']}) on the {s} stream is not a collective")
        if x["op"] in ("all_reduce", "reduce_scatter", "all_gather") and \
                s != ("comm_tp" if x.get("attrs", {}).get("axis", 0) == 1 else "comm"):
            errors.append(f"instruction {j} ({x['op']}, axis {x.get('attrs', {}).get('axis', 0)}) on stream {s}")
        if (s == "p2p") != (x["op"] in ("send", "recv")):
            errors.append(f"instruction {j} ({x['op']}) on stream {s}: p2p runs the sends and receives of "
                          "pipeline stages, and only them")
        if s == "p2p" and not (ins_sp | out_sp) <= {"device"}:
            errors.append(f"instruction {j} ({x['op']}, p2p) touches {ins_sp | out_sp}: messages move device memory")
        if s == "nvme" and not (x["op"] == "copy" and sorted(ins_sp | out_sp) == ["host", "nvme"] and
                                len(ins_sp) == 1 and len(out_sp) == 1):
            errors.append(f"instruction {j} ({x['op']}, nvme) reads {ins_sp} writes {out_sp}: the nvme stream "
                          "copies between the nvme space and the host")
        if s != "nvme" and "nvme" in (ins_sp | out_sp):
            errors.append(f"instruction {j} ({x['op']}, {s}) touches the nvme space")
        if s == "compute" and x["op"] != "wait" and "host" in (ins_sp | out_sp):
            errors.append(f"instruction {j} ({x['op']}) on the compute stream touches host memory")

    # Conflicting accesses on different streams must be ordered. Only pairs with a side-stream
    # instruction can conflict across streams (compute is one stream).
    def ranges(x):
        out = []
        for b in x["in"]:
            out.append((space[b], bufs[b]["offset"], bufs[b]["offset"] + bufs[b]["bytes"], False, b))
        for b in x["out"]:
            out.append((space[b], bufs[b]["offset"], bufs[b]["offset"] + bufs[b]["bytes"], True, b))
        return out

    acc = [ranges(x) for x in ins]
    side = [j for j in range(n) if stream[j] != "compute"]
    checked = 0
    for a in side:
        for b in range(n):
            if b == a or stream[b] == stream[a]:
                continue
            i, j = min(a, b), max(a, b)
            if (hb[j] >> i) & 1:
                continue
            for (sp1, lo1, hi1, w1, b1) in acc[i]:
                for (sp2, lo2, hi2, w2, b2) in acc[j]:
                    if sp1 != sp2 or not (w1 or w2) or hi1 <= lo2 or hi2 <= lo1:
                        continue
                    checked += 1
                    errors.append(
                        f"race: instruction {i} ({ins[i]['op']}, {stream[i]}) and {j} ({ins[j]['op']}, "
                        f"{stream[j]}) touch {sp1} [{max(lo1, lo2)}, {min(hi1, hi2)}) (buffers {b1}, {b2}) "
                        f"and {j} does not wait for {i}")

    # Lives: a side instruction's buffers (non-persistent) live until the compute stream joins it.
    persistent = {"param", "master", "optimizer"}
    for a in side:
        joined = next((j for j in range(a + 1, n) if stream[j] == "compute" and (hb[j] >> a) & 1), n - 1)
        for b in ins[a]["in"] + ins[a]["out"]:
            if bufs[b]["role"] in persistent:
                continue
            lo, hi = bufs[b]["live"]
            if not (lo <= a and hi >= joined):
                errors.append(f"buffer {b} ({bufs[b]['name']}) live [{lo},{hi}] but instruction {a} "
                              f"({stream[a]}) touches it until {joined}")

    names = {s["name"] for s in p["spaces"]}
    if expect_host:
        if "host" not in names:
            errors.append("no host space")
        roles_host = {b["role"] for b in bufs if b["space"] in (("host", "nvme") if expect_nvme else ("host",))}
        for r in ("master", "optimizer"):
            if r not in roles_host:
                errors.append(f"no {r} buffer in the host space")
        if not any(x["op"] == "adamw" and x.get("stream") == "host" for x in ins):
            errors.append("no adamw on the host stream")
        if not any(s == "d2h" for s in stream):
            errors.append("no d2h transfer")
    if expect_nvme:
        if "nvme" not in names:
            errors.append("no nvme space")
        moments = [b for b in bufs if b["role"] == "optimizer" and len(b["shape"]) > 0 and b["bytes"] > 4]
        if not moments or any(b["space"] != "nvme" for b in moments):
            errors.append("an AdamW moment is not in the nvme space")
        if not any(s == "nvme" for s in stream):
            errors.append("no nvme copy")
    if expect_params_host:
        if any(b["role"] == "param" and b["space"] != "host" for b in bufs):
            errors.append("a param buffer is not on the host")
        if not any(s == "h2d" and ins[j]["op"] == "copy" for j, s in enumerate(stream)):
            errors.append("no h2d copy")

    if errors:
        for e in errors[:20]:
            print("check_streams:", e)
        print(f"check_streams: {path}: {len(errors)} violation(s)")
        return 1
    counts = {}
    for s in stream:
        counts[s] = counts.get(s, 0) + 1
    waits = sum(len(x.get("wait", [])) for x in ins)
    print(f"check_streams: {path}: ok ({n} instructions, streams {counts}, {waits} wait edges, "
          f"spaces {sorted(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
