// The normalisations: layernorm, RMSNorm, their gradients, and their fused pairs with the residual
// add (bigc-fuse) (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// RmsNorm
void shapeRmsNorm(const Ctx &op) {
  const Buffer &x = op.in(0);
  op.minRank(x, 1, "x");
  op.wantShape(op.in(1), {x.shape.back()}, "w");
  op.wantShape(op.out(0), x.shape, "y");
  op.wantShape(op.out(1), op.lead(x), "rstd");
  if (!(op.ins->num("eps", 0) > 0)) op.bad("attribute 'eps' (a positive number) is required");
}

// RmsNormGrad
void shapeRmsNormGrad(const Ctx &op) {
  const Buffer &x = op.in(1);
  op.minRank(x, 1, "x");
  op.wantShape(op.in(0), x.shape, "dy");
  op.wantShape(op.in(2), {x.shape.back()}, "w");
  op.wantShape(op.in(3), op.lead(x), "rstd");
  op.wantShape(op.out(0), x.shape, "dx");
  op.wantShape(op.out(1), {x.shape.back()}, "dw");
}

// Layernorm
void shapeLayernorm(const Ctx &op) {
  const Buffer &x = op.in(0);
  op.minRank(x, 1, "x");
  std::vector<int64_t> c{x.shape.back()};
  op.wantShape(op.in(1), c, "w");
  op.wantShape(op.in(2), c, "b");
  op.wantShape(op.out(0), x.shape, "y");
  op.wantShape(op.out(1), op.lead(x), "mean");
  op.wantShape(op.out(2), op.lead(x), "rstd");
  if (!(op.ins->num("eps", 1e-5) > 0)) op.bad("attribute 'eps' must be a positive number");
}

// LayernormGrad
void shapeLayernormGrad(const Ctx &op) {
  const Buffer &x = op.in(1);
  op.minRank(x, 1, "x");
  std::vector<int64_t> c{x.shape.back()};
  op.wantShape(op.in(0), x.shape, "dy");
  op.wantShape(op.in(2), c, "w");
  op.wantShape(op.in(3), op.lead(x), "mean");
  op.wantShape(op.in(4), op.lead(x), "rstd");
  op.wantShape(op.out(0), x.shape, "dx");
  op.wantShape(op.out(1), c, "dw");
  op.wantShape(op.out(2), c, "db");
}

// AddLayernorm, AddRmsNorm
void shapeAddLayernorm(const Ctx &op) {
  const bool ln = op.kind == OpKind::AddLayernorm;
  const Buffer &x = op.in(0);
  op.minRank(x, 1, "a");
  std::vector<int64_t> c{x.shape.back()};
  op.wantShape(op.in(1), x.shape, "r");
  op.wantShape(op.in(2), c, "w");
  if (ln) op.wantShape(op.in(3), c, "b");
  op.wantShape(op.out(0), x.shape, "s");
  op.wantShape(op.out(1), x.shape, "y");
  for (size_t k = 2; k < op.ins->out.size(); ++k) op.wantShape(op.out(k), op.lead(x), ln && k == 2 ? "mean" : "rstd");
  if (!(op.ins->num("eps", ln ? 1e-5 : 0) > 0)) op.bad("attribute 'eps' (a positive number) is required");
}

// LayernormGradAdd, RmsNormGradAdd
void shapeLayernormGradAdd(const Ctx &op) {
  const bool ln = op.kind == OpKind::LayernormGradAdd;
  const Buffer &x = op.in(1);
  op.minRank(x, 1, "x");
  std::vector<int64_t> c{x.shape.back()};
  op.wantShape(op.in(0), x.shape, "dy");
  op.wantShape(op.in(2), c, "w");
  if (ln) op.wantShape(op.in(3), op.lead(x), "mean");
  op.wantShape(op.in(ln ? 4 : 3), op.lead(x), "rstd");
  op.wantShape(op.in(ln ? 5 : 4), x.shape, "r");
  op.wantShape(op.out(0), x.shape, "dx");
  op.wantShape(op.out(1), c, "dw");
  if (ln) op.wantShape(op.out(2), c, "db");
}

// RmsNorm, RmsNormGrad
void dimsRmsNorm(const Ctx &op, OpDims &d) {
  const Buffer &x = op.kind == OpKind::RmsNorm ? op.in(0) : op.in(1);
  d.C = x.shape.back();
  d.N = d.C ? x.numel() / d.C : 0;
  d.value = float(op.ins->num("eps", 1e-6));
}

