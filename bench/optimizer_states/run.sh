#!/usr/bin/env bash
# bf16 AdamW moments (--optimizer-states bf16) against fp32 ones (docs/performance.md):
#  1. The loss curve: the tiny GPT and a 4-layer 256-wide GPT (vocabulary 8192, batch 4 x 128),
#     500 steps of synthetic data each way (same seed): the largest relative difference of the
#     losses, and of the mean of the last 50.
#  2. Bytes: the optimizer state per parameter, and the host arena per parameter with --offload
#     cpu (bf16 weights: fp32 master + moments + transfer buffers) for gpt2-medium, each way.
#  3. Capacity: the largest GPT 1600 wide (gpt2-xl's width, more layers) that one V100-16G with
#     its profile's 61 GiB of host memory (v100-16g-x1) trains with --offload cpu --precision bf16
#     --recompute full, each way (bisection over the layers; host memory decides).
# Usage: bench/optimizer_states/run.sh [build/bin]    (about 15 minutes on 2 cores; PARTS="3" runs
# only part 3, and so on)
set -euo pipefail
BIN=${1:-build/bin}
PY=/usr/bin/python3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PARTS=${PARTS:-"1 2 3"}
part() { [[ " $PARTS " == *" $1 "* ]]; }

if part 1; then
echo "## 1. Loss over 500 steps, fp32 vs bf16 moments"
echo
echo "| model | final loss fp32 | final loss bf16 | largest relative difference | last-50 mean difference |"
echo "|---|---:|---:|---:|---:|"
"$BIN/bigc" gen gpt --preset tiny --batch 4 -o "$d/tiny.mlir" > /dev/null
"$BIN/bigc" gen gpt --layers 4 --hidden 256 --heads 4 --vocab 8192 --seq 128 --batch 4 -o "$d/w256.mlir" > /dev/null
for m in tiny w256; do
  for s in fp32 bf16; do
    echo "[1] $m $s ..." >&2
    "$BIN/bigc" compile "$d/$m.mlir" -o "$d/$m.$s.bigc" --optimizer-states $s --lr 1e-3 --quiet
    "$BIN/bigc" run "$d/$m.$s.bigc" --synthetic --steps 500 --seed 3 --log "$d/$m.$s.jsonl" --quiet
  done
  $PY - "$d" "$m" <<'PY'
import json, sys
d, m = sys.argv[1:]
a = [json.loads(l)["loss"] for l in open(f"{d}/{m}.fp32.jsonl")]
b = [json.loads(l)["loss"] for l in open(f"{d}/{m}.bf16.jsonl")]
r = max(abs(x - y) / x for x, y in zip(a, b))
ma, mb = sum(a[-50:]) / 50, sum(b[-50:]) / 50
name = {"tiny": "tiny (2 layers, 64 wide)", "w256": "4 layers, 256 wide, vocab 8192"}[m]
print(f"| {name} | {a[-1]:.4f} | {b[-1]:.4f} | {r:.2e} | {abs(ma - mb) / ma:.2e} |")
PY
done
echo
fi

if part 2; then
echo "## 2. Bytes per parameter (gpt2-medium, batch 1 x 1024)"
echo
echo "| states | optimizer bytes / param | host arena / param (--offload cpu, bf16) |"
echo "|---|---:|---:|"
"$BIN/bigc" gen gpt --preset gpt2-medium --batch 1 -o "$d/med.mlir" > /dev/null
for s in fp32 bf16; do
  echo "[2] $s ..." >&2
  "$BIN/bigc" compile "$d/med.mlir" -o "$d/med.$s.bigc" --optimizer-states $s --device-mem 64T --quiet
  "$BIN/bigc" compile "$d/med.mlir" -o "$d/medo.$s.bigc" --optimizer-states $s --offload cpu --precision bf16 \
    --device-mem 64T --host-mem 64T --quiet
  $PY - "$d" "$s" "$BIN" <<'PY'
import json, subprocess, sys
d, s, b = sys.argv[1:]
j = json.loads(subprocess.run([f"{b}/bigc", "inspect", f"{d}/med.{s}.bigc", "--json"], capture_output=True, text=True).stdout)
o = json.loads(subprocess.run([f"{b}/bigc", "inspect", f"{d}/medo.{s}.bigc", "--json"], capture_output=True, text=True).stdout)
n = j["parameters"]
opt = j["spaces"]["device"]["by_role"].get("optimizer", 0)
host = o["spaces"]["host"]["arena_bytes"]
print(f"| {s} | {opt / n:.2f} | {host / n:.2f} |")
PY
done
echo
fi

if part 3; then
echo "## 3. The largest GPT 1600 wide on one V100-16G (61 GiB host) with offload (bf16, recompute full)"
echo
echo "| states | layers | parameters | device | host |"
echo "|---|---:|---:|---:|---:|"
for s in fp32 bf16; do
  lo=1 hi=320
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(((lo + hi) / 2))
    echo "[3] $s $mid layers ..." >&2
    "$BIN/bigc" gen gpt --layers $mid --hidden 1600 --heads 25 --vocab 50304 --seq 1024 --batch 1 -o "$d/c.mlir" > /dev/null
    if BIGC_FIT_CANDIDATES=0 "$BIN/bigc" compile "$d/c.mlir" -o "$d/c.bigc" --hardware v100-16g-x1 --optimizer-states $s \
      --offload cpu --precision bf16 --recompute full --quiet 2> /dev/null; then lo=$mid; else hi=$mid; fi
  done
  "$BIN/bigc" gen gpt --layers $lo --hidden 1600 --heads 25 --vocab 50304 --seq 1024 --batch 1 -o "$d/c.mlir" > /dev/null
  BIGC_FIT_CANDIDATES=0 "$BIN/bigc" compile "$d/c.mlir" -o "$d/c.bigc" --hardware v100-16g-x1 --optimizer-states $s \
    --offload cpu --precision bf16 --recompute full --quiet
  "$BIN/bigc" inspect "$d/c.bigc" --json | $PY -c "
import json, sys
j = json.load(sys.stdin)
sp = {k: v['arena_bytes'] for k, v in j['spaces'].items()}
print(f'| $s | $lo | {j[\"parameters\"] / 1e9:.2f} B | {sp[\"device\"] / 2**30:.2f} GiB | {sp.get(\"host\", 0) / 2**30:.1f} GiB |')"
done
fi
