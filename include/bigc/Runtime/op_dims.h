// An instruction's operands decoded once at load time into the sizes its kernel takes (the same for
// every backend): element counts, row/column splits, GEMM dimensions, attention shapes, AdamW and
// loss-scale attributes. Semantics: docs/program-format.md, "Instructions". No MLIR here.
#pragma once

#include <cstdint>
#include <vector>

#include "bigc/Runtime/attention_geometry.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/program.h"

namespace bigc::rt {

struct OpDims {
  int64_t n = 0, rows = 0, cols = 0, V = 0, C = 0, B = 0, T = 0, H = 0;
  // matmul: c[batch][M,N] = op(a)[M,K] @ op(b)[K,N]; strides between batch entries (elements)
  int64_t batch = 1, M = 0, N = 0, K = 0, sA = 0, sB = 0, sC = 0;
  bool ta = false, tb = false;
  float value = 0.f;                // scale: factor; fill: value; layernorm: eps
  std::vector<int64_t> shape, perm; // transpose
  // adamw: hyperparameters (step and gradScale set per call), and where its optional inputs are
  CpuAdamArgs adam{};
  double baseLr = 0.0; // adamw: the instruction's rate as written (double), which a schedule scales
  double maxNorm = 0.0;
  bool clip = false, unscale = false, skip = false, writeHalf = false;
  // A range copy (bytes) or a chunk of an update (elements; half's offset: 0 for a chunk-sized half).
  int64_t inOffset = 0, outOffset = 0, gradOffset = 0, halfOffset = 0;
  int iNorm = -1, iScale = -1, iFound = -1;
  // loss_scale_update
  double growthInterval = 2000, backoff = 0.5, growth = 2;
  // Tensor parallelism. embedding(_grad) with vocab_axis 1: this rank's V rows of a vocabulary of
  // `vocab` = V * tp ids (rows [t*V, t*V+V) on tensor rank t; the engine knows t); vocab_ce_stats
  // (_grad): likewise for the logits' V columns. tp_slice: rows = chunk rows of the split dim,
  // cols = whole rows, slicePre = elements before it, sliceRun = bytes of one row after it.
  bool vocabParallel = false;
  int64_t vocab = 0;
  // The loss ops of a padded vocabulary (bigc-pad-vocab, attribute `classes`): the vocabulary's
  // classes (0: not padded); vocabCols, set by the engine, the columns of this op's V (of this
  // rank's, vocabulary-parallel) that are classes, the rest padding.
  int64_t classes = 0, vocabCols = 0;
  int64_t slicePre = 1, sliceRun = 1;
  // gelu(_grad): the exact erf form (else tanh).
  bool exact = false;
  // rmsnorm(_grad): N rows of C, eps in `value`. rope: x [B,T,H*D] with C = H*D, D = headDim,
  // angle of token t and frequency i: f32(invFreq[i]) * f32(t); `scale` = attention_scaling;
  // `inverse`: the rotation by -angle.
  int64_t headDim = 0;
  std::vector<float> invFreq;
  float scale = 1.f;
  bool inverse = false;
  // gqa_attention(_grad): q [B,T,H*D], k/v [B,T,Hkv*D], D = headDim; window (0: causal only);
  // `scale` (the softmax scale); tpHeads: q holds tensor rank r's H heads (global head r*H + h)
  // and k/v all Hkv (the engine sets headOffset = r*H); groups = (H * tp) / Hkv heads per kv head.
  int64_t Hkv = 0, window = 0, headOffset = 0, group = 1;
  bool tpHeads = false;
  // send / recv (pipeline stages): the peer stage, the tag; `n` the bytes of the message.
  int64_t peer = -1, tag = -1;
};

// `ins` must have passed validateProgram.
OpDims decodeOp(const Program &p, const Instruction &ins, OpKind kind);

// Ops whose kernels read and write each operand in its own stored dtype on every backend (no
// uniform storage type, no fp32 staging): cast, copy, reshape, wait, the optimizer's instructions,
// the collectives, send and recv.
bool handlesOwnDtypes(OpKind k);

// gqa_attention(_grad): the strided rows of q [B,T,H*D] and k/v [B,T,Hkv*D] the kernels take.
inline AttentionGeometry attentionGeometry(const OpDims &d) {
  AttentionGeometry g;
  g.B = d.B, g.T = d.T, g.H = d.H, g.D = d.headDim, g.Hkv = d.Hkv;
  g.sq = g.so = d.H * d.headDim, g.skv = d.Hkv * d.headDim;
  g.group = d.group, g.headOffset = d.headOffset, g.window = d.window, g.scale = d.scale;
  return g;
}

// The offloaded optimizer's instructions on host memory (the CPU backend runs every instruction
// this way; the CUDA backend its host stream): adamw, check_finite, global_norm,
// loss_scale_update. `updates` is the number of updates done before this step (AdamW's t - 1) and
// `lr` the step's learning rate (the schedule's; d.adam.lr without one). Returns false for any
// other op.
bool runOptimizerOpOnHost(OpKind kind, const OpDims &d, const std::vector<void *> &in, const std::vector<void *> &out,
                          const std::vector<DType> &inT, const std::vector<DType> &outT,
                          const std::vector<int64_t> &inN, int64_t updates, float lr);

} // namespace bigc::rt
