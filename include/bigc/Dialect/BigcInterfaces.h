//===- BigcInterfaces.h - bigc op interfaces --------------------*- C++ -*-===//
#ifndef BIGC_DIALECT_BIGCINTERFACES_H
#define BIGC_DIALECT_BIGCINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallVector.h"
#include "bigc/Dialect/BigcTpLayout.h"

#include "dialects/BigcInterfaces.h.inc"

#endif // BIGC_DIALECT_BIGCINTERFACES_H
