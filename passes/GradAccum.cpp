//===- GradAccum.cpp - bigc-grad-accum ------------------------------------===//
//
// K micro-batches per update: the forward+backward of @train_step unrolled K
// times (one after the other, so one micro-batch's activations are live at a
// time), gradients accumulated in f32, the loss averaged, the optimizer once
// (see the description in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCGRADACCUM
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

struct BigcGradAccumPass : public mlir::bigc::impl::BigcGradAccumBase<BigcGradAccumPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    const int64_t k = microBatches;
    if (k < 1)
      return module.emitError("bigc-grad-accum: micro-batches must be at "
                              "least 1, got ")
             << k;
    if (k == 1) return success();
    if (module->hasAttr(kMicroBatchesAttrName))
      return module.emitError("bigc-grad-accum: already applied (the module "
                              "has bigc.micro_batches)");
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      return module.emitError("bigc-grad-accum: the module has no func.func "
                              "@train_step of one block (run bigc-autodiff "
                              "first)");
    Block &block = func.front();
    if (block.getNumArguments() != 2)
      return func.emitError("bigc-grad-accum: @train_step must take "
                            "(tokens, targets), got ")
             << block.getNumArguments() << " arguments";
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    if (ret.getNumOperands() != 1)
      return func.emitError("bigc-grad-accum: @train_step must return the "
                            "loss");

    // The forward+backward (to unroll) and the optimizer (once, after).
    SmallVector<Operation *> body;
    llvm::DenseSet<Operation *> inBody;
    Operation *firstOpt = nullptr;
    for (Operation &op : block.without_terminator()) {
      StringRef phase = phaseOf(&op);
      if (phase == kForwardPhase || phase == kBackwardPhase) {
        if (firstOpt) return op.emitError("bigc-grad-accum: a ") << phase << " op after the optimizer began";
        body.push_back(&op);
        inBody.insert(&op);
      } else if (phase == kOptimizerPhase) {
        if (!firstOpt) firstOpt = &op;
      } else {
        return op.emitError("bigc-grad-accum: op without bigc.phase "
                            "(forward, backward or optimizer)");
      }
    }

    // The loss seed: the first backward op (a scalar fill, or the loss scale
    // read in fp16).
    Operation *seed = nullptr;
    for (Operation *op : body)
      if (phaseOf(op) == kBackwardPhase) {
        seed = op;
        break;
      }
    auto isScalar = [](Value v) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      return t && t.getRank() == 0 && t.getElementType().isF32();
    };
    if (!seed || !isa<FillOp, GetParamOp>(seed) || !isScalar(seed->getResult(0)))
      return func.emitError("bigc-grad-accum: no loss seed (a scalar f32 "
                            "bigc.fill or bigc.get_param opening the "
                            "backward)");

    Value loss = ret.getOperand(0);
    if (!loss.getDefiningOp() || !inBody.count(loss.getDefiningOp()))
      return func.emitError("bigc-grad-accum: the returned loss must be "
                            "computed by the forward");

    // Values of the body the optimizer reads: the gradients to accumulate.
    llvm::SetVector<Value> grads;
    for (Operation &op : block.without_terminator()) {
      if (inBody.count(&op)) continue;
      for (Value v : op.getOperands()) {
        Operation *d = v.getDefiningOp();
        if (!d || !inBody.count(d)) continue;
        auto t = dyn_cast<RankedTensorType>(v.getType());
        if (isa<GetParamOp>(d))
          return op.emitError("bigc-grad-accum: the optimizer reads a "
                              "parameter read by the forward/backward; "
                              "read it again in the optimizer");
        if (!t || !isa<FloatType>(t.getElementType()))
          return op.emitError("bigc-grad-accum: the optimizer reads a "
                              "non-float value of the forward/backward");
        grads.insert(v);
      }
    }

    OpBuilder b(ctx);
    auto mbAttr = [&](int64_t i) { return b.getI64IntegerAttr(i); };
    const double inv = 1.0 / double(k);

    // Micro-batch 0 is the original body; its seed is scaled by 1/K.
    b.setInsertionPointAfter(seed);
    auto scaled =
        b.create<ScaleOp>(seed->getLoc(), seed->getResult(0).getType(), seed->getResult(0), b.getF64FloatAttr(inv));
    scaled->setAttr(kPhaseAttrName, b.getStringAttr(kBackwardPhase));
    seed->getResult(0).replaceAllUsesExcept(scaled.getResult(), scaled.getOperation());
    body.insert(llvm::find(body, seed) + 1, scaled.getOperation());
    for (Operation *op : body) op->setAttr(kMicroBatchAttrName, mbAttr(0));

    // Arguments: (tokens_0, targets_0, ..., tokens_{K-1}, targets_{K-1}).
    Type tokT = block.getArgument(0).getType(), tgtT = block.getArgument(1).getType();
    SmallVector<std::pair<Value, Value>> args = {{block.getArgument(0), block.getArgument(1)}};
    for (int64_t i = 1; i < k; ++i) {
      Value t = block.addArgument(tokT, func.getLoc());
      Value g = block.addArgument(tgtT, func.getLoc());
      args.push_back({t, g});
    }
    func.setType(FunctionType::get(ctx, block.getArgumentTypes(), func.getFunctionType().getResults()));

    auto f32Of = [&](Type t) {
      auto rt = cast<RankedTensorType>(t);
      return RankedTensorType::get(rt.getShape(), Float32Type::get(ctx));
    };
    auto mark = [&](Operation *op, StringRef phase, int64_t i) {
      op->setAttr(kPhaseAttrName, b.getStringAttr(phase));
      op->setAttr(kMicroBatchAttrName, mbAttr(i));
    };
    // The casts and adds of the accumulation carry bigc.grad_accum (bigc-shard
    // splits the accumulation into per-micro-batch reduce-scatters by it).
    auto accum = [&](Operation *op) { op->setAttr(kGradAccumAttrName, b.getUnitAttr()); };
    // Accumulators start from micro-batch 0's gradients (cast to f32).
    llvm::MapVector<Value, Value> acc;
    for (Value g : grads) {
      Value a = g;
      if (!cast<RankedTensorType>(g.getType()).getElementType().isF32()) {
        b.setInsertionPointAfterValue(g);
        auto c = b.create<CastOp>(g.getLoc(), f32Of(g.getType()), g);
        mark(c, kBackwardPhase, 0);
        accum(c);
        a = c;
      }
      acc[g] = a;
    }
    Value lossSum = loss;

    // Micro-batches 1..K-1, each after the previous one's backward.
    Operation *insertBefore = firstOpt ? firstOpt : ret.getOperation();
    for (int64_t i = 1; i < k; ++i) {
      IRMapping map;
      map.map(block.getArgument(0), args[i].first);
      map.map(block.getArgument(1), args[i].second);
      b.setInsertionPoint(insertBefore);
      for (Operation *op : body) {
        Operation *c = b.clone(*op, map);
        c->setAttr(kMicroBatchAttrName, mbAttr(i));
      }
      for (auto &[g, a] : acc) {
        Value gi = map.lookup(g);
        b.setInsertionPointAfterValue(gi);
        Value add = gi;
        if (!cast<RankedTensorType>(gi.getType()).getElementType().isF32()) {
          auto c = b.create<CastOp>(gi.getLoc(), f32Of(gi.getType()), gi);
          mark(c, kBackwardPhase, i);
          accum(c);
          add = c;
        }
        auto s = b.create<AddOp>(gi.getLoc(), a.getType(), a, add);
        mark(s, kBackwardPhase, i);
        accum(s);
        a = s;
      }
      Value li = map.lookup(loss);
      b.setInsertionPointAfterValue(li);
      auto s = b.create<AddOp>(li.getLoc(), lossSum.getType(), lossSum, li);
      mark(s, kForwardPhase, i);
      lossSum = s;
    }
    b.setInsertionPointAfterValue(lossSum);
    auto mean = b.create<ScaleOp>(loss.getLoc(), loss.getType(), lossSum, b.getF64FloatAttr(inv));
    mark(mean, kForwardPhase, k - 1);

    // The optimizer reads the accumulated gradients; the step returns the
    // mean loss.
    for (auto &[g, a] : acc)
      g.replaceUsesWithIf(a, [&](OpOperand &use) {
        Operation *owner = use.getOwner();
        return !inBody.count(owner) && !owner->hasAttr(kMicroBatchAttrName);
      });
    ret.setOperand(0, mean.getResult());
    module->setAttr(kMicroBatchesAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), k));
    return success();
  }
};

} // namespace
