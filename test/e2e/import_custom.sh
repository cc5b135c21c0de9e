#!/usr/bin/env bash
# bigc import torch of a hand-written LLaMA-like module (test/e2e/import_custom_model.py: written-out
# RMSNorm, rotary tables from buffers, enable_gqa and repeat_interleave attention, SiLU gating,
# LayerNorm without bias, x @ W head, module(tokens) -> logits) vs PyTorch (torch_reference.py).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
M="$HERE/import_custom_model.py"
crosscheck gqa 4 32 -- torch "$M:gqa" -- --torch "$M:gqa"
crosscheck rep 4 32 -- torch "$M:rep" -- --torch "$M:rep"
for m in gqa rep; do
  for op in bigc.rmsnorm bigc.rope bigc.gqa_attention bigc.swiglu bigc.layernorm; do
    grep -q "$op " "$d/$m.mlir" || { echo "FAIL: $m imported without $op"; exit 1; }
  done
done
