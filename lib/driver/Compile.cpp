//===- Compile.cpp - `bigc compile` ---------------------------------------===//
//
// model.mlir -> model.bigc: parse + verify, bigc-autodiff, bigc-schedule,
// bigc-memory-plan, emit, check the plan against the device's capacity,
// write atomically. Exit status (CLI.md): 0 written; 1 the input or an
// option is wrong, or the plan does not fit (with a table); 2 internal
// error. Nothing is written on any failure.
//
//===----------------------------------------------------------------------===//

#include "bigc/Driver/Compile.h"
#include "bigc/Driver/Capacity.h"

#include "bigc/Analysis/StepSimulation.h"
#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Emit/Emitter.h"
#include "bigc/Passes/Passes.h"
#include "bigc/runtime/program.h"
#include "bigc/runtime/safetensors.h"
#include "bigc/runtime/verifier.h"
#include "bigc/support/cli.h"
#include "bigc/support/format.h"
#include "bigc/support/hardware.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sys/stat.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace bigc {

using rt::UserError;

namespace {

const char *kHelp =
    "usage: bigc compile model.mlir -o model.bigc [options]\n"
    "\n"
    "Compiles a model graph (func.func @forward returning the loss, bigc dialect) into a\n"
    "training program: backward (bigc-autodiff), AdamW updates, one schedule (bigc-schedule),\n"
    "a memory plan with one offset per tensor (bigc-memory-plan), and writes the program file\n"
    "(docs/program-format.md). Fails with a table, writing nothing, when the plan does not fit.\n"
    "\n"
    "options:\n"
    "  -o FILE                 the program to write (default: the model's name with .bigc)\n"
    "  --hardware NAME|FILE    hardware profile (hardware/*.json) the plan must fit\n"
    "  --device-mem SIZE       device memory per rank (overrides the profile), e.g. 16G\n"
    "  --host-mem SIZE         host memory (overrides the profile)\n"
    "  --device-reserve SIZE   device memory kept out of the plan for the CUDA context, workspaces\n"
    "                          and NCCL (default: the profile's, e.g. 1.4 GiB per 80 GB GPU; 0\n"
    "                          without --hardware); the plan must fit the memory less the reserve\n"
    "  --host-reserve SIZE     host memory kept out of the plan for the OS and the process\n"
    "                          (default: the profile's, 4 GiB; 0 without --hardware)\n"
    "  --lr F                  AdamW learning rate (3e-4)\n"
    "  --beta1 F --beta2 F     AdamW betas (0.9, 0.95)\n"
    "  --eps F                 AdamW epsilon (1e-8)\n"
    "  --weight-decay F        AdamW weight decay, parameters of rank >= 2 only (0.1)\n"
    "  --grad-clip F           clip the global gradient norm to F (0: no clipping)\n"
    "  --recompute POLICY      recompute activations in the backward instead of keeping them:\n"
    "                          none, full (keep each block's input), selective (drop layernorm\n"
    "                          and GELU outputs), auto (the least FLOPs that fit the budget)\n"
    "  --memory-budget SIZE    --recompute auto: device bytes the plan must fit (default: the\n"
    "                          device memory of --hardware / --device-mem)\n"
    "  --precision P           fp32 (default), bf16 or fp16: 16-bit weights and activations for\n"
    "                          compute, fp32 master weights, AdamW states and statistics\n"
    "  --loss-scale F          fp16: initial dynamic loss scale (65536)\n"
    "  --loss-scale-window N   fp16: clean steps before the loss scale doubles (2000)\n"
    "  --micro-batches K       K micro-batches of the model's batch per update, gradients\n"
    "                          accumulated in fp32 (activation memory of one micro-batch)\n"
    "  --offload cpu           ZeRO-Offload: fp32 master weights and AdamW states on the host, the\n"
    "                          update on the host (CPU Adam) overlapped with the backward; the\n"
    "                          weights also stay on the host between uses when the device\n"
    "                          cannot hold them (ZeRO-3-Offload)\n"
    "  --ranks N               data-parallel ranks (default: the devices of --hardware, else 1);\n"
    "                          the model's batch is per rank: the global batch is ranks x batch x K\n"
    "  --zero 0|1|2|3          ZeRO over the ranks: 0 data parallel (all-reduce of gradients),\n"
    "                          1 + AdamW states and fp32 masters sharded, 2 + gradients sharded\n"
    "                          (reduce-scatter during the backward), 3 + weights sharded\n"
    "                          (all-gathered before each layer's forward and backward)\n"
    "  --tp N                  tensor parallelism over N of the ranks (Megatron-LM splits: QKV and\n"
    "                          MLP-in column-parallel, projections row-parallel, vocabulary-parallel\n"
    "                          embedding and loss); the mesh is dp x tp with dp = ranks / N\n"
    "  --sequence-parallel     with --tp: layernorms and the residual stream split along the\n"
    "                          sequence (Megatron-SP: reduce-scatter + all-gather for all-reduce)\n"
    "  --global-batch N        check that N = ranks x batch x K sequences per step (DeepSpeed's\n"
    "                          train_batch_size): a clear error naming the batch per rank otherwise\n"
    "  --bucket-mb F           largest bucket of merged collectives in MiB (25; 0: one per tensor)\n"
    "  --prefetch N            --zero 3: layers ahead that a weight all-gather starts (1; 0: none)\n"
    "  --quiet                 print nothing on success\n"
    "\n"
    "options of later versions (this version accepts only the default value):\n"
    "  --offload nvme   --pp N\n"
    "\n"
    "exit status: 0 written; 1 bad input or option, or the plan does not fit; 2 internal error\n";

const std::set<std::string> kValued = {
    "--hardware", "--device-mem", "--host-mem", "--device-reserve", "--host-reserve", "--ranks", "--precision", "--micro-batches",
    "--loss-scale", "--loss-scale-window",
    "--recompute", "--memory-budget", "--offload", "--zero", "--tp", "--pp", "--lr", "--beta1",
    "--beta2", "--eps", "--weight-decay", "--grad-clip", "--offload-params", "--bucket-mb", "--prefetch",
    "--global-batch"};
const std::set<std::string> kSwitches = {"--quiet", "--help", "--sequence-parallel"};



// Options that later versions implement: anything but the default is refused, by name.
void refuseLaterOptions(const cli::Args &a) {
  auto later = [](const std::string &opt, const std::string &value, const std::string &what) {
    throw UserError("option " + opt + " " + value + " is not supported by this version yet (" + what +
                    "); this version's mesh is data x tensor parallel (--ranks, --zero, --tp)");
  };
  auto oneOf = [](const std::string &opt, const std::string &value, const std::set<std::string> &allowed) {
    if (!allowed.count(value)) {
      std::string list;
      for (const auto &s : allowed) list += (list.empty() ? "" : ", ") + s;
      throw UserError("option " + opt + ": unknown value '" + value + "' (expected one of " + list + ")");
    }
  };
  if (a.has("--precision")) {
    std::string v = a.str("--precision");
    oneOf("--precision", v, {"fp32", "bf16", "fp16"});
  }
  if (a.has("--micro-batches")) {
    int64_t k = a.integer("--micro-batches", 1);
    if (k < 1) throw UserError("option --micro-batches: must be at least 1, got " + std::to_string(k));
  }
  if (a.has("--recompute")) {
    std::string v = a.str("--recompute");
    oneOf("--recompute", v, {"none", "full", "selective", "auto"});
  }
  if (a.has("--offload")) {
    std::string v = a.str("--offload");
    oneOf("--offload", v, {"none", "cpu", "nvme"});
    if (v == "nvme")
      throw UserError("option --offload nvme is not supported by this version yet (NVMe offload, "
                      "ZeRO-Infinity); use --offload cpu");
  }
  if (a.has("--offload-params")) {
    oneOf("--offload-params", a.str("--offload-params"), {"auto", "device", "host"});
    if (a.str("--offload", "none") != "cpu")
      throw UserError("option --offload-params: only with --offload cpu (it says where the weights live "
                      "between uses)");
  }
  if (a.has("--zero")) {
    int64_t z = a.integer("--zero", 0);
    if (z < 0 || z > 3) throw UserError("option --zero: expected 0, 1, 2 or 3, got " + std::to_string(z));
  }
  if (a.has("--ranks")) {
    int64_t r = a.integer("--ranks", 1);
    if (r < 1 || r > 4096) throw UserError("option --ranks: must be in [1, 4096], got " + std::to_string(r));
  }
  for (const char *opt : {"--tp", "--pp"}) {
    if (!a.has(opt)) continue;
    int64_t v = a.integer(opt, 1);
    if (v < 1) throw UserError(std::string("option ") + opt + ": must be at least 1, got " + std::to_string(v));
    if (v != 1 && std::string(opt) == "--pp") later(opt, std::to_string(v), "pipeline parallelism");
  }
}

emit::EmitOptions optimizerOptions(const cli::Args &a, mlir::bigc::AdamWConfig &cfg) {
  emit::EmitOptions o;
  cfg.lr = a.number("--lr", cfg.lr);
  cfg.beta1 = a.number("--beta1", cfg.beta1);
  cfg.beta2 = a.number("--beta2", cfg.beta2);
  cfg.eps = a.number("--eps", cfg.eps);
  cfg.weightDecay = a.number("--weight-decay", cfg.weightDecay);
  cfg.gradClip = a.number("--grad-clip", cfg.gradClip);
  if (!(cfg.lr > 0)) throw UserError("option --lr: must be positive, got " + a.str("--lr"));
  if (!(cfg.beta1 >= 0 && cfg.beta1 < 1)) throw UserError("option --beta1: must be in [0, 1), got " + a.str("--beta1"));
  if (!(cfg.beta2 >= 0 && cfg.beta2 < 1)) throw UserError("option --beta2: must be in [0, 1), got " + a.str("--beta2"));
  if (!(cfg.eps > 0)) throw UserError("option --eps: must be positive, got " + a.str("--eps"));
  if (!(cfg.weightDecay >= 0)) throw UserError("option --weight-decay: must be >= 0, got " + a.str("--weight-decay"));
  if (!(cfg.gradClip >= 0)) throw UserError("option --grad-clip: must be >= 0 (0: no clipping), got " + a.str("--grad-clip"));
  o.optimizer.lr = cfg.lr;
  o.optimizer.beta1 = cfg.beta1;
  o.optimizer.beta2 = cfg.beta2;
  o.optimizer.eps = cfg.eps;
  o.optimizer.weightDecay = cfg.weightDecay;
  o.optimizer.gradClip = cfg.gradClip;
  return o;
}

// @forward(%tokens: tensor<BxTxi32>, %targets: tensor<BxTxi32>) -> tensor<f32>, located error
// otherwise.
mlir::LogicalResult checkInterface(mlir::ModuleOp module) {
  auto fwd = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!fwd)
    return module.emitError("the model has no func.func @forward(%tokens, %targets) -> tensor<f32> "
                            "(write one, or generate one with `bigc gen gpt`)");
  auto ft = fwd.getFunctionType();
  auto tok = ft.getNumInputs() == 2 ? llvm::dyn_cast<mlir::RankedTensorType>(ft.getInput(0)) : nullptr;
  if (!tok || tok.getRank() != 2 || !tok.hasStaticShape() || !tok.getElementType().isInteger(32) ||
      ft.getInput(1) != ft.getInput(0))
    return fwd.emitError("@forward must take (%tokens, %targets), both tensor<BxTxi32> of the same "
                         "static shape, got ")
           << ft.getInputs();
  // Models are written in fp32; bigc-mixed-precision makes the 16-bit compute copies (--precision).
  auto is16 = [](mlir::Type t) {
    auto rt = llvm::dyn_cast<mlir::RankedTensorType>(t);
    return rt && (rt.getElementType().isBF16() || rt.getElementType().isF16());
  };
  mlir::Operation *bad = nullptr;
  module.walk([&](mlir::Operation *op) {
    bool b16 = llvm::any_of(op->getResultTypes(), is16);
    if (auto p = llvm::dyn_cast<mlir::bigc::ParamOp>(op)) b16 |= is16(p.getType());
    if (b16 && !bad) bad = op;
  });
  if (bad)
    return bad->emitError("16-bit tensors are not supported by this version yet in the model: write the "
                          "model in f32 and compile with --precision bf16|fp16 (fp32 masters, 16-bit compute)");
  return mlir::success();
}

