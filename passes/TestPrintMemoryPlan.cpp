//===- TestPrintMemoryPlan.cpp - bigc-test-print-memory-plan --------------===//
//
// Prints the memory plan of @train_step to stderr, one line per buffer, for
// FileCheck (as Triton tests its allocation analysis):
//
//   memory-plan @train_step: instructions=4 buffers=7 arena=512 lower_bound=512
//   @w param : offset=0 size=128 live=[0,3]
//   %arg0 arg : offset=128 size=24 live=[0,1]
//   %0 bigc.matmul : offset=256 size=96 live=[0,2]
//
// Sizes are the buffers' own bytes (offsets are 64-aligned); `live` is the
// buffer's own interval of instruction indices. Values that share a place
// (reshape, in place) print the same offset. With a host space (bigc-offload)
// the first line ends with ` host_arena=H host_lower_bound=L` and the lines
// of host buffers with ` space=host` (offsets in the host arena).
//
//===----------------------------------------------------------------------===//

#include "MemoryPlanAnalysis.h"

#include "bigc/Passes/Passes.h"

#include "mlir/IR/AsmState.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCTESTPRINTMEMORYPLAN
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {
struct BigcTestPrintMemoryPlanPass : public mlir::bigc::impl::BigcTestPrintMemoryPlanBase<BigcTestPrintMemoryPlanPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = getTrainStep(module);
    if (!func) {
      module.emitError("bigc-test-print-memory-plan: the module has no "
                       "func.func @train_step");
      return signalPassFailure();
    }
    FailureOr<MemoryPlan> mp = computeMemoryPlan(module, func);
    if (failed(mp)) return signalPassFailure();

    llvm::raw_ostream &os = llvm::errs();
    os << "memory-plan @" << func.getSymName() << ": instructions=" << mp->numInstructions
       << " buffers=" << mp->values.size() << " arena=" << mp->arena.arenaBytes
       << " lower_bound=" << mp->arena.lowerBoundBytes;
    auto host = mp->arenas.find("host");
    if (host != mp->arenas.end())
      os << " host_arena=" << host->second.arenaBytes << " host_lower_bound=" << host->second.lowerBoundBytes;
    auto nvme = mp->arenas.find("nvme");
    if (nvme != mp->arenas.end())
      os << " nvme_arena=" << nvme->second.arenaBytes << " nvme_lower_bound=" << nvme->second.lowerBoundBytes;
    os << "\n";
    AsmState state(func);
    for (PlanValue pv : mp->values) {
      switch (pv.kind) {
      case PlanValue::Param: os << "@" << pv.param.getSymName() << " " << pv.param.getRole(); break;
      case PlanValue::Arg:
        pv.value.printAsOperand(os, state);
        os << " arg";
        break;
      case PlanValue::Result:
        pv.value.printAsOperand(os, state);
        os << " " << pv.value.getDefiningOp()->getName();
        break;
      }
      os << " : offset=" << mp->groups[pv.group].offset << " size=" << pv.bytes << " live=[" << pv.first << ","
         << pv.last << "]";
      if (pv.space != "device") os << " space=" << pv.space;
      os << "\n";
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
