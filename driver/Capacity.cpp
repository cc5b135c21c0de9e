//===- Capacity.cpp - does a plan fit, and what would make it fit ---------===//
//
// See include/bigc/Driver/Capacity.h. The table `bigc compile` prints when a plan does not fit:
// needed vs available per memory space, bytes by role per space, and the option sets that do
// fit, found by compiling them (not guessed), cheapest first.
//
//===----------------------------------------------------------------------===//

#include "bigc/Driver/Capacity.h"
#include "bigc/Driver/Auto.h"
#include "bigc/Format/ops.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"
#include "bigc/Support/format.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

namespace bigc {

using format::UserError;
using mlir::bigc::Offload;
using mlir::bigc::OffloadGrads;
using mlir::bigc::OffloadParams;
using mlir::bigc::Precision;
using mlir::bigc::RecomputePolicy;
using mlir::bigc::toString;

namespace {

const char *kRoleOrder[] = {"param",      "master",          "optimizer", "grad",    "input",
                            "activation", "activation_grad", "workspace", "transfer"};

int roleRank(const std::string &r) {
  const int n = int(sizeof kRoleOrder / sizeof kRoleOrder[0]);
  for (int i = 0; i < n; ++i)
    if (r == kRoleOrder[i]) return i;
  return n;
}

std::string padRight(const std::string &s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

std::string rstrip(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int spaceRank(const std::string &s) { return s == "device" ? 0 : s == "host" ? 1 : 2; }

// Where a space's capacity came from, for the headline.
std::string capacitySource(const CompileOptions &o, const std::string &space) {
  if (space == "nvme") // (the drives of one machine, --nvme-mem or the profile's nvme_bytes; no reserve)
    return o.haveHardware && o.nvmeCapacity == o.hardware.nvmeBytes ? "hardware " + o.hardware.name + "'s drives"
                                                                    : std::string("--nvme-mem");
  if (space != "device" && space != "host") return "?";
  const bool dev = space == "device";
  const int64_t mem = dev ? o.deviceMemory : o.hostMemory, reserve = dev ? o.deviceReserve : o.hostReserve;
  std::string from = o.haveHardware && mem == (dev ? o.hardware.deviceMemBytes : o.hardware.hostMemBytes)
                         ? "hardware " + o.hardware.name
                         : (dev ? "--device-mem" : "--host-mem");
  if (reserve > 0) from += ": " + humanBytes(mem) + " less a reserve of " + humanBytes(reserve);
  return from;
}

// Host memory is per machine: the ranks of one machine share it.
int64_t ranksPerMachine(const format::Program &p, const CompileOptions &o) {
  int64_t r = std::max<int64_t>(1, p.ranks);
  if (o.haveHardware) r = std::min<int64_t>(r, std::max<int64_t>(1, o.hardware.devices));
  return r;
}

std::string firstLine(const std::string &s) {
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

} // namespace

std::string stateFlags(const CompileOptions &base, const CompileOptions &c) {
  std::string f;
  auto add = [&](const std::string &s) { f += (f.empty() ? "" : " ") + s; };
  if (c.offload != Offload::None && c.offloadParams != base.offloadParams &&
      (c.offloadParams == OffloadParams::Host || c.offloadParams == OffloadParams::Nvme))
    add("--offload-params " + toString(c.offloadParams));
  if (c.offload == Offload::NVMe && c.offloadGrads == OffloadGrads::Nvme && c.offloadGrads != base.offloadGrads)
    add("--offload-grads nvme");
  if (c.offloadGradsLimit != base.offloadGradsLimit && c.offloadGradsLimit > 0)
    add("--offload-grads-limit " + std::to_string(c.offloadGradsLimit));
  if (c.offloadActivations && !base.offloadActivations) add("--offload-activations");
  if (c.zero == 3 && c.prefetch != base.prefetch) add("--prefetch " + std::to_string(c.prefetch));
  if (c.adamw.states != base.adamw.states) add("--optimizer-states " + toString(c.adamw.states));
  if (c.tileBytes != base.tileBytes && c.tileBytes > 0) {
    int64_t v = c.tileBytes;
    const char *unit = "";
    for (const char *u : {"K", "M", "G"})
      if (v % 1024 == 0) v /= 1024, unit = u;
    add("--tile-linear " + std::to_string(v) + unit);
  }
  return f;
}

namespace {

// The flags that turn `base` into `c` (what the user would add to the command line).
std::string flagsOf(const CompileOptions &base, const CompileOptions &c) {
  std::string f;
  auto add = [&](const std::string &s) { f += (f.empty() ? "" : " ") + s; };
  if (c.precision != base.precision) add("--precision " + toString(c.precision));
  if (c.microBatches != base.microBatches) add("--micro-batches " + std::to_string(c.microBatches));
  if (c.recompute != base.recompute) add("--recompute " + toString(c.recompute));
  if (c.fuseLoss && !base.fuseLoss) add("--fuse-loss");
  if (c.offload != base.offload)
    add("--offload " + toString(c.offload) +
        (c.offload == Offload::NVMe && base.nvmePath.empty() ? " --nvme-path DIR" : std::string()));
  if (c.zero != base.zero) add("--zero " + std::to_string(c.zero));
  if (c.tp != base.tp) add("--tp " + std::to_string(c.tp));
  if (c.pp != base.pp) add("--pp " + std::to_string(c.pp));
  if (c.pp > 1 && c.ppSchedule != base.ppSchedule) add("--pp-schedule " + toString(c.ppSchedule));
  if (c.cp != base.cp) add("--cp " + std::to_string(c.cp));
  if (c.sequenceParallel != base.sequenceParallel && c.sequenceParallel) add("--sequence-parallel");
  if (c.padVocab != base.padVocab) add("--pad-vocab " + std::to_string(c.padVocab));
  if (std::string s = stateFlags(base, c); !s.empty()) add(s);
  return f;
}

bool sameTechniques(const CompileOptions &a, const CompileOptions &b) {
  return a.precision == b.precision && a.microBatches == b.microBatches && a.recompute == b.recompute &&
         a.offload == b.offload && a.memoryBudget == b.memoryBudget && a.zero == b.zero && a.tp == b.tp &&
         a.pp == b.pp && a.sequenceParallel == b.sequenceParallel && a.fuseLoss == b.fuseLoss && a.fuse == b.fuse &&
         a.padVocab == b.padVocab && a.offloadActivations == b.offloadActivations && a.prefetch == b.prefetch &&
         a.offloadGrads == b.offloadGrads && a.offloadGradsLimit == b.offloadGradsLimit && a.tileBytes == b.tileBytes;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x < 0.1 ? "%.1f%%" : "%.0f%%", 100.0 * x);
  return buf;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.1e s" : s < 10 ? "%.2f s" : "%.0f s", s);
  return buf;
}

std::string workStr(const ExtraWork &w) {
  std::string s;
  if (w.flopsAdded > 0)
    s += "recomputes " + (w.forwardFlops > 0
                              ? pct(double(w.flopsAdded) / double(w.forwardFlops)) + " of the forward FLOPs"
                              : withCommas(w.flopsAdded) + " FLOPs");
  if (w.transferBytes > 0)
    s += (s.empty() ? "" : ", ") + std::string("moves ") + humanBytes(w.transferBytes) + " host<->device";
  if (w.commExposedSeconds > 0)
    s += (s.empty() ? "" : ", ") + std::string("collectives not hidden behind compute ") + secs(w.commExposedSeconds);
  if (w.bubbleSeconds > 0) s += (s.empty() ? "" : ", ") + std::string("pipeline bubble ") + secs(w.bubbleSeconds);
  if (s.empty()) return "no extra work";
  return s + " per step (~" + secs(w.seconds) + ")";
}

std::string bytesBySpace(const std::vector<SpaceFit> &spaces) {
  std::string s;
  for (const auto &f : spaces) {
    s += (s.empty() ? "" : ", ") + f.space + " " + humanBytes(f.needed);
    if (!f.fits) s += " (> " + humanBytes(f.capacity) + ")";
  }
  return s;
}

// Whether the program does what the options ask (a technique whose pass is not wired yet is
// accepted by compileToProgram and ignored): "" when it does, else what is missing.
std::string unhonoured(const format::Program &p, const CompileOptions &c) {
  if (p.precision != toString(c.precision)) return "--precision " + toString(c.precision) + " not applied";
  if (c.recompute != RecomputePolicy::None && p.recompute.policy == "none")
    return "--recompute " + toString(c.recompute) + " not applied";
  if (c.offload != Offload::None && !p.space("host")) return "--offload " + toString(c.offload) + " not applied";
  if (p.microBatches != c.microBatches) return "--micro-batches not applied";
  return "";
}

} // namespace

std::vector<RoleUsage> peakUsageByRole(const format::Program &p, const std::string &space, int64_t *peakInstruction) {
  const int64_t n = std::max<int64_t>(int64_t(p.instructions.size()), 1);
  // Alias groups: buffers an in-place instruction places at the same offset count once.
  std::vector<size_t> parent(p.buffers.size());
  std::iota(parent.begin(), parent.end(), size_t(0));
  auto root = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const auto &ins : p.instructions) {
    const format::OpDef *sig = format::findOp(ins.op); // the format's in-place rule
    if (!sig || !sig->inPlace) continue;
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
    g.bytes = std::max(g.bytes, (b.bytes + format::kAlignment - 1) / format::kAlignment * format::kAlignment);
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

//===----------------------------------------------------------------------===//
// The choices bigc compile makes before the final pipeline
//===----------------------------------------------------------------------===//

namespace {

/// --offload-params auto: the device when the plan fits there, else the host, else (with a
/// drive) the drive.
void chooseWeightsPlace(mlir::ModuleOp parsed, CompileOptions &o) {
  if (o.offload == Offload::None || o.offloadParams != OffloadParams::Auto) return;
  o.offloadParams = OffloadParams::Device;
  if (o.deviceCapacity <= 0) return; // nothing to fit: the weights stay on the device
  format::Program p = compileToProgram(parsed, o);
  const int64_t arena = fullestDeviceArena(p);
  if (arena <= o.deviceCapacity) return;
  o.offloadParams = OffloadParams::Host;
  if (!o.quiet)
    std::printf("bigc compile: --offload %s: with the weights on the device the plan needs %s of device memory, "
                "%s available: the weights stay on the host between uses (ZeRO-3-Offload)\n",
                toString(o.offload).c_str(), humanBytes(arena).c_str(), humanBytes(o.deviceCapacity).c_str());
  // With a drive: the weights go there too when the host cannot hold them (ZeRO-Infinity).
  if (o.offload != Offload::NVMe || o.hostCapacity <= 0) return;
  for (const SpaceFit &f : checkFit(compileToProgram(parsed, o), o))
    if (f.space == "host" && !f.fits) {
      o.offloadParams = OffloadParams::Nvme;
      if (!o.quiet)
        std::printf("bigc compile: --offload nvme: with the weights on the host the plan needs %s of host memory, "
                    "%s available: the weights stay in the nvme space between uses\n",
                    humanBytes(f.needed).c_str(), humanBytes(f.capacity).c_str());
    }
}

/// --offload-grads auto: the host, unless the plan does not fit the host memory there and the
/// drive can take the gradients (--offload nvme).
void chooseGradientsPlace(mlir::ModuleOp parsed, CompileOptions &o) {
  if (o.offloadGrads != OffloadGrads::Auto) return;
  o.offloadGrads = OffloadGrads::Host;
  if (o.offload != Offload::NVMe || o.hostCapacity <= 0) return;
  const format::Program p = compileToProgram(parsed, o);
  for (const SpaceFit &f : checkFit(p, o)) {
    if (f.space != "host" || f.fits) continue;
    // As many bytes of each rank's gradients as the host lacks (the ranks of a machine share it),
    // and a tenth more: every gradient waits at the end of the backward, so each byte sent to the
    // drive is about a byte less at the host's peak, less the staging of its way there and back
    // (GPT 230 x 8,192 on the seeds' machine: 49.4 GiB sent, 42.1 GiB less). Short still: what
    // remains, and half again, at most twice more.
    const int64_t ranks = ranksPerMachine(p, o);
    CompileOptions part = o;
    part.offloadGrads = OffloadGrads::Nvme;
    int64_t lacking = f.needed - f.capacity;
    bool partFits = false;
    for (int attempt = 0; attempt < 3 && !partFits; ++attempt) {
      const int64_t perRank = (lacking + ranks - 1) / ranks;
      part.offloadGradsLimit += attempt == 0 ? perRank + perRank / 10 : perRank + perRank / 2;
      partFits = true;
      for (const SpaceFit &g : checkFit(compileToProgram(parsed, part), part))
        if (g.space == "host" && !g.fits) partFits = false, lacking = g.needed - g.capacity;
    }
    o.offloadGrads = OffloadGrads::Nvme;
    if (partFits) o.offloadGradsLimit = part.offloadGradsLimit;
    if (!o.quiet)
      std::printf("bigc compile: --offload nvme: with the gradients waiting on the host the plan needs %s of host "
                  "memory, %s available: %s wait in the nvme space\n",
                  humanBytes(f.needed).c_str(), humanBytes(f.capacity).c_str(),
                  partFits
                      ? ("up to " + humanBytes(o.offloadGradsLimit) + " of them a rank (--offload-grads-limit)").c_str()
                      : "they");
  }
}

} // namespace

void chooseOffloadParams(mlir::ModuleOp parsed, CompileOptions &o) {
  chooseWeightsPlace(parsed, o);
  chooseGradientsPlace(parsed, o);
}

// The smallest number N of ranked recomputation candidates (bigc-recompute
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
  std::string budgetName = o.memoryBudget > 0   ? "--memory-budget " + humanBytes(budget)
                           : budgetFromHardware ? "the device memory of " + o.hardware.name + ", " + humanBytes(budget)
                                                : "--device-mem " + humanBytes(budget);
  // Every candidate is a forward op of a transformer block (per micro-batch): their count bounds N.
  int64_t upper = 0;
  if (auto fwd = parsed.lookupSymbol<mlir::func::FuncOp>("forward"))
    fwd.walk([&](mlir::Operation *op) {
      if (!llvm::isa<mlir::bigc::GetParamOp>(op) && op->getNumResults() > 0 && op->hasAttr(mlir::bigc::kLayerAttrName))
        ++upper;
    });
  upper *= std::max<int64_t>(1, o.microBatches);
  std::map<int64_t, int64_t> arenas; // N -> planned device arena
  auto fits = [&](int64_t n) {
    auto it = arenas.find(n);
    if (it != arenas.end()) return it->second <= budget;
    CompileOptions t = o;
    t.recomputeDrop = n;
    t.quiet = true;
    format::Program p = compileToProgram(parsed, t);
    int64_t arena = fullestDeviceArena(p);
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
                      : least->first == 0
                          ? std::string("with nothing recomputed")
                          : "recomputing the first " + std::to_string(least->first) +
                                " ranked candidates; everything recomputed: " + humanBytes(arenas[upper]);
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
    std::printf("bigc compile: recompute auto: recomputing the first %lld ranked candidates fits %s\n", (long long)hi,
                budgetName.c_str());
    std::fflush(stdout);
  }
}

void makeChoices(mlir::ModuleOp parsed, CompileOptions &o, bool budgetFromHardware) {
  // --offload cpu: the weights go to the host only when the plan with the most recomputation
  // (recompute auto is still undecided: drop -1 recomputes everything) cannot hold them; the
  // recompute search then runs with that choice.
  chooseOffloadParams(parsed, o);
  if (o.recompute == RecomputePolicy::Auto && o.recomputeDrop < 0) chooseRecompute(parsed, o, budgetFromHardware);
}

format::Program compileWithChoices(mlir::ModuleOp parsed, CompileOptions o) {
  o.quiet = true;
  if (o.recompute == RecomputePolicy::Auto && o.recomputeDrop < 0) chooseRecompute(parsed, o, false);
  chooseOffloadParams(parsed, o);
  return compileToProgram(parsed, o);
}

//===----------------------------------------------------------------------===//
// Does a plan fit, and what would make it fit
//===----------------------------------------------------------------------===//

int64_t spaceCapacity(const CompileOptions &o, const std::string &space) {
  if (space == "device") return o.deviceCapacity;
  if (space == "host") return o.hostCapacity;
  if (space == "nvme") return o.nvmeCapacity;
  return 0;
}

std::vector<SpaceFit> checkFit(const format::Program &p, const CompileOptions &o) {
  std::vector<SpaceFit> out;
  const int64_t perMachine = ranksPerMachine(p, o);
  for (const auto &s : p.spaces) {
    SpaceFit f;
    f.space = s.name;
    int64_t mult = s.name == "host" || s.name == "nvme" ? perMachine : 1; // (the machine's drives are shared too)
    f.needed = s.arenaBytes * mult;
    f.lowerBound = s.lowerBoundBytes * mult;
    f.capacity = spaceCapacity(o, s.name);
    f.fits = f.capacity <= 0 || f.needed <= f.capacity;
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SpaceFit &a, const SpaceFit &b) { return spaceRank(a.space) < spaceRank(b.space); });
  return out;
}

bool allFit(const std::vector<SpaceFit> &fits) {
  return std::all_of(fits.begin(), fits.end(), [](const SpaceFit &f) { return f.fits; });
}

const format::Program &fullestStage(const format::Program &p, const CompileOptions &o) {
  const format::Program *fullest = &p;
  for (int64_t s = 1; s < p.pp; ++s) {
    const format::Program &sp = p.stageProgram(s);
    if (!allFit(checkFit(*fullest, o))) break;
    if (!allFit(checkFit(sp, o)) || sp.space("device")->arenaBytes > fullest->space("device")->arenaBytes)
      fullest = &sp;
  }
  return *fullest;
}

ExtraWork extraWork(const format::Program &p, const CompileOptions &o) {
  ExtraWork w;
  w.flopsAdded = p.recompute.flopsAdded;
  w.forwardFlops = p.recompute.forwardFlops;
  double hostFlops = 0;
  for (const auto &ins : p.instructions) {
    if (ins.op == "copy" && !ins.in.empty() && !ins.out.empty()) {
      const auto &x = p.buffers[size_t(ins.in[0])], &y = p.buffers[size_t(ins.out[0])];
      if (x.space != y.space) w.transferBytes += y.bytes;
    }
    // Updates on the host: ~12 FLOPs per parameter element (AdamW with bias correction).
    if (ins.stream == "host" && ins.op == "adamw" && !ins.in.empty())
      hostFlops += 12.0 * double(p.buffers[size_t(ins.in[0])].numel());
  }
  double devF = o.haveHardware ? o.hardware.deviceFlops : 100e12;
  double bw = o.haveHardware ? std::min(o.hardware.h2dBytesPerS, o.hardware.d2hBytesPerS) : 12e9;
  double hostF = o.haveHardware ? o.hardware.hostFlops : 1e12;
  w.seconds = double(w.flopsAdded) / devF + double(w.transferBytes) / bw + hostFlops / hostF;
  // Collectives: the part the schedule does not hide behind compute (bigc compile --hardware).
  for (const auto &c : p.estimate.collectives) w.commExposedSeconds += std::max(0.0, c.seconds - c.hiddenSeconds);
  w.seconds += w.commExposedSeconds;
  return w;
}

std::vector<Candidate> candidateOptionSets(const CompileOptions &o, size_t maxCandidates, bool withoutOffload,
                                           int64_t headsGcd, int64_t vocab) {
  // 16-bit type of the suggestions: V100s have no bf16 tensor cores.
  Precision h = Precision::BF16;
  if (o.haveHardware && o.hardware.name.rfind("v100", 0) == 0) h = Precision::FP16;
  if (o.precision != Precision::FP32) h = o.precision;
  struct Set {
    std::optional<Precision> precision; // none: as the user gave it
    std::optional<RecomputePolicy> recompute;
    std::optional<Offload> offload;
    int zero = -1; // -1: as the user gave it
    int tp = 0;    // 0: as the user gave it
    bool sequenceParallel = false;
    int pp = 0; // 0: as the user gave it; else the stages, with the micro-batches times pp (the same global batch)
  };
  const std::nullopt_t any = std::nullopt;
  using R = RecomputePolicy;
  const Precision fp16 = Precision::FP16;
  const Offload none = Offload::None, cpu = Offload::CPU, nvme = Offload::NVMe;
  // Preference when costs tie: cheaper techniques first (16-bit is free, selective recompute
  // costs a few percent, full recompute a forward pass, offload transfers and host updates).
  const Set sets[] = {
      // Only when the user offloads (and the host is what does not fit): everything on the device.
      {any, any, none},       {h, any, none},    {h, any, any},     {any, R::Selective, any},
      {h, R::Selective, any}, {h, R::Full, any}, {h, any, cpu},     {fp16, R::Auto, cpu},
      {any, R::Full, any},    {any, any, cpu},   {h, R::Auto, any},
  };
  // Several ranks: sharding over them is the first thing to try (ZeRO-3 divides the model state).
  const Set zeroSets[] = {
      {any, any, any, 3},   {h, any, any, 3},        {h, R::Selective, any, 3},
      {h, R::Auto, any, 3}, {fp16, R::Auto, cpu, 3}, {any, any, any, 1},
  };
  std::vector<Set> all;
  if (o.ranks > 1)
    for (const Set &z : zeroSets)
      if (o.zero < z.zero) all.push_back(z);
  // Several ranks and no tensor parallelism yet: split each layer over the most ranks of a
  // machine (at most 8, dividing the ranks and the heads) that the model allows (a set whose
  // tensor size does not divide the hidden size fails to compile and is not listed; one that does
  // not divide the vocabulary pads it, --pad-vocab 64).
  if (o.ranks > 1 && o.tp == 1)
    for (int t : {8, 4, 2})
      if (t <= o.ranks && o.ranks % t == 0 && (headsGcd == 0 || headsGcd % t == 0)) {
        all.push_back({any, any, any, -1, t, false});
        all.push_back({h, any, any, -1, t, true});
        break;
      }
  // Several ranks and no pipeline yet: the layers in 2 stages, and in the most (4 or 8) the ranks
  // left by the tensor axis allow; the data axis shrinks by pp, so the micro-batches grow by pp
  // (the global batch stays). A model with fewer layers than stages fails to compile: not listed.
  if (o.ranks > 1 && o.pp == 1) {
    const int64_t left = o.ranks / std::max<int64_t>(1, o.tp);
    if (left % 2 == 0) all.push_back({any, any, any, -1, 0, false, 2});
    for (int p : {8, 4})
      if (left % p == 0) {
        all.push_back({any, any, any, -1, 0, false, p});
        break;
      }
  }
  for (const Set &x : sets) all.push_back(x);
  // A machine with an NVMe drive: the optimizer's state there (ZeRO-Infinity), after the rest.
  if (o.nvmeCapacity > 0 && o.offload != nvme) {
    all.push_back({h, R::Auto, nvme});
    if (o.ranks > 1 && o.zero < 3) all.push_back({h, R::Auto, nvme, 3});
  }
  std::vector<Candidate> out;
  for (const Set &s : all) {
    if (out.size() >= maxCandidates) break;
    if (!withoutOffload && s.offload == Offload::None) continue;
    CompileOptions c = o;
    if (s.precision) c.precision = *s.precision;
    if (s.recompute) c.recompute = *s.recompute;
    if (s.offload) c.offload = *s.offload;
    if (s.zero >= 0) c.zero = s.zero;
    if (s.tp > 0) c.tp = s.tp, c.sequenceParallel = s.sequenceParallel;
    if (c.tp > 1 && vocab > 0 && vocab % c.tp != 0 && c.padVocab == 0)
      c.padVocab = mlir::bigc::padMultipleFor(vocab, c.tp); // 64, less for a small vocabulary
    if (s.pp > 0) c.pp = s.pp, c.microBatches = o.microBatches * s.pp;
    if (sameTechniques(c, o)) continue;
    c.recomputeDrop = -1; // searched again for this option set
    if (o.offload == Offload::None && c.offload != Offload::None)
      c.offloadParams = c.zero == 1 || c.zero == 2 ? OffloadParams::Device : OffloadParams::Auto;
    if (c.offload == Offload::NVMe && c.nvmePath.empty()) c.nvmePath = "nvme"; // (the plan does not read it)
    c.quiet = true;
    bool dup = false;
    for (const auto &e : out) dup |= sameTechniques(e.options, c);
    if (dup) continue;
    Candidate cand;
    cand.options = c;
    cand.flags = flagsOf(o, c);
    out.push_back(cand);
  }
  return out;
}

std::string notFitReport(mlir::ModuleOp parsed, const format::Program &p, const CompileOptions &o,
                         std::vector<Candidate> *tried) {
  std::vector<SpaceFit> fits = checkFit(p, o);
  std::ostringstream os;

  // Headline: every space that does not fit.
  os << "bigc compile: the plan does not fit: " << o.input << " needs ";
  bool firstOver = true;
  for (const auto &f : fits) {
    if (f.fits) continue;
    os << (firstOver ? "" : "; and ") << humanBytes(f.needed) << " of " << f.space << " memory, "
       << humanBytes(f.capacity) << " available (" << capacitySource(o, f.space) << ")";
    firstOver = false;
  }
  os << "; nothing written\n\n";

  // Needed vs available per space.
  os << "  " << padRight("space", 10) << padRight("needed", 14) << padRight("lower bound", 14)
     << rstrip(padRight("available", 14)) << "\n";
  for (const auto &f : fits) {
    std::string avail = f.capacity > 0 ? humanBytes(f.capacity) : "unknown";
    os << "  " << padRight(f.space, 10) << padRight(humanBytes(f.needed), 14) << padRight(humanBytes(f.lowerBound), 14);
    if (f.fits && f.capacity <= 0)
      os << avail << " (not checked)\n";
    else if (f.fits)
      os << padRight(avail, 14) << "fits (" << pct(double(f.needed) / double(f.capacity)) << ")\n";
    else
      os << padRight(avail, 14) << "does not fit (" << pct(double(f.needed) / double(f.capacity)) << ")\n";
  }
  if (ranksPerMachine(p, o) > 1)
    os << "  (host: the arenas of the " << ranksPerMachine(p, o) << " ranks of one machine)\n";

  // Bytes by role at each space's peak.
  int64_t persistentDev = 0, transientDev = 0, devCap = o.deviceCapacity;
  for (const auto &f : fits) {
    int64_t at = 0;
    std::vector<RoleUsage> usage = peakUsageByRole(p, f.space, &at);
    std::string where = at < int64_t(p.instructions.size()) ? p.instructions[size_t(at)].loc : "";
    os << "\n  " << f.space << " memory by role at the peak (instruction " << at << ", " << p.instructions.size()
       << " in all" << (where.empty() ? "" : "; " + where) << "):\n";
    for (const auto &u : usage) {
      os << "    " << padRight(u.role, 18) << humanBytes(u.bytes) << "\n";
      if (f.space != "device") continue;
      if (u.role == "param" || u.role == "optimizer" || u.role == "master")
        persistentDev += u.bytes;
      else if (u.role != "grad")
        transientDev += u.bytes;
    }
  }

  // Candidates, compiled for real; the diagnostics of those that fail are not shown.
  auto t0 = std::chrono::steady_clock::now();
  bool hostOverAny = false;
  for (const auto &f : fits) hostOverAny |= f.space == "host" && !f.fits;
  // BIGC_FIT_CANDIDATES: how many option sets to try (default 10; 0: none, for scripts that only
  // want the exit status, such as bench/capacity/run.sh).
  size_t maxCands = 10;
  if (const char *env = std::getenv("BIGC_FIT_CANDIDATES"); env && *env) {
    char *end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 16) maxCands = size_t(v);
  }
  int64_t headsGcd = 0, vocab = 0;
  parsed->walk([&](mlir::Operation *op) {
    if (op->getName().getStringRef() == "bigc.attention")
      if (auto h = op->getAttrOfType<mlir::IntegerAttr>("heads")) headsGcd = std::gcd(headsGcd, h.getInt());
    if (auto ce = llvm::dyn_cast<mlir::bigc::CrossEntropyOp>(op))
      vocab = llvm::cast<mlir::RankedTensorType>(ce.getLogits().getType()).getShape().back();
  });
  // With a hardware profile (speeds to rank by): the search of `bigc compile --auto` (Auto.h), wider
  // (a 16-bit precision too, every technique that fits each mesh and ZeRO stage, the drive without
  // a path), the global batch kept; its plans compiled whole are the suggestions, fastest first.
  // Without one, or when that search cannot run: a fixed list of option sets, each compiled.
  std::vector<Candidate> cands;
  int compiled = 0;
  bool searched = false;
  std::string searchedStr;
  if (o.haveHardware && maxCands > 0) {
    CompileOptions base = o;
    base.given.clear();
    base.autoSearch = false;
    base.quiet = true;
    AutoScope scope;
    scope.precisions = {o.precision};
    if (o.precision == Precision::FP32)
      scope.precisions.push_back(o.hardware.name.rfind("v100", 0) == 0 ? Precision::FP16 : Precision::BF16);
    scope.driveWithoutPath = true;
    scope.everyTechnique = true;
    scope.wholeCompiles = int(std::min<size_t>(maxCands, 6));
    try {
      AutoResult r = autoSearch(parsed, base, "", scope);
      searched = true;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "searched %d configurations in %.2f s as --auto does: %d ruled out by their model state, %d "
                    "estimated from compiles of the model cut to a few layers, %d compiled whole",
                    r.considered, r.seconds, r.ruledOut, r.considered - r.ruledOut - r.skippedForTime, r.compiled);
      searchedStr = buf;
      for (const AutoPlan &pl : r.plans) {
        if (!pl.compiled && !pl.estimated) continue; // ruled out, refused or not reached
        Candidate c;
        c.options = pl.options;
        c.flags = flagsOf(o, pl.options);
        if (c.flags.empty()) continue; // the user's own options
        c.compiled = true;
        c.stepSeconds = pl.stepSeconds;
        if (pl.fits && !pl.estimated) {
          const format::Program &stage = fullestStage(pl.program, pl.options);
          c.spaces = checkFit(stage, pl.options);
          c.fits = allFit(c.spaces);
          c.work = extraWork(stage, pl.options);
        } else if (!pl.fits) { // its figures, compiled or estimated, for the closest misses
          auto space = [&](const char *name, int64_t needed) {
            SpaceFit f;
            f.space = name, f.needed = needed, f.capacity = spaceCapacity(o, name);
            f.fits = f.capacity <= 0 || needed <= f.capacity;
            c.spaces.push_back(f);
          };
          space("device", pl.deviceBytes);
          if (pl.hostBytes > 0) space("host", pl.hostBytes);
        } else {
          continue; // estimated to fit, not compiled whole: not a suggestion to paste
        }
        cands.push_back(std::move(c));
        ++compiled;
      }
    } catch (const UserError &) {
      searched = false; // no mesh keeps the global batch, ...: the fixed list below
      cands.clear();
      compiled = 0;
    }
  }
  if (!searched) cands = candidateOptionSets(o, maxCands, hostOverAny, headsGcd, vocab);
  if (!searched) {
    mlir::ScopedDiagnosticHandler quiet(parsed->getContext(), [](mlir::Diagnostic &) { return mlir::success(); });
    for (auto &c : cands) {
      // Bounded: big models take seconds per compile; stop trying after 60 s.
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 60.0) {
        c.why = "not tried (time)";
        continue;
      }
      try {
        format::Program cp = compileWithChoices(parsed, c.options);
        std::string missing = unhonoured(cp, c.options);
        if (!missing.empty()) { // a technique this build does not implement yet: skip silently
          c.why = missing;
          continue;
        }
        c.compiled = true;
        const format::Program &stage = fullestStage(cp, c.options);
        c.spaces = checkFit(stage, c.options);
        c.fits = allFit(c.spaces);
        c.work = extraWork(stage, c.options);
        if (cp.pipelineEstimate.present && !cp.pipelineEstimate.busySeconds.empty()) {
          // The pipeline's bubble: the step beyond the stages' mean busy time (cost model).
          const auto &pe = cp.pipelineEstimate;
          double mean = 0;
          for (double b : pe.busySeconds) mean += b / double(pe.busySeconds.size());
          c.work.bubbleSeconds = std::max(0.0, pe.stepSeconds - mean);
          c.work.seconds += c.work.bubbleSeconds;
        }
        ++compiled;
      } catch (const std::exception &e) {
        c.why = firstLine(e.what());
      }
    }
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<const Candidate *> good, bad;
  std::set<std::string> listed; // (one line per set of flags: the first, the search's simplest)
  for (const auto &c : cands)
    if (c.compiled && listed.insert((c.fits ? "+" : "-") + c.flags).second) (c.fits ? good : bad).push_back(&c);
  // Searched: by the cost model's step; the fixed list: by the work added to the step.
  auto cost = [&](const Candidate *c) { return searched ? c->stepSeconds : c->work.seconds; };
  std::stable_sort(good.begin(), good.end(), [&](const Candidate *a, const Candidate *b) { return cost(a) < cost(b); });
  // A fitting set that adds flags to a cheaper one without saving memory in any space says
  // nothing new (e.g. --recompute auto that recomputes nothing): leave it out.
  auto needed = [](const Candidate *c, const std::string &space) {
    for (const auto &f : c->spaces)
      if (f.space == space) return f.needed;
    return int64_t(0);
  };
  auto dominates = [&](const Candidate *d, const Candidate *c) {
    if (d->flags.size() >= c->flags.size() || cost(d) > cost(c)) return false;
    if (!searched && d->options.tp != c->options.tp) return false; // another global batch: not comparable
    for (const auto &f : c->spaces)
      if (needed(d, f.space) > f.needed) return false;
    for (const auto &f : d->spaces)
      if (f.needed > needed(c, f.space)) return false;
    return true;
  };
  {
    std::vector<const Candidate *> kept;
    for (const auto *c : good)
      if (std::none_of(kept.begin(), kept.end(), [&](const Candidate *d) { return dominates(d, c); }))
        kept.push_back(c);
    good = kept;
  }
  // The closest misses first.
  auto worst = [](const Candidate *c) {
    double r = 0;
    for (const auto &f : c->spaces)
      if (f.capacity > 0) r = std::max(r, double(f.needed) / double(f.capacity));
    return r;
  };
  std::stable_sort(bad.begin(), bad.end(), [&](const Candidate *a, const Candidate *b) { return worst(a) < worst(b); });

