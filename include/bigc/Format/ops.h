// The instruction set of the program format (docs/program-format.md, "Instructions"), in one
// table: operand counts, which operands are i32, and which ops may write in place. The loader's
// validator and the executor both use it; the compiler's emitter may too. No MLIR here.
#pragma once

#include <string>
#include <vector>

namespace bigc::format {

enum class OpKind {
  Embedding,
  EmbeddingGrad,
  Matmul,
  Add,
  BiasAdd,
  Mul,
  Scale,
  ReduceSum,
  Fill,
  Layernorm,
  LayernormGrad,
  Gelu,
  GeluGrad,
  Attention,
  AttentionGrad,
  Transpose,
  Reshape,
  Split,
  Concat,
  CrossEntropy,
  CrossEntropyGrad,
  GlobalNorm,
  AdamW,
  // version 2
  Cast,
  Copy,
  Wait,
  CheckFinite,
  LossScaleUpdate,
  // version 3: collectives over an axis of the device mesh (stream "comm")
  AllReduce,
  ReduceScatter,
  AllGather,
  // version 4: tensor parallelism (an axis of the mesh, attribute `axis`)
  TpSlice,
  VocabCeStats,
  VocabCeStatsGrad,
  VocabCeLoss,
  VocabCeLossGrad,
  // the LLaMA family (docs/frontend.md)
  RmsNorm,
  RmsNormGrad,
  Rope,
  Silu,
  SiluGrad,
  Swiglu,
  SwigluGrad,
  GqaAttention,
  GqaAttentionGrad,
  // pipeline parallelism: point-to-point between the stages (stream "p2p", attributes `peer`, `tag`)
  Send,
  Recv,
  // the LM head fused with the loss's statistics (bigc-fuse-loss)
  LinearCeStats,
  LinearCeStatsGrad,
  // pairs of ops fused (bigc-fuse): the same numbers, one pass over memory
  AddLayernorm,
  AddRmsNorm,
  LayernormGradAdd,
  RmsNormGradAdd,
  BiasGelu,
  GeluGradBias,
};

struct OpSignature {
  const char *name;
  OpKind kind;
  int minIn, maxIn;   // maxIn -1: any number >= minIn
  int minOut, maxOut; // maxOut -1: any number >= minOut
  unsigned i32Inputs; // bit i set: input i is i32 (the dtype rules of all operands: operandType)
  bool inPlace;       // output may alias exactly one input whose last use this is
};

// Every op of version 2, in the order of the tables in the format document. adamw's operand
// counts depend on its attributes (clip, unscale, skip_on_overflow, write_half): the loader checks
// them exactly; the table gives the bounds.
const std::vector<OpSignature> &opSignatures();
// nullptr when `name` is not an op.
const OpSignature *findOpSignature(const std::string &name);
// Whether output `out` may share the memory of input `in` (an in-place op, at the input's last use):
// every input for the single-output in-place ops; for the fused ops, the pairs their kernels
// allow (add_layernorm's sum over a or r, layernorm_grad_add's dx over r, bias_gelu's pre over x, ...).
bool mayAlias(const OpSignature &sig, size_t out, size_t in);

// The dtype an operand must have (format doc, "Dtypes"): ids are I32; statistics (layernorm
// mean/rstd, attention lse), scalars, AdamW's master weight, moments and optional scalars are
// F32; other floating-point tensors are Float (f32, bf16 or f16); copy and reshape take Any.
enum class OperandType { I32, F32, Float, Any };
OperandType operandType(OpKind k, bool isIn, size_t j);

} // namespace bigc::format
