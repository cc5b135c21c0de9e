//===- Emitter.h - planned MLIR module -> bigc program ----------*- C++ -*-===//
//
// The last step of `bigc compile`: from a module that went through
// bigc-autodiff, bigc-schedule and bigc-memory-plan, build the program the
// runtime executes (docs/program-format.md). The emitter decides nothing: the
// order is the IR's, every offset comes from the bigc.offsets / bigc.offset /
// bigc.arg_offsets attributes, the arena size from bigc.arena_bytes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "bigc/Format/program.h"
#include "mlir/IR/BuiltinOps.h"

namespace bigc::emit {

// The module is not what the emitter expects (not planned, an op with no runtime instruction,
// ...): a compiler bug, `bigc compile` exits 2.
struct EmitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Builds the program of @train_step. Buffers: every bigc.param (roles param / optimizer, live
// over the whole step, with its init), the arguments (role input: tokens, targets), every op
// result except bigc.get_param's (which is the parameter). Roles of results: `grad` for the
// gradient operand of a bigc.adamw and the values aliased into it (reshape, in place),
// `activation` for forward-phase values, `activation_grad` for the others. Instructions: the
// ops in order except bigc.get_param; adamw in = [param, grad, m, v(, norm)(, loss_scale)(, found_inf)],
// out = [param, m, v(, half)] with the v2 flags clip / unscale / skip_on_overflow / write_half.
// Inputs: one (tokens, targets) pair per micro-batch (2K arguments); config.precision and
// micro_batches from the module attributes bigc.precision / bigc.micro_batches; loss_scaling from
// bigc.loss_scale_update.
// Throws EmitError.
// `header` holds what the driver knows and the module does not (producer, source, optimizer,
// hardware name, capacities and reserves, the model's initial weights); the program is built on it.
format::Program buildProgram(mlir::ModuleOp module, format::Program header);

// "file:line:col" of a location (the first file location inside fused / named / call-site
// locations), "" when it has none.
std::string locString(mlir::Location loc);

} // namespace bigc::emit
