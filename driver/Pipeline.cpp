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
#include "bigc/Passes/TrainOptions.h"

#include "bigc/Analysis/StepSimulation.h"
#include "bigc/Emit/Emitter.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/TrainPipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "bigc/Format/validator.h"
#include "bigc/Format/verifier.h"
#include "bigc/Support/format.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <limits>

namespace bigc {

using format::UserError;

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

// The option table's values as bigc-opt spells them, in the table's order.
struct OptionText {
  std::vector<std::pair<std::string, std::string>> values; // name, value
  template <typename T> void option(const mlir::bigc::OptionInfo &info, T &field, const mlir::bigc::Check<T> &) {
    std::string v;
    if constexpr (std::is_same_v<T, bool>) {
      v = field ? "true" : "false";
    } else if constexpr (std::is_same_v<T, int64_t>) {
      v = std::to_string(field);
    } else if constexpr (std::is_same_v<T, double>) {
      char b[40]; // the shortest form that reads back as the same double
      for (int digits = 1; digits <= 17; ++digits) {
        std::snprintf(b, sizeof b, "%.*g", digits, field);
        if (std::strtod(b, nullptr) == field) break;
      }
      v = b;
    } else if constexpr (std::is_enum_v<T>) {
      v = mlir::bigc::toString(field);
    } else {
      for (size_t i = 0; i < field.size(); ++i) v += (i ? "," : "") + std::to_string(field[i]);
    }
    values.push_back({info.name, v});
  }
};

} // namespace

std::string reproduceCommand(const CompileOptions &o) {
  OptionText given, defaults;
  mlir::bigc::TrainPipelineConfig c = o, d;
  mlir::bigc::bindTrainOptions(given, c);
  mlir::bigc::bindTrainOptions(defaults, d);
  std::string opts;
  for (size_t i = 0; i < given.values.size(); ++i)
    if (given.values[i].second != defaults.values[i].second)
      opts += (opts.empty() ? "" : " ") + given.values[i].first + "=" + given.values[i].second;
  return "bigc-opt " + (o.input.empty() ? std::string("MODEL.mlir") : o.input) + " --bigc-train-pipeline=\"" + opts +
         "\"";
}

