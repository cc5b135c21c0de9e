//===- EvalPlan.h - the evaluation program's own memory plan ----*- C++ -*-===//
//
// `bigc eval` runs the step's forward alone (Program::evalInstructions). planEvaluation gives it
// a memory plan of its own (Program::evalPlan): the buffers it keeps (what its instructions touch,
// the weights of record, the step's inputs and loss) placed first-fit in arenas of their own, two
// buffers sharing bytes only when their live intervals in the evaluation are disjoint and every
// access of one happens before every access of the other (the plan verifier's rules). Gradients
// and optimizer state get no memory. The plan is proven before it is kept: the evaluation program
// (include/bigc/Format/evaluation.h) passes validateProgram and verifyPlan, else InternalError.
// Not planned (the evaluation then runs in the training arenas): pipelined programs, programs with
// an nvme space, programs without an evaluation.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

#include "bigc/Format/program.h"

namespace bigc {

void planEvaluation(format::Program &p, const std::string &path);

} // namespace bigc
