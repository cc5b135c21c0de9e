#!/usr/bin/env bash
# Several ranks on GPUs (one GPU per rank, NCCL): the tiny GPT (8 heads) compiled for 2 ranks under
# zero 0, 2 and 3 (and bf16 with offload), and tensor-parallel as tp 2 (with and without sequence
# parallelism, and bf16; each rank's NCCL communicator split per mesh axis) and, with 4 GPUs, tp 2 x
# dp 2 under zero 1 (fp32 with SP; bf16, whose compute copies start from sharded masters), trained
# 10 steps with --backend cuda gives the CPU backend's losses (its in-process communicators) of the
# same program: fp32 to 1e-4 relative, bf16 to 1e-2 (NCCL sums 16-bit gradients in their dtype, the
# CPU rings in f32). The tiny LLaMA (4 heads, 2 kv heads) as tp 2 (kv heads split) and with 1 kv
# head as tp 2 (replicated: tp_heads, each rank's query heads from head offset 2 * rank), fp32 and
# bf16. Needs 2 GPUs: exit 77 ("skipped") otherwise.
set -euo pipefail
BIN=$1
n=$(nvidia-smi -L 2> /dev/null | grep -c "^GPU" || true)
if [ "${n:-0}" -lt 2 ]; then
  echo "skipped: needs 2 GPUs (found ${n:-0})"
  exit 77
fi
if [ ! -x "$BIN/bigc" ]; then
  echo "skipped: this build has no compiler (the programs are compiled here)"
  exit 77
fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
"$BIN/bigc" gen gpt --preset tiny --heads 8 --batch 4 -o "$d/m.mlir" > /dev/null
"$BIN/bigc" gen llama --preset tiny -o "$d/llama.mlir" > /dev/null
"$BIN/bigc" gen llama --preset tiny --kv-heads 1 -o "$d/llama_kv1.mlir" > /dev/null
cfgs=("z0:--ranks 2 --zero 0" "z2:--ranks 2 --zero 2" "z3:--ranks 2 --zero 3"
      "bf16:--ranks 2 --zero 3 --precision bf16 --offload cpu"
      "tp2:--ranks 2 --tp 2" "tp2_sp:--ranks 2 --tp 2 --sequence-parallel" "tp2_bf16:--ranks 2 --tp 2 --precision bf16"
      "llama_tp2:--ranks 2 --tp 2" "llama_kv1_tp2:--ranks 2 --tp 2" "llama_kv1_tp2_bf16:--ranks 2 --tp 2 --precision bf16")
[ "$n" -ge 4 ] && cfgs+=("tp2_dp2:--ranks 4 --tp 2 --zero 1 --sequence-parallel" "tp2_dp2_bf16:--ranks 4 --tp 2 --zero 1 --precision bf16")
names=""
for cfg in "${cfgs[@]}"; do
  name=${cfg%%:*}
  names="$names $name"
  model=$d/m.mlir
  case $name in
  llama_kv1*) model=$d/llama_kv1.mlir ;;
  llama*) model=$d/llama.mlir ;;
  esac
  "$BIN/bigc" compile "$model" -o "$d/$name.bigc" ${cfg#*:} --quiet
  for b in cpu cuda; do
    "$BIN/bigc" run "$d/$name.bigc" --backend $b --synthetic --steps 10 --seed 7 --log "$d/$name.$b.jsonl" --quiet
  done
done
$PY - "$d" $names <<'PY'
import json, sys
d = sys.argv[1]
ok = True
for name in sys.argv[2:]:
    tol = 1e-2 if "bf16" in name else 1e-4
    a = [json.loads(l)["loss"] for l in open(f"{d}/{name}.cpu.jsonl")]
    b = [json.loads(l)["loss"] for l in open(f"{d}/{name}.cuda.jsonl")]
    r = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    good = len(a) == len(b) == 10 and r <= tol
    print(("ok   " if good else "FAIL ") + f"{name}: GPUs (NCCL) vs CPU backend: max relative loss difference {r:.3g} (<= {tol:g})")
    ok &= good
sys.exit(0 if ok else 1)
PY
