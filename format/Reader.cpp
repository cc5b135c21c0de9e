// Reading a program file: the container line, the checksum, the JSON payload into a Program, then
// the validator (docs/program-format.md). No MLIR here.
#include "bigc/Format/reader.h"
#include "bigc/Format/validator.h"
#include "Checks.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace bigc::format {

using json = nlohmann::json;
using detail::fail;

namespace {

std::string typeName(const json &j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  return "an object";
}

struct Reader {
  const std::string &path;

  const json &field(const json &obj, const char *key, const std::string &where) const {
    if (!obj.is_object()) fail(path, where + " must be a JSON object, is " + typeName(obj));
    auto it = obj.find(key);
    if (it == obj.end()) fail(path, where + ": field '" + key + "' is missing");
    return *it;
  }
  [[noreturn]] void mistyped(const char *key, const std::string &where, const char *want, const json &got) const {
    fail(path, where + ": field '" + key + "' must be " + want + ", is " + typeName(got));
  }
  int64_t integer(const json &obj, const char *key, const std::string &where) const {
    const json &j = field(obj, key, where);
    if (j.is_number_unsigned()) {
      if (j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, where + ": field '" + key + "' is too large");
      return int64_t(j.get<uint64_t>());
    }
    if (!j.is_number_integer()) mistyped(key, where, "an integer", j);
    return j.get<int64_t>();
  }
  int64_t integerOr(const json &obj, const char *key, const std::string &where, int64_t dflt) const {
    if (!obj.is_object() || !obj.contains(key)) return dflt;
    return integer(obj, key, where);
  }
  double number(const json &obj, const char *key, const std::string &where) const {
    const json &j = field(obj, key, where);
    if (!j.is_number()) mistyped(key, where, "a number", j);
    return j.get<double>();
  }
  double numberOr(const json &obj, const char *key, const std::string &where, double dflt) const {
    if (!obj.is_object() || !obj.contains(key)) return dflt;
    return number(obj, key, where);
  }
  std::string string(const json &obj, const char *key, const std::string &where) const {
    const json &j = field(obj, key, where);
    if (!j.is_string()) mistyped(key, where, "a string", j);
    return j.get<std::string>();
  }
  std::string stringOr(const json &obj, const char *key, const std::string &where, const std::string &dflt) const {
    if (!obj.is_object() || !obj.contains(key)) return dflt;
    return string(obj, key, where);
  }
  const json &object(const json &obj, const char *key, const std::string &where) const {
    const json &j = field(obj, key, where);
    if (!j.is_object()) mistyped(key, where, "an object", j);
    return j;
  }
  const json &array(const json &obj, const char *key, const std::string &where) const {
    const json &j = field(obj, key, where);
    if (!j.is_array()) mistyped(key, where, "a list", j);
    return j;
  }
  std::vector<int64_t> ints(const json &obj, const char *key, const std::string &where) const {
    const json &j = array(obj, key, where);
    std::vector<int64_t> out;
    out.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer())
        fail(path, where + ": field '" + key + "' must be a list of integers; element " + std::to_string(i) + " is " +
                       typeName(j[i]));
      if (j[i].is_number_unsigned() && j[i].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, where + ": field '" + key + "' element " + std::to_string(i) + " is too large");
      out.push_back(j[i].get<int64_t>());
    }
    return out;
  }
};

std::string bufWhere(size_t i, const json &b) {
  std::string s = "buffer " + std::to_string(i);
  if (b.is_object() && b.contains("name") && b["name"].is_string()) s += " ('" + b["name"].get<std::string>() + "')";
  return s;
}

std::string instWhere(size_t i, const json &ins) {
  std::string s = "instruction " + std::to_string(i);
  if (ins.is_object() && ins.contains("op") && ins["op"].is_string()) {
    s += " (" + ins["op"].get<std::string>();
    if (ins.contains("loc") && ins["loc"].is_string() && !ins["loc"].get<std::string>().empty())
      s += " at " + ins["loc"].get<std::string>();
    s += ")";
  }
  return s;
}

