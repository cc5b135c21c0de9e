// The executor: arenas, buffer placement, initialisation, fp32 staging of 16-bit operands,
// streams, and the instruction loop (CPU backend).
#include "bigc/runtime/executor.h"
#include "bigc/runtime/cpu_adam.h"
#include "bigc/runtime/half.h"
#include "bigc/runtime/kernels.h"
#include "bigc/runtime/loss_scale.h"
#include "bigc/runtime/ops.h"
#include "bigc/runtime/op_dims.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <omp.h>

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

// A 16-bit operand converted into (pre) or out of (post) its fp32 staging area.
struct Conv {
  int64_t id = -1;
  void *arena = nullptr;
  DType dtype = DType::F32;
  int64_t n = 0;
  int64_t stageOffset = 0; // floats into the stream's staging
  float *stage = nullptr;
};

struct Executor::Op : OpDims {
  std::vector<CollectiveTensor> coll; // collectives: the tensors of the bucket
  Reduce reduce = Reduce::Sum;
  OpKind kind;
  size_t index = 0;
  size_t stream = 0;
  const Instruction *ins = nullptr;
  std::vector<void *> in, out;       // what kernels read/write: arena, or fp32 staging for 16-bit operands
  std::vector<void *> rawIn, rawOut; // arena
  std::vector<DType> inType, outType;
  std::vector<int64_t> inNumel, outNumel;
  std::vector<Conv> pre, post;
  int64_t stageFloats = 0;
  std::vector<float *> parts;
  std::vector<const float *> cparts;
  int axis = 0;          // collectives: the mesh axis
  int64_t offset = 0;    // vocabulary-parallel ops: the first id of this rank's rows
};

// Stream workers and completion stamps.
struct Executor::Streams {
  std::vector<std::string> names;          // [0] = compute
  std::vector<std::vector<size_t>> lists;  // op indices per stream, program order
  std::unique_ptr<std::atomic<int64_t>[]> done; // per op: the last step in which it finished
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> waiters{0};
  std::mutex ctlMu;
  std::condition_variable ctlCv, doneCv;
  int64_t go = 0;
  int pending = 0;
  bool quit = false;
  int ompThreads = 1;
  std::atomic<bool> abort{false};
  std::mutex errMu;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  bool multi = false;
  std::mutex blasMu; // OpenBLAS calls from two threads at once are not safe in every build

  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> l(errMu);
      if (!error) error = e;
    }
    abort.store(true);
    std::lock_guard<std::mutex> l(mu);
    cv.notify_all();
  }
};

