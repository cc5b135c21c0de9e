//===- BigcTransferOps.cpp - copy, param_copy, wait -----------------------===//
//
// Verifiers of the ops of BigcTransferOps.td and the space / stream queries
// of include/bigc/Dialect/BigcTransfer.h.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Dialect/BigcCollective.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::bigc;

bool mlir::bigc::isKnownSpace(StringRef space) {
  return space == kDeviceSpace || space == kHostSpace || space == kNvmeSpace;
}

bool mlir::bigc::isKnownStream(StringRef stream) {
  return stream == kComputeStream || stream == kH2DStream || stream == kD2HStream || stream == kHostStream ||
         stream == kNvmeStream || stream == kCommStream || stream == kTpCommStream || stream == kCpCommStream ||
         stream == kP2PStream;
}

StringRef mlir::bigc::paramSpace(ParamOp param) {
  if (auto s = param->getAttrOfType<StringAttr>(kSpaceAttrName)) return s.getValue();
  return kDeviceSpace;
}

StringRef mlir::bigc::opSpace(Operation *op) {
  if (auto p = dyn_cast<ParamOp>(op)) return paramSpace(p);
  if (auto s = op->getAttrOfType<StringAttr>(kSpaceAttrName)) return s.getValue();
  return kDeviceSpace;
}

StringRef mlir::bigc::valueSpace(Value value, llvm::function_ref<StringRef(StringRef)> paramSpaceOf) {
  Operation *def = value.getDefiningOp();
  if (!def) return kDeviceSpace;
  if (auto gp = dyn_cast<GetParamOp>(def)) return paramSpaceOf(gp.getParam());
  return opSpace(def);
}

StringRef mlir::bigc::valueSpace(Value value) {
  return valueSpace(value, [&](StringRef name) -> StringRef {
    Operation *def = value.getDefiningOp();
    if (auto p = SymbolTable::lookupNearestSymbolFrom<ParamOp>(def, StringAttr::get(def->getContext(), name)))
      return paramSpace(p);
    return kDeviceSpace;
  });
}

StringRef mlir::bigc::opStream(Operation *op) {
  if (auto s = op->getAttrOfType<StringAttr>(kStreamAttrName)) return s.getValue();
  return kComputeStream;
}

int64_t mlir::bigc::opEvent(Operation *op) {
  if (auto e = op->getAttrOfType<IntegerAttr>(kEventAttrName)) return e.getInt();
  return -1;
}

int64_t mlir::bigc::opLayer(Operation *op) {
  if (auto e = op->getAttrOfType<IntegerAttr>(kLayerAttrName)) return e.getInt();
  return -1;
}

void mlir::bigc::copyPlacementTags(Operation *from, Operation *to) {
  for (StringRef name : {StringRef(kPhaseAttrName), StringRef(kLayerAttrName), StringRef(kMicroBatchAttrName)})
    if (Attribute a = from->getAttr(name)) to->setAttr(name, a);
}

FailureOr<ParamOp> mlir::bigc::addParamAfter(ParamOp after, StringRef name, Type type, StringRef init, StringRef role,
                                             StringRef source, StringRef pass, SymbolTable *symbols) {
  if (symbols ? symbols->lookup(name) != nullptr : SymbolTable::lookupSymbolIn(after->getParentOp(), name) != nullptr)
    return after.emitError() << pass << ": cannot add the parameter @\"" << name << "\": the name is taken";
  OpBuilder b(after->getContext());
  b.setInsertionPointAfter(after);
  auto p =
      b.create<ParamOp>(after.getLoc(), b.getStringAttr(name), TypeAttr::get(type), b.getStringAttr(init), FloatAttr(),
                        b.getStringAttr(role), source.empty() ? StringAttr() : b.getStringAttr(source), FloatAttr());
  copyTpSplit(after, p); // a state or copy of a tensor-parallel chunk is a chunk too
  if (symbols) symbols->insert(p);
  return p;
}

namespace {
/// The discardable attributes every transfer-aware op may carry.
LogicalResult verifyPlacementAttrs(Operation *op, bool spaceRequired) {
  Attribute space = op->getAttr(kSpaceAttrName);
  if (!space && spaceRequired)
    return op->emitOpError("needs a bigc.space attribute: \"device\" or "
                           "\"host\" (the space of its result)");
  if (space) {
    auto s = dyn_cast<StringAttr>(space);
    if (!s || !isKnownSpace(s.getValue()))
      return op->emitOpError("bigc.space must be \"device\", \"host\" or \"nvme\", got ") << space;
  }
  if (Attribute stream = op->getAttr(kStreamAttrName)) {
    auto s = dyn_cast<StringAttr>(stream);
    if (s && (s.getValue() == kCommStream || s.getValue() == kTpCommStream || s.getValue() == kCpCommStream ||
              s.getValue() == kP2PStream))
      return op->emitOpError(
          "bigc.stream \"comm\", \"comm_tp\", \"comm_cp\" and \"p2p\" are the streams of collectives "
          "(bigc.all_reduce, bigc.reduce_scatter, bigc.all_gather) and messages, not of "
          "transfers");
    if (!s || !isKnownStream(s.getValue()))
      return op->emitOpError("bigc.stream must be \"compute\", \"h2d\", \"comm\", "
                             "\"d2h\", \"host\" or \"nvme\", got ")
             << stream;
  }
  if (Attribute event = op->getAttr(kEventAttrName)) {
    auto e = dyn_cast<IntegerAttr>(event);
    if (!e || e.getInt() < 0) return op->emitOpError("bigc.event must be a non-negative integer, got ") << event;
  }
  return success();
}
} // namespace

