// What `bigc run` trains with: a program loaded into one backend (the CPU executor or the CUDA
// engine), its arenas allocated once, stepped. Backend-neutral; no MLIR, no CUDA here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bigc/Runtime/program.h"

namespace bigc::rt {

class Engine {
public:
  virtual ~Engine() = default;

  // "cpu" or "cuda".
  virtual const char *backend() const = 0;
  // The device it runs on, for the run's header line ("" for the CPU).
  virtual std::string deviceInfo() const { return ""; }
  virtual const Program &program() const = 0;

  // (Re)initialise every persistent buffer from its `init` (kind copy after its source; the
  // values of docs/program-format.md) and reset the step counters. The values are computed in
  // parallel straight into the buffers' host memory (hostPieces), each rank's shard from its own
  // range of the whole tensor's stream; an engine without host pieces gets each tensor through
  // writeBytes.
  void initialize(uint64_t seed);
  // While one of these is alive, initialize() computes no values for the weights of record
  // (weights(): masters, params that are not compute copies; freshly mapped, their pages are only
  // populated, as zeros; otherwise only their shards' padding is zeroed): they are about to be
  // loaded whole (--load-weights, an imported model's weights), which every weight must be.
  struct LoadingWeights {
    LoadingWeights();
    ~LoadingWeights();
    LoadingWeights(const LoadingWeights &) = delete;
    LoadingWeights &operator=(const LoadingWeights &) = delete;
  };
  // Re-run the init of every buffer of kind copy (compute copies of masters), e.g. after the
  // masters were loaded from a file: one pass in dependency order, converting in parallel in
  // place. (A RankGroup copies shards into whole tensors across ranks.)
  virtual void refreshCopies();

  // Where buffer `id`'s values live in this process's host memory: pieces of the whole tensor's
  // row-major elements. Piece {data, begin, count, capacity}: elements [begin, begin + count) of the
  // whole tensor are stored at `data` in the buffer's dtype, followed by capacity − count elements
  // of padding (a ZeRO shard's tail, zero). Several pieces may hold the same elements (replicas on
  // several ranks: a writer writes each, a reader reads one). Empty when the buffer is not in host
  // memory (a GPU arena): then readBytes/writeBytes move it. Initialisation, --load-weights,
  // checkpoints and resume read and write through these, without temporary copies.
  struct HostPiece {
    void *data = nullptr;
    int64_t begin = 0, count = 0, capacity = 0;
  };
  virtual std::vector<HostPiece> hostPieces(int64_t /*bufferId*/) const { return {}; }

  // What the last initialize() spent (on host pieces): computing the initial values (bytes of the
  // buffers written), mapping and zeroing the zero-initialised buffers, making the compute copies.
  struct InitTimes {
    double valuesSeconds = 0, zerosSeconds = 0, copiesSeconds = 0;
    int64_t valueBytes = 0, zeroBytes = 0;
  };
  const InitTimes &initTimes() const { return initTimes_; }

  // One training step over K micro-batches (`tokens`/`targets` hold K·B·T ids); returns the loss.
  // Throws UserError for bad data (naming the step and instruction) or a stuck stream.
  virtual float step(const int32_t *tokens, const int32_t *targets) = 0;
  // The held-out loss of K micro-batches (the layout of step()'s): the program's evaluation
  // program (its forward) alone, with the weights as they are; nothing changes. Throws UserError
  // when the program holds none.
  virtual float evaluate(const int32_t *tokens, const int32_t *targets) = 0;

  virtual int64_t stepCount() const = 0;
  virtual int64_t updateCount() const = 0;
  virtual void setStepCount(int64_t t) = 0;
  // Steps run and optimizer updates done (they differ when fp16 skipped steps), e.g. on resume.
  virtual void setCounters(int64_t steps, int64_t updates) = 0;
  bool hasLossScaling() const { return program().lossScale >= 0; }
  // The learning rate of the step last run (the program's schedule at step stepCount() - 1; its lr
  // without one), as the update used it (rounded to float once).
  float lastLearningRate() const {
    const Optimizer &o = program().optimizer;
    return float(learningRate(o, o.lr, stepCount() - 1));
  }
  virtual float lastLossScale() const = 0;
  virtual bool lastSkipped() const = 0;

  // A buffer's values as f32 (converting 16-bit), and back (rounding to the buffer's dtype), through
  // readBytes and writeBytes.
  std::vector<float> readF32(int64_t bufferId) const;
  void writeF32(int64_t bufferId, const float *values);
  // A buffer's bytes as stored (its dtype), and back.
  virtual void readBytes(int64_t bufferId, void *dst) const = 0;
  virtual void writeBytes(int64_t bufferId, const void *src) = 0;