namespace {
struct Aborted {}; // another stream failed; this one stops quietly

std::string human(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
bool is16(DType d) { return d == DType::BF16 || d == DType::F16; }
// Ops that read and write their operands in their stored dtypes themselves (no staging).
bool direct(OpKind k) {
  switch (k) {
  case OpKind::Embedding:
  case OpKind::Cast:
  case OpKind::Copy:
  case OpKind::Wait:
  case OpKind::CheckFinite:
  case OpKind::GlobalNorm:
  case OpKind::Reshape:
  case OpKind::AdamW:
  case OpKind::LossScaleUpdate:
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::TpSlice: return true;
  default: return false;
  }
}
} // namespace

Executor::Executor(Program program, uint64_t seed, RankContext rank) : prog_(std::move(program)), rank_(std::move(rank)) {
  if ((prog_.dp != 1 && (!rank_.comm || rank_.comm->size() != prog_.dp)) ||
      (prog_.tp != 1 && (!rank_.tpComm || rank_.tpComm->size() != prog_.tp)))
    throw UserError("this program has " + std::to_string(prog_.ranks) + " ranks: run it with `bigc run`, which "
                    "starts every rank with a communicator (one executor runs one rank)");
  int64_t total = 0;
  std::string list;
  for (const auto &s : prog_.spaces) {
    total += s.arenaBytes;
    list += (list.empty() ? "" : " + ") + s.name + " " + std::to_string(s.arenaBytes) + " bytes (" +
            human(s.arenaBytes) + ")";
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0) {
    int64_t phys = int64_t(pages) * int64_t(pageSize);
    if (total > phys)
      throw UserError("the program's arenas need " + std::to_string(total) + " bytes (" + human(total) +
                      ") together: " + list + "; this machine has " + std::to_string(phys) + " bytes (" + human(phys) +
                      ") of physical memory. Compile for a smaller model or batch (or with --offload/--recompute), "
                      "or run on a larger machine");
  }
  for (size_t i = 0; i < prog_.spaces.size(); ++i) {
    const Space &s = prog_.spaces[i];
    // Mapped, not touched: the kernel gives zero pages as they are first written, so the resident
    // pages are what the steps used (measuredBytes). No transparent huge pages: a 2 MiB page would
    // count 2 MiB for one byte written.
    size_t bytes = size_t((std::max<int64_t>(s.arenaBytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      freeArenas();
      throw UserError("cannot allocate the '" + s.name + "' arena of " + std::to_string(s.arenaBytes) + " bytes (" +
                      human(s.arenaBytes) + ")");
    }
#ifdef MADV_NOHUGEPAGE
    ::madvise(p, bytes, MADV_NOHUGEPAGE);
#endif
    arenas_.push_back(p);
    arenaMapped_.push_back(bytes);
    arenaIndex_[s.name] = int64_t(i);
  }
  ptrs_.resize(prog_.buffers.size());
  for (const auto &b : prog_.buffers)
    ptrs_[size_t(b.id)] = static_cast<char *>(arenas_[size_t(arenaIndex_.at(b.space))]) + b.offset;
  try {
    prepare();
  } catch (...) {
    freeArenas();
    for (void *a : staging_) std::free(a);
    throw;
  }
  if (rank_.initialize) initialize(seed);

  // Side streams: one worker thread each, created once.
  Streams &S = *streams_;
  for (size_t s = 1; s < S.names.size(); ++s)
    S.threads.emplace_back([this, s] {
      Streams &S = *streams_;
      int64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> l(S.ctlMu);
          S.ctlCv.wait(l, [&] { return S.quit || S.go > seen; });
          if (S.quit) return;
          seen = S.go;
        }
        omp_set_num_threads(S.ompThreads);
        try {
          runStream(s);
        } catch (const Aborted &) {
        } catch (...) {
          S.fail(std::current_exception());
        }
        std::lock_guard<std::mutex> l(S.ctlMu);
        if (--S.pending == 0) S.doneCv.notify_all();
      }
    });
}

Executor::~Executor() {
  if (streams_) {
    {
      std::lock_guard<std::mutex> l(streams_->ctlMu);
      streams_->quit = true;
    }
    streams_->ctlCv.notify_all();
    for (auto &t : streams_->threads) t.join();
  }
  freeArenas();
  for (void *a : staging_) std::free(a);
}

void Executor::freeArenas() {
  for (size_t i = 0; i < arenas_.size(); ++i) ::munmap(arenas_[i], arenaMapped_[i]);
  arenas_.clear(), arenaMapped_.clear();
}

std::map<std::string, int64_t> Executor::measuredBytes() const {
  std::map<std::string, int64_t> out;
  const long page = sysconf(_SC_PAGESIZE);
  for (const auto &[name, i] : arenaIndex_) {
    const Space &s = prog_.spaces[size_t(i)];
    const size_t bytes = arenaMapped_[size_t(i)], pages = (bytes + size_t(page) - 1) / size_t(page);
    std::vector<unsigned char> resident(pages);
    int64_t touched = 0;
    if (::mincore(arenas_[size_t(i)], bytes, resident.data()) == 0)
      for (size_t k = 0; k < pages; ++k)
        if (resident[k] & 1) touched += std::min<int64_t>(page, int64_t(bytes - k * size_t(page)));
    out[name] = std::min<int64_t>(touched, s.arenaBytes);
  }
  return out;
}

int64_t processPeakResidentBytes() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return int64_t(ru.ru_maxrss) * 1024; // Linux: kilobytes
}

