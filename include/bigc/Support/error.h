// The error every layer throws for bad user input (a bad file, bad data, a bad flag): exit status 1,
// one message. Header-only, so the generator, the hardware profiles, the program format and the
// runtime each report errors without including one another. No MLIR here.
#pragma once

#include <stdexcept>

namespace bigc {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace bigc
