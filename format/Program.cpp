// The program's data model: dtypes, the payload hash, counts (docs/program-format.md). No MLIR here.
#include "bigc/Format/program.h"

#include <algorithm>

namespace bigc::rt {

const char *dtypeName(DType d) {
  switch (d) {
  case DType::F32: return "f32";
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::I32: return "i32";
  }
  return "?";
}

int64_t dtypeSize(DType d) {
  switch (d) {
  case DType::F32: return 4;
  case DType::BF16: return 2;
  case DType::F16: return 2;
  case DType::I32: return 4;
  }
  return 0;
}

bool parseDType(const std::string &s, DType &out) {
  if (s == "f32")
    out = DType::F32;
  else if (s == "bf16")
    out = DType::BF16;
  else if (s == "f16")
    out = DType::F16;
  else if (s == "i32")
    out = DType::I32;
  else
    return false;
  return true;
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int writtenVersion(const Program &p) {
  auto padded = [](const Program &q) {
    for (const Buffer &b : q.buffers)
      if (b.vocabRows > 0) return true;
    for (const Instruction &ins : q.instructions)
      if (ins.attrs.count("classes")) return true;
    return false;
  };
  bool any = padded(p);
  for (const Program &s : p.stages) any = any || padded(s);
  return any ? 4 : std::min(p.version, 3);
}

int64_t Program::stateBytes() const {
  int64_t n = 0;
  for (const auto &b : buffers) {
    if (!b.persistent()) continue;
    n += b.logicalNumel() * dtypeSize(b.dtype); // (a padded vocabulary: its model rows, as a checkpoint)
  }
  for (const Program &s : stages) n += s.stateBytes(); // a pipeline's other stages
  return n;
}

int64_t Program::parameterCount() const {
  int64_t n = 0;
  // The weights the step computes with, whole (a ZeRO-3 shard counts as its tensor); the rank's
  // shard of a ZeRO-1/2 compute copy (`N.half.shard`, next to the whole `N.half`) not again.
  const std::string shardSuffix = ".half.shard";
  for (const auto &b : buffers) {
    if (b.role != "param") continue;
    if (b.name.size() > shardSuffix.size() &&
        b.name.compare(b.name.size() - shardSuffix.size(), shardSuffix.size(), shardSuffix) == 0)
      continue;
    n += b.logicalNumel(); // a tensor-parallel chunk: the whole weight; a padded vocabulary: its rows
  }
  return n;
}

} // namespace bigc::rt
