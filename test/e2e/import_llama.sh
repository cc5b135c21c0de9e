#!/usr/bin/env bash
# bigc import hf of a Llama with grouped-query attention (4 query heads, 2 key/value heads;
# rmsnorm, rope, gqa_attention, swiglu) and of a Llama 3 (rope_scaling "llama3": inv_freq from the
# model's buffer; the LM head tied to the embedding) vs PyTorch training the same module: 5 AdamW
# steps' losses, step-1 gradients and final weights (torch_reference.py; tolerances there).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
make_config "$d/llama.json" llama hidden_size=64 intermediate_size=128 num_hidden_layers=2 \
    num_attention_heads=4 num_key_value_heads=2 vocab_size=256 max_position_embeddings=64 \
    rope_theta=10000.0
crosscheck llama 4 32 -- hf "$d/llama.json" --batch 4 --seq 32 -- --hf "$d/llama.json"
for op in bigc.rmsnorm bigc.rope bigc.gqa_attention bigc.swiglu; do
  grep -q "$op " "$d/llama.mlir" || { echo "FAIL: Llama imported without $op"; exit 1; }
done
grep -q 'bigc.gqa_attention .*bigc.layer = 1 : i64, heads = 4 : i64, kv_heads = 2 : i64' "$d/llama.mlir" \
  || { echo "FAIL: block 1's attention is not gqa_attention of layer 1 with 4/2 heads"; exit 1; }
make_config "$d/llama3.json" llama hidden_size=64 intermediate_size=128 num_hidden_layers=2 \
    num_attention_heads=4 num_key_value_heads=2 vocab_size=256 max_position_embeddings=64 \
    tie_word_embeddings=true 'rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}'
crosscheck llama3 4 32 -- hf "$d/llama3.json" --batch 4 --seq 32 -- --hf "$d/llama3.json"
