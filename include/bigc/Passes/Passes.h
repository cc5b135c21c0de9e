//===- Passes.h - bigc passes -----------------------------------*- C++ -*-===//
//
// Declarations of every bigc pass (generated from passes/Passes.td): for a
// pass `BigcFoo` (flag bigc-foo) tablegen declares `BigcFooOptions` and
// `std::unique_ptr<Pass> createBigcFoo([const BigcFooOptions &])`;
// registerBigcPasses() registers them all (bigc-opt, bigc compile).
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_PASSES_PASSES_H
#define BIGC_PASSES_PASSES_H

#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/TrainPipeline.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir {
namespace bigc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

//===----------------------------------------------------------------------===//
// Helpers shared by passes and the compile driver (thin passes).
//===----------------------------------------------------------------------===//

// AdamWConfig (the AdamW hyper-parameters of bigc-autodiff): TrainPipeline.h.

/// Rewrites `module`'s func @forward (returning a scalar f32 loss) into
/// func @train_step: forward, backward (via DifferentiableOpInterface), one
/// bigc.adamw per parameter with a gradient; declares the AdamW moments
/// `<name>.exp_avg` / `<name>.exp_avg_sq`. Emits located errors and fails
/// on a missing @forward, a non-scalar loss or a non-differentiable op.
LogicalResult buildTrainStep(ModuleOp module, const AdamWConfig &config);

/// Appends to the insertion point of `b` the reverse-mode gradient of the
/// ops of `block` (everything but its terminator) with respect to `seeds`
/// (value -> gradient). On success `grads` maps every value that received a
/// gradient to its total gradient (summed over uses with bigc.add).
LogicalResult buildBackward(OpBuilder &b, Block &block, llvm::DenseMap<Value, Value> &grads);

/// bigc-pad-vocab: the largest power of two m <= `want` such that padding a vocabulary of `vocab`
/// rows to a multiple of m x `tp` leaves every tensor rank at least one of the vocabulary's rows;
/// 0 when none does (fewer rows than the ranks need).
int64_t padMultipleFor(int64_t vocab, int64_t tp, int64_t want = 64);

/// The LM heads bigc-fuse-loss would fuse in `module`'s @forward (cross-entropies, or
/// vocabulary-parallel statistics, of a matmul whose logits nothing else reads); 0 when none.
int64_t countFusableLossHeads(ModuleOp module);

} // namespace bigc
} // namespace mlir

#endif // BIGC_PASSES_PASSES_H