namespace {

// Techniques and plan on `module` (the model stage done), emitted, with the step estimate.
format::Program planAndEmit(mlir::ModuleOp module, const CompileOptions &o, std::string *finalIR) {
  using mlir::bigc::TrainStage;
  runStage(module, o, TrainStage::Techniques, "applying precision, accumulation, recomputation and offload");
  runStage(module, o, TrainStage::Plan, "scheduling or planning memory");
  if (finalIR) {
    llvm::raw_string_ostream os(*finalIR);
    if (o.pp > 1) os << "// pipeline stage " << o.ppStage << " of " << o.pp << "\n";
    os << "// reproduce: " << reproduceCommand(o) << "\n";
    module->print(os);
    os << "\n";
  }

  format::Program header; // what the module does not say
  header.producer = "bigc 0.1.0";
  header.source = o.input;
  header.optimizer.lr = o.adamw.lr;
  header.optimizer.beta1 = o.adamw.beta1;
  header.optimizer.beta2 = o.adamw.beta2;
  header.optimizer.eps = o.adamw.eps;
  header.optimizer.weightDecay = o.adamw.weightDecay;
  header.optimizer.gradClip = o.adamw.gradClip;
  header.optimizer.schedule = o.schedule;
  header.hardwareName = o.haveHardware ? o.hardware.name : (o.deviceCapacity > 0 ? "custom" : "none");
  header.deviceCapacityBytes = o.deviceCapacity;
  header.hostCapacityBytes = o.hostCapacity;
  header.nvmeCapacityBytes = o.offload == mlir::bigc::Offload::NVMe ? o.nvmeCapacity : 0;
  header.nvmePath = o.offload == mlir::bigc::Offload::NVMe ? o.nvmePath : std::string();
  header.deviceReserveBytes = o.deviceReserve;
  header.hostReserveBytes = o.hostReserve;
  header.deviceReserveParts = o.deviceReserveParts;
  header.initialWeights = o.initialWeights;
  header.initialWeightsBytes = o.initialWeightsBytes;
  header.initialNames = o.initialNames;
  header.initialBuffers = o.initialBuffers;
  // The model's names as its authors' tools read them (checked by checkInterface).
  if (auto d = module->getAttrOfType<mlir::DictionaryAttr>("bigc.aliases"))
    for (mlir::NamedAttribute e : d)
      for (mlir::Attribute x : llvm::cast<mlir::ArrayAttr>(e.getValue()))
        header.aliases[e.getName().str()].push_back(llvm::cast<mlir::StringAttr>(x).str());
  if (auto c = module->getAttrOfType<mlir::StringAttr>("bigc.hf_config")) header.hfConfig = c.str();
  if (auto c = module->getAttrOfType<mlir::StringAttr>("bigc.hf_prefix")) header.hfPrefix = c.str();
  format::Program program = emit::buildProgram(module, std::move(header));
  // The evaluation program: the step's own forward (phase forward, not recomputed in the backward),
  // run alone in the training plan's arenas (the validator checks that it reads nothing the
  // backward or the optimizer writes).
  // (Not the copies of activations to the host for the backward, --offload-activations: the
  // forward alone has no backward to keep them for.)
  for (size_t i = 0; i < program.instructions.size(); ++i)
    if (program.instructions[i].phase == "forward" && !program.instructions[i].recompute &&
        program.instructions[i].stream != "d2h")
      program.evalInstructions.push_back(int64_t(i));
  if (o.haveHardware) { // the step on the profile: time and the collectives hidden behind compute
    mlir::bigc::StepEstimate est = mlir::bigc::simulateStep(module, o.hardware);
    program.estimate.present = true;
    program.estimate.stepSeconds = est.stepSeconds;
    program.estimate.computeSeconds = est.computeSeconds;
    for (const auto &c : est.collectives)
      program.estimate.collectives.push_back({c.op, c.count, c.seconds, c.hiddenSeconds, c.queuedSeconds});
    for (const auto &t : est.ops)
      program.estimate.ops.push_back({t.op, t.stream, t.count, t.seconds, t.flops, t.bytes});
  }
  return program;
}

// The stages played together on the cost model (the compile's profile, else `cpu`): the step's
// time with the stages waiting for each other, the bubbles, the picture's stretches. Each stage's
// own estimate (when --hardware) gets the pipeline's step time.
void estimatePipeline(const std::vector<mlir::OwningOpRef<mlir::ModuleOp>> &stageModules, const CompileOptions &o,
                      format::Program &program) {
  const HardwareProfile hw = o.haveHardware ? o.hardware : loadHardware("cpu");
  std::vector<mlir::ModuleOp> mods;
  for (const auto &m : stageModules) mods.push_back(*m);
  mlir::bigc::PipelineEstimate pe = mlir::bigc::simulatePipeline(mods, hw);
  format::PipelineEstimate &out = program.pipelineEstimate;
  out.present = true;
  out.hardware = hw.name;
  out.stepSeconds = pe.stepSeconds;
  out.bubble = pe.bubble;
  out.busySeconds = pe.busySeconds;
  for (const auto &b : pe.blocks) out.blocks.push_back({b.stage, b.microBatch, b.kind, b.start, b.end});
  if (o.haveHardware)
    for (int64_t s = 0; s < o.pp; ++s) {
      format::StepEstimate &e = program.stageProgram(s).estimate;
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
  const int64_t chunks =
      o.pp * (o.ppSchedule == mlir::bigc::PpSchedule::Interleaved ? mlir::bigc::virtualStagesOf(o) : 1);
  if (chunks > layers)
    throw UserError(pp + " with --virtual-stages " + std::to_string(mlir::bigc::virtualStagesOf(o)) + ": " +
                    std::to_string(chunks) + " model chunks for the model's " + std::to_string(layers) +
                    " layers; use --virtual-stages " + std::to_string(std::max<int64_t>(1, layers / o.pp)) +
                    " or fewer");
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

// A pipeline's evaluation program: each stage's forward, and the messages it needs. A value that
// crosses stages may travel in a message the pipeline pass scheduled with the backward (a tied
// weight, the LM head's embedding, sent once a step): a recv whose value the forward reads joins
// the evaluation, and so does its send on the peer stage, until every stage's evaluation reads only
// what it writes, the weights and its inputs; a send of the forward whose recv no evaluation needs
// is left out.
void closeEvaluation(format::Program &program) {
  const int64_t P = std::max<int64_t>(1, program.pp);
  std::vector<std::vector<char>> in(static_cast<size_t>(P));
  for (int64_t s = 0; s < P; ++s) {
    const format::Program &sp = program.stageProgram(s);
    in[size_t(s)].assign(sp.instructions.size(), 0);
    for (int64_t i : sp.evalInstructions) in[size_t(s)][size_t(i)] = 1;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t s = 0; s < P; ++s) {
      const format::Program &sp = program.stageProgram(s);
      std::vector<int64_t> writer(sp.buffers.size(), -1); // the last instruction writing each buffer
      for (size_t i = 0; i < sp.instructions.size(); ++i) {
        const format::Instruction &ins = sp.instructions[i];
        if (in[size_t(s)][i])
          for (int64_t id : ins.in) {
            const int64_t w = writer[size_t(id)];
            if (w < 0 || in[size_t(s)][size_t(w)] || sp.instructions[size_t(w)].op != "recv") continue;
            const format::Instruction &recv = sp.instructions[size_t(w)];
            in[size_t(s)][size_t(w)] = 1, changed = true;
            const int64_t peer = int64_t(recv.num("peer", -1)), tag = int64_t(recv.num("tag", -1));
            if (peer < 0 || peer >= P) continue;
            const format::Program &pp = program.stageProgram(peer);
            for (size_t j = 0; j < pp.instructions.size(); ++j) {
              const format::Instruction &send = pp.instructions[j];
              if (send.op == "send" && int64_t(send.num("peer", -1)) == s && int64_t(send.num("tag", -1)) == tag)
                in[size_t(peer)][j] = 1;
            }
          }
        for (int64_t id : ins.out) writer[size_t(id)] = int64_t(i);
      }
    }
  }
  // A send whose recv the peer's evaluation does not need (a message of the backward that carries
  // a value of the forward) is not sent: nothing reads it.
  for (int64_t s = 0; s < P; ++s) {
    const format::Program &sp = program.stageProgram(s);
    for (size_t i = 0; i < sp.instructions.size(); ++i) {
      const format::Instruction &send = sp.instructions[i];
      if (!in[size_t(s)][i] || send.op != "send") continue;
      const int64_t peer = int64_t(send.num("peer", -1)), tag = int64_t(send.num("tag", -1));
      bool needed = false;
      if (peer >= 0 && peer < P) {
        const format::Program &pp = program.stageProgram(peer);
        for (size_t j = 0; j < pp.instructions.size(); ++j) {
          const format::Instruction &recv = pp.instructions[j];
          if (recv.op == "recv" && int64_t(recv.num("peer", -1)) == s && int64_t(recv.num("tag", -1)) == tag)
            needed = needed || in[size_t(peer)][j];
        }
      }
      if (!needed) in[size_t(s)][i] = 0;
    }
  }
  for (int64_t s = 0; s < P; ++s) {
    format::Program &sp = program.stageProgram(s);
    sp.evalInstructions.clear();
    for (size_t i = 0; i < sp.instructions.size(); ++i)
      if (in[size_t(s)][i]) sp.evalInstructions.push_back(int64_t(i));
  }
}

// Pipeline stages: one module per stage from the same training step (bigc-pipeline keeps stage s
// of it), each planned on its own; the file holds them all.
format::Program compileStages(mlir::ModuleOp module, const CompileOptions &o, std::string *finalIR) {
  format::Program program;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> stageModules;
  for (int64_t s = 0; s < o.pp; ++s) {
    stageModules.emplace_back(llvm::cast<mlir::ModuleOp>(module->clone()));
    CompileOptions so = o;
    so.ppStage = s;
    format::Program p = planAndEmit(*stageModules.back(), so, finalIR);
    if (s == 0)
      program = std::move(p);
    else
      program.stages.push_back(std::move(p));
  }
  // The config is the step's: the vocabulary of the embedding (stage 0) for every stage.
  for (format::Program &sp : program.stages) sp.vocab = program.vocab;
  closeEvaluation(program);
  // One format version for the file: 4 when any stage has a padded vocabulary.
  program.version = format::writtenVersion(program);
  for (format::Program &sp : program.stages) sp.version = program.version;
  estimatePipeline(stageModules, o, program);
  return program;
}

// One stage's device arena (0: no device space).
int64_t stageDeviceArena(const format::Program &stage) {
  const format::Space *d = stage.space("device");
  return d ? d->arenaBytes : 0;
}

// A split bounded by each stage's memory. The cost model's split balances time, but 1F1B keeps
// P - s micro-batches of activations on stage s (and the last stage holds the head), so the
// balanced split may leave a stage over the device while others have room (PipeDream bounds its
// partition by memory too). With real plans: a second compile with each stage's layer count one
// more or one fewer gives, per stage, its device arena and its busy time on the cost model as a
// base plus a cost per layer (the layers of a GPT or LLaMA are alike); a dynamic program over
// the layer counts then minimises the slowest stage with every stage's arena within the device,
// and the split it finds is compiled to be sure (a stage still over gets its bound lowered by
// the excess, up to three times). The result is the fitting program of the least step time on
// the cost model among those compiled, else the one with the smallest fullest stage. Not for a
// hand split, nor the interleaved schedule (its chunks share stages).
format::Program boundByMemory(mlir::ModuleOp module, const CompileOptions &o, format::Program program,
                              std::string *finalIR, std::vector<std::string> *notes) {
  const int64_t cap = o.deviceCapacity, P = o.pp;
  if (cap <= 0 || !o.ppSplit.empty() || o.ppSchedule == mlir::bigc::PpSchedule::Interleaved ||
      int64_t(program.ppSplit.size()) != P - 1 || fullestDeviceArena(program) <= cap ||
      int64_t(program.pipelineEstimate.busySeconds.size()) != P)
    return program;
  int64_t layers = 0;
  if (auto f = module.lookupSymbol<mlir::func::FuncOp>("train_step"))
    f.walk([&](mlir::Operation *op) { layers = std::max(layers, mlir::bigc::opLayer(op) + 1); });
  auto countsOf = [&](const std::vector<int64_t> &split) {
    std::vector<int64_t> n(static_cast<size_t>(P));
    for (int64_t s = 0; s < P; ++s)
      n[size_t(s)] = (s + 1 < P ? split[size_t(s)] : layers) - (s > 0 ? split[size_t(s - 1)] : 0);
    return n;
  };
  auto splitOf = [&](const std::vector<int64_t> &n) {
    std::vector<int64_t> split;
    for (int64_t s = 0, at = 0; s + 1 < P; ++s) split.push_back(at += n[size_t(s)]);
    return split;
  };
  auto splitStr = [](const std::vector<int64_t> &s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out;
  };
  struct Tried {
    format::Program program;
    std::string ir;
  };
  std::vector<Tried> tried;
  tried.reserve(8); // the balanced split, the probe, up to three more: references stay valid
  tried.push_back({std::move(program), finalIR ? *finalIR : std::string()});
  auto compileSplit = [&](const std::vector<int64_t> &split) -> const format::Program & {
    CompileOptions t = o;
    t.ppSplit = split;
    std::string ir;
    format::Program p = compileStages(module, t, finalIR ? &ir : nullptr);
    tried.push_back({std::move(p), std::move(ir)});
    return tried.back().program;
  };
  const format::Program &balanced = tried[0].program;
  const std::vector<int64_t> n0 = countsOf(balanced.ppSplit);
  // The probe: the first half of the stages one layer more, the last half one fewer (the middle
  // stage of an odd count as it is).
  std::vector<int64_t> n1 = n0;
  for (int64_t s = 0; s < P / 2; ++s) ++n1[size_t(s)], --n1[size_t(P - 1 - s)];
  bool probeOk = true;
  for (int64_t c : n1) probeOk = probeOk && c >= 1;
  if (probeOk) {
    const format::Program &probe = compileSplit(splitOf(n1));
    // Per stage: arena = aBase + n * aLayer, busy = tBase + n * tLayer.
    std::vector<double> aLayer(static_cast<size_t>(P)), tLayer(aLayer), aBase(aLayer), tBase(aLayer);
    for (int64_t s = 0; s < P; ++s)
      if (n1[size_t(s)] != n0[size_t(s)]) {
        const double dn = double(n1[size_t(s)] - n0[size_t(s)]);
        aLayer[size_t(s)] =
            double(stageDeviceArena(probe.stageProgram(s)) - stageDeviceArena(balanced.stageProgram(s))) / dn;
        tLayer[size_t(s)] =
            (probe.pipelineEstimate.busySeconds[size_t(s)] - balanced.pipelineEstimate.busySeconds[size_t(s)]) / dn;
      }
    if (P % 2 == 1) { // the middle stage: its neighbours' mean
      const size_t m = size_t(P / 2);
      aLayer[m] = (aLayer[m - 1] + aLayer[m + 1]) / 2, tLayer[m] = (tLayer[m - 1] + tLayer[m + 1]) / 2;
    }
    for (int64_t s = 0; s < P; ++s) {
      aBase[size_t(s)] = double(stageDeviceArena(balanced.stageProgram(s))) - double(n0[size_t(s)]) * aLayer[size_t(s)];
      tBase[size_t(s)] = balanced.pipelineEstimate.busySeconds[size_t(s)] - double(n0[size_t(s)]) * tLayer[size_t(s)];
    }
    std::vector<double> bound(static_cast<size_t>(P), double(cap));
    for (int round = 0; round < 3; ++round) {
      // best[s][j]: the slowest of stages 0..s-1 covering layers [0, j), every arena within its bound.
      const double inf = std::numeric_limits<double>::infinity();
      std::vector<std::vector<double>> best(size_t(P) + 1, std::vector<double>(size_t(layers) + 1, inf));
      std::vector<std::vector<int64_t>> from(size_t(P) + 1, std::vector<int64_t>(size_t(layers) + 1, -1));
      best[0][0] = 0;
      for (int64_t s = 1; s <= P; ++s)
        for (int64_t j = s; j <= layers; ++j)
          for (int64_t i = s - 1; i < j; ++i) {
            if (best[size_t(s - 1)][size_t(i)] == inf) continue;
            const double n = double(j - i);
            if (aBase[size_t(s - 1)] + n * aLayer[size_t(s - 1)] > bound[size_t(s - 1)]) continue;
            const double t = std::max(best[size_t(s - 1)][size_t(i)], tBase[size_t(s - 1)] + n * tLayer[size_t(s - 1)]);
            if (t < best[size_t(s)][size_t(j)]) best[size_t(s)][size_t(j)] = t, from[size_t(s)][size_t(j)] = i;
          }
      if (best[size_t(P)][size_t(layers)] == inf) break; // no split fits on the model
      std::vector<int64_t> n(static_cast<size_t>(P));
      for (int64_t s = P, j = layers; s > 0; --s) {
        const int64_t i = from[size_t(s)][size_t(j)];
        n[size_t(s - 1)] = j - i, j = i;
      }
      const std::vector<int64_t> split = splitOf(n);
      bool seen = false;
      for (const Tried &t : tried) seen = seen || t.program.ppSplit == split;
      if (seen) break;
      const format::Program &p = compileSplit(split);
      if (fullestDeviceArena(p) <= cap) break;
      for (int64_t s = 0; s < P; ++s) // a stage over: its bound lowered by the excess
        if (stageDeviceArena(p.stageProgram(s)) > cap)
          bound[size_t(s)] -= double(stageDeviceArena(p.stageProgram(s)) - cap);
    }
  }
  // The fitting program of the least step on the cost model, else the smallest fullest stage.
  size_t pick = 0;
  auto better = [&](const format::Program &a, const format::Program &b) {
    const bool fa = fullestDeviceArena(a) <= cap, fb = fullestDeviceArena(b) <= cap;
    if (fa != fb) return fa;
    return fa ? a.pipelineEstimate.stepSeconds < b.pipelineEstimate.stepSeconds
              : fullestDeviceArena(a) < fullestDeviceArena(b);
  };
  for (size_t i = 1; i < tried.size(); ++i)
    if (better(tried[i].program, tried[pick].program)) pick = i;
  if (pick == 0) return std::move(tried[0].program);
  if (finalIR) *finalIR = tried[pick].ir;
  if (notes) {
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "--pp %lld: split %s by memory instead of the time-balanced %s (its fullest stage %.2f MiB over the "
                  "device's %.2f MiB): fullest stage %.2f MiB, step on the cost model %.3g ms instead of %.3g ms "
                  "(%zu splits compiled)",
                  (long long)P, splitStr(tried[pick].program.ppSplit).c_str(), splitStr(balanced.ppSplit).c_str(),
                  double(fullestDeviceArena(balanced)) / 1048576.0, double(cap) / 1048576.0,
                  double(fullestDeviceArena(tried[pick].program)) / 1048576.0,
                  1e3 * tried[pick].program.pipelineEstimate.stepSeconds, 1e3 * balanced.pipelineEstimate.stepSeconds,
                  tried.size());
    notes->push_back(buf);
  }
  return std::move(tried[pick].program);
}

} // namespace

