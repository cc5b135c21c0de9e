// The CPU device of the one executor (stream_executor.h): mapped arenas, fp32 staging per
// stream, the CPU kernels and the communicators' collectives.
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/kernel_table.h"
#include "bigc/Runtime/kernels.h"
#include "bigc/Runtime/loss_scale.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/op_dims.h"
#include "bigc/Support/format.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

namespace bigc::rt {

struct Executor::Op : BoundOp {
  std::vector<CollectiveTensor> coll; // collectives: the tensors of the bucket
  std::vector<float *> parts;         // split: the outputs
  std::vector<const float *> cparts;  // concat: the inputs
  float *capture = nullptr;           // adamw with grad capture on: where its grad goes (f32)
  Kernel kernel = nullptr;            // its kernel (kernels(), found when the program is loaded)
};

namespace {
// The fused ops (bigc-fuse) round the value between their two halves as the unfused pair stores
// it: to the type of their first output.
cpu::Round roundOf(const BoundOp &op) {
  switch (op.outType[0]) {
  case DType::BF16: return cpu::Round::BF16;
  case DType::F16: return cpu::Round::F16;
  default: return cpu::Round::None;
  }
}

// Ops that read and write their operands in their stored dtypes themselves (no staging): on the
// CPU also the embedding (rows copied or converted) and tp_slice (bytes).
bool direct(OpKind k) { return handlesOwnDtypes(k) || k == OpKind::Embedding || k == OpKind::TpSlice; }

// The operands as the kernels take them: f32 (or staged f32), i32 ids, an f32 scalar.
const float *fi(const BoundOp &op, size_t k) { return static_cast<const float *>(op.in[k]); }
float *fo(const BoundOp &op, size_t k) { return static_cast<float *>(op.out[k]); }
const int32_t *ii(const BoundOp &op, size_t k) { return static_cast<const int32_t *>(op.in[k]); }
float scalarIn(const BoundOp &op, size_t k) { return *static_cast<const float *>(op.rawIn[k]); }
} // namespace

Executor::Executor(Program program, uint64_t seed, RankContext rank)
    : StreamExecutor(std::move(program), rank.tpRank), rank_(std::move(rank)) {
  if ((prog_.dp != 1 && (!rank_.comm || rank_.comm->size() != prog_.dp)) ||
      (prog_.tp != 1 && (!rank_.tpComm || rank_.tpComm->size() != prog_.tp)) ||
      (prog_.pp != 1 && (!rank_.p2p || !rank_.ppComm || rank_.ppComm->size() != prog_.pp)) ||
      (prog_.cp != 1 && (!rank_.cpComm || rank_.cpComm->size() != prog_.cp)))
    throw UserError("this program has " + std::to_string(prog_.ranks) +
                    " ranks: run it with `bigc run`, which "
                    "starts every rank with a communicator (one executor runs one rank)");
  checkPhysicalMemory([](const Space &s) { return s.name != "nvme"; });
  nvmeRank_ = rank_.globalRank;
  allocateArenas();
  try {
    bindOps();
    multi_ = streamNames_.size() > 1;
    // Staging areas (one per stream: streams run concurrently), then the kernels' pointers.
    staging_.assign(streamNames_.size(), nullptr);
    for (size_t s = 0; s < streamNames_.size(); ++s) {
      if (stagingBytes_[s] == 0) continue;
      size_t bytes = size_t((stagingBytes_[s] + kAlignment - 1) / kAlignment * kAlignment);
      staging_[s] = std::aligned_alloc(size_t(kAlignment), bytes);
      if (!staging_[s])
        throw UserError("cannot allocate " + std::to_string(bytes) + " bytes of fp32 staging for the '" +
                        streamNames_[s] + "' stream");
    }
    bindOperands([&](size_t s) { return staging_[s]; });
    for (auto &p : ops_) {
      Op &op = static_cast<Op &>(*p);
      if (op.kind == OpKind::Split)
        for (void *q : op.out) op.parts.push_back(static_cast<float *>(q));
      if (op.kind == OpKind::Concat)
        for (void *q : op.in) op.cparts.push_back(static_cast<const float *>(q));
      if (op.isCollective())
        for (size_t k = 0; k < op.rawIn.size(); ++k) {
          op.coll.push_back(CollectiveTensor{op.rawIn[k], op.rawOut[k], op.inType[k], op.inNumel[k], op.outNumel[k]});
          if (op.kind == OpKind::CpAllToAll) { // [B,T,N] of the sequence side
            const auto &seq = prog_.buffers[size_t(op.toHeads ? op.ins->in[k] : op.ins->out[k])].shape;
            op.coll.back().rows = seq[0], op.coll.back().width = seq[2];
          }
        }
    }
  } catch (...) {
    freeArenas();
    freeStaging();
    throw;
  }
  if (rank_.initialize) {
    arenasZeroed_ = true; // just mapped: zero pages
    initialize(seed);
  }
  startStreams();
}

Executor::~Executor() {
  stopStreams();
  freeArenas();
  freeStaging();
}

void Executor::freeStaging() {
  for (void *a : staging_) std::free(a);
  staging_.clear();
}

void *Executor::allocateArena(const Space &s, size_t bytes) {
  // Mapped, not touched: the kernel gives zero pages as they are first written, so the resident
  // pages are what the steps used (measuredBytes). No transparent huge pages: a 2 MiB page would
  // count 2 MiB for one byte written.
  void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw UserError("cannot allocate the '" + s.name + "' arena of " + std::to_string(s.arenaBytes) + " bytes (" +
                    humanBytes(s.arenaBytes) + ")");
#ifdef MADV_NOHUGEPAGE
  ::madvise(p, bytes, MADV_NOHUGEPAGE);
#endif
  return p;
}

void Executor::freeArena(size_t, void *arena, size_t bytes) { ::munmap(arena, bytes); }

std::map<std::string, int64_t> Executor::measuredBytes() const {
  std::map<std::string, int64_t> out;
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < arenas_.size(); ++i) {
    const Space &s = prog_.spaces[i];
    if (!arenas_[i]) { // the nvme space: its preallocated file
      out[s.name] = nvme_ ? nvme_->size() : 0;
      continue;
    }
    const size_t bytes = arenaMapped_[i], pages = (bytes + size_t(page) - 1) / size_t(page);
    std::vector<unsigned char> resident(pages);
    int64_t touched = 0;
    if (::mincore(arenas_[i], bytes, resident.data()) == 0)
      for (size_t k = 0; k < pages; ++k)
        if (resident[k] & 1) touched += std::min<int64_t>(page, int64_t(bytes - k * size_t(page)));
    out[s.name] = std::min<int64_t>(touched, s.arenaBytes);
  }
  return out;
}

