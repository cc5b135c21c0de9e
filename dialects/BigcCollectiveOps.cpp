//===- BigcCollectiveOps.cpp - all_reduce, reduce_scatter, all_gather -----===//
//
// Verifiers of the ops of BigcCollectiveOps.td and the mesh queries of
// include/bigc/Dialect/BigcCollective.h.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcTransfer.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::bigc;

int64_t mlir::bigc::meshAxisSize(Operation *op, StringRef axis) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  if (!module) return 1;
  auto mesh = module->getAttrOfType<DictionaryAttr>(kMeshAttrName);
  if (!mesh) return 1;
  auto a = mesh.getAs<IntegerAttr>(axis);
  return a ? a.getInt() : 1;
}

int64_t mlir::bigc::meshRanks(ModuleOp module) {
  auto mesh = module->getAttrOfType<DictionaryAttr>(kMeshAttrName);
  if (!mesh) return 1;
  int64_t n = 1;
  for (NamedAttribute na : mesh)
    if (auto a = dyn_cast<IntegerAttr>(na.getValue()); a && na.getName() != kCpAxis) n *= a.getInt();
  return n;
}

bool mlir::bigc::isCollective(Operation *op) {
  return isa<AllReduceOp, ReduceScatterOp, AllGatherOp, ParamAllGatherOp, RingShiftOp, CpAllToAllOp>(op);
}

bool mlir::bigc::isP2P(Operation *op) { return isa<SendOp, RecvOp>(op); }

int64_t mlir::bigc::pipelineStage(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  auto pipe = module ? module->getAttrOfType<DictionaryAttr>(kPipelineAttrName) : DictionaryAttr();
  auto s = pipe ? pipe.getAs<IntegerAttr>("stage") : IntegerAttr();
  return s ? s.getInt() : 0;
}

StringRef mlir::bigc::collectiveStream(Operation *op) {
  auto g = op->getAttrOfType<StringAttr>("group");
  return g && g.getValue() == kTpAxis ? kTpCommStream : g && g.getValue() == kCpAxis ? kCpCommStream : kCommStream;
}

namespace {

LogicalResult verifyGroup(Operation *op, StringRef group) {
  if (!isMeshAxis(group))
    return op->emitOpError("group must be a mesh axis: \"dp\", \"tp\", \"pp\" or \"cp\", got \"") << group << "\"";
  if (Attribute stream = op->getAttr(kStreamAttrName)) {
    auto s = dyn_cast<StringAttr>(stream);
    StringRef want = group == kTpAxis ? kTpCommStream : group == kCpAxis ? kCpCommStream : kCommStream;
    if (!s || s.getValue() != want)
      return op->emitOpError("of group \"")
             << group << "\" runs on the \"" << want << "\" stream, got bigc.stream = " << stream;
  }
  return success();
}

int64_t numel(Type t) { return cast<RankedTensorType>(t).getNumElements(); }
Type elementType(Type t) { return cast<RankedTensorType>(t).getElementType(); }

/// The shard / full pairs of reduce_scatter (full -> shard) and all_gather
/// (shard -> full).
LogicalResult verifyShards(Operation *op, ValueRange fulls, TypeRange fullTypes, TypeRange shardTypes,
                           StringRef group) {
  if (fullTypes.size() != shardTypes.size() || fullTypes.empty())
    return op->emitOpError("needs one result per operand and at least one, got ")
           << op->getNumOperands() << " operands and " << op->getNumResults() << " results";
  (void)fulls;
  const int64_t ranks = meshAxisSize(op, group);
  for (size_t i = 0; i < fullTypes.size(); ++i) {
    auto shard = cast<RankedTensorType>(shardTypes[i]);
    if (elementType(fullTypes[i]) != shard.getElementType())
      return op->emitOpError("tensor #") << i << ": shard and full tensor must have one element type, got "
                                         << shardTypes[i] << " and " << fullTypes[i];
    if (shard.getRank() != 1) return op->emitOpError("tensor #") << i << ": a shard is 1-D, got " << shardTypes[i];
    int64_t n = numel(fullTypes[i]), s = shard.getDimSize(0);
    if (s != shardElements(n, ranks))
      return op->emitOpError("tensor #") << i << ": a tensor of " << n << " elements over " << ranks << " ranks of \""
                                         << group << "\" has shards of " << shardElements(n, ranks) << " elements, got "
                                         << s;
  }
  return success();
}

/// One result per operand (at least one), each of its operand's type: all_reduce and ring_shift.
LogicalResult verifySameTypes(Operation *op, ValueRange in, ValueRange out) {
  if (in.empty() || in.size() != out.size()) return op->emitOpError("needs one result per operand and at least one");
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].getType() != out[i].getType())
      return op->emitOpError("result #") << i << " must have the type of its operand, " << in[i].getType() << ", got "
                                         << out[i].getType();
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(verifyGroup(*this, getGroup()))) return failure();
  StringRef r = getReduce();
  if (!isReduction(r)) return emitOpError("reduce must be \"sum\", \"mean\", \"max\" or \"norm\", got \"") << r << "\"";
  return verifySameTypes(*this, getInputs(), getOutputs());
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(verifyGroup(*this, getGroup()))) return failure();
  if (getReduce() != kReduceSum && getReduce() != kReduceMean)
    return emitOpError("reduce must be \"sum\" or \"mean\", got \"") << getReduce() << "\"";
  return verifyShards(*this, getInputs(), getInputs().getTypes(), getOutputs().getTypes(), getGroup());
}

