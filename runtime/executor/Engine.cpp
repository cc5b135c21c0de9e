// Engine: what every backend shares (docs/program-format.md names, roles and streams).
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>

namespace bigc::rt {

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

std::map<std::string, const Buffer *> Engine::persistentByName() const {
  std::map<std::string, const Buffer *> out;
  for (const auto &b : program().buffers)
    if (b.persistent()) out.emplace(b.name, &b);
  return out;
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

namespace {
// Buffer b's init values for elements [begin, begin + count) of the whole tensor into x; a padded
// vocabulary's rows (bigc-pad-vocab) zero, the model's rows drawn as those of the unpadded tensor.
void initValues(const Buffer &b, void *x, int64_t begin, int64_t count, uint64_t seed) {
  if (b.vocabRows > 0) {
    const int64_t model = std::clamp<int64_t>(b.logicalNumel() - begin, 0, count);
    if (model < count)
      initConstantRange(static_cast<char *>(x) + model * dtypeSize(b.dtype), b.dtype, count - model, 0.0f);
    count = model;
    if (count == 0) return;
  }
  if (b.init.kind == "normal")
    initNormalRange(x, b.dtype, begin, count, b.init.std, seed, b.name);
  else if (b.init.kind == "zeros")
    initConstantRange(x, b.dtype, count, 0.0f);
  else
    initConstantRange(x, b.dtype, count, b.init.kind == "ones" ? 1.0f : float(b.init.value));
}
} // namespace

namespace {
std::atomic<int> loadingWeights{0};
}
Engine::LoadingWeights::LoadingWeights() { ++loadingWeights; }
Engine::LoadingWeights::~LoadingWeights() { --loadingWeights; }

void Engine::initialize(uint64_t seed) {
  // Every tensor's values in pieces of about a million elements, all in one parallel loop (no
  // thread waits at the end of each tensor); replicas (ranks holding a tensor whole) copied after.
  struct Job {
    const Buffer *b;
    void *dst;
    int64_t begin, count; // elements of the whole tensor; for zeros, bytes at dst
    bool zero;
  };
  std::vector<Job> jobs;
  struct Replica {
    void *to;
    const void *from;
    int64_t bytes;
  };
  std::vector<Replica> replicas;
  std::vector<unsigned char> bytes; // engines without host pieces: one tensor at a time
  constexpr int64_t kElements = int64_t(1) << 20;
  std::vector<char> loaded(program().buffers.size(), 0); // weights about to be loaded
  if (loadingWeights.load() > 0)
    for (const Buffer *w : weights()) loaded[size_t(w->id)] = 1;
  for (const auto &b : program().buffers) {
    if (!b.persistent() || b.init.kind == "copy") continue;
    const std::vector<HostPiece> pieces = hostPieces(b.id);
    if (loaded[size_t(b.id)]) {
      // No values: freshly mapped pages are populated in bulk as for a zero buffer (the loader's
      // reads would otherwise fault them in one by one); else only the padding of its shards,
      // which the loader does not write.
      const int64_t e = dtypeSize(b.dtype);
      for (const HostPiece &pc : pieces) {
        char *d = static_cast<char *>(pc.data);
        const int64_t from = arenasZeroed_ ? 0 : pc.count * e;
        for (int64_t at = from; at < pc.capacity * e; at += kElements * 4)
          jobs.push_back(Job{&b, d + at, 0, std::min(kElements * 4, pc.capacity * e - at), true});
      }
      continue;
    }
    if (pieces.empty()) {
      // A zero tensor in a just-created file (the nvme space, preallocated: it reads as zeros).
      if (arenasZeroed_ && b.space == "nvme" && b.init.kind == "zeros") continue;
      bytes.assign(size_t(b.bytes), 0);
      initValues(b, bytes.data(), 0, b.numel(), seed);
      writeBytes(b.id, bytes.data());
      continue;
    }
    const int64_t e = dtypeSize(b.dtype);
    const bool zero =
        b.init.kind == "zeros" || (b.init.kind != "normal" && b.init.kind != "ones" && b.init.value == 0.0);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const HostPiece &pc = pieces[k];
      char *d = static_cast<char *>(pc.data);
      if (zero) {
        for (int64_t at = 0; at < pc.capacity * e; at += kElements * 4)
          jobs.push_back(Job{&b, d + at, 0, std::min(kElements * 4, pc.capacity * e - at), true});
        continue;
      }
      const HostPiece *same = nullptr; // a replica computed already
      for (size_t j = 0; j < k && !same; ++j)
        if (pieces[j].begin == pc.begin && pieces[j].count == pc.count) same = &pieces[j];
      if (same)
        replicas.push_back(Replica{pc.data, same->data, pc.count * e});
      else
        for (int64_t at = 0; at < pc.count; at += kElements)
          jobs.push_back(Job{&b, d + at * e, pc.begin + at, std::min(kElements, pc.count - at), false});
      if (pc.capacity > pc.count) jobs.push_back(Job{&b, d + pc.count * e, 0, (pc.capacity - pc.count) * e, true});
    }
  }
  const bool fresh = arenasZeroed_;
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  InitTimes times;
  for (const Job &job : jobs)
    (job.zero ? times.zeroBytes : times.valueBytes) += job.zero ? job.count : job.count * dtypeSize(job.b->dtype);
  for (const bool zeros : {false, true}) { // the values, then the zeros (timed apart)
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job &job = jobs[j];
      if (job.zero != zeros) continue;
      if (job.zero) { // freshly mapped zero pages are populated rather than written
        zeroFill(job.dst, job.count, fresh);
      } else {
        if (fresh) populatePages(job.dst, job.count * dtypeSize(job.b->dtype)); // the pages in bulk, then the values
        initValues(*job.b, job.dst, job.begin, job.count, seed);
      }
    }
    if (!zeros) {
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t j = 0; j < replicas.size(); ++j)
        std::memcpy(replicas[j].to, replicas[j].from, size_t(replicas[j].bytes));
    }
    const auto t1 = clock::now();
    (zeros ? times.zerosSeconds : times.valuesSeconds) = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
  }
  arenasZeroed_ = false;
  refreshCopies();
  times.copiesSeconds = std::chrono::duration<double>(clock::now() - t0).count();
  initTimes_ = times;
  setCounters(0, 0);
}