  char triedStr[96];
  std::snprintf(triedStr, sizeof triedStr, "tried %d option set%s in %.2f s", compiled, compiled == 1 ? "" : "s", took);
  os << "\n  options that would make it fit:\n";
  size_t fw = 10;
  for (size_t i = 0; i < good.size() && i < maxCands; ++i) fw = std::max(fw, good[i]->flags.size() + 2);
  for (size_t i = 0; i < bad.size() && i < maxCands; ++i) fw = std::max(fw, bad[i]->flags.size() + 2);
  if (!good.empty() && searched) {
    for (size_t i = 0; i < good.size() && i < maxCands; ++i)
      os << "    " << padRight(good[i]->flags, fw) << bytesBySpace(good[i]->spaces) << "; step "
         << durationStr(good[i]->stepSeconds) << ", " << workStr(good[i]->work) << "\n";
    if (good.size() > maxCands)
      os << "    (and " << good.size() - maxCands << " more that fit, slower; bigc compile --auto lists them all with "
         << "BIGC_AUTO_ALL=1)\n";
    os << "    (" << searchedStr << "; fastest first by the cost model's step on " << o.hardware.name
       << ", the global batch kept)\n";
    os << "  other ways:\n";
  } else if (!good.empty()) {
    for (const auto *c : good)
      os << "    " << padRight(c->flags, fw) << bytesBySpace(c->spaces) << "; " << workStr(c->work) << "\n";
    os << "    (" << triedStr
       << ", cheapest first: least recomputation, transfer, host and exposed communication time and pipeline bubble)\n";
    for (const auto *c : good)
      if (c->options.tp > o.tp) {
        os << "    (--tp " << c->options.tp << ": the " << c->options.tp
           << " tensor ranks of a group read the same sequences, so the global batch is " << o.ranks / c->options.tp
           << " x the batch instead of " << o.ranks << " x; raise --micro-batches to keep it)\n";
        break;
      }
    os << "  other ways:\n";
  }

