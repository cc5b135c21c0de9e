#!/usr/bin/env bash
# --fuse-loss (bigc-fuse-loss): what the fused LM head + loss saves in the memory plan and what it
# costs in step time (docs/performance.md, "The fused LM head and loss").
#
#   bash bench/fuse_loss/run.sh [BIN]     (BIN: the directory of `bigc`, default build/bin)
#
# Plans (compile only, each with and without --fuse-loss): gpt2 bf16 at batch 16 x 1024 (the GPU
# issue's configuration) on one device, Llama-3-8B bf16 at 1 x 8192 on one device and with ZeRO 3
# + full recompute on h100-80g-x8 (the device arena per rank). Speed: the CPU backend's median step
# (steps 6-25) with and without the flag, 2 threads, fp32, the two GPTs of bench/cpu.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/build/bin}
[ -x "$BIN/bigc" ] || { echo "bench/fuse_loss/run.sh: $BIN/bigc not found (make build)" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=${PYTHON:-/usr/bin/python3}
"$BIN/bigc" gen gpt --preset gpt2 --batch 16 --seq 1024 -o "$W/gpt2.mlir" > /dev/null
"$BIN/bigc" gen llama --preset llama3-8b -o "$W/l8.mlir" > /dev/null
arena() { # model, flags...: the device arena of the plan in GiB
  local m=$1; shift
  "$BIN/bigc" compile "$W/$m.mlir" -o "$W/p.bigc" --quiet "$@"
  "$BIN/bigc" inspect "$W/p.bigc" --json | $PY -c "
import json, sys; j = json.load(sys.stdin)['spaces']['device']
print(f\"{j['arena_bytes'] / 2**30:.2f} {j['by_role'].get('workspace', 0) / 2**20:.0f}\")"
}
echo "plan                                              unfused GiB   fused GiB (workspaces MiB)   saved"
while IFS='|' read -r label m flags; do
  read -r a _ <<< "$(arena "$m" $flags)"
  read -r b ws <<< "$(arena "$m" $flags --fuse-loss)"
  $PY -c "print(f'{\"$label\":50s}{$a:10.2f}{$b:12.2f} ({$ws:.0f}){$a - $b:17.2f} GiB ({($a - $b) / $a:.0%})')"
done <<'CFG'
gpt2 bf16, 16 x 1024, one device|gpt2|--precision bf16 --device-mem 1T
gpt2 fp32, 16 x 1024, one device|gpt2|--device-mem 1T
Llama-3-8B bf16, 1 x 8192, one device|l8|--precision bf16 --device-mem 1T
Llama-3-8B bf16, 1 x 8192, h100-80g-x8 ZeRO 3 + recompute|l8|--precision bf16 --hardware h100-80g-x8 --zero 3 --recompute full
CFG
echo
echo "CPU backend, fp32, 2 threads: median step (steps 6-25)"
for cfg in "gpt-4x256-v8192:4:256:4:8192" "gpt-6x384-v50257:6:384:6:50257"; do
  IFS=: read -r name L C H V <<< "$cfg"
  "$BIN/bigc" gen gpt --layers "$L" --hidden "$C" --heads "$H" --vocab "$V" --batch 4 --seq 256 -o "$W/c.mlir" > /dev/null
  for f in "" "--fuse-loss"; do
    "$BIN/bigc" compile "$W/c.mlir" $f -o "$W/c.bigc" --quiet
    "$BIN/bigc" run "$W/c.bigc" --synthetic --threads 2 --steps 25 --log "$W/c.jsonl" --quiet
    $PY - "$W/c.jsonl" "$name" "${f:-(unfused)}" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
e = [r[i]["elapsed_s"] - r[i - 1]["elapsed_s"] for i in range(5, len(r))]
print(f"  {sys.argv[2]:18s} {sys.argv[3]:12s} {1000 * statistics.median(e):8.1f} ms   arena {r[0]['planned_bytes']['device'] / 2**20:6.0f} MiB   step-25 loss {r[-1]['loss']:.6f}")
PY
  done
done