LogicalResult CopyOp::verify() {
  // A value in the nvme space (a gradient waiting there, bigc-offload-nvme) comes from the host
  // and goes back to it: nothing else can read a file.
  // (The operand's space from its op: a bigc.get_param's would be a symbol lookup per copy.)
  Operation *def = getX().getDefiningOp();
  const StringRef from = !def ? StringRef(kDeviceSpace) : isa<GetParamOp>(def) ? StringRef("param") : opSpace(def);
  const bool toNvme = opSpace(getOperation()) == kNvmeSpace;
  if (toNvme && from != kHostSpace)
    return emitOpError("a value goes to the nvme space from a host value only, got one in the ") << from << " space";
  if (from == kNvmeSpace && opSpace(getOperation()) != kHostSpace)
    return emitOpError("a value in the nvme space comes back to the host only, not to the ")
           << opSpace(getOperation()) << " space";
  if (toNvme)
    for (Operation *user : getY().getUsers())
      if (!isa<CopyOp>(user))
        return emitOpError("a value in the nvme space is read only by a bigc.copy back to the host, not by ")
               << user->getName();
  return verifyPlacementAttrs(getOperation(), /*spaceRequired=*/true);
}

LogicalResult ParamCopyOp::verify() {
  if (getFrom() == getTo())
    return emitOpError("from and to must be two different parameters, got @") << getFrom() << " twice";
  return verifyPlacementAttrs(getOperation(), /*spaceRequired=*/false);
}

LogicalResult ParamCopyOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ParamOp ends[2];
  std::pair<FlatSymbolRefAttr, StringRef> refs[] = {{getFromAttr(), "from"}, {getToAttr(), "to"}};
  for (int k = 0; k < 2; ++k) {
    auto p = symbols.lookupNearestSymbolFrom<ParamOp>(getOperation(), refs[k].first);
    if (!p) return emitOpError() << refs[k].second << " " << refs[k].first << " does not name a bigc.param";
    ends[k] = p;
  }
  if ((paramSpace(ends[0]) == kNvmeSpace) == (paramSpace(ends[1]) == kNvmeSpace)
          ? paramSpace(ends[0]) == kNvmeSpace
          : paramSpace(ends[0]) != kHostSpace && paramSpace(ends[1]) != kHostSpace)
    return emitOpError("an nvme tensor is copied to or from a host tensor only, got @")
           << getFrom() << " (" << paramSpace(ends[0]) << ") to @" << getTo() << " (" << paramSpace(ends[1]) << ")";
  if (std::optional<int64_t> count = getCount()) {
    RankedTensorType from = ends[0].getTensorType(), to = ends[1].getTensorType();
    if (from.getElementType() != to.getElementType())
      return emitOpError("from ") << getFromAttr() << " has element type " << from.getElementType() << " but to "
                                  << getToAttr() << " has " << to.getElementType() << " (a copy does not convert)";
    const int64_t fo = getFromOffset().value_or(0), too = getToOffset().value_or(0);
    if (*count <= 0 || fo < 0 || too < 0 || fo + *count > from.getNumElements() || too + *count > to.getNumElements())
      return emitOpError("elements [") << fo << ", " << fo + *count << ") of " << getFromAttr() << " ("
                                       << from.getNumElements() << ") to [" << too << ", " << too + *count << ") of "
                                       << getToAttr() << " (" << to.getNumElements() << "): out of range";
    return success();
  }
  if (getFromOffset() || getToOffset()) return emitOpError("from_offset and to_offset need count");
  if (ends[0].getType() != ends[1].getType())
    return emitOpError("from ") << getFromAttr() << " has type " << ends[0].getType() << " but to " << getToAttr()
                                << " has type " << ends[1].getType() << " (a copy does not convert; use the same type)";
  return success();
}

LogicalResult WaitOp::verify() {
  ArrayRef<int64_t> events = getEvents();
  if (events.empty()) return emitOpError("needs at least one event");
  llvm::DenseSet<int64_t> seen;
  for (int64_t e : events) {
    if (e < 0) return emitOpError("events must be non-negative, got ") << e;
    if (!seen.insert(e).second) return emitOpError("event ") << e << " is listed twice";
  }
  return success();
}
