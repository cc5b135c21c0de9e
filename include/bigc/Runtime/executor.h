// Runs a validated program on the CPU backend (docs/program-format.md). One arena per memory
// space, allocated once at construction; every buffer at its planned offset; no allocation in
// step(). 16-bit buffers are stored as planned and computed in fp32 through staging buffers sized
// at construction. Streams, waits, failure, counters, profiling and the numerics check are the
// one executor's (stream_executor.h); this is its CPU device. No MLIR here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/nvme_file.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/kernel_table.h"
#include "bigc/Runtime/stream_executor.h"

namespace bigc::rt {

// Deterministic initial values (format doc, `init`): a SplitMix64 stream seeded with
// `seed ^ fnv1a64(name)`; element pairs (2k, 2k+1) in row-major order come from one Box–Muller
// draw: u1 = ((next() >> 11) + 1) · 2⁻⁵³ ∈ (0,1], u2 = (next() >> 11) · 2⁻⁵³ ∈ [0,1),
// r = sqrt(-2 ln u1), x[2k] = std · r·cos(2π u2), x[2k+1] = std · r·sin(2π u2) (computed in double,
// rounded to the buffer's dtype); an odd last element takes the cosine of one more pair.
void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name);
// The same values rounded (once, to nearest even) to `dtype` (f32, bf16 or f16).
void initNormalAs(void *x, DType dtype, int64_t n, double std, uint64_t seed, const std::string &name);
// Elements [begin, begin + count) of that stream (x[0] is element `begin`), bit for bit those of
// initNormalAs, computed in parallel (runtime/executor/InitValues.cpp: the stream is
// counter-based, so a range needs no element before it; whatever the thread count).
void initNormalRange(void *x, DType dtype, int64_t begin, int64_t count, double std, uint64_t seed,
                     const std::string &name);
// `bytes` zero bytes at x, in parallel; `mappedZero`: x is freshly mapped memory (zero pages), so
// its pages are only populated.
void zeroFill(void *x, int64_t bytes, bool mappedZero);
// Maps the whole pages of [x, x + bytes) of freshly mapped memory in bulk before they are written
// (MADV_POPULATE_WRITE; nothing where it is not supported): cheaper than a fault per page.
void populatePages(void *x, int64_t bytes);
// count elements equal to `value` in `dtype`, in parallel.
void initConstantRange(void *x, DType dtype, int64_t count, float value);
uint64_t splitmix64(uint64_t &state);

// One rank of a multi-rank program: its local index in the communicator (which runs its
// collectives) and whether the executor initialises its buffers itself (a RankGroup initialises
// the ranks together, shards from the whole tensors).
// With tensor parallelism, `comm` spans the rank's data-parallel group (the collectives of axis
// "dp") and `tpComm` its tensor-parallel group (axis "tp", local index `tpLocal`); `tpRank` picks
// the rank's chunks (vocabulary rows, tp_slice).
// With pipeline stages (pp > 1): `p2p` carries the send/recv instructions' messages between global
// ranks (this rank is its local rank `p2pLocal`, global rank `globalRank`; the rank of stage s with
// this rank's dp and tp indices is globalRank + (s - stage) * dp * tp), and `ppComm` is the rank's
// pipeline group (the ranks of its dp and tp indices, one per stage: axis "pp", local index
// `ppLocal`).
struct RankContext {
  int local = 0;
  std::shared_ptr<Communicator> comm;
  bool initialize = true;
  std::shared_ptr<Communicator> tpComm;
  int tpLocal = 0;
  int tpRank = 0;
  std::shared_ptr<Communicator> p2p;
  int p2pLocal = 0;
  int globalRank = 0;
  std::shared_ptr<Communicator> ppComm;
  int ppLocal = 0;
  // Pipeline stages in NCCL's order (BIGC_P2P_NCCL_ORDER=1, one process): the sends and recvs
  // issued in the groups the CUDA backend issues over NCCL (p2pGroups), each send waiting until
  // its recv has taken it; a check on the CPU of what runs on several GPUs.
  bool ncclOrder = false;
  // Context parallelism: the group of the cp ranks that share this rank's sequences, and this
  // rank's index c in it (its chunks of each sequence: c and 2cp-1-c).
  std::shared_ptr<Communicator> cpComm;
  int cpLocal = 0;
  // The communicator of a collective over mesh axis `axis` (0 dp, 1 tp, 2 pp, 3 cp), and this rank's
  // local index in it.
  const std::shared_ptr<Communicator> &commOf(int axis) const {
    return axis == 1 ? tpComm : axis == 2 ? ppComm : axis == 3 ? cpComm : comm;
  }
  int localOf(int axis) const { return axis == 1 ? tpLocal : axis == 2 ? ppLocal : axis == 3 ? cpLocal : local; }
};

// The CPU device under the one executor (stream_executor.h): arenas mapped from the kernel
// (zero pages, counted as the steps touch them), fp32 staging per stream for the 16-bit operands
// of ops that compute in fp32, the CPU kernels (backends/cpu) and the in-process or MPI
// communicator for collectives (and the in-process one's messages for send and recv, stream p2p).
class Executor final : public StreamExecutor {
public:
  // `program` must have passed validateProgram. Throws UserError when the arenas together do not
  // fit in this machine's physical memory (naming the spaces and sizes), or the program has several
  // ranks and `rank` no communicator of that many ranks.
  Executor(Program program, uint64_t seed, RankContext rank = {});
  ~Executor() override;

  const char *backend() const override { return "cpu"; }
  std::vector<HostPiece> hostPieces(int64_t id) const override;
  void readBytes(int64_t id, void *dst) const override;
  void writeBytes(int64_t id, const void *src) override;

  void *data(int64_t bufferId) { return ptrs_.at(size_t(bufferId)); }
  const void *data(int64_t bufferId) const { return ptrs_.at(size_t(bufferId)); }
  float *f32(int64_t bufferId) { return static_cast<float *>(data(bufferId)); }
  // fp32 staging bytes per stream (allocated at construction, outside the arenas).
  std::map<std::string, int64_t> stagingBytes() const;
  std::map<std::string, int64_t> measuredBytes() const override;

  // The CPU device's kernels, one per op of the registry (kernel_table.h).
  struct Op;
  using Kernel = void (*)(Executor &, Op &);
  static const KernelTable<Kernel> &kernels();

private:
  void *allocateArena(const Space &s, size_t bytes) override;
  void freeArena(size_t space, void *arena, size_t bytes) override;
  std::unique_ptr<BoundOp> makeOp() const override;
  void planOp(BoundOp &op) override;
  void launch(BoundOp &op) override;
  bool groupsMessages() const override { return rank_.ncclOrder; }
  void launchGroup(const std::vector<BoundOp *> &members) override;
  void loadInputs(const int32_t *tokens, const int32_t *targets) override;
  void captureGrad(BoundOp &op, std::vector<float> &dst) override;
  void freeStaging();

  std::vector<void *> staging_; // per stream
  bool multi_ = false;          // several streams: OpenBLAS calls serialised
  std::mutex blasMu_;           // OpenBLAS calls from two threads at once are not safe in every build
  RankContext rank_;
};

} // namespace bigc::rt
