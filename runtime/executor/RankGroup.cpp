// The ranks of this process as one Engine (include/bigc/Runtime/rank_group.h).
#include "bigc/Runtime/rank_group.h"
#include "bigc/Runtime/verifier.h"
#include "bigc/Support/format.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unistd.h>

#include <omp.h>

namespace bigc::rt {

namespace {

// What data rank r's shard of `b` (over dp ranks) holds: elements [at, at + count) of the shard are
// [begin, begin + count) of the whole tensor (the rest of each piece is padding). One range (the
// shard S elements from r*S on), or one per tile of a tile-interleaved shard (bigc-tile: rank r
// holds piece r of each tile, docs/program-format.md).
struct ShardRange {
  int64_t at, begin, count;
};
std::vector<ShardRange> shardRanges(const Buffer &b, int64_t r) {
  const int64_t k = std::max<int64_t>(1, b.tiles), T = b.fullNumel() / k, P = b.numel() / k;
  std::vector<ShardRange> out;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t begin = std::min(r * P, T);
    out.push_back({t * P, t * T + begin, std::max<int64_t>(0, std::min(T, r * P + P) - begin)});
  }
  return out;
}

// The whole tensor (`whole`) from every data rank's shard (rank r's at shards + r * b.bytes).
void wholeFromShards(const Buffer &b, int64_t dp, const char *shards, char *whole) {
  const int64_t e = dtypeSize(b.dtype);
  for (int64_t r = 0; r < dp; ++r)
    for (const ShardRange &g : shardRanges(b, r))
      std::memcpy(whole + g.begin * e, shards + r * b.bytes + g.at * e, size_t(g.count * e));
}

// A buffer as the logical program shows it: a shard (ZeRO) or chunk (tensor parallelism) as its
// whole tensor.
void wholeOf(Buffer &b) {
  if (b.shard) {
    b.shape = b.fullShape;
    b.shard = false;
    b.fullShape.clear();
    b.tiles = 1;
  }
  if (b.tpDim >= 0) {
    b.shape = b.tpFullShape;
    b.tpDim = -1, b.tpSegments = 1;
    b.tpFullShape.clear();
  }
  b.bytes = b.numel() * dtypeSize(b.dtype);
}

// The logical program: sharded buffers (ZeRO shards, tensor-parallel chunks) with their whole
// shape. Pipeline stages: stage 0's buffers (at their ids), then the persistent buffers of stages
// 1, 2, ... (each at the next id; `where` receives every logical id's stage and id in it); each
// space's arena the largest of the stages' (per rank).
Program logicalOf(const Program &p, std::vector<std::pair<int, int64_t>> &where) {
  Program l = p;
  l.stages.clear();
  where.clear();
  for (Buffer &b : l.buffers) {
    wholeOf(b);
    where.push_back({0, b.id});
  }
  for (int64_t s = 1; s < p.pp && s <= int64_t(p.stages.size()); ++s) {
    for (Space &sp : l.spaces) // per rank: the largest stage's
      if (const Space *o = p.stages[size_t(s - 1)].space(sp.name)) {
        sp.arenaBytes = std::max(sp.arenaBytes, o->arenaBytes);
        sp.lowerBoundBytes = std::max(sp.lowerBoundBytes, o->lowerBoundBytes);
      }
    for (const Buffer &sb : p.stages[size_t(s - 1)].buffers) {
      if (!sb.persistent()) continue;
      Buffer b = sb;
      wholeOf(b);
      b.id = int64_t(l.buffers.size());
      l.buffers.push_back(b);
      where.push_back({int(s), sb.id});
    }
  }
  // fp16 loss scaling: the scale lives on one stage (its first reader's); the logical program
  // names it there.
  for (int64_t s = 1; l.lossScale < 0 && s < p.pp && s <= int64_t(p.stages.size()); ++s)
    if (int64_t id = p.stages[size_t(s - 1)].lossScale; id >= 0)
      for (size_t k = 0; k < where.size(); ++k)
        if (where[k] == std::make_pair(int(s), id)) l.lossScale = int64_t(k), l.foundInf = -1;
  l.dp = l.tp = l.pp = l.ranks = 1;
  l.stage = 0, l.ppSchedule.clear(), l.virtualStages = 1;
  return l;
}

// Tensor rank t's chunk of a whole tensor split on `dim` in `segments` parts (and back): element
// (p, seg*c + i, q) of the chunk is element (p, seg*D/segments + t*c + i, q) of the whole, for
// c = D / (segments * T).
struct TpChunking {
  int64_t pre = 1, D = 0, post = 1, segments = 1, T = 1, e = 4;
  TpChunking(const Buffer &b, int64_t tp) : segments(b.tpSegments), T(tp), e(dtypeSize(b.dtype)) {
    for (int64_t k = 0; k < int64_t(b.tpFullShape.size()); ++k)
      if (k < b.tpDim)
        pre *= b.tpFullShape[size_t(k)];
      else if (k > b.tpDim)
        post *= b.tpFullShape[size_t(k)];
    D = b.tpFullShape[size_t(b.tpDim)];
  }
  template <bool ToChunk> void move(const char *src, char *dst, int64_t t) const {
    const int64_t c = D / (segments * T), run = c * post * e;
    for (int64_t p = 0; p < pre; ++p)
      for (int64_t seg = 0; seg < segments; ++seg) {
        const int64_t wholeAt = ((p * D) + seg * (D / segments) + t * c) * post * e;
        const int64_t chunkAt = ((p * (D / T)) + seg * c) * post * e;
        if (ToChunk)
          std::memcpy(dst + chunkAt, src + wholeAt, size_t(run));
        else
          std::memcpy(dst + wholeAt, src + chunkAt, size_t(run));
      }
  }
};

struct Injected : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace

std::string pipelineStageAlone(int64_t pp) {
  return "pipeline parallelism (pp " + std::to_string(pp) +
         "): a stage runs with the ranks of the other stages, started by `bigc run` (the CPU backend, in one process "
         "or under mpirun; one GPU per rank over NCCL; or every rank on one GPU with --virtual-ranks)";
}

RankGroup::RankGroup(Program program, uint64_t seed, std::shared_ptr<Communicator> comm, Factory make,
                     bool deviceInHostMemory, const std::function<void(RankGroup &)> &configure)
    : rankProgram_(std::move(program)), comm_(std::move(comm)) {
  if (!comm_ || comm_->size() != rankProgram_.ranks)
    throw UserError("the program has " + std::to_string(rankProgram_.ranks) + " ranks but the communicator " +
                    std::to_string(comm_ ? comm_->size() : 0));
  const int P = int(rankProgram_.pp);
  if (P > 1 && int64_t(rankProgram_.stages.size()) != P - 1)
    throw UserError("the program has pp " + std::to_string(P) + " but " +
                    std::to_string(rankProgram_.stages.size() + 1) + " stage program(s)");
  logical_ = logicalOf(rankProgram_, logicalIds_);
  const int local = comm_->localSize();
  // The arenas of every rank of this process together must fit this machine.
  int64_t perRank = 0, all = 0; // the largest per rank, and all of this process's
  for (int l = 0; l < local; ++l) {
    int64_t r = 0;
    for (const auto &s : stage(stageOf(comm_->globalRank(l))).spaces)
      if (s.name != "nvme" && (deviceInHostMemory || s.name != "device")) r += s.arenaBytes;
    perRank = std::max(perRank, r), all += r;
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0 && all > int64_t(pages) * int64_t(pageSize))
    throw UserError("the " + std::to_string(local) + " ranks of this process need " + humanBytes(all) +
                    " of arenas together (" + humanBytes(perRank) + " per rank" + (P > 1 ? " at most" : "") +
                    "); this machine has " + humanBytes(int64_t(pages) * int64_t(pageSize)) +
                    ". Run fewer ranks per process (mpirun across machines), or compile with --zero 3, "
                    "--offload cpu or --recompute for less memory per rank");
  if (P == 1) {
    for (int l = 0; l < local; ++l) engines_.push_back(make(rankProgram_, l));
  } else { // each rank its stage's program (stage 0's without the others)
    engines_.resize(size_t(local));
    for (int s = 0; s < P; ++s) {
      Program sp = s == 0 ? Program() : stage(s);
      if (s == 0) {
        std::vector<Program> others = std::move(rankProgram_.stages);
        sp = rankProgram_;
        rankProgram_.stages = std::move(others);
      }
      for (int l = 0; l < local; ++l)
        if (stageOf(comm_->globalRank(l)) == s) engines_[size_t(l)] = make(sp, l);
    }
  }
  const int64_t n = rankProgram_.microBatches * rankProgram_.batch * rankProgram_.seq;
  tokens_.assign(size_t(local), std::vector<int32_t>(size_t(n)));
  targets_.assign(size_t(local), std::vector<int32_t>(size_t(n)));
  if (const char *f = std::getenv("BIGC_FAULT"); f && *f) {
    std::string s = f;
    auto field = [&](const std::string &key) {
      size_t at = s.find(key + "=");
      if (at == std::string::npos) return std::string();
      size_t end = s.find(',', at);
      return s.substr(at + key.size() + 1, end == std::string::npos ? std::string::npos : end - at - key.size() - 1);
    };
    try {
      faultRank_ = std::stoi(field("rank"));
      faultStep_ = std::stoll(field("step"));
    } catch (...) {
      throw UserError("BIGC_FAULT='" + s + "': expected rank=R,step=S,kind=crash|hang|stop");
    }
    faultKind_ = field("kind");
    if (faultKind_ != "crash" && faultKind_ != "hang" && faultKind_ != "stop")
      throw UserError("BIGC_FAULT='" + s + "': kind must be crash, hang or stop");
  }
  if (configure) configure(*this);
  arenasZeroed_ = std::string(engines_[0]->backend()) == "cpu"; // the ranks' arenas, just mapped
  initialize(seed);
  refreshStageScale();
}

void RankGroup::refreshStageScale() {
  if (rankProgram_.pp <= 1 || !spansProcesses()) return;
  for (int s = 0; s < int(rankProgram_.pp); ++s)
    if (stage(s).lossScale >= 0) {
      const int l = localOf(firstRankOf(s));
      stageScale_ = float(mpiSum(l >= 0 ? double(engines_[size_t(l)]->lastLossScale()) : 0.0,
                                 "after step " + std::to_string(stepCount()) + ": stage " + std::to_string(s) +
                                     "'s loss scale to every process"));
      return;
    }
}

RankGroup::~RankGroup() = default;

void RankGroup::abortAll(const std::string &why) {
  const bool first = !comm_->aborted();
  comm_->abort(why);
  for (auto &c : sub_) c->abort(why);
  if (first && onAbort_) onAbort_();
}

std::map<std::string, int64_t> RankGroup::measuredBytes() const {
  std::map<std::string, int64_t> out;
  for (const auto &e : engines_)
    for (const auto &[space, b] : e->measuredBytes()) out[space] = std::max(out[space], b);
  return out;
}

Engine::NvmeStats RankGroup::nvmeStats() const {
  NvmeStats out;
  for (const auto &e : engines_) {
    const NvmeStats st = e->nvmeStats();
    out.files += st.files;
    out.readBytes += st.readBytes, out.writeBytes += st.writeBytes;
    // The ranks' streams run at once: the wall time is about the largest.
    out.readSeconds = std::max(out.readSeconds, st.readSeconds);
    out.writeSeconds = std::max(out.writeSeconds, st.writeSeconds);
    if (!st.engine.empty()) out.engine = st.engine;
  }
  return out;
}

std::string RankGroup::deviceInfo() const {
  std::string d = engines_[0]->deviceInfo();
  std::string r = std::to_string(comm_->size()) + " ranks (" + std::to_string(comm_->localSize()) +
                  " in this process, " + comm_->name() + " communicator)";
  return d.empty() ? r : d + "; " + r;
}

std::string RankGroup::rankName(int global) const {
  return rankProgram_.pp > 1 ? "stage " + std::to_string(stageOf(global)) + " (rank " + std::to_string(global) + ")"
                             : "rank " + std::to_string(global);
}

template <class F> void RankGroup::onEveryRank(F f, int onlyStage) {
  const int local = int(engines_.size());
  std::vector<std::exception_ptr> errors{size_t(local)};
  std::vector<std::thread> threads;
  for (int l = 0; l < local; ++l)
    if (onlyStage < 0 || stageOf(comm_->globalRank(l)) == onlyStage)
      threads.emplace_back([&, l] {
        try {
          f(l);
        } catch (...) {
          errors[size_t(l)] = std::current_exception();
          abortAll(rankName(comm_->globalRank(l)) + " failed");
        }
      });
  for (auto &t : threads) t.join();
  for (auto &e : errors)
    if (e) std::rethrow_exception(e);
}

float RankGroup::step(const int32_t *tokens, const int32_t *targets) { return runAll(tokens, targets, false); }

float RankGroup::evaluate(const int32_t *tokens, const int32_t *targets) { return runAll(tokens, targets, true); }

float RankGroup::runAll(const int32_t *tokens, const int32_t *targets, bool eval) {
  const int local = int(engines_.size());
  // The tensor ranks of a group share a slice. Context parallelism: the cp ranks of a group share
  // the sequences of one slice of cp x seq tokens, rank c taking chunks c and 2cp-1-c of 2cp.
  const int64_t C = rankProgram_.cp, R = rankProgram_.dp / C, K = rankProgram_.microBatches;
  const int64_t B = rankProgram_.batch, T = rankProgram_.seq, bt = B * T, half = T / 2;
  for (int l = 0; l < local; ++l) {
    const int64_t d = dpIndex(comm_->globalRank(l)), g = d / C, c = d % C;
    for (int64_t m = 0; m < K; ++m) {
      const int64_t from = (m * R + g) * bt * C;
      if (C == 1) {
        std::memcpy(tokens_[size_t(l)].data() + m * bt, tokens + from, size_t(bt) * sizeof(int32_t));
        std::memcpy(targets_[size_t(l)].data() + m * bt, targets + from, size_t(bt) * sizeof(int32_t));
        continue;
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < 2; ++h) { // this rank's chunk of the half h of its row
          const int64_t chunk = h == 0 ? c : 2 * C - 1 - c;
          const int64_t src = from + b * T * C + chunk * half, dst = m * bt + b * T + h * half;
          std::memcpy(tokens_[size_t(l)].data() + dst, tokens + src, size_t(half) * sizeof(int32_t));
          std::memcpy(targets_[size_t(l)].data() + dst, targets + src, size_t(half) * sizeof(int32_t));
        }
    }
  }
  const int64_t stepNo = eval ? stepCount() : stepCount() + 1;
  const std::string when = (eval ? "the evaluation after step " : "step ") + std::to_string(stepNo);
  // What the rank threads share lives on the heap, held by each thread: a rank that cannot be
  // joined (below) never touches freed memory.
  struct Shared {
    std::vector<float> losses;
    std::vector<std::exception_ptr> errors;
    std::vector<char> isComm, done;
    std::mutex mu;
    std::condition_variable cv;
    int finished = 0, failed = 0;
  };
  auto sh = std::make_shared<Shared>();
  sh->losses.assign(size_t(local), 0.0f);
  sh->errors.assign(size_t(local), nullptr);
  sh->isComm.assign(size_t(local), 0);
  sh->done.assign(size_t(local), 0);
  const int threadsPerRank = std::max(1, omp_get_max_threads() / std::max(1, local));
  std::vector<std::thread> threads;
  for (int l = 0; l < local; ++l)
    threads.emplace_back([this, sh, l, stepNo, threadsPerRank, eval, when] {
      const int g = comm_->globalRank(l);
      omp_set_num_threads(threadsPerRank);
      std::exception_ptr err;
      bool commErr = false;
      float loss = 0.0f;
      try {
        if (!eval && g == faultRank_ && stepNo == faultStep_ && faultKind_ != "stop") {
          if (faultKind_ == "crash")
            throw Injected("injected fault (BIGC_FAULT): " + rankName(g) + " crashed in step " +
                           std::to_string(stepNo));
          // hang: stop answering until the others give up
          while (!comm_->aborted()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          throw CommError("injected fault (BIGC_FAULT): rank " + std::to_string(g) + " hung in step " +
                          std::to_string(stepNo));
        }
        loss = eval ? engines_[size_t(l)]->evaluate(tokens_[size_t(l)].data(), targets_[size_t(l)].data())
                    : engines_[size_t(l)]->step(tokens_[size_t(l)].data(), targets_[size_t(l)].data());
      } catch (const CommError &) {
        err = std::current_exception(), commErr = true;
        abortAll(rankName(g) + " stopped in " + when);
      } catch (const std::exception &e) {
        err = std::current_exception();
        abortAll(rankName(g) + " failed in " + when + ": " + e.what());
      } catch (...) {
        err = std::current_exception();
        abortAll(rankName(g) + " failed in " + when);
      }
      std::lock_guard<std::mutex> lk(sh->mu);
      sh->losses[size_t(l)] = loss;
      sh->errors[size_t(l)] = err;
      sh->isComm[size_t(l)] = commErr;
      sh->done[size_t(l)] = 1;
      ++sh->finished;
      sh->failed += err ? 1 : 0;
      sh->cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lk(sh->mu);
    using clock = std::chrono::steady_clock;
    clock::time_point firstDone{}, abortedAt{};
    bool haveFirst = false, haveAbort = false;
    while (sh->finished != local) {
      sh->cv.wait_for(lk, std::chrono::milliseconds(100));
      if (sh->finished == local) break;
      const auto now = clock::now();
      if (sh->finished > 0 && !haveFirst) firstDone = now, haveFirst = true;
      // A straggler: every other rank finished (or failed) long ago; declare it stuck.
      if (haveFirst && !comm_->aborted() && std::chrono::duration<double>(now - firstDone).count() > straggler_) {
        std::string which;
        for (int l = 0; l < local; ++l)
          if (!sh->done[size_t(l)]) which += (which.empty() ? "" : ", ") + std::to_string(comm_->globalRank(l));
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", straggler_);
        lk.unlock();
        abortAll(when + ": rank(s) " + which + " still running " + secs +
                 " s after the other ranks finished the step (stuck); every rank stops");
        lk.lock();
      }
      if (comm_->aborted() && !haveAbort) abortedAt = now, haveAbort = true;
      if (haveAbort && std::chrono::duration<double>(now - abortedAt).count() > 30.0) {
        // Threads that cannot be joined: say why and leave (they hold what they use).
        std::string which;
        for (int l = 0; l < local; ++l)
          if (!sh->done[size_t(l)]) which += (which.empty() ? "" : ", ") + std::to_string(comm_->globalRank(l));
        std::fprintf(
            stderr,
            "bigc run: step %lld: the run was stopped (%s) and rank(s) %s did not stop within 30 s (stuck in a "
            "kernel or a collective); the process exits\n",
            (long long)stepNo, comm_->aborted() ? "a rank failed or timed out" : "", which.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }
  for (auto &t : threads) t.join();
  std::vector<std::exception_ptr> &errors = sh->errors;
  std::vector<char> &isComm = sh->isComm;
  std::vector<float> &losses = sh->losses;
  // The cause first: an error that is not a collective stopped by the abort.
  auto message = [](const std::exception_ptr &e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception &x) {
      return std::string(x.what());
    } catch (...) {
      return std::string("unknown error");
    }
  };
  int cause = -1;
  for (int l = 0; l < local && cause < 0; ++l)
    if (errors[size_t(l)] && !isComm[size_t(l)]) cause = l;
  for (int l = 0; l < local && cause < 0; ++l)
    if (errors[size_t(l)]) cause = l;
  if (cause >= 0) {
    std::string msg = message(errors[size_t(cause)]);
    if (!isComm[size_t(cause)]) msg = rankName(comm_->globalRank(cause)) + ": " + msg;
    for (int l = 0; l < local && !isComm[size_t(cause)]; ++l) // where another rank was stopped
      if (l != cause && errors[size_t(l)] && isComm[size_t(l)]) {
        std::string other = message(errors[size_t(l)]);
        size_t at = other.find(" [rank ");
        if (at != std::string::npos) msg += other.substr(at);
        break;
      }
    throw UserError(msg);
  }
  // kind=stop: the process holding the rank freezes (SIGSTOP) between the step's collectives and
  // the processes' loss sum.
  if (!eval && faultKind_ == "stop" && stepNo == faultStep_ && localOf(faultRank_) >= 0) ::raise(SIGSTOP);
  // The step's loss: the mean over the ranks of the last stage (the others have none).
  const int last = int(rankProgram_.pp) - 1;
  double sum = 0;
  for (int l = 0; l < local; ++l)
    if (stageOf(comm_->globalRank(l)) == last) sum += losses[size_t(l)];
  sum = comm_->localSize() == comm_->size() ? sum : mpiSum(sum, when + ": the loss's sum over the processes");
  if (!eval) refreshStageScale();
  return float(sum / double(rankProgram_.dp * rankProgram_.tp));
}

void RankGroup::enableGradCapture() {
  for (int l = 0; l < int(engines_.size()); ++l)
    if (l == 0 || (rankProgram_.pp > 1 && comm_->globalRank(l) == firstRankOf(stageOf(comm_->globalRank(l)))))
      engines_[size_t(l)]->enableGradCapture();
}

const std::map<std::string, std::vector<float>> &RankGroup::capturedGrads() const {
  if (rankProgram_.pp == 1) return engines_[0]->capturedGrads();
  stageGrads_.clear();
  for (int l = 0; l < int(engines_.size()); ++l)
    if (comm_->globalRank(l) == firstRankOf(stageOf(comm_->globalRank(l))))
      for (const auto &[name, g] : engines_[size_t(l)]->capturedGrads()) stageGrads_[name] = g;
  return stageGrads_;
}

void RankGroup::gather(int s, int64_t id, void *dst) const {
  // Every rank's bytes in rank order, each shard's ranges of the whole put in place (the padding
  // dropped): rank r's shard is elements [r*S, r*S+S) of the whole, or its piece of each tile.
  const Buffer &b = stage(s).buffers[size_t(id)];
  const std::vector<char> all = allRanks(s, id);
  wholeFromShards(b, rankProgram_.dp, all.data(), static_cast<char *>(dst));
}

std::vector<char> RankGroup::allRanks(int s, int64_t id) const {
  const Buffer &b = stage(s).buffers[size_t(id)];
  const int R = int(rankProgram_.dp * rankProgram_.tp), local = int(engines_.size()), first = firstRankOf(s);
  const size_t bytes = size_t(b.bytes);
  std::vector<char> all(size_t(R) * bytes);
  if (!spansProcesses()) { // the stage's ranks are here
    for (int r = 0; r < R; ++r) engines_[size_t(localOf(first + r))]->readBytes(id, all.data() + size_t(r) * bytes);
    return all;
  }
  if (rankProgram_.pp > 1) { // under mpirun: each rank's bytes from its process
    for (int r = 0; r < R; ++r) {
      char *at = all.data() + size_t(r) * bytes;
      if (const int l = localOf(first + r); l >= 0) engines_[size_t(l)]->readBytes(id, at);
      mpiBroadcastFrom(processOf(first + r), at, int64_t(bytes),
                       "gathering tensor '" + b.name + "' from rank " + std::to_string(first + r) + "'s process");
    }
    return all;
  }
  // Each local rank gathers every rank's bytes (its own output: the collective writes each).
  std::vector<std::vector<char>> mine(static_cast<size_t>(local), std::vector<char>(bytes));
  std::vector<std::vector<char>> wholes(static_cast<size_t>(local - 1), std::vector<char>(all.size()));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int l = 0; l < local; ++l)
    threads.emplace_back([&, l] {
      try {
        engines_[size_t(l)]->readBytes(id, mine[size_t(l)].data());
        char *out = l == 0 ? all.data() : wholes[size_t(l - 1)].data();
        comm_->run(l, CollectiveKind::AllGather, Reduce::Sum,
                   {CollectiveTensor{mine[size_t(l)].data(), out, b.dtype, b.numel(), b.numel() * R}},
                   "gathering '" + b.name + "' from every rank");
      } catch (...) {
        errors[size_t(l)] = std::current_exception();
        comm_->abort("rank " + std::to_string(comm_->globalRank(l)) + " failed gathering '" + b.name + "'");
      }
    });
  for (auto &t : threads) t.join();
  for (auto &x : errors)
    if (x) std::rethrow_exception(x);
  return all;
}

void RankGroup::tpLocal(int s, int64_t id, int t, const std::function<void(int64_t, void *)> &rank, void *dst) const {
  const Buffer &b = stage(s).buffers[size_t(id)];
  const int64_t tp = rankProgram_.tp;
  if (!b.shard) {
    rank(t, dst); // rank (dp 0, tp t)
    return;
  }
  const int64_t e = dtypeSize(b.dtype);
  std::vector<char> shard(size_t(b.bytes));
  for (int64_t d = 0; d < rankProgram_.dp; ++d) {
    rank(d * tp + t, shard.data());
    for (const ShardRange &g : shardRanges(b, d))
      std::memcpy(static_cast<char *>(dst) + g.begin * e, shard.data() + g.at * e, size_t(g.count * e));
  }
}

void RankGroup::readBytes(int64_t logicalId, void *dst) const {
  const auto [s, id] = logicalIds_.at(size_t(logicalId));
  const Buffer &b = stage(s).buffers.at(size_t(id));
  const int first = firstRankOf(s); // the stage's ranks (in one process, local = global)
  if (rankProgram_.tp > 1) {
    // In one process the ranks needed are read where they are; under mpirun every rank's bytes
    // are gathered first (every process takes part, in the same order).
    std::vector<char> all;
    if (spansProcesses()) all = allRanks(s, id);
    auto rank = [&](int64_t r, void *out) { // r: the rank in the stage
      if (all.empty())
        engines_[size_t(localOf(first + int(r)))]->readBytes(id, out);
      else
        std::memcpy(out, all.data() + r * b.bytes, size_t(b.bytes));
    };
    if (b.tpDim < 0) {
      tpLocal(s, id, 0, rank, dst);
      return;
    }
    const TpChunking ch(b, rankProgram_.tp);
    std::vector<char> chunk(size_t((b.shard ? b.fullNumel() : b.numel()) * dtypeSize(b.dtype)));
    for (int t = 0; t < int(rankProgram_.tp); ++t) {
      tpLocal(s, id, t, rank, chunk.data());
      ch.move<false>(chunk.data(), static_cast<char *>(dst), t);
    }
    return;
  }
  if (b.shard) {
    gather(s, id, dst);
  } else if (rankProgram_.pp > 1 && spansProcesses()) { // the stage's first rank's, from its process
    if (const int l = localOf(first); l >= 0) engines_[size_t(l)]->readBytes(id, dst);
    mpiBroadcastFrom(processOf(first), dst, b.bytes,
                     "gathering tensor '" + b.name + "' from rank " + std::to_string(first) + "'s process");
  } else { // a replica every process holds
    engines_[size_t(localOf(first) >= 0 ? localOf(first) : 0)]->readBytes(id, dst);
  }
}

void RankGroup::writeBytes(int64_t logicalId, const void *src) {
  const auto [s, id] = logicalIds_.at(size_t(logicalId));
  const Buffer &b = stage(s).buffers.at(size_t(id));
  std::vector<char> chunk;
  if (!b.shard && b.tpDim < 0) {
    for (int l = 0; l < int(engines_.size()); ++l)
      if (stageOf(comm_->globalRank(l)) == s) engines_[size_t(l)]->writeBytes(id, src);
    return;
  }
  const int64_t e = dtypeSize(b.dtype), N = b.fullNumel();
  std::vector<char> shard(size_t(b.bytes));
  if (b.tpDim >= 0) chunk.resize(size_t(N * e));
  for (int l = 0; l < int(engines_.size()); ++l) {
    const int g = comm_->globalRank(l);
    if (stageOf(g) != s) continue;
    const char *local = static_cast<const char *>(src);
    if (b.tpDim >= 0) { // this tensor rank's chunk
      TpChunking(b, rankProgram_.tp).move<true>(local, chunk.data(), tpIndex(g));
      local = chunk.data();
    }
    if (!b.shard) {
      engines_[size_t(l)]->writeBytes(id, local);
      continue;
    }
    std::fill(shard.begin(), shard.end(), 0);
    for (const ShardRange &r : shardRanges(b, dpIndex(g)))
      std::memcpy(shard.data() + r.at * e, local + r.begin * e, size_t(r.count * e));
    engines_[size_t(l)]->writeBytes(id, shard.data());
  }
}

std::vector<Engine::HostPiece> RankGroup::hostPieces(int64_t logicalId) const {
  const auto [s, id] = logicalIds_.at(size_t(logicalId));
  const Buffer &b = stage(s).buffers.at(size_t(id));
  if (b.tpDim >= 0) return {};
  std::vector<HostPiece> out;
  for (int l = 0; l < int(engines_.size()); ++l) {
    if (stageOf(comm_->globalRank(l)) != s) continue;
    std::vector<HostPiece> p = engines_[size_t(l)]->hostPieces(id);
    if (p.size() != 1) return {};
    if (!b.shard) {
      out.push_back(p[0]);
      continue;
    }
    const int64_t e = dtypeSize(b.dtype), capacity = b.numel() / std::max<int64_t>(1, b.tiles);
    for (const ShardRange &r : shardRanges(b, dpIndex(comm_->globalRank(l))))
      out.push_back(HostPiece{static_cast<char *>(p[0].data) + r.at * e, r.begin, r.count, capacity});
  }
  return out;
}

void RankGroup::refreshCopies() {
  for (int s = 0; s < int(rankProgram_.pp); ++s) refreshCopies(s);
}

void RankGroup::refreshCopies(int stageIndex) {
  // Sources first. A copy with the source's layout (both whole, or both shards) is made on each
  // rank; a whole copy of a sharded source gathers it (through the communicator: every rank has
  // the shards of the others only there under MPI). A copy and its source are of one stage.
  const Program &p = stage(stageIndex);
  std::vector<char> ready(p.buffers.size(), 1);
  std::map<std::string, const Buffer *> byName; // looked up once per copy, not by a scan
  for (const auto &b : p.buffers) {
    if (b.persistent() && b.init.kind == "copy") ready[size_t(b.id)] = 0;
    if (b.persistent()) byName[b.name] = &b; // the last of a name, as the scan found it
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto &b : p.buffers) {
      if (ready[size_t(b.id)]) continue;
      auto found = byName.find(b.init.source);
      const Buffer *s = found == byName.end() ? nullptr : found->second;
      if (!s || !ready[size_t(s->id)]) continue;
      if (s->shard == b.shard || !s->shard) {
        onEveryRank(
            [&](int l) {
              Engine &en = *engines_[size_t(l)];
              const std::vector<HostPiece> from = en.hostPieces(s->id), to = en.hostPieces(b.id);
              if (s->shard == b.shard && from.size() == 1 && to.size() == 1) { // in place
                convert(from[0].data, s->dtype, to[0].data, b.dtype, b.numel());
                return;
              }
              std::vector<char> src(size_t(s->bytes)), dst(size_t(b.bytes));
              engines_[size_t(l)]->readBytes(s->id, src.data());
              if (s->shard == b.shard) {
                convert(src.data(), s->dtype, dst.data(), b.dtype, b.numel());
              } else { // whole source, sharded copy: this rank's ranges (the padding zero)
                for (const ShardRange &r : shardRanges(b, dpIndex(comm_->globalRank(l))))
                  for (int64_t i = 0; i < b.numel() / std::max<int64_t>(1, b.tiles); ++i)
                    storeFrom32(dst.data(), b.dtype, r.at + i,
                                i < r.count ? loadAs32(src.data(), s->dtype, r.begin + i) : 0.0f);
              }
              engines_[size_t(l)]->writeBytes(b.id, dst.data());
            },
            stageIndex);
      } else { // sharded source, whole copy: all-gather the shards
        onEveryRank(
            [&](int l) {
              std::vector<char> src(size_t(s->bytes)), whole(size_t(s->fullNumel() * dtypeSize(s->dtype))),
                  dst(size_t(b.bytes));
              engines_[size_t(l)]->readBytes(s->id, src.data());
              const std::string what = "initialising '" + b.name + "' from the shards of '" + s->name + "'";
              if (s->tiles > 1) { // every rank's shard, then each one's tiles' pieces in place
                std::vector<char> all(size_t(s->bytes * rankProgram_.dp));
                dpComm(l).run(
                    dpLocal(l), CollectiveKind::AllGather, Reduce::Sum,
                    {CollectiveTensor{src.data(), all.data(), s->dtype, s->numel(), s->numel() * rankProgram_.dp}},
                    what);
                wholeFromShards(*s, rankProgram_.dp, all.data(), whole.data());
              } else {
                dpComm(l).run(dpLocal(l), CollectiveKind::AllGather, Reduce::Sum,
                              {CollectiveTensor{src.data(), whole.data(), s->dtype, s->numel(), s->fullNumel()}}, what);
              }
              convert(whole.data(), s->dtype, dst.data(), b.dtype, b.numel());
              engines_[size_t(l)]->writeBytes(b.id, dst.data());
            },
            stageIndex);
      }
      ready[size_t(b.id)] = 1;
      progress = true;
    }
  }
}

InProcessMesh::InProcessMesh(int dpN, int tpN, double commTimeout, int ppN, int cpN)
    : dpSize(dpN), tpSize(tpN), ppSize(ppN), cpSize(cpN) {
  auto rank = [&](int s, int d, int t) { return (s * dpN + d) * tpN + t; };
  if (cpN > 1)
    for (int s = 0; s < ppN; ++s)
      for (int q = 0; q < dpN / cpN; ++q)
        for (int t = 0; t < tpN; ++t) { // (the order of cpGroupOf)
          std::vector<int> ids;
          for (int c = 0; c < cpN; ++c) ids.push_back(rank(s, q * cpN + c, t));
          cp.push_back(makeInProcessCommunicator(ids));
        }
  for (int s = 0; s < ppN; ++s)
    for (int t = 0; t < tpN; ++t) {
      std::vector<int> ids;
      for (int d = 0; d < dpN; ++d) ids.push_back(rank(s, d, t));
      dp.push_back(makeInProcessCommunicator(ids));
    }
  for (int s = 0; s < ppN; ++s)
    for (int d = 0; d < dpN; ++d) {
      std::vector<int> ids;
      for (int t = 0; t < tpN; ++t) ids.push_back(rank(s, d, t));
      tp.push_back(makeInProcessCommunicator(ids));
    }
  if (ppN > 1)
    for (int d = 0; d < dpN; ++d)
      for (int t = 0; t < tpN; ++t) {
        std::vector<int> ids;
        for (int s = 0; s < ppN; ++s) ids.push_back(rank(s, d, t));
        pp.push_back(makeInProcessCommunicator(ids));
      }
  for (auto *v : {&dp, &tp, &pp, &cp})
    for (auto &c : *v) c->setTimeout(commTimeout);
}

void InProcessMesh::install(RankGroup &g) const {
  const int ranks = dpSize * tpSize * ppSize;
  std::vector<std::shared_ptr<Communicator>> all = dp, dpOf;
  all.insert(all.end(), tp.begin(), tp.end());
  all.insert(all.end(), pp.begin(), pp.end());
  all.insert(all.end(), cp.begin(), cp.end());
  std::vector<int> dpLocal;
  for (int r = 0; r < ranks; ++r) { // rank r = (s * dp + d) * tp + t
    const int s = r / (dpSize * tpSize), d = (r / tpSize) % dpSize, t = r % tpSize;
    dpOf.push_back(dp[size_t(s * tpSize + t)]), dpLocal.push_back(d);
  }
  g.setMeshCommunicators(all, dpOf, dpLocal);
}

void installMpiMesh(RankGroup &g, const std::vector<MeshRank> &mesh,
                    const std::vector<std::shared_ptr<Communicator>> &all) {
  std::vector<std::shared_ptr<Communicator>> dpOf;
  std::vector<int> dpLocal;
  for (const MeshRank &m : mesh) dpOf.push_back(m.dp), dpLocal.push_back(m.dpLocal);
  g.setMeshCommunicators(all, dpOf, dpLocal);
}

RankContext inProcessRankContext(const InProcessMesh *mesh, std::shared_ptr<Communicator> world, int tp, int local) {
  if (!mesh) return RankContext{local, std::move(world), false};
  const int dp = mesh->dpSize, s = local / (dp * tp), d = (local / tp) % dp, t = local % tp;
  RankContext ctx{d, mesh->dp[size_t(s * tp + t)], false, mesh->tp[size_t(s * dp + d)], t, t};
  if (mesh->cpSize > 1) ctx.cpComm = mesh->cp[size_t(mesh->cpGroupOf(s, d, t))], ctx.cpLocal = d % mesh->cpSize;
  if (mesh->ppSize > 1) // the stages' messages over the world communicator; tied weights over the pp group
    ctx.p2p = std::move(world), ctx.p2pLocal = local, ctx.globalRank = local, ctx.ppComm = mesh->pp[size_t(d * tp + t)],
    ctx.ppLocal = s;
  return ctx;
}

std::unique_ptr<RankGroup> makeCpuRankGroup(Program program, uint64_t seed, double commTimeout) {
  auto [world, proc] = mpiWorld();
  std::shared_ptr<Communicator> comm;
  const int ranks = int(program.ranks);
  if (world > 1) {
    if (ranks % world != 0)
      throw UserError("the program has " + std::to_string(ranks) + " ranks but mpirun started " +
                      std::to_string(world) +
                      " processes, which do not divide them (start a number of processes "
                      "that divides " +
                      std::to_string(ranks) + ", e.g. mpirun -np 2 for 2 x " + std::to_string(ranks / 2) + " ranks)");
    comm = makeMpiCommunicator(ranks, ranks / world);
  } else {
    comm = makeInProcessCommunicator(ranks);
  }
  comm->setTimeout(commTimeout);
  std::shared_ptr<Communicator> c = comm;
  // A stream waiting for a collective waits longer than the collective itself may (the
  // communicator's timeout names the rank that did not come; the stream's would not).
  const double streamWait = std::max(300.0, 2.0 * commTimeout);
  // The mesh (dp x tp, tensor ranks adjacent: rank = d * tp + t): a communicator per data-parallel
  // group (the ranks of one t) and per tensor-parallel group (the ranks of one d).
  const int tp = int(program.tp), dp = int(program.dp), pp = int(program.pp);
  // Tensor parallelism or pipeline stages: in one process the in-process mesh; under mpirun each
  // local rank's groups, in-process or over MPI (makeMpiMesh), and the stages' messages over the
  // world communicator.
  const int cp = int(program.cp);
  if (cp > 1 && world > 1)
    throw UserError("this program has context parallelism (cp " + std::to_string(cp) +
                    "), whose ring and all-to-all run with every rank in one process: run it without mpirun");
  auto mesh = (tp > 1 || pp > 1 || cp > 1) && world == 1 ? std::make_shared<InProcessMesh>(dp, tp, commTimeout, pp, cp)
                                                         : nullptr;
  std::vector<MeshRank> mpiMesh;
  std::vector<std::shared_ptr<Communicator>> mpiAll;
  if ((tp > 1 || pp > 1) && world > 1) mpiMesh = makeMpiMesh(dp, tp, ranks / world, commTimeout, &mpiAll, pp);
  const int firstRank = world > 1 ? proc * (ranks / world) : 0;
  // A test hook: the stages' messages under NCCL's rules (the CUDA backend's on several GPUs) in
  // one process: issued in p2pGroups' groups, each send waiting until its recv took it, and each
  // recv required to meet the send in the same place of the two ranks' order (NCCL has no tags).
  bool ncclOrder = false;
  if (const char *v = std::getenv("BIGC_P2P_NCCL_ORDER"); v && *v && std::string(v) != "0") {
    if (std::string(v) != "1") throw UserError(std::string("BIGC_P2P_NCCL_ORDER='") + v + "': expected 1 or 0");
    if (pp > 1 && world > 1) throw UserError("BIGC_P2P_NCCL_ORDER=1 runs the stages in one process (not under mpirun)");
    if (pp > 1)
      if (std::string why = ncclPipelineProblem(program); !why.empty())
        throw UserError("BIGC_P2P_NCCL_ORDER=1: this pipelined program cannot run in NCCL's order: " + why);
    ncclOrder = pp > 1;
    if (ncclOrder) comm->pairInIssueOrder(); // (the stages' messages go over the world communicator)
  }
  auto group = std::make_unique<RankGroup>(
      std::move(program), seed, comm,
      [c, seed, streamWait, tp, mesh, mpiMesh, firstRank, ncclOrder](const Program &p, int local) {
        // One process: local = global rank (s * dp + d) * tp + t.
        RankContext ctx = inProcessRankContext(mesh.get(), c, tp, local);
        ctx.ncclOrder = ncclOrder;
        if (!mesh && !mpiMesh.empty()) {
          const MeshRank &m = mpiMesh[size_t(local)];
          ctx = RankContext{m.dpLocal, m.dp, false, m.tp, m.tpLocal, (firstRank + local) % tp};
          if (p.pp > 1)
            ctx.p2p = c, ctx.p2pLocal = local, ctx.globalRank = firstRank + local, ctx.ppComm = m.pp,
            ctx.ppLocal = m.ppLocal;
        }
        auto e = std::make_unique<Executor>(p, seed, ctx);
        e->setWaitTimeoutForTesting(streamWait);
        return e;
      },
      true,
      [&](RankGroup &g) {
        if (mesh) mesh->install(g);
        if (!mpiMesh.empty()) installMpiMesh(g, mpiMesh, mpiAll);
      });
  group->setStragglerTimeout(commTimeout);
  return group;
}

void RankGroup::enableProfiling() {
  engines_[0]->enableProfiling();
  if (rankProgram_.pp > 1 && comm_->size() == localRanks())
    for (int s = 1; s < int(rankProgram_.pp); ++s) engines_[size_t(firstRankOf(s))]->enableProfiling();
}

void RankGroup::resetProfile() {
  engines_[0]->resetProfile();
  if (rankProgram_.pp > 1 && comm_->size() == localRanks())
    for (int s = 1; s < int(rankProgram_.pp); ++s) engines_[size_t(firstRankOf(s))]->resetProfile();
}

std::vector<std::vector<std::pair<double, double>>> RankGroup::stageInstructionSpans() const {
  std::vector<std::vector<std::pair<double, double>>> out;
  if (rankProgram_.pp <= 1 || spansProcesses()) return out;
  for (int s = 0; s < int(rankProgram_.pp); ++s) out.push_back(engines_[size_t(firstRankOf(s))]->instructionSpans());
  return out;
}

std::vector<double> RankGroup::stageBusySeconds() const {
  std::vector<double> out;
  if (rankProgram_.pp <= 1 || comm_->size() != localRanks()) return out;
  for (int s = 0; s < int(rankProgram_.pp); ++s) {
    const std::vector<double> sec = engines_[size_t(firstRankOf(s))]->instructionSeconds();
    const Program &sp = stage(s);
    double busy = 0;
    for (size_t i = 0; i < sec.size() && i < sp.instructions.size(); ++i)
      if (sp.instructions[i].stream == "compute") busy += sec[i];
    out.push_back(busy);
  }
  return out;
}

} // namespace bigc::rt
