// The one executor: binding, arenas, streams, waits, failure, counters, profiling, numerics
// (stream_executor.h). Devices (backends/cpu: Executor; backends/cuda: CudaEngine) launch the ops.
#include "bigc/Runtime/stream_executor.h"
#include "bigc/Format/p2p_groups.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Support/format.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <unistd.h>

#include <omp.h>

namespace bigc::rt {

StreamExecutor::StreamExecutor(Program program, int tpRank) : prog_(std::move(program)), tpRank_(tpRank) {}

StreamExecutor::~StreamExecutor() { stopStreams(); }

// ----- arenas

void StreamExecutor::checkPhysicalMemory(const std::function<bool(const Space &)> &counts) const {
  int64_t total = 0;
  std::string list;
  for (const auto &s : prog_.spaces) {
    if (!counts(s)) continue;
    total += s.arenaBytes;
    list += (list.empty() ? "" : " + ") + s.name + " " + std::to_string(s.arenaBytes) + " bytes (" +
            humanBytes(s.arenaBytes) + ")";
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0) {
    int64_t phys = int64_t(pages) * int64_t(pageSize);
    if (total > phys)
      throw UserError("the program's arenas need " + std::to_string(total) + " bytes (" + humanBytes(total) +
                      ") together: " + list + "; this machine has " + std::to_string(phys) + " bytes (" +
                      humanBytes(phys) +
                      ") of physical memory. Compile for a smaller model or batch (or with "
                      "--offload/--recompute), or run on a larger machine");
  }
}

void StreamExecutor::allocateArenas() {
  try {
    for (const Space &s : prog_.spaces) {
      size_t bytes = size_t((std::max<int64_t>(s.arenaBytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
      if (s.name == "nvme") { // a preallocated O_DIRECT file; its buffers have no address
        static std::atomic<int> files{0};
        const int64_t size = (int64_t(bytes) + kNvmeAlignment - 1) / kNvmeAlignment * kNvmeAlignment;
        nvme_ = std::make_unique<NvmeFile>(prog_.nvmePath, size,
                                           "rank" + std::to_string(nvmeRank_) + "-" + std::to_string(files++));
        hostBlocksOwned_ = true;
        for (const Space &h : prog_.spaces)
          if (h.name == "host") hostBlocksOwned_ = h.arenaBytes % kNvmeAlignment == 0;
        for (const Buffer &b : prog_.buffers)
          if (b.space == "host" && b.offset % kNvmeAlignment != 0) hostBlocksOwned_ = false;
        arenas_.push_back(nullptr);
        arenaMapped_.push_back(0);
        continue;
      }
      void *p = allocateArena(s, bytes);
      arenas_.push_back(p);
      arenaMapped_.push_back(bytes);
    }
  } catch (...) {
    freeArenas();
    throw;
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < prog_.spaces.size(); ++i) index[prog_.spaces[i].name] = i;
  ptrs_.assign(prog_.buffers.size(), nullptr);
  for (const auto &b : prog_.buffers)
    if (void *arena = arenas_[index.at(b.space)]) // (none for a file-backed space: nvme)
      ptrs_[size_t(b.id)] = static_cast<char *>(arena) + b.offset;
}

bool StreamExecutor::nvmeCopy(const BoundOp &op) {
  if (!nvme_) return false;
  const int64_t from = op.ins->in[0], to = op.ins->out[0];
  if (isNvme(from)) { // nvme -> host staging (offsets and sizes aligned: O_DIRECT)
    nvme_->read(prog_.buffers[size_t(from)].offset + op.inOffset, static_cast<char *>(op.rawOut[0]) + op.outOffset,
                op.n, hostBlocksOwned_);
    return true;
  }
  if (isNvme(to)) { // host staging -> nvme
    nvme_->write(prog_.buffers[size_t(to)].offset + op.outOffset, static_cast<const char *>(op.rawIn[0]) + op.inOffset,
                 op.n, hostBlocksOwned_);
    return true;
  }
  return false;
}

Engine::NvmeStats StreamExecutor::nvmeStats() const {
  NvmeStats out;
  if (!nvme_) return out;
  const NvmeFile::Stats st = nvme_->stats();
  out.files = 1;
  out.readBytes = st.readBytes, out.writeBytes = st.writeBytes;
  out.readSeconds = st.readSeconds, out.writeSeconds = st.writeSeconds;
  out.engine = nvme_->engine();
  return out;
}

void StreamExecutor::freeArenas() {
  for (size_t i = 0; i < arenas_.size(); ++i)
    if (arenas_[i]) freeArena(i, arenas_[i], arenaMapped_[i]);
  arenas_.clear(), arenaMapped_.clear();
  nvme_.reset();
}

// ----- binding

size_t StreamExecutor::streamOf(const std::string &name) const {
  return size_t(std::find(streamNames_.begin(), streamNames_.end(), name) - streamNames_.begin());
}

void StreamExecutor::bindOps() {
  streamNames_ = {"compute"};
  for (const auto &ins : prog_.instructions)
    if (std::find(streamNames_.begin(), streamNames_.end(), ins.stream) == streamNames_.end())
      streamNames_.push_back(ins.stream);
  streamOps_.assign(streamNames_.size(), {});
  stagingBytes_.assign(streamNames_.size(), 0);
  done_ = std::make_unique<std::atomic<int64_t>[]>(prog_.instructions.size());
  for (size_t i = 0; i < prog_.instructions.size(); ++i) done_[i].store(0);

  ops_.clear();
  ops_.reserve(prog_.instructions.size());
  for (size_t i = 0; i < prog_.instructions.size(); ++i) {
    const Instruction &ins = prog_.instructions[i];
    const OpDef *sig = findOp(ins.op);
    if (!sig) throw UserError("instruction " + std::to_string(i) + ": unknown op '" + ins.op + "'");
    std::unique_ptr<BoundOp> p = makeOp();
    BoundOp &op = *p;
    op.kind = sig->kind;
    op.index = i;
    op.ins = &ins;
    op.stream = streamOf(ins.stream);
    streamOps_[op.stream].push_back(i);
    for (int64_t id : ins.in) {
      const Buffer &b = prog_.buffers[size_t(id)];
      op.inType.push_back(b.dtype), op.inNumel.push_back(b.numel());
    }
    for (int64_t id : ins.out) {
      const Buffer &b = prog_.buffers[size_t(id)];
      op.outType.push_back(b.dtype), op.outNumel.push_back(b.numel());
    }
    static_cast<OpDims &>(op) = decodeOp(prog_, ins, op.kind);
    if (op.vocabParallel) op.offset = int64_t(tpRank_) * op.V; // this rank's rows of the vocabulary
    op.vocabCols = op.V; // a padded vocabulary: the columns of this op's (this rank's) V that are classes
    if (op.classes > 0) {
      const bool whole = op.kind == OpKind::CrossEntropy || op.kind == OpKind::CrossEntropyGrad;
      op.vocabCols = std::clamp<int64_t>(op.classes - (whole ? 0 : op.offset), 0, op.V);
    }
    if (op.tpHeads) op.headOffset = int64_t(tpRank_) * op.H; // this rank's query heads
    if (op.isCollective()) {
      op.axis = int(ins.num("axis", 0));
      op.reduce = Reduce(int(ins.num("reduce", 0)));
    }
    if (const std::vector<int64_t> tile = ins.ints("tile"); op.kind == OpKind::AllGather && tile.size() == 2)
      for (size_t k = 0; k < op.inNumel.size(); ++k) { // piece tile[0] of the tile-interleaved shard
        op.inNumel[k] /= tile[1];
        op.inByteOffset.push_back(tile[0] * op.inNumel[k] * dtypeSize(op.inType[k]));
      }
    planOp(op);
    stagingBytes_[op.stream] = std::max(stagingBytes_[op.stream], op.stageBytes);
    ops_.push_back(std::move(p));
  }
  if (prog_.pp > 1 && groupsMessages())
    for (const std::vector<int64_t> &g : p2pGroups(prog_)) {
      BoundOp &head = *ops_[size_t(g.front())];
      for (int64_t i : g) {
        head.group.push_back(size_t(i));
        ops_[size_t(i)]->groupHead = int64_t(g.front());
      }
    }
}

void StreamExecutor::stageOperands(BoundOp &op, const std::function<bool(bool, size_t)> &want, int64_t align) const {
  const Instruction &ins = *op.ins;
  std::map<int64_t, int64_t> at; // buffer id -> offset in bytes: a buffer read and written shares one area
  auto place = [&](int64_t id) {
    auto it = at.find(id);
    if (it != at.end()) return it->second;
    int64_t off = op.stageBytes;
    op.stageBytes += (prog_.buffers[size_t(id)].numel() * 4 + align - 1) / align * align;
    at[id] = off;
    return off;
  };
  auto is16 = [](DType d) { return d == DType::BF16 || d == DType::F16; };
  for (size_t k = 0; k < ins.in.size(); ++k)
    if (want(true, k) && is16(op.inType[k])) {
      bool seen = at.count(ins.in[k]);
      int64_t off = place(ins.in[k]);
      if (!seen) op.pre.push_back(StagedOperand{ins.in[k], nullptr, op.inType[k], op.inNumel[k], off, nullptr});
    }
  for (size_t k = 0; k < ins.out.size(); ++k)
    if (want(false, k) && is16(op.outType[k]))
      op.post.push_back(StagedOperand{ins.out[k], nullptr, op.outType[k], op.outNumel[k], place(ins.out[k]), nullptr});
}

void StreamExecutor::bindOperands(const std::function<void *(size_t)> &stagingBase) {
  for (auto &p : ops_) {
    BoundOp &op = *p;
    op.rawIn.clear(), op.rawOut.clear();
    for (int64_t id : op.ins->in) op.rawIn.push_back(ptrs_[size_t(id)]);
    for (size_t k = 0; k < op.inByteOffset.size(); ++k)
      op.rawIn[k] = static_cast<char *>(op.rawIn[k]) + op.inByteOffset[k];
    for (int64_t id : op.ins->out) op.rawOut.push_back(ptrs_[size_t(id)]);
    op.in = op.rawIn, op.out = op.rawOut;
    if (op.pre.empty() && op.post.empty()) continue;
    char *base = static_cast<char *>(stagingBase(op.stream));
    for (auto *list : {&op.pre, &op.post})
      for (StagedOperand &c : *list)
        c.arena = ptrs_[size_t(c.id)], c.stage = reinterpret_cast<float *>(base + c.stageOffset);
    for (size_t k = 0; k < op.in.size(); ++k)
      for (const StagedOperand &c : op.pre)
        if (c.id == op.ins->in[k]) op.in[k] = c.stage;
    for (size_t k = 0; k < op.out.size(); ++k)
      for (const StagedOperand &c : op.post)
        if (c.id == op.ins->out[k]) op.out[k] = c.stage;
  }
}

// ----- streams

void StreamExecutor::startStreams() {
  for (size_t s = 1; s < streamNames_.size(); ++s)
    threads_.emplace_back([this, s] {
      // A failure to set the thread up (the CUDA backend: selecting the rank's GPU) is the error of
      // every step this stream would run.
      std::exception_ptr setupError;
      try {
        onStreamThread();
      } catch (...) {
        setupError = std::current_exception();
      }
      int64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> l(ctlMu_);
          ctlCv_.wait(l, [&] { return quit_ || go_ > seen; });
          if (quit_) return;
          seen = go_;
        }
        omp_set_num_threads(ompThreads_);
        try {
          if (setupError) std::rethrow_exception(setupError);
          runStream(s);
        } catch (const Aborted &) {
        } catch (...) {
          fail(std::current_exception());
        }
        std::lock_guard<std::mutex> l(ctlMu_);
        if (--pending_ == 0) doneCv_.notify_all();
      }
    });
}

void StreamExecutor::stopStreams() {
  {
    std::lock_guard<std::mutex> l(ctlMu_);
    quit_ = true;
  }
  ctlCv_.notify_all();
  for (auto &t : threads_) t.join();
  threads_.clear();
}

void StreamExecutor::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> l(errMu_);
    if (!error_) error_ = e;
  }
  abort_.store(true);
  std::lock_guard<std::mutex> l(mu_);
  cv_.notify_all();
}