// The module attribute `bigc.weights = "FILE.safetensors"` (bigc import writes it; relative to
// the model file): the model's own initial weights. The file must hold every weight of the model
// (bigc.param of role param), with its shape, and nothing else; its absolute path goes into the
// program, which `bigc run` loads it from.
void resolveInitialWeights(mlir::ModuleOp module, CompileOptions &o) {
  auto attr = module->getAttrOfType<mlir::StringAttr>("bigc.weights");
  if (!attr) return;
  std::string path = attr.getValue().str();
  if (path.empty()) throw UserError("module attribute bigc.weights: empty file name");
  if (path[0] != '/') {
    size_t slash = o.input.find_last_of('/');
    path = (slash == std::string::npos ? std::string(".") : o.input.substr(0, slash)) + "/" + path;
  }
  if (char *real = ::realpath(path.c_str(), nullptr)) {
    path = real;
    std::free(real);
  } else {
    throw UserError("the model's initial weights (module attribute bigc.weights) '" + attr.getValue().str() +
                    "' are not at " + path + " (bigc import writes them beside the model; copy them there)");
  }
  rt::safetensors::File f = rt::safetensors::readHeader(path);
  std::map<std::string, const rt::safetensors::Tensor *> byName;
  for (const auto &t : f.tensors) byName[t.name] = &t;
  size_t params = 0;
  for (mlir::bigc::ParamOp p : module.getOps<mlir::bigc::ParamOp>()) {
    if (p.getRole() != "param") continue;
    ++params;
    std::string name = p.getSymName().str();
    auto it = byName.find(name);
    std::vector<int64_t> shape(p.getTensorType().getShape().begin(), p.getTensorType().getShape().end());
    auto shapeStr = [](const std::vector<int64_t> &s) {
      std::string r = "[";
      for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
      return r + "]";
    };
    if (it == byName.end())
      throw UserError(path + ": the weight '" + name + "' " + shapeStr(shape) + " of the model is missing");
    if (it->second->shape != shape)
      throw UserError(path + ": the weight '" + name + "' has shape " + shapeStr(it->second->shape) +
                      ", the model's is " + shapeStr(shape));
    if (it->second->dtype == rt::DType::I32)
      throw UserError(path + ": the weight '" + name + "' is stored as I32; expected F32, BF16 or F16");
  }
  if (byName.size() != params)
    for (const auto &[name, t] : byName)
      if (!module.lookupSymbol<mlir::bigc::ParamOp>(name))
        throw UserError(path + ": the tensor '" + name + "' is not a weight of the model");
  struct stat st {};
  o.initialWeights = path;
  o.initialWeightsBytes = ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
}

