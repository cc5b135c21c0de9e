//===- OffloadActivations.cpp - bigc-offload-activations -------------------===//
//
// The activations kept for the backward go to the host as the forward makes
// them and come back for the backward (see the description in Passes.td): a
// d2h bigc.copy after each definition, an h2d bigc.copy before the first
// backward reader (bigc-schedule moves it a layer ahead), the backward reading
// the copy.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCOFFLOADACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

StringRef phaseOfOp(Operation *op) {
  auto p = op->getAttrOfType<StringAttr>(kPhaseAttrName);
  return p ? p.getValue() : StringRef();
}

int64_t bytesOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t) return 0;
  return t.getNumElements() * ((t.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

struct BigcOffloadActivationsPass : public mlir::bigc::impl::BigcOffloadActivationsBase<BigcOffloadActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      module.emitError("bigc-offload-activations: the module has no func.func @train_step of one block (run "
                       "bigc-autodiff first)");
      return signalPassFailure();
    }
    Block &block = func.front();
    // The activations: device values a layer's forward defines and the backward reads (not weights
    // read with get_param, not the step's inputs), at least `minBytes` large. The last layer's, and
    // those of the ops outside the layers (the embedding, the head and the loss), stay: the backward
    // reads them as soon as the forward ends, so a round trip would only delay it.
    SmallVector<Operation *> defs;
    int64_t last = -1;
    for (Operation &op : block.without_terminator())
      if (phaseOfOp(&op) == kForwardPhase)
        if (auto l = op.getAttrOfType<IntegerAttr>(kLayerAttrName)) last = std::max(last, l.getInt());
    for (Operation &op : block.without_terminator()) {
      auto l = op.getAttrOfType<IntegerAttr>(kLayerAttrName);
      if (phaseOfOp(&op) == kForwardPhase && l && l.getInt() < last && !isa<GetParamOp, CopyOp>(op) &&
          opSpace(&op) != kHostSpace)
        defs.push_back(&op);
    }
    int64_t moved = 0, bytes = 0;
    for (Operation *def : defs)
      for (Value v : def->getResults()) {
        if (valueSpace(v) == kHostSpace || bytesOf(v) < minBytes) continue;
        SmallVector<Operation *> readers; // the backward's, in order, each once
        for (Operation *u : v.getUsers())
          if (u->getBlock() == &block && phaseOfOp(u) == kBackwardPhase && !llvm::is_contained(readers, u))
            readers.push_back(u);
        if (readers.empty()) continue;
        llvm::sort(readers, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
        OpBuilder b(def->getContext());
        b.setInsertionPointAfter(def);
        auto out = b.create<CopyOp>(def->getLoc(), v); // to the host as soon as it exists
        out->setAttr(kSpaceAttrName, b.getStringAttr(kHostSpace));
        copyPlacementTags(def, out);
        out->setAttr(kPhaseAttrName, b.getStringAttr(kForwardPhase));
        b.setInsertionPoint(readers.front());
        auto back = b.create<CopyOp>(readers.front()->getLoc(), out.getY()); // back for the backward
        back->setAttr(kSpaceAttrName, b.getStringAttr(kDeviceSpace));
        copyPlacementTags(readers.front(), back);
        for (Operation *u : readers) u->replaceUsesOfWith(v, back.getY());
        ++moved, bytes += bytesOf(v);
      }
    Builder b(module.getContext());
    module->setAttr(kOffloadActivationsAttrName,
                    b.getDictionaryAttr({b.getNamedAttr("tensors", b.getI64IntegerAttr(moved)),
                                         b.getNamedAttr("bytes", b.getI64IntegerAttr(bytes))}));
  }
};

} // namespace
