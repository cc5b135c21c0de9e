//===- Pipeline.cpp - compileToProgram: the passes, the emitter, the checks -===//
//
// One compile of a parsed model with one option set: the passes of
// mlir::bigc::buildTrainPipeline (the same that `bigc-opt --bigc-train-pipeline`
// runs) in three pass managers, so that a failure is named as the model's
// (tensor parallelism, backward) or the compiler's (everything after), then
// the emitter, the step estimate, the program's validation and the plan
// verifier. See include/bigc/Driver/Compile.h.
//
//===----------------------------------------------------------------------===//

#include "bigc/Driver/Compile.h"

#include "bigc/Analysis/StepSimulation.h"
#include "bigc/Emit/Emitter.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/TrainPipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "bigc/Runtime/verifier.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

namespace bigc {

using rt::UserError;

namespace {

void runStage(mlir::ModuleOp m, const CompileOptions &o, mlir::bigc::TrainStage stage, const char *what) {
  mlir::PassManager pm(m.getContext());
  mlir::bigc::buildTrainPipeline(pm, o, stage);
  if (mlir::succeeded(pm.run(m))) return;
  // Tensor parallelism and the backward fail on the model (a size the tensor ranks do not
  // divide, a non-differentiable op, ...); everything after is the compiler's.
  if (stage == mlir::bigc::TrainStage::Model)
    throw UserError(std::string("cannot ") + what + " (errors above); nothing written");
  throw InternalError(std::string("internal error while ") + what + " (errors above; please report it)");
}

} // namespace

namespace {

// Techniques and plan on `module` (the model stage done), emitted, with the step estimate.
rt::Program planAndEmit(mlir::ModuleOp module, const CompileOptions &o, std::string *finalIR) {
  using mlir::bigc::TrainStage;
  runStage(module, o, TrainStage::Techniques, "applying precision, accumulation, recomputation and offload");
  runStage(module, o, TrainStage::Plan, "scheduling or planning memory");
  if (finalIR) {
    llvm::raw_string_ostream os(*finalIR);
    if (o.pp > 1) os << "// pipeline stage " << o.ppStage << " of " << o.pp << "\n";
    module->print(os);
    os << "\n";
  }

  rt::Program header; // what the module does not say
  header.producer = "bigc 0.1.0";
  header.source = o.input;
  header.optimizer.lr = o.adamw.lr;
  header.optimizer.beta1 = o.adamw.beta1;
  header.optimizer.beta2 = o.adamw.beta2;
  header.optimizer.eps = o.adamw.eps;
  header.optimizer.weightDecay = o.adamw.weightDecay;
  header.optimizer.gradClip = o.adamw.gradClip;
  header.hardwareName = o.haveHardware ? o.hardware.name : (o.deviceCapacity > 0 ? "custom" : "none");
  header.deviceCapacityBytes = o.deviceCapacity;
  header.hostCapacityBytes = o.hostCapacity;
  header.deviceReserveBytes = o.deviceReserve;
  header.hostReserveBytes = o.hostReserve;
  header.deviceReserveParts = o.deviceReserveParts;
  header.initialWeights = o.initialWeights;
  header.initialWeightsBytes = o.initialWeightsBytes;
  rt::Program program = emit::buildProgram(module, std::move(header));
  if (o.haveHardware) { // the step on the profile: time and the collectives hidden behind compute
    mlir::bigc::StepEstimate est = mlir::bigc::simulateStep(module, o.hardware);
    program.estimate.present = true;
    program.estimate.stepSeconds = est.stepSeconds;
    program.estimate.computeSeconds = est.computeSeconds;
    for (const auto &c : est.collectives)
      program.estimate.collectives.push_back({c.op, c.count, c.seconds, c.hiddenSeconds, c.queuedSeconds});
  }
  return program;
}

// The stages played together on the cost model (the compile's profile, else `cpu`): the step's
// time with the stages waiting for each other, the bubbles, the picture's stretches. Each stage's
// own estimate (when --hardware) gets the pipeline's step time.
void estimatePipeline(const std::vector<mlir::OwningOpRef<mlir::ModuleOp>> &stageModules, const CompileOptions &o,
                      rt::Program &program) {
  const HardwareProfile hw = o.haveHardware ? o.hardware : loadHardware("cpu");
  std::vector<mlir::ModuleOp> mods;
  for (const auto &m : stageModules) mods.push_back(*m);
  mlir::bigc::PipelineEstimate pe = mlir::bigc::simulatePipeline(mods, hw);
  rt::PipelineEstimate &out = program.pipelineEstimate;
  out.present = true;
  out.hardware = hw.name;
  out.stepSeconds = pe.stepSeconds;
  out.bubble = pe.bubble;
  out.busySeconds = pe.busySeconds;
  for (const auto &b : pe.blocks) out.blocks.push_back({b.stage, b.microBatch, b.kind, b.start, b.end});
  if (o.haveHardware)
    for (int64_t s = 0; s < o.pp; ++s) {
      rt::StepEstimate &e = program.stageProgram(s).estimate;
      e.stepSeconds = pe.stepSeconds;
      e.collectives.clear();
      for (const auto &c : pe.stages[size_t(s)].collectives)
        e.collectives.push_back({c.op, c.count, c.seconds, c.hiddenSeconds, c.queuedSeconds});
    }
}

// The pipeline's options against the model (bigc-pipeline checks them too, as the compiler's
// errors): at least one layer per stage, a split within the layers.
void checkPipeline(mlir::ModuleOp module, const CompileOptions &o) {
  int64_t layers = 0;
  if (auto f = module.lookupSymbol<mlir::func::FuncOp>("train_step"))
    f.walk([&](mlir::Operation *op) { layers = std::max(layers, mlir::bigc::opLayer(op) + 1); });
  const std::string pp = "option --pp " + std::to_string(o.pp);
  if (layers == 0)
    throw UserError(pp + ": the model marks no layers (bigc.layer on its ops: bigc gen and bigc import write them), "
                         "so there is nothing to split into stages");
  if (o.pp > layers)
    throw UserError(pp + ": more stages than the model's " + std::to_string(layers) + " layers; use --pp " +
                    std::to_string(layers) + " or fewer");
  const int64_t chunks = o.pp * (o.ppSchedule == mlir::bigc::PpSchedule::Interleaved ? o.virtualStages : 1);
  if (chunks > layers)
    throw UserError(pp + " with --virtual-stages " + std::to_string(o.virtualStages) + ": " + std::to_string(chunks) +
                    " model chunks for the model's " + std::to_string(layers) + " layers; use --virtual-stages " +
                    std::to_string(std::max<int64_t>(1, layers / o.pp)) + " or fewer");
  if (!o.ppSplit.empty() && chunks > o.pp) {
    if (int64_t(o.ppSplit.size()) != chunks - 1)
      throw UserError("option --pp-split: with --virtual-stages, give the first layer of each of the " +
                      std::to_string(chunks) + " model chunks after the first (" + std::to_string(chunks - 1) +
                      " increasing numbers within 1.." + std::to_string(layers - 1) + ")");
    for (size_t i = 0; i < o.ppSplit.size(); ++i)
      if (o.ppSplit[i] <= (i ? o.ppSplit[i - 1] : 0) || o.ppSplit[i] >= layers)
        throw UserError("option --pp-split: " + std::to_string(chunks - 1) + " increasing numbers within 1.." +
                        std::to_string(layers - 1));
  } else if (!o.ppSplit.empty()) {
    std::string given, example;
    for (size_t i = 0; i < o.ppSplit.size(); ++i) given += (i ? "," : "") + std::to_string(o.ppSplit[i]);
    for (int64_t s = 1; s < o.pp; ++s) example += (s > 1 ? "," : "") + std::to_string(s * layers / o.pp);
    bool ok = int64_t(o.ppSplit.size()) == o.pp - 1;
    for (size_t i = 0; ok && i < o.ppSplit.size(); ++i)
      ok = o.ppSplit[i] > (i ? o.ppSplit[i - 1] : 0) && o.ppSplit[i] < layers;
    if (!ok)
      throw UserError("option --pp-split " + given + ": give the first layer of each stage after the first, " +
                      std::to_string(o.pp - 1) + " increasing numbers within 1.." + std::to_string(layers - 1) +
                      " (the model has " + std::to_string(layers) + " layers), e.g. --pp-split " + example);
  }
}

} // namespace

rt::Program compileToProgram(mlir::ModuleOp parsed, const CompileOptions &o, std::string *finalIR) {
  mlir::OwningOpRef<mlir::ModuleOp> owned(llvm::cast<mlir::ModuleOp>(parsed->clone()));
  mlir::ModuleOp module = *owned;
  runStage(module, o, mlir::bigc::TrainStage::Model, "build the training step");
  if (o.pp > 1) checkPipeline(module, o);
  try {
    rt::Program program;
    if (o.pp <= 1) {
      program = planAndEmit(module, o, finalIR);
    } else {
      // Pipeline stages: one module per stage from the same training step (bigc-pipeline keeps
      // stage s of it), each planned on its own; the file holds them all.
      std::vector<mlir::OwningOpRef<mlir::ModuleOp>> stageModules;
      for (int64_t s = 0; s < o.pp; ++s) {
        stageModules.emplace_back(llvm::cast<mlir::ModuleOp>(module->clone()));
        CompileOptions so = o;
        so.ppStage = s;
        rt::Program p = planAndEmit(*stageModules.back(), so, finalIR);
        if (s == 0)
          program = std::move(p);
        else
          program.stages.push_back(std::move(p));
      }
      // The config is the step's: the vocabulary of the embedding (stage 0) for every stage.
      for (rt::Program &sp : program.stages) sp.vocab = program.vocab;
      estimatePipeline(stageModules, o, program);
    }
    rt::validateProgram(program, o.output);
    std::vector<std::string> issues = rt::verifyPlan(program, 3);
    if (!issues.empty()) {
      std::string msg = "internal error: the plan verifier found the emitted program unsafe: " + issues[0];
      for (size_t i = 1; i < issues.size(); ++i) msg += "; " + issues[i];
      throw InternalError(msg + " (please report it)");
    }
    return program;
  } catch (const emit::EmitError &e) {
    throw InternalError(std::string("internal error: ") + e.what() + " (please report it)");
  } catch (const UserError &e) {
    throw InternalError(std::string("internal error: the emitted program is invalid: ") + e.what() +
                        " (please report it)");
  }
}

} // namespace bigc
