// `bigc inspect`: reports on a program file's memory plan. See include/bigc/Inspect/Inspect.h.
#include "bigc/Inspect/Inspect.h"
#include "bigc/Format/evaluation.h"
#include "bigc/Format/shape.h"
#include "bigc/Format/writer.h"
#include "bigc/Format/reader.h"
#include "bigc/Format/validator.h"
#include "bigc/Support/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bigc/Support/cli.h"

namespace bigc::inspect {

using format::UserError;
using json = nlohmann::ordered_json;

namespace {

const std::vector<std::string> kRoleOrder = {"param",      "master",          "optimizer", "grad",    "input",
                                             "activation", "activation_grad", "workspace", "transfer"};

int roleRank(const std::string &r) {
  auto it = std::find(kRoleOrder.begin(), kRoleOrder.end(), r);
  return it == kRoleOrder.end() ? int(kRoleOrder.size()) : int(it - kRoleOrder.begin());
}

bool roleLess(const std::string &a, const std::string &b) {
  int ra = roleRank(a), rb = roleRank(b);
  return ra != rb ? ra < rb : a < b;
}

const char *roleColor(const std::string &r) {
  static const std::map<std::string, const char *> colors = {
      {"param", "#4e79a7"},   {"master", "#a0cbe8"},     {"optimizer", "#76b7b2"},       {"grad", "#f28e2b"},
      {"input", "#bab0ac"},   {"activation", "#59a14f"}, {"activation_grad", "#e15759"}, {"workspace", "#b07aa1"},
      {"transfer", "#edc948"}};
  auto it = colors.find(r);
  return it == colors.end() ? "#9c755f" : it->second;
}

using format::shapeStr; // include/bigc/Format/shape.h

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(const std::string &s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }
std::string lpad(const std::string &s, size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; }

std::string xmlEscape(const std::string &s) {
  std::string o;
  for (char c : s) {
    switch (c) {
    case '&': o += "&amp;"; break;
    case '<': o += "&lt;"; break;
    case '>': o += "&gt;"; break;
    case '"': o += "&quot;"; break;
    default: o.push_back(c);
    }
  }
  return o;
}

// Roles present in the program, canonical order.
std::vector<std::string> rolesOf(const format::Program &p, const std::string *space = nullptr) {
  std::set<std::string> seen;
  for (const auto &b : p.buffers)
    if (!space || b.space == *space) seen.insert(b.role);
  std::vector<std::string> v(seen.begin(), seen.end());
  std::sort(v.begin(), v.end(), roleLess);
  return v;
}

struct Phase {
  int64_t begin = 0, end = 0; // [begin, end) instruction indices
  std::string name;           // forward, backward, backward + optimizer, optimizer
};

// Each instruction is forward, backward (computes a gradient: an op named *_grad or one that
// writes a grad/activation_grad buffer) or optimizer (adamw, global_norm, writes optimizer
// state). Phases: forward up to the first non-forward instruction; backward up to the last
// backward instruction ("backward + optimizer" when updates are interleaved with it); then the
// optimizer tail.
std::vector<Phase> inferPhases(const format::Program &p) {
  const int64_t n = int64_t(p.instructions.size());
  auto writesRole = [&](const format::Instruction &ins, const char *role) {
    for (int64_t o : ins.out)
      if (o >= 0 && o < int64_t(p.buffers.size()) && p.buffers[size_t(o)].role == role) return true;
    return false;
  };
  std::vector<char> cls(size_t(n), 'F');
  int64_t firstNonF = n, lastB = -1;
  for (int64_t i = 0; i < n; ++i) {
    const auto &ins = p.instructions[size_t(i)];
    bool opt = ins.op == "adamw" || ins.op == "global_norm" || writesRole(ins, "optimizer");
    bool bwd = !opt && ((ins.op.size() > 5 && ins.op.compare(ins.op.size() - 5, 5, "_grad") == 0) ||
                        writesRole(ins, "grad") || writesRole(ins, "activation_grad"));
    if (!ins.phase.empty()) { // version 2 records the phase of each instruction
      opt = ins.phase == "optimizer";
      bwd = ins.phase == "backward";
    }
    cls[size_t(i)] = opt ? 'O' : bwd ? 'B' : 'F';
    if (cls[size_t(i)] != 'F' && firstNonF == n) firstNonF = i;
    if (bwd) lastB = i;
  }
  std::vector<Phase> out;
  if (firstNonF > 0) out.push_back({0, firstNonF, "forward"});
  int64_t tail = firstNonF;
  if (lastB >= firstNonF) {
    bool mixed = std::count(cls.begin() + firstNonF, cls.begin() + lastB + 1, 'O') > 0;
    out.push_back({firstNonF, lastB + 1, mixed ? "backward + optimizer" : "backward"});
    tail = lastB + 1;
  }
  if (tail < n && std::count(cls.begin() + tail, cls.end(), 'O') > 0) out.push_back({tail, n, "optimizer"});
  return out;
}

std::string phaseOf(const std::vector<Phase> &phases, int64_t i) {
  for (const auto &ph : phases)
    if (ph.begin <= i && i < ph.end) return ph.name;
  return "";
}

// The fused LM head and loss (bigc-fuse-loss): the first linear_ce_stats instruction's positions,
// vocabulary columns and chunk, the bytes of the logits it does not store, its workspace; `count`
// instructions in all (one per micro-batch).
struct FusedLoss {
  int count = 0;
  int64_t positions = 0, columns = 0, chunk = 0, logitsBytes = 0, workspaceBytes = 0;
};
FusedLoss fusedLossOf(const format::Program &whole) {
  FusedLoss f;
  // This program and its pipeline stages, if it holds them (a stage's own program holds none).
  for (size_t st = 0; st <= whole.stages.size() && f.count == 0; ++st) {
    const format::Program &p = st == 0 ? whole : whole.stages[st - 1];
    for (const auto &ins : p.instructions) {
      if (ins.op != "linear_ce_stats" || ins.in.size() < 2 || ins.out.size() < 2) continue;
      if (f.count++) continue;
      const format::Buffer &h = p.buffers[size_t(ins.in[0])], &w = p.buffers[size_t(ins.in[1])];
      const int64_t c = h.shape.empty() ? 0 : h.shape.back();
      f.positions = c ? h.numel() / c : 0;
      f.columns = w.shape.size() == 2 ? (ins.flag("transpose_b") ? w.shape[0] : w.shape[1]) : 0;
      f.chunk = std::min<int64_t>(int64_t(ins.num("chunk", 0)), f.columns);
      f.logitsBytes = f.positions * f.columns * int64_t(format::dtypeSize(h.dtype));
      f.workspaceBytes = p.buffers[size_t(ins.out[1])].bytes;
      for (const auto &g : p.instructions) // its gradient's workspace (the larger: it holds dh's accumulator)
        if (g.op == "linear_ce_stats_grad" && g.out.size() == 3)
          f.workspaceBytes = std::max(f.workspaceBytes, p.buffers[size_t(g.out[2])].bytes);
    }
  }
  return f;
}

// The fused pairs of ops (bigc-fuse): instructions by name, this program's and its stages', and the
// bytes of memory traffic they save per step: the value between the pair's two ops read back once
// (add + norm, bias + GELU, GELU's gradient + bias gradient), or written and read back (a norm's
// gradient + the residual's).
struct FusedPairs {
  std::map<std::string, int64_t> count;
  int64_t total = 0, savedBytes = 0;
};
FusedPairs fusedPairsOf(const format::Program &whole) {
  FusedPairs f;
  for (size_t st = 0; st <= whole.stages.size(); ++st) {
    const format::Program &p = st == 0 ? whole : whole.stages[st - 1];
    for (const auto &ins : p.instructions) {
      const bool twice = ins.op == "layernorm_grad_add" || ins.op == "rmsnorm_grad_add";
      if (!twice && ins.op != "add_layernorm" && ins.op != "add_rmsnorm" && ins.op != "bias_gelu" &&
          ins.op != "gelu_grad_bias")
        continue;
      ++f.count[ins.op], ++f.total;
      if (!ins.out.empty()) f.savedBytes += (twice ? 2 : 1) * p.buffers[size_t(ins.out[0])].bytes;
    }
  }
  return f;
}

// The padded vocabulary (bigc-pad-vocab): the model's rows and the padded ones, the weights padded
// (by name, once), and the bytes of padding over every persistent tensor (whole tensors: weights,
// their copies, the optimizer's moments), this program's and its stages' (a tied weight in each).
struct VocabPadding {
  int64_t vocab = 0, padded = 0, bytes = 0;
  std::vector<std::string> weights;
};
VocabPadding vocabPaddingOf(const format::Program &whole) {
  VocabPadding v;
  for (size_t st = 0; st <= whole.stages.size(); ++st) {
    const format::Program &p = st == 0 ? whole : whole.stages[st - 1];
    for (const auto &b : p.buffers) {
      if (b.vocabRows <= 0 || !b.persistent()) continue;
      const int64_t rows = b.wholeShape()[0];
      v.vocab = b.vocabRows, v.padded = rows;
      v.bytes += (rows - b.vocabRows) * (b.logicalNumel() / b.vocabRows) * int64_t(format::dtypeSize(b.dtype));
      if ((b.role == "param" || b.role == "master") && b.init.kind != "copy" &&
          std::find(v.weights.begin(), v.weights.end(), b.name) == v.weights.end())
        v.weights.push_back(b.name);
    }
  }
  return v;
}

// Activation bytes kept for the backward: activation buffers live across a forward -> backward
// boundary (the most at any one, with micro-batches), -1 when the program has no backward.
int64_t activationsKeptForBackward(const format::Program &p) {
  std::vector<int64_t> boundaries;
  for (size_t i = 1; i < p.instructions.size(); ++i)
    if (p.instructions[i].phase == "backward" && p.instructions[i - 1].phase == "forward")
      boundaries.push_back(int64_t(i));
  if (boundaries.empty())
    for (const Phase &ph : inferPhases(p))
      if (ph.name.rfind("backward", 0) == 0) boundaries.push_back(ph.begin);
  int64_t most = -1;
  for (int64_t at : boundaries) {
    int64_t bytes = 0;
    for (const auto &b : p.buffers)
      if (b.role == "activation" && b.liveFirst < at && at <= b.liveLast) bytes += b.bytes;
    most = std::max(most, bytes);
  }
  return most;
}

int streamRank(const std::string &s) {
  return s == "compute" ? 0 : s == "h2d" ? 1 : s == "d2h" ? 2 : s == "host" ? 3 : s == "nvme" ? 4 : 5;
}

// Instructions per stream, with the bytes each stream's copies write (transfers between spaces).
struct StreamStat {
  std::string name;
  int64_t instructions = 0, copies = 0, bytes = 0;
};
std::vector<StreamStat> streamStats(const format::Program &p) {
  std::map<std::string, StreamStat> m;
  for (const auto &ins : p.instructions) {
    std::string st = ins.stream.empty() ? "compute" : ins.stream;
    StreamStat &s = m[st];
    s.name = st;
    s.instructions += 1;
    if (ins.op == "copy")
      for (int64_t o : ins.out)
        if (o >= 0 && o < int64_t(p.buffers.size())) s.copies += 1, s.bytes += p.buffers[size_t(o)].bytes;
  }
  std::vector<StreamStat> v;
  for (auto &kv : m) v.push_back(kv.second);
  std::stable_sort(v.begin(), v.end(), [](const StreamStat &a, const StreamStat &b) {
    return streamRank(a.name) != streamRank(b.name) ? streamRank(a.name) < streamRank(b.name) : a.name < b.name;
  });
  return v;
}

// Marker lanes of the timeline: instructions on the side streams (transfers, host work) and the
// recomputed forward work, each a row of ticks under the plot of every space.
struct Lane {
  std::string name, color, what;
  std::vector<int64_t> at; // instruction indices
  int64_t bytes = 0;       // bytes copied (transfer lanes)
};
std::vector<Lane> lanesOf(const format::Program &p) {
  std::vector<Lane> lanes = {{"comm", "#2ca02c", "collectives (all-reduce, reduce-scatter, all-gather)", {}, 0},
                             {"comm_tp", "#17becf", "tensor-parallel collectives", {}, 0},
                             {"comm_cp", "#bcbd22", "context-parallel collectives (the ring's blocks)", {}, 0},
                             {"h2d", "#1f77b4", "copies from host to device", {}, 0},
                             {"d2h", "#d62728", "copies from device to host", {}, 0},
                             {"host", "#8c564b", "work on the host (CPU Adam, ...)", {}, 0},
                             {"nvme", "#e377c2", "copies between the nvme space and the host", {}, 0},
                             {"recompute", "#9467bd", "forward work repeated in the backward", {}, 0}};
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const auto &ins = p.instructions[i];
    for (auto &l : lanes) {
      bool on = l.name == "recompute" ? ins.recompute : ins.stream == l.name;
      if (!on) continue;
      l.at.push_back(int64_t(i));
      if (ins.stream == "comm" || ins.stream == "comm_tp" || ins.stream == "comm_cp")
        for (size_t k = 0; k < ins.in.size() && k < ins.out.size(); ++k)
          l.bytes += std::max(p.buffers[size_t(ins.in[k])].bytes, p.buffers[size_t(ins.out[k])].bytes);
      if (ins.op == "copy")
        for (int64_t o : ins.out)
          if (o >= 0 && o < int64_t(p.buffers.size())) l.bytes += p.buffers[size_t(o)].bytes;
    }
  }
  std::vector<Lane> out;
  for (auto &l : lanes)
    if (!l.at.empty()) out.push_back(std::move(l));
  return out;
}

int64_t recomputedInstructions(const format::Program &p) {
  int64_t n = 0;
  for (const auto &ins : p.instructions) n += ins.recompute ? 1 : 0;
  return n;
}

// "812.3 MFLOP", "1.24 TFLOP".
std::string flopsStr(int64_t f) {
  const char *units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  double v = double(f);
  int u = 0;
  while (v >= 1000.0 && u < 6) v /= 1000.0, ++u;
  return fmt(u == 0 ? "%.0f" : "%.2f", v) + " " + units[u];
}

struct SpaceSummary {
  const format::Space *space = nullptr;
  int64_t capacity = 0;
  bool fits = true;
  int64_t buffers = 0;
  std::map<std::string, int64_t> byRole, countByRole;
  SpaceTimeline tl;
  std::vector<const format::Buffer *> largest; // up to 10
};

SpaceSummary summarize(const format::Program &p, const format::Space &s) {
  SpaceSummary sum;
  sum.space = &s;
  sum.capacity = spaceCapacity(p, s);
  sum.fits = sum.capacity == 0 || s.arenaBytes <= sum.capacity;
  std::vector<const format::Buffer *> bufs;
  for (const auto &b : p.buffers)
    if (b.space == s.name) {
      bufs.push_back(&b);
      sum.byRole[b.role] += b.bytes;
      sum.countByRole[b.role] += 1;
    }
  sum.buffers = int64_t(bufs.size());
  std::stable_sort(bufs.begin(), bufs.end(), [](const format::Buffer *a, const format::Buffer *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->id < b->id;
  });
  if (bufs.size() > 10) bufs.resize(10);
  sum.largest = bufs;
  sum.tl = computeTimeline(p, s.name);
  return sum;
}

// Collectives per step (bigc-shard): count, tensors and bytes of each kind (the whole tensor's
// bytes: what an all-reduce reduces, a reduce-scatter scatters, an all-gather gathers).
struct CollectiveStat {
  int64_t count = 0, tensors = 0, bytes = 0;
};
// axis -1: every collective; 0 (dp) / 1 (tp): those of that mesh axis.
std::map<std::string, CollectiveStat> collectiveStats(const format::Program &p, int axis = -1) {
  std::map<std::string, CollectiveStat> m;
  for (const auto &ins : p.instructions) {
    if (ins.stream != "comm" && ins.stream != "comm_tp" && ins.stream != "comm_cp") continue;
    if (axis >= 0 && int(ins.num("axis", 0)) != axis) continue;
    CollectiveStat &c = m[ins.op];
    c.count += 1;
    const bool tile = ins.attrs.count("tile") > 0; // (a tile's gather moves the tile, a piece of its input)
    for (size_t k = 0; k < ins.in.size() && k < ins.out.size(); ++k) {
      c.tensors += 1;
      c.bytes += tile ? p.buffers[size_t(ins.out[k])].bytes
                      : std::max(p.buffers[size_t(ins.in[k])].bytes, p.buffers[size_t(ins.out[k])].bytes);
    }
  }
  return m;
}

// Model state (weights, fp32 masters, AdamW moments) a rank holds, and the whole model's.
struct ModelState {
  int64_t perRank = 0, whole = 0, shardedTensors = 0, tiledTensors = 0;
};
ModelState modelState(const format::Program &p) {
  ModelState m;
  for (const auto &b : p.buffers) {
    if (!b.persistent()) continue;
    m.perRank += b.bytes;
    int64_t n = b.fullNumel();
    if (b.tpDim >= 0) { // a tensor-parallel chunk: the whole tensor
      n = 1;
      for (int64_t d : b.tpFullShape) n *= d;
    }
    m.whole += n * format::dtypeSize(b.dtype);
    m.shardedTensors += b.sharded() ? 1 : 0;
    m.tiledTensors += b.sharded() && b.tiles > 1 ? 1 : 0;
  }
  return m;
}

void checkRank(const format::Program &p, int64_t rank) {
  if (rank < 0 || rank >= std::max<int64_t>(1, p.ranks))
    throw UserError("--rank " + std::to_string(rank) + " is out of range: the program has " +
                    std::to_string(std::max<int64_t>(1, p.ranks)) + " rank" + (p.ranks == 1 ? "" : "s") + " (0.." +
                    std::to_string(std::max<int64_t>(1, p.ranks) - 1) + ")");
}

// A pipeline's stages: which ranks run each, its arenas, instructions and messages.
struct StageSummary {
  int64_t stage = 0, firstRank = 0, lastRank = 0, instructions = 0, sends = 0, recvs = 0;
  int64_t sentBytes = 0, receivedBytes = 0;
  std::vector<std::pair<std::string, int64_t>> arenas;
};
std::vector<StageSummary> stageSummaries(const format::Program &top) {
  std::vector<StageSummary> out;
  const int64_t per = std::max<int64_t>(1, top.dp * top.tp);
  for (int64_t s = 0; s < top.pp; ++s) {
    const format::Program &sp = top.stageProgram(s);
    StageSummary x;
    x.stage = s, x.firstRank = s * per, x.lastRank = s * per + per - 1;
    x.instructions = int64_t(sp.instructions.size());
    for (const auto &sc : sp.spaces) x.arenas.push_back({sc.name, sc.arenaBytes});
    for (const auto &ins : sp.instructions) {
      if (ins.op == "send") ++x.sends, x.sentBytes += sp.buffers.at(size_t(ins.in.at(0))).bytes;
      if (ins.op == "recv") ++x.recvs, x.receivedBytes += sp.buffers.at(size_t(ins.out.at(0))).bytes;
    }
    out.push_back(x);
  }
  return out;
}

std::string bubbleFormula(const format::Program &top) {
  const double p = double(top.pp), m = double(std::max<int64_t>(1, top.microBatches));
  const double v = double(std::max<int64_t>(1, top.virtualStages));
  if (top.ppSchedule == "interleaved") return "interleaved formula (p-1)/(v*m) = " + fmt("%.3f", (p - 1) / (v * m));
  if (top.ppSchedule == "zero-bubble") return "ZB-H1 formula about (p-1)/(3m) = " + fmt("%.3f", (p - 1) / (3 * m));
  return (top.ppSchedule == "gpipe" ? "GPipe" : "1F1B") + std::string(" formula (p-1)/m = ") + fmt("%.3f", (p - 1) / m);
}

std::string pipelineText(const format::Program &top, int64_t rank) {
  std::ostringstream o;
  const int64_t per = std::max<int64_t>(1, top.dp * top.tp);
  o << "pipeline: " << top.pp << " stages (" << top.ppSchedule << ", " << top.microBatches
    << " micro-batches), ranks = dp " << top.dp << " x tp " << top.tp << " x pp " << top.pp << "; rank " << rank
    << " runs stage " << rank / per << " (reported below; --rank R for another)\n";
  if (!top.ppSplit.empty()) {
    o << "  split: the first layer of " << (top.virtualStages > 1 ? "model chunks 1.." : "stages 1..")
      << top.ppSplit.size() << " is";
    for (size_t i = 0; i < top.ppSplit.size(); ++i) o << (i ? ", " : " ") << top.ppSplit[i];
    o << "\n";
  }
  for (const StageSummary &x : stageSummaries(top)) {
    o << "  stage " << x.stage << ": ranks " << x.firstRank << ".." << x.lastRank;
    for (const auto &[name, bytes] : x.arenas) o << ", " << name << " arena " << humanBytes(bytes);
    o << ", " << withCommas(x.instructions) << " instructions, " << x.sends << " sends (" << humanBytes(x.sentBytes)
      << "), " << x.recvs << " receives (" << humanBytes(x.receivedBytes) << ") per step\n";
  }
  if (top.pipelineEstimate.present) {
    const format::PipelineEstimate &pe = top.pipelineEstimate;
    o << "  estimate (cost model on " << pe.hardware << ", the stages together): " << durationStr(pe.stepSeconds)
      << " per step; bubble " << fmt("%.3f", pe.bubble) << " of the busy time (" << bubbleFormula(top)
      << " for equal stages); busy";
    for (size_t s = 0; s < pe.busySeconds.size(); ++s) o << (s ? ", " : " ") << durationStr(pe.busySeconds[s]);
    o << " (--timeline draws it)\n";
  }
  return o.str();
}

json pipelineJson(const format::Program &top, int64_t rank) {
  json j;
  j["stages"] = top.pp;
  j["schedule"] = top.ppSchedule;
  j["virtual_stages"] = top.virtualStages;
  j["split"] = top.ppSplit;
  j["stage_of_rank"] = rank / std::max<int64_t>(1, top.dp * top.tp);
  json list = json::array();
  for (const StageSummary &x : stageSummaries(top)) {
    json a = json::object();
    for (const auto &[name, bytes] : x.arenas) a[name] = bytes;
    list.push_back({{"stage", x.stage},
                    {"ranks", {x.firstRank, x.lastRank}},
                    {"arena_bytes", a},
                    {"instructions", x.instructions},
                    {"sends", x.sends},
                    {"sent_bytes", x.sentBytes},
                    {"recvs", x.recvs},
                    {"received_bytes", x.receivedBytes}});
  }
  j["per_stage"] = list;
  if (top.pipelineEstimate.present) {
    const format::PipelineEstimate &pe = top.pipelineEstimate;
    j["estimate"] = {{"hardware", pe.hardware},
                     {"step_seconds", pe.stepSeconds},
                     {"bubble", pe.bubble},
                     {"busy_seconds", pe.busySeconds},
                     {"blocks", json::array()}};
    for (const format::PipelineBlock &b : pe.blocks)
      j["estimate"]["blocks"].push_back({b.stage, b.microBatch, b.kind, b.start, b.end});
  }
  return j;
}

bool allFit(const std::vector<SpaceSummary> &ss) {
  for (const auto &s : ss)
    if (!s.fits) return false;
  return true;
}

std::vector<SpaceSummary> summarizeAll(const format::Program &p) {
  std::vector<SpaceSummary> v;
  for (const auto &s : p.spaces) v.push_back(summarize(p, s));
  return v;
}

std::string bufName(const format::Buffer &b) { return b.name.empty() ? "#" + std::to_string(b.id) : b.name; }

std::string liveStr(const format::Buffer &b) {
  return "[" + std::to_string(b.liveFirst) + ", " + std::to_string(b.liveLast) + "]";
}

} // namespace