std::vector<float> Executor::readF32(int64_t bufferId) const {
  const Buffer &b = prog_.buffers.at(size_t(bufferId));
  std::vector<float> v(size_t(b.numel()));
  toF32(data(bufferId), b.dtype, v.data(), b.numel());
  return v;
}

void Executor::writeF32(int64_t bufferId, const float *values) {
  const Buffer &b = prog_.buffers.at(size_t(bufferId));
  fromF32(values, data(bufferId), b.dtype, b.numel());
}

void Executor::readBytes(int64_t id, void *dst) const {
  std::memcpy(dst, data(id), size_t(prog_.buffers.at(size_t(id)).bytes));
}

void Executor::writeBytes(int64_t id, const void *src) {
  std::memcpy(data(id), src, size_t(prog_.buffers.at(size_t(id)).bytes));
}

std::map<std::string, int64_t> Executor::stagingBytes() const {
  std::map<std::string, int64_t> out;
  for (size_t s = 0; s < streams_->names.size(); ++s) out[streams_->names[s]] = stagingBytes_[s];
  return out;
}


void Executor::enableGradCapture() {
  capture_ = true;
  captureDst_.assign(ops_.size(), nullptr);
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op &op = ops_[i];
    if (op.kind != OpKind::AdamW) continue;
    const Buffer &param = prog_.buffers[size_t(op.ins->in[0])];
    auto &dst = grads_[param.name];
    dst.assign(size_t(param.numel()), 0.0f);
    captureDst_[i] = dst.data();
  }
}