LogicalResult AllGatherOp::verify() {
  if (failed(verifyGroup(*this, getGroup()))) return failure();
  if (std::optional<ArrayRef<int64_t>> tile = getTile()) {
    if (tile->size() != 2 || (*tile)[1] < 1 || (*tile)[0] < 0 || (*tile)[0] >= (*tile)[1])
      return emitOpError("tile must be [t, k] with 0 <= t < k");
    const int64_t k = (*tile)[1], ranks = meshAxisSize(*this, getGroup());
    if (getInputs().size() != getOutputs().size() || getInputs().empty())
      return emitOpError("needs one result per operand and at least one");
    for (size_t i = 0; i < getInputs().size(); ++i) {
      auto shard = cast<RankedTensorType>(getInputs()[i].getType());
      Type whole = getOutputs()[i].getType();
      if (shard.getRank() != 1 || elementType(whole) != shard.getElementType())
        return emitOpError("tensor #") << i << ": a 1-D shard of the tile's element type, got " << shard;
      const int64_t piece = shardElements(numel(whole), ranks);
      if (shard.getDimSize(0) != k * piece)
        return emitOpError("tensor #") << i << ": a tile of " << numel(whole) << " elements over " << ranks
                                       << " ranks has pieces of " << piece << " elements, so a shard of " << k
                                       << " tiles has " << k * piece << ", got " << shard.getDimSize(0);
    }
    return success();
  }
  return verifyShards(*this, getOutputs(), getOutputs().getTypes(), getInputs().getTypes(), getGroup());
}

LogicalResult ParamAllGatherOp::verify() {
  if (getFrom() == getTo())
    return emitOpError("from and to must be two different parameters, got @") << getFrom() << " twice";
  return verifyGroup(*this, getGroup());
}

LogicalResult ParamAllGatherOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto from = symbols.lookupNearestSymbolFrom<ParamOp>(getOperation(), getFromAttr());
  auto to = symbols.lookupNearestSymbolFrom<ParamOp>(getOperation(), getToAttr());
  if (!from) return emitOpError("from ") << getFromAttr() << " does not name a bigc.param";
  if (!to) return emitOpError("to ") << getToAttr() << " does not name a bigc.param";
  Type ft = from.getType(), tt = to.getType();
  if (failed(verifyShards(*this, {}, TypeRange{tt}, TypeRange{ft}, getGroup()))) return failure();
  return success();
}

LogicalResult RingShiftOp::verify() {
  if (getGroup() != kCpAxis) return emitOpError("group must be the context axis \"cp\", got \"") << getGroup() << "\"";
  if (failed(verifyGroup(*this, getGroup()))) return failure();
  return verifySameTypes(*this, getInputs(), getOutputs());
}

LogicalResult CpAllToAllOp::verify() {
  if (getGroup() != kCpAxis) return emitOpError("group must be the context axis \"cp\", got \"") << getGroup() << "\"";
  if (failed(verifyGroup(*this, getGroup()))) return failure();
  if (getInputs().empty() || getInputs().size() != getOutputs().size())
    return emitOpError("needs one result per operand and at least one");
  const int64_t C = meshAxisSize(*this, kCpAxis);
  for (size_t i = 0; i < getInputs().size(); ++i) {
    auto in = cast<RankedTensorType>(getInputs()[i].getType()), out = cast<RankedTensorType>(getOutputs()[i].getType());
    auto seq = getToHeads() ? in : out, heads = getToHeads() ? out : in;
    if (in.getElementType() != out.getElementType() || seq.getRank() != 3 || heads.getRank() != 3 ||
        seq.getDimSize(2) % C != 0 || heads.getDimSize(0) != seq.getDimSize(0) ||
        heads.getDimSize(1) != C * seq.getDimSize(1) || heads.getDimSize(2) * C != seq.getDimSize(2))
      return emitOpError("tensor #") << i << ": " << in << " -> " << out << " is not [B,T,N] <-> [B," << C << "T,N/"
                                     << C << "] over the " << C << " ranks of \"cp\"";
  }
  return success();
}

namespace {
LogicalResult verifyPeer(Operation *op, int64_t peer, int64_t tag) {
  const int64_t pp = meshAxisSize(op, kPpAxis);
  if (peer < 0 || (pp > 1 && peer >= pp))
    return op->emitOpError("peer must be a pipeline stage in [0, ") << pp << "), got " << peer;
  if (op->getParentOfType<ModuleOp>() && op->getParentOfType<ModuleOp>()->getAttr(kPipelineAttrName) &&
      peer == pipelineStage(op))
    return op->emitOpError("peer must be another stage than this module's (") << peer << ")";
  if (tag < 0) return op->emitOpError("tag must be >= 0, got ") << tag;
  if (Attribute stream = op->getAttr(kStreamAttrName)) {
    auto st = dyn_cast<StringAttr>(stream);
    if (!st || st.getValue() != kP2PStream)
      return op->emitOpError("runs on the \"") << kP2PStream << "\" stream, got bigc.stream = " << stream;
  }
  return success();
}
} // namespace

LogicalResult SendOp::verify() { return verifyPeer(*this, getPeer(), getTag()); }
LogicalResult RecvOp::verify() { return verifyPeer(*this, getPeer(), getTag()); }