int64_t spaceCapacity(const format::Program &p, const format::Space &s) {
  if (s.capacityBytes > 0) return s.capacityBytes;
  if (s.name == "device") return p.deviceCapacityBytes;
  if (s.name == "host") return p.hostCapacityBytes;
  if (s.name == "nvme") return p.nvmeCapacityBytes;
  return 0;
}

// Bytes as the planner counts them: each buffer takes whole alignment units of its arena.
static int64_t aligned(int64_t bytes) {
  return (bytes + format::kAlignment - 1) / format::kAlignment * format::kAlignment;
}

SpaceTimeline computeTimeline(const format::Program &p, const std::string &space) {
  SpaceTimeline tl;
  tl.space = space;
  tl.roles = rolesOf(p, &space);
  const int64_t n = std::max<int64_t>(1, int64_t(p.instructions.size()));
  std::map<std::string, size_t> idx;
  for (size_t r = 0; r < tl.roles.size(); ++r) idx[tl.roles[r]] = r;
  // Difference arrays: +bytes at liveFirst, -bytes after liveLast.
  std::vector<std::vector<int64_t>> diff(size_t(n) + 1, std::vector<int64_t>(tl.roles.size(), 0));
  for (const auto &b : p.buffers) {
    if (b.space != space) continue;
    int64_t f = std::clamp<int64_t>(b.liveFirst, 0, n - 1);
    int64_t l = std::clamp<int64_t>(b.liveLast, f, n - 1);
    size_t r = idx[b.role];
    diff[size_t(f)][r] += aligned(b.bytes);
    diff[size_t(l) + 1][r] -= aligned(b.bytes);
  }
  // In place: an output placed over an input that dies at the same instruction shares its
  // bytes there; count them once (on the output's role) at that instruction.
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const auto &ins = p.instructions[i];
    for (int64_t o : ins.out) {
      if (o < 0 || o >= int64_t(p.buffers.size())) continue;
      const format::Buffer &ob = p.buffers[size_t(o)];
      if (ob.space != space || ob.liveFirst != int64_t(i)) continue;
      for (int64_t a : ins.in) {
        if (a == o || a < 0 || a >= int64_t(p.buffers.size())) continue;
        const format::Buffer &ab = p.buffers[size_t(a)];
        if (ab.space != space || ab.liveLast != int64_t(i)) continue;
        int64_t lo = std::max(ab.offset, ob.offset);
        int64_t hi = std::min(ab.offset + aligned(ab.bytes), ob.offset + aligned(ob.bytes));
        if (hi <= lo) continue;
        size_t r = idx[ob.role];
        diff[i][r] -= hi - lo;
        diff[i + 1][r] += hi - lo;
      }
    }
  }
  // Held: a buffer live after the last instruction that touches it waits for a side stream's
  // instruction to be joined (bigc-memory-plan keeps it until the compute stream's wait).
  std::vector<int64_t> lastTouch(p.buffers.size(), -1);
  for (size_t i = 0; i < p.instructions.size(); ++i)
    for (const auto *list : {&p.instructions[i].in, &p.instructions[i].out})
      for (int64_t b : *list)
        if (b >= 0 && b < int64_t(p.buffers.size())) lastTouch[size_t(b)] = int64_t(i);
  std::vector<int64_t> heldDiff(size_t(n) + 1, 0);
  for (const auto &b : p.buffers) {
    if (b.space != space || b.persistent()) continue;
    int64_t from = lastTouch[size_t(b.id)] + 1, to = std::min<int64_t>(b.liveLast, n - 1);
    if (lastTouch[size_t(b.id)] < 0 || from > to) continue;
    heldDiff[size_t(from)] += aligned(b.bytes);
    heldDiff[size_t(to) + 1] -= aligned(b.bytes);
  }
  tl.live.assign(size_t(n), std::vector<int64_t>(tl.roles.size(), 0));
  tl.held.assign(size_t(n), 0);
  std::vector<int64_t> cur(tl.roles.size(), 0);
  int64_t held = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t total = 0;
    for (size_t r = 0; r < cur.size(); ++r) {
      cur[r] += diff[size_t(i)][r];
      tl.live[size_t(i)][r] = cur[r];
      total += cur[r];
    }
    held += heldDiff[size_t(i)];
    tl.held[size_t(i)] = held;
    if (total > tl.peakBytes) tl.peakBytes = total, tl.peakInstruction = i;
  }
  return tl;
}