std::string StreamExecutor::where(const BoundOp &op) const {
  return "step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" + op.ins->op +
         (op.ins->loc.empty() ? std::string() : " at " + op.ins->loc) + ")";
}

void StreamExecutor::runtimeError(const BoundOp &op, const std::string &msg) const {
  throw UserError(where(op) + ": " + msg);
}

void StreamExecutor::badId(const BoundOp &op, bool target, int64_t id, int64_t position, int64_t limit) const {
  runtimeError(op, std::string(target ? "target id " : "token id ") + std::to_string(id) + " at position " +
                       std::to_string(position) + " is outside the " + (target ? "vocabulary" : "embedding table") +
                       " [0, " + std::to_string(limit) + ")");
}

void StreamExecutor::stuck(const BoundOp &op, int64_t dep, const std::string &what) const {
  const Instruction &w = prog_.instructions[size_t(dep)];
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", waitTimeout_);
  throw std::runtime_error("step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                           op.ins->op + " on stream '" + op.ins->stream + "') waited " + secs + " s for instruction " +
                           std::to_string(dep) + " (" + w.op + " on stream '" + w.stream + "'" +
                           (w.loc.empty() ? std::string() : " at " + w.loc) + ")" + what + ": the streams are stuck");
}

// `issuedOnly`: until instruction `dep` has been stamped in this run, not what its device must do.
void StreamExecutor::waitFor(const BoundOp &op, int64_t dep, bool issuedOnly) {
  std::atomic<int64_t> &d = done_[size_t(dep)];
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(waitTimeout_));
  bool ready = false;
  for (int k = 0; k < 256 && !ready; ++k) {
    if (d.load() >= run_)
      ready = true;
    else if (abort_.load())
      throw Aborted{};
    else if (k >= 64)
      std::this_thread::yield();
  }
  if (!ready) {
    waiters_.fetch_add(1);
    bool ok;
    {
      std::unique_lock<std::mutex> l(mu_);
      ok = cv_.wait_until(l, deadline, [&] { return d.load() >= run_ || abort_.load(); });
    }
    waiters_.fetch_sub(1);
    if (abort_.load()) throw Aborted{};
    if (!ok) stuck(op, dep, stampWait_);
  }
  if (!issuedOnly) waitDevice(op, dep, deadline);
}

