#!/usr/bin/env bash
# bigc import hf of a Llama with grouped-query attention (4 query heads, 2 key/value heads;
# rmsnorm, rope, gqa_attention, swiglu) vs PyTorch training the same module: 5 AdamW steps' losses,
# step-1 gradients and final weights (torch_reference.py; tolerances there).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
make_config "$d/llama.json" llama hidden_size=64 intermediate_size=128 num_hidden_layers=2 \
    num_attention_heads=4 num_key_value_heads=2 vocab_size=256 max_position_embeddings=64 \
    rope_theta=10000.0
crosscheck llama 4 32 -- hf "$d/llama.json" --batch 4 --seq 32 -- --hf "$d/llama.json"