std::string defaultOutput(const std::string &in) {
  std::string base = in;
  size_t slash = base.find_last_of('/');
  size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) base.resize(dot);
  return base + ".bigc";
}

const char *kRoleOrder[] = {"param", "master", "optimizer", "grad", "input", "activation", "activation_grad",
                            "workspace", "transfer"};

int roleRank(const std::string &r) {
  const int n = int(sizeof kRoleOrder / sizeof kRoleOrder[0]);
  for (int i = 0; i < n; ++i)
    if (r == kRoleOrder[i]) return i;
  return n;
}

} // namespace

const char *compileHelp() { return kHelp; }

std::vector<RoleUsage> peakUsageByRole(const rt::Program &p, const std::string &space, int64_t *peakInstruction) {
  const int64_t n = std::max<int64_t>(int64_t(p.instructions.size()), 1);
  // Alias groups: buffers an in-place instruction places at the same offset count once.
  std::vector<size_t> parent(p.buffers.size());
  std::iota(parent.begin(), parent.end(), size_t(0));
  auto root = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  static const std::set<std::string> inPlace = {"add", "bias_add", "mul", "scale", "gelu", "gelu_grad", "reshape"};
  for (const auto &ins : p.instructions) {
    if (!inPlace.count(ins.op)) continue;
    for (int64_t o : ins.out)
      for (int64_t i : ins.in) {
        const auto &x = p.buffers[size_t(i)], &y = p.buffers[size_t(o)];
        if (x.space == y.space && x.offset == y.offset && x.bytes == y.bytes) {
          size_t a = root(size_t(i)), b = root(size_t(o));
          if (a != b) parent[std::max(a, b)] = std::min(a, b); // the earlier buffer owns the group
        }
      }
  }
  struct G {
    int64_t first = INT64_MAX, last = -1, bytes = 0;
    std::string role;
  };
  std::map<size_t, G> groups;
  for (const auto &b : p.buffers) {
    if (b.space != space) continue;
    G &g = groups[root(size_t(b.id))];
    int64_t first = b.persistent() ? 0 : b.liveFirst, last = b.persistent() ? n - 1 : b.liveLast;
    g.first = std::min(g.first, first);
    g.last = std::max(g.last, last);
    g.bytes = std::max(g.bytes, (b.bytes + rt::kAlignment - 1) / rt::kAlignment * rt::kAlignment);
    if (size_t(b.id) == root(size_t(b.id))) g.role = b.role;
  }
  std::map<std::string, std::vector<int64_t>> diff;
  std::vector<int64_t> total(size_t(n) + 1, 0);
  for (auto &[id, g] : groups) {
    auto &d = diff[g.role];
    if (d.empty()) d.assign(size_t(n) + 1, 0);
    d[size_t(g.first)] += g.bytes;
    d[size_t(g.last) + 1] -= g.bytes;
    total[size_t(g.first)] += g.bytes;
    total[size_t(g.last) + 1] -= g.bytes;
  }
  int64_t best = -1, at = 0, run = 0;
  for (int64_t i = 0; i < n; ++i) {
    run += total[size_t(i)];
    if (run > best) best = run, at = i;
  }
  std::vector<RoleUsage> out;
  for (auto &[role, d] : diff) {
    int64_t v = 0;
    for (int64_t i = 0; i <= at; ++i) v += d[size_t(i)];
    out.push_back({role, v});
  }
  std::sort(out.begin(), out.end(), [](const RoleUsage &a, const RoleUsage &b) {
    return roleRank(a.role) != roleRank(b.role) ? roleRank(a.role) < roleRank(b.role) : a.role < b.role;
  });
  if (peakInstruction) *peakInstruction = at;
  return out;
}