  // Arena size per space name (the plan).
  std::map<std::string, int64_t> arenaBytes() const;
  // Memory measured per space name, next to the plan: on the CPU backend the bytes of each arena
  // the process has touched (its resident pages, counted with mincore; the arenas are mapped
  // untouched, so this is the high-water mark of what the steps wrote), the largest over the
  // ranks of a group; on the CUDA backend, for "device", the GPU memory in use while the program
  // holds its arenas (cudaMemGetInfo: context, libraries, arena and workspace), and for "host"
  // the pinned arena.
  virtual std::map<std::string, int64_t> measuredBytes() const = 0;
  // The nvme space (bigc-offload-nvme), summed over the ranks of this process since the start:
  // bytes moved and seconds spent by its reads and writes, and how ("io_uring" or "pread/pwrite").
  struct NvmeStats {
    int files = 0;
    int64_t readBytes = 0, writeBytes = 0;
    double readSeconds = 0, writeSeconds = 0;
    std::string engine;
  };
  virtual NvmeStats nvmeStats() const { return {}; }
  // The streams the program uses, compute first.
  std::vector<std::string> streams() const;

  // Grad capture (--dump-grads): each step keeps the grad operand of every adamw instruction as
  // f32 (divided by the loss scale when the adamw unscales), keyed by the param's name.
  virtual void enableGradCapture() = 0;
  virtual const std::map<std::string, std::vector<float>> &capturedGrads() const = 0;

  // Profiling (bigc run --profile): time spent in each instruction, on its stream (GPU time on the
  // CUDA backend, measured with events; wall time of the kernel call on the CPU backend), summed
  // since the last reset. Per instruction, in program order; 0 where not measured.
  virtual void enableProfiling() = 0;
  virtual void resetProfile() = 0;
  virtual std::vector<double> instructionSeconds() const = 0;
  // Profiling on the host (the CPU backend): each instruction's start and end in the last step, in
  // seconds of the steady clock (NaN for one not run on the host); none where not recorded.
  virtual std::vector<std::pair<double, double>> instructionSpans() const { return {}; }
  // Pipeline stages in one process: instructionSpans of each stage's first rank, by stage.
  virtual std::vector<std::vector<std::pair<double, double>>> stageInstructionSpans() const { return {}; }
  // Steps profiled since the last reset.
  virtual int64_t profiledSteps() const = 0;
  // A pipelined program's stages measured: per stage, the seconds its compute stream was busy
  // (summed since the last reset; the first rank of each stage). Empty when not pipelined.
  virtual std::vector<double> stageBusySeconds() const { return {}; }

  // --check-numerics: after each instruction, its floating-point outputs are checked, and the
  // first inf or nan stops the step with a UserError naming the step, the instruction, its op and
  // source location, the output and the first bad element (and an input already non-finite, when
  // the problem came from there). With fp16 loss scaling, gradients may overflow by design (the
  // step is then skipped): gradient outputs are not checked there.
  virtual void enableNumericsCheck() = 0;
  // Whether output k of instruction i is checked, and the message for a bad one (`firstBad` the
  // element index; `badInput` an input found non-finite, or -1).
  bool numericsChecked(size_t i, size_t k) const;
  std::string numericsMessage(int64_t step, size_t i, size_t k, int64_t firstBad, int64_t badInput) const;

  // Persistent (param/master/optimizer) buffer by name; nullptr when there is none.
  const Buffer *findPersistent(const std::string &name) const;
  // Persistent buffers by name (one pass over the buffers).
  std::map<std::string, const Buffer *> persistentByName() const;
  // Buffers of role "param", in program order.
  std::vector<const Buffer *> params() const;
  // The weights of record, in program order: every "master" buffer, and every "param" buffer
  // that is not the compute copy of a master (`N.half` of a master `N`). Their names are the
  // Hugging Face names; --save-weights and --load-weights use these.
  std::vector<const Buffer *> weights() const;

protected:
  // Set by a backend whose arenas were just mapped (all zero) before it calls initialize():
  // buffers initialised to zero in host pieces are then not written (their pages stay untouched
  // until a step writes them).
  bool arenasZeroed_ = false;
  InitTimes initTimes_;
};

// The CUDA backend (runtime/backends/cuda). `cudaBackendCompiled()`: this build has it.
// `cudaDeviceVisible(&why)`: a GPU can be used now (else `why` says what is missing).
// `makeCudaEngine` throws UserError when there is no usable GPU, the arenas do not fit its
// memory, or the program uses what the CUDA backend cannot run.
// The most memory this process has held resident so far (getrusage's ru_maxrss), in bytes.
int64_t processPeakResidentBytes();

// The refusal of a pipeline stage (pp > 1) run alone, without the ranks of the other stages (an
// engine made directly rather than through a rank group).
std::string pipelineStageAlone(int64_t pp);

bool cudaBackendCompiled();
// The registry's ops the CUDA backend has no kernel for (kernel_table.h; without the backend: all).
std::vector<std::string> cudaMissingKernels();
bool cudaDeviceVisible(std::string *why);
std::unique_ptr<Engine> makeCudaEngine(Program program, uint64_t seed);

} // namespace bigc::rt
