//===- BigcTensorParallelOps.cpp - tp_* and vocab_ce_* ops ---------------===//
//
// Verifiers and gradients of the ops of BigcTensorParallelOps.td.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace mlir::bigc;

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

std::string str(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

LogicalResult verifyTpGroup(Operation *op, StringRef group) {
  if (group != kTpAxis) return op->emitOpError("group must be the tensor axis \"tp\", got \"") << group << "\"";
  return success();
}

/// y = x with dimension `dim` multiplied by T (gather) — checks the shapes of
/// a chunk `part` and a whole `whole` along `dim`.
LogicalResult verifyChunk(Operation *op, Value part, Value whole, int64_t dim, StringRef group) {
  if (failed(verifyTpGroup(op, group))) return failure();
  auto p = shapeOf(part), w = shapeOf(whole);
  if (cast<RankedTensorType>(part.getType()).getElementType() !=
      cast<RankedTensorType>(whole.getType()).getElementType())
    return op->emitOpError("operand and result must have one element type");
  if (dim < 0 || dim >= int64_t(w.size()) || p.size() != w.size())
    return op->emitOpError("dim ") << dim << " is out of range for " << str(w) << " and " << str(p);
  int64_t T = meshAxisSize(op, group);
  for (size_t i = 0; i < w.size(); ++i) {
    int64_t want = int64_t(i) == dim ? w[i] / T : w[i];
    if (int64_t(i) == dim && w[i] % T != 0)
      return op->emitOpError("dimension ")
             << dim << " of " << str(w) << " does not divide into " << T << " tensor ranks";
    if (p[i] != want)
      return op->emitOpError("the chunk must be ")
             << str(w) << " with dim " << dim << " divided by " << T << ", got " << str(p);
  }
  return success();
}

} // namespace

LogicalResult TpCopyOp::verify() { return verifyTpGroup(*this, getGroup()); }
LogicalResult TpAllReduceOp::verify() { return verifyTpGroup(*this, getGroup()); }
LogicalResult TpAllGatherOp::verify() {
  if (getGrad() != "slice" && getGrad() != "reduce_scatter")
    return emitOpError("grad must be \"slice\" or \"reduce_scatter\", got \"") << getGrad() << "\"";
  return verifyChunk(*this, getX(), getY(), getDim(), getGroup());
}
LogicalResult TpReduceScatterOp::verify() { return verifyChunk(*this, getY(), getX(), getDim(), getGroup()); }
LogicalResult TpSliceOp::verify() { return verifyChunk(*this, getY(), getX(), getDim(), getGroup()); }

LogicalResult VocabCeStatsOp::verify() {
  if (failed(verifyTpGroup(*this, getGroup()))) return failure();
  auto l = shapeOf(getLogits()), t = shapeOf(getTargets()), s = shapeOf(getStats());
  if (l.size() < 2 || ArrayRef<int64_t>(l).drop_back() != t)
    return emitOpError("logits ") << str(l) << " must be the targets' shape " << str(t) << " plus the vocabulary";
  SmallVector<int64_t> want(t.begin(), t.end());
  want.push_back(2);
  if (s != ArrayRef<int64_t>(want) || !cast<RankedTensorType>(getStats().getType()).getElementType().isF32())
    return emitOpError("stats must be f32 ") << str(want) << ", got " << getStats().getType();
  return success();
}

LogicalResult VocabCeStatsGradOp::verify() {
  if (getDlogits().getType() != getLogits().getType()) return emitOpError("dlogits must have the logits' type");
  if (getDstats().getType() != getStats().getType()) return emitOpError("dstats must have the stats' type");
  return verifyTpGroup(*this, getGroup());
}

LogicalResult VocabCeLossOp::verify() {
  auto s = shapeOf(getStats());
  if (getParts() < 1 || s.size() < 2 || s.back() != 2 || s[0] % getParts() != 0)
    return emitOpError("stats must be [P*B,...,2] for P = parts = ") << getParts() << ", got " << str(s);
  return success();
}

LogicalResult VocabCeLossGradOp::verify() {
  if (getDstats().getType() != getStats().getType()) return emitOpError("dstats must have the stats' type");
  return success();
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

LogicalResult TpCopyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<TpAllReduceOp>(getLoc(), resultGrads[0].getType(), resultGrads[0], getGroupAttr());
  operandGrads.assign({dx});
  return success();
}

LogicalResult TpAllReduceOp::buildGradient(OpBuilder &, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({resultGrads[0]});
  return success();
}

LogicalResult TpAllGatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Type t = getX().getType();
  Value dx = getGrad() == "slice"
                 ? b.create<TpSliceOp>(getLoc(), t, resultGrads[0], getGroupAttr(), getDimAttr()).getResult()
                 : b.create<TpReduceScatterOp>(getLoc(), t, resultGrads[0], getGroupAttr(), getDimAttr()).getResult();
  operandGrads.assign({dx});
  return success();
}

LogicalResult TpReduceScatterOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                               SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<TpAllGatherOp>(getLoc(), getX().getType(), resultGrads[0], getGroupAttr(), getDimAttr(),
                                     b.getStringAttr("reduce_scatter"));
  operandGrads.assign({dx});
  return success();
}

LogicalResult TpSliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<TpAllGatherOp>(getLoc(), getX().getType(), resultGrads[0], getGroupAttr(), getDimAttr(),
                                     b.getStringAttr("slice"));
  operandGrads.assign({dx});
  return success();
}

LogicalResult VocabCeStatsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  auto d = b.create<VocabCeStatsGradOp>(getLoc(), getLogits().getType(), resultGrads[0], getLogits(), getTargets(),
                                        getStats(), getGroupAttr());
  if (Attribute c = (*this)->getAttr(kClassesAttrName)) d->setAttr(kClassesAttrName, c); // a padded vocabulary
  operandGrads.assign({d, Value()});
  return success();
}

LogicalResult VocabCeLossOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Value d = b.create<VocabCeLossGradOp>(getLoc(), getStats().getType(), getStats(), resultGrads[0], getPartsAttr());
  operandGrads.assign({d});
  return success();
}

void mlir::bigc::copyTpSplit(Operation *from, Operation *to) {
  for (StringRef name : {StringRef(kTpSplitAttrName), StringRef(kTpFullShapeAttrName), StringRef(kVocabRowsAttrName)})
    if (Attribute a = from->getAttr(name)) to->setAttr(name, a);
}
