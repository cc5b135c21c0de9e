// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, offsets) and the
// conversion of every tensor it accepts.
#include "bigc/Runtime/safetensors.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    bigc::format::safetensors::File f =
        bigc::format::safetensors::parse(std::string(reinterpret_cast<const char *>(data), size), "fuzz.safetensors");
    for (const auto &t : f.tensors) (void)t.toF32();
    (void)bigc::format::safetensors::serialize(f);
  } catch (const bigc::UserError &) {}
  return 0;
}