int64_t fullestDeviceArena(const format::Program &p) {
  int64_t most = 0;
  for (int64_t s = 0; s < std::max<int64_t>(1, p.pp); ++s) most = std::max(most, stageDeviceArena(p.stageProgram(s)));
  return most;
}

format::Program compileToProgram(mlir::ModuleOp parsed, const CompileOptions &o, std::string *finalIR,
                                 std::vector<std::string> *notes) {
  mlir::OwningOpRef<mlir::ModuleOp> owned(llvm::cast<mlir::ModuleOp>(parsed->clone()));
  mlir::ModuleOp module = *owned;
  runStage(module, o, mlir::bigc::TrainStage::Model, "build the training step");
  if (o.pp > 1) checkPipeline(module, o);
  if (auto tiled = module->getAttrOfType<mlir::DictionaryAttr>(mlir::bigc::kTiledAttrName); tiled && notes) {
    // --tile-linear: what bigc-tile did, and the large weights it left whole.
    auto num = [&](const char *k) { return tiled.getAs<mlir::IntegerAttr>(k).getInt(); };
    std::string note = "--tile-linear " + humanBytes(o.tileBytes) + ": " + std::to_string(num("weights")) +
                       " linear weight(s) used as row tiles (up to " + std::to_string(num("tiles")) + " each)";
    std::string whole;
    for (mlir::Attribute n : tiled.getAs<mlir::ArrayAttr>("untiled"))
      whole += (whole.empty() ? "" : ", ") + llvm::cast<mlir::StringAttr>(n).getValue().str();
    if (!whole.empty()) note += "; left whole, as something other than a linear layer reads them: " + whole;
    notes->push_back(note);
  }
  try {
    format::Program program;
    if (o.pp <= 1) {
      program = planAndEmit(module, o, finalIR);
    } else {
      std::string ir;
      program =
          boundByMemory(module, o, compileStages(module, o, finalIR ? &ir : nullptr), finalIR ? &ir : nullptr, notes);
      if (finalIR) *finalIR += ir;
    }
    format::validateProgram(program, o.output);
    std::vector<std::string> issues = format::verifyPlan(program, 3);
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
