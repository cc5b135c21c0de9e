//===- Fuse.cpp - bigc-fuse -----------------------------------------------===//
//
// Pairs of memory-bound ops of @train_step become one op each (see the
// description in Passes.td): the residual add and the norm that reads it, the
// norm's input gradient and the residual gradient added to it, the bias and
// the GELU after it, the GELU's gradient and its bias gradient.
//
//===----------------------------------------------------------------------===//

#include "MemoryPlanAnalysis.h"
#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCFUSE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// Whether two ops may become one: the same discardable attributes (phase, micro-batch, recompute,
/// a zero-bubble pipeline's weight-gradient part, ...) but for the layer, and the same block.
bool compatible(Operation *a, Operation *b) {
  if (a->getBlock() != b->getBlock()) return false;
  auto strip = [](Operation *op) {
    SmallVector<NamedAttribute> attrs;
    for (NamedAttribute na : op->getDiscardableAttrs())
      if (na.getName().getValue() != kLayerAttrName) attrs.push_back(na);
    return DictionaryAttr::get(op->getContext(), attrs);
  };
  return strip(a) == strip(b);
}

/// Every use of `v` except by `except` comes after `anchor` in its block.
bool usesAfter(Value v, Operation *anchor, Operation *except) {
  for (Operation *user : v.getUsers()) {
    if (user == except) continue;
    if (user->getBlock() != anchor->getBlock() || !anchor->isBeforeInBlock(user)) return false;
  }
  return true;
}

/// `v` is available at `anchor`: a block argument, or defined before it in its block.
bool definedBefore(Value v, Operation *anchor) {
  if (auto arg = dyn_cast<BlockArgument>(v)) return arg.getOwner() == anchor->getBlock();
  Operation *def = v.getDefiningOp();
  return def->getBlock() == anchor->getBlock() && def->isBeforeInBlock(anchor);
}

void copyAttrs(Operation *from, Operation *to) {
  for (NamedAttribute na : from->getDiscardableAttrs()) to->setAttr(na.getName(), na.getValue());
}

/// add + layernorm (rmsnorm): the fused op at the norm, when nothing reads the sum in between.
template <class Norm> bool fuseAddNorm(Norm norm, OpBuilder &b) {
  auto add = norm.getX().template getDefiningOp<AddOp>();
  if (!add || !compatible(add, norm) || !usesAfter(add.getC(), norm, norm)) return false;
  b.setInsertionPoint(norm);
  Operation *fused;
  if constexpr (std::is_same_v<Norm, LayerNormOp>) {
    auto f = b.create<AddLayerNormOp>(
        norm.getLoc(),
        TypeRange{add.getType(), norm.getY().getType(), norm.getMean().getType(), norm.getRstd().getType()}, add.getA(),
        add.getB(), norm.getW(), norm.getB(), b.getF64FloatAttr(norm.getEps().convertToDouble()));
    norm.getY().replaceAllUsesWith(f.getY());
    norm.getMean().replaceAllUsesWith(f.getMean());
    norm.getRstd().replaceAllUsesWith(f.getRstd());
    add.getC().replaceAllUsesWith(f.getS());
    fused = f;
  } else {
    auto f =
        b.create<AddRmsNormOp>(norm.getLoc(), TypeRange{add.getType(), norm.getY().getType(), norm.getRstd().getType()},
                               add.getA(), add.getB(), norm.getW(), b.getF64FloatAttr(norm.getEps().convertToDouble()));
    norm.getY().replaceAllUsesWith(f.getY());
    norm.getRstd().replaceAllUsesWith(f.getRstd());
    add.getC().replaceAllUsesWith(f.getS());
    fused = f;
  }
  copyAttrs(norm, fused);
  norm->erase();
  add->erase();
  return true;
}

