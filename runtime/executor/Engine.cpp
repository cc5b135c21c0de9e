// Engine: what every backend shares (docs/program-format.md names, roles and streams).
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace bigc::rt {

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {
template <class Sink> void normalStream(int64_t n, double std, uint64_t seed, const std::string &name, Sink sink) {
  uint64_t state = seed ^ fnv1a64(name.data(), name.size());
  const double twoPi = 6.283185307179586476925286766559;
  const double inv53 = 1.0 / 9007199254740992.0; // 2^-53
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = double((splitmix64(state) >> 11) + 1) * inv53;
    double u2 = double(splitmix64(state) >> 11) * inv53;
    double r = std::sqrt(-2.0 * std::log(u1));
    sink(i, std * r * std::cos(twoPi * u2));
    if (i + 1 < n) sink(i + 1, std * r * std::sin(twoPi * u2));
  }
}
} // namespace

void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name) {
  normalStream(n, std, seed, name, [&](int64_t i, double v) { x[i] = float(v); });
}

void initNormalAs(void *x, DType dtype, int64_t n, double std, uint64_t seed, const std::string &name) {
  switch (dtype) {
  case DType::BF16:
    normalStream(n, std, seed, name,
                 [&](int64_t i, double v) { static_cast<uint16_t *>(x)[i] = f32ToBf16(f64ToF32RoundOdd(v)); });
    return;
  case DType::F16:
    normalStream(n, std, seed, name,
                 [&](int64_t i, double v) { static_cast<uint16_t *>(x)[i] = f32ToF16(f64ToF32RoundOdd(v)); });
    return;
  default: initNormal(static_cast<float *>(x), n, std, seed, name);
  }
}

std::vector<float> Engine::readF32(int64_t bufferId) const {
  const Buffer &b = program().buffers.at(size_t(bufferId));
  std::vector<unsigned char> raw(size_t(b.bytes));
  readBytes(bufferId, raw.data());
  std::vector<float> v(size_t(b.numel()));
  toF32(raw.data(), b.dtype, v.data(), b.numel());
  return v;
}

void Engine::writeF32(int64_t bufferId, const float *values) {
  const Buffer &b = program().buffers.at(size_t(bufferId));
  std::vector<unsigned char> raw(size_t(b.bytes));
  fromF32(values, raw.data(), b.dtype, b.numel());
  writeBytes(bufferId, raw.data());
}

const Buffer *Engine::findPersistent(const std::string &name) const {
  for (const auto &b : program().buffers)
    if (b.persistent() && b.name == name) return &b;
  return nullptr;
}

std::vector<const Buffer *> Engine::params() const {
  std::vector<const Buffer *> out;
  for (const auto &b : program().buffers)
    if (b.role == "param") out.push_back(&b);
  return out;
}

std::vector<const Buffer *> Engine::weights() const {
  std::set<std::string> masters;
  for (const auto &b : program().buffers)
    if (b.role == "master") masters.insert(b.name);
  std::vector<const Buffer *> out;
  for (const auto &b : program().buffers) {
    if (b.role == "master") {
      out.push_back(&b);
    } else if (b.role == "param") {
      const std::string suffix = ".half";
      bool isCopy = b.name.size() > suffix.size() &&
                    b.name.compare(b.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                    masters.count(b.name.substr(0, b.name.size() - suffix.size()));
      isCopy |= b.init.kind == "copy" && masters.count(b.init.source); // e.g. N.half.shard (ZeRO-1/2)
      if (!isCopy) out.push_back(&b);
    }
  }
  return out;
}

void Engine::initialize(uint64_t seed) {
  std::vector<unsigned char> bytes;
  for (const auto &b : program().buffers) {
    if (!b.persistent() || b.init.kind == "copy") continue;
    bytes.assign(size_t(b.bytes), 0);
    const int64_t n = b.numel();
    if (b.init.kind == "normal") {
      initNormalAs(bytes.data(), b.dtype, n, b.init.std, seed, b.name);
    } else if (b.init.kind != "zeros") {
      const float v = b.init.kind == "ones" ? 1.0f : float(b.init.value);
      for (int64_t i = 0; i < n; ++i) storeFrom32(bytes.data(), b.dtype, i, v);
    }
    writeBytes(b.id, bytes.data());
  }
  refreshCopies();
  setCounters(0, 0);
}

void Engine::refreshCopies() {
  // Sources first (the loader rejects cycles and missing sources).
  const Program &p = program();
  std::vector<char> ready(p.buffers.size(), 1);
  for (const auto &b : p.buffers)
    if (b.persistent() && b.init.kind == "copy") ready[size_t(b.id)] = 0;
  std::vector<unsigned char> src, dst;
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto &b : p.buffers) {
      if (ready[size_t(b.id)]) continue;
      const Buffer *s = findPersistent(b.init.source);
      if (!s || !ready[size_t(s->id)]) continue;
      src.resize(size_t(s->bytes));
      dst.resize(size_t(b.bytes));
      readBytes(s->id, src.data());
      convert(src.data(), s->dtype, dst.data(), b.dtype, b.numel());
      writeBytes(b.id, dst.data());
      ready[size_t(b.id)] = 1;
      progress = true;
    }
  }
}

std::map<std::string, int64_t> Engine::arenaBytes() const {
  std::map<std::string, int64_t> out;
  for (const auto &s : program().spaces) out[s.name] = s.arenaBytes;
  return out;
}

std::vector<std::string> Engine::streams() const {
  std::vector<std::string> names = {"compute"};
  for (const auto &ins : program().instructions)
    if (std::find(names.begin(), names.end(), ins.stream) == names.end()) names.push_back(ins.stream);
  return names;
}

bool Engine::numericsChecked(size_t i, size_t k) const {
  const Program &p = program();
  const Instruction &ins = p.instructions[i];
  const Buffer &b = p.buffers[size_t(ins.out[k])];
  if (b.dtype == DType::I32 || ins.op == "check_finite") return false;
  if (p.lossScale >= 0 && (b.role == "grad" || b.role == "activation_grad" || b.role == "transfer")) return false;
  return true;
}

std::string Engine::numericsMessage(int64_t step, size_t i, size_t k, int64_t firstBad, int64_t badInput) const {
  const Program &p = program();
  const Instruction &ins = p.instructions[i];
  const Buffer &b = p.buffers[size_t(ins.out[k])];
  std::string m = "step " + std::to_string(step) + ": instruction " + std::to_string(i) + " (" + ins.op +
                  (ins.loc.empty() ? std::string() : " at " + ins.loc) + ") produced inf or nan: output " +
                  std::to_string(k) + " ('" + b.name + "', " + b.role + ") at element " + std::to_string(firstBad);
  if (badInput >= 0)
    m += "; its input '" + p.buffers[size_t(badInput)].name + "' (" + p.buffers[size_t(badInput)].role +
         ") already holds inf or nan" +
         (p.buffers[size_t(badInput)].persistent() ? " (the weights or optimizer state: loaded or diverged?)" : "");
  else
    m += " from finite inputs (an overflow: lower the learning rate, clip gradients, or use bf16 instead of fp16)";
  return m + " (--check-numerics)";
}

} // namespace bigc::rt
