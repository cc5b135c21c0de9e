#!/usr/bin/env bash
# Several ranks of a program on the CUDA backend against the CPU backend: the tiny GPT (8 heads)
# compiled for 2 ranks under zero 0, 2 and 3 (and bf16 with offload; zero 3 with --tile-linear, fp32
# and bf16 with the shards on the host), and tensor-parallel as tp 2
# (with and without sequence parallelism, and bf16), tp 2 x dp 2 under zero 1 (fp32 with SP; bf16,
# whose compute copies start from sharded masters), the tiny LLaMA (4 heads, 2 kv heads) as tp 2 (kv
# heads split) and with 1 kv head as tp 2 (replicated: tp_heads), fp32 and bf16, the fused LM head and
# loss over tp 2 (and padded, bf16), pipelines (pp 2 under 1F1B; zero-bubble in bf16; pp 2 x tp 2 x
# dp 2 under ZeRO 1), and context parallelism (the tiny LLaMA's sequences over cp 2: ring in fp32, bf16
# and with activation offload, all-to-all, ring x tp 2); trained 10 steps with --backend cuda they give the CPU backend's losses (its
# in-process communicators) of the same program: fp32 to 1e-4 relative, bf16 to 1e-2. Two ways:
#   - one GPU per rank, NCCL (each rank's communicator split per mesh axis), where the machine has
#     as many GPUs as the program has ranks (16-bit sums and means through f32 copies, so NCCL
#     accumulates in f32 as the CPU rings do); the pipelines' messages in NCCL groups over each rank's pipeline communicator (the
#     order `bigc verify` proves; not yet run: the machines lent so far have one GPU);
#   - every rank on GPU 0 (--virtual-ranks: each rank its arenas and streams, the collectives through
#     the CPU backend's host communicators), on any machine with a GPU.
# The programs are compiled here, or (a build without the compiler) read from $BIGC_GPU_PROGRAMS
# (scripts/gpu-programs.sh ... ranks). Exit 77 ("skipped") without a GPU.
set -euo pipefail
BIN=$1
n=$(nvidia-smi -L 2> /dev/null | grep -c "^GPU" || true)
if [ "${n:-0}" -lt 1 ]; then
  echo "skipped: no GPU"
  exit 77
fi
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
. "$HERE/programs.shlib"
gpu_programs ranks "$d/programs"
RUN=$BIN/bigc-run
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
names=""
for f in "$P"/ranks-*.bigc; do
  name=$(basename "$f" .bigc)
  names="$names $name"
  ranks=2
  case $name in *pp2-tp2-dp2*) ranks=8 ;; *dp2* | *cp2-tp2*) ranks=4 ;; esac
  "$RUN" "$f" --backend cpu --synthetic --steps 10 --seed 7 --log "$d/$name.cpu.jsonl" --quiet
  # (--comm-timeout 60: a message or collective that never comes fails in a minute, naming the rank)
  "$RUN" "$f" --backend cuda --virtual-ranks --synthetic --steps 10 --seed 7 --comm-timeout 60 \
    --log "$d/$name.virtual.jsonl" --quiet
  if [ "$n" -ge $ranks ]; then
    "$RUN" "$f" --backend cuda --synthetic --steps 10 --seed 7 --comm-timeout 60 --log "$d/$name.nccl.jsonl" --quiet
  fi
done
[ -n "$names" ] || { echo "FAIL: no ranks-*.bigc programs in $P"; exit 1; }
$PY - "$d" $names <<'PY'
import json, os, sys
d = sys.argv[1]
ok = True
for name in sys.argv[2:]:
    tol = 1e-2 if "bf16" in name else 1e-4
    a = [json.loads(l)["loss"] for l in open(f"{d}/{name}.cpu.jsonl")]
    for way, what in (("virtual", "one GPU, virtual ranks"), ("nccl", "a GPU per rank, NCCL")):
        if not os.path.exists(f"{d}/{name}.{way}.jsonl"):
            print(f"--   {name}: {what}: not run (needs more GPUs)")
            continue
        b = [json.loads(l)["loss"] for l in open(f"{d}/{name}.{way}.jsonl")]
        r = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        good = len(a) == len(b) == 10 and r <= tol
        print(("ok   " if good else "FAIL ") + f"{name}: {what} vs the CPU backend: max relative loss difference {r:.3g} (<= {tol:g})")
        ok &= good
sys.exit(0 if ok else 1)
PY
