#!/usr/bin/env bash
# Pipeline parallelism on the cost model and on the CPU backend (docs/performance.md, "Pipeline").
#  1. The bubble at p = 8, m = 16 for each schedule (gpipe, 1f1b, zero-bubble, interleaved with 2
#     chunks per stage) on bigc's simulation of every stage together (bigc inspect's estimate),
#     against the formulas: GPipe and 1F1B (p-1)/m, ZB-H1 about (p-1)/(3m), interleaved
#     (p-1)/(v m). Model: a 24-block GPT 1024 wide (gpt2-medium's shape),
#     batch 1 x 1024 per micro-batch, bf16, on h100-80g-x8 and on cpu.
#  2. Measured on the CPU backend: pp 2 on 2 ranks (one core each) with 8 micro-batches, each
#     schedule: `bigc run --profile`'s measured bubble (each stage's compute stream against the
#     step's wall time) beside the cost model's for the same program.
#  3. The best plan with pp in the search: MODELS on HARDWARE with 8 ranks, meshes tp x pp x dp
#     (8x1x1, 4x2x1, 2x4x1, 1x8x1, 2x2x2, 1x4x2, 1x1x8), ZeRO 1, bf16, --recompute auto, a global batch of 16 sequences
#     (micro-batches of one sequence), 1F1B, zero-bubble and interleaved (2 chunks): the
#     estimated step, the device memory of the fullest stage, whether it fits, and the fastest
#     plan that fits.
# Usage: bench/pipeline/run.sh [build/bin]   (MODELS="gpt2-xl" HARDWARE="a100-80g-x8 h100-80g-x8";
# MODELS="gpt2-xl 13b" adds 13b, whose plans of 16 micro-batches take minutes each to compile here)
set -euo pipefail
BIN=${1:-build/bin}
MODELS=${MODELS:-"gpt2-xl"}
HARDWARE=${HARDWARE:-"a100-80g-x8 h100-80g-x8"}
PY=/usr/bin/python3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
json() { "$BIN/bigc" inspect "$1" --json; }

echo "## 1. Bubble at p = 8, m = 16 (cost model)"
echo
echo "| hardware | schedule | step | bubble (idle / busy) | formula | stage 0 device arena |"
echo "|---|---|---:|---:|---:|---:|"
"$BIN/bigc" gen gpt --layers 24 --hidden 1024 --heads 16 --vocab 50304 --seq 1024 --batch 1 -o "$d/m24.mlir" > /dev/null
for hw in h100-80g-x8 cpu; do
  for sch in gpipe 1f1b zero-bubble interleaved; do
    echo "[1] $hw $sch ..." >&2
    "$BIN/bigc" compile "$d/m24.mlir" -o "$d/p.bigc" --hardware $hw --device-mem 64T --host-mem 64T --ranks 8 --pp 8 \
      --micro-batches 16 --pp-schedule $sch --precision bf16 --quiet
    json "$d/p.bigc" | $PY -c "
import json, sys
j = json.load(sys.stdin); e = j['pipeline']['estimate']; p, m = 8, 16
f = {'gpipe': (p - 1) / m, '1f1b': (p - 1) / m, 'zero-bubble': (p - 1) / (3 * m), 'interleaved': (p - 1) / (2 * m)}['$sch']
a = j['pipeline']['per_stage'][0]['arena_bytes']['device']
print(f'| $hw | $sch | {e[\"step_seconds\"] * 1e3:.2f} ms | {e[\"bubble\"]:.3f} | {f:.3f} | {a / 2**30:.2f} GiB |')"
  done
done
echo

