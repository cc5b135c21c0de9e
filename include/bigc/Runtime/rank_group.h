// The ranks of a multi-rank program that run in this process, as one Engine: a thread per rank,
// each rank its own engine (arenas, streams), their collectives through a Communicator.
//
// The group shows the *logical* program: every sharded buffer (ZeRO) with its whole shape, so
// weights, checkpoints and --save-weights see whole tensors whatever the rank count (a sharded
// checkpoint resumes on another number of ranks). Reading a sharded buffer gathers the shards of
// every rank; writing one gives each rank its slice. step() takes the global batch: K micro-batches
// x ranks x [B,T] ids, micro-batch m of rank r at chunk m*ranks + r (the data order of `bigc run --data`), and
// returns the mean of the ranks' losses (the loss of the global batch).
//
// Pipeline stages (program pp > 1, in one process): rank r runs stage s = r / (dp * tp) (with dp
// index d = (r / tp) % dp and tp index t = r % tp), built from the program's stage s; the ranks of
// one (s, t) form a data-parallel group, of one (s, d) a tensor-parallel group, of one (d, t) a
// pipeline group (axis-2 collectives); send/recv go through the group's communicator (`comm`, all
// ranks). Every rank reads its dp index's slice of the batch (the stages of one d see the same
// tokens and targets); the step's loss is the mean over the ranks of the last stage. The logical
// program is stage 0's, followed by the persistent buffers of the other stages (names are unique
// across stages), each read from and written to the ranks of its stage: weights and checkpoints
// are whole tensors whatever the stages.
//
// Failures: a rank that throws stops every other rank (the communicator is aborted); a rank that
// does not reach a collective makes the others time out; a rank still busy `timeout` seconds after
// the others finished its step is declared stuck and the group aborted. step() then throws the
// first cause, naming the rank, the step and the collective. A rank that has not stopped 30 s after
// an abort cannot be joined: the process prints why and exits with status 1. No MLIR here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/engine.h"

namespace bigc::rt {

class RankGroup final : public Engine {
public:
  // Makes the engine of local rank `local` for the rank program (not initialised: the group
  // initialises every rank together).
  using Factory = std::function<std::unique_ptr<Engine>(const Program &, int local)>;

  // `program` is the program of one rank (every rank runs it; with pipeline stages, the top program
  // holding them all: each rank runs its stage's); `comm` spans all its ranks.
  // `deviceInHostMemory`: the device arenas are in this machine's RAM (the CPU backend), so they
  // count against it with the host arenas.
  // `configure` runs before the ranks are initialised (setMeshCommunicators).
  RankGroup(Program program, uint64_t seed, std::shared_ptr<Communicator> comm, Factory make,
            bool deviceInHostMemory = true, const std::function<void(RankGroup &)> &configure = {});
  ~RankGroup() override;

  const char *backend() const override { return engines_[0]->backend(); }
  std::string deviceInfo() const override;
  const Program &program() const override { return logical_; }
  const Program &rankProgram() const { return rankProgram_; }
  Communicator &communicator() { return *comm_; }
  Engine &rank(int local) { return *engines_[size_t(local)]; }
  int localRanks() const { return int(engines_.size()); }
  // Something the engines use that must outlive them (the NCCL communicators).
  void keepAlive(std::shared_ptr<void> p) { keep_ = std::move(p); }
  // Called once when the group aborts (a rank failed or is stuck): e.g. ncclCommAbort.
  void onAbort(std::function<void()> f) { onAbort_ = std::move(f); }
  // Tensor parallelism (program tp > 1, in one process): the communicators of the data-parallel
  // groups and of the tensor-parallel groups (aborted with the group), and, per local rank, its
  // data-parallel communicator and index in it (refreshCopies gathers shards over it).
  void setMeshCommunicators(std::vector<std::shared_ptr<Communicator>> all,
                            std::vector<std::shared_ptr<Communicator>> dpOfRank, std::vector<int> dpLocal) {
    sub_ = std::move(all), dpComm_ = std::move(dpOfRank), dpLocal_ = std::move(dpLocal);
  }
  // The longest a rank may still run after every other rank finished the step (default 300 s).
  void setStragglerTimeout(double seconds) { straggler_ = seconds; }

