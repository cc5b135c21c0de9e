//===- MixedPrecision.cpp - bigc-mixed-precision -------------------------===//
//
// fp32 train step -> 16-bit compute copies and activations, fp32 masters,
// moments and statistics; fp16 adds dynamic loss scaling (see the
// description in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// True for the results that stay f32 in every precision: statistics
/// (layernorm mean/rstd, attention lse) and scalars (loss, seeds, norms,
/// flags).
bool staysF32(OpResult r) {
  Operation *op = r.getOwner();
  if (isa<LayerNormOp>(op) && r.getResultNumber() > 0) return true;
  if (isa<AttentionOp, GqaAttentionOp, RmsNormOp>(op) && r.getResultNumber() == 1) return true;
  // The vocabulary-parallel loss's statistics, and the tensor-parallel moves
  // and slices of values that stay f32.
  if (isa<VocabCeStatsOp, VocabCeLossGradOp>(op)) return true;
  // The fused LM head's statistics and workspaces (f32 logits of a chunk, f32 accumulators).
  if (isa<LinearCeStatsOp>(op) || (isa<LinearCeStatsGradOp>(op) && r.getResultNumber() == 2)) return true;
  if (isa<TpAllGatherOp, TpSliceOp, TpAllReduceOp, TpCopyOp, TpReduceScatterOp>(op))
    if (auto d = dyn_cast<OpResult>(op->getOperand(0))) return staysF32(d);
  auto t = dyn_cast<RankedTensorType>(r.getType());
  return !t || t.getRank() == 0;
}

/// The seed of the backward (dloss): the first op of phase "backward", a
/// scalar f32 bigc.fill written by bigc-autodiff.
Operation *findLossSeed(Block &block) {
  for (Operation &op : block.without_terminator()) {
    if (phaseOf(&op) != kBackwardPhase) continue;
    if (auto f = dyn_cast<FillOp>(op))
      if (cast<RankedTensorType>(f.getType()).getRank() == 0) return &op;
    return nullptr;
  }
  return nullptr;
}

/// Rebuilds `a` with the extra operands / half symbol, keeping every
/// discardable attribute (phase, layer, ...).
AdamWOp rebuildAdamW(OpBuilder &b, AdamWOp a, Value scale, Value found, FlatSymbolRefAttr half) {
  b.setInsertionPoint(a);
  auto n = b.create<AdamWOp>(a.getLoc(), a.getGrad(), a.getNorm(), scale ? scale : a.getLossScale(),
                             found ? found : a.getFoundInf(), a.getParamAttr(), a.getExpAvgAttr(), a.getExpAvgSqAttr(),
                             a.getLrAttr(), a.getBeta1Attr(), a.getBeta2Attr(), a.getEpsAttr(), a.getWeightDecayAttr(),
                             a.getMaxNormAttr(), half ? half : a.getHalfAttr(), a.getOffsetAttr(), a.getCountAttr(),
                             a.getWeightAttr());
  for (NamedAttribute na : a->getDiscardableAttrs()) n->setAttr(na.getName(), na.getValue());
  a.erase();
  return n;
}

