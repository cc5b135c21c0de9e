//===- BigcDialect.cpp - the bigc dialect ---------------------------------===//

#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcOps.h"

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
