//===- BigcCollective.h - the device mesh and its collectives ---*- C++ -*-===//
//
// The module attribute `bigc.mesh = {dp = D, tp = T, pp = P}` (bigc-shard;
// with context parallelism also `cp = C`: C consecutive ranks of the data
// axis share their sequences, so D counts them) and the shard arithmetic of
// the collectives of BigcCollectiveOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_DIALECT_BIGCCOLLECTIVE_H
#define BIGC_DIALECT_BIGCCOLLECTIVE_H

#include "bigc/Dialect/BigcOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir {
namespace bigc {

// kMeshAttrName, kFullShapeAttrName: BigcAttrNames.h.
/// The axes of the device mesh (a collective's `group`, a key of bigc.mesh):
/// data, tensor and pipeline parallelism, and context parallelism (cp: a
/// sub-axis of dp, the C consecutive data ranks that hold the parts of the
/// same sequences; dp counts them, so the ranks are dp x tp x pp). Their
/// order is the program format's axis number (docs/program-format.md: 0 dp,
/// 1 tp, 2 pp, 3 cp).
inline constexpr llvm::StringLiteral kDpAxis = "dp";
inline constexpr llvm::StringLiteral kTpAxis = "tp";
inline constexpr llvm::StringLiteral kPpAxis = "pp";
inline constexpr llvm::StringLiteral kCpAxis = "cp";
inline constexpr llvm::StringLiteral kMeshAxes[] = {kDpAxis, kTpAxis, kPpAxis, kCpAxis};
/// A collective's `reduce`: the format's reduce number is the index here
/// (0 sum, 1 mean, 2 max, 3 norm: the square root of the sum of squares of
/// the ranks' f32 norms).
inline constexpr llvm::StringLiteral kReduceSum = "sum";
inline constexpr llvm::StringLiteral kReduceMean = "mean";
inline constexpr llvm::StringLiteral kReduceMax = "max";
inline constexpr llvm::StringLiteral kReduceNorm = "norm";
inline constexpr llvm::StringLiteral kReductions[] = {kReduceSum, kReduceMean, kReduceMax, kReduceNorm};
/// Whether `s` is one of kMeshAxes / kReductions.
inline bool isMeshAxis(StringRef s) { return s == kDpAxis || s == kTpAxis || s == kPpAxis || s == kCpAxis; }
inline bool isReduction(StringRef s) {
  return s == kReduceSum || s == kReduceMean || s == kReduceMax || s == kReduceNorm;
}
/// The stream collectives over the data-parallel axis run on.
inline constexpr llvm::StringLiteral kCommStream = "comm";
/// The stream of collectives over the tensor-parallel axis: on the critical
/// path, they never queue behind a data-parallel bucket or weight gather.
inline constexpr llvm::StringLiteral kTpCommStream = "comm_tp";
/// The stream of the context axis's collectives (ring shifts, all-to-alls): the next key/value block
/// travels there while the compute stream works on the current one, never queued behind a
/// data-parallel bucket or weight gather.
inline constexpr llvm::StringLiteral kCpCommStream = "comm_cp";
/// The stream of the point-to-point ops of pipeline parallelism (send, recv).
inline constexpr llvm::StringLiteral kP2PStream = "p2p";
/// bigc.send or bigc.recv.
bool isP2P(Operation *op);
/// The module's pipeline stage (the `stage` of its bigc.pipeline attribute): 0 without one.
int64_t pipelineStage(Operation *op);
/// The stream of collective `op`: kTpCommStream for group "tp", kCpCommStream for "cp", else kCommStream.
StringRef collectiveStream(Operation *op);

/// The size of mesh axis `axis` ("dp", "tp", "pp") of the module holding
/// `op`: 1 when the module has no mesh or the mesh no such axis.
int64_t meshAxisSize(Operation *op, StringRef axis);
/// The number of ranks of the module (dp x tp x pp: cp is within dp).
int64_t meshRanks(ModuleOp module);
/// Elements per shard of a tensor of `numel` elements over `ranks` ranks.
inline int64_t shardElements(int64_t numel, int64_t ranks) { return ranks <= 1 ? numel : (numel + ranks - 1) / ranks; }
/// A collective op (all_reduce, reduce_scatter, all_gather, param_all_gather,
/// ring_shift, cp_all_to_all).
bool isCollective(Operation *op);

} // namespace bigc
} // namespace mlir

#endif // BIGC_DIALECT_BIGCCOLLECTIVE_H
