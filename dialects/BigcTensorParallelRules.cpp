//===- BigcTensorParallelRules.cpp - sharding rules of the ops ------------===//
//
// TensorParallelOpInterface (BigcInterfaces.td) for the ops that have a
// tensor-parallel form, attached as external models when the dialect loads:
//
//   matmul      x @ W with W a weight: column-parallel (W split on its output
//               dimension, x replicated, result split) or row-parallel (x
//               split on its last dimension, W on its input dimension,
//               result partial sums) — Megatron's pair, whatever the model
//   embedding   vocabulary-parallel: the table split on its rows, ids of other
//               ranks give zeros, the result partial sums
//   cross_entropy over vocabulary-split logits: the vocabulary-parallel loss
//   attention   qkv split on its last dimension in 3 segments: heads / T each
//   gqa_attention  query heads split; key/value heads split when the ranks
//               divide them, else replicated on every rank (tp_heads)
//   rope        keeps a split on whole heads
//   rmsnorm     as layernorm
//   reshape     keeps a split of the last dimension when it keeps that dimension (logits.view(-1, V))
//   layernorm, bias_add, add, mul, scale, gelu, silu, softcap, swiglu, geglu, cast: keep a split (and,
//               with sequence parallelism, take partial sums as the
//               reduce-scatter onto this rank's part of the sequence)
//
// Everything else runs replicated (the pass gathers its operands).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace mlir::bigc;

namespace {

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

/// The sequence (token) dimension of an activation [..., T, C].
int64_t seqDim(int64_t rank) { return rank - 2; }

TpRule allReplicated(Operation *op, std::string note = "") {
  TpRule r;
  r.operands.assign(op->getNumOperands(), TpLayout::rep());
  r.results.assign(op->getNumResults(), TpLayout::rep());
  r.note = std::move(note);
  return r;
}

/// Partial sums are made whole before a per-token op: replicated, or this
/// rank's part of the sequence (sequence parallelism).
TpLayout whole(const TpLayout &l, int64_t rank, const TpContext &ctx) {
  if (!l.isPartial()) return l;
  return ctx.sequenceParallel && rank >= 2 ? TpLayout::split(seqDim(rank)) : TpLayout::rep();
}

/// Element-wise ops of one or two operands of one shape.
template <typename OpT, bool Linear>
struct ElementwiseTp : TensorParallelOpInterface::ExternalModel<ElementwiseTp<OpT, Linear>, OpT> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    const int64_t r = rankOf(op->getOperand(0));
    TpRule rule;
    bool allPartial = true, same = true;
    for (const TpLayout &l : in) {
      allPartial &= l.isPartial();
      same &= l.sameAs(in[0]);
    }
    TpLayout out;
    if (Linear && allPartial && (in.size() == 1 || std::is_same_v<OpT, AddOp>)) {
      out = TpLayout::partial();
    } else if (same && !in[0].isPartial()) {
      out = in[0];
      out.gradPartial = false, out.freeParam = false;
    } else {
      // Mixed: sequence-split wins under sequence parallelism, else replicated.
      bool seq = false;
      for (const TpLayout &l : in) seq |= l.isSplit(seqDim(r)) && l.segments == 1;
      out = ctx.sequenceParallel && seq ? TpLayout::split(seqDim(r)) : TpLayout::rep();
      if (in.size() == 1) out = whole(in[0], r, ctx);
    }
    rule.operands.assign(in.size(), out);
    rule.results.assign(op->getNumResults(), out);
    return rule;
  }
};

struct BiasAddTp : TensorParallelOpInterface::ExternalModel<BiasAddTp, BiasAddOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    const int64_t r = rankOf(op->getOperand(0)), rb = rankOf(op->getOperand(1));
    TpLayout x = whole(in[0], r, ctx);
    x.gradPartial = x.freeParam = false;
    TpRule rule;
    if (x.kind != TpLayout::Split) {
      rule.operands = {TpLayout::rep(), TpLayout::rep()};
      rule.results = {TpLayout::rep()};
      return rule;
    }
    const int64_t bd = x.dim - (r - rb);
    // The bias covers the split dimension: split it the same way. Otherwise
    // it is broadcast over the split: replicated, its gradient partial.
    TpLayout b = bd >= 0 ? TpLayout::split(bd, x.segments) : TpLayout::rep(/*gradPartial=*/true);
    rule.operands = {x, b};
    rule.results = {x};
    return rule;
  }
};

struct LayerNormTp : TensorParallelOpInterface::ExternalModel<LayerNormTp, LayerNormOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    const int64_t r = rankOf(op->getOperand(0));
    TpLayout x = whole(in[0], r, ctx);
    if (x.kind == TpLayout::Split && x.dim < r - 1 && x.segments == 1) {
      // Per-token statistics: a split over tokens stays split; the weights
      // see only this rank's tokens (partial gradients).
      TpRule rule;
      TpLayout s = TpLayout::split(x.dim);
      rule.operands = {s, TpLayout::rep(true), TpLayout::rep(true)};
      rule.results = {s, s, s};
      return rule;
    }
    return allReplicated(op);
  }
};

