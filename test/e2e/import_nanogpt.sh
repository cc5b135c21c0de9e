#!/usr/bin/env bash
# bigc import torch of a nanoGPT-style module (test/e2e/import_nanogpt_model.py: nn.Linear layers,
# packed c_attn split into q, k, v, F.scaled_dot_product_attention(is_causal=True), nn.GELU(),
# a tied LM head, positions 0..T-1 of a longer table; forward returns (logits, loss)) and of the
# same model as module(tokens) -> logits (the importer adds the cross-entropy) vs PyTorch
# (torch_reference.py).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
M="$HERE/import_nanogpt_model.py"
crosscheck nanogpt 4 32 -- torch "$M:make" -- --torch "$M:make"
# The same model with its loss as F.linear_cross_entropy in PyTorch's batch chunks (imported as the
# head's matmul and the cross-entropy), compiled with the LM head and loss fused (--fuse-loss,
# chunks of 100 of the 256 columns): the same bounds against PyTorch's chunked step.
COMPILE_FLAGS="--fuse-loss --loss-chunk 100" crosscheck chunked 4 32 -- torch "$M:make_chunked" -- --torch "$M:make_chunked"
grep -q 'approximate = "none"' "$d/nanogpt.mlir" || { echo "FAIL: nn.GELU() is not gelu's exact form"; exit 1; }
grep -q "bigc.attention " "$d/nanogpt.mlir" || { echo "FAIL: the packed q, k, v are not bigc.attention"; exit 1; }
grep -q 'loc(".*import_nanogpt_model.py":[0-9]*:0)' "$d/nanogpt.mlir" || { echo "FAIL: no source locations"; exit 1; }
crosscheck logits 4 32 -- torch "$M:make_logits" -- --torch "$M:make_logits"
