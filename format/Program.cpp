// The program's data model: dtypes, the payload hash, counts (docs/program-format.md). No MLIR here.
#include <cmath>
#include <cstdio>
#include "bigc/Format/program.h"

#include <algorithm>

namespace bigc::format {

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
  auto tiled = [](const Program &q) {
    for (const Buffer &b : q.buffers)
      if (b.tiles > 1) return true;
    return false;
  };
  bool anyTiled = tiled(p);
  for (const Program &s : p.stages) anyTiled = anyTiled || tiled(s);
  if (anyTiled) return 6;
  if (p.optimizer.schedule.present()) return 5;
  bool any = padded(p);
  for (const Program &s : p.stages) any = any || padded(s);
  return any ? 4 : std::min(p.version, 3);
}

double learningRate(const Optimizer &o, double lr, int64_t i) {
  const LrSchedule &s = o.schedule;
  if (!s.present()) return lr;
  if (i < s.warmupSteps) return lr * double(i + 1) / double(s.warmupSteps);
  if (s.kind == "constant") return lr;
  const double mn = lr == o.lr ? s.minLr : s.minLr * (lr / o.lr);
  if (i >= s.decaySteps) return mn;
  if (s.kind == "wsd") {
    const int64_t start = s.decaySteps - s.wsdDecaySteps;
    if (i < start) return lr;
    return mn + (lr - mn) * (1.0 - double(i - start) / double(s.wsdDecaySteps));
  }
  const double ratio = double(i - s.warmupSteps) / double(s.decaySteps - s.warmupSteps);
  if (s.kind == "cosine") return mn + (lr - mn) * 0.5 * (1.0 + std::cos(M_PI * ratio));
  return mn + (lr - mn) * (1.0 - ratio); // linear
}

std::string describeSchedule(const Optimizer &o) {
  const LrSchedule &s = o.schedule;
  char lr[32], mn[32];
  std::snprintf(lr, sizeof lr, "%g", o.lr);
  std::snprintf(mn, sizeof mn, "%g", s.minLr);
  std::string out = s.kind + " (lr " + lr;
  if (s.warmupSteps > 0) out += ", warmup " + std::to_string(s.warmupSteps) + " steps";
  if (s.kind == "wsd")
    out += ", stable to step " + std::to_string(s.decaySteps - s.wsdDecaySteps) + ", then decay over " +
           std::to_string(s.wsdDecaySteps) + " steps";
  if (s.kind != "constant")
    out += std::string(s.kind == "wsd" ? " " : ", decay ") + "to " + mn + " by step " + std::to_string(s.decaySteps) +
           ", then " + mn;
  return out + ")";
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

} // namespace bigc::format
