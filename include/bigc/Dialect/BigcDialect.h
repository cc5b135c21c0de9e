//===- BigcDialect.h - the bigc dialect -------------------------*- C++ -*-===//
#ifndef BIGC_DIALECT_BIGCDIALECT_H
#define BIGC_DIALECT_BIGCDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "dialects/BigcOpsDialect.h.inc"

#endif // BIGC_DIALECT_BIGCDIALECT_H