struct BigcMixedPrecisionPass : public mlir::bigc::impl::BigcMixedPrecisionBase<BigcMixedPrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (precision != "bf16" && precision != "fp16")
      return module.emitError("bigc-mixed-precision: precision must be bf16 "
                              "or fp16, got '")
             << precision << "'";
    if (module->hasAttr(kPrecisionAttrName))
      return module.emitError("bigc-mixed-precision: already applied "
                              "(the module has bigc.precision)");
    const bool fp16 = precision == "fp16";
    if (fp16 && !(lossScale > 0.0))
      return module.emitError("bigc-mixed-precision: loss-scale must be "
                              "positive, got ")
             << lossScale;
    if (fp16 && growthInterval < 1)
      return module.emitError("bigc-mixed-precision: growth-interval must be "
                              ">= 1, got ")
             << growthInterval;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      return module.emitError("bigc-mixed-precision: the module has no "
                              "func.func @train_step of one block (run "
                              "bigc-autodiff first)");
    Block &block = func.front();
    Type half = fp16 ? Type(Float16Type::get(ctx)) : Type(BFloat16Type::get(ctx));
    auto to16 = [&](Type t) -> RankedTensorType {
      auto rt = cast<RankedTensorType>(t);
      return RankedTensorType::get(rt.getShape(), half);
    };

    // 1. Masters and compute copies.
    OpBuilder mb(ctx);
    llvm::StringMap<FlatSymbolRefAttr> halfOf;
    SymbolTable existing(module); // (the names before the copies: each derives from its own weight's)
    for (ParamOp p : llvm::to_vector(module.getOps<ParamOp>())) {
      if (p.getRole() != kParamRole) continue;
      if (!p.getTensorType().getElementType().isF32())
        return p.emitError("bigc-mixed-precision: weight @")
               << p.getSymName() << " must be f32 (its fp32 master is what "
               << "the optimizer updates), got " << p.getTensorType();
      std::string name = (p.getSymName() + ".half").str();
      if (Operation *clash = existing.lookup(name))
        return clash->emitError("bigc-mixed-precision: the symbol @\"")
               << name << "\" (compute copy of @" << p.getSymName() << ") already exists";
      p.setRole(kMasterRole);
      mb.setInsertionPointAfter(p);
      auto h = mb.create<ParamOp>(p.getLoc(), mb.getStringAttr(name), TypeAttr::get(to16(p.getType())),
                                  mb.getStringAttr(kInitCopy), FloatAttr(), mb.getStringAttr(kParamRole),
                                  p.getSymNameAttr(), FloatAttr());
      copyTpSplit(p, h);
      halfOf[p.getSymName()] = FlatSymbolRefAttr::get(h.getSymNameAttr());
    }

    // 2. Types of the step, in place; reads of weights go to the copies.
    SmallVector<AdamWOp> updates;
    for (Operation &op : block.without_terminator()) {
      if (auto gp = dyn_cast<GetParamOp>(op)) {
        auto it = halfOf.find(gp.getParam());
        if (it != halfOf.end()) {
          gp.setParamAttr(it->second);
          gp.getResult().setType(to16(gp.getType()));
        }
        continue;
      }
      if (auto a = dyn_cast<AdamWOp>(op)) {
        updates.push_back(a);
        continue;
      }
      for (OpResult r : op.getResults()) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        if (!t || !t.getElementType().isF32() || staysF32(r)) continue;
        r.setType(to16(t));
      }
    }
    for (AdamWOp &a : updates) {
      auto it = halfOf.find(a.getParam());
      if (it != halfOf.end()) a = rebuildAdamW(mb, a, Value(), Value(), it->second);
    }

    // 3. fp16: dynamic loss scaling.
    if (fp16) {
      for (StringRef name : {"loss_scale", "loss_scale_good"})
        if (Operation *clash = module.lookupSymbol(name))
          return clash->emitError("bigc-mixed-precision: the symbol @")
                 << name << " (fp16 loss scaling) already exists";
      Operation *seed = findLossSeed(block);
      if (!seed)
        return func.emitError("bigc-mixed-precision: no loss seed (a scalar "
                              "bigc.fill opening the backward) in @train_step");
      auto scalar = RankedTensorType::get({}, Float32Type::get(ctx));
      mb.setInsertionPointToEnd(module.getBody());
      Location loc = func.getLoc();
      mb.setInsertionPoint(func);
      mb.create<ParamOp>(loc, mb.getStringAttr("loss_scale"), TypeAttr::get(scalar), mb.getStringAttr(kInitFill),
                         FloatAttr(), mb.getStringAttr(kOptimizerRole), StringAttr(), mb.getF64FloatAttr(lossScale));
      mb.create<ParamOp>(loc, mb.getStringAttr("loss_scale_good"), TypeAttr::get(scalar), mb.getStringAttr(kInitZeros),
                         FloatAttr(), mb.getStringAttr(kOptimizerRole), StringAttr(), FloatAttr());
      auto scaleRef = FlatSymbolRefAttr::get(ctx, "loss_scale");
      auto goodRef = FlatSymbolRefAttr::get(ctx, "loss_scale_good");

      // The backward differentiates scale·loss.
      OpBuilder b(seed);
      auto s = b.create<GetParamOp>(seed->getLoc(), scalar, scaleRef);
      s->setAttr(kPhaseAttrName, b.getStringAttr(kBackwardPhase));
      seed->getResult(0).replaceAllUsesWith(s.getResult());
      seed->erase();

      if (!updates.empty()) {
        // Before the optimizer: one check over every parameter gradient.
        Operation *firstOpt = nullptr;
        for (Operation &op : block.without_terminator()) {
          if (phaseOf(&op) == kOptimizerPhase) {
            firstOpt = &op;
            break;
          }
        }
        if (!firstOpt) firstOpt = updates.front();
        b.setInsertionPoint(firstOpt);
        SmallVector<Value> grads;
        for (AdamWOp a : updates)
          if (!llvm::is_contained(grads, a.getGrad())) grads.push_back(a.getGrad());
        Location oloc = updates.front().getLoc();
        auto found = b.create<CheckFiniteOp>(oloc, scalar, grads);
        auto cur = b.create<GetParamOp>(oloc, scalar, scaleRef);
        for (Operation *op : {found.getOperation(), cur.getOperation()})
          op->setAttr(kPhaseAttrName, b.getStringAttr(kOptimizerPhase));
        for (AdamWOp &a : updates) a = rebuildAdamW(b, a, cur.getResult(), found.getResult(), FlatSymbolRefAttr());
        // The step ends with the scale update.
        b.setInsertionPoint(block.getTerminator());
        auto upd =
            b.create<LossScaleUpdateOp>(oloc, found.getResult(), scaleRef, goodRef, b.getI64IntegerAttr(growthInterval),
                                        b.getF64FloatAttr(0.5), b.getF64FloatAttr(2.0));
        upd->setAttr(kPhaseAttrName, b.getStringAttr(kOptimizerPhase));
      }
    }
    module->setAttr(kPrecisionAttrName, StringAttr::get(ctx, precision));
    return success();
  }
};

} // namespace
