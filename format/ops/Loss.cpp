// The losses: cross-entropy, the vocabulary-parallel loss's statistics and combination, and the LM
// head fused with the loss's statistics (bigc-fuse-loss) (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// CrossEntropy, CrossEntropyGrad
void shapeCrossEntropy(const Ctx &op) {
  const Buffer &l = op.in(0);
  op.minRank(l, 1, "logits");
  op.wantShape(op.in(1), op.lead(l), "targets");
  op.classesWithin(l.shape.back());
  if (op.kind == OpKind::CrossEntropy) {
    op.wantShape(op.out(0), {}, "loss");
  } else {
    op.wantShape(op.in(2), {}, "dloss");
    op.wantShape(op.out(0), l.shape, "dlogits");
  }
}

// VocabCeStats, VocabCeStatsGrad
void shapeVocabCeStats(const Ctx &op) {
  const Buffer &l = op.in(op.kind == OpKind::VocabCeStats ? 0 : 1);
  op.minRank(l, 1, "logits");
  const Buffer &t = op.in(op.kind == OpKind::VocabCeStats ? 1 : 2);
  op.wantShape(t, op.lead(l), "targets");
  op.classesWithin(l.shape.back() * op.p.tp);
  auto st = op.lead(l);
  st.push_back(2);
  if (op.kind == OpKind::VocabCeStats) {
    op.wantShape(op.out(0), st, "stats");
  } else {
    op.wantShape(op.in(0), st, "dstats");
    op.wantShape(op.in(3), st, "stats");
    op.wantShape(op.out(0), l.shape, "dlogits");
  }
}

// LinearCeStats, LinearCeStatsGrad
void shapeLinearCeStats(const Ctx &op) {
  const bool fwd = op.kind == OpKind::LinearCeStats;
  const Buffer &h = op.in(fwd ? 0 : 1), &w = op.in(fwd ? 1 : 2), &t = op.in(fwd ? 2 : 3);
  const bool tb = op.ins->flag("transpose_b");
  op.minRank(h, 2, "h");
  if (w.shape.size() != 2) op.bad("w must be [C,V] (or [V,C] with transpose_b), " + op.desc(w) + " is not");
  const int64_t C = h.shape.back(), V = tb ? w.shape[0] : w.shape[1];
  if (C < 1 || V < 1)
    op.bad("h's width and w's vocabulary columns must be at least 1: " + op.desc(h) + ", " + op.desc(w));
  if ((tb ? w.shape[1] : w.shape[0]) != C)
    op.bad("w " + op.desc(w) + " does not match h's width " + std::to_string(C) + (tb ? " (transpose_b)" : ""));
  if (h.dtype != w.dtype)
    op.bad(std::string("h and w must have one dtype, are ") + dtypeName(h.dtype) + " and " + dtypeName(w.dtype));
  op.wantShape(t, op.lead(h), "targets");
  op.classesWithin(op.ins->num("vocab_axis", 0) == 1 ? V * op.p.tp : V);
  if (op.ins->attrs.count("classes") && !tb) op.bad("attribute 'classes' (a padded vocabulary) needs transpose_b");
  const double chunk = op.ins->num("chunk", 0);
  if (!(chunk >= 1) || chunk != std::floor(chunk)) op.bad("attribute 'chunk' must be a positive integer");
  const int64_t N = C ? h.numel() / C : 0, cols = std::min<int64_t>(int64_t(chunk), V);
  auto st = op.lead(h);
  st.push_back(2);
  if (fwd) {
    op.wantShape(op.out(0), st, "stats");
    op.wantShape(op.out(1), {N * cols + 2 * N}, "workspace");
  } else {
    op.wantShape(op.in(0), st, "dstats");
    op.wantShape(op.in(4), st, "stats");
    op.wantShape(op.out(0), h.shape, "dh");
    op.wantShape(op.out(1), w.shape, "dw");
    op.wantShape(op.out(2), {N * cols + N * C}, "workspace");
    if (op.out(0).dtype != h.dtype || op.out(1).dtype != w.dtype) op.bad("dh and dw must have h's and w's dtype");
  }
}

// VocabCeLoss, VocabCeLossGrad
void shapeVocabCeLoss(const Ctx &op) {
  const Buffer &s = op.in(0);
  double parts = op.ins->num("parts", 0);
  if (!(parts >= 1) || parts != std::floor(parts)) op.bad("attribute 'parts' must be a positive integer");
  if (s.shape.size() < 2 || s.shape.back() != 2 || s.shape[0] % int64_t(parts) != 0)
    op.bad("stats must be [parts*B,...,2], " + op.desc(s) + " is not");
  if (op.kind == OpKind::VocabCeLoss) {
    op.wantShape(op.out(0), {}, "loss");
  } else {
    op.wantShape(op.in(1), {}, "dloss");
    op.wantShape(op.out(0), s.shape, "dstats");
  }
}

// CrossEntropy, CrossEntropyGrad, VocabCeStats
void dimsCrossEntropy(const Ctx &op, OpDims &d) {
  d.classes = int64_t(op.ins->num("classes", 0));
  d.V = op.in(0).shape.back();
  d.N = d.V ? op.in(0).numel() / d.V : 0;
  d.vocabParallel = true, d.vocab = d.V * op.p.tp;
}

// VocabCeStatsGrad
void dimsVocabCeStatsGrad(const Ctx &op, OpDims &d) {
  d.classes = int64_t(op.ins->num("classes", 0));
  d.V = op.in(1).shape.back();
  d.N = d.V ? op.in(1).numel() / d.V : 0;
  d.vocabParallel = true, d.vocab = d.V * op.p.tp;
}

