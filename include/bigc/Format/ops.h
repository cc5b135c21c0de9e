// The op registry: every instruction of the program format (docs/program-format.md,
// "Instructions") declared once, in format/ops/ (one file per family): its name, operand counts
// and dtypes, in-place pairs, attributes with their types, shape rule, the dims its kernels take,
// and its FLOPs and bytes for the cost model. The format's validator, the executors (the dims,
// and each device's kernel table: include/bigc/Runtime/kernel_table.h) and the compiler's cost
// model (lib/analysis/CostModel.cpp) read it. docs/architecture.md, "Adding an op", lists the
// files a new op touches. No MLIR here.
#pragma once

#include <cstdint>
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
  // Gemma's gated MLP
  Geglu,
  GegluGrad,
  // Gemma 2's capped logits: cap * tanh(x / cap), and its gradient from the result
  Softcap,
  SoftcapGrad,
  // a mixture of experts (Mixtral): router top-k over SwiGLU experts, one rank holding them all
  Moe,
  MoeGrad,
  // context parallelism (the mesh's cp axis, 3): the ring's key/value blocks, the all-to-all of
  // DeepSpeed-Ulysses, and attention over one block at the tokens' positions in the sequence
  RingShift,
  CpAllToAll,
  RingAttention,
  RingAttentionGrad,
};
// (the number of ops: keep last)
constexpr size_t kOpKinds = size_t(OpKind::RingAttentionGrad) + 1;

// The dtype an operand must have (format doc, "Dtypes"): ids are I32; statistics (layernorm
// mean/rstd, attention lse), scalars, AdamW's master weight, moments and optional scalars are
// F32; other floating-point tensors are Float (f32, bf16 or f16); copy and reshape take Any.
enum class OperandType { I32, F32, Float, Any };

// An attribute's type: Int (an integer a double holds exactly, |x| <= 2^53), Real (finite), Flag
// (0 or 1; JSON true/false), Ints (a list of integers), Reals (a list of numbers).
enum class AttrType { Int, Real, Flag, Ints, Reals };
struct AttrSpec {
  const char *name;
  AttrType type;
};

// The AdamW hyperparameters a kernel takes (the runtime's CpuAdamArgs).
struct AdamArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.0f;
  // Multiply grads by this before use: 1/loss_scale, times the clipping coefficient.
  float gradScale = 1.0f;
  // Step counter t >= 1 (the step being taken, counted from 1).
  int64_t step = 1;
};

// An instruction's operands decoded once at load time into the sizes its kernel takes (the same
// for every backend): element counts, row/column splits, GEMM dimensions, attention shapes, AdamW
// and loss-scale attributes. Each op's `dims` rule fills its part.
struct OpDims {
  int64_t n = 0, rows = 0, cols = 0, V = 0, C = 0, B = 0, T = 0, H = 0;
  // matmul: c[batch][M,N] = op(a)[M,K] @ op(b)[K,N]; strides between batch entries (elements)
  int64_t batch = 1, M = 0, N = 0, K = 0, sA = 0, sB = 0, sC = 0;
  bool ta = false, tb = false;
  float value = 0.f;                // scale: factor; fill: value; layernorm: eps
  std::vector<int64_t> shape, perm; // transpose
  // adamw: hyperparameters (step and gradScale set per call), and where its optional inputs are
  AdamArgs adam{};
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
  // `inverse`: the rotation by -angle; `interleaved`: the pairs (x[2i], x[2i+1]), not (x[i], x[i+D/2]).
  // invFreq.size() * 2 = R <= D: the first R elements of each head rotate, the rest pass through.
  int64_t headDim = 0;
  std::vector<float> invFreq;
  float scale = 1.f;
  bool inverse = false, interleaved = false;
  // gqa_attention(_grad): q [B,T,H*D], k/v [B,T,Hkv*D], D = headDim; window (0: causal only);
  // `scale` (the softmax scale); tpHeads: q holds tensor rank r's H heads (global head r*H + h)
  // and k/v all Hkv (the engine sets headOffset = r*H); groups = (H * tp) / Hkv heads per kv head.
  // softcap c > 0: each score s capped as c tanh(s / c) (Gemma 2).
  int64_t Hkv = 0, window = 0, headOffset = 0, group = 1;
  float softcap = 0.f;
  // Context parallelism: rope and ring_attention(_grad) with cp C > 1 see tokens at their
  // positions in the whole sequence (the engine knows the rank's index on the cp axis); ring
  // attention's `step` (the key block is rank (c - step) mod C's), `a2a` (the whole sequence of
  // some heads, in rank order), and whether it merges into / adds to the `acc` operands.
  int64_t cp = 1, step = 0;
  bool a2a = false, acc = false, accKv = false;
  // cp_all_to_all: to_heads (else back to the sequence split); B, T (tokens of the
  // sequence-split side) and C = N (the sequence side's last dimension) of each tensor.
  bool toHeads = false;
  // moe(_grad): N tokens of width C (C), E experts of F (rows = N, experts = E, ffn = F), top_k,
  // normalize (the top-k probabilities divided by their sum).
  int64_t experts = 0, ffn = 0, topK = 0;
  bool normalize = false;
  bool tpHeads = false;
  // send / recv (pipeline stages): the peer stage, the tag; `n` the bytes of the message.
  int64_t peer = -1, tag = -1;
};