int64_t processPeakResidentBytes() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return int64_t(ru.ru_maxrss) * 1024; // Linux: kilobytes
}

std::vector<Engine::HostPiece> Executor::hostPieces(int64_t id) const {
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (isNvme(id)) return {}; // in the nvme file: readBytes/writeBytes
  // A shard on its own (one rank run by itself) holds the first elements, as readBytes shows them;
  // a RankGroup places each rank's shard (RankGroup::hostPieces).
  return {HostPiece{const_cast<void *>(data(id)), 0, b.numel(), b.numel()}};
}

void Executor::readBytes(int64_t id, void *dst) const {
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (isNvme(id))
    nvme_->read(b.offset, dst, b.bytes);
  else
    std::memcpy(dst, data(id), size_t(b.bytes));
}

void Executor::writeBytes(int64_t id, const void *src) {
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (isNvme(id))
    nvme_->write(b.offset, src, b.bytes);
  else
    std::memcpy(data(id), src, size_t(b.bytes));
}

std::map<std::string, int64_t> Executor::stagingBytes() const {
  std::map<std::string, int64_t> out;
  for (size_t s = 0; s < streamNames_.size(); ++s) out[streamNames_[s]] = stagingBytes_[s];
  return out;
}

std::unique_ptr<BoundOp> Executor::makeOp() const { return std::make_unique<Op>(); }

void Executor::captureGrad(BoundOp &op, std::vector<float> &dst) { static_cast<Op &>(op).capture = dst.data(); }