// LinearCeStats, LinearCeStatsGrad
void dimsLinearCeStats(const Ctx &op, OpDims &d) {
  // h [N,C] @ op(w) -> V columns, n at a time
  const bool fwd = op.kind == OpKind::LinearCeStats;
  const Buffer &h = op.in(fwd ? 0 : 1), &w = op.in(fwd ? 1 : 2);
  d.tb = op.ins->flag("transpose_b");
  d.C = h.shape.back();
  d.N = d.C ? h.numel() / d.C : 0;
  d.V = d.tb ? w.shape[0] : w.shape[1];
  d.n = std::min<int64_t>(int64_t(op.ins->num("chunk", 1)), d.V);
  d.vocabParallel = op.ins->num("vocab_axis", 0) == 1;
  d.vocab = d.vocabParallel ? d.V * op.p.tp : d.V;
  d.classes = int64_t(op.ins->num("classes", 0));
}

// VocabCeLoss, VocabCeLossGrad
void dimsVocabCeLoss(const Ctx &op, OpDims &d) {
  d.n = int64_t(op.ins->num("parts", 1));
  d.N = op.in(0).numel() / 2 / std::max<int64_t>(1, d.n);
}

// FLOPs per logit: cross_entropy 6 (max 1, exp 4, sum 1), its grad 8 (softmax 6, minus one-hot and
// scale 2); vocab_ce_stats 6, its grad 4; vocab_ce_loss(_grad) 4 per statistic.
// The fused LM head: h [N,C] @ op(w) -> N x V logits a chunk at a time, then the statistics (6 per
// logit); the gradient recomputes them (2NCV), forms dlogits (4 per logit) and multiplies twice more
// (dh, dw: 4NCV).
int64_t linearCeFlops(const OpView &v, bool grad) {
  const std::vector<int64_t> h = v.inShape(grad ? 1 : 0);
  const int64_t cdim = h.empty() ? 0 : h.back(), n = cdim ? inN(v, grad ? 1 : 0) / cdim : 0;
  const int64_t vocab = cdim ? inN(v, grad ? 2 : 1) / cdim : 0;
  return grad ? 6 * n * cdim * vocab + 4 * n * vocab : 2 * n * cdim * vocab + 6 * n * vocab;
}

} // namespace

std::vector<OpDef> lossOps() {
  const std::vector<AttrSpec> linearCe = {{"chunk", Int}, {"transpose_b", Flag}, {"vocab_axis", Int}, {"classes", Int}};
  return {
      // logits [..,V], targets [..] (i32) -> loss (the mean)
      Def("cross_entropy", OpKind::CrossEntropy)
          .in(2)
          .out(1)
          .types({Fl, I32}, {F32})
          .attrs({{"classes", Int}})
          .shape(shapeCrossEntropy)
          .dims(dimsCrossEntropy)
          .flops(perInput<6, 0>),
      // logits, targets, dloss -> dlogits (over logits)
      Def("cross_entropy_grad", OpKind::CrossEntropyGrad)
          .in(3)
          .out(1)
          .types({Fl, I32, F32}, {Fl})
          .inPlace({{0, 0}})
          .attrs({{"classes", Int}})
          .shape(shapeCrossEntropy)
          .dims(dimsCrossEntropy)
          .flops(perInput<8, 0>),
      // this rank's logit columns, targets -> stats [..,2] (max and sum of exp, target logit: vocab_ce_loss)
      Def("vocab_ce_stats", OpKind::VocabCeStats)
          .in(2)
          .out(1)
          .types({Fl, I32}, {F32})
          .attrs({{"axis", Int}, {"classes", Int}})
          .shape(shapeVocabCeStats)
          .dims(dimsCrossEntropy)
          .flops(perInput<6, 0>),
      // dstats, logits, targets, stats -> dlogits (over logits)
      Def("vocab_ce_stats_grad", OpKind::VocabCeStatsGrad)
          .in(4)
          .out(1)
          .types({F32, Fl, I32, F32}, {Fl})
          .inPlace({{0, 1}})
          .attrs({{"axis", Int}, {"classes", Int}})
          .shape(shapeVocabCeStats)
          .dims(dimsVocabCeStatsGrad)
          .flops(perInput<4, 1>),
      // the tensor ranks' stats (parts of them) -> loss
      Def("vocab_ce_loss", OpKind::VocabCeLoss)
          .in(1)
          .out(1)
          .types({F32}, {F32})
          .attrs({{"parts", Int}})
          .shape(shapeVocabCeLoss)
          .dims(dimsVocabCeLoss)
          .flops(perInput<4, 0>),
      Def("vocab_ce_loss_grad", OpKind::VocabCeLossGrad)
          .in(2)
          .out(1)
          .types({F32}, {F32})
          .attrs({{"parts", Int}})
          .shape(shapeVocabCeLoss)
          .dims(dimsVocabCeLoss)
          .flops(perInput<4, 0>),
      // h, w, targets -> stats, workspace
      Def("linear_ce_stats", OpKind::LinearCeStats)
          .in(3)
          .out(2)
          .types({Fl, Fl, I32}, {F32})
          .attrs(linearCe)
          .shape(shapeLinearCeStats)
          .dims(dimsLinearCeStats)
          .flops([](const OpView &v) { return linearCeFlops(v, false); }),
      // dstats, h, w, targets, stats -> dh, dw, workspace
      Def("linear_ce_stats_grad", OpKind::LinearCeStatsGrad)
          .in(5)
          .out(3)
          .types({F32, Fl, Fl, I32, F32}, {Fl, Fl, F32})
          .attrs(linearCe)
          .shape(shapeLinearCeStats)
          .dims(dimsLinearCeStats)
          .flops([](const OpView &v) { return linearCeFlops(v, true); }),
  };
}

} // namespace bigc::format::ops