// AddRmsNorm, RmsNormGradAdd
void dimsAddRmsNorm(const Ctx &op, OpDims &d) {
  const Buffer &x = op.kind == OpKind::AddRmsNorm ? op.in(0) : op.in(1);
  d.C = x.shape.back();
  d.N = d.C ? x.numel() / d.C : 0;
  d.value = float(op.ins->num("eps", 1e-6));
}

// Layernorm, LayernormGrad, AddLayernorm, LayernormGradAdd
void dimsLayernorm(const Ctx &op, OpDims &d) {
  const Buffer &x = op.kind == OpKind::Layernorm || op.kind == OpKind::AddLayernorm ? op.in(0) : op.in(1);
  d.C = x.shape.back();
  d.N = d.C ? x.numel() / d.C : 0;
  d.value = float(op.ins->num("eps", 1e-5));
}

// FLOPs per element of x: layernorm 8 (mean 1, variance 2, normalise + affine 4, rsqrt per row),
// its grad 14 (x-hat 2, dy*w 1, two row sums 4, dx 4, dw/db 3); rmsnorm 4 (square-sum 2, scale by
// rstd and w 2), its grad 9 (dy*w 1, row dot 2, dx 3, dw 3); the fused pairs 1 more (the add).
// x is input 0 of the forward ops, input 1 of the gradients.

} // namespace

std::vector<OpDef> normOps() {
  return {
      // x [..,C], w [C], b [C] -> y, mean [..], rstd [..]
      Def("layernorm", OpKind::Layernorm)
          .in(3)
          .out(3)
          .types({Fl}, {Fl, F32, F32})
          .attrs({{"eps", Real}})
          .shape(shapeLayernorm)
          .dims(dimsLayernorm)
          .flops(perInput<8, 0>),
      // dy, x, w, mean, rstd -> dx, dw, db
      Def("layernorm_grad", OpKind::LayernormGrad)
          .in(5)
          .out(3)
          .types({Fl, Fl, Fl, F32, F32}, {Fl})
          .shape(shapeLayernormGrad)
          .dims(dimsLayernorm)
          .flops(perInput<14, 1>),
      // x [..,C], w [C] -> y, rstd [..]
      Def("rmsnorm", OpKind::RmsNorm)
          .in(2)
          .out(2)
          .types({Fl}, {Fl, F32})
          .attrs({{"eps", Real}})
          .shape(shapeRmsNorm)
          .dims(dimsRmsNorm)
          .flops(perInput<4, 0>),
      // dy, x, w, rstd -> dx, dw
      Def("rmsnorm_grad", OpKind::RmsNormGrad)
          .in(4)
          .out(2)
          .types({Fl, Fl, Fl, F32}, {Fl})
          .shape(shapeRmsNormGrad)
          .dims(dimsRmsNorm)
          .flops(perInput<9, 1>),
      // a, r, w, b -> s = a + r (over a or r), y = layernorm(s), mean, rstd
      Def("add_layernorm", OpKind::AddLayernorm)
          .in(4)
          .out(4)
          .types({Fl}, {Fl, Fl, F32, F32})
          .inPlace({{0, 0}, {0, 1}})
          .attrs({{"eps", Real}})
          .shape(shapeAddLayernorm)
          .dims(dimsLayernorm)
          .flops(perInput<9, 0>),
      // a, r, w -> s (over a or r), y = rmsnorm(s), rstd
      Def("add_rmsnorm", OpKind::AddRmsNorm)
          .in(3)
          .out(3)
          .types({Fl}, {Fl, Fl, F32})
          .inPlace({{0, 0}, {0, 1}})
          .attrs({{"eps", Real}})
          .shape(shapeAddLayernorm)
          .dims(dimsAddRmsNorm)
          .flops(perInput<5, 0>),
      // dy, x, w, mean, rstd, r -> dx + r (over r), dw, db
      Def("layernorm_grad_add", OpKind::LayernormGradAdd)
          .in(6)
          .out(3)
          .types({Fl, Fl, Fl, F32, F32, Fl}, {Fl})
          .inPlace({{0, 5}})
          .shape(shapeLayernormGradAdd)
          .dims(dimsLayernorm)
          .flops(perInput<15, 1>),
      // dy, x, w, rstd, r -> dx + r (over r), dw
      Def("rmsnorm_grad_add", OpKind::RmsNormGradAdd)
          .in(5)
          .out(2)
          .types({Fl, Fl, Fl, F32, Fl}, {Fl})
          .inPlace({{0, 4}})
          .shape(shapeLayernormGradAdd)
          .dims(dimsAddRmsNorm)
          .flops(perInput<10, 1>),
  };
}

} // namespace bigc::format::ops
