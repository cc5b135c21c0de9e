// libFuzzer target: the program loader (container line, checksum, JSON, validation) and the plan
// verifier on arbitrary bytes. Any input may be rejected with a UserError; nothing may crash,
// hang, leak or trip a sanitizer. Inputs whose container checksum is wrong are re-wrapped with the
// right one half of the time, so the fuzzer also reaches the JSON and the validator.
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/verifier.h"

#include <cstdint>
#include <cstdio>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  if (size > 0 && (data[0] & 1)) { // treat the input as a payload and wrap it
    char head[96];
    std::snprintf(head, sizeof head, "BIGC-PROGRAM 2 %zu %016llx\n", size - 1,
                  (unsigned long long)bigc::format::fnv1a64(data + 1, size - 1));
    bytes = head + bytes.substr(1);
  }
  try {
    bigc::format::Program p = bigc::format::parseProgram(bytes, "fuzz.bigc");
    (void)bigc::format::verifyPlan(p, 5);
  } catch (const bigc::UserError &) {}
  return 0;
}
