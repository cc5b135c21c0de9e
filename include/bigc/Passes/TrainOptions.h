//===- TrainOptions.h - the options of the training pipeline, once ----------===//
//
// Every option of the training pipeline declared once: its name (the flag of
// `bigc compile` is --NAME, the option of `bigc-opt --bigc-train-pipeline` is
// NAME), the value's metavariable, its help, its default (the initializer in
// TrainPipelineConfig), its check, and whether `bigc compile` exposes it.
// Consumers bind it, in the spirit of IREE's OptionsBinder
// (compiler/src/iree/compiler/Utils/OptionUtils.h):
//
//   bigc compile                   parses its flags through it (driver/Compile.cpp),
//   bigc-opt --bigc-train-pipeline registers its options from it (passes/TrainPipeline.cpp),
//   bigc compile --emit-mlir       prints the bigc-opt command that reproduces the compile,
//   the unit tests                 check each pass's own defaults (Passes.td) against it.
//
// A binder B provides
//   template <class T> void option(const OptionInfo &, T &field, Check<T> check)
// for T in int64_t, double, bool, the choice enums (named by choiceNames<E>) and
// std::vector<int64_t> (a comma-separated list). The order of the calls is the
// table's order on every binding.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_PASSES_TRAINOPTIONS_H
#define BIGC_PASSES_TRAINOPTIONS_H

#include "bigc/Passes/TrainPipeline.h"

#include <cfloat>
#include <cmath>
#include <functional>
#include <string>