void Executor::prepare() {
  streams_ = std::make_unique<Streams>();
  Streams &S = *streams_;
  S.names = {"compute"};
  for (const auto &ins : prog_.instructions)
    if (std::find(S.names.begin(), S.names.end(), ins.stream) == S.names.end()) S.names.push_back(ins.stream);
  S.lists.assign(S.names.size(), {});
  S.multi = S.names.size() > 1;
  S.done = std::make_unique<std::atomic<int64_t>[]>(prog_.instructions.size());
  for (size_t i = 0; i < prog_.instructions.size(); ++i) S.done[i].store(0);

  ops_.clear();
  ops_.reserve(prog_.instructions.size());
  stagingBytes_.assign(S.names.size(), 0);
  for (size_t i = 0; i < prog_.instructions.size(); ++i) {
    const Instruction &ins = prog_.instructions[i];
    const OpSignature *sig = findOpSignature(ins.op);
    if (!sig) throw UserError("instruction " + std::to_string(i) + ": unknown op '" + ins.op + "'");
    Op op;
    op.kind = sig->kind;
    op.index = i;
    op.ins = &ins;
    op.stream = size_t(std::find(S.names.begin(), S.names.end(), ins.stream) - S.names.begin());
    S.lists[op.stream].push_back(i);
    auto in = [&](size_t k) -> const Buffer & { return prog_.buffers[size_t(ins.in[k])]; };
    auto out = [&](size_t k) -> const Buffer & { return prog_.buffers[size_t(ins.out[k])]; };
    for (size_t k = 0; k < ins.in.size(); ++k) {
      op.rawIn.push_back(ptrs_[size_t(ins.in[k])]);
      op.inType.push_back(in(k).dtype);
      op.inNumel.push_back(in(k).numel());
    }
    for (size_t k = 0; k < ins.out.size(); ++k) {
      op.rawOut.push_back(ptrs_[size_t(ins.out[k])]);
      op.outType.push_back(out(k).dtype);
      op.outNumel.push_back(out(k).numel());
    }
    op.in = op.rawIn, op.out = op.rawOut;
    // fp32 staging for the 16-bit operands of the ops that compute in fp32 on f32 pointers. A
    // buffer that is both read and written shares one staging area.
    if (!direct(op.kind)) {
      std::map<int64_t, int64_t> stageOf; // buffer id -> offset in floats
      auto stage = [&](int64_t id) {
        auto it = stageOf.find(id);
        if (it != stageOf.end()) return it->second;
        int64_t off = op.stageFloats;
        op.stageFloats += (prog_.buffers[size_t(id)].numel() + 15) / 16 * 16;
        stageOf[id] = off;
        return off;
      };
      for (size_t k = 0; k < ins.in.size(); ++k)
        if (is16(in(k).dtype)) {
          bool seen = stageOf.count(ins.in[k]);
          int64_t off = stage(ins.in[k]);
          if (!seen) op.pre.push_back(Conv{ins.in[k], op.rawIn[k], in(k).dtype, in(k).numel(), off, nullptr});
        }
      for (size_t k = 0; k < ins.out.size(); ++k)
        if (is16(out(k).dtype))
          op.post.push_back(Conv{ins.out[k], op.rawOut[k], out(k).dtype, out(k).numel(), stage(ins.out[k]), nullptr});
      stagingBytes_[op.stream] = std::max(stagingBytes_[op.stream], op.stageFloats * 4);
    }
    static_cast<OpDims &>(op) = decodeOp(prog_, ins, op.kind);
    if (op.vocabParallel) op.offset = int64_t(rank_.tpRank) * op.V; // this rank's rows of the vocabulary
    if (op.tpHeads) op.headOffset = int64_t(rank_.tpRank) * op.H;   // this rank's query heads
    if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
      op.axis = int(ins.num("axis", 0));
      Communicator *c = op.axis == 1 ? rank_.tpComm.get() : rank_.comm.get();
      if (!c) throw UserError("instruction " + std::to_string(i) + " (" + ins.op + ") is a collective, but "
                              "this executor runs one rank without a communicator for its axis");
      op.reduce = Reduce(int(ins.num("reduce", 0)));
      int64_t scratch = 0;
      const int64_t n = prog_.axisSize(int64_t(ins.num("axis", 0)));
      for (size_t k = 0; k < ins.in.size(); ++k) {
        op.coll.push_back(CollectiveTensor{op.rawIn[k], op.rawOut[k], in(k).dtype, in(k).numel(), out(k).numel()});
        scratch += (in(k).numel() + n - 1) / n;
      }
      c->reserve(scratch);
    }
    ops_.push_back(std::move(op));
  }

  // Staging areas (one per stream: streams run concurrently), then the kernels' pointers.
  staging_.assign(S.names.size(), nullptr);
  for (size_t s = 0; s < S.names.size(); ++s) {
    if (stagingBytes_[s] == 0) continue;
    size_t bytes = size_t((stagingBytes_[s] + kAlignment - 1) / kAlignment * kAlignment);
    staging_[s] = std::aligned_alloc(size_t(kAlignment), bytes);
    if (!staging_[s])
      throw UserError("cannot allocate " + std::to_string(bytes) + " bytes of fp32 staging for the '" + S.names[s] +
                      "' stream");
  }
  for (Op &op : ops_) {
    float *base = static_cast<float *>(staging_[op.stream]);
    for (Conv &c : op.pre) c.stage = base + c.stageOffset;
    for (Conv &c : op.post) c.stage = base + c.stageOffset;
    for (size_t k = 0; k < op.in.size(); ++k)
      for (const Conv &c : op.pre)
        if (c.id == op.ins->in[k]) op.in[k] = c.stage;
    for (size_t k = 0; k < op.out.size(); ++k)
      for (const Conv &c : op.post)
        if (c.id == op.ins->out[k]) op.out[k] = c.stage;
    if (op.kind == OpKind::Split)
      for (void *p : op.out) op.parts.push_back(static_cast<float *>(p));
    if (op.kind == OpKind::Concat)
      for (void *p : op.in) op.cparts.push_back(static_cast<const float *>(p));
  }
  captureDst_.assign(ops_.size(), nullptr);
}

void Executor::runtimeError(const Op &op, const std::string &msg) const {
  std::string where = "step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                      op.ins->op + (op.ins->loc.empty() ? std::string() : " at " + op.ins->loc) + ")";
  throw UserError(where + ": " + msg);
}

