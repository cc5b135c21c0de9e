// libFuzzer target: the token-file reader (nanoGPT raw uint16 or llm.c header + uint16) and the
// batch reader on top of it, on arbitrary file contents.
#include "bigc/Runtime/data.h"
#include "bigc/Runtime/program.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = "/tmp/bigc-fuzz-tokens-" + std::to_string(::getpid()) + ".bin";
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    bigc::rt::data::FileTokenSource src(path, 2, 8, 300);
    std::vector<int32_t> in(16), out(16);
    for (int i = 0; i < 4; ++i) src.next(in.data(), out.data());
    src.restore(src.state());
  } catch (const bigc::UserError &) {}
  return 0;
}
