// The evaluation program as a program of its own (`bigc eval`): the step's forward instructions
// (Program::evalInstructions) over the buffers of the evaluation's memory plan
// (Program::evalPlan), at the plan's offsets in arenas of the plan's sizes. No MLIR here.
#pragma once

#include "bigc/Format/program.h"

namespace bigc::format {

// The evaluation program of `p` (and of each of its pipeline stages) as a program of its own:
// instructions = the evaluation's, in order; buffers = the plan's (renumbered in order; names,
// shapes, roles and initial values as in `p`), at the plan's offsets; each space's arena the plan's
// (a space the plan does not use keeps none: 0 bytes); waits such that "a happens before b" holds
// between two of its instructions exactly when it does in `p` (where the evaluation runs in the
// training arenas, an instruction left out still waits for what it waits for, so orders through
// it hold); live intervals from its own instructions. Its evalInstructions are all of them, and
// it has no plan, recompute summary or estimate of its own. Throws UserError when `p` (or a
// stage) has no evaluation plan. `p` must have passed validateProgram.
Program evaluationProgram(const Program &p);

// Whether `p` and every pipeline stage of it has an evaluation plan.
bool hasEvaluationPlan(const Program &p);

} // namespace bigc::format
