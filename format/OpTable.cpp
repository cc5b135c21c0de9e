// The instruction set in one table (include/bigc/Format/ops.h). No MLIR here.
#include "bigc/Format/ops.h"

namespace bigc::format {

const std::vector<OpSignature> &opSignatures() {
  // name, kind, minIn, maxIn, minOut, maxOut, i32 inputs (bits), in place
  static const std::vector<OpSignature> table = {
      {"embedding", OpKind::Embedding, 2, 2, 1, 1, 0b10, false},
      {"embedding_grad", OpKind::EmbeddingGrad, 2, 2, 1, 1, 0b10, false},
      {"matmul", OpKind::Matmul, 2, 2, 1, 1, 0, false},
      {"add", OpKind::Add, 2, 2, 1, 1, 0, true},
      {"bias_add", OpKind::BiasAdd, 2, 2, 1, 1, 0, true},
      {"mul", OpKind::Mul, 2, 2, 1, 1, 0, true},
      {"scale", OpKind::Scale, 1, 1, 1, 1, 0, true},
      {"reduce_sum", OpKind::ReduceSum, 1, 1, 1, 1, 0, false},
      {"fill", OpKind::Fill, 0, 0, 1, 1, 0, false},
      {"layernorm", OpKind::Layernorm, 3, 3, 3, 3, 0, false},
      {"layernorm_grad", OpKind::LayernormGrad, 5, 5, 3, 3, 0, false},
      {"gelu", OpKind::Gelu, 1, 1, 1, 1, 0, true},
      {"gelu_grad", OpKind::GeluGrad, 2, 2, 1, 1, 0, true},
      {"attention", OpKind::Attention, 1, 1, 2, 2, 0, false},
      {"attention_grad", OpKind::AttentionGrad, 4, 4, 1, 1, 0, false},
      {"transpose", OpKind::Transpose, 1, 1, 1, 1, 0, false},
      {"reshape", OpKind::Reshape, 1, 1, 1, 1, 0, true},
      {"split", OpKind::Split, 1, 1, 1, -1, 0, false},
      {"concat", OpKind::Concat, 1, -1, 1, 1, 0, false},
      {"cross_entropy", OpKind::CrossEntropy, 2, 2, 1, 1, 0b10, false},
      {"cross_entropy_grad", OpKind::CrossEntropyGrad, 3, 3, 1, 1, 0b10, true},
      {"global_norm", OpKind::GlobalNorm, 1, -1, 1, 1, 0, false},
      {"adamw", OpKind::AdamW, 4, 7, 3, 4, 0, false},
      {"cast", OpKind::Cast, 1, 1, 1, 1, 0, false},
      {"copy", OpKind::Copy, 1, 1, 1, 1, 0, false},
      {"wait", OpKind::Wait, 0, 0, 0, 0, 0, false},
      {"check_finite", OpKind::CheckFinite, 1, -1, 1, 1, 0, false},
      {"loss_scale_update", OpKind::LossScaleUpdate, 3, 3, 2, 2, 0, false},
      {"all_reduce", OpKind::AllReduce, 1, -1, 1, -1, 0, false},
      {"reduce_scatter", OpKind::ReduceScatter, 1, -1, 1, -1, 0, false},
      {"all_gather", OpKind::AllGather, 1, -1, 1, -1, 0, false},
      {"tp_slice", OpKind::TpSlice, 1, 1, 1, 1, 0, false},
      {"vocab_ce_stats", OpKind::VocabCeStats, 2, 2, 1, 1, 0b10, false},
      {"vocab_ce_stats_grad", OpKind::VocabCeStatsGrad, 4, 4, 1, 1, 0b100, true},
      {"vocab_ce_loss", OpKind::VocabCeLoss, 1, 1, 1, 1, 0, false},
      {"vocab_ce_loss_grad", OpKind::VocabCeLossGrad, 2, 2, 1, 1, 0, false},
      {"rmsnorm", OpKind::RmsNorm, 2, 2, 2, 2, 0, false},
      {"rmsnorm_grad", OpKind::RmsNormGrad, 4, 4, 2, 2, 0, false},
      {"rope", OpKind::Rope, 1, 1, 1, 1, 0, true},
      {"silu", OpKind::Silu, 1, 1, 1, 1, 0, true},
      {"silu_grad", OpKind::SiluGrad, 2, 2, 1, 1, 0, true},
      {"swiglu", OpKind::Swiglu, 2, 2, 1, 1, 0, true},
      {"swiglu_grad", OpKind::SwigluGrad, 3, 3, 2, 2, 0, false},
      {"gqa_attention", OpKind::GqaAttention, 3, 3, 2, 2, 0, false},
      {"gqa_attention_grad", OpKind::GqaAttentionGrad, 6, 6, 3, 3, 0, false},
      {"send", OpKind::Send, 1, 1, 0, 0, 0, false},
      {"recv", OpKind::Recv, 0, 0, 1, 1, 0, false},
      {"linear_ce_stats", OpKind::LinearCeStats, 3, 3, 2, 2, 0b100, false},
      {"linear_ce_stats_grad", OpKind::LinearCeStatsGrad, 5, 5, 3, 3, 0b1000, false},
      {"add_layernorm", OpKind::AddLayernorm, 4, 4, 4, 4, 0, true},
      {"add_rmsnorm", OpKind::AddRmsNorm, 3, 3, 3, 3, 0, true},
      {"layernorm_grad_add", OpKind::LayernormGradAdd, 6, 6, 3, 3, 0, true},
      {"rmsnorm_grad_add", OpKind::RmsNormGradAdd, 5, 5, 2, 2, 0, true},
      {"bias_gelu", OpKind::BiasGelu, 2, 2, 2, 2, 0, true},
      {"gelu_grad_bias", OpKind::GeluGradBias, 2, 2, 2, 2, 0, true},
  };
  return table;
}

const OpSignature *findOpSignature(const std::string &name) {
  for (const auto &s : opSignatures())
    if (name == s.name) return &s;
  return nullptr;
}

bool mayAlias(const OpSignature &sig, size_t out, size_t in) {
  if (!sig.inPlace) return false;
  switch (sig.kind) {
  case OpKind::AddLayernorm:
  case OpKind::AddRmsNorm: return out == 0 && in <= 1;       // s over a or r
  case OpKind::LayernormGradAdd: return out == 0 && in == 5; // dx over r
  case OpKind::RmsNormGradAdd: return out == 0 && in == 4;   // dx over r
  case OpKind::BiasGelu: return out == 0 && in == 0;         // pre over x
  case OpKind::GeluGradBias: return out == 0 && in <= 1;     // dx over x or dy
  case OpKind::CrossEntropyGrad: return out == 0 && in == 0; // dlogits over logits
  case OpKind::VocabCeStatsGrad: return out == 0 && in == 1; // dlogits over logits
  default: return true;
  }
}

// Which dtypes an operand may have (format doc, "Dtypes"): ids are i32; statistics (layernorm
// mean/rstd, attention lse), scalars (loss, dloss, norms, flags, loss scale), AdamW's master weight
// and optional scalars are f32, its moments f32 or bf16; other floating-point tensors f32, bf16 or f16.
OperandType operandType(OpKind k, bool isIn, size_t j) {
  using Want = OperandType;
  switch (k) {
  case OpKind::Embedding:
  case OpKind::EmbeddingGrad: return isIn && j == 1 ? Want::I32 : Want::Float;
  case OpKind::CrossEntropy: return isIn ? (j == 1 ? Want::I32 : Want::Float) : Want::F32;
  case OpKind::CrossEntropyGrad: return isIn ? (j == 1 ? Want::I32 : j == 2 ? Want::F32 : Want::Float) : Want::Float;
  case OpKind::Layernorm: return !isIn && j >= 1 ? Want::F32 : Want::Float;
  case OpKind::LayernormGrad: return isIn && j >= 3 ? Want::F32 : Want::Float;
  case OpKind::AddLayernorm: return !isIn && j >= 2 ? Want::F32 : Want::Float;
  case OpKind::LayernormGradAdd: return isIn && (j == 3 || j == 4) ? Want::F32 : Want::Float;
  case OpKind::AddRmsNorm: return !isIn && j == 2 ? Want::F32 : Want::Float;
  case OpKind::RmsNormGradAdd: return isIn && j == 3 ? Want::F32 : Want::Float;
  case OpKind::Attention: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::AttentionGrad: return isIn && j == 3 ? Want::F32 : Want::Float;
  case OpKind::RmsNorm: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::RmsNormGrad: return isIn && j == 3 ? Want::F32 : Want::Float;
  case OpKind::GqaAttention: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::GqaAttentionGrad: return isIn && j == 5 ? Want::F32 : Want::Float;
  case OpKind::GlobalNorm:
  case OpKind::CheckFinite: return isIn ? Want::Float : Want::F32;
  case OpKind::LossScaleUpdate: return Want::F32;
  // (the moments, in 2-3 and out 1-2: f32, or both bf16; the validator checks the pair)
  case OpKind::AdamW:
    return isIn ? (j == 1 || j == 2 || j == 3 ? Want::Float : Want::F32) : (j >= 1 && j <= 3 ? Want::Float : Want::F32);
  case OpKind::Copy:
  case OpKind::Reshape:
  case OpKind::Send:
  case OpKind::Recv: return Want::Any;
  case OpKind::VocabCeStats: return isIn ? (j == 1 ? Want::I32 : Want::Float) : Want::F32;
  case OpKind::VocabCeStatsGrad: return isIn ? (j == 2 ? Want::I32 : j == 1 ? Want::Float : Want::F32) : Want::Float;
  case OpKind::VocabCeLoss:
  case OpKind::VocabCeLossGrad: return Want::F32;
  // h, w, targets -> stats, workspace
  case OpKind::LinearCeStats: return isIn ? (j == 2 ? Want::I32 : Want::Float) : Want::F32;
  // dstats, h, w, targets, stats -> dh, dw, workspace
  case OpKind::LinearCeStatsGrad:
    return isIn ? (j == 3             ? Want::I32
                   : j == 1 || j == 2 ? Want::Float
                                      : Want::F32)
                : (j == 2 ? Want::F32 : Want::Float);
  default: return Want::Float;
  }
}

} // namespace bigc::format
