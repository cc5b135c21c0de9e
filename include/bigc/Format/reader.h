// Reading a program file (docs/program-format.md): the container line, the checksum, the JSON
// payload, then validateProgram (validator.h). No MLIR here.
#pragma once

#include <string>

#include "bigc/Format/program.h"

namespace bigc::format {

// Read, parse and validate. Throws UserError("<path>: <what> ...") on any problem.
Program loadProgram(const std::string &path);
// Parse and validate from the whole file's bytes (container line included).
Program parseProgram(const std::string &bytes, const std::string &path);

} // namespace bigc::format