void Engine::refreshCopies() {
  // Each copy after its source (the loader rejects cycles and missing sources), in one pass.
  const Program &p = program();
  const auto byName = persistentByName();
  std::vector<char> ready(p.buffers.size(), 1);
  for (const auto &b : p.buffers)
    if (b.persistent() && b.init.kind == "copy") ready[size_t(b.id)] = 0;
  std::vector<unsigned char> src, dst;
  std::function<void(const Buffer &)> make = [&](const Buffer &b) {
    if (ready[size_t(b.id)]) return;
    ready[size_t(b.id)] = 1; // (a cycle would stop here)
    auto it = byName.find(b.init.source);
    if (it == byName.end()) return;
    const Buffer &s = *it->second;
    make(s);
    const std::vector<HostPiece> from = hostPieces(s.id), to = hostPieces(b.id);
    if (from.size() == 1 && to.size() == 1 && from[0].count == s.numel() && to[0].count == b.numel() &&
        s.numel() == b.numel()) {
      convert(from[0].data, s.dtype, to[0].data, b.dtype, b.numel()); // in parallel, in place
      return;
    }
    src.resize(size_t(s.bytes));
    dst.resize(size_t(b.bytes));
    readBytes(s.id, src.data());
    convert(src.data(), s.dtype, dst.data(), b.dtype, b.numel());
    writeBytes(b.id, dst.data());
  };
  for (const auto &b : p.buffers) make(b);
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
  if (b.dtype == DType::I32 || ins.op == "check_finite" || b.space == "nvme") return false;
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
    m += std::string(" from finite inputs (an overflow: lower the learning rate, clip gradients") +
         (p.precision == "fp16" ? ", or use bf16 instead of fp16)" : ")");
  return m + " (--check-numerics)";
}

} // namespace bigc::rt
