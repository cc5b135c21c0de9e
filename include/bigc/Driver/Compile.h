//===- Compile.h - `bigc compile` -------------------------------*- C++ -*-===//
//
//   bigc compile model.mlir -o model.bigc [--hardware NAME|FILE] [--device-mem SIZE] ...
//
// Pipeline: parse + verify -> bigc-autodiff -> bigc-schedule -> bigc-memory-plan -> emit ->
// capacity check -> write (atomically; nothing is written on any failure). See ../shared/CLI.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bigc/runtime/program.h"
#include "bigc/support/hardware.h"

namespace mlir {
class ModuleOp;
}

namespace bigc {

// Everything `bigc compile` decides from its options; one field per option of CLI.md (plus the
// compiler's own choices, filled in by the driver before the pipeline runs).
struct CompileOptions {
  std::string input, output;
  bool quiet = false;
  // The model's own initial weights (module attribute bigc.weights, resolved and checked).
  std::string initialWeights;
  int64_t initialWeightsBytes = 0;
  // AdamW
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1, gradClip = 0.0;
  // Capacity
  bool haveHardware = false;
  HardwareProfile hardware;
  // Memory per device and of the host (--device-mem / --host-mem, else the profile's), the
  // reserves kept out of them (--device-reserve / --host-reserve, else the profile's; 0 without a
  // profile) and what the plan may use: memory - reserve (0: unknown).
  int64_t deviceMemory = 0, hostMemory = 0, deviceReserve = 0, hostReserve = 0;
  std::vector<std::pair<std::string, int64_t>> deviceReserveParts;
  int64_t deviceCapacity = 0, hostCapacity = 0;
  // Techniques
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  double lossScaleInit = 65536.0;  // fp16 dynamic loss scaling: initial scale
  int64_t lossScaleGrowthInterval = 2000; // clean steps before the scale doubles
  int64_t microBatches = 1;
  std::string recompute = "none";  // none | full | selective | auto
  int64_t memoryBudget = 0;        // bytes; 0: the device capacity
  int64_t recomputeDrop = -1;      // auto: how many ranked candidates are recomputed (-1: search)
  std::string offload = "none";    // none | cpu | nvme
  std::string offloadParams = "auto"; // with offload: device | host | auto (host when the device cannot hold them)
  // Data parallelism (bigc-shard, bigc-schedule)
  int64_t ranks = 1;      // all ranks (dp x tp)
  int64_t zero = 0;       // ZeRO stage over dp
  int64_t tp = 1;         // tensor-parallel ranks (the tp axis; dp = ranks / tp)
  bool sequenceParallel = false;
  double bucketMb = 25;   // largest merged collective, MiB
  int64_t prefetch = 1;   // ZeRO-3: layer segments an all-gather runs ahead of its use
};

// Runs the pipeline on a clone of `parsed` (which is left untouched) with `o`, and returns the
// emitted, validated program. Throws rt::UserError when the model or the options are wrong
// (diagnostics already printed) and std::runtime_error on internal errors.
rt::Program compileToProgram(mlir::ModuleOp parsed, const CompileOptions &o);

// The whole front end and pipeline on model text held in memory (`name` for diagnostics): parse,
// verify, check @forward's interface, compile with `o` (--recompute auto and --offload-params
// auto choices included). Diagnostics go to `diagnostics` (located, as `bigc compile` prints
// them). Throws rt::UserError for a bad model or options, std::runtime_error for internal errors.
// Used by the MLIR front end's fuzz target.
rt::Program compileSource(const std::string &text, const std::string &name, CompileOptions o,
                          std::string *diagnostics);

// --offload cpu with offloadParams "auto": sets it to "host" when the plan with the weights on
// the device does not fit o.deviceCapacity (one compileToProgram), else "device"; nothing for other
// options. Prints one line when it chooses the host (unless o.quiet).
void chooseOffloadParams(mlir::ModuleOp parsed, CompileOptions &o);

// Entry point of `bigc compile`; argv[first] is the first argument after `compile`. Returns
// the exit status: 0 written; 1 bad input (file, syntax, verifier, option) or the plan does not
// fit (a table on stderr); 2 internal error. Throws rt::UserError for bad options (the caller
// prints it and exits 1).
int compileMain(int argc, char **argv, int first);
const char *compileHelp();

// Per-role bytes of one space of a program at the instruction where the most bytes are live
// (buffers sharing an offset at that instruction counted once), and that instruction.
struct RoleUsage {
  std::string role;
  int64_t bytes = 0;
};
std::vector<RoleUsage> peakUsageByRole(const rt::Program &p, const std::string &space,
                                       int64_t *peakInstruction = nullptr);

} // namespace bigc
