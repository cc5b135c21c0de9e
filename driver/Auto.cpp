//===- Auto.cpp - bigc compile --auto -----------------------------------===//
//
// See include/bigc/Driver/Auto.h. The search, in order:
//   1. the model's facts (parameters, layers, heads, batch) and the global batch (the user's
//      command line's: data-parallel ranks x micro-batches x the model's batch, or --global-batch);
//   2. the meshes: tp in 1, 2, 4, 8 (dividing the ranks, every attention's heads, within one
//      machine; a vocabulary tp does not divide padded with --pad-vocab 64), pp in 1, 2, 4, 8
//      (dividing what is left, at most the layers); the micro-batches follow from the global
//      batch (pp > 1: at least pp of them);
//   3. per mesh and ZeRO stage (0-3 with several data-parallel ranks), the techniques cheapest
//      first: nothing, selective recomputation, the fused LM head and loss (--fuse-loss, with
//      each), full recomputation (and fused), the same with offload to the host, to the drive;
//      a configuration whose model state alone exceeds the device or
//      the host (a lower bound from the parameter count) is ruled out uncompiled; the first that
//      compiles and fits ends that mesh and stage (each later one adds work);
//   4. the fitting plans ranked by the cost model's step time.
//
//===----------------------------------------------------------------------===//

#include "bigc/Driver/Auto.h"
#include "bigc/Passes/TrainOptions.h"
#include "bigc/Format/verifier.h"
#include "bigc/Driver/Capacity.h"
#include "bigc/Passes/Passes.h"

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Support/format.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <limits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <sstream>

namespace bigc {

namespace {

using format::UserError;
using mlir::bigc::Offload;
using mlir::bigc::OffloadGrads;
using mlir::bigc::OffloadParams;
using mlir::bigc::OptimizerStates;
using mlir::bigc::PpSchedule;
using mlir::bigc::Precision;
using mlir::bigc::RecomputePolicy;
using mlir::bigc::toString;

struct ModelFacts {
  int64_t params = 0; // elements of the model's weights
  int64_t layers = 0;
  int64_t headsGcd = 0;      // of every attention's heads (and kv heads)
  int64_t batch = 0;         // the model's batch (per micro-batch and data-parallel rank)
  int64_t vocab = 0;         // the classes of its cross-entropy (0: none)
  int64_t seq = 0;           // the tokens of a sequence
  bool gqa = false;          // grouped-query attention (what --cp splits)
  int64_t largestMatrix = 0; // elements of its largest 2-D weight (what --tile-linear would split)
};

ModelFacts factsOf(mlir::ModuleOp m) {
  ModelFacts f;
  m.walk([&](mlir::Operation *op) {
    if (auto p = llvm::dyn_cast<mlir::bigc::ParamOp>(op)) {
      if (auto t = llvm::dyn_cast<mlir::RankedTensorType>(p.getType())) {
        f.params += t.getNumElements();
        if (t.getRank() == 2) f.largestMatrix = std::max(f.largestMatrix, t.getNumElements());
      }
    }
    if (auto l = op->getAttrOfType<mlir::IntegerAttr>(mlir::bigc::kLayerAttrName))
      f.layers = std::max<int64_t>(f.layers, l.getInt() + 1);
    for (const char *a : {"heads", "kv_heads"})
      if (auto h = op->getAttrOfType<mlir::IntegerAttr>(a)) f.headsGcd = std::gcd(f.headsGcd, h.getInt());
    f.gqa |= llvm::isa<mlir::bigc::GqaAttentionOp>(op);
    if (auto ce = llvm::dyn_cast<mlir::bigc::CrossEntropyOp>(op))
      f.vocab = llvm::cast<mlir::RankedTensorType>(ce.getLogits().getType()).getShape().back();
  });
  if (auto fwd = m.lookupSymbol<mlir::func::FuncOp>("forward"))
    if (fwd.getNumArguments() > 0)
      if (auto t = llvm::dyn_cast<mlir::RankedTensorType>(fwd.getFunctionType().getInput(0)); t && t.getRank() > 0) {
        f.batch = t.getDimSize(0);
        if (t.getRank() > 1) f.seq = t.getDimSize(1);
      }
  return f;
}

// The model cut to its first k layers (ops tagged bigc.layer >= k removed, the head fed from layer
// k-1's output, the removed layers' weights undeclared): a proxy whose plan is compiled in a
// fraction of the time. Null when the model is not a chain of layers (one value between
// consecutive layers, one from the last layer into the head).
mlir::OwningOpRef<mlir::ModuleOp> truncated(mlir::ModuleOp parsed, int64_t k, int64_t layers) {
  mlir::OwningOpRef<mlir::ModuleOp> owned(llvm::cast<mlir::ModuleOp>(parsed->clone()));
  auto fwd = owned->lookupSymbol<mlir::func::FuncOp>("forward");
  if (!fwd || fwd.isExternal()) return nullptr;
  auto layerOf = [](mlir::Operation *op) -> int64_t {
    auto l = op->getAttrOfType<mlir::IntegerAttr>(mlir::bigc::kLayerAttrName);
    return l ? l.getInt() : -1;
  };
  // The one value crossing from layer `from` into ops accepted by `into`.
  auto crossing = [&](int64_t from, auto into) -> mlir::Value {
    mlir::Value found;
    for (mlir::Operation &op : fwd.getBody().front())
      if (layerOf(&op) == from)
        for (mlir::Value v : op.getResults())
          for (mlir::Operation *u : v.getUsers())
            if (into(u)) {
              if (found && found != v) return nullptr;
              found = v;
            }
    return found;
  };
  mlir::Value boundary = crossing(k - 1, [&](mlir::Operation *u) { return layerOf(u) == k; });
  mlir::Value last = crossing(layers - 1, [&](mlir::Operation *u) { return layerOf(u) < 0; });
  if (!boundary || !last) return nullptr;
  last.replaceUsesWithIf(boundary, [&](mlir::OpOperand &use) { return layerOf(use.getOwner()) < 0; });
  std::vector<mlir::Operation *> dead;
  for (mlir::Operation &op : fwd.getBody().front())
    if (layerOf(&op) >= k) dead.push_back(&op);
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
    if (!(*it)->use_empty()) return nullptr; // a later layer's value used outside the cut
    (*it)->erase();
  }
  // The parameters no op refers to any more: every symbol use collected in one walk (asking each
  // parameter's uses walked the whole module once per parameter: 40% of gpt2-xl's search).
  llvm::DenseSet<mlir::StringAttr> used;
  owned->walk([&](mlir::Operation *op) {
    if (!mlir::isa<mlir::bigc::ParamOp>(op))
      op->getAttrDictionary().walk([&](mlir::SymbolRefAttr r) { used.insert(r.getRootReference()); });
  });
  std::vector<mlir::Operation *> unused;
  for (auto p : owned->getOps<mlir::bigc::ParamOp>())
    if (!used.contains(p.getSymNameAttr())) unused.push_back(p.getOperation());
  for (mlir::Operation *p : unused) p->erase();
  return owned;
}

double stepOf(const format::Program &p) {
  if (p.pp > 1 && p.pipelineEstimate.present) return p.pipelineEstimate.stepSeconds;
  return p.estimate.stepSeconds;
}

// The least bytes of model state per rank on the device and per machine on the host that a
// configuration needs whatever the schedule (weights, gradients, fp32 masters and AdamW moments,
// divided by what shards them): below what any compiled plan holds, so ruling out by it is safe.
struct StateBound {
  int64_t device = 0, host = 0, nvme = 0;
};
StateBound stateBound(const ModelFacts &m, const CompileOptions &c) {
  const bool half = c.precision != Precision::FP32;
  const double P = double(m.params) / double(c.tp * c.pp); // the average stage's share of a tensor rank
  const double dp = double(std::max<int64_t>(1, c.ranks / (c.tp * c.pp)));
  const double weight = half ? 2 : 4, grad = half ? 2 : 4, master = half ? 4 : 0;
  const double moments = c.adamw.bf16States() ? 4 : 8;
  const double optShard = c.zero >= 1 ? dp : 1, gradShard = c.zero >= 2 ? dp : 1, wShard = c.zero >= 3 ? dp : 1;
  StateBound b;
  const double opt = P * (master + moments) / optShard;
  if (c.offload == Offload::None) {
    b.device = int64_t(P * (weight / wShard + grad / gradShard) + opt);
  } else {
    // The optimizer's state off the device; the weights too where they may leave it (ZeRO 0 and 3
    // with --offload-params auto), the gradients streamed out.
    const bool weightsStay = c.zero == 1 || c.zero == 2;
    b.device = weightsStay ? int64_t(P * weight) : 0;
    const double ranksPerMachine = std::min<double>(double(c.ranks), double(std::max<int64_t>(1, c.hardware.devices)));
    (c.offload == Offload::CPU ? b.host : b.nvme) = int64_t(opt * ranksPerMachine);
  }
  return b;
}

std::string gib(int64_t b) { return humanBytes(b); }

std::string ms(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, s < 1.0 ? "%.1f ms" : "%.2f s", s < 1.0 ? s * 1e3 : s);
  return buf;
}

