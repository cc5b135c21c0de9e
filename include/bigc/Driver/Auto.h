//===- Auto.h - bigc compile --auto: the compiler chooses the strategy -*- C++ -*-===//
//
// `bigc compile model.mlir --auto --hardware H` searches the mesh (data x tensor x pipeline
// ranks; the most promising pipelines again in the interleaved schedule over 2 virtual stages and
// in zero-bubble), the ZeRO stage, the micro-batches (the global batch kept), recomputation and offload,
// with the precision and every other option as given; a flag given with --auto pins its
// dimension. Candidates whose model state alone exceeds a memory space (a lower bound computed
// from the parameter count) are ruled out before compiling; the others are compiled for real,
// cheapest techniques first for each mesh and ZeRO stage, and every plan kept fits and carries
// the cost model's step estimate. The fastest wins; the report lists the runner-ups and the
// Pareto front of device memory against step time (text, and an SVG with --pareto FILE).
// Uses Capacity.h's compileWithChoices and checkFit.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "bigc/Driver/Compile.h"

#include <functional>
#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
}

namespace bigc {

struct AutoPlan {
  CompileOptions options;
  std::string flags; // what `bigc compile` needs besides the user's other flags
  bool compiled = false, fits = false;
  bool estimated = false; // its figures come from compiles of the model cut to a few layers
  std::string why;        // not compiled or not fitting: the reason
  double stepSeconds = 0;
  int64_t deviceBytes = 0, hostBytes = 0; // per rank; host: per machine
  format::Program program;                // the plan (compiled ones)
};

// The search's last phase: the plans estimated to fit, fastest estimate first, compiled whole
// (compileWhole replaces a plan's estimate by its whole compile's figures, or marks it not fitting)
// until `wholeCompiles` of them fit and the fastest of those is no slower than the next estimate (a
// whole compile that comes out slower than its estimate lets the next candidates be compiled too);
// plans already compiled whole count as they are. `timeLeft(anyReal)`: whether another whole compile
// may start (anyReal: one already fits); else the plan is marked as left for time.
void compileInOrder(std::vector<AutoPlan> &plans, int wholeCompiles,
                    const std::function<void(AutoPlan &)> &compileWhole,
                    const std::function<bool(bool anyReal)> &timeLeft);

// How far the cut-model estimates may be over the whole compile's device memory (measured at most
// +9.0% over 11 configurations, bench/auto_estimates): a plan estimated over the machine by less is
// compiled whole before the search says that nothing fits.
inline constexpr double kEstimateMargin = 0.10;

struct AutoResult {
  std::vector<AutoPlan> plans; // every configuration considered, in the order of the search
  int chosen = -1;             // index into plans; -1: none fits
  int considered = 0, ruledOut = 0, compiled = 0, fitting = 0, skippedForTime = 0;
  int proxies = 0;      // compiles of the cut model
  int nearCompiled = 0; // estimated over the machine by less than the estimates' error, compiled whole
  double seconds = 0;
  int64_t globalBatch = 0, batch = 0;
  std::string report; // the text bigc compile prints
};

// What a search covers beyond --auto's own (the not-fit table of Capacity.h uses the same search,
// wider: it suggests a 16-bit precision too, the drive without --nvme-path, and every technique
// that fits rather than the cheapest of each mesh and ZeRO stage).
struct AutoScope {
  std::vector<mlir::bigc::Precision> precisions; // empty: base.precision only (--auto keeps the precision)
  bool driveWithoutPath = false;                 // --offload nvme searched when the profile has a drive, path or not
  bool everyTechnique = false;                   // go on past the first technique that fits a mesh and ZeRO stage
  int wholeCompiles = 3;                         // the fastest plans compiled whole (the plans kept are these)
};

// Searches on `parsed` from the user's options `base` (which flags were given: base.given).
// Throws format::UserError when the search cannot run (no hardware profile, a global batch no mesh
// divides). `command` is the user's command line without --auto and --pareto (for the line to
// paste).
AutoResult autoSearch(mlir::ModuleOp parsed, const CompileOptions &base, const std::string &command,
                      const AutoScope &scope = {});

// The Pareto front of the fitting plans (device memory against step time) as an SVG picture.
std::string paretoSvg(const AutoResult &r);

} // namespace bigc