echo "## 2. Measured on the CPU backend (pp 2, 2 ranks, 8 micro-batches)"
echo
echo "| schedule | measured step | measured bubble | cost model bubble (cpu) |"
echo "|---|---:|---:|---:|"
"$BIN/bigc" gen gpt --preset tiny --layers 8 --heads 8 --hidden 128 --batch 4 -o "$d/m8.mlir" > /dev/null
for sch in gpipe 1f1b zero-bubble interleaved; do
  echo "[2] $sch ..." >&2
  "$BIN/bigc" compile "$d/m8.mlir" -o "$d/c.bigc" --ranks 2 --pp 2 --micro-batches 8 --pp-schedule $sch --quiet
  "$BIN/bigc" run "$d/c.bigc" --synthetic --steps 12 --quiet --profile 2> "$d/prof.txt"
  $PY - "$d/prof.txt" "$sch" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"per step of ([0-9.]+) ms: bubble ([0-9.]+) of the busy time \(cost model on cpu: ([0-9.]+)\)", t)
print(f"| {sys.argv[2]} | {m.group(1)} ms | {m.group(2)} | {m.group(3)} |" if m else f"| {sys.argv[2]} | (no profile line) | | |")
PY
done
echo

echo "## 3. Plans of 8 ranks with pp in the search (global batch 16 sequences, ZeRO 1, bf16, --recompute auto)"
echo
echo "| model | hardware | tp x pp x dp | schedule | micro-batches | step (est.) | bubble | fullest stage device | fits |"
echo "|---|---|---|---|---:|---:|---:|---:|---|"
for m in $MODELS; do
  "$BIN/bigc" gen gpt --preset "$m" --vocab 50304 --batch 1 -o "$d/$m.mlir" > /dev/null
  for hw in $HARDWARE; do
    best=
    for mesh in "8 1" "4 2" "2 4" "1 8" "2 2" "1 4" "1 1"; do
      set -- $mesh
      tp=$1 pp=$2 dp=$((8 / ($1 * $2))) k=$((16 / (8 / ($1 * $2))))
      for sch in 1f1b zero-bubble interleaved; do
        [ "$pp" = 1 ] && [ "$sch" != 1f1b ] && continue
        echo "[3] $m $hw tp $tp pp $pp dp $dp $sch ..." >&2
        opts=(--ranks 8 --tp $tp --zero 1 --micro-batches $k --precision bf16 --recompute auto)
        [ "$pp" -gt 1 ] && opts+=(--pp $pp --pp-schedule $sch)
        if ! "$BIN/bigc" compile "$d/$m.mlir" -o "$d/q.bigc" --hardware "$hw" "${opts[@]}" --quiet 2> "$d/err"; then
          why=$(grep -m1 -oE "(does not fit[^;(]*|has [0-9]+ heads[^;(]*|does not divide[^;(]*)" "$d/err" | head -c 80 || true)
          label=${sch/1f1b/1F1B}; [ "$pp" = 1 ] && label=-
          echo "| $m | $hw | $tp x $pp x $dp | $label | $k | - | - | - | no${why:+: $why} |"
          continue
        fi
        json "$d/q.bigc" > "$d/q.json"
        row=$($PY - "$d/q.json" "$m" "$hw" "$tp x $pp x $dp" "$sch" "$k" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); m, hw, mesh, sch, k = sys.argv[2:7]
pl = j.get("pipeline")
step = (pl["estimate"]["step_seconds"] if pl else j["estimate"]["step_seconds"]) * 1e3
bub = f'{pl["estimate"]["bubble"]:.3f}' if pl else "-"
dev = max(s["arena_bytes"]["device"] for s in pl["per_stage"]) if pl else j["spaces"]["device"]["arena_bytes"]
sch = "-" if not pl else ("1F1B" if sch == "1f1b" else sch)
print(f"| {m} | {hw} | {mesh} | {sch} | {k} | {step:.0f} ms | {bub} | {dev / 2**30:.1f} GiB | yes |")
PY
)
        echo "$row"
        s=$(echo "$row" | awk -F'|' '{print $7}' | tr -dc '0-9')
        label=${sch/1f1b/1F1B}; [ "$pp" = 1 ] && label="(no pipeline)"
        if [ -z "$best" ] || [ "$s" -lt "${best%% *}" ]; then best="$s $tp x $pp x $dp $label"; fi
      done
    done
    echo "| $m | $hw | **fastest that fits: ${best#* }** | | | **${best%% *} ms** | | | |"
  done
done