namespace {

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void runPasses(mlir::ModuleOp m, mlir::PassManager &pm, bool modelStage, const char *what) {
  if (mlir::succeeded(pm.run(m))) return;
  if (modelStage) throw UserError(std::string("cannot ") + what + " (errors above); nothing written");
  throw InternalError(std::string("internal error while ") + what + " (errors above; please report it)");
}

} // namespace

rt::Program compileToProgram(mlir::ModuleOp parsed, const CompileOptions &o) {
  mlir::OwningOpRef<mlir::ModuleOp> owned(llvm::cast<mlir::ModuleOp>(parsed->clone()));
  mlir::ModuleOp module = *owned;
  mlir::MLIRContext *ctx = module.getContext();

  // Tensor parallelism (on the forward), then backward + optimizer: failures are about the model
  // (a size the tensor ranks do not divide, a non-differentiable op, ...).
  {
    mlir::PassManager pm(ctx);
    if (o.tp > 1) {
      mlir::bigc::BigcTensorParallelOptions to;
      to.tp = o.tp;
      to.ranks = o.ranks;
      to.sequenceParallel = o.sequenceParallel;
      pm.addPass(mlir::bigc::createBigcTensorParallel(to));
    }
    mlir::bigc::BigcAutodiffOptions ao;
    ao.lr = o.lr;
    ao.beta1 = o.beta1;
    ao.beta2 = o.beta2;
    ao.eps = o.eps;
    ao.weightDecay = o.weightDecay;
    ao.gradClip = o.gradClip;
    pm.addPass(mlir::bigc::createBigcAutodiff(ao));
    runPasses(module, pm, /*modelStage=*/true, "build the training step");
  }
  // The single-device techniques, in DESIGN.md's order. Each block adds its pass when its option
  // asks for it.
  {
    mlir::PassManager pm(ctx);
    // [bigc-mixed-precision]
    if (o.precision != "fp32") {
      mlir::bigc::BigcMixedPrecisionOptions mo;
      mo.precision = o.precision;
      mo.lossScale = o.lossScaleInit;
      mo.growthInterval = o.lossScaleGrowthInterval;
      pm.addPass(mlir::bigc::createBigcMixedPrecision(mo));
    }
    // [bigc-grad-accum]
    if (o.microBatches > 1) {
      mlir::bigc::BigcGradAccumOptions go;
      go.microBatches = o.microBatches;
      pm.addPass(mlir::bigc::createBigcGradAccum(go));
    }
    // [bigc-recompute] (always: with policy none it records the forward FLOPs for the program)
    {
      mlir::bigc::BigcRecomputeOptions ro;
      ro.policy = o.recompute;
      ro.drop = o.recomputeDrop; // auto: chosen by chooseRecompute (-1: everything)
      pm.addPass(mlir::bigc::createBigcRecompute(ro));
    }
    // [bigc-shard] (always: it records the mesh; one rank changes nothing else)
    {
      mlir::bigc::BigcShardOptions so;
      so.ranks = o.ranks;
      so.zero = o.zero;
      so.bucketMb = o.bucketMb;
      pm.addPass(mlir::bigc::createBigcShard(so));
    }
    // [bigc-offload]
    if (o.offload == "nvme") throw UserError("option --offload nvme is not supported by this version yet (use --offload cpu)");
    if (o.offload == "cpu") {
      mlir::bigc::BigcOffloadOptions oo;
      oo.offload = "cpu";
      oo.params = o.offloadParams == "host" ? "host" : "device"; // "auto": chooseOffloadParams decides first
      pm.addPass(mlir::bigc::createBigcOffload(oo));
    }
    runPasses(module, pm, /*modelStage=*/false, "applying precision, accumulation, recomputation and offload");
  }
  // Schedule and memory plan: failures here are the compiler's.
  {
    mlir::PassManager pm(ctx);
    mlir::bigc::BigcScheduleOptions so;
    so.prefetch = o.prefetch;
    pm.addPass(mlir::bigc::createBigcSchedule(so));
    pm.addPass(mlir::bigc::createBigcMemoryPlan());
    runPasses(module, pm, /*modelStage=*/false, "scheduling or planning memory");
  }

  emit::EmitOptions eo;
  eo.source = o.input;
  eo.optimizer.lr = o.lr;
  eo.optimizer.beta1 = o.beta1;
  eo.optimizer.beta2 = o.beta2;
  eo.optimizer.eps = o.eps;
  eo.optimizer.weightDecay = o.weightDecay;
  eo.optimizer.gradClip = o.gradClip;
  eo.hardwareName = o.haveHardware ? o.hardware.name : (o.deviceCapacity > 0 ? "custom" : "none");
  eo.deviceCapacityBytes = o.deviceCapacity;
  eo.hostCapacityBytes = o.hostCapacity;
  eo.deviceReserveBytes = o.deviceReserve;
  eo.hostReserveBytes = o.hostReserve;
  eo.deviceReserveParts = o.deviceReserveParts;
  eo.initialWeights = o.initialWeights;
  eo.initialWeightsBytes = o.initialWeightsBytes;
  try {
    rt::Program program = emit::buildProgram(module, eo);
    if (o.haveHardware) { // the step on the profile: time and the collectives hidden behind compute
      mlir::bigc::StepEstimate est = mlir::bigc::simulateStep(module, o.hardware);
      program.estimate.present = true;
      program.estimate.stepSeconds = est.stepSeconds;
      program.estimate.computeSeconds = est.computeSeconds;
      for (const auto &c : est.collectives)
        program.estimate.collectives.push_back({c.op, c.count, c.seconds, c.hiddenSeconds, c.queuedSeconds});
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

namespace {

CompileOptions parseOptions(const cli::Args &args) {
  CompileOptions o;
  o.input = args.positional[0];
  o.output = args.has("-o") ? args.str("-o") : defaultOutput(o.input);
  if (o.output.empty()) throw UserError("compile: option -o needs a file name");
  o.quiet = args.has("--quiet");
  refuseLaterOptions(args);
  mlir::bigc::AdamWConfig adam;
  optimizerOptions(args, adam);
  o.lr = adam.lr;
  o.beta1 = adam.beta1;
  o.beta2 = adam.beta2;
  o.eps = adam.eps;
  o.weightDecay = adam.weightDecay;
  o.gradClip = adam.gradClip;
  if (args.has("--hardware")) {
    o.hardware = loadHardware(args.str("--hardware"));
    o.haveHardware = true;
  }
  o.deviceMemory = args.size("--device-mem", o.haveHardware ? o.hardware.deviceMemBytes : 0);
  o.hostMemory = args.size("--host-mem", o.haveHardware ? o.hardware.hostMemBytes : 0);
  if (args.has("--device-mem") && o.deviceMemory <= 0) throw UserError("option --device-mem: must be positive");
  if (args.has("--host-mem") && o.hostMemory <= 0) throw UserError("option --host-mem: must be positive");
  if (o.haveHardware) o.deviceReserveParts = o.hardware.deviceReserveParts;
  if (args.has("--device-reserve")) {
    o.deviceReserveParts = {{"--device-reserve", args.size("--device-reserve", 0)}};
    if (o.deviceReserveParts[0].second < 0) throw UserError("option --device-reserve: must be >= 0");
  }
  for (const auto &[part, b] : o.deviceReserveParts) o.deviceReserve += b;
  o.hostReserve = args.has("--host-reserve") ? args.size("--host-reserve", 0)
                  : o.haveHardware           ? o.hardware.hostReserveBytes
                                             : 0;
  if (o.hostReserve < 0) throw UserError("option --host-reserve: must be >= 0");
  auto usable = [](int64_t mem, int64_t reserve, const char *what, const char *memOpt, const char *resOpt) -> int64_t {
    if (mem <= 0) return 0;
    if (reserve >= mem)
      throw UserError(std::string("the ") + what + " reserve (" + humanBytes(reserve) + ") leaves nothing of the " +
                      humanBytes(mem) + " of " + what + " memory for the plan; lower " + resOpt + " or raise " + memOpt);
    return mem - reserve;
  };
  o.deviceCapacity = usable(o.deviceMemory, o.deviceReserve, "device", "--device-mem", "--device-reserve");
  o.hostCapacity = usable(o.hostMemory, o.hostReserve, "host", "--host-mem", "--host-reserve");
  o.precision = args.str("--precision", o.precision);
  o.microBatches = args.integer("--micro-batches", o.microBatches);
  if (args.has("--loss-scale")) {
    o.lossScaleInit = args.number("--loss-scale", o.lossScaleInit);
    if (!(o.lossScaleInit > 0) || std::isinf(o.lossScaleInit))
      throw UserError("option --loss-scale: must be a positive finite number, got " + args.str("--loss-scale"));
    if (o.precision != "fp16")
      throw UserError("option --loss-scale: loss scaling is for --precision fp16 only (got --precision " +
                      o.precision + ")");
  }
  if (args.has("--loss-scale-window")) {
    o.lossScaleGrowthInterval = args.integer("--loss-scale-window", o.lossScaleGrowthInterval);
    if (o.lossScaleGrowthInterval < 1)
      throw UserError("option --loss-scale-window: must be at least 1, got " + args.str("--loss-scale-window"));
    if (o.precision != "fp16")
      throw UserError("option --loss-scale-window: loss scaling is for --precision fp16 only (got --precision " +
                      o.precision + ")");
  }
  o.recompute = args.str("--recompute", o.recompute);
  o.offload = args.str("--offload", o.offload);
  o.offloadParams = args.str("--offload-params", o.offloadParams);
  if (args.has("--memory-budget")) {
    o.memoryBudget = args.size("--memory-budget", 0);
    if (o.memoryBudget <= 0) throw UserError("option --memory-budget: must be positive");
  }
  if (o.memoryBudget > 0 && o.recompute != "auto")
    throw UserError("option --memory-budget: only with --recompute auto (it is the device memory the recompute "
                    "search must fit; got --recompute " + o.recompute + "); to check a plan against a size, use "
                    "--device-mem");
  if (o.recompute == "auto" && o.memoryBudget <= 0 && o.deviceCapacity <= 0)
    throw UserError("--recompute auto needs --memory-budget or --hardware/--device-mem");
  o.ranks = args.integer("--ranks", o.haveHardware ? std::max<int64_t>(1, o.hardware.devices) : 1);
  o.zero = args.integer("--zero", 0);
  o.tp = args.integer("--tp", 1);
  o.sequenceParallel = args.has("--sequence-parallel");
  if (o.tp > 1 && o.ranks % o.tp != 0)
    throw UserError("option --tp " + std::to_string(o.tp) + " does not divide --ranks " + std::to_string(o.ranks) +
                    ": the mesh is dp x tp x pp = ranks (use --ranks " +
                    std::to_string(o.tp * std::max<int64_t>(1, (o.ranks + o.tp - 1) / o.tp)) + " or a --tp that divides " +
                    std::to_string(o.ranks) + ")");
  if (o.sequenceParallel && o.tp == 1)
    throw UserError("option --sequence-parallel needs --tp N with N > 1 (it splits the sequence over the tensor ranks)");
  if (args.has("--bucket-mb")) {
    o.bucketMb = args.number("--bucket-mb", o.bucketMb);
    if (!(o.bucketMb >= 0) || std::isinf(o.bucketMb))
      throw UserError("option --bucket-mb: must be a number >= 0 (0: one collective per tensor), got " +
                      args.str("--bucket-mb"));
  }
  if (args.has("--prefetch")) {
    o.prefetch = args.integer("--prefetch", 1);
    if (o.prefetch < 0) throw UserError("option --prefetch: must be >= 0, got " + args.str("--prefetch"));
  }
  if (o.offload == "cpu" && o.zero >= 1 && o.offloadParams == "host")
    throw UserError("option --offload-params host: not with --zero " + std::to_string(o.zero) +
                    " in this version (ZeRO shards the weights over the ranks' devices; use --zero 3 to hold "
                    "1/ranks of them per device)");
  if (o.offload == "cpu" && o.zero >= 1) o.offloadParams = "device";
  return o;
}

} // namespace

void chooseOffloadParams(mlir::ModuleOp parsed, CompileOptions &o) {
  if (o.offload != "cpu" || o.offloadParams != "auto") return;
  o.offloadParams = "device";
  if (o.deviceCapacity <= 0) return; // nothing to fit: the weights stay on the device
  rt::Program p = compileToProgram(parsed, o);
  const rt::Space *dev = p.space("device");
  if (!dev || dev->arenaBytes <= o.deviceCapacity) return;
  o.offloadParams = "host";
  if (!o.quiet)
    std::printf("bigc compile: --offload cpu: with the weights on the device the plan needs %s of device memory, "
                "%s available: the weights stay on the host between uses (ZeRO-3-Offload)\n",
                humanBytes(dev->arenaBytes).c_str(), humanBytes(o.deviceCapacity).c_str());
}

namespace {

// --recompute auto: the smallest number N of ranked recomputation candidates (bigc-recompute
// policy=auto drop=N) whose planned device arena fits the budget (--memory-budget, else the
// device's capacity). The arena mostly shrinks as N grows, but not strictly (recomputing a whole
// block at the start of its backward can peak higher than keeping a few of its values), so: try
// everything recomputed (N = all, which is --recompute full), and if that does not fit a few
// evenly spaced N; if none fits, no schedule does (the least arena seen is named); else bisect
// between 0 and the smallest N found to fit, about log2(candidates) compiles in all. Sets
// o.recomputeDrop. `budgetFromHardware`: the budget is the profile's device memory.
void chooseRecompute(mlir::ModuleOp parsed, CompileOptions &o, bool budgetFromHardware) {
  int64_t budget = o.memoryBudget > 0 ? o.memoryBudget : o.deviceCapacity;
  if (budget <= 0) throw UserError("--recompute auto needs --memory-budget or --hardware/--device-mem");
  std::string budgetName = o.memoryBudget > 0 ? "--memory-budget " + humanBytes(budget)
                           : budgetFromHardware ? "the device memory of " + o.hardware.name + ", " + humanBytes(budget)
                                                : "--device-mem " + humanBytes(budget);
  // Every candidate is a forward op of a transformer block (per micro-batch): their count bounds N.
  int64_t upper = 0;
  if (auto fwd = parsed.lookupSymbol<mlir::func::FuncOp>("forward"))
    fwd.walk([&](mlir::Operation *op) {
      if (!llvm::isa<mlir::bigc::GetParamOp>(op) && op->getNumResults() > 0 && op->hasAttr("bigc.layer")) ++upper;
    });
  upper *= std::max<int64_t>(1, o.microBatches);
  std::map<int64_t, int64_t> arenas; // N -> planned device arena
  auto fits = [&](int64_t n) {
    auto it = arenas.find(n);
    if (it != arenas.end()) return it->second <= budget;
    CompileOptions t = o;
    t.recomputeDrop = n;
    t.quiet = true;
    rt::Program p = compileToProgram(parsed, t);
    int64_t arena = p.space("device")->arenaBytes;
    arenas[n] = arena;
    if (!o.quiet) {
      std::string what = n == upper ? std::string("everything recomputed")
                                     : "the first " + std::to_string(n) + " candidates recomputed";
      std::printf("bigc compile: recompute auto: %s: device arena %s, %s the budget\n", what.c_str(),
                  humanBytes(arena).c_str(), arena <= budget ? "within" : "over");
      std::fflush(stdout);
    }
    return arena <= budget;
  };
  int64_t hi = -1; // the smallest N known to fit
  if (fits(upper)) hi = upper;
  for (int64_t k = 7; hi < 0 && k >= 1; --k)
    if (upper * k / 8 > 0 && fits(upper * k / 8)) hi = upper * k / 8;
  if (hi < 0 && fits(0)) hi = 0;
  if (hi < 0) {
    auto least = std::min_element(arenas.begin(), arenas.end(),
                                  [](const auto &a, const auto &b) { return a.second < b.second; });
    if (arenas[upper] == least->second) least = arenas.find(upper); // name the simplest schedule
    std::string how = least->first == upper ? std::string("with everything recomputed")
                      : least->first == 0   ? std::string("with nothing recomputed")
                                            : "recomputing the first " + std::to_string(least->first) +
                                                " ranked candidates; everything recomputed: " +
                                                humanBytes(arenas[upper]);
    throw UserError("the memory budget (" + budgetName +
                    ") is smaller than any recomputation schedule reaches: the minimum is " +
                    humanBytes(least->second) + " (" + how +
                    "); raise --memory-budget or --device-mem, or make the rest smaller (--precision bf16, "
                    "--offload cpu, --micro-batches, a smaller --batch or --seq)");
  }
  int64_t lo = 0; // does not fit, or hi == 0
  if (hi > 0 && fits(0)) hi = 0;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  o.recomputeDrop = hi;
  if (!o.quiet) {
    std::printf("bigc compile: recompute auto: recomputing the first %lld ranked candidates fits %s\n",
                (long long)hi, budgetName.c_str());
    std::fflush(stdout);
  }
}

} // namespace

// The capacity check's candidates (lib/driver/Capacity.cpp, declared in Capacity.h): the choices
// compileMain makes before the pipeline (--recompute auto, offloaded weights), then the pipeline.
rt::Program compileWithChoices(mlir::ModuleOp parsed, CompileOptions o) {
  o.quiet = true;
  if (o.recompute == "auto" && o.recomputeDrop < 0) chooseRecompute(parsed, o, false);
  chooseOffloadParams(parsed, o);
  return compileToProgram(parsed, o);
}

rt::Program compileSource(const std::string &text, const std::string &name, CompileOptions o,
                          std::string *diagnostics) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::bigc::BigcDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading();
  ctx.printOpOnDiagnostic(false);
  ctx.loadAllAvailableDialects();
  std::string diags;
  llvm::raw_string_ostream os(diags);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, name), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx, os);
  auto done = [&] {
    os.flush();
    if (diagnostics) *diagnostics = diags;
  };
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(sm, mlir::ParserConfig(&ctx));
  if (!module || mlir::failed(mlir::verify(*module)) || mlir::failed(checkInterface(*module))) {
    done();
    throw UserError(name + " is not a valid model");
  }
  o.quiet = true;
  try {
    rt::Program p = compileWithChoices(*module, o);
    done();
    return p;
  } catch (const InternalError &e) {
    done();
    throw std::runtime_error(e.what());
  } catch (...) {
    done();
    throw;
  }
}