void Executor::waitFor(const Op &op, int64_t dep) {
  Streams &S = *streams_;
  std::atomic<int64_t> &d = S.done[size_t(dep)];
  for (int k = 0; k < 256; ++k) {
    if (d.load() >= run_) return;
    if (S.abort.load()) throw Aborted{};
    if (k >= 64) std::this_thread::yield();
  }
  S.waiters.fetch_add(1);
  bool ok;
  {
    std::unique_lock<std::mutex> l(S.mu);
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(waitTimeout_));
    ok = S.cv.wait_until(l, deadline, [&] { return d.load() >= run_ || S.abort.load(); });
  }
  S.waiters.fetch_sub(1);
  if (S.abort.load()) throw Aborted{};
  if (!ok) {
    const Instruction &w = prog_.instructions[size_t(dep)];
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", waitTimeout_);
    throw std::runtime_error("step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                             op.ins->op + " on stream '" + op.ins->stream + "') waited " + secs +
                             " s for instruction " + std::to_string(dep) + " (" + w.op + " on stream '" + w.stream +
                             "'" + (w.loc.empty() ? std::string() : " at " + w.loc) +
                             "), which has not finished: the streams are stuck");
  }
}

void Executor::checkNumerics(const Op &op) const {
  for (size_t k = 0; k < op.rawOut.size(); ++k) {
    if (!numericsChecked(op.index, k) || !anyNonFinite(op.rawOut[k], op.outType[k], op.outNumel[k])) continue;
    int64_t first = 0;
    while (first < op.outNumel[k] && std::isfinite(loadAs32(op.rawOut[k], op.outType[k], first))) ++first;
    int64_t badInput = -1;
    for (size_t j = 0; j < op.rawIn.size() && badInput < 0; ++j)
      if (op.inType[j] != DType::I32 && anyNonFinite(op.rawIn[j], op.inType[j], op.inNumel[j])) badInput = op.ins->in[j];
    throw UserError(numericsMessage(step_, op.index, k, first, badInput));
  }
}

void Executor::runStream(size_t s) {
  Streams &S = *streams_;
  for (size_t idx : S.lists[s]) {
    if (S.abort.load()) return;
    Op &op = ops_[idx];
    for (int64_t w : op.ins->wait) waitFor(op, w);
    if (profiling_) {
      auto t0 = std::chrono::steady_clock::now();
      execute(op);
      opSeconds_[idx] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      execute(op);
    }
    if (checkNumerics_) checkNumerics(op);
    if (int64_t(idx) == neverFinish_) continue;
    S.done[idx].store(run_);
    if (S.waiters.load() > 0) {
      std::lock_guard<std::mutex> l(S.mu);
      S.cv.notify_all();
    }
  }
}

float Executor::step(const int32_t *tokens, const int32_t *targets) {
  Streams &S = *streams_;
  ++step_;
  ++run_; // stamps and wake-ups count runs, which never go back (setStepCount may)
  const int64_t bt = prog_.batch * prog_.seq;
  for (size_t k = 0; k < prog_.tokenInputs.size(); ++k) {
    std::memcpy(ptrs_[size_t(prog_.tokenInputs[k])], tokens + int64_t(k) * bt, size_t(bt) * sizeof(int32_t));
    std::memcpy(ptrs_[size_t(prog_.targetInputs[k])], targets + int64_t(k) * bt, size_t(bt) * sizeof(int32_t));
  }
  lastScale_ = prog_.lossScale >= 0 ? *static_cast<const float *>(ptrs_[size_t(prog_.lossScale)]) : 1.0f;

  S.abort.store(false);
  S.error = nullptr;
  if (!S.threads.empty()) {
    std::lock_guard<std::mutex> l(S.ctlMu);
    S.pending = int(S.threads.size());
    S.ompThreads = omp_get_max_threads();
    S.go = run_;
    S.ctlCv.notify_all();
  }
  try {
    runStream(0);
  } catch (const Aborted &) {
  } catch (...) {
    S.fail(std::current_exception());
  }
  if (!S.threads.empty()) {
    std::unique_lock<std::mutex> l(S.ctlMu);
    S.doneCv.wait(l, [&] { return S.pending == 0; });
  }
  if (S.error) std::rethrow_exception(S.error);

  if (profiling_) ++profiled_;
  lastSkipped_ = prog_.foundInf >= 0 && *static_cast<const float *>(ptrs_[size_t(prog_.foundInf)]) != 0.0f;
  if (!lastSkipped_) ++updates_;
  return *static_cast<const float *>(ptrs_[size_t(prog_.loss)]);
}

