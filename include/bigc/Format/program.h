// The program file's data model (docs/program-format.md): what the compiler's emitter fills and
// the runtime executes. Reading, validating and writing it: reader.h, validator.h, writer.h; the
// op table: ops.h; the plan verifier: verifier.h (the format library, format/). No MLIR here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bigc/Support/error.h"

namespace bigc::format {

using bigc::UserError; // include/bigc/Support/error.h

enum class DType { F32, BF16, F16, I32 };
const char *dtypeName(DType d);
int64_t dtypeSize(DType d);
bool parseDType(const std::string &s, DType &out);

struct Init {
  std::string kind; // "normal", "zeros", "ones", "copy", "fill", "" (none)
  double std = 0.0;
  std::string source; // kind "copy": name of the persistent buffer cast into this one
  double value = 0;   // kind "fill"
};

struct Buffer {
  int64_t id = 0;
  std::string name;
  std::string space; // "device", "host", ...
  int64_t offset = 0;
  int64_t bytes = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::string role; // param, master, optimizer, grad, activation, activation_grad, input, workspace, transfer
  int64_t liveFirst = 0, liveLast = 0;
  Init init;
  // Version 3: a shard (over the mesh axis "dp") of a tensor of shape fullShape: the buffer is 1-D
  // with ceil(numel(fullShape) / dp) elements, rank r holding elements [r*S, r*S+S) of the whole
  // (the last shard padded with zeros).
  bool shard = false;
  std::vector<int64_t> fullShape;
  // Version 6 (bigc-tile, --tile-linear): a shard of a weight used as `tiles` equal row tiles is
  // tile-interleaved: tile t is elements [t*T, t*T+T) of the whole (T = numel / tiles), and rank r
  // holds, for t = 0, 1, ..., elements [t*T + r*P, t*T + r*P + P) of it (P = ceil(T / dp), each
  // piece padded with zeros past the tile): S = tiles * P. 1: the layout above.
  int64_t tiles = 1;
  // Tensor parallelism: a chunk of the tensor of shape tpFullShape split along tpDim over the mesh
  // axis "tp" (rank t holds chunk t of each of tpSegments equal parts of that dimension, in order).
  // The shape before any dp shard (fullShape when sharded, else shape) is tpFullShape with tpDim
  // divided by tp. tpDim -1: not split.
  int64_t tpDim = -1, tpSegments = 1;
  std::vector<int64_t> tpFullShape;
  // bigc-pad-vocab (--pad-vocab): the whole tensor's rows from vocabRows on (its first dimension,
  // a vocabulary padded to a multiple) are padding: zero from the start and kept zero by the
  // step, not initialised, saved or loaded (the model's tensor is the first vocabRows rows). 0:
  // no padding.
  int64_t vocabRows = 0;

  bool sharded() const { return shard; }
  // The whole tensor's shape (before any tensor-parallel chunk or ZeRO shard).
  const std::vector<int64_t> &wholeShape() const { return tpDim >= 0 ? tpFullShape : shard ? fullShape : shape; }
  // The elements of the whole tensor that are the model's (all but the vocabulary's padding rows).
  int64_t logicalNumel() const {
    const std::vector<int64_t> &w = wholeShape();
    int64_t n = 1;
    for (size_t d = 0; d < w.size(); ++d) n *= d == 0 && vocabRows > 0 ? vocabRows : w[d];
    return n;
  }
  // The model's shape of the tensor (the whole shape without the padding rows).
  std::vector<int64_t> logicalShape() const {
    std::vector<int64_t> s = wholeShape();
    if (vocabRows > 0 && !s.empty()) s[0] = vocabRows;
    return s;
  }
  int64_t fullNumel() const {
    if (!shard) return numel();
    int64_t n = 1;
    for (int64_t d : fullShape) n *= d;
    return n;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool persistent() const { return role == "param" || role == "optimizer" || role == "master"; }
};

// Attribute values: numbers, bools, integer lists and (rope's inv_freq) lists of reals.
struct Attr {
  double num = 0.0;
  bool isList = false;
  std::vector<int64_t> list;
  bool isReals = false;
  std::vector<double> reals;
};

struct Instruction {
  std::string op;
  std::vector<int64_t> in, out;
  std::map<std::string, Attr> attrs;
  std::string loc;
  std::string stream = "compute"; // compute, h2d, d2h, host
  std::vector<int64_t> wait;      // indices of earlier instructions on other streams
  std::string phase;              // forward, backward, optimizer ("" unknown)
  bool recompute = false;         // forward work repeated in the backward
  int64_t microBatch = -1;        // the micro-batch it works on (-1: none, or not recorded)
  bool weightGrad = false;        // zero-bubble: part of a backward's weight-gradient work (W)