void Executor::planOp(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  op.kernel = kernels().at(op.kind, *op.ins, op.index); // (none: the program is refused here)
  // fp32 staging for the 16-bit operands of the ops that compute in fp32 on f32 pointers.
  if (!direct(op.kind))
    stageOperands(
        op, [](bool, size_t) { return true; }, 64);
  if ((op.kind == OpKind::Send || op.kind == OpKind::Recv) && !rank_.p2p)
    throw UserError("instruction " + std::to_string(op.index) + " (" + op.ins->op +
                    ") moves a value between pipeline stages, but this executor runs one rank without a "
                    "communicator for them");
  if (op.isCollective()) {
    Communicator *c = rank_.commOf(op.axis).get();
    if (!c)
      throw UserError("instruction " + std::to_string(op.index) + " (" + op.ins->op +
                      ") is a collective, but "
                      "this executor runs one rank without a communicator for its axis");
    int64_t scratch = 0;
    const int64_t n = prog_.axisSize(int64_t(op.axis));
    for (int64_t numel : op.inNumel) scratch += (numel + n - 1) / n;
    c->reserve(scratch);
  }
}

// NCCL's order (RankContext::ncclOrder): a group's sends, its recvs, then every send waits until
// its recv has taken it, as one ncclGroupStart/End of ncclSend and ncclRecv completes.
void Executor::launchGroup(const std::vector<BoundOp *> &members) {
  for (BoundOp *m : members)
    if (m->kind == OpKind::Send) launch(*m);
  for (BoundOp *m : members)
    if (m->kind == OpKind::Recv) launch(*m);
  for (BoundOp *m : members)
    if (m->kind == OpKind::Send)
      rank_.p2p->waitDelivered(rank_.p2pLocal, peerRank(*m, rank_.globalRank), m->tag, where(*m));
}

void Executor::loadInputs(const int32_t *tokens, const int32_t *targets) {
  const int64_t bt = prog_.batch * prog_.seq;
  for (size_t k = 0; k < prog_.tokenInputs.size(); ++k) {
    std::memcpy(ptrs_[size_t(prog_.tokenInputs[k])], tokens + int64_t(k) * bt, size_t(bt) * sizeof(int32_t));
    std::memcpy(ptrs_[size_t(prog_.targetInputs[k])], targets + int64_t(k) * bt, size_t(bt) * sizeof(int32_t));
  }
}