struct AttentionTp : TensorParallelOpInterface::ExternalModel<AttentionTp, AttentionOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    auto att = cast<AttentionOp>(op);
    const int64_t r = rankOf(att.getQkv());
    TpRule rule = allReplicated(op);
    if (!in[0].isSplit(r - 1)) return rule;
    if (in[0].segments != 3) { // ask the producer for q, k and v split head-wise
      rule.demandOperand = 0, rule.demandSegments = 3;
      return rule;
    }
    if (att.getHeads() % ctx.tp != 0) {
      rule.note = "error: the attention has " + std::to_string(att.getHeads()) + " heads, which " +
                  std::to_string(ctx.tp) + " tensor ranks do not divide (use a tensor size that divides the heads)";
      return rule;
    }
    rule.operands = {in[0]};
    rule.results = {TpLayout::split(r - 1), TpLayout::split(1)}; // out [B,T,C/T], lse [B,H/T,T]
    rule.divideHeads = true;
    return rule;
  }
};

struct RmsNormTp : TensorParallelOpInterface::ExternalModel<RmsNormTp, RmsNormOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    const int64_t r = rankOf(op->getOperand(0));
    TpLayout x = whole(in[0], r, ctx);
    if (x.kind == TpLayout::Split && x.dim < r - 1 && x.segments == 1) {
      // Per-token statistics: a split over tokens stays split (sequence parallelism); the weight
      // sees only this rank's tokens (partial gradients).
      TpRule rule;
      TpLayout s = TpLayout::split(x.dim);
      rule.operands = {s, TpLayout::rep(true)};
      rule.results = {s, s};
      return rule;
    }
    return allReplicated(op);
  }
};

/// Rotary embeddings act within each head of each token: a split of the heads (on whole heads)
/// stays split; anything else runs replicated.
struct RopeTp : TensorParallelOpInterface::ExternalModel<RopeTp, RopeOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    auto rope = cast<RopeOp>(op);
    const int64_t r = rankOf(rope.getX());
    const int64_t c = cast<RankedTensorType>(rope.getX().getType()).getShape()[size_t(r - 1)];
    if (in[0].isSplit(r - 1) && in[0].segments == 1 && c % ctx.tp == 0 && (c / ctx.tp) % rope.getHeadDim() == 0) {
      TpRule rule;
      rule.operands = {in[0]};
      rule.results = {in[0]};
      return rule;
    }
    return allReplicated(op);
  }
};

/// Grouped-query attention: the query heads split over the tensor ranks; the key/value heads
/// split too when the ranks divide them, else every rank holds them all (Megatron's replication
/// of KV heads when tp > kv heads; their gradient is then a partial sum over the ranks).
struct GqaAttentionTp : TensorParallelOpInterface::ExternalModel<GqaAttentionTp, GqaAttentionOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    auto att = cast<GqaAttentionOp>(op);
    TpRule rule = allReplicated(op);
    if (!in[0].isSplit(2) || in[0].segments != 1) return rule;
    const int64_t h = att.getHeads(), kv = att.getKvHeads();
    if (h % ctx.tp != 0) {
      rule.note = "error: the attention has " + std::to_string(h) + " query heads, which " + std::to_string(ctx.tp) +
                  " tensor ranks do not divide (use a tensor size that divides the heads)";
      return rule;
    }
    const bool splitKv = kv % ctx.tp == 0;
    const TpLayout kvl = splitKv ? TpLayout::split(2) : TpLayout::rep(/*gradPartial=*/true);
    rule.operands = {in[0], kvl, kvl};
    rule.results = {TpLayout::split(2), TpLayout::split(1)}; // out [B,T,H*D/tp], lse [B,H/tp,T]
    rule.divideHeads = true;
    if (!splitKv)
      rule.note = std::to_string(kv) + " key/value heads replicated over " + std::to_string(ctx.tp) +
                  " tensor ranks (fewer heads than ranks, or not divisible)";
    return rule;
  }
};

