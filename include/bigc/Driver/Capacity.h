//===- Capacity.h - does a plan fit, and what would make it fit -*- C++ -*-===//
//
// The option search of `bigc compile`, in one place: the choices it makes before the final
// pipeline (--recompute auto: how much to recompute; --offload cpu: where the weights live) and
// the option sets it suggests when a plan does not fit. Uses compileToProgram (Pipeline.cpp);
// Compile.cpp uses this file, never the other way round.
//
// The capacity check of `bigc compile` (README, "Compile"): each memory space's arena against its
// capacity (device: per rank, --device-mem or the hardware profile; host: per machine,
// --host-mem or the profile). When a space does not fit, notFitReport() writes the not-fit table:
// needed vs available per space, bytes by role per space at that space's peak, and the
// option sets that would make it fit, found by compiling candidates (compileToProgram on the
// parsed module) and listed cheapest first (least recomputation and transfer time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bigc/Driver/Compile.h"
#include "bigc/Format/program.h"

namespace mlir {
class ModuleOp;
}

namespace bigc {

struct SpaceFit {
  std::string space;
  int64_t needed = 0, lowerBound = 0, capacity = 0; // capacity 0: unknown (not checked)
  bool fits = true;
};

// Capacity of a space under `o`: device -> o.deviceCapacity, host -> o.hostCapacity (the host
// of one machine is shared by its ranks: a program of R ranks needs R host arenas), else 0.
int64_t spaceCapacity(const CompileOptions &o, const std::string &space);
// One row per space of `p` (device first, then host, then others).
std::vector<SpaceFit> checkFit(const format::Program &p, const CompileOptions &o);
bool allFit(const std::vector<SpaceFit> &fits);
// A pipelined program's stage the capacity check reports: the first that does not fit, else the one
// with the largest device arena (each stage's ranks hold its own arenas); the program itself when
// it has one stage.
const format::Program &fullestStage(const format::Program &p, const CompileOptions &o);

// Extra work an option set costs per step, from the program: recomputed FLOPs and bytes
// copied between spaces, and an estimate of their time on the hardware (0 when none).
struct ExtraWork {
  int64_t flopsAdded = 0, forwardFlops = 0, transferBytes = 0;
  double commExposedSeconds = 0; // collectives' time not hidden behind compute (estimate)
  double bubbleSeconds = 0;      // a pipeline's: its step beyond the stages' mean busy time (estimate)
  double seconds = 0;
};
ExtraWork extraWork(const format::Program &p, const CompileOptions &o);

// Per-role bytes of one space of a program at the instruction where the most bytes are live
// (buffers sharing an offset at that instruction counted once), and that instruction.
struct RoleUsage {
  std::string role;
  int64_t bytes = 0;
};
std::vector<RoleUsage> peakUsageByRole(const format::Program &p, const std::string &space,
                                       int64_t *peakInstruction = nullptr);

// --offload cpu|nvme with offloadParams Auto: sets it to Host when the plan with the weights on
// the device does not fit o.deviceCapacity (one compileToProgram), else Device; with --offload
// nvme, to Nvme when the plan with them on the host does not fit o.hostCapacity either (a second
// compile); nothing for other options. Prints one line per move (unless o.quiet).
void chooseOffloadParams(mlir::ModuleOp parsed, CompileOptions &o);

/// The flags that say where `c` keeps its state differently from `base` (--offload-params,
/// --offload-grads and its limit, --offload-activations, --prefetch, --optimizer-states), as a user
/// adds them: the tail of the flags the not-fit report and --auto print.
std::string stateFlags(const CompileOptions &base, const CompileOptions &c);

// --recompute auto: the smallest number of ranked recomputation candidates whose planned device
// arena fits the budget (--memory-budget, else the device capacity); sets o.recomputeDrop.
// `budgetFromHardware`: the budget is the profile's device memory (for the messages).
void chooseRecompute(mlir::ModuleOp parsed, CompileOptions &o, bool budgetFromHardware);

// The choices `bigc compile` makes before its final pipeline: where --offload cpu keeps the
// weights (with recompute auto still undecided: everything recomputed), then the --recompute auto
// search with that choice.
void makeChoices(mlir::ModuleOp parsed, CompileOptions &o, bool budgetFromHardware);

// compileToProgram after the choices, for an option set the capacity check suggests (and
// compileSource); quiet. Its order is the recompute search first, then where the weights live.
// Throws as compileToProgram.
format::Program compileWithChoices(mlir::ModuleOp parsed, CompileOptions o);

// One option set that was tried by notFitReport().
struct Candidate {
  std::string flags; // "--precision bf16 --recompute selective"
  CompileOptions options;
  bool compiled = false; // false: the options are refused (not supported yet, budget, ...)
  bool fits = false;
  std::vector<SpaceFit> spaces;
  ExtraWork work;
  double stepSeconds = 0; // the cost model's step (the not-fit table's search; 0 for the fixed list)
  std::string why;        // when it was not compiled: the first line of the error
};

// Candidate option sets derived from `o` (at most `maxCandidates`, none equal to `o`), in the
// order of preference when their costs tie. `withoutOffload`: also try --offload none (when the
// host is what does not fit). `headsGcd`: the greatest common divisor of the model's attention
// heads (0: no attention), which a tensor size to suggest must divide; `vocab`: the classes of the
// model's cross-entropy (0: none), padded (--pad-vocab 64) for a tensor size that does not divide it.
std::vector<Candidate> candidateOptionSets(const CompileOptions &o, size_t maxCandidates = 6,
                                           bool withoutOffload = false, int64_t headsGcd = 0, int64_t vocab = 0);

// The whole message of a plan that does not fit (the caller prints it to stderr and exits 1).
// Compiles the candidates on `parsed` (diagnostics of failed candidates are swallowed); at most
// $BIGC_FIT_CANDIDATES of them (default 6; 0 tries none, for scripts that only need the status).
// `tried`, when given, receives every candidate with its outcome (for tests and tools).
std::string notFitReport(mlir::ModuleOp parsed, const format::Program &p, const CompileOptions &o,
                         std::vector<Candidate> *tried = nullptr);

} // namespace bigc