  float step(const int32_t *tokens, const int32_t *targets) override;
  float evaluate(const int32_t *tokens, const int32_t *targets) override;
  std::map<std::string, int64_t> measuredBytes() const override;
  NvmeStats nvmeStats() const override;
  int64_t stepCount() const override { return engines_[0]->stepCount(); }
  int64_t updateCount() const override { return engines_[0]->updateCount(); }
  void setStepCount(int64_t t) override {
    for (auto &e : engines_) e->setStepCount(t);
  }
  void setCounters(int64_t steps, int64_t updates) override {
    for (auto &e : engines_) e->setCounters(steps, updates);
  }
  // fp16: the scale of the stage that holds it (pipeline stages: one of them).
  // Under mpirun the stage may be another process's: its value as of the last step (refreshed by
  // every process after each step).
  float lastLossScale() const override {
    if (rankProgram_.pp > 1 && spansProcesses()) return stageScale_;
    for (int s = 0; s < int(rankProgram_.pp); ++s)
      if (stage(s).lossScale >= 0 && localOf(firstRankOf(s)) >= 0)
        return engines_[size_t(localOf(firstRankOf(s)))]->lastLossScale();
    return engines_[0]->lastLossScale();
  }
  bool lastSkipped() const override { return engines_[0]->lastSkipped(); }

  void readBytes(int64_t id, void *dst) const override;
  void writeBytes(int64_t id, const void *src) override;
  void refreshCopies() override;
  // Every local rank's piece of the whole tensor (its shard, or its replica), when the engines
  // have host memory and the buffer is not split by tensor parallelism; else none.
  std::vector<HostPiece> hostPieces(int64_t id) const override;

  // Grad capture and profiling: rank 0's (its gradients are shards under ZeRO >= 1); with pipeline
  // stages, the grads of the first rank of every stage.
  void enableGradCapture() override;
  const std::map<std::string, std::vector<float>> &capturedGrads() const override;
  // Profiling: rank 0's instructions; with pipeline stages also each stage's first rank, whose
  // compute streams' busy time stageBusySeconds gives.
  void enableProfiling() override;
  void resetProfile() override;
  std::vector<double> stageBusySeconds() const override;
  std::vector<std::vector<std::pair<double, double>>> stageInstructionSpans() const override;
  std::vector<double> instructionSeconds() const override { return engines_[0]->instructionSeconds(); }
  int64_t profiledSteps() const override { return engines_[0]->profiledSteps(); }
  void enableNumericsCheck() override {
    for (auto &e : engines_) e->enableNumericsCheck();
  }

private:
  // step() (eval false) or evaluate() on every local rank, each its slice of the global batch.
  float runAll(const int32_t *tokens, const int32_t *targets, bool eval);
  // The whole tensor of buffer `id` of stage s (a ZeRO shard, no tensor parallelism) in `dst`.
  void gather(int s, int64_t id, void *dst) const;
  // Every rank's bytes of buffer `id` of stage s, by rank in the stage: read here when the stage's
  // ranks are in this process, else over MPI (all-gathered with one stage; with pipeline stages
  // each rank's bytes broadcast from the process holding it). Every process calls it in the same
  // order.
  std::vector<char> allRanks(int s, int64_t id) const;
  // Tensor parallelism: the chunk of tensor rank t of buffer `id` of stage s (its dp shards
  // joined); `rank(r, out)` reads the stage's rank r's bytes of it.
  void tpLocal(int s, int64_t id, int t, const std::function<void(int64_t, void *)> &rank, void *dst) const;
  void refreshCopies(int stage);
  int dpIndex(int global) const { return int((global / rankProgram_.tp) % rankProgram_.dp); }
  int tpIndex(int global) const { return int(global % rankProgram_.tp); }
  // Pipeline stages: stage s's program, the stage of a global rank, its first global rank.
  const Program &stage(int s) const { return rankProgram_.stageProgram(s); }
  int stageOf(int global) const { return int(global / (rankProgram_.dp * rankProgram_.tp)); }
  int firstRankOf(int s) const { return int(s * rankProgram_.dp * rankProgram_.tp); }
  // Under mpirun this process holds some of the ranks (consecutive): the local rank of a global
  // one, or -1; the process holding a global rank.
  bool spansProcesses() const { return comm_->localSize() != comm_->size(); }
  int localOf(int global) const {
    const int l = global - comm_->globalRank(0);
    return l >= 0 && l < comm_->localSize() ? l : -1;
  }
  int processOf(int global) const { return global / comm_->localSize(); }
  // Pipelined under mpirun: the loss scale of the stage holding it, summed over the processes
  // (only the holder's is not zero); every process calls it at the same point.
  void refreshStageScale();
  float stageScale_ = 0.0f;
  // "rank 3", or with pipeline stages "stage 1 (rank 3)".
  std::string rankName(int global) const;
  std::vector<std::pair<int, int64_t>> logicalIds_; // per logical buffer: its stage and id there
  mutable std::map<std::string, std::vector<float>> stageGrads_;
  Communicator &dpComm(int local) { return dpComm_.empty() ? *comm_ : *dpComm_[size_t(local)]; }
  int dpLocal(int local) const { return dpLocal_.empty() ? local : dpLocal_[size_t(local)]; }
  std::vector<std::shared_ptr<Communicator>> sub_, dpComm_;
  std::vector<int> dpLocal_;
  // f(local) on a thread per local rank (of stage `onlyStage` when >= 0).
  template <class F> void onEveryRank(F f, int onlyStage = -1);

