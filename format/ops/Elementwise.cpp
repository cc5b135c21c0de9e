// The element-wise ops and their gradients, bias, reductions, fill and cast, and the fused pairs of
// bias and GELU (bigc-fuse) (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// Add, Mul
void shapeAdd(const Ctx &op) {
  op.sameShape(op.in(0), op.in(1), "inputs");
  op.sameShape(op.in(0), op.out(0), "output");
}

// BiasAdd
void shapeBiasAdd(const Ctx &op) {
  if (!isSuffix(op.in(1).shape, op.in(0).shape))
    op.bad("bias " + op.desc(op.in(1)) + " must be a suffix of x " + op.desc(op.in(0)));
  op.sameShape(op.in(0), op.out(0), "output");
}

// Scale, Gelu, Silu
void shapeScale(const Ctx &op) { op.sameShape(op.in(0), op.out(0), "output"); }

// GeluGrad, SiluGrad
void shapeGeluGrad(const Ctx &op) {
  op.sameShape(op.in(0), op.in(1), "x and dy");
  op.sameShape(op.in(0), op.out(0), "output");
}

// Swiglu, Geglu
void shapeSwiglu(const Ctx &op) {
  op.sameShape(op.in(0), op.in(1), "gate and up");
  op.sameShape(op.in(0), op.out(0), "output");
}

// SwigluGrad, GegluGrad
void shapeSwigluGrad(const Ctx &op) {
  op.sameShape(op.in(0), op.in(1), "gate and up");
  op.sameShape(op.in(0), op.in(2), "gate and dy");
  op.sameShape(op.in(0), op.out(0), "dgate");
  op.sameShape(op.in(0), op.out(1), "dup");
}

// ReduceSum
void shapeReduceSum(const Ctx &op) {
  if (!isSuffix(op.out(0).shape, op.in(0).shape))
    op.bad("output " + op.desc(op.out(0)) + " must be a suffix of x " + op.desc(op.in(0)));
}

// BiasGelu
void shapeBiasGelu(const Ctx &op) {
  if (op.in(1).shape.empty() || !isSuffix(op.in(1).shape, op.in(0).shape))
    op.bad("bias " + op.desc(op.in(1)) + " must be a non-empty suffix of x " + op.desc(op.in(0)));
  op.sameShape(op.in(0), op.out(0), "pre");
  op.sameShape(op.in(0), op.out(1), "y");
}

// GeluGradBias
void shapeGeluGradBias(const Ctx &op) {
  op.sameShape(op.in(0), op.in(1), "x and dy");
  op.sameShape(op.in(0), op.out(0), "dx");
  if (op.out(1).shape.empty() || !isSuffix(op.out(1).shape, op.in(0).shape))
    op.bad("db " + op.desc(op.out(1)) + " must be a non-empty suffix of x " + op.desc(op.in(0)));
}

// Cast
void shapeCast(const Ctx &op) { op.sameShape(op.in(0), op.out(0), "output"); }

// Add, Mul, Scale, Gelu, GeluGrad, Silu, SiluGrad, Swiglu, SwigluGrad, Geglu, GegluGrad, Fill
void dimsElementwise(const Ctx &op, OpDims &d) {
  d.n = op.out(0).numel();
  d.value = float(op.ins->num(op.kind == OpKind::Scale ? "factor" : "value", op.kind == OpKind::Scale ? 1.0 : 0.0));
  d.exact = op.ins->flag("exact");
}

// Softcap, SoftcapGrad: the cap in `value`
void dimsSoftcap(const Ctx &op, OpDims &d) {
  d.n = op.out(0).numel();
  d.value = float(op.ins->num("cap", 0.0));
}
void shapeSoftcap(const Ctx &op) {
  const double cap = op.ins->num("cap", 0.0);
  if (!(cap > 0) || !std::isfinite(cap)) op.bad("attribute 'cap' (a finite number > 0) is required");
  if (op.kind == OpKind::SoftcapGrad) op.sameShape(op.in(0), op.in(1), "y and dy");
  op.sameShape(op.in(0), op.out(0), "output");
}

// BiasAdd
void dimsBiasAdd(const Ctx &op, OpDims &d) {
  d.cols = op.in(1).numel();
  d.rows = d.cols ? op.in(0).numel() / d.cols : 0;
}

// ReduceSum
void dimsReduceSum(const Ctx &op, OpDims &d) {
  d.cols = op.out(0).numel();
  d.rows = d.cols ? op.in(0).numel() / d.cols : 0;
}

// BiasGelu
void dimsBiasGelu(const Ctx &op, OpDims &d) {
  d.cols = op.in(1).numel();
  d.n = op.in(0).numel();
  d.rows = d.cols ? d.n / d.cols : 0;
  d.exact = op.ins->flag("exact");
}

// GeluGradBias
void dimsGeluGradBias(const Ctx &op, OpDims &d) {
  d.cols = op.out(1).numel();
  d.n = op.in(0).numel();
  d.rows = d.cols ? d.n / d.cols : 0;
  d.exact = op.ins->flag("exact");
}

// Cast
void dimsCast(const Ctx &op, OpDims &d) { d.n = op.in(0).numel(); }