struct MatmulTp : TensorParallelOpInterface::ExternalModel<MatmulTp, MatmulOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &ctx) const {
    auto mm = cast<MatmulOp>(op);
    const int64_t ra = rankOf(mm.getA()), rb = rankOf(mm.getB());
    if (rb != 2 || mm.getTransposeA() || in[0].freeParam) return allReplicated(op);
    const int64_t colB = mm.getTransposeB() ? 0 : 1, rowB = 1 - colB;
    const TpLayout &a = in[0], &b = in[1];
    TpRule rule;
    if (a.isSplit(ra - 1) && a.segments == 1 && (b.freeParam || (b.isSplit(rowB) && b.segments == 1))) {
      rule.operands = {a, TpLayout::split(rowB)}; // row-parallel
      rule.results = {TpLayout::partial()};
      return rule;
    }
    if (b.freeParam || (b.isSplit(colB) && !a.isSplit(ra - 1))) {
      const int64_t s = b.freeParam ? ctx.resultSegments : b.segments;
      rule.operands = {TpLayout::rep(/*gradPartial=*/true), TpLayout::split(colB, s)}; // column-parallel
      rule.results = {TpLayout::split(ra - 1, s)};
      return rule;
    }
    return allReplicated(op);
  }
};

struct EmbeddingTp : TensorParallelOpInterface::ExternalModel<EmbeddingTp, EmbeddingOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &) const {
    if (!(in[0].freeParam || (in[0].isSplit(0) && in[0].segments == 1))) return allReplicated(op);
    TpRule rule;
    rule.operands = {TpLayout::split(0), TpLayout::rep()};
    rule.results = {TpLayout::partial()};
    rule.vocabParallel = true;
    return rule;
  }
};

struct CrossEntropyTp : TensorParallelOpInterface::ExternalModel<CrossEntropyTp, CrossEntropyOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &) const {
    const int64_t r = rankOf(op->getOperand(0));
    if (!(in[0].isSplit(r - 1) && in[0].segments == 1)) return allReplicated(op);
    TpRule rule;
    rule.operands = {in[0], TpLayout::rep()};
    rule.results = {TpLayout::rep()};
    rule.vocabParallelLoss = true;
    return rule;
  }
};

/// A reshape that keeps the last dimension and regroups the leading ones (PyTorch's
/// logits.view(-1, V) before the loss, x.view(B * T, C)): a split of the last dimension stays a
/// split of the last dimension, partial sums stay partial sums (the reshape is linear), a
/// replicated value stays replicated. Anything else runs replicated.
struct ReshapeTp : TensorParallelOpInterface::ExternalModel<ReshapeTp, ReshapeOp> {
  TpRule getTpRule(Operation *op, ArrayRef<TpLayout> in, const TpContext &) const {
    auto x = cast<RankedTensorType>(op->getOperand(0).getType());
    auto y = cast<RankedTensorType>(op->getResult(0).getType());
    const bool keepsLast = x.getRank() >= 1 && y.getRank() >= 1 && x.getShape().back() == y.getShape().back();
    TpRule rule;
    if (keepsLast && in[0].isSplit(x.getRank() - 1) && in[0].segments == 1) {
      rule.operands = {TpLayout::split(x.getRank() - 1)};
      rule.results = {TpLayout::split(y.getRank() - 1)};
      return rule;
    }
    if (in[0].isPartial()) {
      rule.operands = {TpLayout::partial()};
      rule.results = {TpLayout::partial()};
      return rule;
    }
    if (in[0].isRep() && !in[0].freeParam) {
      rule.operands = {TpLayout::rep()};
      rule.results = {TpLayout::rep()};
      return rule;
    }
    return allReplicated(op, "a reshape of a split that does not keep the split (last) dimension");
  }
};

} // namespace

void mlir::bigc::attachTensorParallelRules(MLIRContext &ctx) {
  MatmulOp::attachInterface<MatmulTp>(ctx);
  EmbeddingOp::attachInterface<EmbeddingTp>(ctx);
  CrossEntropyOp::attachInterface<CrossEntropyTp>(ctx);
  AttentionOp::attachInterface<AttentionTp>(ctx);
  LayerNormOp::attachInterface<LayerNormTp>(ctx);
  BiasAddOp::attachInterface<BiasAddTp>(ctx);
  AddOp::attachInterface<ElementwiseTp<AddOp, true>>(ctx);
  MulOp::attachInterface<ElementwiseTp<MulOp, false>>(ctx);
  ScaleOp::attachInterface<ElementwiseTp<ScaleOp, true>>(ctx);
  CastOp::attachInterface<ElementwiseTp<CastOp, true>>(ctx);
  GeluOp::attachInterface<ElementwiseTp<GeluOp, false>>(ctx);
  SiluOp::attachInterface<ElementwiseTp<SiluOp, false>>(ctx);
  SoftcapOp::attachInterface<ElementwiseTp<SoftcapOp, false>>(ctx);
  SwigluOp::attachInterface<ElementwiseTp<SwigluOp, false>>(ctx);
  GegluOp::attachInterface<ElementwiseTp<GegluOp, false>>(ctx);
  RmsNormOp::attachInterface<RmsNormTp>(ctx);
  RopeOp::attachInterface<RopeTp>(ctx);
  GqaAttentionOp::attachInterface<GqaAttentionTp>(ctx);
  ReshapeOp::attachInterface<ReshapeTp>(ctx);
}
