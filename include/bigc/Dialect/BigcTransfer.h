//===- BigcTransfer.h - memory spaces, streams, events ----------*- C++ -*-===//
//
// The discardable attributes of CPU offload and of the schedule's streams
// (see dialects/BigcTransferOps.td) and the queries that bigc-offload,
// bigc-schedule, bigc-memory-plan and the emitter share.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_DIALECT_BIGCTRANSFER_H
#define BIGC_DIALECT_BIGCTRANSFER_H

#include "bigc/Dialect/BigcOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace mlir {
namespace bigc {

// kSpaceAttrName, kStreamAttrName, kEventAttrName, kLayerAttrName:
// BigcAttrNames.h.

inline constexpr llvm::StringLiteral kDeviceSpace = "device";
inline constexpr llvm::StringLiteral kHostSpace = "host";
/// bigc-offload-nvme: a file-backed space only the "nvme" stream's param
/// copies touch.
inline constexpr llvm::StringLiteral kNvmeSpace = "nvme";
inline constexpr llvm::StringLiteral kNvmeStream = "nvme";
inline constexpr llvm::StringLiteral kComputeStream = "compute";
/// Copies to the device, to the host; host ops (the CPU Adam).
inline constexpr llvm::StringLiteral kH2DStream = "h2d";
inline constexpr llvm::StringLiteral kD2HStream = "d2h";
inline constexpr llvm::StringLiteral kHostStream = "host";

/// True for "device", "host" and "nvme".
bool isKnownSpace(StringRef space);
/// True for "compute", "h2d", "d2h", "host", "nvme", "comm", "comm_tp" and
/// "p2p" (the collectives' and the pipeline's: BigcCollective.h).
bool isKnownStream(StringRef stream);

/// The memory space of a bigc.param ("device" unless `bigc.space` says).
StringRef paramSpace(ParamOp param);
/// The space an op executes in / writes its results to: its `bigc.space`,
/// else "device".
StringRef opSpace(Operation *op);
/// The space of a value: arguments are on the device, a bigc.get_param
/// result is the parameter (its space), other results are in the space of
/// their op.
StringRef valueSpace(Value value);
/// The same, a bigc.get_param's from `paramSpace` (its parameter's name -> its space): a pass
/// asking for many values keeps the spaces in a map (a symbol lookup scans the module).
StringRef valueSpace(Value value, llvm::function_ref<StringRef(StringRef)> paramSpace);
/// The stream of an op: its `bigc.stream`, else "compute".
StringRef opStream(Operation *op);
/// The op runs on a side stream (h2d, d2h, host).
inline bool isSideStream(Operation *op) { return opStream(op) != kComputeStream; }
/// The `bigc.event` of an op, -1 when it has none.
int64_t opEvent(Operation *op);
/// The `bigc.layer` of an op, -1 when it has none.
int64_t opLayer(Operation *op);

/// Copies the placement tags of `from` (bigc.phase, bigc.layer,
/// bigc.micro_batch, when it has them) onto `to`: an op a pass adds for
/// another op sits where that one does.
void copyPlacementTags(Operation *from, Operation *to);

/// A new bigc.param `name` right after `after` (no std or value), or a
/// located error naming `pass` when the name is taken. With `symbols` (the
/// module's table, kept by a pass that adds many) the name is looked up there
/// and the new param registered in it, instead of a walk over the module.
FailureOr<ParamOp> addParamAfter(ParamOp after, StringRef name, Type type, StringRef init, StringRef role,
                                 StringRef source, StringRef pass, SymbolTable *symbols = nullptr);

} // namespace bigc
} // namespace mlir

#endif // BIGC_DIALECT_BIGCTRANSFER_H