// FLOPs per element of the result: add, mul, bias_add, scale 1;
// gelu (tanh approximation: x^3 2, polynomial 3, tanh 4, 1+t and 0.5x(..) 3) 12, its grad 18;
// silu (exp 3, 1+e and the division 2) 5, its grad 8; swiglu 6, its grad 10; geglu GELU's and the
// product (13), its grad GELU's value and derivative and three products (12 + 6 + 3 = 21); the fused
// pairs: the pair's, 1 + GELU's.
// reduce_sum: 1 per input element.

} // namespace

std::vector<OpDef> elementwiseOps() {
  return {
      Def("add", OpKind::Add).in(2).out(1).inPlace().shape(shapeAdd).dims(dimsElementwise).flops(perResult<1>),
      // x [..,C] + b [C] (a suffix of x's shape)
      Def("bias_add", OpKind::BiasAdd).in(2).out(1).inPlace().shape(shapeBiasAdd).dims(dimsBiasAdd).flops(perResult<1>),
      Def("mul", OpKind::Mul).in(2).out(1).inPlace().shape(shapeAdd).dims(dimsElementwise).flops(perResult<1>),
      Def("scale", OpKind::Scale)
          .in(1)
          .out(1)
          .inPlace()
          .attrs({{"factor", Real}})
          .shape(shapeScale)
          .dims(dimsElementwise)
          .flops(perResult<1>),
      // x [..,C] -> [C] (a suffix of x's shape): sums over the leading dimensions
      Def("reduce_sum", OpKind::ReduceSum).in(1).out(1).shape(shapeReduceSum).dims(dimsReduceSum).flops(perInput<1, 0>),
      Def("fill", OpKind::Fill).in(0).out(1).attrs({{"value", Real}}).dims(dimsElementwise).flops(zeroFlops),
      Def("gelu", OpKind::Gelu)
          .in(1)
          .out(1)
          .inPlace()
          .attrs({{"exact", Flag}})
          .shape(shapeScale)
          .dims(dimsElementwise)
          .flops(perResult<12>),
      // x, dy -> dx
      Def("gelu_grad", OpKind::GeluGrad)
          .in(2)
          .out(1)
          .inPlace()
          .attrs({{"exact", Flag}})
          .shape(shapeGeluGrad)
          .dims(dimsElementwise)
          .flops(perResult<18>),
      Def("silu", OpKind::Silu).in(1).out(1).inPlace().shape(shapeScale).dims(dimsElementwise).flops(perResult<5>),
      // cap * tanh(x / cap) (Gemma 2's logits); its gradient from the result y: dy (1 - (y / cap)^2)
      Def("softcap", OpKind::Softcap)
          .in(1)
          .out(1)
          .inPlace()
          .attrs({{"cap", Real}})
          .shape(shapeSoftcap)
          .dims(dimsSoftcap)
          .flops(perResult<8>),
      Def("softcap_grad", OpKind::SoftcapGrad)
          .in(2)
          .out(1)
          .inPlace()
          .attrs({{"cap", Real}})
          .shape(shapeSoftcap)
          .dims(dimsSoftcap)
          .flops(perResult<4>),
      Def("silu_grad", OpKind::SiluGrad)
          .in(2)
          .out(1)
          .inPlace()
          .shape(shapeGeluGrad)
          .dims(dimsElementwise)
          .flops(perResult<8>),
      // silu(gate) * up
      Def("swiglu", OpKind::Swiglu).in(2).out(1).inPlace().shape(shapeSwiglu).dims(dimsElementwise).flops(perResult<6>),
      // gate, up, dy -> dgate, dup
      Def("swiglu_grad", OpKind::SwigluGrad)
          .in(3)
          .out(2)
          .shape(shapeSwigluGrad)
          .dims(dimsElementwise)
          .flops(perResult<10>),
      Def("cast", OpKind::Cast).in(1).out(1).ownDtypes().shape(shapeCast).dims(dimsCast).flops(zeroFlops),
      // gelu(gate) * up (GeGLU); `exact`: the erf GELU
      Def("geglu", OpKind::Geglu)
          .in(2)
          .out(1)
          .inPlace()
          .attrs({{"exact", Flag}})
          .shape(shapeSwiglu)
          .dims(dimsElementwise)
          .flops(perResult<13>),
      // gate, up, dy -> dgate, dup
      Def("geglu_grad", OpKind::GegluGrad)
          .in(3)
          .out(2)
          .attrs({{"exact", Flag}})
          .shape(shapeSwigluGrad)
          .dims(dimsElementwise)
          .flops(perResult<21>),
      // x, b -> pre = x + b (over x), y = gelu(pre)
      Def("bias_gelu", OpKind::BiasGelu)
          .in(2)
          .out(2)
          .inPlace({{0, 0}})
          .attrs({{"exact", Flag}})
          .shape(shapeBiasGelu)
          .dims(dimsBiasGelu)
          .flops(perResult<13>),
      // x, dy -> dx (over x or dy), db
      Def("gelu_grad_bias", OpKind::GeluGradBias)
          .in(2)
          .out(2)
          .inPlace({{0, 0}, {0, 1}})
          .attrs({{"exact", Flag}})
          .shape(shapeGeluGradBias)
          .dims(dimsGeluGradBias)
          .flops(perResult<19>),
  };
}

} // namespace bigc::format::ops
