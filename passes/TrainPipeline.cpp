//===- TrainPipeline.cpp - the pipeline of `bigc compile` -----------------===//
//
// See include/bigc/Passes/TrainPipeline.h. One function adds the passes;
// `bigc compile` (driver/Pipeline.cpp) and `bigc-opt
// --bigc-train-pipeline` both call it, so they run the same passes.
//
//===----------------------------------------------------------------------===//

#include "bigc/Passes/TrainPipeline.h"
#include "bigc/Passes/Passes.h"
#include "bigc/Passes/TrainOptions.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

namespace mlir {
namespace bigc {

template <> const std::vector<std::pair<Precision, const char *>> &choiceNames<Precision>() {
  static const std::vector<std::pair<Precision, const char *>> names = {
      {Precision::FP32, "fp32"}, {Precision::BF16, "bf16"}, {Precision::FP16, "fp16"}};
  return names;
}
template <> const std::vector<std::pair<RecomputePolicy, const char *>> &choiceNames<RecomputePolicy>() {
  static const std::vector<std::pair<RecomputePolicy, const char *>> names = {{RecomputePolicy::None, "none"},
                                                                              {RecomputePolicy::Full, "full"},
                                                                              {RecomputePolicy::Selective, "selective"},
                                                                              {RecomputePolicy::Auto, "auto"}};
  return names;
}
template <> const std::vector<std::pair<Offload, const char *>> &choiceNames<Offload>() {
  static const std::vector<std::pair<Offload, const char *>> names = {
      {Offload::None, "none"}, {Offload::CPU, "cpu"}, {Offload::NVMe, "nvme"}};
  return names;
}
template <> const std::vector<std::pair<OffloadGrads, const char *>> &choiceNames<OffloadGrads>() {
  static const std::vector<std::pair<OffloadGrads, const char *>> names = {
      {OffloadGrads::Auto, "auto"}, {OffloadGrads::Host, "host"}, {OffloadGrads::Nvme, "nvme"}};
  return names;
}
template <> const std::vector<std::pair<OffloadParams, const char *>> &choiceNames<OffloadParams>() {
  static const std::vector<std::pair<OffloadParams, const char *>> names = {{OffloadParams::Auto, "auto"},
                                                                            {OffloadParams::Device, "device"},
                                                                            {OffloadParams::Host, "host"},
                                                                            {OffloadParams::Nvme, "nvme"}};
  return names;
}

template <> const std::vector<std::pair<PpSchedule, const char *>> &choiceNames<PpSchedule>() {
  static const std::vector<std::pair<PpSchedule, const char *>> names = {{PpSchedule::GPipe, "gpipe"},
                                                                         {PpSchedule::OneFOneB, "1f1b"},
                                                                         {PpSchedule::Interleaved, "interleaved"},
                                                                         {PpSchedule::ZeroBubble, "zero-bubble"}};
  return names;
}

template <> const std::vector<std::pair<CpKind, const char *>> &choiceNames<CpKind>() {
  static const std::vector<std::pair<CpKind, const char *>> names = {{CpKind::Ring, "ring"}, {CpKind::A2A, "a2a"}};
  return names;
}

template <> const std::vector<std::pair<OptimizerStates, const char *>> &choiceNames<OptimizerStates>() {
  static const std::vector<std::pair<OptimizerStates, const char *>> names = {{OptimizerStates::FP32, "fp32"},
                                                                              {OptimizerStates::BF16, "bf16"}};
  return names;
}

void buildTrainPipeline(OpPassManager &pm, const TrainPipelineConfig &o, TrainStage stage) {
  switch (stage) {
  case TrainStage::Model: {
    // Context parallelism (the forward at the rank's part of the sequence), the vocabulary padded
    // (before tensor parallelism splits it), tensor parallelism (on the forward), then backward +
    // optimizer.
    if (o.cp > 1) {
      BigcContextParallelOptions co;
      co.cp = o.cp;
      co.kind = toString(o.cpKind);
      pm.addPass(createBigcContextParallel(co));
    }
    if (o.padVocab > 0) {
      BigcPadVocabOptions po;
      po.multiple = o.padVocab;
      po.tp = o.tp;
      pm.addPass(createBigcPadVocab(po));
    }
    if (o.tp > 1) {
      BigcTensorParallelOptions to;
      to.tp = o.tp;
      to.ranks = o.ranks;
      to.sequenceParallel = o.sequenceParallel;
      pm.addPass(createBigcTensorParallel(to));
    }
    if (o.fuseLoss) {
      BigcFuseLossOptions fo;
      fo.chunk = o.lossChunk;
      pm.addPass(createBigcFuseLoss(fo));
    }
    if (o.tileBytes > 0) {
      BigcTileOptions to;
      to.maxBytes = o.tileBytes;
      to.elementBytes = o.precision == Precision::FP32 ? 4 : 2;
      pm.addPass(createBigcTile(to));
    }
    BigcAutodiffOptions ao;
    ao.lr = o.adamw.lr;
    ao.beta1 = o.adamw.beta1;
    ao.beta2 = o.adamw.beta2;
    ao.eps = o.adamw.eps;
    ao.weightDecay = o.adamw.weightDecay;
    ao.gradClip = o.adamw.gradClip;
    ao.optimizerStates = toString(o.adamw.states);
    pm.addPass(createBigcAutodiff(ao));
    return;
  }
  case TrainStage::Techniques: {
    // The single-device techniques, in the order of docs/architecture.md; each when its
    // option asks for it.
    if (o.precision != Precision::FP32) {
      BigcMixedPrecisionOptions mo;
      mo.precision = toString(o.precision);
      mo.lossScale = o.lossScaleInit;
      mo.growthInterval = o.lossScaleGrowthInterval;
      pm.addPass(createBigcMixedPrecision(mo));
    }
    if (o.microBatches > 1) {
      BigcGradAccumOptions go;
      go.microBatches = o.microBatches;
      pm.addPass(createBigcGradAccum(go));
    }
    // Pipeline stages: this module becomes stage ppStage (the driver builds one per stage).
    if (o.pp > 1) {
      BigcPipelineOptions po;
      po.stages = o.pp;
      po.stage = o.ppStage;
      po.schedule = toString(o.ppSchedule);
      po.virtualStages = virtualStagesOf(o);
      po.split = o.ppSplit;
      po.ranks = o.ranks;
      po.tp = o.tp;
      pm.addPass(createBigcPipeline(po));
    }
    // Always: with policy none it records the forward FLOPs for the program.
    {
      BigcRecomputeOptions ro;
      ro.policy = toString(o.recompute);
      ro.drop = o.recomputeDrop; // auto: chosen by the driver (-1: everything)
      pm.addPass(createBigcRecompute(ro));
    }
    // Always: it records the mesh; one rank changes nothing else.
    {
      BigcShardOptions so;
      so.ranks = o.ranks;
      so.zero = o.zero;
      so.bucketMb = o.bucketMb;
      pm.addPass(createBigcShard(so));
    }
    // Context parallelism: the attention over the whole sequence, once the mesh exists.
    if (o.cp > 1) pm.addPass(createBigcCpAttention());
    if (o.offload != Offload::None) {
      BigcOffloadOptions oo;
      oo.offload = "cpu";
      // Auto: the driver decides before the pipeline; the weights stay on the device otherwise.
      oo.params = o.offloadParams == OffloadParams::Host || o.offloadParams == OffloadParams::Nvme ? "host" : "device";
      pm.addPass(createBigcOffload(oo));
      // nvme: the optimizer's state then moves from the host to the nvme space (and the weights
      // with --offload-params nvme).
      if (o.offload == Offload::NVMe) {
        BigcOffloadNvmeOptions no;
        no.params = o.offloadParams == OffloadParams::Nvme;
        no.grads = o.offloadGrads == OffloadGrads::Nvme;
        no.gradsLimit = o.offloadGradsLimit;
        no.chunk = o.nvmeChunk;
        pm.addPass(createBigcOffloadNvme(no));
      }
    }
    if (o.offloadActivations) pm.addPass(createBigcOffloadActivations());
    return;
  }
  case TrainStage::Plan: {
    // Pairs of memory-bound ops fused, once every technique has placed its ops.
    if (o.fuse) pm.addPass(createBigcFuse());
    BigcScheduleOptions so;
    so.prefetch = o.prefetch;
    pm.addPass(createBigcSchedule(so));
    pm.addPass(createBigcMemoryPlan());
    return;
  }
  }
}

void buildTrainPipeline(OpPassManager &pm, const TrainPipelineConfig &c) {
  for (TrainStage s : {TrainStage::Model, TrainStage::Techniques, TrainStage::Plan}) buildTrainPipeline(pm, c, s);
}

namespace {

/// The options of `bigc-train-pipeline`: one pass option per entry of the option table
/// (bindTrainOptions, TrainOptions.h), named as `bigc compile`'s flags without the dashes, with the
/// table's defaults and help; the choices' names are choiceNames'.
struct TrainPipelineOptions : public PassPipelineOptions<TrainPipelineOptions> {
  TrainPipelineOptions() {
    TrainPipelineConfig defaults;
    Creator c{*this};
    bindTrainOptions(c, defaults);
  }
  /// The settings: each option's value into the field the table binds it to.
  TrainPipelineConfig config() const {
    TrainPipelineConfig out;
    Reader r{*this};
    bindTrainOptions(r, out);
    return out;
  }

private:
  template <typename T> using Opt = PassOptions::Option<T>;
  template <typename T> using ListOpt = PassOptions::ListOption<T>;
  std::vector<std::unique_ptr<llvm::cl::Option>> owned_;

