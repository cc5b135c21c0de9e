//===- MemoryPlanAnalysis.h - liveness and arena offsets of @train_step -*- C++ -*-===//
//
// Shared by bigc-memory-plan (which records the result as attributes) and
// bigc-test-print-memory-plan (which prints it for FileCheck). Private to
// passes/.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_PASSES_MEMORYPLANANALYSIS_H
#define BIGC_PASSES_MEMORYPLANANALYSIS_H

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Plan/arena_planner.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <string>
#include <vector>

namespace mlir {
namespace bigc {

/// Bytes of a static tensor type (element count x element size: f32/i32 4,
/// bf16/f16 2); -1 for anything else.
int64_t tensorBytes(Type type);

/// One buffer of the plan: a parameter symbol, a function argument or an op
/// result (bigc.get_param results are not buffers: they are the parameter).
struct PlanValue {
  enum Kind { Param, Arg, Result } kind = Result;
  Value value;                  ///< null for Param
  ParamOp param;                ///< for Param
  std::string space = "device"; ///< the arena it is placed in
  int64_t bytes = 0;
  int64_t first = 0, last = 0; ///< own live interval (instruction indices)
  unsigned group = 0;          ///< alias group (index into MemoryPlan::groups)
};

/// Buffers that share one place: a value and its reshapes, an elementwise
/// op's result and the operand whose buffer it reuses.
struct AliasGroup {
  std::string space = "device";
  int64_t bytes = 0;
  int64_t first = 0, last = 0; ///< union of the members' intervals
  bool persistent = false;     ///< holds a bigc.param (not a transfer one)
  bool pinned = false;         ///< holds a function argument or the result
  int64_t offset = 0;
};

struct MemoryPlan {
  func::FuncOp func;
  int64_t numInstructions = 0;
  /// Instruction index of each op of the function that becomes an
  /// instruction (everything but bigc.get_param and the terminator).
  llvm::DenseMap<Operation *, int64_t> index;
  std::vector<PlanValue> values;                 ///< params, then args, then results in order
  llvm::DenseMap<Value, unsigned> valueId;       ///< args and results -> values[]
  llvm::DenseMap<Operation *, unsigned> paramId; ///< bigc.param -> values[]
  llvm::StringMap<unsigned> paramByName;
  std::vector<AliasGroup> groups;
  ::bigc::plan::ArenaPlan arena; ///< the device space's plan (arenas["device"])
  /// One plan per space ("device" always, "host" when a buffer is there);
  /// offsets[k] of a space's plan is for the k-th group of that space.
  std::map<std::string, ::bigc::plan::ArenaPlan> arenas;
  int64_t alignment = 64;

  int64_t offsetOf(Value v) const;
};

/// Liveness in the current order of `func` (def index -> last use; arguments
/// live from 0; the returned values to the end; parameters throughout, but
/// role "transfer" ones from their first to their last touch), extended for
/// side-stream ops: everything an op with `bigc.event = e` touches is live
/// until the bigc.wait naming e (or the end of the step); reshape aliasing,
/// in-place reuse of elementwise operands, and offsets from plan::planArena,
/// one arena per space (bigc.space of params and ops; arguments on the
/// device). Emits a located error and fails on a type it cannot size.
FailureOr<MemoryPlan> computeMemoryPlan(ModuleOp module, func::FuncOp func, int64_t alignment = 64);

/// The function the memory passes work on: @train_step.
func::FuncOp getTrainStep(ModuleOp module);

/// Elementwise ops whose result may reuse the buffer of an operand that dies
/// there (the in-place rule of docs/program-format.md).
bool isInPlaceElementwise(Operation *op);
/// The operands whose buffer result `result` of `op` may take over at their last use: every operand
/// of an in-place elementwise op; the fused ops' allowed pairs (add_layernorm's sum over a or r,
/// layernorm_grad_add's dx over r, bias_gelu's pre over x, gelu_grad_bias's dx over x or dy).
SmallVector<unsigned> inPlaceOperands(Operation *op, unsigned result);

} // namespace bigc
} // namespace mlir

#endif // BIGC_PASSES_MEMORYPLANANALYSIS_H