const void *StreamExecutor::hostView(const BoundOp &, int64_t, const void *ptr, std::vector<unsigned char> &) const {
  return ptr;
}

// Whether an input of `op` is also one of its outputs (an in-place op: AdamW's weights and moments,
// the loss gradient over the logits): such an input must be checked before the op runs.
static bool writesAnInput(const BoundOp &op) {
  for (int64_t o : op.ins->out)
    for (int64_t i : op.ins->in)
      if (o == i) return true;
  return false;
}

int64_t StreamExecutor::nonFiniteInput(const BoundOp &op, bool inPlaceOnly) const {
  std::vector<unsigned char> bytes;
  for (size_t j = 0; j < op.rawIn.size(); ++j) {
    if (op.inType[j] == DType::I32) continue;
    const int64_t id = op.ins->in[j];
    const bool inPlace = std::find(op.ins->out.begin(), op.ins->out.end(), id) != op.ins->out.end();
    if (inPlace != inPlaceOnly) continue;
    if (anyNonFinite(hostView(op, id, op.rawIn[j], bytes), op.inType[j], op.inNumel[j])) return id;
  }
  return -1;
}

void StreamExecutor::checkNumerics(const BoundOp &op, int64_t badBefore) const {
  std::vector<unsigned char> outBytes;
  for (size_t k = 0; k < op.rawOut.size(); ++k) {
    if (!numericsChecked(op.index, k)) continue;
    const void *v = hostView(op, op.ins->out[k], op.rawOut[k], outBytes);
    if (!anyNonFinite(v, op.outType[k], op.outNumel[k])) continue;
    int64_t first = 0;
    while (first < op.outNumel[k] && std::isfinite(loadAs32(v, op.outType[k], first))) ++first;
    // An input that was already non-finite: the in-place ones as they were before the op ran
    // (badBefore), the others as they are (the op did not write them).
    const int64_t badInput = badBefore >= 0 ? badBefore : nonFiniteInput(op, /*inPlaceOnly=*/false);
    throw UserError(numericsMessage(step_, op.index, k, first, badInput));
  }
}

