//===- Compile.cpp - `bigc compile` ---------------------------------------===//
//
// model.mlir -> model.bigc: the option table (each flag once), parse + verify,
// the choices and the pipeline (Capacity.cpp, Pipeline.cpp), check the plan
// against the device's capacity, write atomically. Exit status: 0 written; 1 the input or an
// option is wrong, or the plan does not fit (with a table); 2 internal
// error. Nothing is written on any failure.
//
//===----------------------------------------------------------------------===//

#include "bigc/Driver/Compile.h"
#include "bigc/Format/verifier.h"
#include "bigc/Driver/Capacity.h"
#include "bigc/Driver/Auto.h"
#include "bigc/Driver/EvalPlan.h"
#include "bigc/Passes/TrainOptions.h"

#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Format/program.h"
#include "bigc/Format/writer.h"
#include "bigc/Format/safetensors.h"
#include "bigc/Format/shape.h"
#include "bigc/Support/cli.h"
#include "bigc/Support/format.h"
#include "bigc/Support/hardware.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace bigc {

using format::UserError;
using mlir::bigc::Offload;
using mlir::bigc::OffloadGrads;
using mlir::bigc::OffloadParams;
using mlir::bigc::PpSchedule;
using mlir::bigc::Precision;
using mlir::bigc::RecomputePolicy;
using mlir::bigc::toString;

namespace {

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
  if (tok.getDimSize(0) < 1 || tok.getDimSize(1) < 1)
    return fwd.emitError("@forward's batch and sequence must be at least 1, got tensor<")
           << tok.getDimSize(0) << "x" << tok.getDimSize(1) << "xi32> (re-import or regenerate the model with a batch "
           << "of at least one sequence of at least one token)";
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
  // The module attributes that name the model as its authors' tools do (bigc import and bigc gen
  // write them): bigc.aliases {"weight" = ["other name", ...]}, bigc.hf_config "JSON object",
  // bigc.hf_prefix "prefix.".
  if (mlir::Attribute a = module->getAttr("bigc.aliases")) {
    auto dict = llvm::dyn_cast<mlir::DictionaryAttr>(a);
    if (!dict) return module.emitError("bigc.aliases must be a dictionary {\"weight\" = [\"alias\", ...]}");
    for (mlir::NamedAttribute e : dict) {
      auto p = module.lookupSymbol<mlir::bigc::ParamOp>(e.getName().getValue());
      auto list = llvm::dyn_cast<mlir::ArrayAttr>(e.getValue());
      if (!p || !list || !llvm::all_of(list, [](mlir::Attribute x) { return llvm::isa<mlir::StringAttr>(x); }))
        return module.emitError("bigc.aliases: '")
               << e.getName().getValue() << "' must be a bigc.param of the model with an array of names";
      for (mlir::Attribute x : list)
        if (module.lookupSymbol<mlir::bigc::ParamOp>(llvm::cast<mlir::StringAttr>(x).getValue()))
          return module.emitError("bigc.aliases: '")
                 << llvm::cast<mlir::StringAttr>(x).getValue() << "' is a parameter of its own, not another name of '"
                 << e.getName().getValue() << "'";
    }
  }
  if (mlir::Attribute a = module->getAttr("bigc.hf_config")) {
    auto str = llvm::dyn_cast<mlir::StringAttr>(a);
    if (!str || !nlohmann::json::accept(str.getValue().str()) ||
        !nlohmann::json::parse(str.getValue().str()).is_object())
      return module.emitError("bigc.hf_config must be a string holding a JSON object (a Hugging Face config.json)");
  }
  if (mlir::Attribute a = module->getAttr("bigc.weights_names")) { // {"weight" = "its name in bigc.weights"}
    auto dict = llvm::dyn_cast<mlir::DictionaryAttr>(a);
    if (!dict) return module.emitError("bigc.weights_names must be a dictionary {\"weight\" = \"name in the file\"}");
    for (mlir::NamedAttribute e : dict)
      if (!module.lookupSymbol<mlir::bigc::ParamOp>(e.getName().getValue()) ||
          !llvm::isa<mlir::StringAttr>(e.getValue()))
        return module.emitError("bigc.weights_names: '")
               << e.getName().getValue() << "' must be a bigc.param of the model with a name (a string)";
  }
  if (mlir::Attribute a = module->getAttr("bigc.buffers")) { // ["the module's persistent buffer", ...]
    auto list = llvm::dyn_cast<mlir::ArrayAttr>(a);
    if (!list || !llvm::all_of(list, [](mlir::Attribute x) { return llvm::isa<mlir::StringAttr>(x); }))
      return module.emitError("bigc.buffers must be an array of names (the module's persistent buffers)");
    for (mlir::Attribute x : list)
      if (module.lookupSymbol<mlir::bigc::ParamOp>(llvm::cast<mlir::StringAttr>(x).getValue()))
        return module.emitError("bigc.buffers: '")
               << llvm::cast<mlir::StringAttr>(x).getValue() << "' is a parameter, not a buffer";
    if (!module->getAttr(mlir::bigc::kWeightsAttrName))
      return module.emitError("bigc.buffers needs bigc.weights (the file that holds them)");
  }
  if (mlir::Attribute a = module->getAttr("bigc.hf_prefix"); a && !llvm::isa<mlir::StringAttr>(a))
    return module.emitError("bigc.hf_prefix must be a string");
  return mlir::success();
}