int compileMain(int argc, char **argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  auto t0 = std::chrono::steady_clock::now();
  cli::Args args = cli::parse(argc, argv, first, kValued, kSwitches, "compile");
  if (args.positional.empty())
    throw UserError("compile: no model file given (usage: bigc compile model.mlir -o model.bigc; see --help)");
  if (args.positional.size() > 1)
    throw UserError("compile: one model file expected, got " + std::to_string(args.positional.size()) + " ('" +
                    args.positional[0] + "', '" + args.positional[1] + "', ...)");
  CompileOptions opts = parseOptions(args);
  if (opts.zero > 0 && opts.ranks == 1 && !opts.quiet)
    std::printf("bigc compile: note: --zero %lld with one rank shards nothing (a no-op); use --ranks N or a "
                "--hardware profile with several devices\n",
                (long long)opts.zero);
  const std::string &input = opts.input, &output = opts.output;
  const bool quiet = opts.quiet;
  const bool haveHw = opts.haveHardware;
  const HardwareProfile &hw = opts.hardware;
  const int64_t deviceCap = opts.deviceCapacity;

  // Parse and verify, with located diagnostics (model.mlir:LINE:COL: error: ...).
  auto fileOrErr = llvm::MemoryBuffer::getFile(input, /*IsText=*/true);
  if (std::error_code ec = fileOrErr.getError())
    throw UserError("compile: cannot read the model file '" + input + "': " + ec.message());
  mlir::DialectRegistry registry;
  registry.insert<mlir::bigc::BigcDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading();
  ctx.printOpOnDiagnostic(false); // the source line is shown; the generic form would be noise
  ctx.loadAllAvailableDialects();
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(*fileOrErr), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler diag(sm, &ctx, llvm::errs());

  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(sm, mlir::ParserConfig(&ctx));
  if (!module) {
    llvm::errs() << "bigc compile: " << input << " is not a valid model (errors above); nothing written\n";
    return 1;
  }
  if (mlir::failed(mlir::verify(*module)) || mlir::failed(checkInterface(*module))) {
    llvm::errs() << "bigc compile: " << input << " is not a valid model (errors above); nothing written\n";
    return 1;
  }
  auto tParsed = std::chrono::steady_clock::now();
  try {
    resolveInitialWeights(*module, opts);
  } catch (const UserError &e) {
    std::fprintf(stderr, "bigc compile: %s: %s; nothing written\n", input.c_str(), e.what());
    return 1;
  }

  // --global-batch: the ranks must divide it into the model's batch per rank and K micro-batches.
  if (args.has("--global-batch")) {
    const int64_t g = args.integer("--global-batch", 0);
    auto fwd = module->lookupSymbol<mlir::func::FuncOp>("forward");
    const int64_t b = llvm::cast<mlir::RankedTensorType>(fwd.getFunctionType().getInput(0)).getDimSize(0);
    const int64_t dpRanks = opts.ranks / std::max<int64_t>(1, opts.tp); // tensor ranks share their batch
    const int64_t per = dpRanks * opts.microBatches;
    std::string what = std::to_string(dpRanks) + (opts.tp > 1 ? " data-parallel" : "") + " rank(s) x " +
                       std::to_string(opts.microBatches) + " micro-batch(es)";
    if (g < 1 || g % per != 0) {
      std::fprintf(stderr,
                   "bigc compile: %s: option --global-batch %lld: %s do not divide it (the global batch is ranks x "
                   "batch x micro-batches); use a multiple of %lld, or another --ranks / --micro-batches\n",
                   input.c_str(), (long long)g, what.c_str(), (long long)per);
      return 1;
    }
    if (g / per != b) {
      std::fprintf(stderr,
                   "bigc compile: %s: option --global-batch %lld with %s needs a batch of %lld sequences per rank; the "
                   "model's is %lld (regenerate it with bigc gen gpt --batch %lld, or change --ranks / "
                   "--micro-batches)\n",
                   input.c_str(), (long long)g, what.c_str(), (long long)(g / per), (long long)b, (long long)(g / per));
      return 1;
    }
  }

  rt::Program program;
  try {
    // [choices the compiler makes before the final pipeline: --recompute auto, offloaded parameters]
    // --offload cpu: the weights go to the host only when the plan with the most recomputation
    // (recompute auto is still undecided: drop -1 recomputes everything) cannot hold them; the
    // recompute search then runs with that choice.
    chooseOffloadParams(*module, opts);
    if (opts.recompute == "auto" && opts.recomputeDrop < 0) chooseRecompute(*module, opts, haveHw && !args.has("--device-mem"));
    program = compileToProgram(*module, opts);
  } catch (const InternalError &e) {
    std::fprintf(stderr, "bigc compile: %s; nothing written\n", e.what());
    return 2;
  } catch (const UserError &e) {
    std::fprintf(stderr, "bigc compile: %s: %s\n", input.c_str(), e.what());
    return 1;
  }
  std::string bytes = rt::serializeProgram(program);
  auto tEmitted = std::chrono::steady_clock::now();

  const rt::Space &dev = *program.space("device");
  int64_t peakAt = 0;
  std::vector<RoleUsage> usage = peakUsageByRole(program, "device", &peakAt);
  const int64_t nParams = program.parameterCount();

  // Capacity check (lib/driver/Capacity.cpp): every memory space against its capacity; when one
  // does not fit, the table of CLI.md with the option sets that do fit (compiled to be sure).
  if (!allFit(checkFit(program, opts))) {
    std::string report = notFitReport(*module, program, opts);
    std::fputs(report.c_str(), stderr);
    return 1;
  }

  rt::writeFileAtomic(output, bytes);
  auto tEnd = std::chrono::steady_clock::now();

  if (!quiet) {
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::ostringstream os;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f",
                  dev.lowerBoundBytes > 0 ? double(dev.arenaBytes) / double(dev.lowerBoundBytes) : 1.0);
    os << "bigc compile: " << input << " -> " << output << "\n";
    os << "  parameters    " << withCommas(nParams) << " (" << humanBytes(nParams * 4) << " fp32)\n";
    os << "  program       " << withCommas(int64_t(program.instructions.size())) << " instructions, "
       << withCommas(int64_t(program.buffers.size())) << " buffers, batch " << program.batch << " x seq "
       << program.seq << "\n";
    os << "  device arena  " << humanBytes(dev.arenaBytes) << " (lower bound " << humanBytes(dev.lowerBoundBytes)
       << ", ratio " << ratio << ")";
    if (deviceCap > 0) {
      os << ", " << humanBytes(deviceCap) << " available" << (haveHw ? " on " + hw.name : std::string());
      if (opts.deviceReserve > 0)
        os << " (" << humanBytes(opts.deviceMemory) << " less a reserve of " << humanBytes(opts.deviceReserve) << ")";
    }
    os << "\n  at the peak  ";
    for (const auto &u : usage) os << " " << u.role << " " << humanBytes(u.bytes) << ";";
    os << "\n";
    if (const rt::Space *host = program.space("host")) {
      os << "  host arena    " << humanBytes(host->arenaBytes) << " (lower bound " << humanBytes(host->lowerBoundBytes)
         << ")";
      if (opts.hostCapacity > 0) {
        os << ", " << humanBytes(opts.hostCapacity) << " available"
           << (haveHw && !args.has("--host-mem") ? " on " + hw.name : std::string(" (--host-mem)"));
        if (opts.hostReserve > 0)
          os << " (" << humanBytes(opts.hostMemory) << " less a reserve of " << humanBytes(opts.hostReserve) << ")";
      }
      os << "\n  at the peak  ";
      for (const auto &u : peakUsageByRole(program, "host")) os << " " << u.role << " " << humanBytes(u.bytes) << ";";
      os << "\n";
    }
    char times[160];
    std::snprintf(times, sizeof times, "  time          %.2f s (parse %.2f, passes and emit %.2f, write %.2f)\n",
                  secs(t0, tEnd), secs(t0, tParsed), secs(tParsed, tEmitted), secs(tEmitted, tEnd));
    os << times;
    if (program.ranks > 1) {
      os << "  ranks         " << program.ranks << " (data parallel, ZeRO " << program.zero
         << "): the device arena is per rank";
      if (const rt::Space *host = program.space("host"))
        os << "; host " << humanBytes(host->arenaBytes * program.ranks) << " for the " << program.ranks << " ranks";
      os << "\n";
    }
    if (program.estimate.present) {
      os << "  estimate      " << durationStr(program.estimate.stepSeconds) << " per step on " << hw.name
         << " (compute " << durationStr(program.estimate.computeSeconds) << ")";
      for (const auto &c : program.estimate.collectives) {
        char buf[64];
        std::snprintf(buf, sizeof buf, ", %.0f%% hidden", c.seconds > 0 ? 100.0 * c.hiddenSeconds / c.seconds : 100.0);
        os << "; " << c.op << " " << durationStr(c.seconds) << buf;
        if (c.queuedSeconds > 0) os << ", " << durationStr(c.queuedSeconds) << " queued";
      }
      os << "\n";
    }
    std::fputs(os.str().c_str(), stdout);
  }
  return 0;
}

} // namespace bigc
