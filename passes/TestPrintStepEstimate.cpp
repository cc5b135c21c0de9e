//===- TestPrintStepEstimate.cpp - bigc-test-print-step-estimate ----------===//
//
// Plays the scheduled @train_step on the rates given as options
// (lib/analysis/StepSimulation.cpp) and prints to stderr, for FileCheck:
//
//   step-estimate: step=1.573 ms compute=1.573 ms
//   all_reduce: count=1 time=1.000 ms hidden=1.000 ms
//
// The IR is not changed.
//
//===----------------------------------------------------------------------===//

#include "bigc/Analysis/StepSimulation.h"
#include "bigc/Passes/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCTESTPRINTSTEPESTIMATE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {
struct BigcTestPrintStepEstimatePass
    : public mlir::bigc::impl::BigcTestPrintStepEstimateBase<BigcTestPrintStepEstimatePass> {
  using Base::Base;
  void runOnOperation() override {
    ::bigc::HardwareProfile hw;
    hw.name = "test";
    hw.deviceFlops = deviceFlops;
    hw.deviceBytesPerS = deviceBytesPerS;
    hw.interconnectBytesPerS = linkBytesPerS;
    hw.h2dBytesPerS = hw.d2hBytesPerS = pcieBytesPerS;
    hw.hostFlops = hostFlops;
    StepEstimate e = simulateStep(getOperation(), hw);
    auto &os = llvm::errs();
    os << "step-estimate: step=" << llvm::format("%.3f", e.stepSeconds * 1e3)
       << " ms compute=" << llvm::format("%.3f", e.computeSeconds * 1e3) << " ms\n";
    for (const auto &c : e.collectives)
      os << c.op << ": count=" << c.count << " time=" << llvm::format("%.3f", c.seconds * 1e3)
         << " ms hidden=" << llvm::format("%.3f", c.hiddenSeconds * 1e3)
         << " ms queued=" << llvm::format("%.3f", c.queuedSeconds * 1e3) << " ms\n";
  }
};
} // namespace