std::string textReport(const format::Program &p, const std::string &path, int64_t rank, bool memory) {
  checkRank(p, rank);
  std::ostringstream o;
  auto sums = summarizeAll(p);
  int64_t params = p.parameterCount();
  o << path << ": bigc program version " << p.version;
  if (!p.producer.empty()) o << ", produced by " << p.producer;
  if (!p.source.empty()) o << " from " << p.source;
  o << "\n";
  o << "config: batch " << p.batch << ", seq " << p.seq << ", vocab " << p.vocab << ", precision " << p.precision
    << ", micro-batches " << p.microBatches << ", ranks " << p.ranks;
  if (p.ranks > 1) o << " (showing rank " << rank << ")";
  o << "\n";
  if (p.ranks > 1) {
    ModelState ms = modelState(p);
    o << "mesh: dp " << p.dp << (p.cp > 1 ? " (of which cp " + std::to_string(p.cp) + ")" : "") << " x tp " << p.tp
      << " x pp " << p.pp << ", ZeRO " << p.zero
      << (p.pp > 1 ? "; the ranks of stage " + std::to_string(p.stage) + " run this plan"
                   : "; every rank runs this plan")
      << " on their data-parallel slice of the global batch (" << p.dp / p.cp << " x " << p.microBatches << " x "
      << p.batch << " sequences per step"
      << (p.cp > 1 ? ", each rank holding 1/" + std::to_string(p.cp) + " of each" : "") << ")\n";
    o << "model state: " << humanBytes(ms.perRank) << " on rank " << rank << " of " << humanBytes(ms.whole)
      << " whole (" << fmt("%.3f", ms.whole > 0 ? double(ms.perRank) / double(ms.whole) : 1.0) << ")";
    if (ms.shardedTensors > 0)
      o << "; " << ms.shardedTensors << " tensors sharded: rank " << rank << " holds elements [" << rank << "*S, "
        << rank << "*S+S) of each (S = ceil(elements / " << p.dp << "))";
    if (ms.tiledTensors > 0)
      o << ", but for " << ms.tiledTensors << " in row tiles (--tile-linear), of which rank " << rank
        << " holds its piece of each tile (each tile gathered alone)";
    o << "\n";
    if (p.estimate.present) {
      o << "estimate (cost model on " << p.hardwareName << "): " << durationStr(p.estimate.stepSeconds)
        << " per step, compute " << durationStr(p.estimate.computeSeconds);
      for (const auto &c : p.estimate.collectives)
        o << "; " << c.op << " " << durationStr(c.seconds) << ", "
          << fmt("%.0f", c.seconds > 0 ? 100.0 * c.hiddenSeconds / c.seconds : 100.0) << "% hidden behind compute"
          << (c.queuedSeconds > 0 ? ", " + durationStr(c.queuedSeconds) + " queued behind its stream" : "");
      o << "\n";
    }
    if (p.cp > 1) { // the context axis: its collectives, and the sequences' chunks of this rank
      const int64_t c = (rank / p.tp) % p.dp % p.cp, C = p.cp;
      int64_t shifts = 0, a2a = 0, shiftBytes = 0, a2aBytes = 0;
      for (const auto &ins : p.instructions)
        for (int64_t id : ins.in) {
          if (ins.op == "ring_shift") shiftBytes += p.buffers[size_t(id)].bytes;
          if (ins.op == "cp_all_to_all") a2aBytes += p.buffers[size_t(id)].bytes;
        }
      for (const auto &ins : p.instructions) shifts += ins.op == "ring_shift", a2a += ins.op == "cp_all_to_all";
      o << "context parallel: cp " << C << " (within dp: " << p.dp / C << " data groups of " << C
        << " ranks); each sequence of " << C * p.seq << " tokens in " << 2 * C << " chunks of " << p.seq / 2
        << ", rank " << rank << " (index " << c << " on the cp axis) holding chunks " << c << " and " << 2 * C - 1 - c
        << "; attention "
        << (a2a > 0
                ? "by all-to-all (" + std::to_string(a2a) + " per step, " + humanBytes(a2aBytes) + " sent)"
                : "by ring (" + std::to_string(shifts) + " shifts per step, " + humanBytes(shiftBytes) + " passed on)")
        << "\n";
    }
    if (p.tp > 1) {
      auto isWeight = [](const format::Buffer &b) { // one buffer per weight: the master, else the weight
        return b.tpDim >= 0 && (b.role == "master" || (b.role == "param" && b.init.kind != "copy"));
      };
      int64_t splitCount = 0;
      for (const auto &b : p.buffers) splitCount += isWeight(b) ? 1 : 0;
      o << "tensor parallel: tp " << p.tp << (p.sequenceParallel ? " with sequence parallelism" : "") << "; rank "
        << rank << " is tensor rank " << rank % p.tp << " of data-parallel group " << rank / p.tp << "; " << splitCount
        << " weights split (Megatron column/row, vocabulary-parallel embedding and loss)";
      int shown = 0;
      for (const auto &b : p.buffers)
        if (isWeight(b) && shown++ < 6)
          o << (shown == 1 ? ": " : ", ") << b.name << " " << shapeStr(b.tpFullShape) << " dim " << b.tpDim
            << (b.tpSegments > 1 ? " in " + std::to_string(b.tpSegments) + " segments" : "");
      if (shown > 6) o << ", ...";
      o << "\n";
      auto ts = collectiveStats(p, 1);
      o << "tensor-axis collectives per step:";
      bool first = true;
      for (const auto &[op, c] : ts) {
        o << (first ? " " : "; ") << op << " " << c.count << " (" << humanBytes(c.bytes) << ")";
        first = false;
      }
      o << (first ? " none\n" : "\n");
      if (p.tpReplicated.empty()) o << "replicated over the tensor ranks (no rule): none\n";
      for (const auto &n : p.tpReplicated) o << "replicated over the tensor ranks: " << n << "\n";
    }
    auto cs = collectiveStats(p);
    if (!cs.empty()) {
      o << "collectives per step (comm stream):";
      bool first = true;
      for (const auto &[op, c] : cs) {
        o << (first ? " " : "; ") << op << " " << c.count << " (" << c.tensors << " tensors, " << humanBytes(c.bytes)
          << ")";
        first = false;
      }
      o << "\n";
    }
  }
  o << "hardware: " << (p.hardwareName.empty() ? std::string("(none)") : p.hardwareName);
  if (p.deviceCapacityBytes || p.hostCapacityBytes)
    o << " (device " << humanBytes(p.deviceCapacityBytes) << ", host " << humanBytes(p.hostCapacityBytes)
      << " for the plan)";
  o << "\n";
  if (!p.initialWeights.empty())
    o << "initial weights: " << p.initialWeights << " (" << humanBytes(p.initialWeightsBytes)
      << ", the imported model's; bigc run loads them)\n";
  if (p.deviceReserveBytes > 0 || p.hostReserveBytes > 0) {
    o << "reserve: device " << humanBytes(p.deviceReserveBytes);
    if (!p.deviceReserveParts.empty()) {
      o << " (";
      for (size_t i = 0; i < p.deviceReserveParts.size(); ++i)
        o << (i ? ", " : "") << p.deviceReserveParts[i].first << " " << humanBytes(p.deviceReserveParts[i].second);
      o << ")";
    }
    o << ", host " << humanBytes(p.hostReserveBytes)
      << "; kept out of the plan for what it does not hold (CUDA context, workspaces, NCCL; the OS)\n";
  }
  o << "optimizer: " << p.optimizer.kind << " lr " << p.optimizer.lr << ", betas " << p.optimizer.beta1 << "/"
    << p.optimizer.beta2 << ", eps " << p.optimizer.eps << ", weight decay " << p.optimizer.weightDecay
    << ", grad clip " << p.optimizer.gradClip << "\n";
  if (p.optimizer.schedule.present()) o << "learning rate: " << format::describeSchedule(p.optimizer) << "\n";
  if (!p.evalInstructions.empty()) {
    // The evaluation program: the memory it touches of the device arena at its peak (its
    // activations where the training plan put them, and every persistent buffer of the space).
    const std::string space = p.space("device") ? "device" : p.spaces.empty() ? "" : p.spaces[0].name;
    std::vector<int64_t> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
    for (size_t k = 0; k < p.evalInstructions.size(); ++k) {
      const format::Instruction &ins = p.instructions[size_t(p.evalInstructions[k])];
      for (const auto *ids : {&ins.in, &ins.out})
        for (int64_t id : *ids) {
          if (first[size_t(id)] < 0) first[size_t(id)] = int64_t(k);
          last[size_t(id)] = int64_t(k);
        }
    }
    int64_t persistent = 0, peak = 0;
    std::vector<int64_t> delta(p.evalInstructions.size() + 1, 0);
    for (const format::Buffer &b : p.buffers) {
      if (b.space != space) continue;
      if (b.persistent())
        persistent += b.bytes;
      else if (first[size_t(b.id)] >= 0)
        delta[size_t(first[size_t(b.id)])] += b.bytes, delta[size_t(last[size_t(b.id)] + 1)] -= b.bytes;
    }
    for (int64_t k = 0, live = 0; k < int64_t(p.evalInstructions.size()); ++k)
      peak = std::max(peak, live += delta[size_t(k)]);
    const format::Space *sp = p.space(space);
    o << "evaluation: " << withCommas(int64_t(p.evalInstructions.size())) << " of the "
      << withCommas(int64_t(p.instructions.size()))
      << " instructions (the step's forward); bigc run --val-data runs it in the training arenas: at its peak "
      << humanBytes(persistent + peak) << " of the " << space << " arena's " << humanBytes(sp ? sp->arenaBytes : 0)
      << " (weights and state " << humanBytes(persistent) << ", activations " << humanBytes(peak)
      << "; no gradients, no memory of its own)\n";
    if (format::hasEvaluationPlan(p)) {
      // bigc eval's own plan: per space its arena, the weights it keeps and the rest (activations,
      // the inputs and the loss packed on their own).
      std::map<std::string, int64_t> weights;
      for (int64_t id : p.evalPlan.buffers)
        if (p.buffers[size_t(id)].persistent()) weights[p.buffers[size_t(id)].space] += p.buffers[size_t(id)].bytes;
      o << "evaluation plan (bigc eval):";
      bool firstSpace = true;
      for (const auto &[name, bytes] : p.evalPlan.arenas) {
        const format::Space *ts = p.space(name);
        o << (firstSpace ? " " : "; ") << name << " " << humanBytes(bytes) << " (weights " << humanBytes(weights[name])
          << ", activations " << humanBytes(bytes - weights[name]) << ") against the step's "
          << humanBytes(ts ? ts->arenaBytes : 0);
        firstSpace = false;
      }
      o << "; no gradients, no optimizer state\n";
    } else {
      o << "evaluation plan (bigc eval): none of its own ("
        << (p.pp > 1          ? "a pipelined program"
            : p.space("nvme") ? "a program with an nvme space"
                              : "compiled by an older bigc")
        << "): bigc eval runs it in the training arenas\n";
    }
  }
  o << "parameters: " << withCommas(params) << "\n";
  o << "instructions: " << withCommas(int64_t(p.instructions.size()))
    << ", buffers: " << withCommas(int64_t(p.buffers.size())) << "\n";
  o << "fits: " << (allFit(sums) ? "yes" : "NO") << "\n";
  {
    // A background checkpoint's snapshot (bigc run --checkpoint-dir) is host memory outside the plan.
    const int64_t snap = p.stateBytes();
    const format::Space *host = p.space("host");
    o << "checkpoints: " << humanBytes(snap)
      << " of training state; bigc run --checkpoint-dir writes them in the background from a snapshot of that size"
         " in host memory";
    if (p.hostCapacityBytes > 0) {
      const int64_t beside = (host ? host->arenaBytes : 0) + snap;
      o << " (with the host arena " << humanBytes(beside) << " of the host's " << humanBytes(p.hostCapacityBytes)
        << (beside <= p.hostCapacityBytes ? ": fits" : ": does not fit, use --checkpoint-sync") << ")";
    }
    o << "; --checkpoint-sync writes between steps without it\n";
  }
  {
    std::vector<StreamStat> st = streamStats(p);
    if (st.size() > 1 || (st.size() == 1 && st[0].name != "compute")) {
      o << "streams:";
      for (size_t k = 0; k < st.size(); ++k) {
        o << (k ? ", " : " ") << st[k].name << " " << withCommas(st[k].instructions);
        if (st[k].copies)
          o << " (" << withCommas(st[k].copies) << (st[k].copies == 1 ? " copy, " : " copies, ")
            << humanBytes(st[k].bytes) << ")";
      }
      o << "\n";
    }
  }

  if (p.recompute.policy != "none" || recomputedInstructions(p) > 0) {
    const auto &rc = p.recompute;
    o << "recompute: " << rc.policy << ": " << humanBytes(rc.savedBytes)
      << " of activations not kept for the backward; +" << flopsStr(rc.flopsAdded) << " per step in "
      << withCommas(recomputedInstructions(p)) << " recomputed instructions";
    if (rc.forwardFlops > 0)
      o << " (" << fmt("%.1f", 100.0 * double(rc.flopsAdded) / double(rc.forwardFlops)) << "% of the forward's "
        << flopsStr(rc.forwardFlops) << ", ~"
        << fmt("%.1f", 100.0 * double(rc.flopsAdded) / (3.0 * double(rc.forwardFlops))) << "% of forward + backward)";
    o << "\n";
  }

  if (FusedLoss fl = fusedLossOf(p); fl.count > 0)
    o << "fused loss (--fuse-loss): the LM head and the cross-entropy " << fl.chunk << " of " << fl.columns
      << " vocabulary columns at a time; the " << withCommas(fl.positions) << " x " << withCommas(fl.columns)
      << " logits (" << humanBytes(fl.logitsBytes) << ", and as much for their gradient) not stored"
      << (fl.count > 1 ? " in each of " + std::to_string(fl.count) + " micro-batches" : std::string()) << "; workspace "
      << humanBytes(fl.workspaceBytes) << "\n";

  if (FusedPairs fp = fusedPairsOf(p); fp.total > 0) {
    o << "fused pairs (--fuse): " << fp.total << " instructions (";
    bool first = true;
    for (const auto &[name, n] : fp.count) o << (first ? "" : ", ") << name << " x" << n, first = false;
    o << "); " << humanBytes(fp.savedBytes) << " less memory traffic per step (values not written or read back)\n";
  }

  if (VocabPadding vp = vocabPaddingOf(p); vp.vocab > 0) {
    o << "vocabulary padded (--pad-vocab): " << withCommas(vp.vocab) << " -> " << withCommas(vp.padded) << " rows of ";
    for (size_t k = 0; k < vp.weights.size(); ++k) o << (k ? ", " : "") << vp.weights[k];
    o << " (zero rows outside the loss; " << humanBytes(vp.bytes)
      << " of padding in the weights, their copies and the optimizer's moments)\n";
  }

  if (int64_t kept = activationsKeptForBackward(p); kept >= 0)
    o << "activations kept for the backward: " << humanBytes(kept)
      << " (activation buffers live across the forward/backward boundary)\n";

  { // --offload-activations: the forward's copies of activations to the host (for the backward)
    int64_t n = 0, bytes = 0;
    for (const auto &ins : p.instructions)
      if (ins.phase == "forward" && ins.stream == "d2h" && ins.op == "copy")
        for (int64_t id : ins.out) ++n, bytes += p.buffers[size_t(id)].bytes;
    if (n > 0)
      o << "activations offloaded (--offload-activations): " << n << " tensors, " << humanBytes(bytes)
        << " copied to the host as the forward makes them and back a layer ahead of the backward\n";
  }

  std::vector<Phase> ph = inferPhases(p);
  for (const auto &s : sums) {
    const format::Space &sp = *s.space;
    o << "\nspace " << sp.name << " (" << s.buffers << " buffers)\n";
    o << "  arena        " << lpad(humanBytes(sp.arenaBytes), 12) << "  (" << withCommas(sp.arenaBytes) << " bytes)\n";
    o << "  lower bound  " << lpad(humanBytes(sp.lowerBoundBytes), 12);
    if (sp.lowerBoundBytes > 0)
      o << "  (arena / lower bound = " << fmt("%.3f", double(sp.arenaBytes) / double(sp.lowerBoundBytes)) << ")";
    o << "\n";
    o << "  capacity     ";
    if (s.capacity > 0) {
      o << lpad(humanBytes(s.capacity), 12) << "  " << (s.fits ? "fits" : "DOES NOT FIT") << " ("
        << fmt("%.1f", 100.0 * double(sp.arenaBytes) / double(s.capacity)) << "% used)";
      const int64_t reserve = sp.name == "device" ? p.deviceReserveBytes : sp.name == "host" ? p.hostReserveBytes : 0;
      if (reserve > 0) o << "; the memory less a reserve of " << humanBytes(reserve);
      o << "\n";
    } else
      o << lpad("unknown", 12) << "  (no capacity recorded)\n";
    o << "  by role:\n";
    std::vector<std::string> roles;
    for (const auto &kv : s.byRole) roles.push_back(kv.first);
    std::sort(roles.begin(), roles.end(), roleLess);
    for (const auto &r : roles) o << "    " << pad(r, 16) << lpad(humanBytes(s.byRole.at(r)), 12) << "\n";
    o << "  largest buffers:\n";
    size_t nameW = 6, roleW = 6, shapeW = 7;
    for (const format::Buffer *b : s.largest) {
      nameW = std::max(nameW, bufName(*b).size() + 2);
      roleW = std::max(roleW, b->role.size() + 2);
      shapeW = std::max(shapeW, shapeStr(b->shape).size() + 2);
    }
    o << "    " << pad("name", nameW) << pad("role", roleW) << pad("shape", shapeW) << lpad("bytes", 11) << "  live\n";
    for (const format::Buffer *b : s.largest)
      o << "    " << pad(bufName(*b), nameW) << pad(b->role, roleW) << pad(shapeStr(b->shape), shapeW)
        << lpad(humanBytes(b->bytes), 11) << "  " << liveStr(*b) << "\n";

    if (memory) {
      o << "  per role (count, total bytes, live at the peak):\n";
      o << "    " << pad("role", 16) << lpad("count", 8) << lpad("total", 14) << lpad("at peak", 14) << "\n";
      const auto &tl = s.tl;
      std::vector<int64_t> atPeak(tl.roles.size(), 0);
      if (!tl.live.empty()) atPeak = tl.live[size_t(tl.peakInstruction)];
      for (size_t r = 0; r < tl.roles.size(); ++r) {
        const std::string &role = tl.roles[r];
        o << "    " << pad(role, 16) << lpad(std::to_string(s.countByRole.at(role)), 8)
          << lpad(humanBytes(s.byRole.at(role)), 14) << lpad(humanBytes(atPeak[r]), 14) << "\n";
      }
      std::string phase = phaseOf(ph, tl.peakInstruction);
      o << "  peak: " << humanBytes(tl.peakBytes) << " live at instruction " << tl.peakInstruction;
      if (tl.peakInstruction < int64_t(p.instructions.size())) {
        const auto &ins = p.instructions[size_t(tl.peakInstruction)];
        o << " (" << ins.op;
        if (!phase.empty()) o << ", " << phase;
        if (!ins.loc.empty()) o << ", " << ins.loc;
        o << ")";
      }
      o << "\n";
      if (!tl.held.empty() && tl.held[size_t(tl.peakInstruction)] > 0)
        o << "  of which held for another stream: " << humanBytes(tl.held[size_t(tl.peakInstruction)])
          << " (buffers past their last use, until the compute stream joins the instruction of another "
             "stream that touched them)\n";
      // The largest buffers live at the peak.
      std::vector<const format::Buffer *> live;
      for (const auto &b : p.buffers)
        if (b.space == sp.name && b.liveFirst <= tl.peakInstruction && tl.peakInstruction <= b.liveLast &&
            !b.persistent())
          live.push_back(&b);
      std::stable_sort(live.begin(), live.end(),
                       [](const format::Buffer *a, const format::Buffer *b) { return a->bytes > b->bytes; });
      if (live.size() > 8) live.resize(8);
      if (!live.empty()) {
        size_t nw = 6, rw = 6;
        for (const format::Buffer *b : live) {
          nw = std::max(nw, bufName(*b).size() + 2);
          rw = std::max(rw, b->role.size() + 2);
        }
        o << "  largest non-persistent buffers live at the peak:\n";
        for (const format::Buffer *b : live)
          o << "    " << pad(bufName(*b), nw) << pad(b->role, rw) << lpad(humanBytes(b->bytes), 11) << "  "
            << liveStr(*b) << "\n";
      }
    }
  }
  if (memory) {
    o << "\nphases:";
    for (size_t k = 0; k < ph.size(); ++k)
      o << (k ? ", " : " ") << ph[k].name << " [" << ph[k].begin << ", " << ph[k].end << ")";
    if (ph.empty()) o << " (no instructions)";
    o << "\n";
  }
  return o.str();
}

