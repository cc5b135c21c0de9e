// Writing a program file (docs/program-format.md): the container line and the JSON payload, one
// buffer or instruction per line. No MLIR here.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "bigc/Format/program.h"
#include "bigc/Support/file.h"

namespace bigc::format {

// Serialize (container line + JSON payload). Used by the compiler's emitter and by tests.
std::string serializeProgram(const Program &p);
// The payload's "hardware" object (name, capacities, reserves and their parts), as the program
// file (whose objects are sorted) and `bigc inspect --json` (in this order) write it.
nlohmann::ordered_json hardwareJson(const Program &p);
// Write atomically: to path + ".tmp", fsync, rename (include/bigc/Support/file.h).
using bigc::writeFileAtomic;

} // namespace bigc::format
