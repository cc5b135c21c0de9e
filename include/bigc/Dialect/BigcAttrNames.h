//===- BigcAttrNames.h - the discardable attributes passes exchange -*- C++ -*-===//
//
// Every discardable `bigc.*` attribute one pass (or the emitter) writes and
// another reads, named once, with the accessors for the ones read in several
// places. Ops' own (inherent) attributes are declared in the .td files.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_DIALECT_BIGCATTRNAMES_H
#define BIGC_DIALECT_BIGCATTRNAMES_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mlir {
namespace bigc {

//===----------------------------------------------------------------------===//
// bigc.param's init and role (inherent attributes; ParamOp::verify refuses
// any other value)
//===----------------------------------------------------------------------===//

/// How a parameter starts: normal (std), zeros, ones, fill (value), copy (a
/// cast of the persistent tensor `source`).
inline constexpr llvm::StringLiteral kInitNormal = "normal";
inline constexpr llvm::StringLiteral kInitZeros = "zeros";
inline constexpr llvm::StringLiteral kInitOnes = "ones";
inline constexpr llvm::StringLiteral kInitFill = "fill";
inline constexpr llvm::StringLiteral kInitCopy = "copy";
inline bool isKnownInit(StringRef s) {
  return s == kInitNormal || s == kInitZeros || s == kInitOnes || s == kInitFill || s == kInitCopy;
}
/// What a parameter is: a weight the model computes with (param), the fp32
/// master of 16-bit weights (master), AdamW's state or the loss scale
/// (optimizer), a host staging tensor of the offload passes (transfer).
inline constexpr llvm::StringLiteral kParamRole = "param";
inline constexpr llvm::StringLiteral kMasterRole = "master";
inline constexpr llvm::StringLiteral kOptimizerRole = "optimizer";
inline constexpr llvm::StringLiteral kTransferRole = "transfer";
inline bool isKnownRole(StringRef s) {
  return s == kParamRole || s == kMasterRole || s == kOptimizerRole || s == kTransferRole;
}

//===----------------------------------------------------------------------===//
// On ops of @train_step
//===----------------------------------------------------------------------===//

/// The phase of an op in the train step: "forward", "backward" or
/// "optimizer" (bigc-autodiff; later passes copy it onto what they add).
inline constexpr llvm::StringLiteral kPhaseAttrName = "bigc.phase";
inline constexpr llvm::StringLiteral kForwardPhase = "forward";
inline constexpr llvm::StringLiteral kBackwardPhase = "backward";
inline constexpr llvm::StringLiteral kOptimizerPhase = "optimizer";
/// True for the three phases. The dialect's verifier refuses any other value
/// of bigc.phase, bigc.space (isKnownSpace) and bigc.stream (isKnownStream)
/// on any op.
inline bool isKnownPhase(StringRef phase) {
  return phase == kForwardPhase || phase == kBackwardPhase || phase == kOptimizerPhase;
}
/// i64: the transformer block a forward op (and its backward) belongs to.
inline constexpr llvm::StringLiteral kLayerAttrName = "bigc.layer";
/// i64: the micro-batch an op of the accumulation loop works on
/// (bigc-grad-accum).
inline constexpr llvm::StringLiteral kMicroBatchAttrName = "bigc.micro_batch";
/// unit: an add or cast that accumulates a gradient over micro-batches
/// (bigc-grad-accum).
inline constexpr llvm::StringLiteral kGradAccumAttrName = "bigc.grad_accum";
/// unit: a bigc.global_norm of one gradient, which the overflow check or the clipping norm
/// reads instead of the gradient (bigc-offload); bigc-schedule places it a layer after the
/// collective that makes its gradient.
inline constexpr llvm::StringLiteral kPartialNormAttrName = "bigc.partial_norm";
/// unit: a backward op of the weight-gradient part of its micro-batch's
/// backward (no send of its stage needs it), which the zero-bubble schedule
/// runs apart from the input-gradient part (bigc-pipeline).
inline constexpr llvm::StringLiteral kWeightGradAttrName = "bigc.weight_grad";
/// On an op: unit, a forward op cloned into the backward (bigc-recompute).
/// On the module: the dictionary of what bigc-recompute decided (policy,
/// candidates, dropped, clones, saved_bytes, flops_added, forward_flops).
inline constexpr llvm::StringLiteral kRecomputeAttrName = "bigc.recompute";
/// "device" | "host": on bigc.param, bigc.copy and ops executed on the host.
inline constexpr llvm::StringLiteral kSpaceAttrName = "bigc.space";
/// "compute" (default) | "h2d" | "d2h" | "host" | "comm" | "comm_tp".
inline constexpr llvm::StringLiteral kStreamAttrName = "bigc.stream";
/// i64, unique per side-stream op: what bigc.wait names.
inline constexpr llvm::StringLiteral kEventAttrName = "bigc.event";
/// On a weight split over the tensor ranks (bigc-tensor-parallel): [dim,
/// segments] of the split and the whole tensor's shape; the type is the
/// rank's chunk.
inline constexpr llvm::StringLiteral kTpSplitAttrName = "bigc.tp_split";
inline constexpr llvm::StringLiteral kTpFullShapeAttrName = "bigc.tp_full_shape";
/// On an embedding (and its gradient) over a vocabulary split on mesh axis
/// "tp": ids outside this rank's rows give zeros.
inline constexpr llvm::StringLiteral kVocabGroupAttrName = "bigc.vocab_group";
/// bigc-pad-vocab: on a bigc.param whose first dimension is a vocabulary
/// padded to a multiple, i64 the model's rows (the rest are zero padding);
/// on a cross-entropy op (and its gradient, the vocabulary-parallel and fused
/// forms), i64 the classes: logits columns from there on are padding, outside
/// the softmax, with zero gradient.
inline constexpr llvm::StringLiteral kVocabRowsAttrName = "bigc.vocab_rows";
inline constexpr llvm::StringLiteral kClassesAttrName = "bigc.classes";
/// On a sharded bigc.param: the shape of the whole tensor it is a shard of.
inline constexpr llvm::StringLiteral kFullShapeAttrName = "bigc.full_shape";
/// bigc-tile (--tile-linear): on a bigc.param, i64 k: the weight is used as k
/// equal row tiles (its first dimension split in k). Sharded (ZeRO-3), its
/// shards are tile-interleaved: rank r holds piece r of tile 0, then piece r
/// of tile 1, ... (each piece ceil(tile / ranks) elements, the last padded),
/// so that each tile is gathered and its gradient reduce-scattered alone.
inline constexpr llvm::StringLiteral kTilesAttrName = "bigc.tiles";
/// bigc-tile, on the module: {weights, tiles, untiled} (the weights tiled, the most tiles of one,
/// the names of the weights over the size left whole).
inline constexpr llvm::StringLiteral kTiledAttrName = "bigc.tiled";
/// bigc-memory-plan: i64 offset of a bigc.param in its space's arena; the
/// offsets of an op's results; of @train_step's arguments.
inline constexpr llvm::StringLiteral kOffsetAttrName = "bigc.offset";
inline constexpr llvm::StringLiteral kOffsetsAttrName = "bigc.offsets";
inline constexpr llvm::StringLiteral kArgOffsetsAttrName = "bigc.arg_offsets";
/// bigc-memory-plan, on @train_step: the arena of each space and its lower
/// bound (the host ones only when something lives on the host).
inline constexpr llvm::StringLiteral kArenaBytesAttrName = "bigc.arena_bytes";
inline constexpr llvm::StringLiteral kLowerBoundBytesAttrName = "bigc.lower_bound_bytes";
inline constexpr llvm::StringLiteral kHostArenaBytesAttrName = "bigc.host_arena_bytes";
inline constexpr llvm::StringLiteral kHostLowerBoundBytesAttrName = "bigc.host_lower_bound_bytes";
// The nvme space's arena (bigc-offload-nvme), planned with kNvmeAlignment.
inline constexpr llvm::StringLiteral kNvmeArenaBytesAttrName = "bigc.nvme_arena_bytes";
inline constexpr llvm::StringLiteral kNvmeLowerBoundBytesAttrName = "bigc.nvme_lower_bound_bytes";
// Offsets and sizes in the nvme space and the host space beside it: what O_DIRECT needs.
inline constexpr int64_t kNvmeAlignment = 4096;
/// bigc-offload-nvme: the update a bigc.adamw and its nvme copies belong to (one number per
/// update, or per chunk of one); bigc-schedule places the copies by it.
inline constexpr llvm::StringLiteral kNvmeUpdateAttrName = "bigc.nvme_update";

//===----------------------------------------------------------------------===//
// On the module
//===----------------------------------------------------------------------===//

/// {dp = D, tp = T, pp = P} (bigc-shard).
inline constexpr llvm::StringLiteral kMeshAttrName = "bigc.mesh";
/// "bf16" | "fp16" (bigc-mixed-precision; absent: fp32).
inline constexpr llvm::StringLiteral kPrecisionAttrName = "bigc.precision";
/// i64 K > 1 (bigc-grad-accum; absent: one micro-batch).
inline constexpr llvm::StringLiteral kMicroBatchesAttrName = "bigc.micro_batches";
/// {stages = P, stage = s, schedule = "gpipe"|"1f1b"|..., virtual_stages = V,
/// split = array<i64: first layer of each stage>} (bigc-pipeline): this module is stage s.
inline constexpr llvm::StringLiteral kPipelineAttrName = "bigc.pipeline";
/// i64 ZeRO stage (bigc-shard).
inline constexpr llvm::StringLiteral kZeroAttrName = "bigc.zero";
/// Module: `{size = C, kind = "ring" | "a2a", seq = T}` (bigc-context-parallel: @forward is one
/// of C context-parallel ranks' part of sequences of T tokens), read by bigc-cp-attention.
inline constexpr llvm::StringLiteral kContextParallelAttrName = "bigc.context_parallel";
/// Module: `{tensors = N, bytes = B}` (bigc-offload-activations: the activations that go to the
/// host in the forward and come back for the backward), for bigc inspect and the driver's summary.
inline constexpr llvm::StringLiteral kOffloadActivationsAttrName = "bigc.offload_activations";
/// unit: Megatron sequence parallelism (bigc-tensor-parallel).
inline constexpr llvm::StringLiteral kSequenceParallelAttrName = "bigc.sequence_parallel";
/// The weights every tensor rank holds whole (bigc-tensor-parallel notes).
inline constexpr llvm::StringLiteral kTpReplicatedAttrName = "bigc.tp_replicated";
/// "cpu" and where the weights live between uses, "device" | "host"
/// (bigc-offload).
inline constexpr llvm::StringLiteral kOffloadAttrName = "bigc.offload";
inline constexpr llvm::StringLiteral kOffloadParamsAttrName = "bigc.offload_params";
/// The model's initial weights, a .safetensors file relative to the model
/// (bigc import writes it; the compile driver resolves it).
inline constexpr llvm::StringLiteral kWeightsAttrName = "bigc.weights";

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

/// The phase of `op` ("" when it has none).
inline StringRef phaseOf(Operation *op) {
  auto p = op->getAttrOfType<StringAttr>(kPhaseAttrName);
  return p ? p.getValue() : StringRef();
}

/// The micro-batch of `op` (none outside the accumulation loop).
inline std::optional<int64_t> microBatchOf(Operation *op) {
  if (auto m = op->getAttrOfType<IntegerAttr>(kMicroBatchAttrName)) return m.getInt();
  return std::nullopt;
}

/// True for a forward op cloned into the backward by bigc-recompute.
inline bool isRecomputed(Operation *op) { return op->hasAttr(kRecomputeAttrName); }

/// True for an add or cast accumulating a gradient over micro-batches.
inline bool isGradAccum(Operation *op) { return op->hasAttr(kGradAccumAttrName); }

/// True for a backward op of the weight-gradient part (zero-bubble schedule).
inline bool isWeightGrad(Operation *op) { return op->hasAttr(kWeightGradAttrName); }

} // namespace bigc
} // namespace mlir

#endif // BIGC_DIALECT_BIGCATTRNAMES_H
