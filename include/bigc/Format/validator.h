// Validating a program (docs/program-format.md): each buffer and instruction on its own (bounds,
// sizes, dtypes, shapes, operand counts, waits naming earlier instructions of other streams) and
// buffers sharing memory while live. What needs the whole step's order: verifier.h. No MLIR here.
#pragma once

#include <string>

#include "bigc/Format/program.h"

namespace bigc::format {

// Throws UserError("<path>: <what> ...") naming the first problem.
void validateProgram(const Program &p, const std::string &path);

} // namespace bigc::format
