#!/usr/bin/env bash
# One GPU, in one run: bigc (CUDA backend) and Hugging Face's LlamaForCausalLM (SDPA; eager and
# torch.compile; fused AdamW) train Llama-3.2-1B (tied embeddings, vocabulary 128,256) and
# TinyLlama-1.1B in bf16 from the same configs (bench/gpu/configs), batch x 2048 tokens, the same
# AdamW and precision (fp32 master weights and AdamW states, bf16 compute; torch_llama.py). Prints
# tokens/s, MFU, the peak memory allocated (bigc: its planned arena and workspace; PyTorch:
# max_memory_allocated) and the GPU memory in use, and bigc's speed against each peer (the fastest
# of bigc's programs: as compiled, with --fuse, with --fuse --fuse-loss --pad-vocab 64). The bar
# (issue 45): >= 1.0x torch.compile on both.
#
#   bash scripts/gpu-programs.sh build/bin PROGRAMS llama-bench     # where the compiler is
#   bash bench/gpu/llama.sh BIN PROGRAMS                             # on the GPU machine
# Environment: MODELS ("llama3.2-1b tinyllama-1.1b"), STEPS (20), WARMUP (5), LLAMA_BATCH (4, must
# match the programs), PEAK_FLOPS (989e12: dense bf16 of an H100/H200 SXM), MODES ("eager compile"),
# OUT_DIR (the logs and gpu_llama.jsonl; default a temporary directory).
set -euo pipefail
BIN=$1
P=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS:-"llama3.2-1b tinyllama-1.1b"}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
B=${LLAMA_BATCH:-4}
PEAK=${PEAK_FLOPS:-989e12}
MODES=${MODES:-"eager compile"}
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
RES=$OUT/gpu_llama.jsonl
: > "$RES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for m in $MODELS; do
  read -r L C < <("$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))
print(c["num_hidden_layers"], c["hidden_size"])' "$HERE/configs/$m.json")
  for v in bf16 bf16-fuse bf16-fuse-all; do
    prog=$P/$m-$v.bigc
    [ -e "$prog" ] || continue
    echo "== bigc $m ($v)" >&2
    "$BIN/bigc-run" "$prog" --backend cuda --synthetic --steps $((STEPS + WARMUP)) --log "$OUT/$m.$v.bigc.jsonl" \
      > "$OUT/$m.$v.bigc.out" 2>&1 || { cat "$OUT/$m.$v.bigc.out"; exit 1; }
    tail -n 3 "$OUT/$m.$v.bigc.out" >&2
    impl=$(case $v in bf16) echo "bigc" ;; bf16-fuse) echo "bigc --fuse" ;;
      bf16-fuse-all) echo "bigc --fuse --fuse-loss --pad-vocab 64" ;; esac)
    "$PY" "$HERE/bench_rows.py" bigc "$OUT/$m.$v.bigc.jsonl" "$OUT/$m.$v.bigc.out" --preset "$m" --impl "$impl" \
      --batch "$B" --seq 2048 --layers "$L" --hidden "$C" --warmup "$WARMUP" --peak-flops "$PEAK" >> "$RES"
  done
  for mode in $MODES; do
    echo "== pytorch $mode $m" >&2
    "$PY" "$HERE/torch_llama.py" --config "$HERE/configs/$m.json" --batch "$B" --seq 2048 --mode "$mode" \
      --steps "$STEPS" --warmup "$WARMUP" --peak-flops "$PEAK" 2> "$OUT/$m.torch-$mode.err" | tail -n 1 >> "$RES" ||
      { tail -20 "$OUT/$m.torch-$mode.err"; exit 1; }
  done
done
"$PY" "$HERE/bench_rows.py" table "$RES"
