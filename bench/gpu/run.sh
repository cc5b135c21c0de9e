#!/usr/bin/env bash
# One GPU, in one run: bigc (CUDA backend) and PyTorch (eager and torch.compile) train gpt2 (124M)
# and gpt2-medium (350M) in bf16 with the same model, batch, sequence length, AdamW and precision
# (fp32 master weights and AdamW states, bf16 compute; see torch_gpt2.py). Prints tokens/s, MFU,
# the peak memory allocated (bigc: its planned arena and workspace; PyTorch: max_memory_allocated)
# and the GPU memory in use (measured, the CUDA context included) of each, and bigc's speed against
# each peer (the fastest of bigc's programs that scripts/gpu-programs.sh wrote: as compiled, and
# with --pad-vocab 64 alone, with --fuse, with --fuse-loss, with both at three chunk widths of the
# loss), and --offload cpu's speed against the same program without it.
#
#   bash bench/gpu/run.sh BIN PROGRAMS      # BIN: bigc-run's dir; PROGRAMS: scripts/gpu-programs.sh ... bench
# Environment: PRESETS ("gpt2 gpt2-medium"), STEPS (20), WARMUP (5), BENCH_BATCH (16, must match the
# programs), PEAK_FLOPS (989e12: dense bf16 of an H100/H200 SXM), MODES ("eager compile").
set -euo pipefail
BIN=$1
P=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PRESETS=${PRESETS:-"gpt2 gpt2-medium"}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
B=${BENCH_BATCH:-16}
PEAK=${PEAK_FLOPS:-989e12}
MODES=${MODES:-"eager compile"}
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
RES=$OUT/gpu_bench.jsonl
: > "$RES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for p in $PRESETS; do
  # The program as compiled plainly, and (where scripts/gpu-programs.sh wrote it) with the vocabulary
  # padded to a multiple of 64 (--pad-vocab 64: the LM head's GEMMs without staging), and padded with
  # the LM head and loss fused (--fuse-loss: the logits never stored), and with the pairs of
  # memory-bound ops fused too (--fuse).
  for v in bf16 bf16-pad bf16-pad-fuseops bf16-pad-fuse bf16-pad-fuse-all bf16-pad-fuse-all-c4096 \
    bf16-pad-fuse-all-c8192 bf16-pad-offload; do
    prog=$P/$p-$v.bigc
    [ -e "$prog" ] || continue
    echo "== bigc $p ($v)" >&2
    "$BIN/bigc-run" "$prog" --backend cuda --synthetic --steps $((STEPS + WARMUP)) --log "$OUT/$p.$v.bigc.jsonl" \
      > "$OUT/$p.$v.bigc.out" 2>&1 || { cat "$OUT/$p.$v.bigc.out"; exit 1; }
    tail -n 3 "$OUT/$p.$v.bigc.out" >&2
    case $v in
    bf16) impl="bigc" ;;
    bf16-pad) impl="bigc --pad-vocab 64" ;;
    bf16-pad-fuseops) impl="bigc --pad-vocab 64 --fuse" ;;
    bf16-pad-fuse) impl="bigc --pad-vocab 64 --fuse-loss" ;;
    bf16-pad-fuse-all) impl="bigc --pad-vocab 64 --fuse-loss --fuse" ;;
    bf16-pad-fuse-all-c4096) impl="bigc --pad-vocab 64 --fuse-loss --loss-chunk 4096 --fuse" ;;
    bf16-pad-fuse-all-c8192) impl="bigc --pad-vocab 64 --fuse-loss --loss-chunk 8192 --fuse" ;;
    bf16-pad-offload) impl="bigc --pad-vocab 64 --offload cpu" ;;
    esac
    case $p in gpt2) L=12 C=768 ;; gpt2-medium) L=24 C=1024 ;; gpt2-large) L=36 C=1280 ;; esac
    "$PY" "$HERE/bench_rows.py" bigc "$OUT/$p.$v.bigc.jsonl" "$OUT/$p.$v.bigc.out" --preset "$p" --impl "$impl" \
      --batch "$B" --seq 1024 --layers "$L" --hidden "$C" --warmup "$WARMUP" --peak-flops "$PEAK" >> "$RES"
  done
  for m in $MODES; do
    echo "== pytorch $m $p" >&2
    "$PY" "$HERE/torch_gpt2.py" --preset "$p" --batch "$B" --seq 1024 --mode "$m" --steps "$STEPS" --warmup "$WARMUP" \
      --peak-flops "$PEAK" 2> "$OUT/$p.torch-$m.err" | tail -n 1 >> "$RES" || { tail -20 "$OUT/$p.torch-$m.err"; exit 1; }
  done
done
"$PY" "$HERE/bench_rows.py" table "$RES"
