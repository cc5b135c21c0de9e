//===- TrainPipeline.cpp - the pipeline of `bigc compile` -----------------===//
//
// See include/bigc/Passes/TrainPipeline.h. One function adds the passes;
// `bigc compile` (lib/driver/Pipeline.cpp) and `bigc-opt
// --bigc-train-pipeline` both call it, so they run the same passes.
//
//===----------------------------------------------------------------------===//

#include "bigc/Passes/TrainPipeline.h"
#include "bigc/Passes/Passes.h"

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

void buildTrainPipeline(OpPassManager &pm, const TrainPipelineConfig &o, TrainStage stage) {
  switch (stage) {
  case TrainStage::Model: {
    // The vocabulary padded (before tensor parallelism splits it), tensor parallelism (on the
    // forward), then backward + optimizer.
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
    BigcAutodiffOptions ao;
    ao.lr = o.adamw.lr;
    ao.beta1 = o.adamw.beta1;
    ao.beta2 = o.adamw.beta2;
    ao.eps = o.adamw.eps;
    ao.weightDecay = o.adamw.weightDecay;
    ao.gradClip = o.adamw.gradClip;
    ao.optimizerStates = o.adamw.bf16States ? "bf16" : "fp32";
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
      po.virtualStages = o.virtualStages;
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
        no.chunk = o.nvmeChunk;
        pm.addPass(createBigcOffloadNvme(no));
      }
    }
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

/// The options of `bigc-train-pipeline`, named as `bigc compile`'s flags
/// (without the dashes); the driver's choices (recompute-drop for
/// --recompute auto, offload-params for --offload cpu) are explicit here.
struct TrainPipelineOptions : public PassPipelineOptions<TrainPipelineOptions> {
  Option<int64_t> ranks{*this, "ranks", llvm::cl::desc("All ranks (dp x tp)"), llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero", llvm::cl::desc("ZeRO stage over the data-parallel ranks"), llvm::cl::init(0)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel ranks"), llvm::cl::init(1)};
  Option<bool> sequenceParallel{*this, "sequence-parallel", llvm::cl::desc("With tp: Megatron sequence parallelism"),
                                llvm::cl::init(false)};
  Option<int64_t> padVocab{*this, "pad-vocab",
                           llvm::cl::desc("Pad the vocabulary to a multiple of this x tp (0: no padding)"),
                           llvm::cl::init(0)};
  Option<bool> fuseLoss{*this, "fuse-loss",
                        llvm::cl::desc("The LM head and the cross-entropy fused, the logits never stored"),
                        llvm::cl::init(false)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Residual add + norm, bias + GELU and their gradients fused (bigc-fuse)"),
                    llvm::cl::init(false)};
  Option<int64_t> lossChunk{*this, "loss-chunk", llvm::cl::desc("fuse-loss: vocabulary columns per chunk (0: picked)"),
                            llvm::cl::init(0)};
  Option<double> bucketMb{*this, "bucket-mb", llvm::cl::desc("Largest merged collective in MiB"), llvm::cl::init(25)};
  Option<Precision> precision{*this, "precision", llvm::cl::desc("Compute precision"), llvm::cl::init(Precision::FP32),
                              llvm::cl::values(clEnumValN(Precision::FP32, "fp32", "fp32"),
                                               clEnumValN(Precision::BF16, "bf16", "bf16"),
                                               clEnumValN(Precision::FP16, "fp16", "fp16"))};
  Option<double> lossScale{*this, "loss-scale", llvm::cl::desc("fp16: initial dynamic loss scale"),
                           llvm::cl::init(65536.0)};
  Option<int64_t> lossScaleWindow{*this, "loss-scale-window",
                                  llvm::cl::desc("fp16: clean steps before the loss scale doubles"),
                                  llvm::cl::init(2000)};
  Option<int64_t> microBatches{*this, "micro-batches", llvm::cl::desc("Micro-batches per update"), llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline stages"), llvm::cl::init(1)};
  Option<PpSchedule> ppSchedule{*this, "pp-schedule", llvm::cl::desc("Pipeline schedule"),
                                llvm::cl::init(PpSchedule::OneFOneB),
                                llvm::cl::values(clEnumValN(PpSchedule::GPipe, "gpipe", "gpipe"),
                                                 clEnumValN(PpSchedule::OneFOneB, "1f1b", "1f1b"),
                                                 clEnumValN(PpSchedule::Interleaved, "interleaved", "interleaved"),
                                                 clEnumValN(PpSchedule::ZeroBubble, "zero-bubble", "zero-bubble"))};
  Option<int64_t> virtualStages{*this, "virtual-stages", llvm::cl::desc("Interleaved: model chunks per stage"),
                                llvm::cl::init(1)};
  ListOption<int64_t> ppSplit{*this, "pp-split", llvm::cl::desc("First layer of each stage after the first")};
  Option<int64_t> ppStage{*this, "pp-stage", llvm::cl::desc("The pipeline stage this module becomes"),
                          llvm::cl::init(0)};
  Option<RecomputePolicy> recompute{*this, "recompute", llvm::cl::desc("Recomputation policy"),
                                    llvm::cl::init(RecomputePolicy::None),
                                    llvm::cl::values(clEnumValN(RecomputePolicy::None, "none", "none"),
                                                     clEnumValN(RecomputePolicy::Full, "full", "full"),
                                                     clEnumValN(RecomputePolicy::Selective, "selective", "selective"),
                                                     clEnumValN(RecomputePolicy::Auto, "auto", "auto"))};
  Option<int64_t> recomputeDrop{*this, "recompute-drop",
                                llvm::cl::desc("recompute=auto: ranked candidates recomputed (-1: all)"),
                                llvm::cl::init(-1)};
  Option<Offload> offload{*this, "offload", llvm::cl::desc("Offload"), llvm::cl::init(Offload::None),
                          llvm::cl::values(clEnumValN(Offload::None, "none", "none"),
                                           clEnumValN(Offload::CPU, "cpu", "cpu"),
                                           clEnumValN(Offload::NVMe, "nvme", "nvme"))};
  Option<OffloadParams> offloadParams{*this, "offload-params",
                                      llvm::cl::desc("offload: where the weights live between uses"),
                                      llvm::cl::init(OffloadParams::Device),
                                      llvm::cl::values(clEnumValN(OffloadParams::Device, "device", "device"),
                                                       clEnumValN(OffloadParams::Host, "host", "host"),
                                                       clEnumValN(OffloadParams::Nvme, "nvme", "nvme"))};
  Option<int64_t> prefetch{*this, "prefetch", llvm::cl::desc("ZeRO-3: layers an all-gather runs ahead"),
                           llvm::cl::init(1)};
  Option<int64_t> nvmeChunk{*this, "nvme-chunk",
                            llvm::cl::desc("offload=nvme: elements per chunk of a streamed update (0: none)"),
                            llvm::cl::init(int64_t(1) << 24)};
  Option<double> lr{*this, "lr", llvm::cl::desc("AdamW learning rate"), llvm::cl::init(3e-4)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"), llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"), llvm::cl::init(0.95)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"), llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("AdamW weight decay"), llvm::cl::init(0.1)};
  Option<double> gradClip{*this, "grad-clip", llvm::cl::desc("Global gradient norm clip (0: none)"),
                          llvm::cl::init(0.0)};

  TrainPipelineConfig config() const {
    TrainPipelineConfig c;
    c.adamw = {lr, beta1, beta2, eps, weightDecay, gradClip};
    c.ranks = ranks;
    c.zero = zero;
    c.tp = tp;
    c.sequenceParallel = sequenceParallel;
    c.padVocab = padVocab;
    c.fuseLoss = fuseLoss;
    c.fuse = fuse;
    c.lossChunk = lossChunk;
    c.bucketMb = bucketMb;
    c.precision = precision;
    c.lossScaleInit = lossScale;
    c.lossScaleGrowthInterval = lossScaleWindow;
    c.microBatches = microBatches;
    c.pp = pp;
    c.ppSchedule = ppSchedule;
    c.virtualStages = virtualStages;
    c.ppSplit.assign(ppSplit.begin(), ppSplit.end());
    c.ppStage = ppStage;
    c.recompute = recompute;
    c.recomputeDrop = recomputeDrop;
    c.offload = offload;
    c.offloadParams = offloadParams;
    c.prefetch = prefetch;
    c.nvmeChunk = nvmeChunk;
    return c;
  }
};

} // namespace

void registerBigcTrainPipeline() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "bigc-train-pipeline", "What `bigc compile` runs between the model and the emitter (options named as its flags)",
      [](OpPassManager &pm, const TrainPipelineOptions &o) { buildTrainPipeline(pm, o.config()); });
}

} // namespace bigc
} // namespace mlir