std::string jsonReport(const format::Program &p, const std::string &path, int64_t rank) {
  checkRank(p, rank);
  auto sums = summarizeAll(p);
  json j;
  j["file"] = path;
  j["version"] = p.version;
  j["producer"] = p.producer;
  j["source"] = p.source;
  j["parameters"] = p.parameterCount();
  j["ranks"] = p.ranks;
  j["rank"] = rank;
  j["mesh"] = {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}};
  j["zero"] = p.zero;
  {
    ModelState ms = modelState(p);
    j["model_state_bytes"] = {{"rank", ms.perRank},
                              {"whole", ms.whole},
                              {"sharded_tensors", ms.shardedTensors},
                              {"tiled_tensors", ms.tiledTensors}};
    json cj = json::object();
    for (const auto &[op, c] : collectiveStats(p))
      cj[op] = {{"count", c.count}, {"tensors", c.tensors}, {"bytes", c.bytes}};
    j["collectives"] = cj;
    if (p.tp > 1) {
      json tc = json::array(), splits = json::array();
      for (const auto &[op, c] : collectiveStats(p, 1))
        tc.push_back({{"op", op}, {"count", c.count}, {"tensors", c.tensors}, {"bytes", c.bytes}});
      std::set<std::string> seen;
      for (const auto &b : p.buffers)
        if (b.tpDim >= 0 && (b.role == "param" || b.role == "master")) {
          std::string name = b.name; // the weight (its compute copy "N.half", shard "N.half.shard")
          for (const char *suffix : {".half.shard", ".half"})
            if (name.size() > strlen(suffix) && name.compare(name.size() - strlen(suffix), strlen(suffix), suffix) == 0)
              name.resize(name.size() - strlen(suffix));
          if (!seen.insert(name).second) continue;
          splits.push_back({{"name", name},
                            {"dim", b.tpDim},
                            {"segments", b.tpSegments},
                            {"full_shape", b.tpFullShape},
                            {"shape", b.shard ? b.fullShape : b.shape}});
        }
      j["tensor_parallel"] = {
          {"tp", p.tp},        {"tensor_rank", rank % p.tp}, {"sequence_parallel", p.sequenceParallel},
          {"collectives", tc}, {"splits", splits},           {"replicated", p.tpReplicated}};
    }
  }
  if (p.estimate.present) {
    json ec = json::array();
    for (const auto &c : p.estimate.collectives)
      ec.push_back({{"op", c.op},
                    {"count", c.count},
                    {"seconds", c.seconds},
                    {"hidden_seconds", c.hiddenSeconds},
                    {"queued_seconds", c.queuedSeconds},
                    {"hidden_fraction", c.seconds > 0 ? c.hiddenSeconds / c.seconds : 1.0}});
    json eo = json::array();
    for (const auto &o : p.estimate.ops)
      eo.push_back({{"op", o.op},
                    {"stream", o.stream},
                    {"count", o.count},
                    {"seconds", o.seconds},
                    {"flops", o.flops},
                    {"bytes", o.bytes}});
    j["estimate"] = {{"hardware", p.hardwareName},
                     {"step_seconds", p.estimate.stepSeconds},
                     {"compute_seconds", p.estimate.computeSeconds},
                     {"collectives", ec},
                     {"ops", eo}};
  }
  j["fits"] = allFit(sums);
  j["instructions"] = int64_t(p.instructions.size());
  j["buffers"] = int64_t(p.buffers.size());
  j["config"] = {{"batch", p.batch},
                 {"seq", p.seq},
                 {"vocab", p.vocab},
                 {"precision", p.precision},
                 {"micro_batches", p.microBatches},
                 {"ranks", p.ranks}};
  j["checkpoint_snapshot_bytes"] = p.stateBytes();
  if (!p.initialWeights.empty()) j["initial_weights"] = {{"path", p.initialWeights}, {"bytes", p.initialWeightsBytes}};
  j["hardware"] = format::hardwareJson(p);
  json phases = json::array();
  for (const auto &ph : inferPhases(p)) phases.push_back({{"name", ph.name}, {"begin", ph.begin}, {"end", ph.end}});
  j["phases"] = phases;
  j["activations_kept_bytes"] = activationsKeptForBackward(p);
  if (FusedLoss fl = fusedLossOf(p); fl.count > 0)
    j["fused_loss"] = {{"instructions", fl.count},       {"positions", fl.positions},
                       {"columns", fl.columns},          {"chunk", fl.chunk},
                       {"logits_bytes", fl.logitsBytes}, {"workspace_bytes", fl.workspaceBytes}};
  if (FusedPairs fp = fusedPairsOf(p); fp.total > 0)
    j["fused_pairs"] = {{"instructions", fp.count}, {"saved_bytes", fp.savedBytes}};
  if (VocabPadding vp = vocabPaddingOf(p); vp.vocab > 0)
    j["vocab_padding"] = {
        {"vocabulary", vp.vocab}, {"padded", vp.padded}, {"weights", vp.weights}, {"bytes", vp.bytes}};
  json streams = json::object();
  for (const auto &st : streamStats(p))
    streams[st.name] = {{"instructions", st.instructions}, {"copies", st.copies}, {"bytes", st.bytes}};
  j["streams"] = streams;
  j["recompute"] = {
      {"policy", p.recompute.policy},
      {"saved_bytes", p.recompute.savedBytes},
      {"flops_added", p.recompute.flopsAdded},
      {"forward_flops", p.recompute.forwardFlops},
      {"flops_added_fraction_of_forward",
       p.recompute.forwardFlops > 0 ? double(p.recompute.flopsAdded) / double(p.recompute.forwardFlops) : 0.0},
      {"instructions", recomputedInstructions(p)}};
  json spaces = json::object();
  std::vector<const format::Buffer *> all;
  for (const auto &s : sums) {
    json sj;
    sj["arena_bytes"] = s.space->arenaBytes;
    sj["lower_bound_bytes"] = s.space->lowerBoundBytes;
    sj["capacity_bytes"] = s.capacity;
    sj["fits"] = s.fits;
    sj["ratio"] = s.space->lowerBoundBytes > 0 ? double(s.space->arenaBytes) / double(s.space->lowerBoundBytes) : 0.0;
    sj["buffers"] = s.buffers;
    json byRole = json::object(), counts = json::object(), atPeak = json::object();
    std::vector<std::string> roles;
    for (const auto &kv : s.byRole) roles.push_back(kv.first);
    std::sort(roles.begin(), roles.end(), roleLess);
    for (const auto &r : roles) {
      byRole[r] = s.byRole.at(r);
      counts[r] = s.countByRole.at(r);
    }
    for (size_t r = 0; r < s.tl.roles.size(); ++r)
      atPeak[s.tl.roles[r]] = s.tl.live.empty() ? int64_t(0) : s.tl.live[size_t(s.tl.peakInstruction)][r];
    sj["by_role"] = byRole;
    sj["count_by_role"] = counts;
    sj["peak_live_bytes"] = s.tl.peakBytes;
    sj["held_at_peak_bytes"] = s.tl.held.empty() ? int64_t(0) : s.tl.held[size_t(s.tl.peakInstruction)];
    sj["peak_instruction"] = s.tl.peakInstruction;
    sj["by_role_at_peak"] = atPeak;
    spaces[s.space->name] = sj;
  }
  j["spaces"] = spaces;
  for (const auto &b : p.buffers) all.push_back(&b);
  std::stable_sort(all.begin(), all.end(), [](const format::Buffer *a, const format::Buffer *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->id < b->id;
  });
  if (all.size() > 10) all.resize(10);
  json largest = json::array();
  for (const format::Buffer *b : all)
    largest.push_back({{"id", b->id},
                       {"name", b->name},
                       {"space", b->space},
                       {"role", b->role},
                       {"dtype", format::dtypeName(b->dtype)},
                       {"shape", b->shape},
                       {"bytes", b->bytes},
                       {"offset", b->offset},
                       {"live", {b->liveFirst, b->liveLast}}});
  j["largest_buffers"] = largest;
  return j.dump(2) + "\n";
}