// What the cost rules read of an op: its operands' shapes and element counts, and its attributes
// by name. A program's instruction and the compiler's MLIR op (whose inherent attributes the
// emitter writes as the instruction's, under the same names) both present themselves so.
class OpView {
public:
  virtual ~OpView() = default;
  virtual size_t numIn() const = 0;
  virtual size_t numOut() const = 0;
  virtual std::vector<int64_t> inShape(size_t k) const = 0;
  virtual std::vector<int64_t> outShape(size_t k) const = 0;
  virtual int64_t inElements(size_t k) const = 0; // 0 for a shape not known
  virtual int64_t outElements(size_t k) const = 0;
  virtual bool has(const char *attr) const = 0;
  virtual double num(const char *attr, double dflt) const = 0;
};

// How the cost model counts an op's bytes: its operands read and results written; a gather (the
// embedding: the ids and one table row per id, not the whole table); none (reshape: an alias).
enum class CostBytes { Operands, Gather, None };

namespace detail {
struct InstructionCheck; // format/Checks.h: one instruction of a program, with its error helper
}

struct OpDef {
  const char *name = "";
  OpKind kind = OpKind::Wait;
  int minIn = 0, maxIn = 0;   // maxIn -1: any number >= minIn
  int minOut = 0, maxOut = 0; // maxOut -1: any number >= minOut
  // The operands' dtypes, input j / output j (past the end: the last entry; empty: Float).
  std::vector<OperandType> inTypes, outTypes;
  // In place: an output may alias an input whose last use this is; `aliases` the (out, in) pairs
  // (empty: every pair).
  bool inPlace = false;
  std::vector<std::pair<int, int>> aliases;
  // Reads and writes each operand in its own stored dtype on every backend (no uniform storage
  // type, no fp32 staging): cast, copy, reshape, wait, the optimizer's ops, collectives, send, recv.
  bool ownDtypes = false;
  std::vector<AttrSpec> attrs; // every attribute it takes (others are refused)
  // The shape rule (the validator: throws a UserError naming the instruction), the dims its
  // kernels take (called on an instruction that passed the validator), its FLOPs (nullptr: the
  // cost model does not know it) and how its bytes count.
  void (*shape)(const detail::InstructionCheck &) = nullptr;
  void (*dims)(const detail::InstructionCheck &, OpDims &) = nullptr;
  int64_t (*flops)(const OpView &) = nullptr;
  CostBytes bytes = CostBytes::Operands;

  const AttrSpec *attr(const std::string &n) const;
  OperandType operandType(bool isIn, size_t j) const;
};

// Every op, indexed by OpKind (opDefs()[size_t(k)].kind == k).
const std::vector<OpDef> &opDefs();
const OpDef &opDef(OpKind k);
// nullptr when `name` is not an op.
const OpDef *findOp(const std::string &name);
// Whether output `out` may share the memory of input `in` (an in-place op, at the input's last use).
bool mayAlias(const OpDef &def, size_t out, size_t in);
inline OperandType operandType(OpKind k, bool isIn, size_t j) { return opDef(k).operandType(isIn, j); }
inline bool handlesOwnDtypes(OpKind k) { return opDef(k).ownDtypes; }
// Context parallelism (cp C > 1): token t of the T tokens of cp rank c (chunks c and 2C-1-c of
// the 2C chunks of T/2 tokens of a sequence of C x T) is at position cpPosition(t, T, C, c).
inline int64_t cpPosition(int64_t t, int64_t T, int64_t C, int64_t c) {
  if (C <= 1) return t;
  const int64_t half = T / 2;
  return t < half ? c * half + t : (2 * C - 1 - c) * half + (t - half);
}
// A collective over an axis of the mesh (attribute `axis`; stream comm, or comm_tp for axis 1).
inline bool isCollectiveOp(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::ReduceScatter || k == OpKind::AllGather || k == OpKind::RingShift ||
         k == OpKind::CpAllToAll;
}

struct Program;
struct Instruction;
// The dims of `ins` (which must have passed validateProgram) by its op's rule.
OpDims decodeOp(const Program &p, const Instruction &ins, OpKind kind);

} // namespace bigc::format
