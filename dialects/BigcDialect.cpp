//===- BigcDialect.cpp - the bigc dialect ---------------------------------===//

#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcTransfer.h"

using namespace mlir;
using namespace mlir::bigc;

#include "dialects/BigcOpsDialect.cpp.inc"

void BigcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/BigcOps.cpp.inc"
      >();
  attachTensorParallelRules(*getContext());
}

// The discardable attributes whose values are a closed set: an unknown value (a typo in a
// hand-written module, a pass writing a new one without declaring it) is an error here rather than
// a silent default in a later pass.
LogicalResult BigcDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  const StringRef name = attr.getName().getValue();
  auto value = dyn_cast<StringAttr>(attr.getValue());
  if (name == kPhaseAttrName && !(value && isKnownPhase(value.getValue())))
    return op->emitOpError("bigc.phase must be \"forward\", \"backward\" or \"optimizer\", got ") << attr.getValue();
  if (name == kSpaceAttrName && !(value && isKnownSpace(value.getValue())))
    return op->emitOpError("bigc.space must be \"device\", \"host\" or \"nvme\", got ") << attr.getValue();
  if (name == kStreamAttrName && !(value && isKnownStream(value.getValue())))
    return op->emitOpError("bigc.stream must be \"compute\", \"h2d\", \"d2h\", \"host\", \"nvme\", \"comm\", "
                           "\"comm_tp\", \"comm_cp\" or \"p2p\", got ")
           << attr.getValue();
  return success();
}