// The module attribute `bigc.weights = "FILE"` (bigc import writes it; relative to the model file):
// the model's own initial weights, a safetensors file or a Hugging Face index of several (a
// published checkpoint bigc import hf --weights refers to where it is). The files must hold every
// weight of the model (bigc.param of role param, under its name or one of its bigc.aliases), with
// its shape and a float dtype, and nothing else but the buffers Hugging Face's older checkpoints
// carry; the resolved path goes into the program, which `bigc run` loads the weights from.
void resolveInitialWeights(mlir::ModuleOp module, CompileOptions &o) {
  auto attr = module->getAttrOfType<mlir::StringAttr>(mlir::bigc::kWeightsAttrName);
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
                    "' are not at " + path + " (bigc import writes them beside the model, or names the checkpoint " +
                    "it was given; put them there)");
  }
  const format::safetensors::Headers h = format::safetensors::readHeaders(path);
  std::map<std::string, const format::safetensors::Tensor *> byName;
  for (const auto &[t, file] : h.tensors()) byName[t->name] = t;
  // Every name a weight may come under: its own, then its bigc.aliases (a tied weight's others).
  std::map<std::string, std::vector<std::string>> namesOf;
  for (mlir::bigc::ParamOp p : module.getOps<mlir::bigc::ParamOp>())
    if (p.getRole() == "param") namesOf[p.getSymName().str()] = {p.getSymName().str()};
  if (auto d = module->getAttrOfType<mlir::DictionaryAttr>("bigc.aliases"))
    for (mlir::NamedAttribute e : d)
      if (auto list = llvm::dyn_cast<mlir::ArrayAttr>(e.getValue()))
        for (mlir::Attribute x : list)
          if (auto s = llvm::dyn_cast<mlir::StringAttr>(x)) namesOf[e.getName().str()].push_back(s.str());
  // ... and its name in the file where that differs (bigc.weights_names: a checkpoint without the
  // base model's prefix, referred to as it is)
  o.initialNames.clear();
  if (auto d = module->getAttrOfType<mlir::DictionaryAttr>("bigc.weights_names"))
    for (mlir::NamedAttribute e : d)
      if (auto s = llvm::dyn_cast<mlir::StringAttr>(e.getValue())) {
        namesOf[e.getName().str()].push_back(s.str());
        o.initialNames[e.getName().str()] = s.str();
      }
  using format::shapeStr;
  const std::string &where = h.path;
  std::set<std::string> known;
  for (mlir::bigc::ParamOp p : module.getOps<mlir::bigc::ParamOp>()) {
    if (p.getRole() != "param") continue;
    const std::string name = p.getSymName().str();
    const std::vector<int64_t> shape(p.getTensorType().getShape().begin(), p.getTensorType().getShape().end());
    const format::safetensors::Tensor *t = nullptr;
    for (const std::string &n : namesOf[name]) {
      known.insert(n);
      if (auto it = byName.find(n); it != byName.end() && !t) t = it->second;
    }
    if (!t) throw UserError(where + ": the weight '" + name + "' " + shapeStr(shape) + " of the model is missing");
    if (t->shape != shape)
      throw UserError(where + ": the weight '" + t->name + "' has shape " + shapeStr(t->shape) + ", the model's is " +
                      shapeStr(shape));
    if (t->dtype == format::DType::I32)
      throw UserError(where + ": the weight '" + t->name + "' is stored as I32; expected F32, BF16 or F16");
  }
  o.initialBuffers.clear();
  if (auto list = module->getAttrOfType<mlir::ArrayAttr>("bigc.buffers"))
    for (mlir::Attribute x : list) {
      const std::string name = llvm::cast<mlir::StringAttr>(x).str();
      auto it = byName.find(name);
      if (it == byName.end()) throw UserError(where + ": the module's buffer '" + name + "' (bigc.buffers) is missing");
      if (it->second->dtype == format::DType::I32)
        throw UserError(where + ": the module's buffer '" + name + "' is stored as I32; expected F32, BF16 or F16");
      known.insert(name);
      o.initialBuffers.push_back(name);
    }
  for (const auto &[name, t] : byName)
    if (!known.count(name) && !format::safetensors::isSavedBuffer(name))
      throw UserError(where + ": the tensor '" + name + "' is not a weight of the model");
  o.initialWeights = h.path;
  o.initialWeightsBytes = h.bytes();
}

std::string defaultOutput(const std::string &in) {
  std::string base = in;
  size_t slash = base.find_last_of('/');
  size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) base.resize(dot);
  return base + ".bigc";
}

// ----- the option table: each flag of `bigc compile` once -----

// The value of one flag as given: parsed by cli (its errors name the flag), and the failure of a
// check, named by the flag.
struct Value {
  const char *flag;
  const cli::Args &args;
  std::string text() const { return args.str(flag); }
  int64_t integer() const { return args.integer(flag, 0); }
  double number() const { return args.number(flag, 0); }
  int64_t size() const { return args.size(flag, 0); }
  template <typename E> E choice() const {
    if (std::optional<E> e = mlir::bigc::parseChoice<E>(text())) return *e;
    std::set<std::string> names; // listed in alphabetical order
    for (const auto &[e, name] : mlir::bigc::choiceNames<E>()) names.insert(name);
    std::string list;
    for (const auto &n : names) list += (list.empty() ? "" : ", ") + n;
    fail("unknown value '" + text() + "' (expected one of " + list + ")");
  }
  [[noreturn]] void fail(const std::string &what) const {
    throw UserError(std::string("option ") + flag + ": " + what);
  }
};

