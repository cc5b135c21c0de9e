#!/usr/bin/env bash
# bigc import hf of the families beyond LLaMA's that map onto bigc's ops as they are, each vs
# transformers' own model (torch_reference.py) over 5 AdamW steps:
# - Gemma: the embedding scaled by sqrt(hidden), RMSNorm's (1 + w), GeGLU with GELU's tanh form
#   (bigc.geglu), one key/value head, head_dim 32 apart from hidden / heads, tied embeddings;
# - OLMo: LayerNorm without a weight or bias (non-parametric), SwiGLU, untied head;
# - OLMo 2: RMSNorm after attention and after the MLP (post-norm), and on q and k over all heads;
# - Phi-3: q, k and v sliced out of one projection (qkv_proj, grouped: 4 query heads, 2 key/value
#   heads), gate and up chunked out of one (gate_up_proj) into SwiGLU, rotary over the whole head.
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
common=(hidden_size=64 intermediate_size=128 num_hidden_layers=2 num_attention_heads=4 vocab_size=256
        max_position_embeddings=64)
make_config "$d/gemma.json" gemma "${common[@]}" num_key_value_heads=1 head_dim=32 rms_norm_eps=1e-6 \
    'hidden_activation="gelu_pytorch_tanh"'
crosscheck gemma 4 32 -- hf "$d/gemma.json" --batch 4 --seq 32 -- --hf "$d/gemma.json"
for op in bigc.geglu bigc.rmsnorm bigc.rope bigc.gqa_attention; do
  grep -q "$op " "$d/gemma.mlir" || { echo "FAIL: gemma imported without $op"; exit 1; }
done
grep -q "bigc.scale %embedding {factor = 8.0 : f64}" "$d/gemma.mlir" \
  || { echo "FAIL: Gemma's embedding is not scaled by sqrt(64) = 8"; exit 1; }

make_config "$d/olmo.json" olmo "${common[@]}" num_key_value_heads=2
crosscheck olmo 4 32 -- hf "$d/olmo.json" --batch 4 --seq 32 -- --hf "$d/olmo.json"
grep -q "bigc.layernorm " "$d/olmo.mlir" || { echo "FAIL: OLMo's norm is not a layernorm"; exit 1; }

make_config "$d/olmo2.json" olmo2 "${common[@]}" num_key_value_heads=2
crosscheck olmo2 4 32 -- hf "$d/olmo2.json" --batch 4 --seq 32 -- --hf "$d/olmo2.json"
[ "$(grep -c 'bigc.rmsnorm ' "$d/olmo2.mlir")" -ge 9 ] \
  || { echo "FAIL: OLMo 2 without its post-norms and q/k norms (9 rmsnorms)"; exit 1; }

make_config "$d/phi3.json" phi3 "${common[@]}" num_key_value_heads=2 pad_token_id=0 bos_token_id=1 eos_token_id=2
crosscheck phi3 4 32 -- hf "$d/phi3.json" --batch 4 --seq 32 -- --hf "$d/phi3.json"
for op in bigc.swiglu bigc.rope bigc.gqa_attention; do
  grep -q "$op " "$d/phi3.mlir" || { echo "FAIL: phi3 imported without $op"; exit 1; }
done
