//===- CostModel.h - FLOPs and bytes of bigc ops ----------------*- C++ -*-===//
//
// A static cost model of every bigc op at the MLIR level: floating-point
// operations and bytes read and written (from the tensor types; one pass over
// every operand and result). bigc-recompute ranks what to recompute by bytes
// saved per FLOP added with it, reports the FLOPs it adds, and the same
// numbers give a roofline estimate of an op's (and a step's) time on a
// hardware profile: max(flops / peak FLOP/s, bytes / memory bandwidth).
//
// Conventions (documented per op in CostModel.cpp): a multiply-add is 2
// FLOPs; causal attention counts the unmasked half of the score matrix;
// transcendental functions count as a few FLOPs (tanh, exp, log: 4); data
// movement (reshape, transpose, split, concat, copy, cast, embedding gather)
// is 0 FLOPs but moves bytes; reshape moves none (it is an alias).
// Ops the model does not know (a newer dialect op) get 0 FLOPs, their
// operand+result bytes, and `known = false`.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_ANALYSIS_COSTMODEL_H
#define BIGC_ANALYSIS_COSTMODEL_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"

#include <cstdint>

namespace mlir {
class ModuleOp;
namespace func {
class FuncOp;
}
} // namespace mlir

namespace mlir {
namespace bigc {

struct OpCost {
  int64_t flops = 0;        ///< floating-point operations
  int64_t bytesRead = 0;    ///< operand bytes (and persistent state read, adamw)
  int64_t bytesWritten = 0; ///< result bytes (and persistent state written)
  bool known = true;        ///< false: an op the model does not know

  int64_t bytes() const { return bytesRead + bytesWritten; }
  OpCost &operator+=(const OpCost &o) {
    flops += o.flops;
    bytesRead += o.bytesRead;
    bytesWritten += o.bytesWritten;
    known &= o.known;
    return *this;
  }
};

/// Bytes of a static tensor type (f32/i32: 4, bf16/f16: 2 per element); 0 for
/// anything else.
int64_t typeBytes(Type type);

/// The cost of one op (any op of the bigc dialect; bigc.get_param and
/// bigc.param cost nothing). Symbol operands of bigc.adamw (the parameter
/// and its moments) are sized from `bigc.param` declarations found from the
/// op's module (through `lookup` when given: a module's symbol lookup scans it, once per
/// update chunk of the largest plans), else from the gradient's type.
OpCost opCost(Operation *op, llvm::function_ref<Operation *(FlatSymbolRefAttr)> lookup = nullptr);

/// Sums of the op costs of a function, split by `bigc.phase`
/// ("forward", "backward" — `bigc.recompute` ops of the backward counted
/// apart —, "optimizer", and ops without a phase under `other`).
struct FunctionCost {
  OpCost forward, backward, recompute, optimizer, other;
  OpCost total() const {
    OpCost t = forward;
    t += backward;
    t += recompute;
    t += optimizer;
    t += other;
    return t;
  }
};
FunctionCost functionCost(func::FuncOp func);

/// Roofline time of a cost: max(flops / flopsPerS, bytes / bytesPerS), in
/// seconds (0 when both rates are unknown, i.e. <= 0). With the hardware
/// profile's `deviceFlops` and a memory bandwidth this estimates a step.
double rooflineSeconds(const OpCost &c, double flopsPerS, double bytesPerS);

} // namespace bigc
} // namespace mlir

#endif // BIGC_ANALYSIS_COSTMODEL_H
