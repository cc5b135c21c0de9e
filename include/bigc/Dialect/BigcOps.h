//===- BigcOps.h - bigc ops -------------------------------------*- C++ -*-===//
//
// The ops of the bigc dialect (mlir::bigc::MatmulOp, ...). Op names are the
// runtime instruction names of docs/program-format.md.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_DIALECT_BIGCOPS_H
#define BIGC_DIALECT_BIGCOPS_H

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcInterfaces.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/BigcOps.h.inc"

namespace mlir {
namespace bigc {
// The discardable attributes (kPhaseAttrName, ...): BigcAttrNames.h.
/// Attaches the tensor-parallel rules (BigcTensorParallelRules.cpp).
void attachTensorParallelRules(MLIRContext &ctx);
/// Copies the tensor-parallel split of weight `from` onto `to` (a state or
/// copy of the same shape derived from it), and its vocabulary padding
/// (bigc.vocab_rows).
void copyTpSplit(Operation *from, Operation *to);
} // namespace bigc
} // namespace mlir

#endif // BIGC_DIALECT_BIGCOPS_H