void StreamExecutor::runStream(size_t s) {
  for (size_t idx : streamOps_[s]) {
    if (abort_.load()) return;
    BoundOp &op = *ops_[idx];
    if (op.groupHead >= 0) { // a group of sends and recvs: issued whole by its first member
      if (op.groupHead == int64_t(idx)) runGroup(op);
      continue;
    }
    if (evaluating_ && !evalMask_[idx]) {
      // Not part of the evaluation: done, for whatever waits on it, once what it waits for is
      // (an order between two of the evaluation's instructions may pass through it).
      for (int64_t w : op.ins->wait) waitFor(op, w, false);
      skip(op);
      done_[idx].store(run_);
      if (waiters_.load() > 0) {
        std::lock_guard<std::mutex> l(mu_);
        cv_.notify_all();
      }
      continue;
    }
    for (int64_t w : op.ins->wait) waitFor(op, w, false);
    if (op.issuedAfter >= 0) waitFor(op, op.issuedAfter, /*issuedOnly=*/true);
    const int64_t badBefore = checkNumerics_ && writesAnInput(op) ? nonFiniteInput(op, /*inPlaceOnly=*/true) : -1;
    if (profiling_ && !evaluating_ && timedOnHost(op)) {
      auto t0 = std::chrono::steady_clock::now();
      launch(op);
      const auto t1 = std::chrono::steady_clock::now();
      opSeconds_[idx] += std::chrono::duration<double>(t1 - t0).count();
      auto sec = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(t.time_since_epoch()).count();
      };
      opSpans_[idx] = {sec(t0), sec(t1)};
    } else {
      launch(op);
    }
    if (checkNumerics_) checkNumerics(op, badBefore);
    if (int64_t(idx) == neverFinish_) continue;
    done_[idx].store(run_);
    if (waiters_.load() > 0) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
  }
}

