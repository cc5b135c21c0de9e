#!/usr/bin/env python3
"""A GPU hardware profile calibrated from measured steps: what `bigc calibrate` does for the CPU
backend, for a GPU that has no compiler beside it.

  calibrate.py BASE.json OUT.json --name NAME [--description TEXT] [--host-flops F]
               --run PROFILE.log --plan PLAN.json [--run ... --plan ...]

PROFILE.log: the output of `bigc run PROGRAM.bigc --backend cuda --profile` (its per-op table: the
GPU time of each op per step). PLAN.json: `bigc inspect PROGRAM.bigc --json` of the same program
compiled with --hardware (any profile): the cost model's FLOPs and bytes per op. For each op of the
compute stream the measured time gives a rate in the cost model's own FLOPs:
  op_overhead_s   the time of an instruction the model counts no work for (reshape), per instruction
  device_flops    matmul's FLOPs over its time (less the overhead of its instructions)
  op_flops.OP     every other op's FLOPs over its time, likewise
  device_bytes_per_s  BASE's, or the fastest an op of 1% of its run or more moved its bytes, if more
An op found in several runs takes the first run's rate. The rest (memory, bandwidths, reserves) comes
from BASE.json; --host-flops sets the host's (the CPU Adam of --offload cpu) rate.
"""
import argparse
import json
import re
import sys

ROW = re.compile(r"^\s+(\S+(?: \[\S+\])?)\s+(\d+)\s+([\d.]+)\s+[\d.]+%")


def measured(path):
    """{op: (instructions, seconds per step)} of a --profile table (compute stream only)."""
    rows, inside = {}, False
    for line in open(path):
        if line.startswith("profile ("):
            if rows:
                break  # the first program's table only
            inside = True
            continue
        if not inside:
            continue
        if "slowest instructions" in line:
            break
        m = ROW.match(line)
        if m and "[" not in m.group(1):
            rows[m.group(1)] = (int(m.group(2)), float(m.group(3)) / 1e3)
    if not rows:
        sys.exit(f"calibrate.py: no profile table in {path} (bigc run ... --profile)")
    return rows


def planned(path):
    """{op: (instructions, flops, bytes)} of the compute stream from `bigc inspect --json`."""
    j = json.load(open(path))
    est = j.get("estimate")
    if not est or "ops" not in est:
        sys.exit(f"calibrate.py: {path} has no estimate.ops (compile the program with --hardware)")
    return {o["op"]: (o["count"], o["flops"], o["bytes"]) for o in est["ops"] if o["stream"] == "compute"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--name", required=True)
    ap.add_argument("--description", default="")
    ap.add_argument("--host-flops", type=float)
    ap.add_argument("--run", action="append", default=[])
    ap.add_argument("--plan", action="append", default=[])
    ap.add_argument("--source", action="append", default=[], help="a line for the profile's sources")
    a = ap.parse_args()
    if not a.run or len(a.run) != len(a.plan):
        sys.exit("calibrate.py: give --run PROFILE.log --plan PLAN.json pairs")
    pairs = [(measured(r), planned(p)) for r, p in zip(a.run, a.plan)]
    # The fixed cost of an instruction: ops the model gives no work (an alias), the least per
    # instruction among them (one preempted while the machine was busy would inflate the mean of
    # its instructions, and with it every op's share of overhead).
    overhead = None
    for meas, plan in pairs:
        for op, (n, sec) in meas.items():
            if op in plan and plan[op][1] == 0 and plan[op][2] == 0 and n > 0:
                overhead = sec / n if overhead is None else min(overhead, sec / n)
    overhead = overhead or 0.0
    rates, used = {}, {}
    for k, (meas, plan) in enumerate(pairs):
        for op, (n, sec) in meas.items():
            if op in rates or op not in plan or plan[op][1] <= 0:
                continue
            if plan[op][0] != n:
                sys.exit(f"calibrate.py: {op}: {n} instructions measured in {a.run[k]}, {plan[op][0]} planned "
                         f"in {a.plan[k]} (not the same program)")
            t = sec - n * overhead
            if t <= 0:
                continue
            rates[op] = plan[op][1] / t
            used[op] = (a.run[k], n, sec)
    # The bandwidth: at least the fastest an op of 1% of its run or more moved its bytes, so that such
    # ops are timed by their rates (the roofline takes the longer of FLOPs over rate and bytes over
    # bandwidth). (Smaller ops may be ones the backend folds into another, as a bias add into its
    # GEMM's epilogue: no bandwidth of the memory.)
    bandwidth = 0.0
    for meas, plan in pairs:
        total = sum(sec for _, sec in meas.values())
        for op, (n, sec) in meas.items():
            if op in plan and sec >= 0.01 * total and sec - n * overhead > 0:
                bandwidth = max(bandwidth, plan[op][2] / (sec - n * overhead))
    if "matmul" not in rates:
        sys.exit("calibrate.py: no matmul measured")
    prof = json.load(open(a.base))
    prof["name"] = a.name
    if a.description:
        prof["description"] = a.description
    prof["device_flops"] = float(f"{rates['matmul']:.4g}")
    prof["op_flops"] = {op: float(f"{r:.4g}") for op, r in sorted(rates.items()) if op != "matmul"}
    prof["op_overhead_s"] = float(f"{overhead:.3g}")
    prof["device_bytes_per_s"] = float(f"{max(bandwidth * 1.0001, prof.get('device_bytes_per_s', 0)):.4g}")
    if a.host_flops:
        prof["host_flops"] = a.host_flops
    src = [s for s in prof.get("sources", [])]
    src += a.source
    names = ", ".join(r.split("/")[-1] for r in a.run)
    src.append(f"device_flops, op_flops, op_overhead_s, device_bytes_per_s: bench/gpu/calibrate.py from the `bigc run "
               f"--profile` tables {names} (each op's time per step against the cost model's FLOPs: matmul "
               f"{rates['matmul'] / 1e12:.0f} TFLOP/s, an instruction {overhead * 1e6:.2f} us)")
    prof["sources"] = src
    # Rates as 7.203e+14, not 720300000000000.0.
    text = re.sub(r"(?<=: )(\d+\.\d+(?:e[+-]?\d+)?)",
                  lambda m: format(float(m.group(1)), ".4g") if not 1e-3 <= float(m.group(1)) < 1e6 else m.group(1),
                  json.dumps(prof, indent=2))
    with open(a.out, "w") as f:
        f.write(text + "\n")
    print(f"calibrate.py: {a.out}: matmul {rates['matmul'] / 1e12:.0f} TFLOP/s, {len(rates) - 1} ops, "
          f"overhead {overhead * 1e6:.2f} us")
    for op in sorted(rates, key=lambda o: -used[o][2]):
        print(f"  {op:24s} {used[op][1]:5d} x  {used[op][2] * 1e3:8.3f} ms/step  {rates[op] / 1e12:9.3f} TFLOP/s")


if __name__ == "__main__":
    main()