  double num(const std::string &key, double dflt) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? dflt : it->second.num;
  }
  bool flag(const std::string &key) const { return num(key, 0.0) != 0.0; }
  std::vector<int64_t> ints(const std::string &key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? std::vector<int64_t>{} : it->second.list;
  }
  std::vector<double> reals(const std::string &key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? std::vector<double>{} : it->second.reals;
  }
};

struct Space {
  std::string name;
  int64_t arenaBytes = 0, lowerBoundBytes = 0, capacityBytes = 0;
};

// Version 5 (bigc compile --lr-schedule): the learning rate of each step from the step counter the
// program keeps (Engine::stepCount: steps run, skipped fp16 steps included, as PyTorch schedulers
// step every iteration). Step i (counted from 0) with peak rate lr, warmup W, decay end N, final
// rate min_lr:
//   i < W                    lr * (i + 1) / W                 (linear warmup, llm.c's and torchtitan's)
//   constant                 lr
//   cosine, W <= i < N       min + (lr - min) * (1 + cos(pi * (i - W) / (N - W))) / 2
//   linear, W <= i < N       min + (lr - min) * (1 - (i - W) / (N - W))
//   wsd: lr up to N - D, then min + (lr - min) * (1 - (i - (N - D)) / D)   (D: wsd_decay_steps;
//        Megatron-LM's --lr-wsd-decay-iters, linear)
//   i >= N (decaying kinds)  min
struct LrSchedule {
  std::string kind = "constant"; // constant, cosine, linear, wsd
  int64_t warmupSteps = 0, decaySteps = 0, wsdDecaySteps = 0;
  double minLr = 0;
  // Anything but a constant rate (the program's lr at every step, as versions before 5).
  bool present() const { return kind != "constant" || warmupSteps > 0; }
};

struct Optimizer {
  std::string kind = "adamw";
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1, gradClip = 0.0;
  LrSchedule schedule;
};

// The rate of step i (from 0) for an instruction whose rate is `lr` (the program's optimizer.lr;
// min_lr scales with it), in double; `lr` itself when there is no schedule.
double learningRate(const Optimizer &o, double lr, int64_t i);
// "cosine: warmup 100 steps, decay to 6e-05 by step 5000" (for inspect and run).
std::string describeSchedule(const Optimizer &o);

struct RecomputeInfo {
  std::string policy = "none";
  int64_t savedBytes = 0, flopsAdded = 0, forwardFlops = 0;
};

// Collective instructions (version 3): attribute `reduce` and `axis` codes.
enum class Reduce { Sum = 0, Mean = 1, Max = 2, Norm = 3 };
enum class MeshAxis { DP = 0, TP = 1, PP = 2 };

// Version 3 (optional): the step played on the compile's hardware profile with the cost model
// (bigc compile --hardware): its time, the compute stream's busy time, and per collective kind its
// time and the part hidden behind compute.
struct CollectiveEstimate {
  std::string op;
  int64_t count = 0;
  double seconds = 0, hiddenSeconds = 0;
  double queuedSeconds = 0; // behind earlier work of its stream after its input was ready
};
// Per op and stream (not the collectives): instructions, their time on the profile, and the cost
// model's FLOPs and bytes moved (`bigc run --profile` sets the measured times beside them).
struct OpEstimate {
  std::string op, stream;
  int64_t count = 0;
  double seconds = 0, flops = 0, bytes = 0;
};
struct StepEstimate {
  bool present = false;
  double stepSeconds = 0, computeSeconds = 0;
  std::vector<CollectiveEstimate> collectives;
  std::vector<OpEstimate> ops;
};

// A pipelined program's step played on the cost model with every stage at once (top program):
// each stage's compute stream as stretches of one micro-batch's forward, backward or weight
// gradients, or the optimizer (micro-batch -1); the gaps between them are the bubbles. `bubble`:
// the compute streams' idle time over their busy time, averaged over the stages.
struct PipelineBlock {
  int64_t stage = 0, microBatch = -1;
  std::string kind; // forward, backward, weight, optimizer
  double start = 0, end = 0;
};
struct PipelineEstimate {
  bool present = false;
  std::string hardware; // the profile it was played on
  double stepSeconds = 0, bubble = 0;
  std::vector<double> busySeconds; // per stage
  std::vector<PipelineBlock> blocks;
};

struct Program {
  int version = 3;
  std::string producer, source;
  int64_t batch = 0, seq = 0, vocab = 0, microBatches = 1, ranks = 1;
  // Version 3: the device mesh (ranks = dp * tp * pp) and the ZeRO stage over dp.
  int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  // Context parallelism: the cp ranks (axis 3) are cp consecutive data-parallel indices that hold
  // the parts of the same sequences (dp counts them; cp divides dp). The program's `seq` is one
  // rank's part: the sequences are cp x seq tokens.
  int64_t cp = 1;
  int64_t axisSize(int64_t axis) const { return axis == 0 ? dp : axis == 1 ? tp : axis == 2 ? pp : cp; }
  // Pipeline parallelism (pp > 1): a program of P stages, each its own program (buffers, arenas,
  // instructions), in one file. This one is stage `stage`; the top program (stage 0) holds the
  // others in `stages` (stages 1..pp-1, each with its `stage` set and no `stages` of its own). Rank
  // r runs stage r / (dp * tp). `ppSchedule`: gpipe, 1f1b, interleaved or zero-bubble;
  // `virtualStages`: model chunks per stage (interleaved).
  int64_t stage = 0;
  std::string ppSchedule;
  int64_t virtualStages = 1;
  std::vector<int64_t> ppSplit; // the first layer of each stage (model chunk) after the first
  std::vector<Program> stages;
  PipelineEstimate pipelineEstimate; // top program only
  const Program &stageProgram(int64_t s) const { return s == 0 ? *this : stages.at(size_t(s - 1)); }
  Program &stageProgram(int64_t s) { return s == 0 ? *this : stages.at(size_t(s - 1)); }
  // Tensor parallelism: Megatron-SP, and the ops bigc-tensor-parallel left replicated (no rule).
  bool sequenceParallel = false;
  std::vector<std::string> tpReplicated;
  std::string precision = "fp32";
  Optimizer optimizer;
  std::string hardwareName;
  // What the plan may use per device and of the host (the memory less the reserves), and the
  // reserves kept for what is not in the plan (CUDA context, workspaces, NCCL; the OS).
  int64_t deviceCapacityBytes = 0, hostCapacityBytes = 0;
  // NVMe offload (space "nvme"): what the plan may use of the drive (0: not known) and the directory
  // its file-backed arenas go in (one scratch file per rank; `bigc run --nvme-path` overrides it).
  int64_t nvmeCapacityBytes = 0;
  std::string nvmePath;
  int64_t deviceReserveBytes = 0, hostReserveBytes = 0;
  std::vector<std::pair<std::string, int64_t>> deviceReserveParts;
  // The model's own initial weights (an imported model's safetensors file, absolute path; "" when
  // the inits of the buffers are the start): `bigc run` loads them before the first step.
  std::string initialWeights;
  int64_t initialWeightsBytes = 0;
  // A weight's name in the initial weights file where it differs from the weight's (a published
  // checkpoint without the base model's prefix: Hugging Face's own GPT-2 says "h.0..." for the
  // model's "transformer.h.0..."); loading accepts it as one more name of that weight.
  std::map<std::string, std::string> initialNames;
  // The module's persistent buffers the initial weights file holds beside the weights (a module's
  // state_dict tensors that are no parameters: minGPT's causal masks): loading passes over them,
  // --save-weights copies them from that file, so that load_state_dict(strict=True) takes it.
  std::vector<std::string> initialBuffers;
  // The model as its authors' tools read it (optional; `bigc run --save-hf`, --save-weights,
  // --load-weights): a tied weight's other names (weight of record -> its aliases: a module's
  // state_dict holds every name, Hugging Face's save_pretrained the input embedding's), the Hugging
  // Face config.json of the model (JSON text; bigc import hf's config, bigc gen's own), and the
  // prefix Hugging Face puts before the weights' names that the model's names lack (bigc gen gpt:
  // "transformer.").
  std::map<std::string, std::vector<std::string>> aliases;
  std::string hfConfig, hfPrefix;
  std::vector<Space> spaces;
  std::vector<Buffer> buffers;
  std::vector<int64_t> tokenInputs, targetInputs; // one per micro-batch
  int64_t loss = -1;
  int64_t lossScale = -1, foundInf = -1; // loss_scaling object (fp16); -1 absent
  // The evaluation program (`bigc run --val-data`, `bigc eval`): the step's forward instructions
  // (phase forward, not recomputed), increasing indices into `instructions`. During training it runs
  // in the training plan's arenas (its buffers where the training step puts them: no memory of its
  // own, the weights shared); the loss buffer holds the held-out loss of the K micro-batches.
  // Empty: a program compiled before it existed (validation then needs a recompile).
  std::vector<int64_t> evalInstructions;
  // Its own memory plan (`bigc eval`: include/bigc/Format/evaluation.h): per space the arena it
  // needs, and the offset there of each buffer it keeps (what its instructions touch, the weights
  // of record, the step's inputs); gradients and optimizer state have no memory in it. Absent: a
  // program whose evaluation touches the nvme space, or compiled before the plan existed
  // (`bigc eval` then runs it in the training arenas).
  struct EvalPlan {
    std::map<std::string, int64_t> arenas;
    std::vector<int64_t> buffers, offsets; // increasing buffer ids, and each one's offset
    bool present() const { return !arenas.empty(); }
  } evalPlan;
  RecomputeInfo recompute;
  StepEstimate estimate;
  std::vector<Instruction> instructions;
  uint64_t checksum = 0; // FNV-1a 64 of the payload, as read (parseProgram); 0 when built in memory

