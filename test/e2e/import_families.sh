#!/usr/bin/env bash
# bigc import hf of the families beyond LLaMA's that map onto bigc's ops as they are, each vs
# transformers' own model (torch_reference.py) over 5 AdamW steps:
# - Gemma: the embedding scaled by sqrt(hidden), RMSNorm's (1 + w), GeGLU with GELU's tanh form
#   (bigc.geglu), one key/value head, head_dim 32 apart from hidden / heads, tied embeddings;
# - OLMo: LayerNorm without a weight or bias (non-parametric), SwiGLU, untied head;
# - OLMo 2: RMSNorm after attention and after the MLP (post-norm), and on q and k over all heads;
# - Phi-3: q, k and v sliced out of one projection (qkv_proj, grouped: 4 query heads, 2 key/value
#   heads), gate and up chunked out of one (gate_up_proj) into SwiGLU, rotary over the whole head;
#   and Phi-4-mini's partial rotary (partial_rotary_factor 0.5: bigc.rope with head_dim/4 frequencies);
# - GPT-NeoX / Pythia: q, k, v interleaved per head in one projection ([H, 3, D]: split along each
#   head), parallel residual (x + attn(ln1(x)) + mlp(ln2(x))), rotary over a quarter of each head
#   (rotary_pct 0.25), exact GELU, biases, untied head;
# - Gemma 2: soft-capped attention scores and logits, alternating sliding-window and global layers,
#   grouped-query attention written out (eager: repeat_kv, matmul, tanh, softmax), four norms per
#   layer, query_pre_attn_scalar's scale. The caps are set where they bind: this model's scores are
#   about 0.02-0.1 and its logits about 0.1-0.3 at initialisation (Gemma 2's own 50 and 30 would not
#   change a number here), so a cap that was dropped or misplaced fails the comparison;
# - Mixtral: each layer's sparse MoE block (a router's top 2 of 4 experts, renormalised; SwiGLU
#   experts in Hugging Face's fused gate_up_proj / down_proj) as bigc.moe, against transformers'
#   own eager expert loop;
# - Qwen-MoE: top 2 of 6 experts not renormalised (norm_topk_prob false), plus the shared expert
#   gated by sigmoid(x w) (bigc.softcap between scales, the column spread over the row).
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

make_config "$d/phi4mini.json" phi3 "${common[@]}" num_key_value_heads=2 partial_rotary_factor=0.5 pad_token_id=0
crosscheck phi4mini 4 32 -- hf "$d/phi4mini.json" --batch 4 --seq 32 -- --hf "$d/phi4mini.json"
grep -q "bigc.rope .*head_dim = 16 : i64, inv_freq = array<f64: [^,]*, [^,]*, [^,]*, [^,]*>" "$d/phi4mini.mlir" \
  || { echo "FAIL: Phi-4-mini's rotary is not over half of each head (4 of 8 frequencies)"; exit 1; }

make_config "$d/neox.json" gpt_neox "${common[@]}" rotary_pct=0.25 use_parallel_residual=true 'hidden_act="gelu"'
crosscheck neox 4 32 -- hf "$d/neox.json" --batch 4 --seq 32 -- --hf "$d/neox.json"
grep -q "bigc.rope .*head_dim = 16 : i64, inv_freq = array<f64: [^,]*, [^,]*>" "$d/neox.mlir" \
  || { echo "FAIL: GPT-NeoX's rotary is not over a quarter of each head (2 of 8 frequencies)"; exit 1; }
grep -q "bigc.split .*axis = 3 : i64.*tensor<4x32x4x48xf32>" "$d/neox.mlir" \
  || { echo "FAIL: GPT-NeoX's q, k, v are not split within each head"; exit 1; }

make_config "$d/gemma2.json" gemma2 "${common[@]}" num_key_value_heads=2 head_dim=16 sliding_window=8 \
    query_pre_attn_scalar=24 attn_logit_softcapping=0.02 final_logit_softcapping=0.1 \
    'hidden_activation="gelu_pytorch_tanh"'
crosscheck gemma2 4 32 -- hf "$d/gemma2.json" --batch 4 --seq 32 -- --hf "$d/gemma2.json"
[ "$(grep -c 'bigc.gqa_attention .*window = 8 : i64, scale = [0-9.e-]* : f64, softcap = 0.02 : f64' "$d/gemma2.mlir")" = 1 ] &&
  [ "$(grep -c 'bigc.gqa_attention .*softcap = 0.02 : f64' "$d/gemma2.mlir")" = 2 ] \
  || { echo "FAIL: Gemma 2's attention: one sliding-window layer and one global, both soft-capped"; exit 1; }
grep -q "bigc.softcap %[a-z_0-9]* {cap = 0.1 : f64}" "$d/gemma2.mlir" \
  || { echo "FAIL: Gemma 2's logits are not soft-capped"; exit 1; }

make_config "$d/mixtral.json" mixtral "${common[@]}" num_key_value_heads=2 intermediate_size=96 num_local_experts=4 \
    num_experts_per_tok=2
crosscheck mixtral 4 32 -- hf "$d/mixtral.json" --batch 4 --seq 32 -- --hf "$d/mixtral.json"
[ "$(grep -c 'bigc.moe .*{bigc.layer = [01] : i64, top_k = 2 : i64, normalize}' "$d/mixtral.mlir")" = 2 ] \
  || { echo "FAIL: Mixtral's two MoE blocks are not bigc.moe (top 2, normalised)"; exit 1; }

make_config "$d/qmoe.json" qwen2_moe "${common[@]}" num_key_value_heads=2 num_experts=6 num_experts_per_tok=2 \
    moe_intermediate_size=48 shared_expert_intermediate_size=80 decoder_sparse_step=1 norm_topk_prob=false
crosscheck qmoe 4 32 -- hf "$d/qmoe.json" --batch 4 --seq 32 -- --hf "$d/qmoe.json"
[ "$(grep -c 'bigc.moe .*{bigc.layer = [01] : i64, top_k = 2 : i64}' "$d/qmoe.mlir")" = 2 ] \
  || { echo "FAIL: Qwen-MoE's two MoE blocks are not bigc.moe (top 2, not normalised)"; exit 1; }
