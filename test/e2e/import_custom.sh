#!/usr/bin/env bash
# bigc import torch of a hand-written LLaMA-like module (test/e2e/import_custom_model.py: written-out
# RMSNorm, rotary tables from buffers, enable_gqa and repeat_interleave attention, SiLU gating (and
# GELU gating: bigc.geglu), attention written out as minGPT and llama2.c write it, and llama2.c's
# rotary embeddings of interleaved pairs, Meta's llama's complex rotary and KV cache;
# LayerNorm without bias, x @ W head, module(tokens) -> logits) vs PyTorch (torch_reference.py).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
M="$HERE/import_custom_model.py"
crosscheck gqa 4 32 -- torch "$M:gqa" -- --torch "$M:gqa"
crosscheck rep 4 32 -- torch "$M:rep" -- --torch "$M:rep"
crosscheck geglu 4 32 -- torch "$M:geglu" -- --torch "$M:geglu"
# Attention written out (minGPT's masked_fill, llama2.c's added mask): bigc's attention.
crosscheck masked 4 32 -- torch "$M:masked" -- --torch "$M:masked"
crosscheck additive 4 32 -- torch "$M:additive" -- --torch "$M:additive"
# llama2.c's manner: rotary embeddings of interleaved pairs (bigc.rope interleaved), the loss kept in
# self.last_loss.
crosscheck llama2c 4 32 -- torch "$M:llama2c" -- --torch "$M:llama2c"
grep -q "bigc.rope .*interleaved}" "$d/llama2c.mlir" || { echo "FAIL: llama2c: no interleaved bigc.rope"; exit 1; }
# Meta's llama's manner: complex rotary (view_as_complex * freqs_cis), a KV cache written and read
# back, repeat_kv by expand, the triu/hstack mask, an inference_mode forward called through __wrapped__.
crosscheck meta 4 32 -- torch "$M:meta" -- --torch "$M:meta"
[ "$(grep -c "bigc.rope .*interleaved}" "$d/meta.mlir")" = 4 ] && [ "$(grep -c "bigc.gqa_attention .*kv_heads = 2" "$d/meta.mlir")" = 2 ] \
  || { echo "FAIL: meta: q and k of each layer not rotated as interleaved pairs, or attention not grouped"; exit 1; }
for m in masked additive; do
  grep -q "bigc.attention " "$d/$m.mlir" || { echo "FAIL: $m: the written-out attention is not bigc.attention"; exit 1; }
done
for m in gqa rep geglu; do
  act=bigc.swiglu
  [ $m = geglu ] && act=bigc.geglu
  for op in bigc.rmsnorm bigc.rope bigc.gqa_attention $act bigc.layernorm; do
    grep -q "$op " "$d/$m.mlir" || { echo "FAIL: $m imported without $op"; exit 1; }
  done
done
