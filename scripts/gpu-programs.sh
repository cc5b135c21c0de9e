#!/usr/bin/env bash
# Compiles the programs the GPU tests and the GPU benchmark run, into OUTDIR, so that a machine
# with a GPU but no MLIR (the runtime built with -DBIGC_ENABLE_COMPILER=OFF) can run them:
#   scripts/gpu-programs.sh build/bin OUTDIR [tiny] [ranks] [bench]
# tiny:  small GPTs in every precision and technique, and the tiny LLaMA (test/gpu/train.sh)
# ranks: multi-rank programs of the tiny GPT and LLaMA (ZeRO, tensor parallelism) for test/gpu/ranks.sh
# bench: gpt2 and gpt2-medium in bf16 for bench/gpu/run.sh (batch $BENCH_BATCH, default 16 x 1024),
#        as compiled, and with --pad-vocab 64 alone, with --fuse, with --fuse-loss, with both (the
#        loss's default chunk of columns, 4096 and 8192), and with --offload cpu
set -euo pipefail
BIN=$1
OUT=$2
shift 2
SETS=${*:-tiny ranks bench}
mkdir -p "$OUT"
c() { # name, model, options...
  local name=$1 model=$2
  shift 2
  "$BIN/bigc" compile "$OUT/$model.mlir" -o "$OUT/$name.bigc" --quiet "$@"
}
for set in $SETS; do
  case $set in
  tiny)
    # tiny: 2 layers x 64 hidden, 4 heads (head size 16); mid: head size 64 (the tensor-core tiles of
    # GPT-2), T = 160 (two and a half 64-row tiles).
    "$BIN/bigc" gen gpt --preset tiny -o "$OUT/tiny.mlir" > /dev/null
    "$BIN/bigc" gen gpt --preset tiny --layers 2 --hidden 128 --heads 2 --seq 160 --batch 2 -o "$OUT/mid.mlir" > /dev/null
    c tiny-fp32 tiny --lr 3e-3
    c tiny-fp32-clip tiny --lr 3e-3 --grad-clip 0.5
    c tiny-fp32-recompute tiny --lr 3e-3 --recompute full
    c tiny-fp32-offload tiny --lr 3e-3 --offload cpu
    c tiny-fp32-offload-params tiny --lr 3e-3 --offload cpu --offload-params host
    # The nvme space (its directory given at run time, --nvme-path): the optimizer state; with the
    # weights too and the updates in chunks of 2048 elements; bf16 with the weights there.
    c tiny-fp32-nvme tiny --lr 3e-3 --offload nvme --nvme-path /tmp
    c tiny-fp32-nvme-params-chunk tiny --lr 3e-3 --offload nvme --nvme-path /tmp --offload-params nvme --nvme-chunk 2048
    c tiny-bf16-nvme-params tiny --lr 3e-3 --precision bf16 --offload nvme --nvme-path /tmp --offload-params nvme
    c tiny-fp32-k2 tiny --lr 3e-3 --micro-batches 2
    c tiny-bf16 tiny --lr 3e-3 --precision bf16
    c tiny-bf16-offload-k2 tiny --lr 3e-3 --precision bf16 --offload cpu --micro-batches 2 --recompute selective
    c tiny-fp16 tiny --lr 3e-3 --precision fp16
    c tiny-fp16-offload tiny --lr 3e-3 --precision fp16 --offload cpu --grad-clip 1
    c tiny-fp16-overflow tiny --lr 3e-3 --precision fp16 --loss-scale 1e30
    # A vocabulary of 250 padded to 256 (--pad-vocab 64): the loss kernels' classes (row stride).
    "$BIN/bigc" gen gpt --preset tiny --vocab 250 -o "$OUT/odd.mlir" > /dev/null
    c tiny-fp32-padvocab odd --lr 3e-3 --pad-vocab 64
    c tiny-bf16-padvocab odd --lr 3e-3 --pad-vocab 64 --precision bf16
    # The fused LM head and loss (--fuse-loss: chunks of 64 of the 250 or 256 columns, the last
    # narrower or padding), GPT-2's tied head in fp32 and bf16, padded, and the LLaMA's untied one.
    c tiny-fp32-fuseloss odd --lr 3e-3 --fuse-loss
    c tiny-bf16-fuseloss odd --lr 3e-3 --fuse-loss --precision bf16
    c tiny-bf16-fuseloss-padvocab odd --lr 3e-3 --fuse-loss --pad-vocab 64 --precision bf16
    # The fused pairs (--fuse): add + layernorm, layernorm_grad + add, bias + GELU (the GEMM's
    # GELU_AUX_BIAS epilogue), GELU's gradient + bias gradient; with recompute, micro-batches and both
    # fused losses; the LLaMA's add + rmsnorm below.
    c tiny-fp32-fuse tiny --lr 3e-3 --fuse
    c tiny-bf16-fuse tiny --lr 3e-3 --fuse --precision bf16
    c tiny-fp16-fuse-recompute-k2 tiny --lr 3e-3 --fuse --precision fp16 --recompute full --micro-batches 2
    c tiny-bf16-fuse-fuseloss-padvocab odd --lr 3e-3 --fuse --fuse-loss --pad-vocab 64 --precision bf16
    c mid-fp32 mid --lr 1e-3
    c mid-bf16 mid --lr 1e-3 --precision bf16
    c mid-fp16 mid --lr 1e-3 --precision fp16
    # The LLaMA family's ops (rmsnorm, rope, swiglu, grouped-query attention: 4 heads of 16 over 2
    # kv heads), T = 64; one with a sliding window of 24 tokens and full recomputation.
    "$BIN/bigc" gen llama --preset tiny -o "$OUT/llama.mlir" > /dev/null
    "$BIN/bigc" gen llama --preset tiny --window 24 -o "$OUT/llama-window.mlir" > /dev/null
    c llama-fp32 llama --lr 3e-3
    c llama-fp32-window-recompute llama-window --lr 3e-3 --recompute full
    c llama-bf16-fuse llama --lr 3e-3 --precision bf16 --fuse
    c llama-bf16 llama --lr 3e-3 --precision bf16
    c llama-bf16-fuseloss llama --lr 3e-3 --precision bf16 --fuse-loss
    # A plan larger than any one GPU (13b in fp32: ~170 GiB of device arena).
    "$BIN/bigc" gen gpt --preset 13b -o "$OUT/big.mlir" > /dev/null
    c too-big big --device-mem 1T
    rm -f "$OUT/big.mlir"
    ;;
  ranks)
    "$BIN/bigc" gen gpt --preset tiny --heads 8 --batch 4 -o "$OUT/m.mlir" > /dev/null
    "$BIN/bigc" gen llama --preset tiny -o "$OUT/llama.mlir" > /dev/null
    "$BIN/bigc" gen llama --preset tiny --kv-heads 1 -o "$OUT/llama_kv1.mlir" > /dev/null
    c ranks-z0 m --ranks 2 --zero 0
    c ranks-z2 m --ranks 2 --zero 2
    c ranks-z3 m --ranks 2 --zero 3
    c ranks-z3-bf16-offload m --ranks 2 --zero 3 --precision bf16 --offload cpu
    # --tile-linear: the weights' row tiles gathered one by one from tile-interleaved shards (c_attn,
    # c_fc and the MLP's c_proj in 4 tiles of 12 or 16 KiB), and with the shards on the host.
    c ranks-z3-tiles m --ranks 2 --zero 3 --tile-linear 16K
    c ranks-z3-tiles-bf16-offload m --ranks 2 --zero 3 --tile-linear 16K --precision bf16 --offload cpu --offload-params host
    c ranks-tp2 m --ranks 2 --tp 2
    c ranks-tp2-sp m --ranks 2 --tp 2 --sequence-parallel
    c ranks-tp2-bf16 m --ranks 2 --tp 2 --precision bf16
    c ranks-tp2-dp2 m --ranks 4 --tp 2 --zero 1 --sequence-parallel
    c ranks-tp2-dp2-bf16 m --ranks 4 --tp 2 --zero 1 --precision bf16
    c ranks-llama-tp2 llama --ranks 2 --tp 2
    c ranks-llama-kv1-tp2 llama_kv1 --ranks 2 --tp 2
    c ranks-llama-kv1-tp2-bf16 llama_kv1 --ranks 2 --tp 2 --precision bf16
    # The fused LM head and loss over each rank's vocabulary columns (the second rank's offset), and
    # a vocabulary of 250 padded to 256 over tp 2.
    "$BIN/bigc" gen gpt --preset tiny --heads 8 --batch 4 --vocab 250 -o "$OUT/odd8.mlir" > /dev/null
    c ranks-tp2-fuseloss m --ranks 2 --tp 2 --fuse-loss
    c ranks-tp2-fuseloss-padvocab-bf16 odd8 --ranks 2 --tp 2 --fuse-loss --pad-vocab 64 --precision bf16
    c ranks-tp2-sp-fuse-bf16 m --ranks 2 --tp 2 --sequence-parallel --fuse --precision bf16
    # Pipelines (virtual ranks on one GPU; over NCCL with a GPU per rank): 1F1B, zero-bubble, with tp 2.
    c ranks-pp2 m --ranks 2 --pp 2 --micro-batches 4
    c ranks-pp2-zb-bf16 m --ranks 2 --pp 2 --micro-batches 4 --pp-schedule zero-bubble --precision bf16
    c ranks-pp2-tp2-dp2 m --ranks 8 --pp 2 --tp 2 --zero 1 --micro-batches 2
    # Context parallelism: each sequence over 2 ranks, ring (fp32, bf16, with activation offload) and
    # all-to-all, and ring with tp 2 (4 ranks).
    c ranks-llama-cp2 llama --ranks 2 --cp 2
    c ranks-llama-cp2-bf16 llama --ranks 2 --cp 2 --precision bf16
    c ranks-llama-cp2-a2a llama --ranks 2 --cp 2 --cp-kind a2a
    c ranks-llama-cp2-offact llama --ranks 2 --cp 2 --offload-activations --recompute full
    c ranks-llama-cp2-tp2 llama --ranks 4 --cp 2 --tp 2
    ;;
  bench)
    B=${BENCH_BATCH:-16}
    for p in gpt2 gpt2-medium; do
      "$BIN/bigc" gen gpt --preset $p --batch "$B" --seq 1024 -o "$OUT/$p.mlir" > /dev/null
      c "$p-bf16" "$p" --precision bf16 --lr 3e-4 --device-mem 80G
      c "$p-bf16-pad" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64
      c "$p-bf16-pad-fuse" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --fuse-loss
      c "$p-bf16-pad-fuse-all" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --fuse-loss --fuse
      c "$p-bf16-pad-fuseops" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --fuse
      for k in 4096 8192; do
        c "$p-bf16-pad-fuse-all-c$k" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --fuse-loss \
          --loss-chunk $k --fuse
      done
      c "$p-bf16-pad-offload" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --offload cpu
      # Further single-GPU configurations whose measured steps check the cost model (--recompute,
      # --micro-batches, fp32).
      c "$p-cm-bf16-recompute-full" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --recompute full
      c "$p-cm-bf16-k2" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --micro-batches 2
      if [ "$p" = gpt2 ]; then
        c "$p-cm-bf16-recompute-selective" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 \
          --recompute selective
        c "$p-cm-bf16-k4" "$p" --precision bf16 --lr 3e-4 --device-mem 80G --pad-vocab 64 --micro-batches 4
        c "$p-cm-fp32" "$p" --lr 3e-4 --device-mem 80G --pad-vocab 64
      fi
    done
    ;;
  llama-bench)
    # Llama-3.2-1B (tied embeddings, vocabulary 128,256) and TinyLlama-1.1B from their Hugging Face
    # configs (bench/gpu/configs), batch $LLAMA_BATCH (default 4) x 2048, bf16, for
    # bench/gpu/llama.sh: as compiled, with the pairs of memory-bound ops fused (--fuse), and with
    # the LM head and loss fused too (--fuse-loss, the vocabulary padded to 64).
    HERE=$(cd "$(dirname "$0")" && pwd)
    LB=${LLAMA_BATCH:-4}
    for m in llama3.2-1b tinyllama-1.1b; do
      "$BIN/bigc" import hf "$HERE/../bench/gpu/configs/$m.json" --batch "$LB" --seq 2048 -o "$OUT/$m.mlir" > /dev/null
      c "$m-bf16" "$m" --precision bf16 --lr 3e-4 --device-mem 80G
      c "$m-bf16-fuse" "$m" --precision bf16 --lr 3e-4 --device-mem 80G --fuse
      c "$m-bf16-fuse-all" "$m" --precision bf16 --lr 3e-4 --device-mem 80G --fuse --fuse-loss --pad-vocab 64
    done
    ;;
  *) echo "gpu-programs.sh: unknown set '$set' (tiny, ranks, bench, llama-bench)" >&2; exit 1 ;;
  esac
done
rm -f "$OUT"/*.mlir
ls "$OUT"
