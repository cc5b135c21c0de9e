// A mixture of experts (docs/program-format.md, "Instructions"): Mixtral's block, a top-k router
// over SwiGLU experts, as one instruction and its gradient.
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// Moe, MoeGrad: x [...,C], router [E,C], gate_up [E,2F,C], down [E,C,F]
void shapeMoe(const Ctx &op) {
  const bool grad = op.kind == OpKind::MoeGrad;
  const Buffer &x = op.in(grad ? 1 : 0), &r = op.in(grad ? 2 : 1), &gu = op.in(grad ? 3 : 2), &dn = op.in(grad ? 4 : 3);
  if (x.shape.empty()) op.bad("x must have a last dimension (the width C), " + op.desc(x) + " has none");
  const int64_t C = x.shape.back();
  if (r.shape.size() != 2 || r.shape[1] != C) op.bad("router must be [E, C], " + op.desc(r) + " is not");
  const int64_t E = r.shape[0];
  if (gu.shape.size() != 3 || gu.shape[0] != E || gu.shape[1] % 2 != 0 || gu.shape[2] != C)
    op.bad("gate_up must be [E, 2F, C], " + op.desc(gu) + " is not");
  op.wantShape(dn, {E, C, gu.shape[1] / 2}, "down");
  const double k = op.ins->num("top_k", 0);
  if (k < 1 || k > double(E) || k != std::floor(k)) op.bad("attribute 'top_k' (an integer in [1, E]) is required");
  if (grad) {
    op.sameShape(op.in(0), x, "dy");
    op.sameShape(x, op.out(0), "dx");
    op.sameShape(r, op.out(1), "drouter");
    op.sameShape(gu, op.out(2), "dgate_up");
    op.sameShape(dn, op.out(3), "ddown");
  } else {
    op.sameShape(x, op.out(0), "output");
  }
}

void dimsMoe(const Ctx &op, OpDims &d) {
  const bool grad = op.kind == OpKind::MoeGrad;
  const Buffer &x = op.in(grad ? 1 : 0), &gu = op.in(grad ? 3 : 2);
  d.C = x.shape.back();
  d.N = x.numel() / std::max<int64_t>(1, d.C);
  d.experts = gu.shape[0], d.ffn = gu.shape[1] / 2;
  d.topK = int64_t(op.ins->num("top_k", 1));
  d.normalize = op.ins->flag("normalize");
}

// Per token and chosen expert: gate_up 2*2F*C, down 2*C*F, SwiGLU ~6F; the router 2*E*C and its
// softmax. The gradient recomputes the forward and takes twice its products again.
int64_t moeFlops(const OpView &v, bool grad) {
  const std::vector<int64_t> x = v.inShape(grad ? 1 : 0), gu = v.inShape(grad ? 3 : 2);
  if (x.empty() || gu.size() != 3) return 0;
  const int64_t C = x.back(), N = v.inElements(grad ? 1 : 0) / std::max<int64_t>(1, C), E = gu[0], F = gu[1] / 2;
  const int64_t k = int64_t(v.num("top_k", 1));
  const int64_t fwd = N * (2 * E * C + 5 * E + k * (6 * F * C + 6 * F));
  return grad ? 3 * fwd : fwd;
}

} // namespace

std::vector<OpDef> moeOps() {
  const std::vector<AttrSpec> attrs = {{"top_k", Int}, {"normalize", Flag}};
  return {
      // x, router, gate_up, down -> y
      Def("moe", OpKind::Moe).in(4).out(1).attrs(attrs).shape(shapeMoe).dims(dimsMoe).flops([](const OpView &v) {
        return moeFlops(v, false);
      }),
      // dy, x, router, gate_up, down -> dx, drouter, dgate_up, ddown
      Def("moe_grad", OpKind::MoeGrad)
          .in(5)
          .out(4)
          .attrs(attrs)
          .shape(shapeMoe)
          .dims(dimsMoe)
          .flops([](const OpView &v) { return moeFlops(v, true); }),
  };
}

} // namespace bigc::format::ops
