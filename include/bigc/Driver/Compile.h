//===- Compile.h - `bigc compile` -------------------------------*- C++ -*-===//
//
//   bigc compile model.mlir -o model.bigc [--hardware NAME|FILE] [--device-mem SIZE] ...
//
// Pipeline: parse + verify -> the choices (Capacity.h) -> the passes of buildTrainPipeline ->
// emit -> capacity check -> write (atomically; nothing is written on any failure).
// Files: Compile.cpp (the option table, the command), Capacity.cpp (the option search and the
// capacity check), Pipeline.cpp (compileToProgram); each uses only those after it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigc/Passes/TrainPipeline.h"
#include "bigc/Format/program.h"
#include "bigc/Support/hardware.h"

namespace mlir {
class ModuleOp;
}

namespace bigc {

// Everything `bigc compile` decides from its options: the pipeline's settings (precision,
// recompute, offload, ZeRO, AdamW, ...; mlir::bigc::TrainPipelineConfig) and the driver's own
// (files, capacities). Each flag is declared once, in the option table of Compile.cpp; the
// compiler's own choices (recomputeDrop, offloadParams) are filled in before the pipeline runs.
struct CompileOptions : mlir::bigc::TrainPipelineConfig {
  std::string input, output;
  std::string emitMlir; // --emit-mlir FILE: also write the IR the pipeline ends with ("-": stdout)
  bool quiet = false;
  // The model's own initial weights (module attribute bigc.weights, resolved and checked).
  std::string initialWeights;
  int64_t initialWeightsBytes = 0;
  // A weight's name in that file where it differs (module attribute bigc.weights_names).
  std::map<std::string, std::string> initialNames;
  // The module's persistent buffers in that file (module attribute bigc.buffers).
  std::vector<std::string> initialBuffers;
  // Capacity
  bool haveHardware = false;
  HardwareProfile hardware;
  // Memory per device and of the host (--device-mem / --host-mem, else the profile's), the
  // reserves kept out of them (--device-reserve / --host-reserve, else the profile's; 0 without a
  // profile) and what the plan may use: memory - reserve (0: unknown).
  int64_t deviceMemory = 0, hostMemory = 0, deviceReserve = 0, hostReserve = 0;
  std::vector<std::pair<std::string, int64_t>> deviceReserveParts;
  int64_t deviceCapacity = 0, hostCapacity = 0;
  // --offload nvme: the directory of the nvme space (recorded in the program) and what the plan may
  // use of the drives (--nvme-mem, else the profile's nvme_bytes; 0: unknown).
  std::string nvmePath;
  int64_t nvmeCapacity = 0;
  int64_t memoryBudget = 0;           // --recompute auto: bytes; 0: the device capacity
  std::optional<int64_t> globalBatch; // --global-batch: checked against the model
  // --auto (Auto.h): the compiler chooses the strategy; --pareto FILE: its picture; `given`: the
  // flags on the command line (they pin their dimension of the search).
  format::LrSchedule schedule; // --lr-schedule and its steps
  bool autoSearch = false;
  double autoSeconds = 25.0; // --auto's compile budget (0: none)
  std::string paretoSvg;
  std::set<std::string> given;
};

// A failure that is the compiler's fault (exit status 2).
struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the pipeline on a clone of `parsed` (which is left untouched) with `o`, and returns the
// emitted, validated program. Throws format::UserError when the model or the options are wrong
// (diagnostics already printed) and InternalError on internal errors. The passes are those of
// mlir::bigc::buildTrainPipeline (bigc-opt --bigc-train-pipeline). `finalIR`, when given,
// receives the module after the last pass. A pipeline whose balanced split leaves a stage over the
// device capacity gets a split bounded by memory when one fits better; `notes`, when given,
// receives a line saying so. Defined in Pipeline.cpp.
format::Program compileToProgram(mlir::ModuleOp parsed, const CompileOptions &o, std::string *finalIR = nullptr,
                                 std::vector<std::string> *notes = nullptr);
// The bigc-opt command that runs the same passes with the same options on the model (its
// --bigc-train-pipeline options: every option of the table whose value is not its default,
// including the driver's choices, e.g. offload-params and recompute-drop). Pipeline.cpp.
std::string reproduceCommand(const CompileOptions &o);
// The device arena a plan needs per rank: a pipelined program's fullest stage's (0: no device
// space). Defined in Pipeline.cpp.
int64_t fullestDeviceArena(const format::Program &p);

// The whole front end and pipeline on model text held in memory (`name` for diagnostics): parse,
// verify, check @forward's interface, compile with `o` (--recompute auto and --offload-params
// auto choices included). Diagnostics go to `diagnostics` (located, as `bigc compile` prints
// them). Throws format::UserError for a bad model or options, std::runtime_error for internal errors.
// Used by the MLIR front end's fuzz target.
format::Program compileSource(const std::string &text, const std::string &name, CompileOptions o,
                              std::string *diagnostics);

// Entry point of `bigc compile`; argv[first] is the first argument after `compile`. Returns
// the exit status: 0 written; 1 bad input (file, syntax, verifier, option) or the plan does not
// fit (a table on stderr); 2 internal error. Throws format::UserError for bad options (the caller
// prints it and exits 1).
int compileMain(int argc, char **argv, int first);
const char *compileHelp();

} // namespace bigc
