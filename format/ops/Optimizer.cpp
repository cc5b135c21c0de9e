// The optimizer's ops: AdamW (with clipping, loss-scale unscaling, overflow skipping, a 16-bit
// copy and chunks), the global norm, the finite check and the dynamic loss scale
// (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// GlobalNorm
void shapeGlobalNorm(const Ctx &op) { op.wantShape(op.out(0), {}, "norm"); }

// CheckFinite
void shapeCheckFinite(const Ctx &op) { op.wantShape(op.out(0), {}, "flag"); }

// LossScaleUpdate
void shapeLossScaleUpdate(const Ctx &op) {
  for (size_t k = 0; k < 3; ++k) op.wantShape(op.in(k), {}, "input " + std::to_string(k));
  if (op.ins->out[0] != op.ins->in[1] || op.ins->out[1] != op.ins->in[2])
    op.bad("outputs must be the scale and good inputs (updated in place): in " + shapeStr(op.ins->in) + ", out " +
           shapeStr(op.ins->out));
  if (op.ins->in[0] == op.ins->in[1] || op.ins->in[0] == op.ins->in[2] || op.ins->in[1] == op.ins->in[2])
    op.bad("flag, scale and good must be distinct buffers");
  double n = op.ins->num("growth_interval", 2000), backoff = op.ins->num("backoff", 0.5),
         growth = op.ins->num("growth", 2);
  if (!(n >= 1) || n != std::floor(n)) op.bad("attribute 'growth_interval' must be a positive integer");
  if (!(backoff > 0 && backoff <= 1)) op.bad("attribute 'backoff' must be in (0, 1]");
  if (!(growth >= 1) || !std::isfinite(growth)) op.bad("attribute 'growth' must be >= 1");
}

// AdamW
void shapeAdamW(const Ctx &op) {
  const Buffer &param = op.in(0);
  const bool chunk = op.ins->attrs.count("count") || op.ins->attrs.count("offset");
  if (chunk) { // elements [offset, offset + count) of the gradient; param, m, v hold them at [0, count)
    const double c = op.ins->num("count", 0), o = op.ins->num("offset", -1);
    if (c != std::floor(c) || c < 1 || o != std::floor(o) || o < 0)
      op.bad("attributes 'offset' (an integer >= 0) and 'count' (an integer >= 1) go together");
    if (o + c > double(op.in(1).numel()))
      op.bad("elements [" + std::to_string(int64_t(o)) + ", " + std::to_string(int64_t(o + c)) + ") of a gradient of " +
             std::to_string(op.in(1).numel()) + ": out of range");
    for (size_t k : {size_t(0), size_t(2), size_t(3)})
      if (double(op.in(k).numel()) < c)
        op.bad(std::string(k == 0   ? "param"
                           : k == 2 ? "m"
                                    : "v") +
               " holds " + std::to_string(op.in(k).numel()) + " elements, fewer than the update's " +
               std::to_string(int64_t(c)));
    if (op.ins->out.size() == 4 && op.out(3).numel() != op.in(1).numel() && double(op.out(3).numel()) < c)
      op.bad("half holds " + std::to_string(op.out(3).numel()) + " elements: neither the gradient's " +
             std::to_string(op.in(1).numel()) + " nor at least the update's " + std::to_string(int64_t(c)));
  } else {
    op.wantShape(op.in(1), param.shape, "grad");
    op.wantShape(op.in(2), param.shape, "m");
    op.wantShape(op.in(3), param.shape, "v");
  }
  if (op.ins->attrs.count("weight")) {
    const double w = op.ins->num("weight", -1);
    if (w != std::floor(w) || w < 0 || w >= double(op.p.buffers.size()) || !op.p.buffers[size_t(w)].persistent())
      op.bad("attribute 'weight' must be the id of a persistent buffer (the tensor of record)");
  }
  for (size_t k = 4; k < op.ins->in.size(); ++k)
    op.wantShape(op.in(k), {}, "optional scalar input " + std::to_string(k));
  if (op.ins->out.size() == 4) {
    if (!chunk) op.wantShape(op.out(3), param.shape, "half");
    for (size_t k = 0; k < op.ins->in.size(); ++k)
      if (op.ins->in[k] == op.ins->out[3])
        op.bad("half (output 3) must be a buffer of its own, not input " + std::to_string(k));
  }
  if (op.ins->out[0] != op.ins->in[0] || op.ins->out[1] != op.ins->in[2] || op.ins->out[2] != op.ins->in[3])
    op.bad("outputs must be the param, m and v inputs (updated in place): in " + shapeStr(op.ins->in) + ", out " +
           shapeStr(op.ins->out));
  if (op.ins->in[0] == op.ins->in[2] || op.ins->in[0] == op.ins->in[3] || op.ins->in[2] == op.ins->in[3] ||
      op.ins->in[1] == op.ins->in[0] || op.ins->in[1] == op.ins->in[2] || op.ins->in[1] == op.ins->in[3])
    op.bad("param, grad, m and v must be distinct buffers");
}