// The technique flags of a configuration, as a user writes them (those at their defaults left out).
std::string techniqueFlags(const CompileOptions &c, const CompileOptions &base) {
  std::string f;
  auto add = [&](const std::string &s) { f += (f.empty() ? "" : " ") + s; };
  add("--ranks " + std::to_string(c.ranks));
  if (c.precision != base.precision) add("--precision " + toString(c.precision));
  if (c.tp > 1) add("--tp " + std::to_string(c.tp));
  if (c.cp > 1) add("--cp " + std::to_string(c.cp));
  if (c.pp > 1) add("--pp " + std::to_string(c.pp));
  if (c.pp > 1 && c.ppSchedule != base.ppSchedule) add("--pp-schedule " + toString(c.ppSchedule));
  if (c.pp > 1 && c.ppSchedule == PpSchedule::Interleaved && mlir::bigc::virtualStagesOf(c) != 2)
    add("--virtual-stages " + std::to_string(mlir::bigc::virtualStagesOf(c)));
  if (c.zero > 0) add("--zero " + std::to_string(c.zero));
  if (c.microBatches > 1) add("--micro-batches " + std::to_string(c.microBatches));
  if (c.recompute != RecomputePolicy::None) add("--recompute " + toString(c.recompute));
  if (c.fuseLoss && !base.fuseLoss) add("--fuse-loss");
  if (c.padVocab != base.padVocab) add("--pad-vocab " + std::to_string(c.padVocab));
  if (c.offload != Offload::None)
    add("--offload " + toString(c.offload) +
        (c.offload == Offload::NVMe && base.nvmePath.empty() ? " --nvme-path DIR" : std::string()));
  if (std::string s = stateFlags(base, c); !s.empty()) add(s);
  return f;
}

} // namespace

void compileInOrder(std::vector<AutoPlan> &plans, int wholeCompiles,
                    const std::function<void(AutoPlan &)> &compileWhole,
                    const std::function<bool(bool anyReal)> &timeLeft) {
  std::vector<size_t> order;
  for (size_t i = 0; i < plans.size(); ++i)
    if (plans[i].fits) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return plans[x].stepSeconds < plans[y].stepSeconds; });
  int real = 0;
  double bestReal = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (real >= wholeCompiles && bestReal <= plans[i].stepSeconds) break;
    if (!plans[i].estimated) {
      ++real;
      bestReal = std::min(bestReal, plans[i].stepSeconds);
      continue;
    }
    if (!timeLeft(real > 0)) {
      plans[i].why = "estimated to fit; not compiled whole (the search's time budget is spent)";
      continue;
    }
    compileWhole(plans[i]);
    real += plans[i].fits;
    if (plans[i].fits) bestReal = std::min(bestReal, plans[i].stepSeconds);
  }
}

