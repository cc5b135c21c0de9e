#!/usr/bin/env bash
# Several ranks, measured and planned:
#  1. the tiny GPT on the CPU backend of this machine: step time and tokens/s at 1 rank (batch 4),
#     8 ranks in one process (batch 4 each: global batch 32, in-process ring communicator),
#     2 processes x 4 ranks under mpirun (MPI), and 1 rank with batch 32 (the same global batch);
#     median of steps 6..STEPS;
#  2. the plan's cost model (bigc compile --hardware, lib/analysis/StepSimulation.cpp): gpt2-xl
#     (batch 4 x seq 1024, fp16) under --zero 0..3 on v100-16g-x8 and a100-80g-x8: the estimated
#     step time and the share of each collective hidden behind compute.
# Usage: bench/ranks/run.sh [build/bin]   Environment: STEPS (30)
set -euo pipefail
BIN=${1:-build/bin}
STEPS=${STEPS:-30}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "bench/ranks on $(nproc) cores, $(date -u +%Y-%m-%d)"
"$BIN/bigc" gen gpt --preset tiny --batch 4 -o "$d/b4.mlir" > /dev/null
"$BIN/bigc" gen gpt --preset tiny --batch 32 -o "$d/b32.mlir" > /dev/null
"$BIN/bigc" compile "$d/b4.mlir" -o "$d/r1.bigc" --quiet
"$BIN/bigc" compile "$d/b32.mlir" -o "$d/r1b32.bigc" --quiet
for z in 0 3; do "$BIN/bigc" compile "$d/b4.mlir" -o "$d/r8z$z.bigc" --ranks 8 --zero $z --quiet; done
run() { "$BIN/bigc" run "$d/$1.bigc" --synthetic --steps "$STEPS" --seed 7 --log "$d/$2.jsonl" --quiet; }
run r1 r1; run r1b32 r1b32; run r8z0 r8z0; run r8z3 r8z3
if command -v mpirun > /dev/null; then
  mpirun --oversubscribe --bind-to none -np 2 "$BIN/bigc" run "$d/r8z3.bigc" --synthetic --steps "$STEPS" --seed 7 \
    --log "$d/mpi.jsonl" --quiet
fi
$PY - "$d" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
print("1. tiny GPT (2 layers, C=64, T=64) on the CPU backend, median of steps 6..N")
print("   %-44s %10s %12s %10s" % ("configuration", "step ms", "tokens/s", "final loss"))
for name, what in [("r1", "1 rank, batch 4"), ("r8z0", "8 ranks x batch 4, zero 0 (one process)"),
                   ("r8z3", "8 ranks x batch 4, zero 3 (one process)"), ("mpi", "8 ranks, zero 3, mpirun 2 x 4"),
                   ("r1b32", "1 rank, batch 32 (the same global batch)")]:
    f = f"{d}/{name}.jsonl"
    if not os.path.exists(f):
        continue
    rows = [json.loads(l) for l in open(f)]
    el = [r["elapsed_s"] for r in rows]
    dt = [b - a for a, b in zip(el, el[1:])][4:]
    ms = statistics.median(dt) * 1e3
    tok = statistics.median([r["tokens_per_s"] for r in rows[5:]])
    print("   %-44s %10.1f %12.0f %10.4f" % (what, ms, tok, rows[-1]["loss"]))
PY
echo
echo "2. gpt2-xl, batch 4 x seq 1024, fp16: the plan's estimate (bigc compile --hardware)"
"$BIN/bigc" gen gpt --preset gpt2-xl -o "$d/xl.mlir" > /dev/null
for hw in v100-16g-x8 a100-80g-x8; do
  for z in 0 1 2 3; do
    out=$("$BIN/bigc" compile "$d/xl.mlir" -o "$d/xl.bigc" --hardware $hw --zero $z --precision fp16 \
          --recompute selective 2>&1 || true)
    est=$(echo "$out" | grep "estimate" | sed 's/^ *estimate *//' || true)
    fit=$(echo "$out" | grep -q "does not fit" && echo " (does not fit)" || true)
    printf "   %-12s zero %d%s: %s\n" "$hw" $z "$fit" "${est:-$(echo "$out" | head -1 | cut -c1-150)}"
  done
done