namespace {

struct Unit {
  double div;
  const char *name;
};

Unit unitFor(double maxBytes) {
  if (maxBytes >= double(1ll << 40)) return {double(1ll << 40), "TiB"};
  if (maxBytes >= double(1ll << 30)) return {double(1ll << 30), "GiB"};
  if (maxBytes >= double(1ll << 20)) return {double(1ll << 20), "MiB"};
  if (maxBytes >= 1024.0) return {1024.0, "KiB"};
  return {1.0, "B"};
}

double niceStep(double range, int ticks) {
  if (range <= 0) return 1;
  double raw = range / ticks;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  return nice * mag;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tickLabel(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

} // namespace

std::string pipelineDiagram(const std::vector<format::PipelineBlock> &blocks, int64_t stages, int64_t microBatches,
                            const std::string &title, const std::string &subtitle, double y, double *height) {
  const double W = 1140, left = 90, right = 40, top = 50, plotW = W - left - right;
  const double rowH = stages <= 8 ? 30 : stages <= 16 ? 20 : 12;
  const double H = top + double(stages) * rowH + 66;
  if (height) *height = H;
  double t0 = 0, t1 = 0;
  for (const auto &b : blocks) t1 = std::max(t1, b.end);
  if (t1 <= t0) t1 = 1;
  // Time in the unit that keeps the numbers readable.
  const double unit = t1 >= 1 ? 1 : t1 >= 1e-3 ? 1e-3 : 1e-6;
  const char *unitName = t1 >= 1 ? "s" : t1 >= 1e-3 ? "ms" : "us";
  auto X = [&](double t) { return left + plotW * (t - t0) / (t1 - t0); };
  auto rowY = [&](int64_t st) { return y + top + double(st) * rowH; };
  std::ostringstream o;
  o << "<g id=\"pipeline\">\n";
  o << "<defs><pattern id=\"bubble\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
       "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f6f6f6\"/><line x1=\"0\" y1=\"0\" "
       "x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/></pattern></defs>\n";
  o << "<text x=\"" << left << "\" y=\"" << num(y + 22) << "\" font-size=\"16\" font-weight=\"bold\">"
    << xmlEscape(title) << "</text>\n";
  o << "<text x=\"" << left << "\" y=\"" << num(y + 40) << "\" fill=\"#555\">" << xmlEscape(subtitle) << "</text>\n";
  auto color = [](const format::PipelineBlock &b) {
    const bool odd = b.microBatch % 2 != 0;
    if (b.kind == "forward") return odd ? "#7da7d9" : "#4e79a7";
    if (b.kind == "backward") return odd ? "#f5a55a" : "#e07b1a";
    if (b.kind == "weight") return odd ? "#8cc07f" : "#59a14f";
    return "#9a9a9a";
  };
  for (int64_t st = 0; st < stages; ++st) {
    // The row: hatched where the stage's compute stream is idle (the bubbles), the stretches over it.
    o << "<rect x=\"" << num(left) << "\" y=\"" << num(rowY(st) + 2) << "\" width=\"" << num(plotW) << "\" height=\""
      << num(rowH - 4) << "\" fill=\"url(#bubble)\"><title>stage " << st << ": idle (bubble)</title></rect>\n";
    o << "<text x=\"" << num(left - 8) << "\" y=\"" << num(rowY(st) + rowH / 2 + 4) << "\" text-anchor=\"end\">stage "
      << st << "</text>\n";
  }
  for (const auto &b : blocks) {
    if (b.stage < 0 || b.stage >= stages) continue;
    const double xa = X(b.start), w = std::max(0.5, X(b.end) - xa);
    o << "<rect x=\"" << num(xa) << "\" y=\"" << num(rowY(b.stage) + 2) << "\" width=\"" << fmt("%.2f", w)
      << "\" height=\"" << num(rowH - 4) << "\" fill=\"" << color(b) << "\"><title>stage " << b.stage << ": " << b.kind
      << (b.microBatch >= 0 ? " of micro-batch " + std::to_string(b.microBatch) : std::string()) << ", "
      << durationStr(b.start) << " .. " << durationStr(b.end) << "</title></rect>\n";
    if (b.microBatch >= 0 && w >= 12 && rowH >= 20)
      o << "<text x=\"" << num(xa + w / 2) << "\" y=\"" << num(rowY(b.stage) + rowH / 2 + 4)
        << "\" text-anchor=\"middle\" fill=\"white\" font-size=\"11\">" << b.microBatch << "</text>\n";
  }
  // Time axis.
  const double axisY = rowY(stages) + 6;
  o << "<line x1=\"" << left << "\" y1=\"" << num(axisY) << "\" x2=\"" << num(left + plotW) << "\" y2=\"" << num(axisY)
    << "\" stroke=\"#333\"/>\n";
  const double step = niceStep((t1 - t0) / unit, 8);
  for (double v = 0; v <= (t1 - t0) / unit + step * 1e-6; v += step) {
    const double xx = X(t0 + v * unit);
    o << "<line x1=\"" << num(xx) << "\" y1=\"" << num(axisY) << "\" x2=\"" << num(xx) << "\" y2=\"" << num(axisY + 4)
      << "\" stroke=\"#333\"/><text x=\"" << num(xx) << "\" y=\"" << num(axisY + 17) << "\" text-anchor=\"middle\">"
      << tickLabel(v) << "</text>\n";
  }
  o << "<text x=\"" << num(left + plotW / 2) << "\" y=\"" << num(axisY + 34) << "\" text-anchor=\"middle\">time ("
    << unitName << ")</text>\n";
  // Legend.
  double lx = left;
  const double ly = axisY + 48;
  for (auto [name, c] : {std::pair<const char *, const char *>{"forward", "#4e79a7"},
                         {"backward", "#e07b1a"},
                         {"weight gradients", "#59a14f"},
                         {"optimizer and the rest", "#9a9a9a"},
                         {"idle (bubble)", "url(#bubble)"}}) {
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly - 10) << "\" width=\"14\" height=\"12\" fill=\"" << c
      << "\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"" << num(lx + 19) << "\" y=\"" << num(ly) << "\">" << name
      << "</text>\n";
    lx += 36 + 7.0 * double(std::string(name).size());
  }
  o << "<text x=\"" << num(lx + 10) << "\" y=\"" << num(ly) << "\" fill=\"#555\">(numbers: micro-batches 0.."
    << microBatches - 1 << ")</text>\n";
  o << "</g>\n";
  return o.str();
}

namespace {
// An SVG document's opening: the header, the <svg> element (W x H) and a white background.
std::string svgOpen(double W, double H) {
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << num(H) << "\" viewBox=\"0 0 " << W
    << " " << num(H) << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << num(H) << "\" fill=\"white\"/>\n";
  return o.str();
}
} // namespace

std::vector<format::PipelineBlock>
measuredPipelineBlocks(const format::Program &p, const std::vector<std::vector<std::pair<double, double>>> &spans,
                       double *stepSeconds, double *bubble) {
  struct Span {
    double start, end;
    const format::Instruction *ins;
  };
  std::vector<std::vector<Span>> byStage(spans.size());
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (size_t s = 0; s < spans.size(); ++s) {
    const format::Program &sp = p.stageProgram(int64_t(s));
    for (size_t i = 0; i < spans[s].size() && i < sp.instructions.size(); ++i) {
      const auto [a, b] = spans[s][i];
      if (!std::isfinite(a) || !std::isfinite(b) || sp.instructions[i].stream != "compute") continue;
      byStage[s].push_back({a, b, &sp.instructions[i]});
      t0 = std::min(t0, a), t1 = std::max(t1, b);
    }
    std::sort(byStage[s].begin(), byStage[s].end(), [](const Span &x, const Span &y) { return x.start < y.start; });
  }
  std::vector<format::PipelineBlock> blocks;
  const double step = t1 > t0 ? t1 - t0 : 0.0, gap = std::max(50e-6, 1e-3 * step);
  double idle = 0;
  for (size_t s = 0; s < byStage.size(); ++s) {
    double busy = 0;
    for (const Span &x : byStage[s]) {
      busy += x.end - x.start;
      const format::Instruction &ins = *x.ins;
      // As the cost model's stretches (lib/analysis/StepSimulation.cpp): ops of no operand are not a
      // micro-batch's work.
      const std::string kind = ins.in.empty()                                      ? "optimizer"
                               : ins.phase == "forward" && !ins.recompute          ? "forward"
                               : ins.phase == "backward" && ins.weightGrad         ? "weight"
                               : ins.phase == "forward" || ins.phase == "backward" ? "backward"
                                                                                   : "optimizer";
      const int64_t mb = kind == "optimizer" ? -1 : std::max<int64_t>(0, ins.microBatch);
      const double a = x.start - t0, b = x.end - t0;
      if (!blocks.empty()) {
        format::PipelineBlock &last = blocks.back();
        if (last.stage == int64_t(s) && last.kind == kind && last.microBatch == mb && a - last.end <= gap) {
          last.end = std::max(last.end, b);
          continue;
        }
      }
      blocks.push_back({int64_t(s), mb, kind, a, b});
    }
    idle += busy > 0 ? (step - busy) / busy : 0.0;
  }
  if (stepSeconds) *stepSeconds = step;
  if (bubble) *bubble = byStage.empty() ? 0.0 : idle / double(byStage.size());
  return blocks;
}

std::string measuredPipelineSvg(const format::Program &p, const std::string &path,
                                const std::vector<format::PipelineBlock> &blocks, double stepSeconds, double bubble) {
  const double W = 1140;
  double h1 = 0, h2 = 0;
  const std::string what =
      std::to_string(p.pp) + " stages, " + p.ppSchedule + ", " + std::to_string(p.microBatches) + " micro-batches";
  const std::string measured =
      pipelineDiagram(blocks, p.pp, p.microBatches, "Pipeline over one step, measured (CPU backend): " + path,
                      what + "; step " + durationStr(stepSeconds) + ", bubble " + fmt("%.3f", bubble) +
                          " of the busy time (the last step; each stage's first rank)",
                      0, &h1);
  std::string model;
  if (p.pipelineEstimate.present) {
    const format::PipelineEstimate &pe = p.pipelineEstimate;
    model = pipelineDiagram(pe.blocks, p.pp, p.microBatches, "The same on the cost model (" + pe.hardware + ")",
                            what + "; step " + durationStr(pe.stepSeconds) + ", bubble " + fmt("%.3f", pe.bubble) +
                                " (" + bubbleFormula(p) + ")",
                            h1 + 10, &h2);
    h2 += 10;
  }
  std::ostringstream o;
  o << svgOpen(W, h1 + h2) << measured << model << "</svg>\n";
  return o.str();
}

std::string timelineSvg(const format::Program &p, const std::string &path, int64_t rank,
                        const format::Program *pipelined) {
  checkRank(p, rank);
  const double W = 1140, left = 90, right = 230, panelH = 300, top = 56, gap = 60;
  const double plotW = W - left - right;
  const size_t nSpaces = std::max<size_t>(1, p.spaces.size());
  // Lanes of markers under each plot: transfers (h2d, d2h), host work, recomputation.
  const std::vector<Lane> lanes = lanesOf(p);
  const double laneH = 16, lanesH = lanes.empty() ? 0 : 30 + double(lanes.size()) * laneH;
  const double H = top + nSpaces * (panelH + lanesH + gap) - gap + 24;
  const int64_t n = std::max<int64_t>(1, int64_t(p.instructions.size()));
  std::vector<Phase> ph = inferPhases(p);

  // A pipelined program: the pipeline diagram of the cost model on top, the stage's memory below.
  std::string diagram;
  double diagramH = 0;
  if (pipelined && pipelined->pp > 1 && pipelined->pipelineEstimate.present) {
    const format::PipelineEstimate &pe = pipelined->pipelineEstimate;
    diagram = pipelineDiagram(pe.blocks, pipelined->pp, pipelined->microBatches,
                              "Pipeline over one step (cost model on " + pe.hardware + "): " + path,
                              std::to_string(pipelined->pp) + " stages, " + pipelined->ppSchedule + ", " +
                                  std::to_string(pipelined->microBatches) + " micro-batches; step " +
                                  durationStr(pe.stepSeconds) + ", bubble " + fmt("%.3f", pe.bubble) +
                                  " of the busy time (" + bubbleFormula(*pipelined) + ")",
                              0, &diagramH);
  }
  std::ostringstream o;
  o << svgOpen(W, H + diagramH) << diagram;
  if (diagramH > 0) o << "<g transform=\"translate(0," << num(diagramH) << ")\">\n";
  o << "<text x=\"" << left
    << "\" y=\"22\" font-size=\"16\" font-weight=\"bold\">Memory over one step: " << xmlEscape(path) << "</text>\n";
  o << "<text x=\"" << left << "\" y=\"40\" fill=\"#555\">" << withCommas(p.parameterCount()) << " parameters, "
    << withCommas(int64_t(p.instructions.size())) << " instructions, precision " << xmlEscape(p.precision) << ", ranks "
    << p.ranks << (p.ranks > 1 ? " (rank " + std::to_string(rank) + ")" : "")
    << (p.hardwareName.empty() ? "" : ", hardware " + xmlEscape(p.hardwareName)) << "</text>\n";

  double y0 = top;
  for (const auto &sp : p.spaces) {
    SpaceTimeline tl = computeTimeline(p, sp.name);
    int64_t cap = spaceCapacity(p, sp);
    double maxV = std::max<double>({double(tl.peakBytes), double(sp.arenaBytes), 1.0});
    bool showCap = cap > 0 && double(cap) <= 1.6 * maxV;
    if (showCap) maxV = std::max(maxV, double(cap));
    maxV *= 1.08; // headroom for the line labels
    Unit u = unitFor(maxV);
    double step = niceStep(maxV / u.div, 5);
    double yMax = std::ceil(maxV / u.div / step) * step * u.div;
    if (yMax <= 0) yMax = 1;
    const double pt = y0 + 40, pb = y0 + panelH - 24;
    auto X = [&](double i) { return left + plotW * i / double(n); };
    auto Y = [&](double bytes) { return pb - (pb - pt) * bytes / yMax; };

    o << "<g id=\"space-" << xmlEscape(sp.name) << "\">\n";
    o << "<text x=\"" << left << "\" y=\"" << num(y0 + 14) << "\" font-size=\"14\" font-weight=\"bold\" fill=\""
      << (cap > 0 && sp.arenaBytes > cap ? "#c00" : "#000") << "\">space " << xmlEscape(sp.name) << ": arena "
      << humanBytes(sp.arenaBytes) << ", lower bound " << humanBytes(sp.lowerBoundBytes) << ", capacity "
      << (cap > 0 ? humanBytes(cap) + (sp.arenaBytes <= cap ? " (fits)" : " (DOES NOT FIT)") : std::string("unknown"))
      << "</text>\n";
    // Phases.
    auto bandColor = [](const std::string &name) {
      if (name == "forward") return "#eef4fb";
      if (name == "optimizer") return "#eef8ee";
      return "#fbf1ea";
    };
    for (const auto &bd : ph) {
      if (bd.end <= bd.begin) continue;
      o << "<rect x=\"" << num(X(double(bd.begin))) << "\" y=\"" << num(pt) << "\" width=\""
        << num(X(double(bd.end)) - X(double(bd.begin))) << "\" height=\"" << num(pb - pt) << "\" fill=\""
        << bandColor(bd.name) << "\"><title>" << bd.name << " [" << bd.begin << ", " << bd.end << ")</title></rect>\n";
      if (X(double(bd.end)) - X(double(bd.begin)) < 40) continue; // too narrow to label
      o << "<text x=\"" << num((X(double(bd.begin)) + X(double(bd.end))) / 2) << "\" y=\"" << num(pt - 5)
        << "\" text-anchor=\"middle\" fill=\"#777\">" << xmlEscape(bd.name) << "</text>\n";
    }
    // Grid and y axis.
    for (double v = 0; v <= yMax / u.div + step * 1e-6; v += step) {
      double yy = Y(v * u.div);
      o << "<line x1=\"" << left << "\" y1=\"" << num(yy) << "\" x2=\"" << num(left + plotW) << "\" y2=\"" << num(yy)
        << "\" stroke=\"#ddd\" stroke-width=\"0.5\"/>\n";
      o << "<text x=\"" << num(left - 6) << "\" y=\"" << num(yy + 4) << "\" text-anchor=\"end\">" << tickLabel(v)
        << "</text>\n";
    }
    o << "<text transform=\"translate(" << num(left - 55) << "," << num((pt + pb) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">live bytes (" << u.name << ")</text>\n";
    // Stacked areas. At most ~1 point per pixel: take, per bucket, the instruction with the
    // largest total so the peak is never hidden.
    const int64_t maxPts = int64_t(plotW) * 2;
    std::vector<int64_t> pts;
    if (n <= maxPts) {
      for (int64_t i = 0; i < n; ++i) pts.push_back(i);
    } else {
      for (int64_t k = 0; k < maxPts; ++k) {
        int64_t a = k * n / maxPts, b = std::max(a + 1, (k + 1) * n / maxPts);
        int64_t best = a, bestV = -1;
        for (int64_t i = a; i < b && i < n; ++i) {
          int64_t t = 0;
          for (int64_t v : tl.live[size_t(i)]) t += v;
          if (t > bestV) bestV = t, best = i;
        }
        pts.push_back(best);
      }
    }
    std::vector<double> below(pts.size(), 0.0);
    for (size_t r = 0; r < tl.roles.size(); ++r) {
      std::vector<double> above(pts.size());
      for (size_t k = 0; k < pts.size(); ++k) above[k] = below[k] + double(tl.live[size_t(pts[k])][r]);
      std::ostringstream d;
      // Steps: each instruction occupies [i, i+1).
      for (size_t k = 0; k < pts.size(); ++k) {
        double xa = X(double(pts[k])), xb = X(double(k + 1 < pts.size() ? pts[k + 1] : n));
        d << (k == 0 ? "M" : "L") << num(xa) << "," << num(Y(above[k])) << " L" << num(xb) << "," << num(Y(above[k]))
          << " ";
      }
      for (size_t k = pts.size(); k-- > 0;) {
        double xa = X(double(pts[k])), xb = X(double(k + 1 < pts.size() ? pts[k + 1] : n));
        d << "L" << num(xb) << "," << num(Y(below[k])) << " L" << num(xa) << "," << num(Y(below[k])) << " ";
      }
      d << "Z";
      o << "<path d=\"" << d.str() << "\" fill=\"" << roleColor(tl.roles[r])
        << "\" fill-opacity=\"0.85\" stroke=\"none\"><title>" << xmlEscape(tl.roles[r]) << "</title></path>\n";
      below = above;
    }
    // Held bytes: the top `held` bytes of the stack, hatched.
    bool anyHeld = false;
    for (int64_t h : tl.held) anyHeld |= h > 0;
    if (anyHeld) {
      o << "<defs><pattern id=\"held-" << xmlEscape(sp.name)
        << "\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
           "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#222\" stroke-width=\"1.2\"/></pattern></defs>\n";
      std::ostringstream d;
      for (size_t k = 0; k < pts.size(); ++k) {
        double xa = X(double(pts[k])), xb = X(double(k + 1 < pts.size() ? pts[k + 1] : n));
        d << (k == 0 ? "M" : "L") << num(xa) << "," << num(Y(below[k])) << " L" << num(xb) << "," << num(Y(below[k]))
          << " ";
      }
      for (size_t k = pts.size(); k-- > 0;) {
        double xa = X(double(pts[k])), xb = X(double(k + 1 < pts.size() ? pts[k + 1] : n));
        double lo = below[k] - double(tl.held[size_t(pts[k])]);
        d << "L" << num(xb) << "," << num(Y(lo)) << " L" << num(xa) << "," << num(Y(lo)) << " ";
      }
      d << "Z";
      o << "<path d=\"" << d.str() << "\" fill=\"url(#held-" << xmlEscape(sp.name)
        << ")\" fill-opacity=\"0.5\" stroke=\"none\"><title>held for another stream (past its last use, "
           "until the compute stream joins it)</title></path>\n";
    }
    // Arena and capacity lines.
    auto hline = [&](double bytes, const char *color, const std::string &label, const char *dash) {
      double yy = Y(bytes);
      o << "<line x1=\"" << left << "\" y1=\"" << num(yy) << "\" x2=\"" << num(left + plotW) << "\" y2=\"" << num(yy)
        << "\" stroke=\"" << color << "\" stroke-width=\"1.2\" stroke-dasharray=\"" << dash << "\"/>\n";
      o << "<text x=\"" << num(left + plotW - 4) << "\" y=\"" << num(yy - 4) << "\" text-anchor=\"end\" fill=\""
        << color << "\">" << xmlEscape(label) << "</text>\n";
    };
    hline(double(sp.arenaBytes), "#333", "arena " + humanBytes(sp.arenaBytes), "6,3");
    if (showCap) hline(double(cap), "#c00", "capacity " + humanBytes(cap), "2,2");
    // Peak marker.
    o << "<line x1=\"" << num(X(double(tl.peakInstruction) + 0.5)) << "\" y1=\"" << num(pt) << "\" x2=\""
      << num(X(double(tl.peakInstruction) + 0.5)) << "\" y2=\"" << num(pb)
      << "\" stroke=\"#555\" stroke-width=\"0.8\" stroke-dasharray=\"1,3\"/>\n";
    {
      // Near the right edge the label goes to the left of the marker (it would overflow the plot).
      double px = X(double(tl.peakInstruction) + 0.5);
      bool leftSide = px > left + 0.8 * plotW;
      o << "<text x=\"" << num(leftSide ? px - 3 : px + 3) << "\" y=\"" << num(pt + 28) << "\""
        << (leftSide ? " text-anchor=\"end\"" : "") << " fill=\"#555\">peak " << humanBytes(tl.peakBytes) << " @ "
        << tl.peakInstruction << "</text>\n";
    }
    // X axis.
    o << "<line x1=\"" << left << "\" y1=\"" << num(pb) << "\" x2=\"" << num(left + plotW) << "\" y2=\"" << num(pb)
      << "\" stroke=\"#333\"/>\n";
    o << "<line x1=\"" << left << "\" y1=\"" << num(pt) << "\" x2=\"" << left << "\" y2=\"" << num(pb)
      << "\" stroke=\"#333\"/>\n";
    double xs = niceStep(double(n), 8);
    for (double v = 0; v <= double(n) + 1e-9; v += xs) {
      o << "<line x1=\"" << num(X(v)) << "\" y1=\"" << num(pb) << "\" x2=\"" << num(X(v)) << "\" y2=\"" << num(pb + 4)
        << "\" stroke=\"#333\"/>\n";
      o << "<text x=\"" << num(X(v)) << "\" y=\"" << num(pb + 16) << "\" text-anchor=\"middle\">" << tickLabel(v)
        << "</text>\n";
    }
    o << "<text x=\"" << num(left + plotW / 2) << "\" y=\"" << num(pb + 34)
      << "\" text-anchor=\"middle\">instruction index</text>\n";
    // Legend (top role of the stack first).
    double ly = pt + 4;
    for (size_t r = tl.roles.size(); r-- > 0;) {
      int64_t peakR = tl.live.empty() ? 0 : tl.live[size_t(tl.peakInstruction)][r];
      o << "<rect x=\"" << num(left + plotW + 16) << "\" y=\"" << num(ly) << "\" width=\"12\" height=\"12\" fill=\""
        << roleColor(tl.roles[r]) << "\"/>\n";
      o << "<text x=\"" << num(left + plotW + 34) << "\" y=\"" << num(ly + 10) << "\">" << xmlEscape(tl.roles[r])
        << " (" << humanBytes(peakR) << ")</text>\n";
      ly += 18;
    }
    if (anyHeld) {
      o << "<rect x=\"" << num(left + plotW + 16) << "\" y=\"" << num(ly)
        << "\" width=\"12\" height=\"12\" fill=\"url(#held-" << xmlEscape(sp.name) << ")\"/>\n";
      o << "<text x=\"" << num(left + plotW + 34) << "\" y=\"" << num(ly + 10) << "\">held for a stream ("
        << humanBytes(tl.held[size_t(tl.peakInstruction)]) << ")</text>\n";
      ly += 18;
    }
    o << "<text x=\"" << num(left + plotW + 16) << "\" y=\"" << num(ly + 12)
      << "\" fill=\"#777\" font-size=\"10\">(bytes at the peak)</text>\n";
    // Marker lanes: one tick per instruction (runs merged), on the plot's x axis.
    double lyy = pb + 46;
    for (const Lane &l : lanes) {
      std::string desc = withCommas(int64_t(l.at.size())) + " instruction" + (l.at.size() == 1 ? "" : "s");
      if (l.bytes > 0) desc += ", " + humanBytes(l.bytes);
      o << "<g class=\"lane\" id=\"lane-" << xmlEscape(sp.name) << "-" << xmlEscape(l.name) << "\">\n";
      o << "<title>" << xmlEscape(l.name) << ": " << xmlEscape(l.what) << " (" << desc << ")</title>\n";
      o << "<text x=\"" << num(left - 6) << "\" y=\"" << num(lyy + 10) << "\" text-anchor=\"end\" fill=\"" << l.color
        << "\">" << xmlEscape(l.name) << "</text>\n";
      o << "<rect x=\"" << left << "\" y=\"" << num(lyy) << "\" width=\"" << num(plotW) << "\" height=\""
        << num(laneH - 4) << "\" fill=\"#f6f6f6\"/>\n";
      double runA = -1, runB = -1;
      auto flush = [&]() {
        if (runA < 0) return;
        o << "<rect x=\"" << num(runA) << "\" y=\"" << num(lyy) << "\" width=\"" << num(std::max(runB - runA, 1.0))
          << "\" height=\"" << num(laneH - 4) << "\" fill=\"" << l.color << "\"/>\n";
      };
      for (int64_t i : l.at) {
        double a = X(double(i)), b = X(double(i + 1));
        if (runA >= 0 && a <= runB + 0.5) {
          runB = std::max(runB, b);
          continue;
        }
        flush();
        runA = a, runB = b;
      }
      flush();
      o << "<text x=\"" << num(left + plotW + 16) << "\" y=\"" << num(lyy + 10) << "\" fill=\"" << l.color << "\">"
        << xmlEscape(l.name) << ": " << desc << "</text>\n";
      o << "</g>\n";
      lyy += laneH;
    }
    o << "</g>\n";
    y0 += panelH + lanesH + gap;
  }
  if (diagramH > 0) o << "</g>\n";
  o << "</svg>\n";
  return o.str();
}

const char *inspectHelp() {
  return "usage: bigc inspect model.bigc [--memory] [--json] [--timeline FILE.svg] [--rank R]\n"
         "\n"
         "Reports a program's memory plan: per memory space the arena, the lower bound (the most\n"
         "bytes live at once), their ratio, the capacity and whether it fits, bytes by role, the\n"
         "10 largest buffers with their live intervals, the parameter and instruction counts.\n"
         "\n"
         "options:\n"
         "  --memory            add a per-role table (count, bytes, bytes live at the peak) and\n"
         "                      the buffers live at the peak instruction\n"
         "  --json              print one JSON object instead (parameters, ranks, fits,\n"
         "                      instructions, spaces{arena_bytes, lower_bound_bytes,\n"
         "                      capacity_bytes, by_role}, largest_buffers, ...)\n"
         "  --timeline FILE.svg write an SVG of bytes live per role over the step, one panel\n"
         "                      per memory space, phases shaded, with lanes marking the\n"
         "                      transfers (h2d, d2h), host work and recomputed instructions;\n"
         "                      a pipelined program's adds the pipeline diagram (the stages\n"
         "                      over time on the cost model, bubbles hatched)\n"
         "  --rank R            the rank to show (0 .. ranks-1; default 0); in a pipelined\n"
         "                      program, the stage that rank runs\n";
}

int inspectMain(int argc, char **argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(inspectHelp(), stdout);
      return 0;
    }
  cli::Args a = cli::parse(argc, argv, first, {"--timeline", "--rank"}, {"--memory", "--json"}, "inspect");
  if (a.positional.empty()) throw UserError("missing the program file (usage: bigc inspect model.bigc)");
  if (a.positional.size() > 1)
    throw UserError("unexpected argument '" + a.positional[1] + "' (one program file; see --help)");
  if (a.has("-o")) throw UserError("unknown option '-o' (use --timeline FILE.svg; see --help)");
  const std::string path = a.positional[0];
  int64_t rank = a.integer("--rank", 0);
  if (a.has("--timeline") && a.str("--timeline").empty()) throw UserError("--timeline: empty file name");
  format::Program top = format::loadProgram(path);
  checkRank(top, rank);
  // A pipelined program: the report of the stage the rank runs, after the pipeline's summary.
  const int64_t stage = top.pp > 1 ? rank / std::max<int64_t>(1, top.dp * top.tp) : 0;
  const format::Program &p = top.stageProgram(stage);
  // Build everything before writing anything.
  std::string report;
  if (a.has("--json")) {
    report = jsonReport(p, path, rank);
    if (top.pp > 1) {
      json j = json::parse(report);
      j["pipeline"] = pipelineJson(top, rank);
      report = j.dump(2) + "\n";
    }
  } else {
    report = (top.pp > 1 ? pipelineText(top, rank) : std::string()) + textReport(p, path, rank, a.has("--memory"));
  }
  if (a.has("--timeline")) format::writeFileAtomic(a.str("--timeline"), timelineSvg(p, path, rank, &top));
  std::fwrite(report.data(), 1, report.size(), stdout);
  return 0;
}

} // namespace bigc::inspect