  // What compiling cannot try: a smaller model, batch or sequence, a bigger machine.
  bool devOver = false, hostOver = false;
  int64_t hostNeeded = 0;
  for (const auto &f : fits) {
    devOver |= f.space == "device" && !f.fits;
    hostOver |= f.space == "host" && !f.fits;
    if (f.space == "host") hostNeeded = f.needed;
  }
  if (devOver && persistentDev >= devCap) {
    os << "    - fewer parameters: with these options the weights and AdamW states alone need "
       << humanBytes(persistentDev) << " of device memory (" << withCommas(p.parameterCount())
       << " parameters); use fewer layers or a smaller hidden size (bigc gen gpt --layers/--hidden)\n";
  } else if (devOver) {
    os << "    - a smaller batch (bigc gen gpt --batch) or a shorter sequence (--seq): activations and their "
          "gradients, "
       << humanBytes(transientDev) << " at the device peak, scale with B*T";
    if (p.batch > 1) os << "; --micro-batches K with --batch " << p.batch << "/K keeps the batch per update";
    os << "\n";
    if (persistentDev > 0)
      os << "    - fewer layers or a smaller hidden size (bigc gen gpt --layers/--hidden): weights and AdamW "
            "states take "
         << humanBytes(persistentDev) << " of device memory\n";
  }
  if (hostOver) {
    char per[32];
    std::snprintf(per, sizeof per, "%.1f",
                  p.parameterCount() > 0 ? double(hostNeeded) / double(p.parameterCount()) : 0.0);
    os << "    - fewer parameters: the host holds " << humanBytes(hostNeeded) << " for "
       << withCommas(p.parameterCount()) << " parameters (" << per
       << " bytes each: fp32 master weights, AdamW moments, gradients); use fewer layers or a smaller hidden size\n";
  }
  if (devOver) os << "    - a device with more memory (--hardware, --device-mem)\n";
  if (hostOver) os << "    - a machine with more host memory (--hardware, --host-mem)\n";
  if (good.empty()) {
    if (cands.empty())
      os << "    (no other option set tried: BIGC_FIT_CANDIDATES=0)\n";
    else if (compiled == 0)
      os << "    (none of the " << cands.size() << " other option sets could be compiled)\n";
    else
      os << "    - none of the option sets tried fits (" << (searched ? searchedStr : std::string(triedStr)) << "):\n";
    for (size_t i = 0; i < bad.size() && i < maxCands; ++i)
      os << "        " << padRight(bad[i]->flags, fw) << bytesBySpace(bad[i]->spaces) << "\n";
  }
  if (tried) *tried = cands;
  return os.str();
}

} // namespace bigc
