// Runs a validated program on the CPU backend (docs/program-format.md). One arena per memory
// space, allocated once at construction; every buffer at its planned offset; no allocation in
// step(). 16-bit buffers are stored as planned and computed in fp32 through staging buffers sized
// at construction. Streams (compute, h2d, d2h, host) run concurrently: compute on the caller's
// thread, every other stream the program uses on a worker thread created once; an instruction's
// `wait` list is honoured with per-instruction completion stamps (the step number). No MLIR here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bigc/runtime/comm.h"
#include "bigc/runtime/engine.h"
#include "bigc/runtime/program.h"

namespace bigc::rt {

// Deterministic initial values (format doc, `init`): a SplitMix64 stream seeded with
// `seed ^ fnv1a64(name)`; element pairs (2k, 2k+1) in row-major order come from one Box–Muller
// draw: u1 = ((next() >> 11) + 1) · 2⁻⁵³ ∈ (0,1], u2 = (next() >> 11) · 2⁻⁵³ ∈ [0,1),
// r = sqrt(-2 ln u1), x[2k] = std · r·cos(2π u2), x[2k+1] = std · r·sin(2π u2) (computed in double,
// rounded to the buffer's dtype); an odd last element takes the cosine of one more pair.
void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name);
// The same values rounded (once, to nearest even) to `dtype` (f32, bf16 or f16).
void initNormalAs(void *x, DType dtype, int64_t n, double std, uint64_t seed, const std::string &name);
uint64_t splitmix64(uint64_t &state);

// One rank of a multi-rank program: its local index in the communicator (which runs its
// collectives) and whether the executor initialises its buffers itself (a RankGroup initialises
// the ranks together, shards from the whole tensors).
// With tensor parallelism, `comm` spans the rank's data-parallel group (the collectives of axis
// "dp") and `tpComm` its tensor-parallel group (axis "tp", local index `tpLocal`); `tpRank` picks
// the rank's chunks (vocabulary rows, tp_slice).
struct RankContext {
  int local = 0;
  std::shared_ptr<Communicator> comm;
  bool initialize = true;
  std::shared_ptr<Communicator> tpComm;
  int tpLocal = 0;
  int tpRank = 0;
};

class Executor final : public Engine {
public:
  // `program` must have passed validateProgram. Throws UserError when the arenas together do not
  // fit in this machine's physical memory (naming the spaces and sizes), or the program has several
  // ranks and `rank` no communicator of that many ranks.
  Executor(Program program, uint64_t seed, RankContext rank = {});
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;


  // One training step: copies the K micro-batches (K = config.micro_batches; `tokens` and
  // `targets` each hold K·B·T ids, micro-batch k at k·B·T) into the input buffers, runs every
  // instruction (streams concurrently), returns the loss. Throws UserError for a bad token id
  // (naming the step and the instruction's loc); an error on any stream is rethrown here after
  // every stream has stopped.
  float step(const int32_t *tokens, const int32_t *targets) override;

  const char *backend() const override { return "cpu"; }
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
  void readBytes(int64_t id, void *dst) const override;
  void writeBytes(int64_t id, const void *src) override;
  // Loss scaling (fp16): the scale used by the last step and whether it was skipped. Without
  // loss scaling: 1 and false.
  float lastLossScale() const override { return lastScale_; }
  bool lastSkipped() const override { return lastSkipped_; }

  void *data(int64_t bufferId) { return ptrs_.at(size_t(bufferId)); }
  const void *data(int64_t bufferId) const { return ptrs_.at(size_t(bufferId)); }
  float *f32(int64_t bufferId) { return static_cast<float *>(data(bufferId)); }
  // A buffer's values as f32 (converting 16-bit), and back (rounding to the buffer's dtype).
  std::vector<float> readF32(int64_t bufferId) const override;
  void writeF32(int64_t bufferId, const float *values) override;
  // fp32 staging bytes per stream (allocated at construction, outside the arenas).
  std::map<std::string, int64_t> stagingBytes() const;
  std::map<std::string, int64_t> measuredBytes() const override;

  // Grad capture: after enableGradCapture(), each step copies the grad operand of every adamw
  // instruction (as it is when adamw runs, as f32, divided by the loss scale when the adamw
  // unscales) into a host buffer keyed by the param's name.
  void enableGradCapture() override;
  bool gradCaptureEnabled() const { return capture_; }
  const std::map<std::string, std::vector<float>> &capturedGrads() const override { return grads_; }

  void enableNumericsCheck() override { checkNumerics_ = true; }
  void enableProfiling() override { profiling_ = true, resetProfile(); }
  void resetProfile() override { opSeconds_.assign(prog_.instructions.size(), 0.0), profiled_ = 0; }
  std::vector<double> instructionSeconds() const override { return opSeconds_; }
  int64_t profiledSteps() const override { return profiled_; }

  // Test hooks. The longest an instruction waits for another stream before the step fails with
  // an error (default 300 s). An instruction marked never-finishing runs but never reports
  // completion, so whatever waits for it times out.
  void setWaitTimeoutForTesting(double seconds) { waitTimeout_ = seconds; }
  void setNeverFinishForTesting(int64_t instruction) { neverFinish_ = instruction; }

private:
  struct Op;
  struct Streams;
  void prepare();
  void execute(Op &op);
  void runStream(size_t stream);
  void waitFor(const Op &op, int64_t dep);
  [[noreturn]] void runtimeError(const Op &op, const std::string &msg) const;

  void freeArenas();

  Program prog_;
  std::vector<void *> arenas_;
  std::vector<size_t> arenaMapped_; // bytes mapped per arena
  std::map<std::string, int64_t> arenaIndex_;
  std::vector<void *> ptrs_;
  std::vector<Op> ops_;
  std::vector<void *> staging_;           // per stream
  std::vector<int64_t> stagingBytes_;     // per stream
  std::unique_ptr<Streams> streams_;
  int64_t step_ = 0, updates_ = 0;
  int64_t run_ = 0; // steps run by this executor: the streams' completion stamps
  bool profiling_ = false;
  bool checkNumerics_ = false;
  void checkNumerics(const Op &op) const;
  std::vector<double> opSeconds_;
  int64_t profiled_ = 0;
  float lastScale_ = 1.0f;
  bool lastSkipped_ = false;
  bool capture_ = false;
  std::map<std::string, std::vector<float>> grads_;
  std::vector<float *> captureDst_; // per op, nullptr unless an adamw with capture on
  double waitTimeout_ = 300.0;
  int64_t neverFinish_ = -1;
  RankContext rank_;
};

} // namespace bigc::rt
