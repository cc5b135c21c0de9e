//===- OffloadNvme.cpp - bigc-offload-nvme --------------------------------===//
//
// NVMe offload (ZeRO-Infinity; see the description in Passes.td): after
// bigc-offload, the tensors only a host bigc.adamw touches (its moments and
// its fp32 master) move to the "nvme" space, and each update reads and
// writes host staging copies of them, brought in and written back by
// bigc.param_copy ops that bigc-schedule puts on the "nvme" stream.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCOFFLOADNVME
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

struct BigcOffloadNvmePass : public mlir::bigc::impl::BigcOffloadNvmeBase<BigcOffloadNvmePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      module.emitError("bigc-offload-nvme: the module needs a func.func @train_step of one block (run "
                       "bigc-autodiff and bigc-offload first)");
      return signalPassFailure();
    }
    Block &block = func.front();
    // How many ops touch each parameter (by bigc.get_param or by symbol).
    llvm::StringMap<int> touches;
    SmallVector<AdamWOp> updates;
    for (Operation &op : block.without_terminator()) {
      if (auto gp = dyn_cast<GetParamOp>(op)) ++touches[gp.getParam()];
      for (NamedAttribute na : op.getAttrs())
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(na.getValue())) ++touches[ref.getValue()];
      if (auto a = dyn_cast<AdamWOp>(op)) updates.push_back(a);
    }
    if (updates.empty()) return;
    for (AdamWOp a : updates)
      if (opSpace(a) != kHostSpace) {
        a.emitError("bigc-offload-nvme: the update of @")
            << a.getParam() << " runs on the device (run bigc-offload first)";
        return signalPassFailure();
      }
    MLIRContext *ctx = module.getContext();
    for (AdamWOp a : updates) {
      SmallVector<std::pair<StringRef, FlatSymbolRefAttr>> tensors = {{"exp_avg", a.getExpAvgAttr()},
                                                                      {"exp_avg_sq", a.getExpAvgSqAttr()}};
      if (masters) tensors.push_back({"param", a.getParamAttr()});
      for (auto &[attr, ref] : tensors) {
        auto p = module.lookupSymbol<ParamOp>(ref);
        if (!p) {
          a.emitError("bigc-offload-nvme: unknown parameter @") << ref.getValue();
          return signalPassFailure();
        }
        // Only what this update alone touches, on the host, streams from the file.
        if (paramSpace(p) != kHostSpace || touches.lookup(ref.getValue()) != 1) continue;
        std::string ioName = (ref.getValue() + ".io").str();
        FailureOr<ParamOp> io = addParamAfter(p, ioName, p.getType(), "zeros", "transfer", "", "bigc-offload-nvme");
        if (failed(io)) return signalPassFailure();
        io->getOperation()->setAttr(kSpaceAttrName, StringAttr::get(ctx, kHostSpace));
        p->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
        auto ioRef = FlatSymbolRefAttr::get(ctx, ioName);
        OpBuilder b(a);
        auto in = b.create<ParamCopyOp>(a.getLoc(), ref, ioRef);
        in->setAttr(kSpaceAttrName, StringAttr::get(ctx, kHostSpace));
        copyPlacementTags(a, in);
        b.setInsertionPointAfter(a);
        auto out = b.create<ParamCopyOp>(a.getLoc(), ioRef, ref);
        out->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
        copyPlacementTags(a, out);
        a->setAttr(attr, ioRef);
      }
    }
    module->setAttr(kOffloadAttrName, StringAttr::get(ctx, "nvme"));
  }
};

} // namespace