  Program rankProgram_, logical_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<void> keep_; // destroyed after the engines
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::vector<int32_t>> tokens_, targets_; // per local rank: K*B*T ids
  // BIGC_FAULT=rank=R,step=S,kind=crash|hang|stop (tests): rank R fails (or stops answering) in
  // step S; stop: its process freezes (SIGSTOP) after the step, before the processes' loss sum.
  int faultRank_ = -1;
  int64_t faultStep_ = -1;
  std::string faultKind_;
  std::function<void()> onAbort_;
  double straggler_ = 300.0;
  void abortAll(const std::string &why);
};

// Tensor parallelism or pipeline stages in one process (mesh pp x dp x tp, rank = (s * dp + d) *
// tp + t): an in-process communicator per data-parallel group (the ranks of one s and t), per
// tensor-parallel group (one s and d) and per pipeline group (one d and t).
struct InProcessMesh {
  std::vector<std::shared_ptr<Communicator>> dp, tp, pp; // by s * tp + t, by s * dp + d, by d * tp + t
  // Context parallelism: the cp consecutive data indices of one group (d / cp), by (s * (dp / cp) +
  // d / cp) * tp + t.
  std::vector<std::shared_ptr<Communicator>> cp;
  int dpSize = 1, tpSize = 1, ppSize = 1, cpSize = 1;
  InProcessMesh(int dp, int tp, double commTimeout, int pp = 1, int cp = 1);
  int cpGroupOf(int s, int d, int t) const { return (s * (dpSize / cpSize) + d / cpSize) * tpSize + t; }
  // Gives the group its host-side mesh communicators (RankGroup's `configure`).
  void install(RankGroup &g) const;
};

struct RankContext; // executor.h

// The communicators of rank `local` of one process's pp x dp x tp mesh (rank = (s * dp + d) * tp + t):
// the world's communicator `world` when there is no mesh, else the mesh's groups of its t and its d,
// and with pipeline stages the stages' messages over `world` and its pipeline group.
RankContext inProcessRankContext(const InProcessMesh *mesh, std::shared_ptr<Communicator> world, int tp, int local);

// Under mpirun: gives the group the host-side mesh communicators of makeMpiMesh (`configure`).
void installMpiMesh(RankGroup &g, const std::vector<MeshRank> &mesh,
                    const std::vector<std::shared_ptr<Communicator>> &all);

// All ranks of `program` on the CPU backend in this process (in-process communicator), or this
// process's share of them under mpirun (MPI communicator). `commTimeout` seconds per collective.
std::unique_ptr<RankGroup> makeCpuRankGroup(Program program, uint64_t seed, double commTimeout);
// The same on the CUDA backend: one GPU per rank of this process (GPU l for local rank l), device
// collectives through NCCL (one communicator per rank; bootstrapped over MPI under mpirun), host
// ones (initialisation) through the in-process or MPI communicator. Throws UserError when this
// build has no CUDA or NCCL, or the process has fewer GPUs than ranks. `virtualRanks` (bigc run
// --virtual-ranks): every rank on one GPU instead (each its own arenas and streams), the device
// collectives through the CPU backend's in-process communicators, staged in pinned host memory: a
// sharded program checked on one GPU against the CPU backend (slower than NCCL; one process).
std::unique_ptr<RankGroup> makeCudaRankGroup(Program program, uint64_t seed, double commTimeout,
                                             bool virtualRanks = false);

} // namespace bigc::rt