// A group of sends and recvs (consecutive on their stream): every member's waits, then one launch
// of them all; every member finishes with it.
void StreamExecutor::runGroup(BoundOp &head) {
  std::vector<BoundOp *> members;
  std::vector<int64_t> badBefore;
  for (size_t i : head.group) {
    BoundOp &m = *ops_[i];
    if (evaluating_ && !evalMask_[i]) { // (the evaluation issues its own members only)
      for (int64_t w : m.ins->wait) waitFor(m, w, false);
      skip(m);
      done_[i].store(run_);
      continue;
    }
    for (int64_t w : m.ins->wait) waitFor(m, w, false);
    if (m.issuedAfter >= 0) waitFor(m, m.issuedAfter, /*issuedOnly=*/true);
    members.push_back(&m);
    badBefore.push_back(checkNumerics_ && writesAnInput(m) ? nonFiniteInput(m, /*inPlaceOnly=*/true) : -1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!members.empty()) launchGroup(members);
  if (profiling_ && !evaluating_ && !members.empty() && timedOnHost(*members[0])) {
    const auto t1 = std::chrono::steady_clock::now();
    const double each = std::chrono::duration<double>(t1 - t0).count() / double(members.size());
    auto sec = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(t.time_since_epoch()).count();
    };
    for (BoundOp *m : members) opSeconds_[m->index] += each, opSpans_[m->index] = {sec(t0), sec(t1)};
  }
  for (size_t j = 0; j < members.size(); ++j) {
    BoundOp *m = members[j];
    if (checkNumerics_) checkNumerics(*m, badBefore[j]);
    if (int64_t(m->index) != neverFinish_) done_[m->index].store(run_);
  }
  if (waiters_.load() > 0) {
    std::lock_guard<std::mutex> l(mu_);
    cv_.notify_all();
  }
}