// `top`: the file's payload (a pipelined program's stage 0); else one of its "stages" (the errors
// of which name the stage in `path`).
Program fromJson(const json &root, const std::string &path, bool top) {
  Reader r{path};
  Program p;
  if (!root.is_object()) fail(path, "the payload must be a JSON object, is " + typeName(root));
  p.version = int(r.integer(root, "version", "payload"));
  if (p.version < kOldestProgramVersion || p.version > kProgramVersion)
    fail(path, "payload says program format version " + std::to_string(p.version) + ", this runtime reads versions " +
                   std::to_string(kOldestProgramVersion) + " to " + std::to_string(kProgramVersion));
  p.producer = r.stringOr(root, "producer", "payload", "");
  p.source = r.stringOr(root, "source", "payload", "");

  const json &cfg = r.object(root, "config", "payload");
  p.batch = r.integer(cfg, "batch", "config");
  p.seq = r.integer(cfg, "seq", "config");
  p.vocab = r.integer(cfg, "vocab", "config");
  p.precision = r.stringOr(cfg, "precision", "config", "fp32");
  p.microBatches = r.integerOr(cfg, "micro_batches", "config", 1);
  p.ranks = r.integerOr(cfg, "ranks", "config", 1);
  p.zero = r.integerOr(cfg, "zero", "config", 0);
  p.dp = p.ranks;
  if (cfg.contains("mesh") && !cfg["mesh"].is_null()) {
    const json &m = r.object(cfg, "mesh", "config");
    p.dp = r.integerOr(m, "dp", "config.mesh", 1);
    p.tp = r.integerOr(m, "tp", "config.mesh", 1);
    p.pp = r.integerOr(m, "pp", "config.mesh", 1);
    p.cp = r.integerOr(m, "cp", "config.mesh", 1);
  }
  if (cfg.contains("tensor_parallel") && !cfg["tensor_parallel"].is_null()) {
    const json &t = r.object(cfg, "tensor_parallel", "config");
    p.sequenceParallel = r.integerOr(t, "sequence_parallel", "config.tensor_parallel", 0) != 0;
    if (t.contains("replicated") && t["replicated"].is_array())
      for (const json &n : t["replicated"])
        if (n.is_string()) p.tpReplicated.push_back(n.get<std::string>());
  }

  if (root.contains("optimizer")) {
    const json &o = r.object(root, "optimizer", "payload");
    p.optimizer.kind = r.stringOr(o, "kind", "optimizer", "adamw");
    p.optimizer.lr = r.numberOr(o, "lr", "optimizer", p.optimizer.lr);
    p.optimizer.beta1 = r.numberOr(o, "beta1", "optimizer", p.optimizer.beta1);
    p.optimizer.beta2 = r.numberOr(o, "beta2", "optimizer", p.optimizer.beta2);
    p.optimizer.eps = r.numberOr(o, "eps", "optimizer", p.optimizer.eps);
    p.optimizer.weightDecay = r.numberOr(o, "weight_decay", "optimizer", p.optimizer.weightDecay);
    p.optimizer.gradClip = r.numberOr(o, "grad_clip", "optimizer", p.optimizer.gradClip);
    if (o.contains("schedule")) {
      const json &s = r.object(o, "schedule", "optimizer");
      LrSchedule &ls = p.optimizer.schedule;
      ls.kind = r.stringOr(s, "kind", "optimizer.schedule", "constant");
      ls.warmupSteps = r.integerOr(s, "warmup_steps", "optimizer.schedule", 0);
      ls.decaySteps = r.integerOr(s, "decay_steps", "optimizer.schedule", 0);
      ls.wsdDecaySteps = r.integerOr(s, "wsd_decay_steps", "optimizer.schedule", 0);
      ls.minLr = r.numberOr(s, "min_lr", "optimizer.schedule", 0.0);
    }
  }
  if (root.contains("aliases")) {
    const json &a = r.object(root, "aliases", "payload");
    for (auto &[name, list] : a.items()) {
      if (!list.is_array()) fail(path, "aliases." + name + ": expected an array of names");
      for (const json &n : list) {
        if (!n.is_string()) fail(path, "aliases." + name + ": expected an array of names");
        p.aliases[name].push_back(n.get<std::string>());
      }
    }
  }
  if (root.contains("hf")) {
    const json &h = r.object(root, "hf", "payload");
    const json &c = r.object(h, "config", "hf");
    p.hfConfig = c.dump();
    p.hfPrefix = r.stringOr(h, "prefix", "hf", "");
  }
  if (root.contains("hardware")) {
    const json &h = r.object(root, "hardware", "payload");
    p.hardwareName = r.stringOr(h, "name", "hardware", "");
    p.deviceCapacityBytes = r.integerOr(h, "device_capacity_bytes", "hardware", 0);
    p.hostCapacityBytes = r.integerOr(h, "host_capacity_bytes", "hardware", 0);
    p.nvmeCapacityBytes = r.integerOr(h, "nvme_capacity_bytes", "hardware", 0);
    p.deviceReserveBytes = r.integerOr(h, "device_reserve_bytes", "hardware", 0);
    p.hostReserveBytes = r.integerOr(h, "host_reserve_bytes", "hardware", 0);
    if (h.contains("device_reserve")) {
      const json &parts = r.object(h, "device_reserve", "hardware");
      for (auto it = parts.begin(); it != parts.end(); ++it)
        p.deviceReserveParts.push_back({it.key(), r.integerOr(parts, it.key().c_str(), "hardware.device_reserve", 0)});
    }
  }

  if (root.contains("initial_weights")) {
    const json &w = r.object(root, "initial_weights", "payload");
    p.initialWeights = r.string(w, "path", "initial_weights");
    p.initialWeightsBytes = r.integerOr(w, "bytes", "initial_weights", 0);
    if (w.contains("names")) {
      const json &names = r.object(w, "names", "initial_weights");
      for (auto it = names.begin(); it != names.end(); ++it) {
        if (!it.value().is_string()) fail(path, "initial_weights.names." + it.key() + ": expected a name");
        p.initialNames[it.key()] = it.value().get<std::string>();
      }
    }
    if (w.contains("buffers")) {
      const json &bs = r.array(w, "buffers", "initial_weights");
      for (const json &b : bs) {
        if (!b.is_string()) fail(path, "initial_weights.buffers: expected an array of names");
        p.initialBuffers.push_back(b.get<std::string>());
      }
    }
  }

  if (root.contains("nvme")) p.nvmePath = r.string(r.object(root, "nvme", "payload"), "path", "nvme");

  const json &spaces = r.array(root, "spaces", "payload");
  for (size_t i = 0; i < spaces.size(); ++i) {
    std::string where = "spaces[" + std::to_string(i) + "]";
    Space s;
    s.name = r.string(spaces[i], "name", where);
    where += " ('" + s.name + "')";
    s.arenaBytes = r.integer(spaces[i], "arena_bytes", where);
    s.lowerBoundBytes = r.integerOr(spaces[i], "lower_bound_bytes", where, 0);
    s.capacityBytes = r.integerOr(spaces[i], "capacity_bytes", where, 0);
    p.spaces.push_back(s);
  }

  const json &bufs = r.array(root, "buffers", "payload");
  p.buffers.reserve(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    const json &jb = bufs[i];
    std::string where = bufWhere(i, jb);
    Buffer b;
    b.id = r.integer(jb, "id", where);
    b.name = r.string(jb, "name", where);
    b.space = r.string(jb, "space", where);
    b.offset = r.integer(jb, "offset", where);
    b.bytes = r.integer(jb, "bytes", where);
    std::string dt = r.string(jb, "dtype", where);
    if (!parseDType(dt, b.dtype)) fail(path, where + ": unknown dtype '" + dt + "' (known: f32, bf16, f16, i32)");
    b.shape = r.ints(jb, "shape", where);
    b.role = r.string(jb, "role", where);
    std::vector<int64_t> live = r.ints(jb, "live", where);
    if (live.size() != 2)
      fail(path, where + ": field 'live' must be [first, last], has " + std::to_string(live.size()) + " elements");
    b.liveFirst = live[0];
    b.liveLast = live[1];
    if (jb.contains("init") && !jb["init"].is_null()) {
      const json &ji = r.object(jb, "init", where);
      b.init.kind = r.string(ji, "kind", where + " init");
      if (b.init.kind == "normal") b.init.std = r.number(ji, "std", where + " init");
      if (b.init.kind == "copy") b.init.source = r.string(ji, "source", where + " init");
      if (b.init.kind == "fill") b.init.value = r.number(ji, "value", where + " init");
    }
    if (jb.contains("shard") && !jb["shard"].is_null()) {
      const json &js = r.object(jb, "shard", where);
      std::string axis = r.string(js, "axis", where + " shard");
      if (axis != "dp") fail(path, where + ": shard axis '" + axis + "' (version 3 shards over dp only)");
      b.shard = true;
      b.fullShape = r.ints(js, "full_shape", where + " shard");
      if (js.contains("tiles") && !js["tiles"].is_null()) {
        if (p.version < 6)
          fail(path, where + ": shard tiles (a tile-interleaved shard) needs program format version 6");
        b.tiles = r.integer(js, "tiles", where + " shard");
      }
    }
    if (jb.contains("tp") && !jb["tp"].is_null()) {
      const json &jt = r.object(jb, "tp", where);
      b.tpDim = r.integer(jt, "dim", where + " tp");
      b.tpSegments = r.integerOr(jt, "segments", where + " tp", 1);
      b.tpFullShape = r.ints(jt, "full_shape", where + " tp");
    }
    if (jb.contains("vocab_rows") && !jb["vocab_rows"].is_null()) {
      if (p.version < 4) fail(path, where + ": vocab_rows (a padded vocabulary) needs program format version 4");
      b.vocabRows = r.integer(jb, "vocab_rows", where);
    }
    p.buffers.push_back(std::move(b));
  }

  const json &inputs = r.object(root, "inputs", "payload");
  p.tokenInputs = r.ints(inputs, "tokens", "inputs");
  p.targetInputs = r.ints(inputs, "targets", "inputs");
  p.loss = r.integer(root, "loss", "payload");
  if (root.contains("eval") && !root["eval"].is_null()) {
    const json &ev = r.object(root, "eval", "payload");
    p.evalInstructions = r.ints(ev, "instructions", "eval");
    if (ev.contains("plan") && !ev["plan"].is_null()) {
      const json &pl = r.object(ev, "plan", "eval");
      p.evalPlan.buffers = r.ints(pl, "buffers", "eval.plan");
      p.evalPlan.offsets = r.ints(pl, "offsets", "eval.plan");
      const json &ar = r.object(pl, "arenas", "eval.plan");
      for (auto it = ar.begin(); it != ar.end(); ++it)
        p.evalPlan.arenas[it.key()] = r.integer(ar, it.key().c_str(), "eval.plan.arenas");
    }
  }
  if (root.contains("loss_scaling") && !root["loss_scaling"].is_null()) {
    const json &ls = r.object(root, "loss_scaling", "payload");
    p.lossScale = r.integer(ls, "scale", "loss_scaling");
    p.foundInf = r.integer(ls, "found_inf", "loss_scaling");
  }
  if (root.contains("recompute") && !root["recompute"].is_null()) {
    const json &rc = r.object(root, "recompute", "payload");
    p.recompute.policy = r.stringOr(rc, "policy", "recompute", "none");
    p.recompute.savedBytes = r.integerOr(rc, "saved_bytes", "recompute", 0);
    p.recompute.flopsAdded = r.integerOr(rc, "flops_added", "recompute", 0);
    p.recompute.forwardFlops = r.integerOr(rc, "forward_flops", "recompute", 0);
  }

  if (root.contains("estimate") && !root["estimate"].is_null()) {
    const json &e = r.object(root, "estimate", "payload");
    p.estimate.present = true;
    p.estimate.stepSeconds = r.numberOr(e, "step_seconds", "estimate", 0);
    p.estimate.computeSeconds = r.numberOr(e, "compute_seconds", "estimate", 0);
    if (e.contains("collectives")) {
      const json &cs = r.array(e, "collectives", "estimate");
      for (size_t i = 0; i < cs.size(); ++i) {
        std::string where = "estimate.collectives[" + std::to_string(i) + "]";
        CollectiveEstimate c;
        c.op = r.string(cs[i], "op", where);
        c.count = r.integerOr(cs[i], "count", where, 0);
        c.seconds = r.numberOr(cs[i], "seconds", where, 0);
        c.hiddenSeconds = r.numberOr(cs[i], "hidden_seconds", where, 0);
        c.queuedSeconds = r.numberOr(cs[i], "queued_seconds", where, 0);
        p.estimate.collectives.push_back(c);
      }
    }
    if (e.contains("ops")) {
      const json &os = r.array(e, "ops", "estimate");
      for (size_t i = 0; i < os.size(); ++i) {
        std::string where = "estimate.ops[" + std::to_string(i) + "]";
        OpEstimate o;
        o.op = r.string(os[i], "op", where);
        o.stream = r.string(os[i], "stream", where);
        o.count = r.integerOr(os[i], "count", where, 0);
        o.seconds = r.numberOr(os[i], "seconds", where, 0);
        o.flops = r.numberOr(os[i], "flops", where, 0);
        o.bytes = r.numberOr(os[i], "bytes", where, 0);
        p.estimate.ops.push_back(o);
      }
    }
  }

  const json &insts = r.array(root, "instructions", "payload");
  p.instructions.reserve(insts.size());
  for (size_t i = 0; i < insts.size(); ++i) {
    const json &ji = insts[i];
    std::string where = instWhere(i, ji);
    Instruction ins;
    ins.op = r.string(ji, "op", where);
    ins.in = r.ints(ji, "in", where);
    ins.out = r.ints(ji, "out", where);
    ins.loc = r.stringOr(ji, "loc", where, "");
    ins.stream = r.stringOr(ji, "stream", where, "compute");
    if (ji.contains("wait") && !ji["wait"].is_null()) ins.wait = r.ints(ji, "wait", where);
    ins.phase = r.stringOr(ji, "phase", where, "");
    if (ji.contains("recompute") && !ji["recompute"].is_null()) {
      if (!ji["recompute"].is_boolean()) r.mistyped("recompute", where, "a bool", ji["recompute"]);
      ins.recompute = ji["recompute"].get<bool>();
    }
    ins.microBatch = r.integerOr(ji, "micro_batch", where, -1);
    if (ji.contains("weight_grad") && !ji["weight_grad"].is_null()) {
      if (!ji["weight_grad"].is_boolean()) r.mistyped("weight_grad", where, "a bool", ji["weight_grad"]);
      ins.weightGrad = ji["weight_grad"].get<bool>();
    }
    if (ji.contains("attrs") && !ji["attrs"].is_null()) {
      const json &ja = r.object(ji, "attrs", where);
      for (auto it = ja.begin(); it != ja.end(); ++it) {
        Attr a;
        const json &v = it.value();
        if (v.is_boolean()) {
          a.num = v.get<bool>() ? 1.0 : 0.0;
        } else if (v.is_number()) {
          a.num = v.get<double>();
        } else if (v.is_array()) {
          bool reals = false;
          for (size_t k = 0; k < v.size(); ++k) {
            if (!v[k].is_number())
              fail(path, where + ": attribute '" + it.key() + "' must be a list of numbers; element " +
                             std::to_string(k) + " is " + typeName(v[k]));
            reals |= v[k].is_number_float();
          }
          (reals ? a.isReals : a.isList) = true;
          for (size_t k = 0; k < v.size(); ++k)
            if (reals)
              a.reals.push_back(v[k].get<double>());
            else
              a.list.push_back(v[k].get<int64_t>());
        } else {
          fail(path, where + ": attribute '" + it.key() + "' must be a number, a bool or a list of integers, is " +
                         typeName(v));
        }
        ins.attrs[it.key()] = std::move(a);
      }
    }
    p.instructions.push_back(std::move(ins));
  }

  // Pipeline parallelism: this payload is stage `stage` of `stages`; the top one (stage 0) holds
  // the payloads of the other stages.
  if (root.contains("pipeline") && !root["pipeline"].is_null()) {
    const json &pl = r.object(root, "pipeline", "payload");
    const int64_t n = r.integer(pl, "stages", "pipeline");
    if (n != p.pp)
      fail(path, "pipeline: stages is " + std::to_string(n) + ", config.mesh.pp is " + std::to_string(p.pp) +
                     " (one stage per pipeline rank)");
    p.stage = r.integer(pl, "stage", "pipeline");
    p.ppSchedule = r.string(pl, "schedule", "pipeline");
    p.virtualStages = r.integerOr(pl, "virtual_stages", "pipeline", 1);
    if (pl.contains("split") && !pl["split"].is_null()) p.ppSplit = r.ints(pl, "split", "pipeline");
    const int64_t k = r.integerOr(pl, "micro_batches", "pipeline", p.microBatches);
    if (k != p.microBatches)
      fail(path, "pipeline: micro_batches is " + std::to_string(k) + ", config.micro_batches is " +
                     std::to_string(p.microBatches));
    if (pl.contains("estimate") && !pl["estimate"].is_null()) {
      if (!top) fail(path, "pipeline.estimate belongs to stage 0's payload only");
      const json &e = r.object(pl, "estimate", "pipeline");
      PipelineEstimate &pe = p.pipelineEstimate;
      pe.present = true;
      pe.hardware = r.string(e, "hardware", "pipeline.estimate");
      pe.stepSeconds = r.numberOr(e, "step_seconds", "pipeline.estimate", 0);
      pe.bubble = r.numberOr(e, "bubble", "pipeline.estimate", 0);
      const json &busy = r.array(e, "busy_seconds", "pipeline.estimate");
      for (const json &v : busy) {
        if (!v.is_number()) fail(path, "pipeline.estimate.busy_seconds: expected numbers");
        pe.busySeconds.push_back(v.get<double>());
      }
      if (int64_t(pe.busySeconds.size()) != n)
        fail(path, "pipeline.estimate.busy_seconds: " + std::to_string(pe.busySeconds.size()) + " entries for " +
                       std::to_string(n) + " stages");
      const json &blocks = r.array(e, "blocks", "pipeline.estimate");
      for (size_t i = 0; i < blocks.size(); ++i) {
        const json &b = blocks[i];
        const std::string where = "pipeline.estimate.blocks[" + std::to_string(i) + "]";
        if (!b.is_array() || b.size() != 5 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
            !b[2].is_string() || !b[3].is_number() || !b[4].is_number())
          fail(path, where + ": expected [stage, micro-batch, kind, start, end]");
        PipelineBlock pb{b[0].get<int64_t>(), b[1].get<int64_t>(), b[2].get<std::string>(), b[3].get<double>(),
                         b[4].get<double>()};
        if (pb.stage < 0 || pb.stage >= n || pb.end < pb.start ||
            (pb.kind != "forward" && pb.kind != "backward" && pb.kind != "weight" && pb.kind != "optimizer"))
          fail(path, where + ": stage within 0.." + std::to_string(n - 1) +
                         ", kind forward/backward/weight/optimizer, end after start");
        pe.blocks.push_back(std::move(pb));
      }
    }
  }
  if (root.contains("stages") && !root["stages"].is_null()) {
    if (!top) fail(path, "payload: field 'stages' belongs to stage 0's payload only");
    if (!root.contains("pipeline") || root["pipeline"].is_null())
      fail(path, "payload: field 'stages' needs the field 'pipeline' (a pipelined program's stages)");
    const json &stages = r.array(root, "stages", "payload");
    p.stages.reserve(stages.size());
    for (size_t i = 0; i < stages.size(); ++i)
      p.stages.push_back(fromJson(stages[i], path + ": stage " + std::to_string(i + 1), false));
  }
  return p;
}

} // namespace

