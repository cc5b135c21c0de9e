// The one executor under every backend: it binds a program (ops decoded once, their operands,
// fp32 staging views of 16-bit operands, streams, completion stamps), runs the streams (the
// compute stream on the caller's thread, every other stream the program uses on a worker thread
// created once), waits with a timeout instead of hanging, stops every stream when one fails and
// rethrows the first error, counts steps and updates, profiles and checks numerics.
//
// Underneath, a device (the CPU backend's Executor, the CUDA backend's CudaEngine) implements the
// device interface (the pure virtual functions below, in the spirit of IREE's HAL): allocate an
// arena per memory space, copy bytes in and out, launch an op on its stream, wait on another
// stream's op, synchronise at the end of a step. A new op is one kernel per device (its launch)
// plus its decoding in decodeOp (op_dims.h). No MLIR, no CUDA here.
#pragma once

#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/nvme_file.h"
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/program.h"

namespace bigc::rt {

// A 16-bit operand converted into (pre) or out of (post) its fp32 staging area.
struct StagedOperand {
  int64_t id = -1;
  void *arena = nullptr;
  DType dtype = DType::F32;
  int64_t n = 0;
  int64_t stageOffset = 0; // bytes into the stream's staging
  float *stage = nullptr;
};

// One instruction bound to its operands: what every device's kernel takes.
struct BoundOp : OpDims {
  virtual ~BoundOp() = default;
  OpKind kind = OpKind::Wait;
  size_t index = 0;  // instruction index
  size_t stream = 0; // index into the executor's stream names
  const Instruction *ins = nullptr;
  std::vector<void *> in, out;       // what kernels read/write: arena, or fp32 staging for staged operands
  std::vector<void *> rawIn, rawOut; // arena
  std::vector<DType> inType, outType;
  std::vector<int64_t> inNumel, outNumel;
  // all_gather of a tile (attribute tile [t, k]): input k's piece t begins inByteOffset[k] bytes
  // into its buffer, and inNumel[k] is the piece's elements (empty: every input read from its start).
  std::vector<int64_t> inByteOffset;
  std::vector<StagedOperand> pre, post;
  int64_t stageBytes = 0;
  int64_t offset = 0; // vocabulary-parallel ops: the first id of this rank's rows
  int axis = 0;       // collectives: the mesh axis
  Reduce reduce = Reduce::Sum;
  int64_t issuedAfter = -1; // an instruction this one is issued after (not waited for), or -1
  // A device that issues a stage's sends and recvs in groups (p2pGroups: NCCL's): `group` holds the
  // members of the group in issue order on its first member (empty on the others), and every
  // member's `groupHead` is that first member's index (-1: not grouped).
  std::vector<size_t> group;
  int64_t groupHead = -1;
  bool isCollective() const { return isCollectiveOp(kind); }
  CollectiveKind collectiveKind() const {
    return kind == OpKind::AllReduce       ? CollectiveKind::AllReduce
           : kind == OpKind::ReduceScatter ? CollectiveKind::ReduceScatter
           : kind == OpKind::RingShift     ? CollectiveKind::RingShift
           : kind == OpKind::CpAllToAll    ? (toHeads ? CollectiveKind::ToHeads : CollectiveKind::ToSequence)
                                           : CollectiveKind::AllGather;
  }
};

class StreamExecutor : public Engine {
public:
  ~StreamExecutor() override;
  StreamExecutor(const StreamExecutor &) = delete;
  StreamExecutor &operator=(const StreamExecutor &) = delete;

  // One training step over K micro-batches: the device loads the inputs, the streams run, the
  // device synchronises; an error on any stream is rethrown here after every stream has stopped.
  float step(const int32_t *tokens, const int32_t *targets) final;
  // The evaluation program alone (Program::evalInstructions) on K micro-batches of held-out data:
  // the instructions outside it count as done; no counter, scale or weight changes. Its loss.
  float evaluate(const int32_t *tokens, const int32_t *targets) final;

  const Program &program() const override { return prog_; }
  // Steps run (including skipped ones).
  int64_t stepCount() const override { return step_; }
  // Optimizer updates completed (steps not skipped on overflow); AdamW uses t = this + 1.
  int64_t updateCount() const override { return updates_; }
  void setStepCount(int64_t t) override { step_ = t, updates_ = t; }
  void setCounters(int64_t steps, int64_t updates) override {
    step_ = steps, updates_ = updates;
    lastScale_ = 1.0f, lastSkipped_ = false;
  }
  float lastLossScale() const override { return lastScale_; }
  bool lastSkipped() const override { return lastSkipped_; }