  // Makes the options, in the table's order.
  struct Creator {
    TrainPipelineOptions &o;
    template <typename T> void option(const OptionInfo &info, T &field, const Check<T> &) {
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        o.owned_.push_back(std::make_unique<ListOpt<int64_t>>(o, info.name, llvm::cl::desc(info.help)));
      } else {
        auto opt = std::make_unique<Opt<T>>(o, info.name, llvm::cl::desc(info.help), llvm::cl::init(field));
        if constexpr (std::is_enum_v<T>)
          for (const auto &[value, name] : choiceNames<T>()) opt->getParser().addLiteralOption(name, value, name);
        o.owned_.push_back(std::move(opt));
      }
    }
  };
  // Reads them back, in the same order.
  struct Reader {
    const TrainPipelineOptions &o;
    size_t k = 0;
    template <typename T> void option(const OptionInfo &, T &field, const Check<T> &) {
      const llvm::cl::Option *opt = o.owned_[k++].get();
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        const auto &l = *static_cast<const ListOpt<int64_t> *>(opt);
        field.assign(l.begin(), l.end());
      } else {
        field = *static_cast<const Opt<T> *>(opt);
      }
    }
  };
};

} // namespace

void registerBigcTrainPipeline() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "bigc-train-pipeline", "What `bigc compile` runs between the model and the emitter (options named as its flags)",
      [](OpPassManager &pm, const TrainPipelineOptions &o) { buildTrainPipeline(pm, o.config()); });
}

} // namespace bigc
} // namespace mlir
