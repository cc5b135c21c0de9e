#!/usr/bin/env bash
# The cost model's time per op beside the measured one (`bigc run --profile` of a program compiled
# with --hardware), and a profile calibrated from such a run (bench/gpu/calibrate.py, as for
# hardware/h100-x1.json), on the CPU backend:
#  1. the program's estimate lists its ops (`bigc inspect --json`: estimate.ops), and the compute
#     stream's ops add up to the compute stream's time (a program of one rank: nothing else runs
#     there);
#  2. `bigc run --profile` prints each op's estimate as the program holds it, and measured/estimate;
#  3. calibrate.py turns that run into a profile whose estimate of the same program is within 10% of
#     the measured instructions (it reproduces each op's time; the rest is rounding and the ops the
#     model counts no work for);
#  4. a program of two ranks: rank 0's times and estimates, the all-reduce without an estimate (the
#     collectives are apart in the estimate).
set -euo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
"$BIN/bigc" gen gpt --preset tiny --layers 2 --hidden 128 --heads 4 --seq 128 --batch 4 -o "$d/m.mlir" > /dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --hardware cpu --quiet
"$BIN/bigc" inspect "$d/m.bigc" --json > "$d/plan.json"
"$BIN/bigc" run "$d/m.bigc" --steps 6 --synthetic --profile --threads 2 --quiet 2> "$d/profile.log"
$PY "$ROOT/bench/gpu/calibrate.py" "$ROOT/hardware/cpu.json" "$d/cal.json" --name cal --run "$d/profile.log" \
  --plan "$d/plan.json" > "$d/cal.out"
"$BIN/bigc" compile "$d/m.mlir" -o "$d/c.bigc" --hardware "$d/cal.json" > "$d/c.out"
"$BIN/bigc" compile "$d/m.mlir" -o "$d/r2.bigc" --hardware cpu --ranks 2 --quiet
"$BIN/bigc" run "$d/r2.bigc" --steps 3 --synthetic --profile --threads 2 --quiet 2> "$d/r2.log"
$PY - "$d" <<'PY'
import json, re, sys
d = sys.argv[1]
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m)
    ok &= bool(c)
est = json.load(open(f"{d}/plan.json"))["estimate"]
ops = est["ops"]
comp = sum(o["seconds"] for o in ops if o["stream"] == "compute")
check(len(ops) >= 10 and all(o["count"] > 0 for o in ops),
      f"estimate.ops: {len(ops)} ops ({', '.join(o['op'] for o in ops[:4])}, ...)")
check(abs(comp - est["compute_seconds"]) <= 1e-9 * est["compute_seconds"],
      f"the compute stream's ops add up to its time: {comp * 1e3:.6f} ms against compute_seconds {est['compute_seconds'] * 1e3:.6f} ms")
log = open(f"{d}/profile.log").read()
check("est. cpu" in log and "measured/est." in log, "`bigc run --profile` has the estimate columns")
row = re.compile(r"^  (\S+)\s+(\d+)\s+([\d.]+)\s+[\d.]+%\s+([\d.]+)\s+([\d.]+|-)$")
rows = {m.group(1): m for m in map(row.match, log.splitlines()) if m}
planned = {o["op"]: o["seconds"] for o in ops if o["stream"] == "compute"}
same = [op for op in planned if op in rows and abs(float(rows[op].group(4)) - 1e3 * planned[op]) <= 0.0005 + 1e-3 * 1e3 * planned[op]]
check(len(rows) >= 10 and len(same) == len([op for op in planned if op in rows]),
      f"each op's estimate as the program holds it ({len(same)} of {len(rows)} rows; matmul "
      f"{rows['matmul'].group(4) if 'matmul' in rows else '-'} ms, planned {1e3 * planned.get('matmul', 0):.3f})")
m = rows.get("matmul")
if m:
    ratio = float(m.group(3)) / float(m.group(4))
    check(m.group(5) != "-" and abs(float(m.group(5)) - ratio) <= 0.01 + 0.01 * ratio,
          f"matmul measured/est. {m.group(5)} (= {float(m.group(3)):.3f} / {float(m.group(4)):.3f})")
measured = float(re.search(r"instructions ([\d.]+) ms per step", log).group(1))
c = re.search(r"compute ([\d.]+) (ms|s)\)", open(f"{d}/c.out").read())
cal = float(c.group(1)) * (1e3 if c.group(2) == "s" else 1)
check(abs(cal / measured - 1) <= 0.10,
      f"a profile calibrated from the run (calibrate.py): compute {cal:.2f} ms against the measured {measured:.2f} ms "
      f"({100 * (cal / measured - 1):+.1f}%, <= 10%)")
r2 = {m.group(1): m for m in map(re.compile(r"^  (\S+(?: \[\S+\])?)\s+(\d+)\s+([\d.]+)\s+[\d.]+%\s+(\S+)\s+(\S+)$").match,
                                 open(f"{d}/r2.log").read().splitlines()) if m}
check("matmul" in r2 and r2["matmul"].group(4) == rows["matmul"].group(4) and "all_reduce [comm]" in r2
      and r2["all_reduce [comm]"].group(4) == "-",
      f"two ranks: rank 0's matmul estimate {r2['matmul'].group(4) if 'matmul' in r2 else '-'} ms (the one rank's "
      f"{rows['matmul'].group(4) if 'matmul' in rows else '-'}: data parallel, the same per-rank work); the all-reduce: -")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