  void enableGradCapture() override;
  bool gradCaptureEnabled() const { return capture_; }
  const std::map<std::string, std::vector<float>> &capturedGrads() const override { return grads_; }
  void enableNumericsCheck() override { checkNumerics_ = true; }
  void enableProfiling() override;
  void resetProfile() override {
    opSeconds_.assign(prog_.instructions.size(), 0.0), profiled_ = 0;
    opSpans_.assign(prog_.instructions.size(), {std::nan(""), std::nan("")});
  }
  std::vector<double> instructionSeconds() const override { return opSeconds_; }
  std::vector<std::pair<double, double>> instructionSpans() const override { return opSpans_; }
  int64_t profiledSteps() const override { return profiled_; }
  NvmeStats nvmeStats() const override;

  // Test hooks. The longest an instruction waits for another stream before the step fails with
  // an error (default 300 s). An instruction marked never-finishing runs but never reports
  // completion, so whatever waits for it times out.
  void setWaitTimeoutForTesting(double seconds) { waitTimeout_ = seconds; }
  void setNeverFinishForTesting(int64_t instruction) { neverFinish_ = instruction; }

protected:
  StreamExecutor(Program program, int tpRank);

  // ----- The device interface (every device implements these).
  // One arena of `bytes` (the planned size rounded up to kAlignment) for space `s`, zeroed (or
  // reading as zeros); throws UserError when it cannot be had.
  virtual void *allocateArena(const Space &s, size_t bytes) = 0;
  virtual void freeArena(size_t space, void *arena, size_t bytes) = 0;
  // Runs (or enqueues) one instruction on its stream. Called on the stream's thread.
  virtual void launch(BoundOp &op) = 0;
  // The step's inputs (K micro-batches of tokens and targets) into their buffers.
  virtual void loadInputs(const int32_t *tokens, const int32_t *targets) = 0;

  // ----- Optional device hooks.
  // A new, empty op (a device may bind more per op by deriving from BoundOp).
  virtual std::unique_ptr<BoundOp> makeOp() const { return std::make_unique<BoundOp>(); }
  // Per op at bind time, after decoding (staging, workspace, what the device cannot run).
  virtual void planOp(BoundOp &) {}
  // After `op` has waited for `dep`'s stamp: make the op's stream wait for the work `dep` enqueued.
  virtual void waitDevice(const BoundOp &, int64_t, std::chrono::steady_clock::time_point) {}
  // An instruction left out of an evaluation, after its waits: whatever waits on it must still
  // wait for what it waited for (the device marks it done on its stream without running it).
  virtual void skip(BoundOp &) {}
  // Whether this device issues a pipeline stage's sends and recvs in the groups p2pGroups makes
  // (each group once every member's wait list has finished, through launchGroup); asked at bind.
  virtual bool groupsMessages() const { return false; }
  // Issues one group of sends and recvs (in the order given) on their stream.
  virtual void launchGroup(const std::vector<BoundOp *> &members) {
    for (BoundOp *m : members) launch(*m);
  }
  // Whether the profile of `op` is the wall time of its launch (else the device measures it).
  virtual bool timedOnHost(const BoundOp &) const { return true; }
  virtual void enableDeviceProfiling() {}
  // Each worker thread, once, before it runs a stream (what it throws fails every step of the stream).
  virtual void onStreamThread() {}
  // After every stream has issued its work: wait for the device (reporting an error with fail()).
  virtual void synchronize() {}
  // After a successful step (profiling on): add the device-measured times to opSeconds_.
  virtual void collectProfile() {}
  // After a successful step: errors the device recorded while running (e.g. a bad id).
  virtual void checkDeviceErrors() {}
  // Grad capture: `dst` is the f32 grad of adamw `op`, filled each step.
  virtual void captureGrad(BoundOp &op, std::vector<float> &dst) = 0;
  virtual void finishCapture() {}
  // Bytes of buffer `id` at `ptr`, readable on the host once `op` has run (for the numerics
  // check): the pointer itself where the host can read it, else a copy in `tmp`.
  virtual const void *hostView(const BoundOp &op, int64_t id, const void *ptr, std::vector<unsigned char> &tmp) const;