// The CPU device's kernels, one per op (include/bigc/Runtime/kernel_table.h): on f32 operands (the
// 16-bit ones staged, planOp), or in the operands' own dtypes (direct).
const KernelTable<Executor::Kernel> &Executor::kernels() {
  const Kernel kGqaAttention = [](Executor &e, Op &op) {
    const AttentionGeometry g = attentionGeometry(op);
    if (op.kind == OpKind::GqaAttention)
      cpu::attention(g, fi(op, 0), fi(op, 1), fi(op, 2), fo(op, 0), fo(op, 1));
    else
      cpu::attentionGrad(g, fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fi(op, 4), fi(op, 5), fo(op, 0), fo(op, 1),
                         fo(op, 2));
  };
  const Kernel kRingAttention = [](Executor &e, Op &op) {
    const AttentionGeometry g = attentionGeometry(op);
    // The tokens' positions: this rank's queries and the block's keys (rank (c - step) mod C's); with
    // a2a both the whole sequence, gathered in rank order.
    const int64_t C = op.cp, c = e.rank_.cpLocal, T = op.T;
    std::vector<int64_t> qpos(static_cast<size_t>(T)), kpos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      if (op.a2a) {
        const int64_t part = T / C;
        qpos[size_t(t)] = kpos[size_t(t)] = format::cpPosition(t % part, part, C, t / part);
      } else {
        qpos[size_t(t)] = format::cpPosition(t, T, C, c);
        kpos[size_t(t)] = format::cpPosition(t, T, C, ((c - op.step) % C + C) % C);
      }
    }
    if (op.kind == OpKind::RingAttention)
      cpu::ringAttention(g, fi(op, 0), fi(op, 1), fi(op, 2), qpos.data(), kpos.data(), op.acc ? fi(op, 3) : nullptr,
                         op.acc ? fi(op, 4) : nullptr, fo(op, 0), fo(op, 1));
    else
      cpu::ringAttentionGrad(g, fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fi(op, 4), fi(op, 5), qpos.data(),
                             kpos.data(), op.acc ? fi(op, 6) : nullptr, op.accKv ? fi(op, 7) : nullptr,
                             op.accKv ? fi(op, 8) : nullptr, fo(op, 0), fo(op, 1), fo(op, 2));
  };
  const Kernel kAllReduce = [](Executor &e, Op &op) {
    e.rank_.commOf(op.axis)->run(e.rank_.localOf(op.axis), op.collectiveKind(), op.reduce, op.coll, e.where(op));
  };
  const Kernel kSend = [](Executor &e, Op &op) {
    const int peer = e.peerRank(op, e.rank_.globalRank);
    if (op.kind == OpKind::Send)
      e.rank_.p2p->send(e.rank_.p2pLocal, peer, op.tag, op.rawIn[0], op.n, e.where(op));
    else
      e.rank_.p2p->recv(e.rank_.p2pLocal, peer, op.tag, op.rawOut[0], op.n, e.where(op));
  };
  const Kernel kCheckFinite = [](Executor &e, Op &op) {
    runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, e.updates_, e.lrFor(op));
  };
  static const KernelTable<Kernel> table("cpu", {
      {OpKind::Embedding, [](Executor &e, Op &op) {
            const int32_t *ids = ii(op, 1);
            const int64_t vocab = op.vocab, tokens = op.classes > 0 ? op.classes : vocab; // (a padded table's)
            for (int64_t k = 0; k < op.n; ++k)
              if (ids[k] < 0 || ids[k] >= tokens) e.badId(op, false, ids[k], k, tokens);
            if (vocab != op.V) { // vocabulary-parallel: this rank's rows; other ids give zeros
              const int64_t C = op.C, es = dtypeSize(op.outType[0]);
              for (int64_t k = 0; k < op.n; ++k) {
                const int64_t id = ids[k] - op.offset;
                char *dst = static_cast<char *>(op.rawOut[0]) + k * C * es;
                if (id < 0 || id >= op.V) {
                  std::memset(dst, 0, size_t(C * es));
                } else if (op.inType[0] == op.outType[0]) {
                  std::memcpy(dst, static_cast<const char *>(op.rawIn[0]) + id * C * es, size_t(C * es));
                } else {
                  for (int64_t c = 0; c < C; ++c)
                    storeFrom32(op.rawOut[0], op.outType[0], k * C + c, loadAs32(op.rawIn[0], op.inType[0], id * C + c));
                }
              }
            } else if (op.inType[0] == DType::F32 && op.outType[0] == DType::F32) {
              cpu::embedding(fi(op, 0), ids, fo(op, 0), op.n, op.V, op.C);
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
      }},
      {OpKind::EmbeddingGrad, [](Executor &e, Op &op) {
        const int64_t vocab = op.vocab, tokens = op.classes > 0 ? op.classes : vocab;
        for (int64_t k = 0; k < op.n; ++k)
          if (ii(op, 1)[k] < 0 || ii(op, 1)[k] >= tokens) e.badId(op, false, ii(op, 1)[k], k, tokens);
        if (vocab != op.V)
          cpu::embeddingGradRows(fi(op, 0), ii(op, 1), fo(op, 0), op.n, op.V, op.C, op.offset);
        else
          cpu::embeddingGrad(fi(op, 0), ii(op, 1), fo(op, 0), op.n, op.V, op.C);
      }},
      {OpKind::TpSlice, [](Executor &e, Op &op) {
        const int64_t t = e.rank_.tpRank, chunk = op.rows * op.sliceRun, whole = op.cols * op.sliceRun;
        for (int64_t p = 0; p < op.slicePre; ++p)
          std::memcpy(static_cast<char *>(op.rawOut[0]) + p * chunk,
                      static_cast<const char *>(op.rawIn[0]) + p * whole + t * chunk, size_t(chunk));
      }},
      {OpKind::VocabCeStats, [](Executor &e, Op &op) {
        int64_t bad = -1;
        const int64_t vocab = op.classes > 0 ? op.classes : op.vocab;
        cpu::vocabCeStats(fi(op, 0), ii(op, 1), fo(op, 0), op.N, op.vocabCols, op.offset, vocab, &bad, op.V);
        if (bad >= 0) e.badId(op, true, ii(op, 1)[bad], bad, vocab);
      }},
      {OpKind::VocabCeStatsGrad, [](Executor &e, Op &op) {
        cpu::vocabCeStatsGrad(fi(op, 0), fi(op, 1), ii(op, 2), fi(op, 3), fo(op, 0), op.N, op.vocabCols, op.offset, op.V);
      }},
      {OpKind::LinearCeStats, [](Executor &e, Op &op) {
        int64_t bad = -1;
        {
          std::unique_lock<std::mutex> l(e.blasMu_, std::defer_lock);
          if (e.multi_) l.lock();
          // A padded vocabulary (transpose_b: w's first vocabCols rows are the classes) as a smaller one.
          cpu::linearCeStats(fi(op, 0), fi(op, 1), ii(op, 2), fo(op, 0), fo(op, 1), op.N, op.C, op.vocabCols, op.n, op.tb, op.offset,
                             op.classes > 0 ? op.classes : op.vocab, &bad);
        }
        if (bad >= 0) e.badId(op, true, ii(op, 2)[bad], bad, op.classes > 0 ? op.classes : op.vocab);
      }},
      {OpKind::LinearCeStatsGrad, [](Executor &e, Op &op) {
        std::unique_lock<std::mutex> l(e.blasMu_, std::defer_lock);
        if (e.multi_) l.lock();
        cpu::linearCeStatsGrad(fi(op, 0), fi(op, 1), fi(op, 2), ii(op, 3), fi(op, 4), fo(op, 0), fo(op, 1), fo(op, 2), op.N, op.C, op.vocabCols, op.n,
                               op.tb, op.offset);
        if (op.vocabCols < op.V) // a padded vocabulary's rows of dw (transpose_b): zero
          std::fill(fo(op, 1) + op.vocabCols * op.C, fo(op, 1) + op.V * op.C, 0.0f);
      }},
      {OpKind::VocabCeLoss, [](Executor &e, Op &op) {
        *fo(op, 0) = cpu::vocabCeLoss(fi(op, 0), op.N, op.n);
      }},
      {OpKind::VocabCeLossGrad, [](Executor &e, Op &op) {
        cpu::vocabCeLossGrad(fi(op, 0), *fi(op, 1), fo(op, 0), op.N, op.n);
      }},
      {OpKind::Matmul, [](Executor &e, Op &op) {
        if (e.multi_) {
          std::lock_guard<std::mutex> l(e.blasMu_);
          cpu::matmul(fi(op, 0), fi(op, 1), fo(op, 0), op.batch, op.M, op.N, op.K, op.ta, op.tb, op.sA, op.sB, op.sC);
        } else {
          cpu::matmul(fi(op, 0), fi(op, 1), fo(op, 0), op.batch, op.M, op.N, op.K, op.ta, op.tb, op.sA, op.sB, op.sC);
        }
      }},
      {OpKind::Add, [](Executor &e, Op &op) {
        cpu::add(fi(op, 0), fi(op, 1), fo(op, 0), op.n);
      }},
      {OpKind::BiasAdd, [](Executor &e, Op &op) {
        cpu::biasAdd(fi(op, 0), fi(op, 1), fo(op, 0), op.rows, op.cols);
      }},
      {OpKind::Mul, [](Executor &e, Op &op) {
        cpu::mul(fi(op, 0), fi(op, 1), fo(op, 0), op.n);
      }},
      {OpKind::Scale, [](Executor &e, Op &op) {
        cpu::scale(fi(op, 0), fo(op, 0), op.value, op.n);
      }},
      {OpKind::ReduceSum, [](Executor &e, Op &op) {
        cpu::reduceSum(fi(op, 0), fo(op, 0), op.rows, op.cols);
      }},
      {OpKind::Fill, [](Executor &e, Op &op) {
        cpu::fill(fo(op, 0), op.value, op.n);
      }},
      {OpKind::Layernorm, [](Executor &e, Op &op) {
        cpu::layernorm(fi(op, 0), fi(op, 1), fi(op, 2), fo(op, 0), fo(op, 1), fo(op, 2), op.N, op.C, op.value);
      }},
      {OpKind::LayernormGrad, [](Executor &e, Op &op) {
        cpu::layernormGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fi(op, 4), fo(op, 0), fo(op, 1), fo(op, 2), op.N, op.C);
      }},
      {OpKind::AddLayernorm, [](Executor &e, Op &op) {
        cpu::addLayernorm(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fo(op, 0), fo(op, 1), fo(op, 2), fo(op, 3), op.N, op.C, op.value, roundOf(op));
      }},
      {OpKind::AddRmsNorm, [](Executor &e, Op &op) {
        cpu::addRmsnorm(fi(op, 0), fi(op, 1), fi(op, 2), fo(op, 0), fo(op, 1), fo(op, 2), op.N, op.C, op.value, roundOf(op));
      }},
      {OpKind::LayernormGradAdd, [](Executor &e, Op &op) {
        cpu::layernormGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fi(op, 4), fo(op, 0), fo(op, 1), fo(op, 2), op.N, op.C, fi(op, 5), roundOf(op));
      }},
      {OpKind::RmsNormGradAdd, [](Executor &e, Op &op) {
        cpu::rmsnormGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fo(op, 0), fo(op, 1), op.N, op.C, fi(op, 4), roundOf(op));
      }},
      {OpKind::BiasGelu, [](Executor &e, Op &op) {
        cpu::biasGelu(fi(op, 0), fi(op, 1), fo(op, 0), fo(op, 1), op.rows, op.cols, op.exact, roundOf(op));
      }},
      {OpKind::GeluGradBias, [](Executor &e, Op &op) {
        cpu::geluGradBias(fi(op, 0), fi(op, 1), fo(op, 0), fo(op, 1), op.rows, op.cols, op.exact, roundOf(op));
      }},
      {OpKind::Gelu, [](Executor &e, Op &op) {
        cpu::gelu(fi(op, 0), fo(op, 0), op.n, op.exact);
      }},
      {OpKind::GeluGrad, [](Executor &e, Op &op) {
        cpu::geluGrad(fi(op, 0), fi(op, 1), fo(op, 0), op.n, op.exact);
      }},
      {OpKind::Silu, [](Executor &e, Op &op) {
        cpu::silu(fi(op, 0), fo(op, 0), op.n);
      }},
      {OpKind::Moe, [](Executor &e, Op &op) {
         cpu::moe(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fo(op, 0), op.N, op.C, op.experts, op.ffn, op.topK,
                  op.normalize);
       }},
      {OpKind::MoeGrad, [](Executor &e, Op &op) {
         cpu::moeGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fi(op, 4), fo(op, 0), fo(op, 1), fo(op, 2), fo(op, 3),
                      op.N, op.C, op.experts, op.ffn, op.topK, op.normalize);
       }},
      {OpKind::Softcap, [](Executor &e, Op &op) { cpu::softcap(fi(op, 0), fo(op, 0), op.n, op.value); }},
      {OpKind::SoftcapGrad, [](Executor &e, Op &op) { cpu::softcapGrad(fi(op, 0), fi(op, 1), fo(op, 0), op.n, op.value); }},
      {OpKind::SiluGrad, [](Executor &e, Op &op) {
        cpu::siluGrad(fi(op, 0), fi(op, 1), fo(op, 0), op.n);
      }},
      {OpKind::Swiglu, [](Executor &e, Op &op) {
        cpu::swiglu(fi(op, 0), fi(op, 1), fo(op, 0), op.n);
      }},
      {OpKind::Geglu, [](Executor &, Op &op) { cpu::geglu(fi(op, 0), fi(op, 1), fo(op, 0), op.n, op.exact); }},
      {OpKind::GegluGrad,
       [](Executor &, Op &op) { cpu::gegluGrad(fi(op, 0), fi(op, 1), fi(op, 2), fo(op, 0), fo(op, 1), op.n, op.exact); }},
      {OpKind::SwigluGrad, [](Executor &e, Op &op) {
        cpu::swigluGrad(fi(op, 0), fi(op, 1), fi(op, 2), fo(op, 0), fo(op, 1), op.n);
      }},
      {OpKind::RmsNorm, [](Executor &e, Op &op) {
        cpu::rmsnorm(fi(op, 0), fi(op, 1), fo(op, 0), fo(op, 1), op.N, op.C, op.value);
      }},
      {OpKind::RmsNormGrad, [](Executor &e, Op &op) {
        cpu::rmsnormGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fo(op, 0), fo(op, 1), op.N, op.C);
      }},
      {OpKind::Rope, [](Executor &e, Op &op) {
        cpu::rope(fi(op, 0), fo(op, 0), op.B, op.T, op.C, op.headDim, op.invFreq.data(), op.scale, op.inverse,
                  op.interleaved, 2 * int64_t(op.invFreq.size()), op.cp, e.rank_.cpLocal);
      }},
      {OpKind::RingAttention, kRingAttention},
      {OpKind::RingAttentionGrad, kRingAttention},
      {OpKind::RingShift, kAllReduce},
      {OpKind::CpAllToAll, kAllReduce},
      {OpKind::GqaAttention, kGqaAttention},
      {OpKind::GqaAttentionGrad, kGqaAttention},
      {OpKind::Attention, [](Executor &e, Op &op) {
        cpu::attention(fi(op, 0), fo(op, 0), fo(op, 1), op.B, op.T, op.C, op.H);
      }},
      {OpKind::AttentionGrad, [](Executor &e, Op &op) {
        cpu::attentionGrad(fi(op, 0), fi(op, 1), fi(op, 2), fi(op, 3), fo(op, 0), op.B, op.T, op.C, op.H);
      }},
      {OpKind::Transpose, [](Executor &e, Op &op) {
        cpu::transpose(fi(op, 0), fo(op, 0), op.shape.data(), op.perm.data(), int(op.shape.size()));
      }},
      {OpKind::Copy, [](Executor &e, Op &op) {
        // (inOffset, outOffset: a range copy's, bytes; chunks start on 4096-byte boundaries)
        char *to = static_cast<char *>(op.rawOut[0]) + op.outOffset;
        const char *from = static_cast<const char *>(op.rawIn[0]) + op.inOffset;
        if (e.nvmeCopy(op)) return; // to or from the nvme space
        if (to != from) std::memmove(to, from, size_t(op.n));
      }},
      {OpKind::Reshape, [](Executor &e, Op &op) {
        if (op.rawIn[0] != op.rawOut[0]) std::memmove(op.rawOut[0], op.rawIn[0], size_t(op.n));
      }},
      {OpKind::Split, [](Executor &e, Op &op) {
        cpu::split(fi(op, 0), op.parts.data(), op.rows, op.cols, op.n);
      }},
      {OpKind::Concat, [](Executor &e, Op &op) {
        cpu::concat(op.cparts.data(), fo(op, 0), op.rows, op.cols, op.n);
      }},
      {OpKind::CrossEntropy, [](Executor &e, Op &op) {
        int64_t bad = -1;
        float loss = cpu::crossEntropy(fi(op, 0), ii(op, 1), op.N, op.vocabCols, &bad, op.V);
        if (bad >= 0) e.badId(op, true, ii(op, 1)[bad], bad, op.vocabCols);
        *fo(op, 0) = loss;
      }},
      {OpKind::CrossEntropyGrad, [](Executor &e, Op &op) {
        cpu::crossEntropyGrad(fi(op, 0), ii(op, 1), *fi(op, 2), fo(op, 0), op.N, op.vocabCols, op.V);
      }},
      {OpKind::GlobalNorm, [](Executor &e, Op &op) {
        runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, e.updates_, e.lrFor(op));
      }},
      {OpKind::Cast, [](Executor &e, Op &op) {
        convert(op.rawIn[0], op.inType[0], op.rawOut[0], op.outType[0], op.n);
      }},
      {OpKind::Wait, [](Executor &, Op &) {}},
      {OpKind::AllReduce, kAllReduce},
      {OpKind::ReduceScatter, kAllReduce},
      {OpKind::AllGather, kAllReduce},
      {OpKind::Send, kSend},
      {OpKind::Recv, kSend},
      {OpKind::CheckFinite, kCheckFinite},
      {OpKind::LossScaleUpdate, kCheckFinite},
      {OpKind::AdamW, [](Executor &e, Op &op) {
        if (op.capture) { // the grad as AdamW sees it, unscaled (a chunk's at its offset)
          float *dst = op.capture + op.gradOffset;
          toF32(static_cast<const char *>(op.rawIn[1]) + op.gradOffset * int64_t(dtypeSize(op.inType[1])), op.inType[1],
                dst, op.n);
          if (op.unscale) {
            const double inv = 1.0 / double(scalarIn(op, size_t(op.iScale)));
            for (int64_t k = 0; k < op.n; ++k) dst[k] = float(double(dst[k]) * inv);
          }
        }
        runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, e.updates_, e.lrFor(op));
      }},
  });
  return table;
}

void Executor::launch(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  for (const StagedOperand &c : op.pre) toF32(c.arena, c.dtype, c.stage, c.n);
  op.kernel(*this, op);
  for (const StagedOperand &c : op.post) fromF32(c.stage, c.arena, c.dtype, c.n);
}

} // namespace bigc::rt
