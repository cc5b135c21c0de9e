//===- TrainPipeline.h - the pipeline of `bigc compile` ---------*- C++ -*-===//
//
// What `bigc compile` runs between the parsed model and the emitter, as one
// function: bigc-tensor-parallel, bigc-autodiff, bigc-mixed-precision,
// bigc-grad-accum, bigc-recompute, bigc-shard, bigc-offload, bigc-offload-nvme, bigc-schedule,
// bigc-memory-plan, each when its option asks for it. The compile driver
// builds its pass managers with buildTrainPipeline; bigc-opt runs the same
// passes as `--bigc-train-pipeline="zero=3 offload=cpu ..."`.
//
// This header is light (no MLIR): the choice-valued options are enums with
// their names, and the pipeline's settings one copyable struct, which the
// driver's CompileOptions extends.
//
//===----------------------------------------------------------------------===//
#ifndef BIGC_PASSES_TRAINPIPELINE_H
#define BIGC_PASSES_TRAINPIPELINE_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class OpPassManager;
namespace bigc {

/// The AdamW hyper-parameters of bigc-autodiff (the defaults of `bigc compile`).
struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.1; ///< applied to parameters of rank >= 2 only
  double gradClip = 0.0;    ///< > 0: clip the global gradient norm
  /// The moments' type (bf16: updated in fp32, stored rounded; --optimizer-states bf16).
  enum class States { FP32, BF16 } states = States::FP32;
  bool bf16States() const { return states == States::BF16; }
};
using OptimizerStates = AdamWConfig::States;

enum class Precision { FP32, BF16, FP16 };
enum class RecomputePolicy { None, Full, Selective, Auto };
enum class Offload { None, CPU, NVMe };
enum class OffloadParams { Auto, Device, Host, Nvme };
enum class OffloadGrads { Auto, Host, Nvme };
enum class PpSchedule { GPipe, OneFOneB, Interleaved, ZeroBubble };
enum class CpKind { Ring, A2A };

/// The names of an enum's values, as the options spell them.
template <typename E> const std::vector<std::pair<E, const char *>> &choiceNames();
template <> const std::vector<std::pair<Precision, const char *>> &choiceNames<Precision>();
template <> const std::vector<std::pair<RecomputePolicy, const char *>> &choiceNames<RecomputePolicy>();
template <> const std::vector<std::pair<Offload, const char *>> &choiceNames<Offload>();
template <> const std::vector<std::pair<OffloadParams, const char *>> &choiceNames<OffloadParams>();
template <> const std::vector<std::pair<OffloadGrads, const char *>> &choiceNames<OffloadGrads>();
template <> const std::vector<std::pair<PpSchedule, const char *>> &choiceNames<PpSchedule>();
template <> const std::vector<std::pair<CpKind, const char *>> &choiceNames<CpKind>();
template <> const std::vector<std::pair<OptimizerStates, const char *>> &choiceNames<OptimizerStates>();

/// "fp32", "auto", ...: the name of `value`.
template <typename E> std::string toString(E value) {
  for (const auto &[v, name] : choiceNames<E>())
    if (v == value) return name;
  return "?";
}
/// The value named `name` (none when no value has that name).
template <typename E> std::optional<E> parseChoice(const std::string &name) {
  for (const auto &[v, n] : choiceNames<E>())
    if (name == n) return v;
  return std::nullopt;
}

/// Everything the pipeline reads: one field per pass option.
struct TrainPipelineConfig {
  AdamWConfig adamw;
  // bigc-tensor-parallel, bigc-shard, bigc-pipeline
  int64_t ranks = 1; ///< all ranks (dp x tp x pp)
  int64_t zero = 0;  ///< ZeRO stage over dp
  int64_t tp = 1;    ///< tensor-parallel ranks (the tp axis; dp = ranks / tp)
  bool sequenceParallel = false;
  int64_t cp = 1;                  ///< context-parallel ranks (the cp axis, within dp)
  bool offloadActivations = false; ///< the activations kept for the backward on the host
  CpKind cpKind = CpKind::Ring;
  double bucketMb = 25; ///< largest merged collective, MiB
  // bigc-pad-vocab
  int64_t padVocab = 0; ///< the vocabulary padded to a multiple of this x tp (0: not padded)
  // bigc-fuse-loss
  bool fuseLoss = false; ///< the LM head + cross-entropy in vocabulary chunks, the logits never stored
  bool fuse = false;     ///< bigc-fuse: residual add + norm, bias + GELU and their gradients, one op each
  int64_t lossChunk = 0; ///< vocabulary columns per chunk (0: picked by the pass)
  // bigc-tile
  int64_t tileBytes = 0; ///< linear weights larger than this (as compute copies) used in row tiles (0: none)
  // bigc-mixed-precision
  Precision precision = Precision::FP32;
  double lossScaleInit = 65536.0;         ///< fp16 dynamic loss scaling: initial scale
  int64_t lossScaleGrowthInterval = 2000; ///< clean steps before the scale doubles
  // bigc-grad-accum
  int64_t microBatches = 1;
  // bigc-pipeline
  int64_t pp = 1; ///< pipeline stages (the pp axis)
  PpSchedule ppSchedule = PpSchedule::OneFOneB;
  int64_t virtualStages = 0;    ///< interleaved: model chunks per stage (0: picked, virtualStagesOf)
  std::vector<int64_t> ppSplit; ///< first layer of stages 1..pp-1 (empty: balanced by cost)
  int64_t ppStage = 0;          ///< the stage this pipeline builds (one module per stage)
  // bigc-recompute
  RecomputePolicy recompute = RecomputePolicy::None;
  int64_t recomputeDrop = -1; ///< auto: how many ranked candidates are recomputed (-1: all)
  // bigc-offload
  Offload offload = Offload::None;
  /// With offload: where the weights live between uses (Auto: decided by the
  /// driver before the pipeline runs; the pipeline treats it as Device).
  OffloadParams offloadParams = OffloadParams::Auto;
  /// With offload nvme: where the gradients wait for their update (Auto: decided by the driver
  /// before the pipeline runs; the pipeline treats it as Host).
  OffloadGrads offloadGrads = OffloadGrads::Auto;
  /// offload-grads nvme: at most this many bytes of a rank's gradients go to the drive, the first
  /// updates' (0: all of them).
  int64_t offloadGradsLimit = 0;
  /// offload nvme: updates larger than this many elements stream their state in chunks of it.
  int64_t nvmeChunk = int64_t(1) << 24;
  // bigc-schedule
  int64_t prefetch = 1; ///< ZeRO-3: layer segments an all-gather runs ahead of its use
};

/// The pipeline in three stages, so that the driver can tell the model's
/// errors (Model: tensor parallelism, backward and optimizer) from its own
/// (Techniques: precision, accumulation, recomputation, sharding, offload;
/// Plan: schedule and memory plan).
enum class TrainStage { Model, Techniques, Plan };

/// Adds the passes of `stage` to `pm` (a pass manager on builtin.module).
void buildTrainPipeline(OpPassManager &pm, const TrainPipelineConfig &c, TrainStage stage);
/// All three stages.
void buildTrainPipeline(OpPassManager &pm, const TrainPipelineConfig &c);

/// Registers `bigc-train-pipeline` (bigc-opt).
void registerBigcTrainPipeline();

} // namespace bigc
} // namespace mlir

#endif // BIGC_PASSES_TRAINPIPELINE_H