/// layernorm_grad (rmsnorm_grad) + add of its dx: the fused op at the gradient when the other
/// summand is ready there, else at the add when nothing reads dw (db) before it.
template <class Grad> bool fuseNormGradAdd(Grad g, OpBuilder &b) {
  Value dx = g.getDx();
  if (!dx.hasOneUse()) return false;
  auto add = dyn_cast<AddOp>(*dx.getUsers().begin());
  if (!add || add.getA() == add.getB() || !compatible(g, add)) return false;
  Value r = add.getA() == dx ? add.getB() : add.getA();
  Operation *at = nullptr;
  if (definedBefore(r, g))
    at = g;
  else if (llvm::all_of(g->getResults().drop_front(), [&](Value v) { return usesAfter(v, add, nullptr); }))
    at = add;
  if (!at) return false;
  b.setInsertionPoint(at);
  Operation *fused;
  if constexpr (std::is_same_v<Grad, LayerNormGradOp>) {
    auto f =
        b.create<LayerNormGradAddOp>(g.getLoc(), TypeRange{add.getType(), g.getDw().getType(), g.getDb().getType()},
                                     g.getDy(), g.getX(), g.getW(), g.getMean(), g.getRstd(), r);
    g.getDw().replaceAllUsesWith(f.getDw());
    g.getDb().replaceAllUsesWith(f.getDb());
    add.getC().replaceAllUsesWith(f.getDx());
    fused = f;
  } else {
    auto f = b.create<RmsNormGradAddOp>(g.getLoc(), TypeRange{add.getType(), g.getDw().getType()}, g.getDy(), g.getX(),
                                        g.getW(), g.getRstd(), r);
    g.getDw().replaceAllUsesWith(f.getDw());
    add.getC().replaceAllUsesWith(f.getDx());
    fused = f;
  }
  copyAttrs(g, fused);
  add->erase();
  g->erase();
  return true;
}

/// bias_add + gelu: the fused op at the gelu, when nothing reads the biased value in between.
bool fuseBiasGelu(GeluOp gelu, OpBuilder &b) {
  auto bias = gelu.getX().getDefiningOp<BiasAddOp>();
  if (!bias || !compatible(bias, gelu) || !usesAfter(bias.getY(), gelu, gelu)) return false;
  b.setInsertionPoint(gelu);
  auto f = b.create<BiasGeluOp>(gelu.getLoc(), TypeRange{bias.getType(), gelu.getType()}, bias.getX(), bias.getB(),
                                gelu.getApproximateAttr());
  copyAttrs(gelu, f);
  gelu.getY().replaceAllUsesWith(f.getY());
  bias.getY().replaceAllUsesWith(f.getPre());
  gelu->erase();
  bias->erase();
  return true;
}

/// gelu_grad + the reduce_sum of its result (the bias gradient): the fused op at the gelu_grad.
bool fuseGeluGradBias(GeluGradOp g, OpBuilder &b) {
  ReduceSumOp sum;
  for (Operation *user : g.getDx().getUsers())
    if (auto s = dyn_cast<ReduceSumOp>(user);
        s && !sum && compatible(g, s) && !cast<RankedTensorType>(s.getType()).getShape().empty())
      sum = s;
  if (!sum) return false;
  b.setInsertionPoint(g);
  auto f = b.create<GeluGradBiasOp>(g.getLoc(), TypeRange{g.getType(), sum.getType()}, g.getX(), g.getDy(),
                                    g.getApproximateAttr());
  copyAttrs(g, f);
  sum.getY().replaceAllUsesWith(f.getDb());
  g.getDx().replaceAllUsesWith(f.getDx());
  sum->erase();
  g->erase();
  return true;
}

struct BigcFusePass : public mlir::bigc::impl::BigcFuseBase<BigcFusePass> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp step = getTrainStep(getOperation());
    if (!step) {
      getOperation().emitError("bigc-fuse: no @train_step (run bigc-autodiff first)");
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    step.walk([&](Operation *op) {
      if (isa<LayerNormOp, RmsNormOp, LayerNormGradOp, RmsNormGradOp, GeluOp, GeluGradOp>(op)) ops.push_back(op);
    });
    OpBuilder b(&getContext());
    for (Operation *op : ops) {
      if (auto ln = dyn_cast<LayerNormOp>(op))
        fuseAddNorm(ln, b);
      else if (auto rn = dyn_cast<RmsNormOp>(op))
        fuseAddNorm(rn, b);
      else if (auto lg = dyn_cast<LayerNormGradOp>(op))
        fuseNormGradAdd(lg, b);
      else if (auto rg = dyn_cast<RmsNormGradOp>(op))
        fuseNormGradAdd(rg, b);
      else if (auto ge = dyn_cast<GeluOp>(op))
        fuseBiasGelu(ge, b);
      else if (auto gg = dyn_cast<GeluGradOp>(op))
        fuseGeluGradBias(gg, b);
    }
  }
};

} // namespace
