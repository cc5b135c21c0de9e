//===- FuseLoss.cpp - bigc-fuse-loss --------------------------------------===//
//
// The LM head's matmul and the cross-entropy after it become
// bigc.linear_ce_stats (+ bigc.vocab_ce_loss): the N x V logits are computed
// a chunk of vocabulary columns at a time and never stored (see the
// description in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCFUSELOSS
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The matmul whose result `logits` is (through a reshape that merges leading dimensions), when the
/// loss is its only reader and the matmul is h [...,C] @ op(w [2-D]); the reshape in `reshape`.
MatmulOp headOf(Value logits, ReshapeOp &reshape) {
  reshape = nullptr;
  if (!logits.hasOneUse()) return nullptr;
  if (auto r = logits.getDefiningOp<ReshapeOp>()) {
    auto in = tensorOf(r.getX()), out = tensorOf(r.getY());
    if (in.getRank() < 2 || out.getRank() < 1 || in.getShape().back() != out.getShape().back()) return nullptr;
    reshape = r;
    logits = r.getX();
    if (!logits.hasOneUse()) return nullptr;
  }
  auto mm = logits.getDefiningOp<MatmulOp>();
  if (!mm || mm.getTransposeA() || tensorOf(mm.getB()).getRank() != 2 || tensorOf(mm.getA()).getRank() < 2)
    return nullptr;
  return mm;
}

/// The losses of @forward (cross_entropy, vocab_ce_stats), in order.
SmallVector<Operation *> lossesOf(func::FuncOp func) {
  SmallVector<Operation *> losses;
  func.walk([&](Operation *op) {
    if (isa<CrossEntropyOp, VocabCeStatsOp>(op)) losses.push_back(op);
  });
  return losses;
}

struct BigcFuseLossPass : public mlir::bigc::impl::BigcFuseLossBase<BigcFuseLossPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (chunk < 0) return module.emitError("bigc-fuse-loss: chunk must be >= 0 (0: picked), got ") << chunk;
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func || func.isExternal())
      return module.emitError("bigc-fuse-loss: the module has no func.func @forward (it runs before bigc-autodiff)");
    SmallVector<Operation *> losses = lossesOf(func);
    int fused = 0;
    for (Operation *op : losses) {
      Value logits = isa<CrossEntropyOp>(op) ? cast<CrossEntropyOp>(op).getLogits() : op->getOperand(0);
      Value targets = isa<CrossEntropyOp>(op) ? cast<CrossEntropyOp>(op).getTargets() : op->getOperand(1);
      ReshapeOp reshape;
      MatmulOp mm = headOf(logits, reshape);
      if (!mm) continue;
      OpBuilder b(op);
      Location loc = mm.getLoc();
      Value h = mm.getA(), w = mm.getB();
      const bool tb = mm.getTransposeB();
      const int64_t c = tensorOf(h).getShape().back();
      const int64_t v = tb ? tensorOf(w).getShape()[0] : tensorOf(w).getShape()[1];
      // h with the targets' leading shape (the reshape merged the logits' leading dimensions).
      auto tShape = tensorOf(targets).getShape();
      if (reshape) {
        SmallVector<int64_t> hs(tShape.begin(), tShape.end());
        hs.push_back(c);
        auto hr = b.create<ReshapeOp>(loc, RankedTensorType::get(hs, tensorOf(h).getElementType()), h);
        copyPlacementTags(mm, hr);
        h = hr.getResult();
      }
      const int64_t n = tensorOf(h).getNumElements() / std::max<int64_t>(1, c);
      const int64_t cols = std::min(v, chunk > 0 ? chunk : std::max<int64_t>(64, (c + 63) / 64 * 64));
      SmallVector<int64_t> st(tShape.begin(), tShape.end());
      st.push_back(2);
      auto statsT = RankedTensorType::get(st, b.getF32Type());
      auto wsT = RankedTensorType::get({n * cols + 2 * n}, b.getF32Type());
      auto fusedOp = b.create<LinearCeStatsOp>(loc, TypeRange{statsT, wsT}, h, w, targets, b.getI64IntegerAttr(cols),
                                               tb ? b.getUnitAttr() : UnitAttr());
      copyPlacementTags(op, fusedOp);
      if (Attribute cl = op->getAttr(kClassesAttrName)) fusedOp->setAttr(kClassesAttrName, cl); // a padded vocabulary
      if (auto vs = dyn_cast<VocabCeStatsOp>(op)) {
        fusedOp->setAttr(kVocabGroupAttrName, vs.getGroupAttr());
        vs.getStats().replaceAllUsesWith(fusedOp.getStats());
      } else {
        auto ce = cast<CrossEntropyOp>(op);
        auto loss =
            b.create<VocabCeLossOp>(ce.getLoc(), ce.getLoss().getType(), fusedOp.getStats(), b.getI64IntegerAttr(1));
        copyPlacementTags(op, loss);
        ce.getLoss().replaceAllUsesWith(loss.getResult());
      }
      op->erase();
      if (reshape) reshape->erase();
      mm->erase();
      ++fused;
    }
    if (fused == 0) {
      const char *what = "bigc-fuse-loss: no LM head to fuse in @forward: it looks for bigc.cross_entropy (or "
                         "bigc.vocab_ce_stats) of a bigc.matmul h [...,C] @ w [2-D] whose logits nothing else reads";
      if (losses.empty())
        return module.emitError(what) << ", and the model has no cross-entropy; compile without "
                                         "--fuse-loss";
      return losses.front()->emitError(what) << "; the logits of this loss are not such a matmul's (or something "
                                                "else reads them); compile without --fuse-loss";
    }
    return success();
  }
};

} // namespace

int64_t mlir::bigc::countFusableLossHeads(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func || func.isExternal()) return 0;
  int64_t n = 0;
  for (Operation *op : lossesOf(func)) {
    ReshapeOp reshape;
    n += headOf(op->getOperand(0), reshape) ? 1 : 0;
  }
  return n;
}
