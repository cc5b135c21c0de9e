//===- StepSimulation.h - the scheduled step on a hardware profile -*- C++ -*-===//
//
// Plays the scheduled @train_step (after bigc-schedule) on a hardware
// profile with the cost model: each stream runs its ops in order, an op
// starts when its stream is free and what it waits for has finished (the
// runtime's rules: a side-stream op is issued when the compute stream reaches
// it; a bigc.wait holds the compute stream until its events' ops end; an op
// reading another stream's result waits for it). Durations:
//   compute ops   roofline of the cost model (device FLOP/s, memory bandwidth);
//   h2d / d2h     bytes / the profile's PCIe bandwidth;
//   host ops      FLOPs / the host's FLOP/s;
//   nvme copies   bytes / the drives' read or write bandwidth shared by the
//                 machine's devices;
//   collectives   ring traffic per rank / interconnect bandwidth: all-reduce
//                 2 (n-1)/n x bytes, reduce-scatter and all-gather (n-1)/n.
// The result: the step's time, and per collective kind (those over the tensor
// axis apart, prefixed tp_) its time and the part of it hidden behind compute
// (the compute stream busy meanwhile), and the time it queued behind earlier
// work of its stream after its input was ready.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_ANALYSIS_STEPSIMULATION_H
#define BIGC_ANALYSIS_STEPSIMULATION_H

#include "bigc/Support/hardware.h"

#include "mlir/Support/LLVM.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace mlir {
class ModuleOp;
class Operation;
namespace bigc {

struct CollectiveTime {
  std::string op; ///< all_reduce, reduce_scatter, all_gather; tp_all_reduce, ... over the tensor axis
  long count = 0;
  double seconds = 0, hiddenSeconds = 0;
  /// Time between its input being ready and its start: queued behind earlier
  /// work of its stream (0 for a collective whose stream was idle then).
  double queuedSeconds = 0;
};

/// The other ops by (op, stream): their time on the profile and the cost model's counts.
struct OpTime {
  std::string op, stream;
  long count = 0;
  double seconds = 0, flops = 0, bytes = 0;
};

struct StepEstimate {
  double stepSeconds = 0;    ///< end of the last op of any stream
  double computeSeconds = 0; ///< the compute stream's busy time
  std::vector<CollectiveTime> collectives;
  std::vector<OpTime> ops; ///< by time, the longest first
};

/// Pipeline messages (send/recv, a stage's part of an all-reduce over the
/// stages) by (from stage, to stage, tag); the stages' all-reduces by (-1, -1,
/// their order).
using MessageKey = std::tuple<int64_t, int64_t, int64_t>;
using MessageTimes = std::map<MessageKey, double>;

/// One op of the simulated step, for pictures: where it ran and when.
struct OpSpan {
  Operation *op;
  std::string stream;
  double start, end;
};

/// `arrivals`: when each message a recv (or a stages' all-reduce) waits for is
/// there (a recv then ends at it, the all-reduce starts at it); none: at once.
/// `sent`: filled with when each send ends and each stages' all-reduce could
/// start on this stage. `trace`: every op with its stream and times.
StepEstimate simulateStep(ModuleOp module, const ::bigc::HardwareProfile &hw, const MessageTimes *arrivals = nullptr,
                          MessageTimes *sent = nullptr, std::vector<OpSpan> *trace = nullptr);

/// A stretch of a stage's compute stream given to one micro-batch's forward
/// ("forward"), backward ("backward", recomputation included) or weight
/// gradients ("weight"), or to the optimizer and the steps' other work
/// ("optimizer").
struct PipelineBlock {
  int64_t stage = 0, microBatch = -1;
  std::string kind;
  double start = 0, end = 0;
};

struct PipelineEstimate {
  double stepSeconds = 0;            ///< the last op of any stage ends
  std::vector<StepEstimate> stages;  ///< each stage's own figures (its stepSeconds: the pipeline's)
  std::vector<double> busySeconds;   ///< each stage's compute stream busy
  std::vector<PipelineBlock> blocks; ///< by stage, in time order; the gaps are the bubbles
  /// Idle time of the compute streams over their busy time, averaged over the
  /// stages (1F1B with equal stages and free messages: (p - 1) / m).
  double bubble = 0;
  int rounds = 0; ///< simulations of every stage until the messages' times settled
};

/// The stages of a pipelined step (bigc-pipeline's modules, scheduled), played
/// together: a recv ends when its send has (bytes over the interconnect), an
/// all-reduce over the stages starts when every stage reaches it. Each stage is
/// simulated with the messages' times of the previous round until they no
/// longer change (they only grow).
PipelineEstimate simulatePipeline(ArrayRef<ModuleOp> stages, const ::bigc::HardwareProfile &hw);

} // namespace bigc
} // namespace mlir

#endif // BIGC_ANALYSIS_STEPSIMULATION_H