void Executor::execute(Op &op) {
  for (const Conv &c : op.pre) toF32(c.arena, c.dtype, c.stage, c.n);
  auto fi = [&](size_t k) { return static_cast<const float *>(op.in[k]); };
  auto fo = [&](size_t k) { return static_cast<float *>(op.out[k]); };
  auto ii = [&](size_t k) { return static_cast<const int32_t *>(op.in[k]); };
  auto scalar = [&](size_t k) { return *static_cast<const float *>(op.rawIn[k]); };
  switch (op.kind) {
  case OpKind::Embedding: {
    const int32_t *ids = ii(1);
    const int64_t vocab = op.vocab;
    for (int64_t k = 0; k < op.n; ++k)
      if (ids[k] < 0 || ids[k] >= vocab)
        runtimeError(op, "token id " + std::to_string(ids[k]) + " at position " + std::to_string(k) +
                             " is outside the embedding table [0, " + std::to_string(vocab) + ")");
    if (vocab != op.V) { // vocabulary-parallel: this rank's rows; other ids give zeros
      const int64_t C = op.C, e = dtypeSize(op.outType[0]);
      for (int64_t k = 0; k < op.n; ++k) {
        const int64_t id = ids[k] - op.offset;
        char *dst = static_cast<char *>(op.rawOut[0]) + k * C * e;
        if (id < 0 || id >= op.V) {
          std::memset(dst, 0, size_t(C * e));
        } else if (op.inType[0] == op.outType[0]) {
          std::memcpy(dst, static_cast<const char *>(op.rawIn[0]) + id * C * e, size_t(C * e));
        } else {
          for (int64_t c = 0; c < C; ++c)
            storeFrom32(op.rawOut[0], op.outType[0], k * C + c, loadAs32(op.rawIn[0], op.inType[0], id * C + c));
        }
      }
    } else if (op.inType[0] == DType::F32 && op.outType[0] == DType::F32) {
      cpu::embedding(fi(0), ids, fo(0), op.n, op.V, op.C);
    } else {
      const int64_t C = op.C;
      const int64_t rowBytes = C * dtypeSize(op.outType[0]);
#pragma omp parallel for schedule(static) if (op.n * C >= (1 << 16))
      for (int64_t k = 0; k < op.n; ++k) {
        const int64_t id = ids[k];
        if (op.inType[0] == op.outType[0]) {
          std::memcpy(static_cast<char *>(op.rawOut[0]) + k * rowBytes,
                      static_cast<const char *>(op.rawIn[0]) + id * rowBytes, size_t(rowBytes));
        } else {
          for (int64_t c = 0; c < C; ++c)
            storeFrom32(op.rawOut[0], op.outType[0], k * C + c, loadAs32(op.rawIn[0], op.inType[0], id * C + c));
        }
      }
    }
    break;
  }
  case OpKind::EmbeddingGrad: {
    const int64_t vocab = op.vocab;
    for (int64_t k = 0; k < op.n; ++k)
      if (ii(1)[k] < 0 || ii(1)[k] >= vocab)
        runtimeError(op, "token id " + std::to_string(ii(1)[k]) + " at position " + std::to_string(k) +
                             " is outside the embedding table [0, " + std::to_string(vocab) + ")");
    if (vocab != op.V)
      cpu::embeddingGradRows(fi(0), ii(1), fo(0), op.n, op.V, op.C, op.offset);
    else
      cpu::embeddingGrad(fi(0), ii(1), fo(0), op.n, op.V, op.C);
    break;
  }
  case OpKind::TpSlice: {
    const int64_t t = rank_.tpRank, chunk = op.rows * op.sliceRun, whole = op.cols * op.sliceRun;
    for (int64_t p = 0; p < op.slicePre; ++p)
      std::memcpy(static_cast<char *>(op.rawOut[0]) + p * chunk,
                  static_cast<const char *>(op.rawIn[0]) + p * whole + t * chunk, size_t(chunk));
    break;
  }
  case OpKind::VocabCeStats: {
    int64_t bad = -1;
    cpu::vocabCeStats(fi(0), ii(1), fo(0), op.N, op.V, op.offset, op.vocab, &bad);
    if (bad >= 0)
      runtimeError(op, "target id " + std::to_string(ii(1)[bad]) + " at position " + std::to_string(bad) +
                           " is outside the vocabulary [0, " + std::to_string(op.vocab) + ")");
    break;
  }
  case OpKind::VocabCeStatsGrad:
    cpu::vocabCeStatsGrad(fi(0), fi(1), ii(2), fi(3), fo(0), op.N, op.V, op.offset);
    break;
  case OpKind::VocabCeLoss:
    *fo(0) = cpu::vocabCeLoss(fi(0), op.N, op.n);
    break;
  case OpKind::VocabCeLossGrad:
    cpu::vocabCeLossGrad(fi(0), *fi(1), fo(0), op.N, op.n);
    break;
  case OpKind::Matmul:
    if (streams_->multi) {
      std::lock_guard<std::mutex> l(streams_->blasMu);
      cpu::matmul(fi(0), fi(1), fo(0), op.batch, op.M, op.N, op.K, op.ta, op.tb, op.sA, op.sB, op.sC);
    } else {
      cpu::matmul(fi(0), fi(1), fo(0), op.batch, op.M, op.N, op.K, op.ta, op.tb, op.sA, op.sB, op.sC);
    }
    break;
  case OpKind::Add: cpu::add(fi(0), fi(1), fo(0), op.n); break;
  case OpKind::BiasAdd: cpu::biasAdd(fi(0), fi(1), fo(0), op.rows, op.cols); break;
  case OpKind::Mul: cpu::mul(fi(0), fi(1), fo(0), op.n); break;
  case OpKind::Scale: cpu::scale(fi(0), fo(0), op.value, op.n); break;
  case OpKind::ReduceSum: cpu::reduceSum(fi(0), fo(0), op.rows, op.cols); break;
  case OpKind::Fill: cpu::fill(fo(0), op.value, op.n); break;
  case OpKind::Layernorm:
    cpu::layernorm(fi(0), fi(1), fi(2), fo(0), fo(1), fo(2), op.N, op.C, op.value);
    break;
  case OpKind::LayernormGrad:
    cpu::layernormGrad(fi(0), fi(1), fi(2), fi(3), fi(4), fo(0), fo(1), fo(2), op.N, op.C);
    break;
  case OpKind::Gelu: cpu::gelu(fi(0), fo(0), op.n, op.exact); break;
  case OpKind::GeluGrad: cpu::geluGrad(fi(0), fi(1), fo(0), op.n, op.exact); break;
  case OpKind::Silu: cpu::silu(fi(0), fo(0), op.n); break;
  case OpKind::SiluGrad: cpu::siluGrad(fi(0), fi(1), fo(0), op.n); break;
  case OpKind::Swiglu: cpu::swiglu(fi(0), fi(1), fo(0), op.n); break;
  case OpKind::SwigluGrad: cpu::swigluGrad(fi(0), fi(1), fi(2), fo(0), fo(1), op.n); break;
  case OpKind::RmsNorm: cpu::rmsnorm(fi(0), fi(1), fo(0), fo(1), op.N, op.C, op.value); break;
  case OpKind::RmsNormGrad: cpu::rmsnormGrad(fi(0), fi(1), fi(2), fi(3), fo(0), fo(1), op.N, op.C); break;
  case OpKind::Rope:
    cpu::rope(fi(0), fo(0), op.B, op.T, op.C, op.headDim, op.invFreq.data(), op.scale, op.inverse);
    break;
  case OpKind::GqaAttention:
  case OpKind::GqaAttentionGrad: {
    cpu::AttentionGeometry g;
    g.B = op.B, g.T = op.T, g.H = op.H, g.D = op.headDim, g.Hkv = op.Hkv;
    g.sq = g.so = op.H * op.headDim, g.skv = op.Hkv * op.headDim;
    g.group = op.group, g.headOffset = op.headOffset, g.window = op.window, g.scale = op.scale;
    if (op.kind == OpKind::GqaAttention)
      cpu::attention(g, fi(0), fi(1), fi(2), fo(0), fo(1));
    else
      cpu::attentionGrad(g, fi(0), fi(1), fi(2), fi(3), fi(4), fi(5), fo(0), fo(1), fo(2));
    break;
  }
  case OpKind::Attention: cpu::attention(fi(0), fo(0), fo(1), op.B, op.T, op.C, op.H); break;
  case OpKind::AttentionGrad:
    cpu::attentionGrad(fi(0), fi(1), fi(2), fi(3), fo(0), op.B, op.T, op.C, op.H);
    break;
  case OpKind::Transpose:
    cpu::transpose(fi(0), fo(0), op.shape.data(), op.perm.data(), int(op.shape.size()));
    break;
  case OpKind::Reshape:
  case OpKind::Copy:
    if (op.rawIn[0] != op.rawOut[0]) std::memmove(op.rawOut[0], op.rawIn[0], size_t(op.n));
    break;
  case OpKind::Split: cpu::split(fi(0), op.parts.data(), op.rows, op.cols, op.n); break;
  case OpKind::Concat: cpu::concat(op.cparts.data(), fo(0), op.rows, op.cols, op.n); break;
  case OpKind::CrossEntropy: {
    int64_t bad = -1;
    float loss = cpu::crossEntropy(fi(0), ii(1), op.N, op.V, &bad);
    if (bad >= 0)
      runtimeError(op, "target id " + std::to_string(ii(1)[bad]) + " at position " + std::to_string(bad) +
                           " is outside the vocabulary [0, " + std::to_string(op.V) + ")");
    *fo(0) = loss;
    break;
  }
  case OpKind::CrossEntropyGrad:
    cpu::crossEntropyGrad(fi(0), ii(1), *fi(2), fo(0), op.N, op.V);
    break;
  case OpKind::GlobalNorm:
    runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, updates_);
    break;
  case OpKind::Cast: convert(op.rawIn[0], op.inType[0], op.rawOut[0], op.outType[0], op.n); break;
  case OpKind::Wait: break;
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather: {
    const CollectiveKind k = op.kind == OpKind::AllReduce       ? CollectiveKind::AllReduce
                             : op.kind == OpKind::ReduceScatter ? CollectiveKind::ReduceScatter
                                                                : CollectiveKind::AllGather;
    (op.axis == 1 ? rank_.tpComm : rank_.comm)->run(op.axis == 1 ? rank_.tpLocal : rank_.local, k, op.reduce, op.coll,
                    "step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                        op.ins->op + (op.ins->loc.empty() ? std::string() : " at " + op.ins->loc) + ")");
    break;
  }
  case OpKind::CheckFinite:
  case OpKind::LossScaleUpdate:
    runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, updates_);
    break;
  case OpKind::AdamW:
    if (float *dst = captureDst_[op.index]) { // the grad as AdamW sees it, unscaled
      toF32(op.rawIn[1], op.inType[1], dst, op.n);
      if (op.unscale) {
        const double inv = 1.0 / double(scalar(size_t(op.iScale)));
        for (int64_t k = 0; k < op.n; ++k) dst[k] = float(double(dst[k]) * inv);
      }
    }
    runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, updates_);
    break;
  }
  for (const Conv &c : op.post) fromF32(c.stage, c.arena, c.dtype, c.n);
}

} // namespace bigc::rt