  const Space *space(const std::string &name) const {
    for (auto &s : spaces)
      if (s.name == name) return &s;
    return nullptr;
  }
  int64_t parameterCount() const; // elements of role "param"
  // The persistent buffers' bytes as whole tensors (a ZeRO shard or tensor-parallel chunk counted as
  // its tensor), of every pipeline stage in the top program: what a checkpoint holds, and the host
  // memory of a background checkpoint's snapshot.
  int64_t stateBytes() const;
};

// Version 4: a padded vocabulary (buffer field vocab_rows, instruction attribute classes), which a
// version-3 reader would skip and so train another model; a program without it is written as 3.
// Version 5: a learning-rate schedule (optimizer.schedule), which a version-4 reader would skip
// and train at a constant rate.
// Version 6: tile-interleaved shards (buffer field shard.tiles, instruction attribute tile of
// all_gather), which a version-5 reader would skip and so read every such shard wrongly.
constexpr int kProgramVersion = 6;
// The version a program is written as: 6 where it has tiled shards, 5 where it has a schedule, 4
// where it has a padded vocabulary, else 3.
int writtenVersion(const Program &p);
constexpr int kOldestProgramVersion = 2; // read too (no collectives, one rank)
constexpr int64_t kAlignment = 64;
// The nvme space's offsets and sizes, and those of the host buffers its copies read and write
// (O_DIRECT on a drive of 4096-byte logical blocks).
constexpr int64_t kNvmeAlignment = 4096;

uint64_t fnv1a64(const void *data, size_t n, uint64_t h = 0xcbf29ce484222325ull);

} // namespace bigc::format