// One flag: its name, whether it takes a value, its line of --help (usage: the left column,
// nullptr for a flag --help does not list; help: the text, '\n' between lines) and what it does
// when given: parse, check, set its field. Defaults are CompileOptions' (or the --hardware
// profile's, which its entry sets before the flags after it).
struct Flag {
  const char *name;
  bool valued;
  const char *usage, *help;
  void (*set)(CompileOptions &, const Value &);
};

const Flag kFlags[] = {
    {"-o", true, "-o FILE", "the program to write (default: the model's name with .bigc)",
     [](CompileOptions &o, const Value &v) {
       o.output = v.text();
       if (o.output.empty()) throw UserError("compile: option -o needs a file name");
     }},
    {"--hardware", true, "--hardware NAME|FILE", "hardware profile (hardware/*.json) the plan must fit",
     [](CompileOptions &o, const Value &v) {
       o.hardware = loadHardware(v.text());
       o.haveHardware = true;
       o.deviceMemory = o.hardware.deviceMemBytes;
       o.hostMemory = o.hardware.hostMemBytes;
       o.deviceReserveParts = o.hardware.deviceReserveParts;
       o.hostReserve = o.hardware.hostReserveBytes;
       o.nvmeCapacity = o.hardware.nvmeBytes;
       o.ranks = std::max<int64_t>(1, o.hardware.devices);
     }},
    {"--device-mem", true, "--device-mem SIZE", "device memory per rank (overrides the profile), e.g. 16G",
     [](CompileOptions &o, const Value &v) {
       if ((o.deviceMemory = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--host-mem", true, "--host-mem SIZE", "host memory (overrides the profile)",
     [](CompileOptions &o, const Value &v) {
       if ((o.hostMemory = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--device-reserve", true, "--device-reserve SIZE",
     "device memory kept out of the plan for the CUDA context, workspaces\n"
     "and NCCL (default: the profile's, e.g. 1.4 GiB per 80 GB GPU; 0\n"
     "without --hardware); the plan must fit the memory less the reserve",
     [](CompileOptions &o, const Value &v) {
       o.deviceReserveParts = {{v.flag, v.size()}};
       if (o.deviceReserveParts[0].second < 0) v.fail("must be >= 0");
     }},
    {"--host-reserve", true, "--host-reserve SIZE",
     "host memory kept out of the plan for the OS and the process\n"
     "(default: the profile's, 4 GiB; 0 without --hardware)",
     [](CompileOptions &o, const Value &v) {
       if ((o.hostReserve = v.size()) < 0) v.fail("must be >= 0");
     }},
    {"", false, nullptr, nullptr, nullptr}, // the training pipeline's options: bindTrainOptions
    {"--lr-schedule", true, "--lr-schedule S",
     "the learning rate over the steps: constant (default), cosine,\n"
     "linear or wsd (warmup, stable, then a linear decay over the last\n"
     "--wsd-decay-steps before --decay-steps); each after a linear warmup\n"
     "of --warmup-steps, and --min-lr from --decay-steps on",
     [](CompileOptions &o, const Value &v) {
       const std::string k = v.text();
       if (k != "constant" && k != "cosine" && k != "linear" && k != "wsd")
         v.fail("unknown value '" + k + "' (expected one of constant, cosine, linear, wsd)");
       o.schedule.kind = k;
     }},
    {"--warmup-steps", true, "--warmup-steps N", "steps of linear warmup: step i (from 0) at lr x (i+1)/N (0)",
     [](CompileOptions &o, const Value &v) {
       if ((o.schedule.warmupSteps = v.integer()) < 0) v.fail("must be >= 0, got " + v.text());
     }},
    {"--decay-steps", true, "--decay-steps N",
     "--lr-schedule cosine|linear|wsd: the step at which the decay ends,\n"
     "counted from the start, warmup included (nanoGPT's lr_decay_iters,\n"
     "Megatron's --lr-decay-iters): usually the run's --steps",
     [](CompileOptions &o, const Value &v) {
       if ((o.schedule.decaySteps = v.integer()) < 1) v.fail("must be at least 1, got " + v.text());
     }},
    {"--min-lr", true, "--min-lr F", "the rate the decay ends at, and holds after --decay-steps (0)",
     [](CompileOptions &o, const Value &v) {
       if (!((o.schedule.minLr = v.number()) >= 0) || o.schedule.minLr > double(FLT_MAX))
         v.fail("must be a number >= 0, got " + v.text());
     }},
    {"--wsd-decay-steps", true, "--wsd-decay-steps N",
     "--lr-schedule wsd: the length of the final decay (Megatron's\n"
     "--lr-wsd-decay-iters); the rate is flat from warmup until then",
     [](CompileOptions &o, const Value &v) {
       if ((o.schedule.wsdDecaySteps = v.integer()) < 1) v.fail("must be at least 1, got " + v.text());
     }},
    {"--memory-budget", true, "--memory-budget SIZE",
     "--recompute auto: device bytes the plan must fit (default: the\n"
     "device memory of --hardware / --device-mem)",
     [](CompileOptions &o, const Value &v) {
       if ((o.memoryBudget = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--nvme-path", true, "--nvme-path DIR",
     "--offload nvme: the directory of the nvme space (a scratch file per\n"
     "rank; `bigc run --nvme-path` may name another)",
     [](CompileOptions &o, const Value &v) {
       if ((o.nvmePath = v.text()).empty()) v.fail("needs a directory");
     }},
    {"--nvme-mem", true, "--nvme-mem SIZE", "--offload nvme: the drives' capacity (overrides the profile)",
     [](CompileOptions &o, const Value &v) {
       if ((o.nvmeCapacity = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--offload-grads-limit", true, "--offload-grads-limit SIZE",
     "--offload-grads nvme: at most SIZE bytes of a rank's gradients wait on\n"
     "the drive (the first updates'), the rest on the host (default: all;\n"
     "--offload-grads auto sets it to what the host cannot hold)",
     [](CompileOptions &o, const Value &v) {
       if ((o.offloadGradsLimit = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--tile-linear", true, "--tile-linear SIZE",
     "--zero 3: each linear layer's weight larger than SIZE (as its\n"
     "compute copy) used as row tiles of at most SIZE, each gathered,\n"
     "used and its gradient reduce-scattered alone (ZeRO-Infinity's\n"
     "memory-centric tiling: a device holds a tile of such a weight, not\n"
     "all of it)",
     [](CompileOptions &o, const Value &v) {
       if ((o.tileBytes = v.size()) <= 0) v.fail("must be positive");
     }},
    {"--global-batch", true, "--global-batch N",
     "check that N = ranks x batch x K sequences per step (DeepSpeed's\n"
     "train_batch_size): a clear error naming the batch per rank otherwise",
     [](CompileOptions &o, const Value &v) { o.globalBatch = v.integer(); }},
    {"--emit-mlir", true, "--emit-mlir FILE",
     "also write the IR the passes end with to FILE (-: stdout); its line\n"
     "`// reproduce:` is the bigc-opt --bigc-train-pipeline command that\n"
     "runs the same passes with the same options to the same IR",
     [](CompileOptions &o, const Value &v) { o.emitMlir = v.text(); }},
    {"--auto", false, "--auto",
     "choose the mesh (--ranks, --tp, --pp), --zero, --micro-batches,\n"
     "--recompute and --offload from compiled plans ranked by the\n"
     "cost model (needs --hardware; the global batch of the command\n"
     "line and every other option kept; a flag given pins its choice)",
     [](CompileOptions &o, const Value &) { o.autoSearch = true; }},
    {"--auto-seconds", true, "--auto-seconds S",
     "--auto: the seconds the search may spend compiling (default 25; 0:\n"
     "no limit); the candidates left when they are spent are named, not\n"
     "compiled (so a slower machine may pick among fewer)",
     [](CompileOptions &o, const Value &v) {
       o.autoSeconds = v.number();
       if (!(o.autoSeconds >= 0)) v.fail("must be a number of seconds >= 0 (0: no limit), got " + v.text());
     }},
    {"--pareto", true, "--pareto FILE.svg", "--auto: draw the plans that fit, device memory against step time",
     [](CompileOptions &o, const Value &v) {
       o.paretoSvg = v.text();
       if (o.paretoSvg.empty()) v.fail("needs a file name");
     }},
    {"--quiet", false, "--quiet", "print nothing on success", [](CompileOptions &o, const Value &) { o.quiet = true; }},
    {"--help", false, nullptr, nullptr, nullptr}, // compileMain answers it first
};

// The training pipeline's options (bindTrainOptions, TrainOptions.h): `bigc compile --NAME`.
struct TableEntry {
  std::string flag, usage, help;
  bool valued;
};
struct TableLister {
  std::vector<TableEntry> entries;
  template <typename T> void option(const mlir::bigc::OptionInfo &info, T &, const mlir::bigc::Check<T> &) {
    if (!info.compileFlag) return;
    const std::string flag = std::string("--") + info.name;
    entries.push_back({flag, info.metavar ? flag + " " + info.metavar : flag, info.help, info.metavar != nullptr});
  }
};
const std::vector<TableEntry> &tableFlags() {
  static const std::vector<TableEntry> list = [] {
    TableLister l;
    mlir::bigc::TrainPipelineConfig c;
    mlir::bigc::bindTrainOptions(l, c);
    return l.entries;
  }();
  return list;
}
// Each of the table's flags the command line gives: parsed, checked, set.
struct TableSetter {
  const cli::Args &args;
  CompileOptions &o;
  template <typename T> void option(const mlir::bigc::OptionInfo &info, T &field, const mlir::bigc::Check<T> &check) {
    const std::string flag = std::string("--") + info.name;
    if (!info.compileFlag || !args.has(flag)) return;
    const Value v{flag.c_str(), args};
    if constexpr (std::is_same_v<T, bool>) {
      field = true;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      field = v.integer();
    } else if constexpr (std::is_same_v<T, double>) {
      field = v.number();
    } else if constexpr (std::is_enum_v<T>) {
      field = v.template choice<T>();
    } else { // a list of integers
      field.clear();
      std::string t = v.text(), item;
      std::stringstream ss(t);
      while (std::getline(ss, item, ',')) {
        char *end = nullptr;
        const long long x = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0') v.fail("expected numbers separated by commas, got '" + t + "'");
        field.push_back(x);
      }
    }
    if (const std::string why = check(field); !why.empty()) v.fail(why);
    o.given.insert(flag);
  }
};

std::string helpText() {
  std::string h = "usage: bigc compile model.mlir -o model.bigc [options]\n"
                  "\n"
                  "Compiles a model graph (func.func @forward returning the loss, bigc dialect) into a\n"
                  "training program: backward (bigc-autodiff), AdamW updates, one schedule (bigc-schedule),\n"
                  "a memory plan with one offset per tensor (bigc-memory-plan), and writes the program file\n"
                  "(docs/program-format.md). Fails with a table, writing nothing, when the plan does not fit.\n"
                  "\n"
                  "options:\n";
  const size_t column = 24;
  std::vector<std::pair<std::string, std::string>> rows; // usage, help: the driver's, the table's at its marker
  for (const Flag &f : kFlags) {
    if (!f.name[0])
      for (const TableEntry &e : tableFlags()) rows.push_back({e.usage, e.help});
    else if (f.usage)
      rows.push_back({f.usage, f.help});
  }
  for (const auto &[usage, lines] : rows) {
    size_t start = 0;
    // A usage wider than the column goes on a line of its own.
    if (usage.size() + 1 > column) h += "  " + usage + "\n";
    for (bool first = usage.size() + 1 <= column;; first = false) {
      size_t nl = lines.find('\n', start);
      std::string line = lines.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      h += "  " + (first ? usage + std::string(column - usage.size(), ' ') : std::string(column, ' ')) + line + "\n";
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  h += "\n"
       "exit status: 0 written; 1 bad input or option, or the plan does not fit; 2 internal error\n";
  return h;
}

// The options of one command line: each flag given, in the table's order, then the checks that
// involve several flags.
CompileOptions parseOptions(const cli::Args &args) {
  CompileOptions o;
  o.input = args.positional[0];
  o.output = defaultOutput(o.input);
  for (const Flag &f : kFlags)
    if (f.set && args.has(f.name)) {
      f.set(o, Value{f.name, args});
      o.given.insert(f.name);
    }
  { // the pipeline's options, after the driver's (--hardware sets the default --ranks first)
    TableSetter t{args, o};
    mlir::bigc::bindTrainOptions(t, o);
  }
  if (o.autoSearch && !o.haveHardware)
    throw UserError("option --auto needs --hardware NAME|FILE: the machine's memory and speeds are what it chooses by");
  { // the schedule's flags together
    const format::LrSchedule &sc = o.schedule;
    const bool decays = sc.kind != "constant";
    if (!decays)
      for (const char *f : {"--decay-steps", "--min-lr", "--wsd-decay-steps"})
        if (args.has(f))
          throw UserError(std::string("compile: option ") + f + " shapes a decaying rate; add --lr-schedule cosine, " +
                          "linear or wsd (or drop it)");
    if (decays && !args.has("--decay-steps"))
      throw UserError("compile: --lr-schedule " + sc.kind +
                      " needs --decay-steps N: the step at which the decay ends (usually the run's --steps)");
    if (decays && sc.decaySteps <= sc.warmupSteps)
      throw UserError("compile: --warmup-steps " + std::to_string(sc.warmupSteps) + " is not below --decay-steps " +
                      std::to_string(sc.decaySteps) +
                      ": the warmup must end before the decay does (--decay-steps counts from the start, warmup "
                      "included)");
    if (sc.minLr > o.adamw.lr) {
      char b[96];
      std::snprintf(b, sizeof b, "compile: --min-lr %g exceeds --lr %g (the rate decays to --min-lr)", sc.minLr,
                    o.adamw.lr);
      throw UserError(b);
    }
    if (sc.kind == "wsd" && !args.has("--wsd-decay-steps"))
      throw UserError("compile: --lr-schedule wsd needs --wsd-decay-steps N: the length of its final decay");
    if (sc.kind != "wsd" && args.has("--wsd-decay-steps"))
      throw UserError("compile: option --wsd-decay-steps belongs to --lr-schedule wsd");
    if (sc.kind == "wsd" && sc.wsdDecaySteps > sc.decaySteps - sc.warmupSteps)
      throw UserError("compile: --wsd-decay-steps " + std::to_string(sc.wsdDecaySteps) + " is longer than the " +
                      std::to_string(sc.decaySteps - sc.warmupSteps) +
                      " steps between the warmup's end and --decay-steps");
  }
  if (args.has("--auto-seconds") && !o.autoSearch)
    throw UserError("compile: option --auto-seconds bounds the search of --auto; add --auto (or drop it)");
  if (!o.paretoSvg.empty() && !o.autoSearch)
    throw UserError("option --pareto: only with --auto (it draws the plans the search compiled)");

  for (const auto &[part, b] : o.deviceReserveParts) o.deviceReserve += b;
  auto usable = [](int64_t mem, int64_t reserve, const char *what, const char *memOpt, const char *resOpt) -> int64_t {
    if (mem <= 0) return 0;
    if (reserve >= mem)
      throw UserError(std::string("the ") + what + " reserve (" + humanBytes(reserve) + ") leaves nothing of the " +
                      humanBytes(mem) + " of " + what + " memory for the plan; lower " + resOpt + " or raise " +
                      memOpt);
    return mem - reserve;
  };
  o.deviceCapacity = usable(o.deviceMemory, o.deviceReserve, "device", "--device-mem", "--device-reserve");
  o.hostCapacity = usable(o.hostMemory, o.hostReserve, "host", "--host-mem", "--host-reserve");
  if (args.has("--offload-params") && o.offload == Offload::None)
    throw UserError("option --offload-params: only with --offload cpu or nvme (it says where the weights live "
                    "between uses)");
  if (o.offload == Offload::NVMe && o.nvmePath.empty())
    throw UserError("option --offload nvme needs --nvme-path DIR: the directory on the NVMe drive where each rank "
                    "keeps its nvme space (a preallocated scratch file)");
  // (--auto searches the drive's plans when it has a directory on it)
  for (const char *opt : {"--nvme-path", "--nvme-mem", "--nvme-chunk", "--offload-grads", "--offload-grads-limit"})
    if (args.has(opt) && o.offload != Offload::NVMe && !o.autoSearch)
      throw UserError(std::string("option ") + opt + ": only with --offload nvme" +
                      (opt == std::string("--nvme-path") ? " (or --auto)" : ""));
  if (o.offload == Offload::NVMe && o.haveHardware && o.nvmeCapacity <= 0)
    throw UserError("option --offload nvme: the hardware profile " + o.hardware.name +
                    " has no NVMe drive (nvme_bytes, nvme_read_bytes_per_s); give --nvme-mem SIZE or use a profile "
                    "with one");
  if (o.offload == Offload::NVMe && !o.nvmePath.empty() && o.nvmePath[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) o.nvmePath = std::string(cwd) + "/" + o.nvmePath; // as the run will see it
  }
  for (const char *opt : {"--loss-scale", "--loss-scale-window"})
    if (args.has(opt) && o.precision != Precision::FP16)
      throw UserError(std::string("option ") + opt + ": loss scaling is for --precision fp16 only (got --precision " +
                      toString(o.precision) + ")");
  if (o.memoryBudget > 0 && o.recompute != RecomputePolicy::Auto)
    throw UserError("option --memory-budget: only with --recompute auto (it is the device memory the recompute "
                    "search must fit; got --recompute " +
                    toString(o.recompute) +
                    "); to check a plan against a size, use "
                    "--device-mem");
  if (o.recompute == RecomputePolicy::Auto && o.memoryBudget <= 0 && o.deviceCapacity <= 0)
    throw UserError("--recompute auto needs --memory-budget or --hardware/--device-mem");
  if (o.tp > 1 && o.ranks % o.tp != 0)
    throw UserError("option --tp " + std::to_string(o.tp) + " does not divide --ranks " + std::to_string(o.ranks) +
                    ": the mesh is dp x tp x pp = ranks (use --ranks " +
                    std::to_string(o.tp * std::max<int64_t>(1, (o.ranks + o.tp - 1) / o.tp)) +
                    " or a --tp that divides " + std::to_string(o.ranks) + ")");
  if (o.pp > 1 && o.ranks % (o.tp * o.pp) != 0)
    throw UserError("option --pp " + std::to_string(o.pp) + (o.tp > 1 ? " with --tp " + std::to_string(o.tp) : "") +
                    " does not divide --ranks " + std::to_string(o.ranks) +
                    ": the mesh is dp x tp x pp = ranks (use --ranks " +
                    std::to_string(o.tp * o.pp * std::max<int64_t>(1, o.ranks / (o.tp * o.pp))) + ")");
  if (o.cp > 1 && o.ranks % (o.cp * o.tp * o.pp) != 0)
    throw UserError("option --cp " + std::to_string(o.cp) + " does not divide the data-parallel ranks: the mesh is " +
                    "dp x tp x pp = ranks with the cp ranks within dp, so --ranks must be a multiple of cp" +
                    (o.tp > 1 ? " x tp" : "") + (o.pp > 1 ? " x pp" : "") + " = " + std::to_string(o.cp * o.tp * o.pp) +
                    " (got --ranks " + std::to_string(o.ranks) + ")");
  if (args.has("--cp-kind") && o.cp == 1)
    throw UserError("option --cp-kind: only with --cp C, C > 1 (context parallelism)");
  if (args.has("--virtual-stages") && o.ppSchedule != PpSchedule::Interleaved)
    throw UserError("option --virtual-stages " + std::to_string(o.virtualStages) +
                    ": only with --pp-schedule interleaved (model chunks per stage)");
  if (o.ppSchedule == PpSchedule::Interleaved && mlir::bigc::virtualStagesOf(o) < 2)
    throw UserError("option --virtual-stages " + std::to_string(o.virtualStages) +
                    ": the interleaved schedule needs 2 or more model chunks per stage");
  if (o.pp > 1 && o.ppSchedule == PpSchedule::Interleaved && o.microBatches % o.pp != 0)
    throw UserError("option --pp-schedule interleaved: --micro-batches " + std::to_string(o.microBatches) +
                    " is not a multiple of --pp " + std::to_string(o.pp) +
                    " (the schedule runs the micro-batches in groups of P; use --micro-batches " +
                    std::to_string(o.pp * std::max<int64_t>(1, (o.microBatches + o.pp - 1) / o.pp)) + ")");
  for (const char *opt : {"--pp-schedule", "--pp-split", "--virtual-stages"})
    if (args.has(opt) && o.pp == 1)
      throw UserError(std::string("option ") + opt + ": only with --pp P, P > 1 (pipeline parallelism)");
  for (const char *opt : {"--pad-vocab", "--loss-chunk"})
    if (args.has(opt) && (opt == std::string("--pad-vocab") ? o.padVocab : o.lossChunk) < 1)
      throw UserError(std::string("option ") + opt + ": must be at least 1, got 0");
  if (args.has("--loss-chunk") && !o.fuseLoss)
    throw UserError("option --loss-chunk: only with --fuse-loss (it sets the fused loss's chunk of the vocabulary)");
  if (o.sequenceParallel && o.tp == 1)
    throw UserError(
        "option --sequence-parallel needs --tp N with N > 1 (it splits the sequence over the tensor ranks)");
  if (args.has("--offload-grads-limit")) {
    if (o.offloadGrads == OffloadGrads::Host)
      throw UserError("option --offload-grads-limit: only with --offload-grads nvme (it bounds the gradients sent to "
                      "the drive; --offload-grads host keeps them all on the host)");
    o.offloadGrads = OffloadGrads::Nvme;
  }
  if (o.offloadParams == OffloadParams::Nvme && o.offload != Offload::NVMe)
    throw UserError("option --offload-params nvme: only with --offload nvme --nvme-path DIR (the weights then live "
                    "on the drive with the optimizer's state)");
  if ((o.zero == 1 || o.zero == 2) &&
      (o.offloadParams == OffloadParams::Host || o.offloadParams == OffloadParams::Nvme))
    throw UserError("option --offload-params " + toString(o.offloadParams) + ": not with --zero " +
                    std::to_string(o.zero) + " (ZeRO " + std::to_string(o.zero) +
                    " keeps every weight whole on each device; use --zero 3, whose weight shards then live "
                    "off the device between uses, or --offload-params device)");
  if (o.offload != Offload::None && (o.zero == 1 || o.zero == 2)) o.offloadParams = OffloadParams::Device;
  if (args.has("--tile-linear") && !o.autoSearch) {
    const int64_t dp = o.ranks / std::max<int64_t>(1, o.tp * o.pp);
    if (o.zero != 3 || dp < 2)
      throw UserError("option --tile-linear: only with --zero 3 over 2 or more data-parallel ranks (each tile of a "
                      "weight is gathered from the ranks' shards on its own; got --zero " +
                      std::to_string(o.zero) + " over " + std::to_string(dp) + " data-parallel rank(s))");
    if (o.tp > 1)
      throw UserError("option --tile-linear: not with --tp " + std::to_string(o.tp) +
                      " (tensor parallelism splits the linear layers' weights already; use --tp or --tile-linear)");
  }
  return o;
}

} // namespace

const char *compileHelp() {
  static const std::string help = helpText();
  return help.c_str();
}

format::Program compileSource(const std::string &text, const std::string &name, CompileOptions o,
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
    format::Program p = compileWithChoices(*module, o);
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
      std::fputs(compileHelp(), stdout);
      return 0;
    }
  auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> valued, switches;
  for (const Flag &f : kFlags)
    if (f.name[0] && f.name[1] == '-') (f.valued ? valued : switches).insert(f.name); // -o: cli::parse knows it
  for (const TableEntry &e : tableFlags()) (e.valued ? valued : switches).insert(e.flag);
  cli::Args args = cli::parse(argc, argv, first, valued, switches, "compile");
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

  // --auto: the search compiles the candidates; the fastest that fits is the program.
  std::optional<AutoResult> searched;
  if (opts.autoSearch) {
    // The command line to paste: the user's, less --auto, --pareto and what the search decides.
    std::string command = "bigc compile";
    const std::set<std::string> decided = {"--auto", "--auto-seconds", "--pareto",        "--ranks",     "--tp",
                                           "--pp",   "--zero",         "--micro-batches", "--recompute", "--offload"};
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      const std::string name = a.substr(0, a.find('='));
      bool valued = false;
      for (const Flag &f : kFlags)
        if (name == f.name) valued = f.valued;
      for (const TableEntry &e : tableFlags())
        if (name == e.flag) valued = e.valued;
      if (decided.count(name)) {
        if (valued && a.find('=') == std::string::npos) ++i; // its value
        continue;
      }
      command += " " + a;
    }
    try {
      searched = autoSearch(*module, opts, command);
    } catch (const UserError &e) {
      std::fprintf(stderr, "bigc compile: %s: %s; nothing written\n", input.c_str(), e.what());
      return 1;
    }
    if (!opts.paretoSvg.empty()) format::writeFileAtomic(opts.paretoSvg, paretoSvg(*searched));
    if (searched->chosen < 0) {
      std::fprintf(stderr, "%s", searched->report.c_str());
      std::fprintf(stderr, "bigc compile: %s: --auto found no configuration that fits %s; nothing written\n",
                   input.c_str(), hw.name.c_str());
      return 1;
    }
    if (!quiet) std::fputs(searched->report.c_str(), stdout);
    AutoPlan &chosen = searched->plans[size_t(searched->chosen)];
    const std::string out = opts.output, ir = opts.emitMlir;
    opts = chosen.options;
    opts.output = out, opts.emitMlir = ir, opts.quiet = quiet;
  }

  // --global-batch: the ranks must divide it into the model's batch per rank and K micro-batches.
  if (opts.globalBatch && !searched) {
    const int64_t g = *opts.globalBatch;
    auto fwd = module->lookupSymbol<mlir::func::FuncOp>("forward");
    const int64_t b = llvm::cast<mlir::RankedTensorType>(fwd.getFunctionType().getInput(0)).getDimSize(0);
    // Tensor ranks share their batch, and so do pipeline stages and the cp ranks of a data group.
    const int64_t dpRanks = opts.ranks / std::max<int64_t>(1, opts.tp * opts.pp * opts.cp);
    const int64_t per = dpRanks * opts.microBatches;
    std::string what = std::to_string(dpRanks) + (opts.tp * opts.pp * opts.cp > 1 ? " data-parallel" : "") +
                       (opts.cp > 1 ? " group(s) of " + std::to_string(opts.cp) + " cp ranks" : " rank(s)") + " x " +
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

  format::Program program;
  std::string finalIR;
  std::vector<std::string> notes; // choices of the compiler the user should hear of
  try {
    if (searched && opts.emitMlir.empty()) {
      program = std::move(searched->plans[size_t(searched->chosen)].program); // compiled by the search
    } else {
      // The choices the compiler makes before the final pipeline (--offload cpu, --recompute auto).
      makeChoices(*module, opts, haveHw && !args.has("--device-mem"));
      program = compileToProgram(*module, opts, opts.emitMlir.empty() ? nullptr : &finalIR, &notes);
    }
    // bigc eval's own memory plan (proven there), for the program written only: the option
    // search's candidates go without.
    planEvaluation(program, output);
  } catch (const InternalError &e) {
    std::fprintf(stderr, "bigc compile: %s; nothing written\n", e.what());
    return 2;
  } catch (const UserError &e) {
    std::fprintf(stderr, "bigc compile: %s: %s\n", input.c_str(), e.what());
    return 1;
  }
  std::string bytes = format::serializeProgram(program);
  auto tEmitted = std::chrono::steady_clock::now();

  const format::Space &dev = *program.space("device");
  int64_t peakAt = 0;
  std::vector<RoleUsage> usage = peakUsageByRole(program, "device", &peakAt);
  int64_t nParams = 0; // every stage's weights (a pipeline's stages hold different ones)
  for (int64_t s = 0; s < program.pp; ++s) nParams += program.stageProgram(s).parameterCount();

  // Capacity check (driver/Capacity.cpp): every memory space against its capacity; when one
  // does not fit, the not-fit table with the option sets that do fit (compiled to be sure).
  // A pipelined program: each stage is checked (its ranks hold its arenas); the report is the
  // fullest stage's.
  const format::Program *fullest = &fullestStage(program, opts);
  if (!allFit(checkFit(*fullest, opts))) {
    std::string report = notFitReport(*module, *fullest, opts);
    std::fputs(report.c_str(), stderr);
    return 1;
  }

  format::writeFileAtomic(output, bytes);
  if (opts.emitMlir == "-")
    std::fputs(finalIR.c_str(), stdout);
  else if (!opts.emitMlir.empty())
    format::writeFileAtomic(opts.emitMlir, finalIR);
  auto tEnd = std::chrono::steady_clock::now();

  if (!quiet) {
    for (const std::string &n : notes) std::fprintf(stderr, "bigc compile: %s\n", n.c_str());
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::ostringstream os;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f",
                  dev.lowerBoundBytes > 0 ? double(dev.arenaBytes) / double(dev.lowerBoundBytes) : 1.0);
    os << "bigc compile: " << input << " -> " << output << "\n";
    os << "  parameters    " << withCommas(nParams) << " (" << humanBytes(nParams * 4) << " fp32)\n";
    os << "  program       " << withCommas(int64_t(program.instructions.size())) << " instructions, "
       << withCommas(int64_t(program.buffers.size())) << " buffers, batch " << program.batch << " x seq " << program.seq
       << "\n";
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
    if (const format::Space *host = program.space("host")) {
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
    if (const format::Space *nv = program.space("nvme")) {
      os << "  nvme arena    " << humanBytes(nv->arenaBytes) << " per rank in " << program.nvmePath;
      if (opts.nvmeCapacity > 0)
        os << ", " << humanBytes(opts.nvmeCapacity) << " available"
           << (haveHw && !args.has("--nvme-mem") ? " on " + hw.name : std::string(" (--nvme-mem)"));
      os << "\n";
    }
    char times[160];
    std::snprintf(times, sizeof times, "  time          %.2f s (parse %.2f, passes and emit %.2f, write %.2f)\n",
                  secs(t0, tEnd), secs(t0, tParsed), secs(tParsed, tEmitted), secs(tEmitted, tEnd));
    os << times;
    if (program.pp > 1) {
      os << "  pipeline      " << program.pp << " stages (" << program.ppSchedule << ", " << program.microBatches
         << " micro-batches); per stage: ";
      for (int64_t s = 0; s < program.pp; ++s) {
        const format::Program &sp = program.stageProgram(s);
        os << (s ? "; " : "") << s << ": device arena " << humanBytes(sp.space("device")->arenaBytes);
        if (const format::Space *h = sp.space("host")) os << ", host " << humanBytes(h->arenaBytes);
        os << ", " << withCommas(int64_t(sp.instructions.size())) << " instructions";
      }
      os << "\n";
      // Whether the stages' messages hold under NCCL's rules (the CUDA backend on a GPU per rank).
      if (!format::ncclPipelineProblem(program).empty())
        os << "  over NCCL     no: this order deadlocks where a send waits for its recv (`bigc verify` shows "
              "how); it runs on the CPU backend and with --virtual-ranks"
           << (program.ppSchedule == "interleaved" ? ", and --pp-schedule 1f1b or zero-bubble runs over NCCL" : "")
           << "\n";
    }
    if (program.ranks > 1) {
      os << "  ranks         " << program.ranks << " (" << program.dp << " data parallel"
         << (program.cp > 1 ? " of which " + std::to_string(program.cp) + " context parallel (each sequence of " +
                                  std::to_string(program.cp * program.seq) + " tokens over " +
                                  std::to_string(program.cp) + " ranks)"
                            : std::string())
         << ", ZeRO " << program.zero;
      if (program.tp > 1) os << " x " << program.tp << " tensor parallel";
      if (program.pp > 1) os << " x " << program.pp << " pipeline stages";
      os << "): the device arena is per rank";
      if (const format::Space *host = program.space("host"))
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
