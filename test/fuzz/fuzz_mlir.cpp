// libFuzzer target: the MLIR front end and the whole compile pipeline (`bigc compile` on the
// input text): parse, verify, @forward's interface, autodiff, schedule, memory plan, emit, the
// plan verifier. A bad model is a UserError with diagnostics; an internal error (std::runtime_error)
// or a crash is a bug.
#include "bigc/Driver/Compile.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string diags;
  try {
    (void)bigc::compileSource(std::string(reinterpret_cast<const char *>(data), size), "fuzz.mlir",
                              bigc::CompileOptions{}, &diags);
  } catch (const bigc::UserError &) {
  } catch (const std::exception &e) {
    std::fprintf(stderr, "internal error: %s\n%s\n", e.what(), diags.c_str());
    std::abort();
  }
  return 0;
}
