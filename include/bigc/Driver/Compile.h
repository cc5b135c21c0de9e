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

namespace bigc {

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