float StreamExecutor::scalar(int64_t bufferId) const {
  float v = 0.0f;
  readBytes(bufferId, &v);
  return v;
}

float StreamExecutor::step(const int32_t *tokens, const int32_t *targets) {
  ++step_;
  ++run_; // stamps and wake-ups count runs, which never go back (setStepCount may)
  loadInputs(tokens, targets);
  lastScale_ = prog_.lossScale >= 0 ? scalar(prog_.lossScale) : 1.0f;
  runInstructions();
  if (profiling_) {
    collectProfile();
    ++profiled_;
  }
  checkDeviceErrors();
  const float loss = scalar(prog_.loss);
  lastSkipped_ = prog_.foundInf >= 0 && scalar(prog_.foundInf) != 0.0f;
  finishCapture();
  if (!lastSkipped_) ++updates_;
  return loss;
}

float StreamExecutor::evaluate(const int32_t *tokens, const int32_t *targets) {
  if (prog_.evalInstructions.empty())
    throw UserError("this program holds no evaluation program (compiled by an older bigc): recompile it to "
                    "evaluate held-out data");
  if (evalMask_.empty()) {
    evalMask_.assign(prog_.instructions.size(), 0);
    for (int64_t i : prog_.evalInstructions) evalMask_[size_t(i)] = 1;
  }
  ++run_;
  loadInputs(tokens, targets);
  evaluating_ = true;
  try {
    runInstructions();
  } catch (...) {
    evaluating_ = false;
    throw;
  }
  evaluating_ = false;
  checkDeviceErrors();
  return scalar(prog_.loss);
}

void StreamExecutor::runInstructions() {
  abort_.store(false);
  error_ = nullptr;
  if (!threads_.empty()) {
    std::lock_guard<std::mutex> l(ctlMu_);
    pending_ = int(threads_.size());
    ompThreads_ = omp_get_max_threads();
    go_ = run_;
    ctlCv_.notify_all();
  }
  try {
    runStream(0);
  } catch (const Aborted &) {
  } catch (...) {
    fail(std::current_exception());
  }
  if (!threads_.empty()) {
    std::unique_lock<std::mutex> l(ctlMu_);
    doneCv_.wait(l, [&] { return pending_ == 0; });
  }
  synchronize();
  if (error_) std::rethrow_exception(error_);
}

// ----- buffers, capture, profiling

void StreamExecutor::enableGradCapture() {
  if (capture_) return;
  capture_ = true;
  for (auto &p : ops_) {
    if (p->kind != OpKind::AdamW) continue;
    // Under the name of the tensor of record (`weight`: the update reads a staging copy of it, or
    // of a chunk of it, whose gradient lands at the chunk's offset).
    const Buffer &weight =
        prog_.buffers[size_t(p->ins->attrs.count("weight") ? int64_t(p->ins->num("weight", 0)) : p->ins->in[0])];
    auto &dst = grads_[weight.name];
    if (dst.size() != size_t(weight.numel())) dst.assign(size_t(weight.numel()), 0.0f);
    captureGrad(*p, dst);
  }
}

void StreamExecutor::enableProfiling() {
  if (!profiling_) enableDeviceProfiling();
  profiling_ = true;
  resetProfile();
}

} // namespace bigc::rt