AutoResult autoSearch(mlir::ModuleOp parsed, const CompileOptions &base, const std::string &command,
                      const AutoScope &scope) {
  if (!base.haveHardware)
    throw UserError("--auto needs --hardware NAME|FILE: the machine's memory and speeds are what it chooses by");
  auto t0 = std::chrono::steady_clock::now();
  AutoResult r;
  const ModelFacts m = factsOf(parsed);
  if (m.batch <= 0) throw UserError("--auto: the model's @forward has no batch dimension to keep");
  r.batch = m.batch;
  auto given = [&](const char *flag) { return base.given.count(flag) > 0; };
  // --fuse-loss is a technique of the ladder where the model has an LM head to fuse and the command
  // line does not pin it.
  // Only on the CPU backend's profiles (cpu, cpu-calibrated): on an H100 the fused op runs but is
  // slower than the unfused head, and in the ladder of every profile the largest searches took up
  // to 30.1 s, at their 30 s bound (docs/cuda-backend.md).
  const bool cpuProfile = base.hardware.name == "cpu" || base.hardware.name.rfind("cpu-", 0) == 0;
  // Long sequences (8k tokens and more): the context axis (--cp, where the model's attention is
  // grouped-query: rotary positions), activation offload and the fused loss (whose logits would
  // otherwise hold sequence x vocabulary) on every profile, where the simpler plans do not fit.
  const bool longSeq = m.seq >= 8192;
  const bool canFuse = (cpuProfile || longSeq) && !base.fuseLoss && !given("--fuse-loss") &&
                       mlir::bigc::countFusableLossHeads(parsed) > 0;
  // The global batch: --global-batch, else what the command line without --auto trains.
  const int64_t userDp = base.ranks / std::max<int64_t>(1, base.tp * base.pp * base.cp);
  r.globalBatch = base.globalBatch ? *base.globalBatch : userDp * base.microBatches * m.batch;
  const int64_t R = base.ranks, perMachine = std::max<int64_t>(1, base.hardware.devices);

  // Meshes.
  struct Mesh {
    int64_t tp, pp, dp, k, cp = 1;
  };
  std::vector<Mesh> meshes;
  for (int64_t pp : {1, 2, 4, 8})
    for (int64_t tp : {1, 2, 4, 8})
      for (int64_t cp : {1, 2, 4, 8}) {
        if ((given("--tp") && tp != base.tp) || (given("--pp") && pp != base.pp) || (given("--cp") && cp != base.cp))
          continue;
        if (cp > 1 && (!(longSeq || given("--cp")) || !m.gqa || m.seq % (2 * cp) != 0)) continue;
        if (R % (tp * pp * cp) != 0 || tp > perMachine) continue;
        if (tp > 1 && m.headsGcd > 0 && m.headsGcd % tp != 0) continue;
        if (pp > 1 && (m.layers < pp || m.layers == 0)) continue;
        const int64_t dp = R / (tp * pp), groups = dp / cp; // (the cp ranks of a group share its sequences)
        if (r.globalBatch % (groups * m.batch) != 0) continue;
        const int64_t k = r.globalBatch / (groups * m.batch);
        if (given("--micro-batches") && k != base.microBatches) continue;
        if (pp > 1 && k < pp) continue; // fewer micro-batches than stages: mostly bubble
        meshes.push_back({tp, pp, dp, k, cp});
      }
  if (meshes.empty())
    throw UserError("--auto: no mesh of " + std::to_string(R) + " ranks trains the global batch of " +
                    std::to_string(r.globalBatch) + " sequences with the model's batch of " + std::to_string(m.batch) +
                    (given("--tp") || given("--pp") || given("--micro-batches") ? " under the flags given" : "") +
                    " (the data-parallel ranks x micro-batches must divide it by the model's batch); give "
                    "--global-batch N or regenerate the model with another --batch");
  // Simplest meshes first (they compile fastest and are what a tie prefers).
  std::stable_sort(meshes.begin(), meshes.end(), [](const Mesh &a, const Mesh &b) {
    return a.tp * a.pp * a.cp * 100 + a.pp < b.tp * b.pp * b.cp * 100 + b.pp;
  });

  struct Tech {
    RecomputePolicy recompute;
    Offload offload;
    bool fused = false;                         // --fuse-loss
    OffloadParams params = OffloadParams::Auto; // --offload-params: the weights off the device too
    bool bf16States = false;                    // --optimizer-states bf16: AdamW's moments in half
    bool activations = false;                   // --offload-activations
    OffloadGrads grads = OffloadGrads::Auto;    // --offload-grads: the gradients on the drive
    int64_t prefetch = -1;                      // --prefetch (-1: the command line's)
    int64_t tile = 0;                           // --tile-linear (0: the command line's)
  };
  using RP = RecomputePolicy;
  // Cheapest first. The fused loss costs one more GEMM of the LM head (about a tenth of gpt2's
  // step), selective recomputation a few elementwise ops, full recomputation a forward pass.
  std::vector<Tech> techs;
  for (Offload off : {Offload::None, Offload::CPU})
    for (Tech t : std::initializer_list<Tech>{{RP::None, off},
                                              {RP::Selective, off},
                                              {RP::None, off, true},
                                              {RP::Selective, off, true},
                                              {RP::Full, off},
                                              {RP::Full, off, true}})
      techs.push_back(t);
  // The weights off the device too (ZeRO 0 and 3), as ZeRO-Infinity does: with auto the pass keeps
  // them on the device where they fit, which a cut of a few layers always does, so its estimate
  // would not be the whole model's; explicitly host (or the drive) they are the same in both.
  techs.push_back({RP::Full, Offload::CPU, false, OffloadParams::Host});
  if (base.nvmeCapacity > 0 && (!base.nvmePath.empty() || scope.driveWithoutPath)) {
    techs.push_back({RP::Full, Offload::NVMe});
    techs.push_back({RP::Full, Offload::NVMe, true});
    techs.push_back({RP::Full, Offload::NVMe, false, OffloadParams::Nvme});
    // The gradients waiting on the drive too (they wait for the overflow check or the clipping
    // norm at the end of the backward): the host then holds the staging in flight.
    Tech t{RP::Full, Offload::NVMe, false, OffloadParams::Nvme};
    t.grads = OffloadGrads::Nvme;
    techs.push_back(t);
  }
  // Long sequences: the activations kept for the backward on the host too (with full recomputation:
  // the blocks' inputs), after every plan that keeps them on the device.
  if (longSeq && !given("--offload-activations"))
    for (Offload off : {Offload::None, Offload::CPU})
      for (bool fused : {false, true}) {
        Tech t{RP::Full, off, fused};
        t.activations = true;
        techs.push_back(t);
      }
  // The leanest device: the weights off it, the blocks' inputs kept for the backward on the host,
  // and each ZeRO-3 gather just before its use (a layer of a 1T model, 25,600 wide, gathers 14.6
  // GiB: two do not fit a V100-32G), as ZeRO-Infinity runs its largest models.
  // First with the largest linear weights in row tiles (--tile-linear, ZeRO-3 only), which leaves
  // room to gather a layer ahead (on the 1T GPT: 19.24 GiB a V100 and a 5% faster step than
  // gathering just before use, which needs 21.12 GiB untiled); last tiled and just before use (10.86
  // GiB). Tiles of a sixteenth of the device (rounded down to a power of two), where a weight is
  // larger than that in 16 bits.
  int64_t tile = 0;
  if (base.deviceCapacity > 0 && !given("--tile-linear")) {
    tile = int64_t(1) << 20;
    while (tile * 2 <= base.deviceCapacity / 16) tile *= 2;
    if (m.largestMatrix * 2 <= tile) tile = 0;
  }
  if (!given("--offload-activations") && !given("--prefetch")) {
    // (tiles, prefetch): tiled a layer ahead (the command line's default), whole just before use,
    // and the leanest: tiled just before use.
    std::vector<std::pair<int64_t, int64_t>> variants = {{0, 0}};
    if (tile > 0) variants = {{tile, -1}, {0, 0}, {tile, 0}};
    for (auto [tiles, prefetch] : variants) {
      Tech t{RP::Full, Offload::CPU, false, OffloadParams::Host};
      t.activations = true;
      t.prefetch = prefetch;
      t.tile = tiles;
      techs.push_back(t);
      if (base.nvmeCapacity > 0 && (!base.nvmePath.empty() || scope.driveWithoutPath)) {
        t.offload = Offload::NVMe;
        t.params = OffloadParams::Nvme;
        t.grads = OffloadGrads::Nvme;
        techs.push_back(t);
      }
    }
  }
  // Last, where nothing above fits a mesh (the techniques of a mesh stop at the first that fits):
  // AdamW's moments stored in bf16 (updated in fp32), half their memory, as DeepSpeed's and
  // torchao's low-precision optimizers; the numbers change a little, so never where fp32 fits.
  const size_t fp32States = techs.size();
  for (size_t i = 0; i < fp32States; ++i)
    if (techs[i].recompute == RP::Full && !techs[i].fused && !techs[i].activations &&
        (techs[i].offload == Offload::None || techs[i].params != OffloadParams::Auto)) {
      Tech t = techs[i];
      t.bf16States = true;
      techs.push_back(t);
    }
  if (!canFuse)
    techs.erase(std::remove_if(techs.begin(), techs.end(), [](const Tech &t) { return t.fused; }), techs.end());
  if (base.nvmeCapacity > 0 && base.nvmePath.empty() && !scope.driveWithoutPath)
    r.report += "  (the drive is not searched: --offload nvme needs --nvme-path DIR; give it with --auto)\n";

  // Each configuration is first estimated from two compiles of the model cut to a few layers (one
  // and two; a pipeline of P stages two and three a stage), extrapolated linearly to every layer
  // (memory and step time grow by the layer); the most promising are then compiled whole. A budget
  // bounds the compiling: what is left when it is spent is named, not compiled.
  const double budget = base.autoSeconds > 0 ? base.autoSeconds : std::numeric_limits<double>::infinity();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::string firstDiag; // the first error of a refused compile (its diagnostics are not printed)
  mlir::ScopedDiagnosticHandler quiet(parsed->getContext(), [&](mlir::Diagnostic &d) {
    if (firstDiag.empty() && d.getSeverity() == mlir::DiagnosticSeverity::Error) firstDiag = d.str();
    return mlir::success();
  });
  // A refusal: the options do not suit the model ("refused: ..."; the mesh is then left), or the
  // compiler failed on them ("internal error: ..."; the other ZeRO stages of the mesh are still
  // tried).
  auto refusal = [&](const std::exception &e) {
    std::string w = firstDiag.empty() ? std::string(e.what()) : firstDiag;
    firstDiag.clear();
    const bool internal = dynamic_cast<const InternalError *>(&e) != nullptr;
    return std::string(internal ? "internal error (please report it): " : "refused: ") + w.substr(0, w.find('\n'));
  };
  std::map<int64_t, mlir::OwningOpRef<mlir::ModuleOp>> cuts; // layers -> the cut model (null: cannot cut)
  auto cut = [&](int64_t k) -> mlir::ModuleOp {
    auto it = cuts.find(k);
    if (it == cuts.end()) it = cuts.emplace(k, k < m.layers ? truncated(parsed, k, m.layers) : nullptr).first;
    return it->second ? *it->second : nullptr;
  };
  struct Measured {
    int64_t device = 0, host = 0, deviceLowerBound = 0;
    double step = 0;
    bool fits = false;
  };
  auto measure = [&](mlir::ModuleOp module, CompileOptions c, Measured &out) {
    format::Program p = compileWithChoices(module, c);
    std::vector<SpaceFit> fits = checkFit(fullestStage(p, c), c);
    for (const SpaceFit &f : fits) {
      if (f.space == "device") out.device = f.needed, out.deviceLowerBound = f.lowerBound;
      if (f.space == "host") out.host = f.needed;
    }
    out.fits = allFit(fits);
    out.step = stepOf(p);
    return p;
  };
  // Whole compiles: the plan itself, its fit and step.
  auto compileWhole = [&](AutoPlan &plan) {
    try {
      Measured w;
      plan.program = measure(parsed, plan.options, w);
      plan.compiled = true;
      ++r.compiled;
      plan.fits = w.fits;
      plan.deviceBytes = w.device, plan.hostBytes = w.host, plan.stepSeconds = w.step;
      plan.estimated = false;
      // On a GPU profile the ranks run over NCCL: a pipeline whose messages cannot run there (the
      // interleaved order of more micro-batches than stages) is no choice.
      if (plan.fits && !cpuProfile && plan.options.pp > 1)
        if (std::string why = format::ncclPipelineProblem(plan.program); !why.empty()) {
          plan.fits = false;
          plan.why = "cannot run over NCCL (a GPU per rank): its stages' messages deadlock where a send waits for "
                     "its recv (`bigc verify` shows how)";
          plan.program = format::Program{};
          return;
        }
      if (!plan.fits) {
        plan.why = "does not fit (compiled whole: " + gib(w.device) + " a device" +
                   (w.host ? ", " + gib(w.host) + " of host" : std::string()) + ")";
        plan.program = format::Program{};
      }
    } catch (const std::exception &e) {
      plan.why = refusal(e);
      plan.fits = false;
    }
  };
  auto over = [](int64_t need, int64_t cap) { return cap > 0 && need > cap; };
  // A configuration's figures from the model cut to U and 2U layers (U: its stages, times the model
  // chunks of a stage under the interleaved schedule; a pipeline 2U and 3U), extrapolated to every
  // layer; a model that cannot be cut (or has too few layers) is compiled whole.
  auto estimate = [&](AutoPlan &plan) {
    const CompileOptions &c = plan.options;
    const int64_t unit = c.pp * (c.ppSchedule == PpSchedule::Interleaved ? mlir::bigc::virtualStagesOf(c) : 1);
    // (A pipeline: two and three layers a stage, where one layer a stage is too small a model of
    // its stages' memory. Weights streamed layer by layer -- ZeRO 3, offload -- keep a window of
    // layers on the device, which a cut of one or two layers does not fill: 175b with ZeRO 3, CPU
    // offload and full recomputation on h100-80g-x8 needs 6.72, 9.95, 13.28, 13.75 and 14.69 GiB a
    // device at 1, 2, 3, 4 and 6 layers, so the slope of 1 -> 2 (3.23 GiB a layer) put the whole
    // model at 313 GiB and that of 3 -> 4 (0.47) at 57 GiB, against 56.88 compiled whole: three
    // and four layers then.)
    // (With the activations on the host too, the device holds about the same from four layers on,
    // and its growth from three to four is the window filling: 175b with ZeRO 3, the weights on
    // the host, --offload-activations --prefetch 0: 6.12, 6.40, 6.45, 6.45, 6.45 GiB at 2 to 6
    // layers, 6.45 whole; from 3 and 4 it was estimated at 11.05. Four and five then.)
    const bool streamed = c.zero == 3 || c.offload != Offload::None;
    const int64_t k1 = (c.pp > 1 ? 2 : c.offloadActivations ? 4 : streamed ? 3 : 1) * unit, k2 = k1 + unit;
    mlir::ModuleOp a = cut(k1), b = a ? cut(k2) : nullptr;
    if (!a || !b) {
      compileWhole(plan);
      return;
    }
    try {
      CompileOptions pc = c;
      pc.initialWeights.clear();
      Measured x, y;
      measure(a, pc, x);
      measure(b, pc, y);
      r.proxies += 2;
      const double f = double(m.layers - k1) / double(k2 - k1);
      // (Memory that shrinks from the smaller cut to the larger, as when the larger one moves a
      // space's contents elsewhere, is not extrapolated below the larger cut's: never negative.)
      auto at = [&](double u, double v) { return std::max(v, u + (v - u) * f); };
      // The device: its lower bound extrapolated (the planner's packing of a few layers is noisier
      // than what they hold: 13b offloaded, 2.60 / 2.65 GiB arenas at 3 / 4 layers over bounds of
      // 2.59 / 2.61, put the whole at 4.45 GiB against 3.38 compiled, its bound at 3.33), times the
      // larger cut's packing ratio.
      const double ratio = y.deviceLowerBound > 0 ? double(y.device) / double(y.deviceLowerBound) : 1.0;
      plan.deviceBytes = y.deviceLowerBound > 0 && x.deviceLowerBound > 0
                             ? int64_t(at(double(x.deviceLowerBound), double(y.deviceLowerBound)) * ratio)
                             : int64_t(at(double(x.device), double(y.device)));
      plan.hostBytes = int64_t(at(double(x.host), double(y.host)));
      plan.stepSeconds = at(x.step, y.step);
      plan.estimated = true;
      plan.fits = !over(plan.deviceBytes, base.deviceCapacity) && !over(plan.hostBytes, base.hostCapacity);
      if (!plan.fits)
        plan.why = "does not fit (estimated: " + gib(plan.deviceBytes) + " a device" +
                   (plan.hostBytes ? ", " + gib(plan.hostBytes) + " of host" : std::string()) + ")";
    } catch (const std::exception &e) {
      plan.why = refusal(e);
    }
  };
  for (const Mesh &mesh : meshes) {
    std::vector<int64_t> zeros;
    for (int64_t z = 0; z <= 3; ++z)
      if ((mesh.dp > 1 || z == 0) && (!given("--zero") || z == base.zero) &&
          (!given("--tile-linear") || (z == 3 && mesh.tp == 1))) // (tiles: ZeRO-3's gathers, no tp)
        zeros.push_back(z);
    bool meshRefused = false; // the model cannot take this mesh (e.g. a tensor size that does not divide it)
    const std::vector<Precision> precisions =
        scope.precisions.empty() ? std::vector<Precision>{base.precision} : scope.precisions;
    for (int64_t z : zeros)
      for (Precision prec : precisions) {
        if (meshRefused) break;
        std::vector<std::pair<RecomputePolicy, Offload>> fitUnfused; // (every technique: no fused twin then)
        bool fusedRefused = false; // the fused loss does not suit this mesh: no other fused variant
        for (const Tech &t : techs) {
          if (given("--recompute") && t.recompute != base.recompute) continue;
          if (given("--offload") && t.offload != base.offload) continue;
          // (weights off the device: ZeRO 0 and 3 only; pinned by --offload-params)
          if (t.params != OffloadParams::Auto && (z == 1 || z == 2)) continue;
          if (given("--offload-params") && t.params != OffloadParams::Auto && t.params != base.offloadParams) continue;
          if (given("--offload-grads") && t.grads != OffloadGrads::Auto && t.grads != base.offloadGrads) continue;
          if (t.bf16States && (given("--optimizer-states") || base.adamw.bf16States())) continue;
          if (t.tile > 0 && (z != 3 || mesh.tp > 1 || mesh.dp < 2)) continue; // (tiles: ZeRO-3's gathers)
          if (t.fused && (fusedRefused ||
                          std::count(fitUnfused.begin(), fitUnfused.end(), std::make_pair(t.recompute, t.offload))))
            continue;
          AutoPlan plan;
          CompileOptions &c = plan.options;
          c = base;
          c.tp = mesh.tp, c.pp = mesh.pp, c.cp = mesh.cp, c.zero = z, c.microBatches = mesh.k;
          c.offloadActivations = base.offloadActivations || t.activations;
          c.recompute = t.recompute, c.offload = t.offload, c.precision = prec;
          c.fuseLoss = base.fuseLoss || t.fused;
          // A tensor size that does not divide the vocabulary (GPT-2's 50257): the vocabulary padded,
          // as Megatron does, unless the command line says otherwise.
          if (c.tp > 1 && m.vocab > 0 && m.vocab % c.tp != 0 && base.padVocab == 0 && !given("--pad-vocab"))
            c.padVocab = mlir::bigc::padMultipleFor(m.vocab, c.tp);                  // 64, less for a small vocabulary
          if (c.offload == Offload::NVMe && c.nvmePath.empty()) c.nvmePath = "nvme"; // (the plan does not read it)
          c.recomputeDrop = -1;
          if (c.offload != base.offload) c.offloadParams = OffloadParams::Auto;
          if (c.offload != Offload::None && (c.zero == 1 || c.zero == 2)) c.offloadParams = OffloadParams::Device;
          if (t.params != OffloadParams::Auto) c.offloadParams = t.params;
          if (t.grads != OffloadGrads::Auto) c.offloadGrads = t.grads;
          if (t.prefetch >= 0) c.prefetch = t.prefetch;
          if (t.tile > 0) c.tileBytes = t.tile;
          if (t.bf16States) c.adamw.states = OptimizerStates::BF16;
          c.quiet = true;
          c.autoSearch = false;
          plan.flags = techniqueFlags(c, base);
          ++r.considered;
          const StateBound lb = stateBound(m, c);
          if (over(lb.device, base.deviceCapacity) || over(lb.host, base.hostCapacity) ||
              over(lb.nvme, base.nvmeCapacity)) {
            plan.why = "ruled out: its model state alone needs " +
                       (over(lb.device, base.deviceCapacity) ? gib(lb.device) + " per device"
                        : over(lb.host, base.hostCapacity)   ? gib(lb.host) + " of host memory"
                                                             : gib(lb.nvme) + " of the drive");
            ++r.ruledOut;
            r.plans.push_back(std::move(plan));
            continue;
          }
          if (elapsed() > budget) {
            plan.why = "not compiled (the search's time budget is spent)";
            ++r.skippedForTime;
            r.plans.push_back(std::move(plan));
            break; // the next mesh and stage: their cheapest configurations first
          }
          estimate(plan);
          const bool done = plan.fits, failed = plan.why.rfind("internal error", 0) == 0;
          if (done && !t.fused) fitUnfused.push_back({t.recompute, t.offload});
          const bool refused = plan.why.rfind("refused: ", 0) == 0;
          // A refused fused variant (e.g. no head left to fuse after tensor parallelism) leaves the
          // mesh to the unfused techniques.
          meshRefused = refused && !t.fused;
          fusedRefused |= refused && t.fused;
          r.plans.push_back(std::move(plan));
          if ((done && !scope.everyTechnique) || meshRefused || failed)
            break; // the cheapest techniques that fit this mesh and stage
        }
      }
  }
  // Pipeline schedules: the most promising pipelined plans (1F1B, within 1.5x of the fastest
  // estimate and at most three) are tried again interleaved (2 model chunks a stage, where the
  // layers and micro-batches allow: Megatron's virtual stages) and zero-bubble (ZB-H1), each
  // estimated the same way; a --pp-schedule given pins the schedule.
  if (!given("--pp-schedule") && !given("--virtual-stages")) {
    double fastest = 1e300;
    std::vector<size_t> pipes;
    for (size_t i = 0; i < r.plans.size(); ++i)
      if (r.plans[i].fits) fastest = std::min(fastest, r.plans[i].stepSeconds);
    for (size_t i = 0; i < r.plans.size(); ++i) {
      const AutoPlan &p = r.plans[i];
      if (p.fits && p.options.pp > 1 && p.options.ppSchedule == PpSchedule::OneFOneB && p.stepSeconds <= 1.5 * fastest)
        pipes.push_back(i);
    }
    std::stable_sort(pipes.begin(), pipes.end(),
                     [&](size_t x, size_t y) { return r.plans[x].stepSeconds < r.plans[y].stepSeconds; });
    if (pipes.size() > 3) pipes.resize(3);
    for (size_t i : pipes)
      for (PpSchedule sched : {PpSchedule::Interleaved, PpSchedule::ZeroBubble}) {
        if (elapsed() > budget) break;
        AutoPlan plan;
        plan.options = r.plans[i].options;
        CompileOptions &c = plan.options;
        c.ppSchedule = sched;
        c.virtualStages = sched == PpSchedule::Interleaved ? 2 : 1;
        if (sched == PpSchedule::Interleaved && (m.layers < 2 * c.pp || c.microBatches % c.pp != 0)) continue;
        plan.flags = techniqueFlags(c, base);
        ++r.considered;
        estimate(plan);
        r.plans.push_back(std::move(plan));
      }
  }

  // The fastest by their estimates, compiled whole (compileInOrder): the plans kept are real.
  compileInOrder(r.plans, scope.wholeCompiles, compileWhole, [&](bool anyReal) {
    // (A whole compile of a large model takes long: past the budget only while none is real yet,
    // and not past twice the budget.)
    return !((elapsed() > budget && anyReal) || elapsed() > 2 * budget);
  });
  // Never wrong about fitting, within the estimates' error: where no plan fits, those estimated to
  // need at most kEstimateMargin more than the machine has (the cut-model estimates were measured
  // up to 9.0% over the whole compile, bench/auto_estimates: 11 configurations from gpt2-xl to
  // 175b) are compiled whole, nearest first, before "nothing fits" is said.
  {
    bool anyFits = false;
    for (const AutoPlan &p : r.plans) anyFits |= p.fits && !p.estimated;
    auto excessOf = [&](const AutoPlan &p) {
      double e = 0;
      if (base.deviceCapacity > 0) e = std::max(e, double(p.deviceBytes) / double(base.deviceCapacity));
      if (base.hostCapacity > 0) e = std::max(e, double(p.hostBytes) / double(base.hostCapacity));
      return e;
    };
    std::vector<size_t> near;
    for (size_t i = 0; i < r.plans.size() && !anyFits; ++i) {
      const AutoPlan &p = r.plans[i];
      if (p.estimated && !p.fits && p.why.rfind("does not fit (estimated", 0) == 0 &&
          excessOf(p) <= 1.0 + kEstimateMargin)
        near.push_back(i);
    }
    std::stable_sort(near.begin(), near.end(),
                     [&](size_t a, size_t b) { return excessOf(r.plans[a]) < excessOf(r.plans[b]); });
    for (size_t i : near) {
      if (elapsed() > 2 * budget) {
        r.plans[i].why += "; within the estimates' error, not compiled whole (the search's time budget is spent)";
        continue;
      }
      ++r.nearCompiled;
      compileWhole(r.plans[i]);
      if (r.plans[i].fits) break; // (the nearest that fits; the search's ranking below takes it)
    }
  }
  for (const AutoPlan &p : r.plans) r.fitting += p.fits && !p.estimated;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Ranked by step time (ties: the order of the search, simplest first).
  std::vector<int> fit, guessed; // compiled whole and fitting; estimated to fit
  for (size_t i = 0; i < r.plans.size(); ++i)
    if (r.plans[i].fits) (r.plans[i].estimated ? guessed : fit).push_back(int(i));
  std::stable_sort(fit.begin(), fit.end(),
                   [&](int a, int b) { return r.plans[size_t(a)].stepSeconds < r.plans[size_t(b)].stepSeconds; });
  if (!fit.empty()) r.chosen = fit.front();

  std::ostringstream os;
  os << "bigc compile --auto: " << R << " rank" << (R > 1 ? "s" : "") << " of " << base.hardware.name
     << ", global batch " << r.globalBatch << " (the model's batch " << m.batch << " x data-parallel ranks x "
     << "micro-batches), precision " << toString(base.precision) << "\n";
  char line[512];
  std::snprintf(line, sizeof line,
                "  searched %d configurations in %.1f s: %d ruled out by their model state, %d estimated from %d "
                "compiles of the model cut to a few layers, %d compiled whole (%d fit)%s%s\n",
                r.considered, r.seconds, r.ruledOut, r.considered - r.ruledOut - r.skippedForTime, r.proxies,
                r.compiled, r.fitting,
                r.nearCompiled ? (", " + std::to_string(r.nearCompiled) +
                                  " of them estimated over the machine by less than the estimates' error (10%)")
                                     .c_str()
                               : "",
                r.skippedForTime ? (", " + std::to_string(r.skippedForTime) + " not compiled (time)").c_str() : "");
  os << line << r.report;
  int internal = 0;
  const AutoPlan *firstInternal = nullptr;
  for (const AutoPlan &p : r.plans)
    if (p.why.rfind("internal error", 0) == 0 && internal++ == 0) firstInternal = &p;
  if (firstInternal)
    os << "  " << internal << " configuration" << (internal > 1 ? "s" : "") << " failed inside the compiler (left out; "
       << "please report it): " << firstInternal->flags << ": " << firstInternal->why << "\n";
  // BIGC_AUTO_ALL=1: every configuration and what became of it (for looking into a search).
  if (const char *all = std::getenv("BIGC_AUTO_ALL"); all && std::string(all) == "1")
    for (const AutoPlan &p : r.plans)
      os << "    [" << (p.fits ? (p.estimated ? "fits, estimated" : "fits") : "no") << "] " << p.flags << ": "
         << (p.why.empty() ? ms(p.stepSeconds) + ", " + gib(p.deviceBytes) : p.why) << "\n";
  if (fit.empty()) {
    // The closest: those with figures (compiled or estimated) by how far over they are, then the
    // ruled-out ones by their model state.
    auto excess = [&](const AutoPlan &p) {
      double e = 0;
      if (base.deviceCapacity > 0) e = std::max(e, double(p.deviceBytes) / double(base.deviceCapacity));
      if (base.hostCapacity > 0) e = std::max(e, double(p.hostBytes) / double(base.hostCapacity));
      return e;
    };
    std::vector<const AutoPlan *> near;
    for (const AutoPlan &p : r.plans)
      if (!p.why.empty() && (p.deviceBytes > 0 || p.hostBytes > 0)) near.push_back(&p);
    std::stable_sort(near.begin(), near.end(),
                     [&](const AutoPlan *a, const AutoPlan *b) { return excess(*a) < excess(*b); });
    for (const AutoPlan &p : r.plans)
      if (!p.why.empty() && p.deviceBytes == 0 && p.hostBytes == 0) near.push_back(&p);
    os << "  no configuration fits; the closest:\n";
    for (size_t i = 0; i < near.size() && i < 6; ++i) os << "    " << near[i]->flags << ": " << near[i]->why << "\n";
    r.report = os.str();
    return r;
  }
  os << "\n  " << std::left;
  std::snprintf(line, sizeof line, "%-4s %-11s %-12s %-12s %s\n", "", "step", "device/rank", "host", "options");
  os << line;
  for (size_t i = 0; i < fit.size() && i < 8; ++i) {
    const AutoPlan &p = r.plans[size_t(fit[i])];
    std::snprintf(line, sizeof line, "  %-4s %-11s %-12s %-12s %s\n", i == 0 ? "*" : std::to_string(i + 1).c_str(),
                  ms(p.stepSeconds).c_str(), gib(p.deviceBytes).c_str(), p.hostBytes ? gib(p.hostBytes).c_str() : "-",
                  p.flags.c_str());
    os << "  " << (line + 2);
  }
  if (fit.size() > 8) os << "  (and " << fit.size() - 8 << " more that fit)\n";
  if (!guessed.empty()) {
    std::stable_sort(guessed.begin(), guessed.end(),
                     [&](int a, int b) { return r.plans[size_t(a)].stepSeconds < r.plans[size_t(b)].stepSeconds; });
    os << "  estimated to fit from the cut model, not compiled whole:\n";
    for (size_t i = 0; i < guessed.size() && i < 5; ++i) {
      const AutoPlan &p = r.plans[size_t(guessed[i])];
      std::snprintf(line, sizeof line, "  %-4s ~%-10s ~%-11s %-12s %s\n", "", ms(p.stepSeconds).c_str(),
                    gib(p.deviceBytes).c_str(), p.hostBytes ? ("~" + gib(p.hostBytes)).c_str() : "-", p.flags.c_str());
      os << line;
    }
    if (guessed.size() > 5) os << "  (and " << guessed.size() - 5 << " more)\n";
  }
  // The Pareto front: no other plan is both faster and smaller on the device.
  os << "\n  Pareto front (device memory per rank against step time):";
  std::vector<int> byMem = fit;
  byMem.insert(byMem.end(), guessed.begin(), guessed.end());
  std::stable_sort(byMem.begin(), byMem.end(),
                   [&](int a, int b) { return r.plans[size_t(a)].deviceBytes < r.plans[size_t(b)].deviceBytes; });
  double best = 1e300;
  for (int i : byMem) {
    const AutoPlan &p = r.plans[size_t(i)];
    if (p.stepSeconds < best) {
      best = p.stepSeconds;
      os << "\n    " << (p.estimated ? "~" : "") << gib(p.deviceBytes) << ", " << (p.estimated ? "~" : "")
         << ms(p.stepSeconds) << ": " << p.flags << (p.estimated ? " (estimated)" : "");
    }
  }
  const AutoPlan &c = r.plans[size_t(r.chosen)];
  os << "\n\n  chosen: " << command << " " << c.flags << "\n";
  r.report = os.str();
  return r;
}

