// The dense ops: matmul, embedding and its gradient (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// Embedding
void shapeEmbedding(const Ctx &op) {
  const Buffer &t = op.in(0), &ids = op.in(1), &y = op.out(0);
  if (t.shape.size() != 2) op.bad("table must be [V,C], " + op.desc(t) + " is not");
  op.classesWithin(t.shape[0] * (op.ins->num("vocab_axis", 0) == 1 ? op.p.tp : 1));
  auto want = ids.shape;
  want.push_back(t.shape[1]);
  op.wantShape(y, want, "output");
}

// EmbeddingGrad
void shapeEmbeddingGrad(const Ctx &op) {
  const Buffer &dy = op.in(0), &ids = op.in(1), &dt = op.out(0);
  if (dt.shape.size() != 2) op.bad("dtable must be [V,C], " + op.desc(dt) + " is not");
  op.classesWithin(dt.shape[0] * (op.ins->num("vocab_axis", 0) == 1 ? op.p.tp : 1));
  auto want = ids.shape;
  want.push_back(dt.shape[1]);
  op.wantShape(dy, want, "dy");
}

// Matmul
void shapeMatmul(const Ctx &op) {
  const Buffer &a = op.in(0), &b = op.in(1), &c = op.out(0);
  bool ta = op.ins->flag("transpose_a"), tb = op.ins->flag("transpose_b");
  size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || rb < 2) op.bad("matmul operands must have rank >= 2: " + op.desc(a) + " @ " + op.desc(b));
  std::vector<int64_t> want;
  if (ra == 2 && rb == 2) {
  } else if (ra > 2 && rb == 2) {
    if (ta)
      op.bad("matmul shape: transpose_a is not allowed when a has rank > 2 and b rank 2 (" + op.desc(a) + " @ " +
             op.desc(b) + ")");
  } else if (ra == rb) {
    if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
      op.bad("batched matmul shape mismatch: leading dimensions differ: " + op.desc(a) + " @ " + op.desc(b));
  } else {
    op.bad("matmul shape: unsupported ranks " + std::to_string(ra) + " and " + std::to_string(rb) + " (" + op.desc(a) +
           " @ " + op.desc(b) + "); allowed: 2@2, N@2, N@N with equal leading dims");
  }
  int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t K2 = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  if (K != K2)
    op.bad("matmul shape mismatch: inner dimensions " + std::to_string(K) + " and " + std::to_string(K2) + " differ (" +
           op.desc(a) + (ta ? "ᵀ" : "") + " @ " + op.desc(b) + (tb ? "ᵀ" : "") + ")");
  want.assign(a.shape.begin(), a.shape.end() - 2);
  want.push_back(M);
  want.push_back(N);
  if (c.shape != want)
    op.bad("matmul shape mismatch: output must be " + shapeStr(want) + ", " + op.desc(c) + " is not");
}

// Embedding
void dimsEmbedding(const Ctx &op, OpDims &d) {
  d.V = op.in(0).shape[0], d.C = op.in(0).shape[1], d.n = op.in(1).numel();
  d.vocabParallel = op.ins->num("vocab_axis", 0) == 1;
  d.vocab = d.vocabParallel ? d.V * op.p.tp : d.V;
  d.classes = int64_t(op.ins->num("classes", 0)); // a padded table: ids from here on are no tokens
}

// EmbeddingGrad
void dimsEmbeddingGrad(const Ctx &op, OpDims &d) {
  d.V = op.out(0).shape[0], d.C = op.out(0).shape[1], d.n = op.in(1).numel();
  d.vocabParallel = op.ins->num("vocab_axis", 0) == 1;
  d.vocab = d.vocabParallel ? d.V * op.p.tp : d.V;
  d.classes = int64_t(op.ins->num("classes", 0));
}

// Matmul
void dimsMatmul(const Ctx &op, OpDims &d) {
  const auto &a = op.in(0).shape, &b = op.in(1).shape;
  size_t ra = a.size(), rb = b.size();
  d.ta = op.ins->flag("transpose_a"), d.tb = op.ins->flag("transpose_b");
  d.N = d.tb ? b[rb - 2] : b[rb - 1];
  d.K = d.tb ? b[rb - 1] : b[rb - 2];
  if (ra > 2 && rb == 2) { // linear layer: flatten a's leading dims
    d.batch = 1;
    d.M = prod(a, 0, ra - 1);
  } else {
    d.batch = prod(a, 0, ra - 2);
    d.M = d.ta ? a[ra - 1] : a[ra - 2];
    if (d.batch > 1) d.sA = d.M * d.K, d.sB = d.K * d.N, d.sC = d.M * d.N;
  }
}

// matmul: 2 * elements(result) * K.
int64_t flopsMatmul(const OpView &v) {
  const std::vector<int64_t> a = v.inShape(0);
  const int64_t k =
      a.size() >= 2 ? (v.has("transpose_a") && v.num("transpose_a", 0) != 0 ? a[a.size() - 2] : a.back()) : 0;
  return 2 * n0(v) * k;
}
// embedding_grad: a scatter-add, 1 per dy element.

} // namespace

std::vector<OpDef> denseOps() {
  return {
      // a [..,M,K] @ b [K,N] (or batched, equal leading dims) -> [..,M,N]
      Def("matmul", OpKind::Matmul)
          .in(2)
          .out(1)
          .attrs({{"transpose_a", Flag}, {"transpose_b", Flag}})
          .shape(shapeMatmul)
          .dims(dimsMatmul)
          .flops(flopsMatmul),
      // table [V,C], ids [..] (i32) -> [..,C]; a gather: one row read per id
      Def("embedding", OpKind::Embedding)
          .in(2)
          .out(1)
          .types({Fl, I32}, {Fl})
          .attrs({{"vocab_axis", Int}, {"classes", Int}})
          .shape(shapeEmbedding)
          .dims(dimsEmbedding)
          .flops(zeroFlops)
          .bytes(CostBytes::Gather),
      // dy [..,C], ids [..] -> dtable [V,C]
      Def("embedding_grad", OpKind::EmbeddingGrad)
          .in(2)
          .out(1)
          .types({Fl, I32}, {Fl})
          .attrs({{"vocab_axis", Int}, {"classes", Int}})
          .shape(shapeEmbeddingGrad)
          .dims(dimsEmbeddingGrad)
          .flops(perInput<1, 0>),
  };
}

} // namespace bigc::format::ops
