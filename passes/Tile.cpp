//===- Tile.cpp - bigc-tile -----------------------------------------------===//
//
// Memory-centric tiling (ZeRO-Infinity): a linear layer's weight larger than
// max-bytes used as k row tiles, one matmul per tile (see the description in
// Passes.td). bigc-shard gathers and reduce-scatters the tiles one by one.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCTILE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A matmul reading `w` as its right operand, the form of a linear layer (a of rank >= 2, not
/// transposed; w of rank 2).
bool linearOf(Operation *user, Value w) {
  auto mm = dyn_cast<MatmulOp>(user);
  return mm && mm.getB() == w && mm.getA() != w && !mm.getTransposeA() && tensorOf(mm.getA()).getRank() >= 2;
}

struct BigcTilePass : public mlir::bigc::impl::BigcTileBase<BigcTilePass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (maxBytes < 1) return module.emitError("bigc-tile: max-bytes must be at least 1, got ") << int64_t(maxBytes);
    if (elementBytes != 2 && elementBytes != 4)
      return module.emitError("bigc-tile: element-bytes must be 2 or 4, got ") << int64_t(elementBytes);
    if (module->hasAttr(kTiledAttrName))
      return module.emitError("bigc-tile: already applied (the module has bigc.tiled)");
    if (meshAxisSize(module, kTpAxis) > 1)
      return module.emitError("bigc-tile: the weights are split over the tensor axis already (bigc-tensor-parallel); "
                              "tile them or split them, not both");
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func || func.isExternal())
      return module.emitError("bigc-tile: the module has no func.func @forward (it runs before bigc-autodiff)");
    llvm::MapVector<StringRef, SmallVector<GetParamOp>> reads;
    func.walk([&](GetParamOp gp) { reads[gp.getParam()].push_back(gp); });
    Builder attrs(module.getContext());
    int64_t weights = 0, most = 1;
    SmallVector<Attribute> untiled;
    for (ParamOp p : llvm::to_vector(module.getOps<ParamOp>())) {
      auto t = p.getTensorType();
      if (p.getRole() != kParamRole || t.getRank() != 2 || p->hasAttr(kTilesAttrName)) continue;
      const int64_t rows = t.getShape()[0], rowBytes = t.getShape()[1] * elementBytes;
      if (rows * rowBytes <= maxBytes) continue;
      auto it = reads.find(p.getSymName());
      if (it == reads.end()) continue;
      bool linear = true;
      for (GetParamOp gp : it->second)
        for (Operation *u : gp->getUsers()) linear = linear && linearOf(u, gp);
      if (!linear) {
        untiled.push_back(attrs.getStringAttr(p.getSymName()));
        continue;
      }
      if (rowBytes > maxBytes)
        return p.emitError("bigc-tile: one row of the weight @\"")
               << p.getSymName() << "\" is " << rowBytes << " bytes, over the largest tile (" << int64_t(maxBytes)
               << " bytes): its tiles are whole rows; raise --tile-linear to at least " << rowBytes;
      int64_t k = (rows * rowBytes + maxBytes - 1) / maxBytes;
      while (rows % k != 0) ++k; // (k = rows at worst: one row, which fits)
      for (GetParamOp gp : it->second) tile(gp, k);
      p->setAttr(kTilesAttrName, attrs.getI64IntegerAttr(k));
      ++weights;
      most = std::max(most, k);
    }
    module->setAttr(kTiledAttrName, attrs.getDictionaryAttr({
                                        attrs.getNamedAttr("weights", attrs.getI64IntegerAttr(weights)),
                                        attrs.getNamedAttr("tiles", attrs.getI64IntegerAttr(most)),
                                        attrs.getNamedAttr("untiled", attrs.getArrayAttr(untiled)),
                                    }));
    return success();
  }

  /// The read `gp` of a weight as k row tiles, each matmul reading it as k matmuls.
  void tile(GetParamOp gp, int64_t k) {
    OpBuilder b(gp->getContext());
    b.setInsertionPointAfter(gp);
    auto wt = tensorOf(gp.getResult());
    auto tileT = RankedTensorType::get({wt.getShape()[0] / k, wt.getShape()[1]}, wt.getElementType());
    auto split =
        b.create<SplitOp>(gp.getLoc(), SmallVector<Type>(size_t(k), tileT), gp.getResult(), b.getI64IntegerAttr(0));
    copyPlacementTags(gp, split);
    for (Operation *user : llvm::to_vector(gp->getUsers())) {
      if (user == split) continue;
      auto mm = cast<MatmulOp>(user);
      b.setInsertionPoint(mm);
      Location loc = mm.getLoc();
      auto tag = [&](Operation *made) {
        copyPlacementTags(mm, made);
        return made->getResult(0);
      };
      auto yt = tensorOf(mm.getC());
      const int64_t last = yt.getRank() - 1;
      Value y;
      if (mm.getTransposeB()) { // w [N,K]: tile t gives columns t of the output
        SmallVector<int64_t> part(yt.getShape());
        part[size_t(last)] /= k;
        auto pt = RankedTensorType::get(part, yt.getElementType());
        SmallVector<Value> parts;
        for (Value w : split.getResults())
          parts.push_back(tag(b.create<MatmulOp>(loc, pt, mm.getA(), w, UnitAttr(), b.getUnitAttr())));
        y = tag(b.create<ConcatOp>(loc, yt, parts, b.getI64IntegerAttr(last)));
      } else { // w [K,N]: tile t multiplies the columns t of the input; the products summed
        auto at = tensorOf(mm.getA());
        SmallVector<int64_t> part(at.getShape());
        part[size_t(at.getRank() - 1)] /= k;
        auto xs = b.create<SplitOp>(loc, SmallVector<Type>(size_t(k), RankedTensorType::get(part, at.getElementType())),
                                    mm.getA(), b.getI64IntegerAttr(at.getRank() - 1));
        copyPlacementTags(mm, xs);
        for (int64_t t = 0; t < k; ++t) {
          Value p = tag(b.create<MatmulOp>(loc, yt, xs.getResult(unsigned(t)), split.getResult(unsigned(t)), UnitAttr(),
                                           UnitAttr()));
          y = y ? tag(b.create<AddOp>(loc, yt, y, p)) : p;
        }
      }
      mm.getC().replaceAllUsesWith(y);
      mm.erase();
    }
  }
};

} // namespace