Program parseProgram(const std::string &bytes, const std::string &path) {
  static const std::string magic = "BIGC-PROGRAM ";
  if (bytes.compare(0, magic.size(), magic) != 0)
    fail(path, "not a bigc program (the first line must start with 'BIGC-PROGRAM'); "
               "produce one with `bigc compile`");
  size_t nl = bytes.find('\n');
  if (nl == std::string::npos || nl > 256)
    fail(path, "bad container line (expected 'BIGC-PROGRAM <version> <payload-bytes> <fnv1a64>')");
  std::string line = bytes.substr(0, nl);
  std::istringstream ls(line.substr(magic.size()));
  std::string sVersion, sLen, sHash, extra;
  ls >> sVersion >> sLen >> sHash;
  if (sVersion.empty() || sLen.empty() || sHash.empty() || (ls >> extra))
    fail(path, "bad container line '" + line + "' (expected 'BIGC-PROGRAM <version> <payload-bytes> <fnv1a64>')");
  auto allDigits = [](const std::string &s) {
    return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!allDigits(sVersion)) fail(path, "bad version '" + sVersion + "' in the container line");
  long long version = std::stoll(sVersion);
  if (version < kOldestProgramVersion || version > kProgramVersion)
    fail(path, "program format version " + sVersion + ", but this runtime reads versions " +
                   std::to_string(kOldestProgramVersion) + " to " + std::to_string(kProgramVersion) +
                   "; recompile the model with a matching bigc");
  if (!allDigits(sLen)) fail(path, "bad payload length '" + sLen + "' in the container line");
  uint64_t len = std::stoull(sLen);
  bool hexOk = sHash.size() == 16 && std::all_of(sHash.begin(), sHash.end(), [](char c) {
                 return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
               });
  if (!hexOk) fail(path, "bad checksum '" + sHash + "' in the container line (want 16 lowercase hex digits)");
  uint64_t want = std::stoull(sHash, nullptr, 16);
  uint64_t have = bytes.size() - (nl + 1);
  if (have < len)
    fail(path, "truncated: the container line announces " + std::to_string(len) + " payload bytes, the file has " +
                   std::to_string(have));
  if (have > len)
    fail(path, std::to_string(have - len) + " trailing bytes after the " + std::to_string(len) +
                   "-byte payload (nothing may follow it)");
  uint64_t got = fnv1a64(bytes.data() + nl + 1, len);
  if (got != want) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)got);
    fail(path, "checksum mismatch (container line says " + sHash + ", payload hashes to " + buf +
                   "): the file is corrupted; recompile it");
  }
  json root;
  try {
    root = json::parse(bytes.begin() + long(nl + 1), bytes.end());
  } catch (const json::exception &e) {
    fail(path, std::string("payload is not valid JSON: ") + e.what());
  }
  Program p = fromJson(root, path, true);
  p.checksum = got;
  validateProgram(p, path);
  return p;
}

Program loadProgram(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, "read error");
  return parseProgram(ss.str(), path);
}

} // namespace bigc::format
