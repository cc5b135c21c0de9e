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

#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
namespace bigc {

struct CollectiveTime {
  std::string op; ///< all_reduce, reduce_scatter, all_gather; tp_all_reduce, ... over the tensor axis
  long count = 0;
  double seconds = 0, hiddenSeconds = 0;
  /// Time between its input being ready and its start: queued behind earlier
  /// work of its stream (0 for a collective whose stream was idle then).
  double queuedSeconds = 0;
};

struct StepEstimate {
  double stepSeconds = 0;    ///< end of the last op of any stream
  double computeSeconds = 0; ///< the compute stream's busy time
  std::vector<CollectiveTime> collectives;
};

StepEstimate simulateStep(ModuleOp module, const ::bigc::HardwareProfile &hw);

} // namespace bigc
} // namespace mlir

#endif // BIGC_ANALYSIS_STEPSIMULATION_H