// AdamW
void dimsAdamW(const Ctx &op, OpDims &d) {
  const Optimizer &o = op.p.optimizer;
  d.n = op.in(0).numel();
  if (op.ins->attrs.count("count")) { // a chunk: elements [offset, offset + count) of the gradient
    d.n = int64_t(op.ins->num("count", 0));
    d.gradOffset = int64_t(op.ins->num("offset", 0));
    if (op.ins->flag("write_half") && op.out(3).numel() == op.in(1).numel()) d.halfOffset = d.gradOffset;
  }
  d.baseLr = op.ins->num("lr", o.lr);
  d.adam.lr = float(d.baseLr);
  d.adam.beta1 = float(op.ins->num("beta1", o.beta1));
  d.adam.beta2 = float(op.ins->num("beta2", o.beta2));
  d.adam.eps = float(op.ins->num("eps", o.eps));
  d.adam.weightDecay = float(op.ins->num("weight_decay", o.weightDecay));
  d.adam.gradScale = 1.0f;
  d.maxNorm = op.ins->num("max_norm", o.gradClip);
  d.clip = op.ins->flag("clip"), d.unscale = op.ins->flag("unscale"), d.skip = op.ins->flag("skip_on_overflow");
  d.writeHalf = op.ins->flag("write_half");
  int k = 4;
  if (d.clip) d.iNorm = k++;
  if (d.unscale) d.iScale = k++;
  if (d.skip) d.iFound = k++;
}

// LossScaleUpdate
void dimsLossScaleUpdate(const Ctx &op, OpDims &d) {
  d.growthInterval = op.ins->num("growth_interval", 2000);
  d.backoff = op.ins->num("backoff", 0.5);
  d.growth = op.ins->num("growth", 2.0);
}

// global_norm: 2 per input element; check_finite: 1; loss_scale_update: 4; adamw: 16 per
// parameter element (a chunk's: `count`). (The state AdamW reads and writes besides its operands is
// the compiler's to count: CostModel.cpp.)
int64_t flopsGlobalNorm(const OpView &v) { return 2 * allInN(v); }
int64_t flopsCheckFinite(const OpView &v) { return allInN(v); }
int64_t flopsAdamW(const OpView &v) { return 16 * (v.has("count") ? int64_t(v.num("count", 0)) : inN(v, 0)); }

} // namespace

std::vector<OpDef> optimizerOps() {
  return {
      Def("global_norm", OpKind::GlobalNorm)
          .in(1, -1)
          .out(1)
          .types({Fl}, {F32})
          .ownDtypes()
          .shape(shapeGlobalNorm)
          .flops(flopsGlobalNorm),
      // param, grad, m, v [, norm (clip)] [, loss_scale (unscale)] [, found_inf (skip_on_overflow)]
      // -> param, m, v (in place) [, half (write_half)]
      Def("adamw", OpKind::AdamW)
          .in(4, 7)
          .out(3, 4)
          .types({F32, Fl, Fl, Fl, F32}, {F32, Fl, Fl, Fl})
          .ownDtypes()
          .attrs({{"lr", Real},
                  {"beta1", Real},
                  {"beta2", Real},
                  {"eps", Real},
                  {"weight_decay", Real},
                  {"max_norm", Real},
                  {"clip", Flag},
                  {"unscale", Flag},
                  {"skip_on_overflow", Flag},
                  {"write_half", Flag},
                  {"offset", Int},
                  {"count", Int},
                  {"weight", Int}})
          .shape(shapeAdamW)
          .dims(dimsAdamW)
          .flops(flopsAdamW),
      Def("check_finite", OpKind::CheckFinite)
          .in(1, -1)
          .out(1)
          .types({Fl}, {F32})
          .ownDtypes()
          .shape(shapeCheckFinite)
          .flops(flopsCheckFinite),
      // found_inf, scale, good -> scale, good (in place)
      Def("loss_scale_update", OpKind::LossScaleUpdate)
          .in(3)
          .out(2)
          .types({F32}, {F32})
          .ownDtypes()
          .attrs({{"growth_interval", Int}, {"backoff", Real}, {"growth", Real}})
          .shape(shapeLossScaleUpdate)
          .dims(dimsLossScaleUpdate)
          .flops([](const OpView &) -> int64_t { return 4; }),
  };
}

} // namespace bigc::format::ops