  // ----- What devices call.
  // Every space's arena, then every buffer's pointer. Frees what it allocated when one fails. The
  // nvme space is no arena of the device's but a preallocated file (nvme_), named after nvmeRank_.
  void allocateArenas();
  void freeArenas();
  // Throws UserError when the spaces `counts` picks need more than this machine's physical memory.
  void checkPhysicalMemory(const std::function<bool(const Space &)> &counts) const;
  // Decodes every instruction into an op (streams, operand types, sizes, rank offsets), calling
  // planOp on each; no pointers yet.
  void bindOps();
  // Stages the 16-bit operands `want` picks (in/out, operand index) in fp32, each distinct buffer
  // once, `align` bytes apart; fills op.pre/op.post and op.stageBytes.
  void stageOperands(BoundOp &op, const std::function<bool(bool, size_t)> &want, int64_t align) const;
  // Operand pointers: arenas, and the stream's fp32 staging (at `stagingBase(stream)`).
  void bindOperands(const std::function<void *(size_t)> &stagingBase);
  // Starts the side streams' worker threads; stopStreams ends them (devices call it first in their
  // destructor).
  void startStreams();
  void stopStreams();
  // The first error of the step (later ones are dropped); every stream stops.
  void fail(std::exception_ptr e);
  bool aborted() const { return abort_.load(); }
  [[noreturn]] void runtimeError(const BoundOp &op, const std::string &msg) const;
  // A token id (`target` false) or target id outside [0, limit), at `position` of its input.
  [[noreturn]] void badId(const BoundOp &op, bool target, int64_t id, int64_t position, int64_t limit) const;
  // "step S: instruction I (op at loc)"
  std::string where(const BoundOp &op) const;
  // send / recv: the global rank of stage op.peer with the dp and tp indices of this rank (`globalRank`).
  int peerRank(const BoundOp &op, int globalRank) const {
    return globalRank + int((op.peer - prog_.stage) * prog_.dp * prog_.tp);
  }
  [[noreturn]] void stuck(const BoundOp &op, int64_t dep, const std::string &what) const;
  float scalar(int64_t bufferId) const;
  // The learning rate of an adamw op in the step under way: its rate as written, or the schedule's
  // rate of this step (optimizer.schedule) computed in double and rounded once.
  float lrFor(const OpDims &d) const {
    return prog_.optimizer.schedule.present() ? float(learningRate(prog_.optimizer, d.baseLr, step_ - 1)) : d.adam.lr;
  }
  bool isNvme(int64_t id) const { return prog_.buffers.at(size_t(id)).space == "nvme"; }
  // A copy to or from the nvme space (op.n bytes at the op's offsets, through the host staging
  // buffer): done here, on the calling thread, returning true; false for any other copy.
  bool nvmeCopy(const BoundOp &op);
  BoundOp &op(size_t i) { return *ops_[i]; }
  const BoundOp &op(size_t i) const { return *ops_[i]; }
  size_t streamOf(const std::string &name) const;

  struct Aborted {}; // another stream failed; this one stops quietly

  Program prog_;
  int tpRank_ = 0;
  std::vector<void *> arenas_;      // per space
  std::vector<size_t> arenaMapped_; // bytes allocated per arena
  std::vector<void *> ptrs_;        // per buffer
  std::unique_ptr<NvmeFile> nvme_;  // the nvme space (bigc-offload-nvme): a file, no memory arena
  int nvmeRank_ = 0;                // the rank in the file's name
  // Every host buffer starts at a multiple of kNvmeAlignment (the compiler's plan with an nvme
  // space): a staging buffer then owns its extent rounded up to it, which O_DIRECT transfers use.
  bool hostBlocksOwned_ = false;
  std::vector<std::unique_ptr<BoundOp>> ops_;
  std::vector<std::string> streamNames_;       // [0] = compute
  std::vector<std::vector<size_t>> streamOps_; // op indices per stream, program order
  std::vector<int64_t> stagingBytes_;          // per stream
  int64_t step_ = 0, updates_ = 0;
  int64_t run_ = 0; // steps run by this executor: the streams' completion stamps (never go back)
  float lastScale_ = 1.0f;
  bool lastSkipped_ = false;
  bool profiling_ = false;
  bool checkNumerics_ = false;
  bool capture_ = false;
  std::map<std::string, std::vector<float>> grads_;
  std::vector<double> opSeconds_;
  std::vector<std::pair<double, double>> opSpans_; // the last step's, steady clock seconds
  int64_t profiled_ = 0;
  double waitTimeout_ = 300.0;
  int64_t neverFinish_ = -1;
  // Words for a wait on a stamp that timed out ("...instruction D (op on stream 's'<these>").
  std::string stampWait_ = ", which has not finished";

private:
  void runStream(size_t s);
  // Every stream through the instructions once (the whole program, or the evaluation's), waiting
  // for the device; rethrows the first error.
  void runInstructions();
  bool evaluating_ = false;    // the run under way is the evaluation program's
  std::vector<char> evalMask_; // per instruction: part of the evaluation program
  void runGroup(BoundOp &head);
  void waitFor(const BoundOp &op, int64_t dep, bool issuedOnly);
  // --check-numerics after `op` ran; `badBefore`: an input it writes in place that was non-finite
  // before it ran (or -1).
  void checkNumerics(const BoundOp &op, int64_t badBefore) const;
  // The first input of `op` holding inf or nan among those it writes in place (inPlaceOnly) or
  // among the others; -1 when none.
  int64_t nonFiniteInput(const BoundOp &op, bool inPlaceOnly) const;

  std::unique_ptr<std::atomic<int64_t>[]> done_; // per op: the last run in which it finished (was issued)
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> waiters_{0};
  std::mutex ctlMu_;
  std::condition_variable ctlCv_, doneCv_;
  int64_t go_ = 0;
  int pending_ = 0;
  bool quit_ = false;
  int ompThreads_ = 1;
  std::atomic<bool> abort_{false};
  std::mutex errMu_;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

} // namespace bigc::rt