namespace mlir {
namespace bigc {

struct OptionInfo {
  const char *name;    ///< "zero": --zero for bigc compile, zero= for the pipeline
  const char *metavar; ///< "0|1|2|3", "N", "F", ...; nullptr for a switch (bool)
  const char *help;    ///< lines separated by '\n'
  bool compileFlag;    ///< exposed by bigc compile (else the pipeline's and the driver's own choice)
};

/// "" when the value is fine, else what it must be ("must be at least 1, got 0").
template <typename T> using Check = std::function<std::string(const T &)>;

namespace check {
inline Check<int64_t> atLeast(int64_t lo) {
  return [lo](const int64_t &v) {
    return v >= lo ? std::string() : "must be at least " + std::to_string(lo) + ", got " + std::to_string(v);
  };
}
inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
/// A finite number >= lo (or > lo when strict), within the float range (the update computes in fp32).
inline Check<double> floatAtLeast(double lo, bool strict, const char *what) {
  return [=](const double &v) {
    const bool ok = (strict ? v > lo : v >= lo) && v <= double(FLT_MAX) && (!strict || lo != 0 || float(v) > 0.0f);
    return ok ? std::string() : std::string("must be ") + what + ", got " + num(v);
  };
}
inline Check<double> unitInterval() {
  return [](const double &v) { return v >= 0 && v < 1 ? std::string() : "must be in [0, 1), got " + num(v); };
}
template <typename T> Check<T> none() {
  return [](const T &) { return std::string(); };
}
} // namespace check

/// The table. `c` is bound field by field; see the file comment.
template <typename B> void bindTrainOptions(B &b, TrainPipelineConfig &c) {
  // The mesh and ZeRO.
  b.option(OptionInfo{"ranks", "N",
                      "data-parallel ranks (default: the devices of --hardware, else 1);\n"
                      "the model's batch is per rank: the global batch is ranks x batch x K",
                      true},
           c.ranks, Check<int64_t>([](const int64_t &v) {
             return v >= 1 && v <= 4096 ? std::string() : "must be in [1, 4096], got " + std::to_string(v);
           }));
  b.option(OptionInfo{"zero", "0|1|2|3",
                      "ZeRO over the ranks: 0 data parallel (all-reduce of gradients),\n"
                      "1 + AdamW states and fp32 masters sharded, 2 + gradients sharded\n"
                      "(reduce-scatter during the backward), 3 + weights sharded\n"
                      "(all-gathered before each layer's forward and backward)",
                      true},
           c.zero, Check<int64_t>([](const int64_t &v) {
             return v >= 0 && v <= 3 ? std::string() : "expected 0, 1, 2 or 3, got " + std::to_string(v);
           }));
  b.option(OptionInfo{"tp", "N",
                      "tensor parallelism over N of the ranks (Megatron-LM splits: QKV and\n"
                      "MLP-in column-parallel, projections row-parallel, vocabulary-parallel\n"
                      "embedding and loss); the mesh is dp x tp with dp = ranks / N",
                      true},
           c.tp, check::atLeast(1));
  b.option(OptionInfo{"sequence-parallel", nullptr,
                      "with --tp: layernorms and the residual stream split along the\n"
                      "sequence (Megatron-SP: reduce-scatter + all-gather for all-reduce)",
                      true},
           c.sequenceParallel, check::none<bool>());
  b.option(OptionInfo{"cp", "C",
                      "context parallelism: each sequence split over C ranks (2C chunks,\n"
                      "rank c holding chunks c and 2C-1-c so that the causal attention's\n"
                      "work is even); every op but attention works on the rank's tokens,\n"
                      "the attention as --cp-kind says; the cp ranks are data ranks (dp\n"
                      "counts them: ranks = dp x tp x pp, C dividing dp)",
                      true},
           c.cp, check::atLeast(1));
  b.option(OptionInfo{"cp-kind", "ring|a2a",
                      "with --cp: ring (default; ring attention: the key/value blocks\n"
                      "passed around the C ranks, each merged into the softmax exactly)\n"
                      "or a2a (DeepSpeed-Ulysses: an all-to-all gives each rank the whole\n"
                      "sequence of a C-th of the heads; C must divide the kv heads)",
                      true},
           c.cpKind, check::none<CpKind>());
  b.option(OptionInfo{"bucket-mb", "F", "largest bucket of merged collectives in MiB (25; 0: one per tensor)", true},
           c.bucketMb, Check<double>([](const double &v) {
             return v >= 0 && !std::isinf(v)
                        ? std::string()
                        : "must be a number >= 0 (0: one collective per tensor), got " + check::num(v);
           }));
  b.option(OptionInfo{"prefetch", "N", "--zero 3: layers ahead that a weight all-gather starts (1; 0: none)", true},
           c.prefetch, check::atLeast(0));
  // The vocabulary and the loss.
  b.option(OptionInfo{"pad-vocab", "N",
                      "the vocabulary padded to a multiple of N x tp (Megatron's\n"
                      "make_vocab_size_divisible_by; 64 suits the GPU's GEMMs): the LM\n"
                      "head and embedding get zero rows outside the loss, the losses are\n"
                      "the unpadded model's, saved weights keep the model's shapes; lets\n"
                      "--tp split any vocabulary (default: not padded; 0 in the pipeline)",
                      true},
           c.padVocab, check::atLeast(0));
  b.option(OptionInfo{"fuse-loss", nullptr,
                      "the LM head and the cross-entropy fused: the logits (positions x\n"
                      "vocabulary) computed a chunk of the vocabulary at a time, never\n"
                      "stored; the backward recomputes them (one more GEMM of the head)",
                      true},
           c.fuseLoss, check::none<bool>());
  b.option(OptionInfo{"loss-chunk", "N",
                      "with --fuse-loss: vocabulary columns per chunk (default: the model\n"
                      "width rounded up to 64, 0 in the pipeline; the workspace holds\n"
                      "positions x N floats)",
                      true},
           c.lossChunk, check::atLeast(0));
  b.option(OptionInfo{"tile-bytes", "BYTES",
                      "linear weights larger than BYTES (as compute copies) used as row tiles\n"
                      "of at most BYTES, each gathered alone under ZeRO-3 (0: none; bigc\n"
                      "compile --tile-linear SIZE)",
                      false},
           c.tileBytes, check::atLeast(0));
  b.option(OptionInfo{"fuse", nullptr,
                      "pairs of memory-bound ops fused (bigc-fuse): the residual add and\n"
                      "the norm after it, the norm's gradient and the residual gradient,\n"
                      "bias and GELU, GELU's gradient and the bias gradient; the same\n"
                      "numbers, one tensor less written and read per pair",
                      true},
           c.fuse, check::none<bool>());
  // Precision.
  b.option(OptionInfo{"precision", "fp32|bf16|fp16",
                      "fp32 (default), bf16 or fp16: 16-bit weights and activations for\n"
                      "compute, fp32 master weights, AdamW states and statistics",
                      true},
           c.precision, check::none<Precision>());
  b.option(OptionInfo{"loss-scale", "F", "fp16: initial dynamic loss scale (65536)", true}, c.lossScaleInit,
           check::floatAtLeast(0, true, "a positive number within the float range"));
  b.option(OptionInfo{"loss-scale-window", "N", "fp16: clean steps before the loss scale doubles (2000)", true},
           c.lossScaleGrowthInterval, check::atLeast(1));
  // Accumulation and pipelines.
  b.option(OptionInfo{"micro-batches", "K",
                      "K micro-batches of the model's batch per update, gradients\n"
                      "accumulated in fp32 (activation memory of one micro-batch)",
                      true},
           c.microBatches, check::atLeast(1));
  b.option(OptionInfo{"pp", "P",
                      "pipeline parallelism: the layers split into P stages, one per\n"
                      "group of ranks (the mesh is dp x tp x pp = ranks), balanced by the\n"
                      "cost model; activations and their gradients sent between stages",
                      true},
           c.pp, check::atLeast(1));
  b.option(OptionInfo{"pp-schedule", "S",
                      "with --pp: the order of the micro-batches on each stage: 1f1b\n"
                      "(default; at most P - s micro-batches in flight on stage s),\n"
                      "interleaved (Megatron's, with --virtual-stages V chunks per stage),\n"
                      "zero-bubble (ZB-H1: each backward split into its input-gradient part,\n"
                      "sent on at once, and its weight-gradient part, which fills the\n"
                      "bubbles) or gpipe (every forward, then every backward)",
                      true},
           c.ppSchedule, check::none<PpSchedule>());
  b.option(OptionInfo{"virtual-stages", "V",
                      "with --pp-schedule interleaved: model chunks per stage (default 2;\n"
                      "0 in the pipeline picks it; chunk c of the P x V runs on stage c mod P)",
                      true},
           c.virtualStages, check::atLeast(0));
  b.option(OptionInfo{"pp-split", "L1,L2,..",
                      "with --pp: the first layer of each stage after the first (instead\n"
                      "of the balanced split)",
                      true},
           c.ppSplit, Check<std::vector<int64_t>>([](const std::vector<int64_t> &v) {
             for (int64_t x : v)
               if (x < 0) return std::string("expected layer numbers >= 0 separated by commas");
             return std::string();
           }));
  b.option(
      OptionInfo{"pp-stage", "S", "the pipeline stage this module becomes (the driver builds one per stage)", false},
      c.ppStage, check::atLeast(0));
  // Recomputation and offload.
  b.option(OptionInfo{"recompute", "POLICY",
                      "recompute activations in the backward instead of keeping them:\n"
                      "none, full (keep each block's input), selective (drop layernorm\n"
                      "and GELU outputs), auto (the least FLOPs that fit the budget)",
                      true},
           c.recompute, check::none<RecomputePolicy>());
  b.option(OptionInfo{"recompute-drop", "N",
                      "recompute=auto: the ranked candidates recomputed (-1: all; the driver's choice)", false},
           c.recomputeDrop, check::atLeast(-1));
  b.option(OptionInfo{"offload", "cpu|nvme",
                      "ZeRO-Offload: fp32 master weights and AdamW states on the host, the\n"
                      "update on the host (CPU Adam) overlapped with the backward; the\n"
                      "weights also stay on the host between uses when the device\n"
                      "cannot hold them (ZeRO-3-Offload). nvme (ZeRO-Infinity): the masters\n"
                      "and AdamW states in a file on an NVMe drive (--nvme-path), streamed\n"
                      "through the host around each update",
                      true},
           c.offload, check::none<Offload>());
  b.option(OptionInfo{"offload-params", "P",
                      "with --offload: where the 16-bit weights (ZeRO-3: their shards)\n"
                      "live between uses: auto (default: the device when the plan fits\n"
                      "there, else the host, else with --offload nvme the drive), device,\n"
                      "host or nvme",
                      true},
           c.offloadParams, check::none<OffloadParams>());
  b.option(OptionInfo{"offload-grads", "G",
                      "with --offload nvme: where the 16-bit gradients (ZeRO: their shards)\n"
                      "wait for their update when the updates wait for every gradient\n"
                      "(fp16's overflow check, clipping): auto (default: the host when the\n"
                      "plan fits there, else the drive), host or nvme (written as they\n"
                      "arrive, read back an update ahead: ZeRO-Infinity's gradient swap)",
                      true},
           c.offloadGrads, check::none<OffloadGrads>());
  b.option(OptionInfo{"offload-grads-limit", "BYTES",
                      "offload-grads nvme: at most BYTES of a rank's gradients wait on the\n"
                      "drive, the first updates' (0: all; bigc compile --offload-grads-limit SIZE)",
                      false},
           c.offloadGradsLimit, check::atLeast(0));
  b.option(OptionInfo{"offload-activations", nullptr,
                      "the activations kept for the backward go to the host as the forward\n"
                      "makes them and come back a layer ahead of the backward (the d2h and\n"
                      "h2d streams; the host arena holds them); with --recompute full only\n"
                      "the blocks' inputs travel",
                      true},
           c.offloadActivations, check::none<bool>());
  b.option(OptionInfo{"nvme-chunk", "N",
                      "--offload nvme: a tensor's update streams its optimizer state\n"
                      "through the host in chunks of N elements (default 16777216 = 2^24;\n"
                      "a multiple of 2048; 0: whole tensors), two chunks in flight",
                      true},
           c.nvmeChunk, Check<int64_t>([](const int64_t &v) {
             return v >= 0 && v % 2048 == 0
                        ? std::string()
                        : std::string(
                              "must be 0 or a positive multiple of 2048 (chunks start on 4096-byte boundaries)");
           }));
  // AdamW.
  b.option(OptionInfo{"lr", "F", "AdamW learning rate (3e-4; the peak of --lr-schedule)", true}, c.adamw.lr,
           check::floatAtLeast(0, true, "a positive number within the float range (the update computes in fp32)"));
  b.option(OptionInfo{"beta1", "F", "AdamW beta1 (0.9)", true}, c.adamw.beta1, check::unitInterval());
  b.option(OptionInfo{"beta2", "F", "AdamW beta2 (0.95)", true}, c.adamw.beta2, check::unitInterval());
  b.option(OptionInfo{"eps", "F", "AdamW epsilon (1e-8)", true}, c.adamw.eps,
           check::floatAtLeast(0, true, "a positive number within the float range (the update computes in fp32)"));
  b.option(OptionInfo{"weight-decay", "F", "AdamW weight decay, parameters of rank >= 2 only (0.1)", true},
           c.adamw.weightDecay, check::floatAtLeast(0, false, "a number >= 0 within the float range"));
  b.option(OptionInfo{"grad-clip", "F", "clip the global gradient norm to F (0: no clipping)", true}, c.adamw.gradClip,
           Check<double>([](const double &v) {
             return v >= 0 && !std::isinf(v) ? std::string()
                                             : "must be a finite number >= 0 (0: no clipping), got " + check::num(v);
           }));
  b.option(OptionInfo{"optimizer-states", "fp32|bf16",
                      "the AdamW moments' type (default fp32); bf16 halves their bytes\n"
                      "(updated in fp32, stored rounded)",
                      true},
           c.adamw.states, check::none<OptimizerStates>());
}

/// The number of model chunks a stage holds: --virtual-stages, or its default (2 for the
/// interleaved schedule, 1 otherwise), in one place.
inline int64_t virtualStagesOf(const TrainPipelineConfig &c) {
  if (c.virtualStages > 0) return c.virtualStages;
  return c.ppSchedule == PpSchedule::Interleaved ? 2 : 1;
}

} // namespace bigc
} // namespace mlir

#endif // BIGC_PASSES_TRAINOPTIONS_H