std::string paretoSvg(const AutoResult &r) {
  std::vector<const AutoPlan *> fit;
  for (const AutoPlan &p : r.plans)
    if (p.fits) fit.push_back(&p);
  const double W = 720, H = 440, L = 80, Rm = 30, T = 40, B = 60;
  double xmax = 0, ymax = 0;
  for (const AutoPlan *p : fit) xmax = std::max(xmax, p->stepSeconds), ymax = std::max(ymax, double(p->deviceBytes));
  xmax = xmax > 0 ? xmax * 1.1 : 1, ymax = ymax > 0 ? ymax * 1.1 : 1;
  auto X = [&](double s) { return L + (W - L - Rm) * s / xmax; };
  auto Y = [&](double b) { return H - B - (H - T - B) * b / ymax; };
  std::ostringstream o;
  char buf[512];
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(
      buf, sizeof buf,
      "<text x=\"%g\" y=\"22\" font-size=\"13\">bigc compile --auto: %d plans that fit (of %d configurations), "
      "global batch %lld</text>\n",
      L, r.fitting, r.considered, (long long)r.globalBatch);
  o << buf;
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/><line x1=\"%g\" y1=\"%g\" x2=\"%g\" "
                "y2=\"%g\" stroke=\"black\"/>\n",
                L, H - B, W - Rm, H - B, L, H - B, L, T);
  o << buf;
  for (int i = 0; i <= 4; ++i) {
    const double s = xmax * i / 4, b = ymax * i / 4;
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text><text x=\"%g\" y=\"%g\" "
                  "text-anchor=\"end\">%s</text>\n",
                  X(s), H - B + 16, ms(s).c_str(), L - 6, Y(b) + 4, humanBytes(int64_t(b)).c_str());
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">estimated step time</text>\n<text x=\"16\" y=\"%g\" "
                "transform=\"rotate(-90 16 %g)\" text-anchor=\"middle\">device memory per rank</text>\n",
                (L + W - Rm) / 2, H - 18, (T + H - B) / 2, (T + H - B) / 2);
  o << buf;
  // The front, as a staircase through its plans.
  std::vector<const AutoPlan *> byMem = fit;
  std::stable_sort(byMem.begin(), byMem.end(),
                   [](const AutoPlan *a, const AutoPlan *b) { return a->deviceBytes < b->deviceBytes; });
  std::vector<const AutoPlan *> front;
  double best = 1e300;
  for (const AutoPlan *p : byMem)
    if (p->stepSeconds < best) best = p->stepSeconds, front.push_back(p);
  if (!front.empty()) {
    o << "<polyline fill=\"none\" stroke=\"#e67e22\" stroke-width=\"2\" points=\"";
    for (const AutoPlan *p : front) o << X(p->stepSeconds) << "," << Y(double(p->deviceBytes)) << " ";
    o << "\"/>\n";
  }
  const AutoPlan *chosen = r.chosen >= 0 ? &r.plans[size_t(r.chosen)] : nullptr;
  auto colour = [&](const AutoPlan *p) {
    return p == chosen ? "#c0392b" : std::find(front.begin(), front.end(), p) != front.end() ? "#e67e22" : "#2e86c1";
  };
  for (const AutoPlan *p : fit) {
    const bool onFront = std::find(front.begin(), front.end(), p) != front.end();
    std::snprintf(
        buf, sizeof buf,
        "<circle cx=\"%g\" cy=\"%g\" r=\"%d\" fill=\"%s\" stroke=\"%s\"><title>%s: %s%s, %s</title></circle>\n",
        X(p->stepSeconds), Y(double(p->deviceBytes)), p == chosen ? 6 : 4, p->estimated ? "white" : colour(p),
        colour(p), // estimated from the cut model: hollow
        p->flags.c_str(), p->estimated ? "~" : "", ms(p->stepSeconds).c_str(), humanBytes(p->deviceBytes).c_str());
    o << buf;
    if (onFront || p == chosen) {
      std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\">%s%s</text>\n", X(p->stepSeconds) + 8,
                    Y(double(p->deviceBytes)) - 6, p == chosen ? "chosen: " : "", p->flags.c_str());
      o << buf;
    }
  }
  o << "</svg>\n";
  return o.str();
}

} // namespace bigc
