// The program file: container, JSON payload, validation, serialization
// (docs/program-format.md). No MLIR here.
#include "bigc/runtime/program.h"
#include "bigc/runtime/ops.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace bigc::rt {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// dtypes, hashing, op table

const char *dtypeName(DType d) {
  switch (d) {
  case DType::F32: return "f32";
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::I32: return "i32";
  }
  return "?";
}

int64_t dtypeSize(DType d) {
  switch (d) {
  case DType::F32: return 4;
  case DType::BF16: return 2;
  case DType::F16: return 2;
  case DType::I32: return 4;
  }
  return 0;
}

bool parseDType(const std::string &s, DType &out) {
  if (s == "f32") out = DType::F32;
  else if (s == "bf16") out = DType::BF16;
  else if (s == "f16") out = DType::F16;
  else if (s == "i32") out = DType::I32;
  else return false;
  return true;
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int64_t Program::parameterCount() const {
  int64_t n = 0;
  // The weights the step computes with, whole (a ZeRO-3 shard counts as its tensor); the rank's
  // shard of a ZeRO-1/2 compute copy (`N.half.shard`, next to the whole `N.half`) not again.
  const std::string shardSuffix = ".half.shard";
  for (const auto &b : buffers) {
    if (b.role != "param") continue;
    if (b.name.size() > shardSuffix.size() &&
        b.name.compare(b.name.size() - shardSuffix.size(), shardSuffix.size(), shardSuffix) == 0)
      continue;
    if (b.tpDim >= 0) { // a tensor-parallel chunk: the whole weight
      int64_t w = 1;
      for (int64_t d : b.tpFullShape) w *= d;
      n += w;
      continue;
    }
    n += b.fullNumel();
  }
  return n;
}

const std::vector<OpSignature> &opSignatures() {
  // name, kind, minIn, maxIn, minOut, maxOut, i32 inputs (bits), in place
  static const std::vector<OpSignature> table = {
      {"embedding", OpKind::Embedding, 2, 2, 1, 1, 0b10, false},
      {"embedding_grad", OpKind::EmbeddingGrad, 2, 2, 1, 1, 0b10, false},
      {"matmul", OpKind::Matmul, 2, 2, 1, 1, 0, false},
      {"add", OpKind::Add, 2, 2, 1, 1, 0, true},
      {"bias_add", OpKind::BiasAdd, 2, 2, 1, 1, 0, true},
      {"mul", OpKind::Mul, 2, 2, 1, 1, 0, true},
      {"scale", OpKind::Scale, 1, 1, 1, 1, 0, true},
      {"reduce_sum", OpKind::ReduceSum, 1, 1, 1, 1, 0, false},
      {"fill", OpKind::Fill, 0, 0, 1, 1, 0, false},
      {"layernorm", OpKind::Layernorm, 3, 3, 3, 3, 0, false},
      {"layernorm_grad", OpKind::LayernormGrad, 5, 5, 3, 3, 0, false},
      {"gelu", OpKind::Gelu, 1, 1, 1, 1, 0, true},
      {"gelu_grad", OpKind::GeluGrad, 2, 2, 1, 1, 0, true},
      {"attention", OpKind::Attention, 1, 1, 2, 2, 0, false},
      {"attention_grad", OpKind::AttentionGrad, 4, 4, 1, 1, 0, false},
      {"transpose", OpKind::Transpose, 1, 1, 1, 1, 0, false},
      {"reshape", OpKind::Reshape, 1, 1, 1, 1, 0, true},
      {"split", OpKind::Split, 1, 1, 1, -1, 0, false},
      {"concat", OpKind::Concat, 1, -1, 1, 1, 0, false},
      {"cross_entropy", OpKind::CrossEntropy, 2, 2, 1, 1, 0b10, false},
      {"cross_entropy_grad", OpKind::CrossEntropyGrad, 3, 3, 1, 1, 0b10, false},
      {"global_norm", OpKind::GlobalNorm, 1, -1, 1, 1, 0, false},
      {"adamw", OpKind::AdamW, 4, 7, 3, 4, 0, false},
      {"cast", OpKind::Cast, 1, 1, 1, 1, 0, false},
      {"copy", OpKind::Copy, 1, 1, 1, 1, 0, false},
      {"wait", OpKind::Wait, 0, 0, 0, 0, 0, false},
      {"check_finite", OpKind::CheckFinite, 1, -1, 1, 1, 0, false},
      {"loss_scale_update", OpKind::LossScaleUpdate, 3, 3, 2, 2, 0, false},
      {"all_reduce", OpKind::AllReduce, 1, -1, 1, -1, 0, false},
      {"reduce_scatter", OpKind::ReduceScatter, 1, -1, 1, -1, 0, false},
      {"all_gather", OpKind::AllGather, 1, -1, 1, -1, 0, false},
      {"tp_slice", OpKind::TpSlice, 1, 1, 1, 1, 0, false},
      {"vocab_ce_stats", OpKind::VocabCeStats, 2, 2, 1, 1, 0b10, false},
      {"vocab_ce_stats_grad", OpKind::VocabCeStatsGrad, 4, 4, 1, 1, 0b100, false},
      {"vocab_ce_loss", OpKind::VocabCeLoss, 1, 1, 1, 1, 0, false},
      {"vocab_ce_loss_grad", OpKind::VocabCeLossGrad, 2, 2, 1, 1, 0, false},
      {"rmsnorm", OpKind::RmsNorm, 2, 2, 2, 2, 0, false},
      {"rmsnorm_grad", OpKind::RmsNormGrad, 4, 4, 2, 2, 0, false},
      {"rope", OpKind::Rope, 1, 1, 1, 1, 0, true},
      {"silu", OpKind::Silu, 1, 1, 1, 1, 0, true},
      {"silu_grad", OpKind::SiluGrad, 2, 2, 1, 1, 0, true},
      {"swiglu", OpKind::Swiglu, 2, 2, 1, 1, 0, true},
      {"swiglu_grad", OpKind::SwigluGrad, 3, 3, 2, 2, 0, false},
      {"gqa_attention", OpKind::GqaAttention, 3, 3, 2, 2, 0, false},
      {"gqa_attention_grad", OpKind::GqaAttentionGrad, 6, 6, 3, 3, 0, false},
  };
  return table;
}

const OpSignature *findOpSignature(const std::string &name) {
  for (const auto &s : opSignatures())
    if (name == s.name) return &s;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// parsing

namespace {

[[noreturn]] void fail(const std::string &path, const std::string &msg) {
  throw UserError(path + ": " + msg);
}

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
  [[noreturn]] void mistyped(const char *key, const std::string &where, const char *want,
                             const json &got) const {
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
  std::string stringOr(const json &obj, const char *key, const std::string &where,
                       const std::string &dflt) const {
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
        fail(path, where + ": field '" + key + "' must be a list of integers; element " +
                       std::to_string(i) + " is " + typeName(j[i]));
      if (j[i].is_number_unsigned() && j[i].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, where + ": field '" + key + "' element " + std::to_string(i) + " is too large");
      out.push_back(j[i].get<int64_t>());
    }
    return out;
  }
};

std::string bufWhere(size_t i, const json &b) {
  std::string s = "buffer " + std::to_string(i);
  if (b.is_object() && b.contains("name") && b["name"].is_string())
    s += " ('" + b["name"].get<std::string>() + "')";
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

Program fromJson(const json &root, const std::string &path) {
  Reader r{path};
  Program p;
  if (!root.is_object()) fail(path, "the payload must be a JSON object, is " + typeName(root));
  p.version = int(r.integer(root, "version", "payload"));
  if (p.version < kOldestProgramVersion || p.version > kProgramVersion)
    fail(path, "payload says program format version " + std::to_string(p.version) +
                   ", this runtime reads versions " + std::to_string(kOldestProgramVersion) + " to " +
                   std::to_string(kProgramVersion));
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
  }
  if (root.contains("hardware")) {
    const json &h = r.object(root, "hardware", "payload");
    p.hardwareName = r.stringOr(h, "name", "hardware", "");
    p.deviceCapacityBytes = r.integerOr(h, "device_capacity_bytes", "hardware", 0);
    p.hostCapacityBytes = r.integerOr(h, "host_capacity_bytes", "hardware", 0);
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
  }

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
    if (!parseDType(dt, b.dtype))
      fail(path, where + ": unknown dtype '" + dt + "' (known: f32, bf16, f16, i32)");
    b.shape = r.ints(jb, "shape", where);
    b.role = r.string(jb, "role", where);
    std::vector<int64_t> live = r.ints(jb, "live", where);
    if (live.size() != 2)
      fail(path, where + ": field 'live' must be [first, last], has " + std::to_string(live.size()) +
                     " elements");
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
    }
    if (jb.contains("tp") && !jb["tp"].is_null()) {
      const json &jt = r.object(jb, "tp", where);
      b.tpDim = r.integer(jt, "dim", where + " tp");
      b.tpSegments = r.integerOr(jt, "segments", where + " tp", 1);
      b.tpFullShape = r.ints(jt, "full_shape", where + " tp");
    }
    p.buffers.push_back(std::move(b));
  }

  const json &inputs = r.object(root, "inputs", "payload");
  p.tokenInputs = r.ints(inputs, "tokens", "inputs");
  p.targetInputs = r.ints(inputs, "targets", "inputs");
  p.loss = r.integer(root, "loss", "payload");
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
            if (reals) a.reals.push_back(v[k].get<double>());
            else a.list.push_back(v[k].get<int64_t>());
        } else {
          fail(path, where + ": attribute '" + it.key() + "' must be a number, a bool or a list of integers, is " +
                         typeName(v));
        }
        ins.attrs[it.key()] = std::move(a);
      }
    }
    p.instructions.push_back(std::move(ins));
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
    fail(path, "bad container line '" + line +
                   "' (expected 'BIGC-PROGRAM <version> <payload-bytes> <fnv1a64>')");
  auto allDigits = [](const std::string &s) {
    return !s.empty() && s.size() <= 18 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
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
    fail(path, "truncated: the container line announces " + std::to_string(len) +
                   " payload bytes, the file has " + std::to_string(have));
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
  Program p = fromJson(root, path);
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

// ---------------------------------------------------------------------------------------------
// validation

namespace {

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool isSuffix(const std::vector<int64_t> &suffix, const std::vector<int64_t> &of) {
  if (suffix.size() > of.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), of.end() - long(suffix.size()));
}

int64_t prod(const std::vector<int64_t> &s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// Which dtypes an operand may have (format doc, "Dtypes"): ids are i32; statistics (layernorm
// mean/rstd, attention lse), scalars (loss, dloss, norms, flags, loss scale), AdamW's master weight,
// moments and optional scalars are f32; other floating-point tensors f32, bf16 or f16.
using Want = OperandType;
Want operandDType(OpKind k, bool isIn, size_t j) {
  switch (k) {
  case OpKind::Embedding:
  case OpKind::EmbeddingGrad: return isIn && j == 1 ? Want::I32 : Want::Float;
  case OpKind::CrossEntropy: return isIn ? (j == 1 ? Want::I32 : Want::Float) : Want::F32;
  case OpKind::CrossEntropyGrad: return isIn ? (j == 1 ? Want::I32 : j == 2 ? Want::F32 : Want::Float) : Want::Float;
  case OpKind::Layernorm: return !isIn && j >= 1 ? Want::F32 : Want::Float;
  case OpKind::LayernormGrad: return isIn && j >= 3 ? Want::F32 : Want::Float;
  case OpKind::Attention: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::AttentionGrad: return isIn && j == 3 ? Want::F32 : Want::Float;
  case OpKind::RmsNorm: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::RmsNormGrad: return isIn && j == 3 ? Want::F32 : Want::Float;
  case OpKind::GqaAttention: return !isIn && j == 1 ? Want::F32 : Want::Float;
  case OpKind::GqaAttentionGrad: return isIn && j == 5 ? Want::F32 : Want::Float;
  case OpKind::GlobalNorm:
  case OpKind::CheckFinite: return isIn ? Want::Float : Want::F32;
  case OpKind::LossScaleUpdate: return Want::F32;
  case OpKind::AdamW: return isIn ? (j == 1 ? Want::Float : Want::F32) : (j == 3 ? Want::Float : Want::F32);
  case OpKind::Copy:
  case OpKind::Reshape: return Want::Any;
  case OpKind::VocabCeStats: return isIn ? (j == 1 ? Want::I32 : Want::Float) : Want::F32;
  case OpKind::VocabCeStatsGrad: return isIn ? (j == 2 ? Want::I32 : j == 1 ? Want::Float : Want::F32) : Want::Float;
  case OpKind::VocabCeLoss:
  case OpKind::VocabCeLossGrad: return Want::F32;
  default: return Want::Float;
  }
}

struct Validator {
  const Program &p;
  const std::string &path;
  size_t idx = 0;
  const Instruction *ins = nullptr;

  [[noreturn]] void bad(const std::string &msg) const {
    std::string where = "instruction " + std::to_string(idx) + " (" + ins->op;
    if (!ins->loc.empty()) where += " at " + ins->loc;
    fail(path, where + "): " + msg);
  }
  const Buffer &in(size_t i) const { return p.buffers[size_t(ins->in[i])]; }
  const Buffer &out(size_t i) const { return p.buffers[size_t(ins->out[i])]; }
  std::string desc(const Buffer &b) const {
    return "buffer " + std::to_string(b.id) + " '" + b.name + "' " + shapeStr(b.shape);
  }
  void sameShape(const Buffer &a, const Buffer &b, const char *what) const {
    if (a.shape != b.shape)
      bad(std::string(what) + ": shapes differ: " + desc(a) + " vs " + desc(b));
  }
  void wantShape(const Buffer &b, const std::vector<int64_t> &s, const std::string &what) const {
    if (b.shape != s) bad(what + " must have shape " + shapeStr(s) + ", " + desc(b) + " has not");
  }
  void minRank(const Buffer &b, size_t r, const std::string &what) const {
    if (b.shape.size() < r)
      bad(what + " must have rank >= " + std::to_string(r) + ", " + desc(b) + " has rank " +
          std::to_string(b.shape.size()));
  }
  std::vector<int64_t> lead(const Buffer &b) const {
    return std::vector<int64_t>(b.shape.begin(), b.shape.end() - 1);
  }
  int64_t axisAttr(size_t rank) const {
    auto it = ins->attrs.find("axis");
    if (it == ins->attrs.end() || it->second.isList) bad("attribute 'axis' (an integer) is required");
    double a = it->second.num;
    if (a != std::floor(a)) bad("attribute 'axis' must be an integer");
    int64_t ax = int64_t(a);
    if (ax < 0) ax += int64_t(rank);
    if (ax < 0 || ax >= int64_t(rank))
      bad("attribute 'axis' " + std::to_string(int64_t(a)) + " is out of range for rank " + std::to_string(rank));
    return ax;
  }

  void shapes(const OpSignature &sig) const {
    switch (sig.kind) {
    case OpKind::Embedding: {
      const Buffer &t = in(0), &ids = in(1), &y = out(0);
      if (t.shape.size() != 2) bad("table must be [V,C], " + desc(t) + " is not");
      auto want = ids.shape;
      want.push_back(t.shape[1]);
      wantShape(y, want, "output");
      break;
    }
    case OpKind::EmbeddingGrad: {
      const Buffer &dy = in(0), &ids = in(1), &dt = out(0);
      if (dt.shape.size() != 2) bad("dtable must be [V,C], " + desc(dt) + " is not");
      auto want = ids.shape;
      want.push_back(dt.shape[1]);
      wantShape(dy, want, "dy");
      break;
    }
    case OpKind::Matmul: {
      const Buffer &a = in(0), &b = in(1), &c = out(0);
      bool ta = ins->flag("transpose_a"), tb = ins->flag("transpose_b");
      size_t ra = a.shape.size(), rb = b.shape.size();
      if (ra < 2 || rb < 2)
        bad("matmul operands must have rank >= 2: " + desc(a) + " @ " + desc(b));
      std::vector<int64_t> want;
      if (ra == 2 && rb == 2) {
      } else if (ra > 2 && rb == 2) {
        if (ta) bad("matmul shape: transpose_a is not allowed when a has rank > 2 and b rank 2 (" +
                    desc(a) + " @ " + desc(b) + ")");
      } else if (ra == rb) {
        if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
          bad("batched matmul shape mismatch: leading dimensions differ: " + desc(a) + " @ " + desc(b));
      } else {
        bad("matmul shape: unsupported ranks " + std::to_string(ra) + " and " + std::to_string(rb) +
            " (" + desc(a) + " @ " + desc(b) + "); allowed: 2@2, N@2, N@N with equal leading dims");
      }
      int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
      int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
      int64_t K2 = tb ? b.shape[rb - 1] : b.shape[rb - 2];
      int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
      if (K != K2)
        bad("matmul shape mismatch: inner dimensions " + std::to_string(K) + " and " + std::to_string(K2) +
            " differ (" + desc(a) + (ta ? "ᵀ" : "") + " @ " + desc(b) + (tb ? "ᵀ" : "") + ")");
      want.assign(a.shape.begin(), a.shape.end() - 2);
      want.push_back(M);
      want.push_back(N);
      if (c.shape != want)
        bad("matmul shape mismatch: output must be " + shapeStr(want) + ", " + desc(c) + " is not");
      break;
    }
    case OpKind::Add:
    case OpKind::Mul:
      sameShape(in(0), in(1), "inputs");
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::BiasAdd:
      if (!isSuffix(in(1).shape, in(0).shape))
        bad("bias " + desc(in(1)) + " must be a suffix of x " + desc(in(0)));
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::Scale:
    case OpKind::Gelu:
    case OpKind::Silu:
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::GeluGrad:
    case OpKind::SiluGrad:
      sameShape(in(0), in(1), "x and dy");
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::Swiglu:
      sameShape(in(0), in(1), "gate and up");
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::SwigluGrad:
      sameShape(in(0), in(1), "gate and up");
      sameShape(in(0), in(2), "gate and dy");
      sameShape(in(0), out(0), "dgate");
      sameShape(in(0), out(1), "dup");
      break;
    case OpKind::RmsNorm: {
      const Buffer &x = in(0);
      minRank(x, 1, "x");
      wantShape(in(1), {x.shape.back()}, "w");
      wantShape(out(0), x.shape, "y");
      wantShape(out(1), lead(x), "rstd");
      if (!(ins->num("eps", 0) > 0)) bad("attribute 'eps' (a positive number) is required");
      break;
    }
    case OpKind::RmsNormGrad: {
      const Buffer &x = in(1);
      minRank(x, 1, "x");
      wantShape(in(0), x.shape, "dy");
      wantShape(in(2), {x.shape.back()}, "w");
      wantShape(in(3), lead(x), "rstd");
      wantShape(out(0), x.shape, "dx");
      wantShape(out(1), {x.shape.back()}, "dw");
      break;
    }
    case OpKind::Rope: {
      const Buffer &x = in(0);
      if (x.shape.size() != 3) bad("x must be [B,T,H*D], " + desc(x) + " is not");
      const double d = ins->num("head_dim", 0);
      if (d < 2 || d > 1024 || d != std::floor(d) || int64_t(d) % 2 != 0)
        bad("attribute 'head_dim' (an even integer in [2, 1024]) is required");
      if (x.shape[2] % int64_t(d) != 0) bad("the last dimension of " + desc(x) + " is not a multiple of head_dim");
      const std::vector<double> f = ins->reals("inv_freq");
      if (int64_t(f.size()) != int64_t(d) / 2)
        bad("attribute 'inv_freq' must hold head_dim / 2 = " + std::to_string(int64_t(d) / 2) + " numbers, holds " +
            std::to_string(f.size()));
      for (double v : f)
        if (!std::isfinite(v)) bad("attribute 'inv_freq' must be finite");
      sameShape(x, out(0), "output");
      break;
    }
    case OpKind::GqaAttention:
    case OpKind::GqaAttentionGrad: {
      const bool grad = sig.kind == OpKind::GqaAttentionGrad;
      const Buffer &q = in(grad ? 1 : 0), &k = in(grad ? 2 : 1), &v = in(grad ? 3 : 2);
      if (q.shape.size() != 3) bad("q must be [B,T,H*D], " + desc(q) + " is not");
      const double h = ins->num("heads", 0), hk = ins->num("kv_heads", 0), w = ins->num("window", 0);
      if (h < 1 || h != std::floor(h)) bad("attribute 'heads' (a positive integer) is required");
      if (hk < 1 || hk != std::floor(hk)) bad("attribute 'kv_heads' (a positive integer) is required");
      if (w < 0 || w != std::floor(w)) bad("attribute 'window' must be an integer >= 0");
      const int64_t H = int64_t(h), Hkv = int64_t(hk);
      const bool tpHeads = ins->flag("tp_heads");
      if (!tpHeads && H % Hkv != 0) bad("kv_heads = " + std::to_string(Hkv) + " does not divide heads = " + std::to_string(H));
      if (tpHeads && (H * p.tp) % Hkv != 0)
        bad("kv_heads = " + std::to_string(Hkv) + " does not divide the " + std::to_string(H * p.tp) + " heads of all tensor ranks");
      if (q.shape[2] % H != 0) bad("the last dimension of q is not divisible by heads = " + std::to_string(H));
      const int64_t B = q.shape[0], T = q.shape[1], D = q.shape[2] / H;
      wantShape(k, {B, T, Hkv * D}, "k");
      wantShape(v, {B, T, Hkv * D}, "v");
      if (grad) {
        wantShape(in(0), q.shape, "dout");
        wantShape(in(4), q.shape, "out");
        wantShape(in(5), {B, H, T}, "lse");
        wantShape(out(0), q.shape, "dq");
        wantShape(out(1), k.shape, "dk");
        wantShape(out(2), v.shape, "dv");
      } else {
        wantShape(out(0), q.shape, "out");
        wantShape(out(1), {B, H, T}, "lse");
      }
      break;
    }
    case OpKind::ReduceSum:
      if (!isSuffix(out(0).shape, in(0).shape))
        bad("output " + desc(out(0)) + " must be a suffix of x " + desc(in(0)));
      break;
    case OpKind::Fill:
      break;
    case OpKind::Layernorm: {
      const Buffer &x = in(0);
      minRank(x, 1, "x");
      std::vector<int64_t> c{x.shape.back()};
      wantShape(in(1), c, "w");
      wantShape(in(2), c, "b");
      wantShape(out(0), x.shape, "y");
      wantShape(out(1), lead(x), "mean");
      wantShape(out(2), lead(x), "rstd");
      break;
    }
    case OpKind::LayernormGrad: {
      const Buffer &x = in(1);
      minRank(x, 1, "x");
      std::vector<int64_t> c{x.shape.back()};
      wantShape(in(0), x.shape, "dy");
      wantShape(in(2), c, "w");
      wantShape(in(3), lead(x), "mean");
      wantShape(in(4), lead(x), "rstd");
      wantShape(out(0), x.shape, "dx");
      wantShape(out(1), c, "dw");
      wantShape(out(2), c, "db");
      break;
    }
    case OpKind::Attention:
    case OpKind::AttentionGrad: {
      bool grad = sig.kind == OpKind::AttentionGrad;
      const Buffer &qkv = grad ? in(1) : in(0);
      if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0) bad("qkv must be [B,T,3C], " + desc(qkv) + " is not");
      int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
      double h = ins->num("heads", 0);
      if (h < 1 || h != std::floor(h)) bad("attribute 'heads' (a positive integer) is required");
      int64_t H = int64_t(h);
      if (C % H != 0) bad("C = " + std::to_string(C) + " is not divisible by heads = " + std::to_string(H));
      if (grad) {
        wantShape(in(0), {B, T, C}, "dout");
        wantShape(in(2), {B, T, C}, "out");
        wantShape(in(3), {B, H, T}, "lse");
        wantShape(out(0), qkv.shape, "dqkv");
      } else {
        wantShape(out(0), {B, T, C}, "out");
        wantShape(out(1), {B, H, T}, "lse");
      }
      break;
    }
    case OpKind::Transpose: {
      const Buffer &x = in(0), &y = out(0);
      std::vector<int64_t> perm = ins->ints("perm");
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> iota(x.shape.size());
      std::iota(iota.begin(), iota.end(), 0);
      if (sorted != iota)
        bad("attribute 'perm' " + shapeStr(perm) + " is not a permutation of the " +
            std::to_string(x.shape.size()) + " dimensions of " + desc(x));
      std::vector<int64_t> want;
      for (int64_t d : perm) want.push_back(x.shape[size_t(d)]);
      wantShape(y, want, "output");
      break;
    }
    case OpKind::Reshape:
      if (in(0).numel() != out(0).numel())
        bad("reshape changes the element count: " + desc(in(0)) + " -> " + desc(out(0)));
      if (in(0).dtype != out(0).dtype)
        bad(std::string("reshape keeps the dtype: ") + dtypeName(in(0).dtype) + " -> " + dtypeName(out(0).dtype));
      break;
    case OpKind::Split:
    case OpKind::Concat: {
      bool split = sig.kind == OpKind::Split;
      const Buffer &whole = split ? in(0) : out(0);
      size_t parts = split ? ins->out.size() : ins->in.size();
      minRank(whole, 1, split ? "x" : "y");
      int64_t ax = axisAttr(whole.shape.size());
      if (whole.shape[size_t(ax)] % int64_t(parts) != 0)
        bad("dimension " + std::to_string(ax) + " of " + desc(whole) + " does not split into " +
            std::to_string(parts) + " equal parts");
      auto part = whole.shape;
      part[size_t(ax)] /= int64_t(parts);
      for (size_t k = 0; k < parts; ++k)
        wantShape(split ? out(k) : in(k), part, (split ? "output " : "input ") + std::to_string(k));
      break;
    }
    case OpKind::CrossEntropy:
    case OpKind::CrossEntropyGrad: {
      const Buffer &l = in(0);
      minRank(l, 1, "logits");
      wantShape(in(1), lead(l), "targets");
      if (sig.kind == OpKind::CrossEntropy) {
        wantShape(out(0), {}, "loss");
      } else {
        wantShape(in(2), {}, "dloss");
        wantShape(out(0), l.shape, "dlogits");
      }
      break;
    }
    case OpKind::GlobalNorm:
      wantShape(out(0), {}, "norm");
      break;
    case OpKind::Cast:
      sameShape(in(0), out(0), "output");
      break;
    case OpKind::Copy:
      sameShape(in(0), out(0), "output");
      if (in(0).dtype != out(0).dtype)
        bad(std::string("copy keeps the dtype: ") + dtypeName(in(0).dtype) + " -> " + dtypeName(out(0).dtype) +
            " (use cast)");
      if (ins->in[0] == ins->out[0]) bad("copy onto itself");
      break;
    case OpKind::Wait:
      break;
    case OpKind::CheckFinite:
      wantShape(out(0), {}, "flag");
      break;
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather: {
      if (ins->in.size() != ins->out.size())
        bad("a collective has one output per input, has " + std::to_string(ins->in.size()) + " inputs and " +
            std::to_string(ins->out.size()) + " outputs");
      double axis = ins->num("axis", 0);
      if (axis != 0 && axis != 1)
        bad("attribute 'axis' must be 0 (dp) or 1 (tp): this runtime's collectives run over the data- and "
            "tensor-parallel axes");
      const int64_t n = p.axisSize(int64_t(axis));
      if (sig.kind != OpKind::AllGather) {
        double r = ins->num("reduce", -1);
        if (r != 0 && r != 1 && r != 2 && r != 3) bad("attribute 'reduce' must be 0 (sum), 1 (mean), 2 (max) or 3 (norm)");
        if (sig.kind == OpKind::ReduceScatter && r > 1) bad("reduce_scatter reduces by sum (0) or mean (1)");
        if (r == 3)
          for (size_t k = 0; k < ins->in.size(); ++k)
            if (in(k).dtype != DType::F32) bad("reduce 3 (norm) combines f32 norms; input " + std::to_string(k) + " is " +
                                               dtypeName(in(k).dtype));
      }
      for (size_t k = 0; k < ins->in.size(); ++k) {
        const Buffer &a = in(k), &b = out(k);
        if (a.dtype != b.dtype)
          bad("input " + std::to_string(k) + " and output " + std::to_string(k) + " must have one dtype, are " +
              dtypeName(a.dtype) + " and " + dtypeName(b.dtype));
        if (sig.kind == OpKind::AllReduce) {
          sameShape(a, b, "output");
          continue;
        }
        const Buffer &whole = sig.kind == OpKind::ReduceScatter ? a : b, &part = sig.kind == OpKind::ReduceScatter ? b : a;
        const int64_t s = (whole.numel() + n - 1) / n;
        if (part.shape.size() != 1 || part.shape[0] != s)
          bad("the shard of '" + whole.name + "' " + shapeStr(whole.shape) + " over " + std::to_string(n) +
              " ranks is [" + std::to_string(s) + "], '" + part.name + "' is " + shapeStr(part.shape));
      }
      break;
    }
    case OpKind::TpSlice: {
      const int64_t T = p.tp;
      const Buffer &x = in(0);
      const double dd = ins->num("dim", -1);
      if (dd != std::floor(dd) || dd < 0 || dd >= double(x.shape.size()))
        bad("attribute 'dim' must be a dimension of " + desc(x));
      const int64_t d = int64_t(dd);
      if (x.shape[size_t(d)] % T != 0)
        bad("dimension " + std::to_string(d) + " of " + desc(x) + " does not divide into " + std::to_string(T) +
            " tensor ranks");
      auto want = x.shape;
      want[size_t(d)] /= T;
      wantShape(out(0), want, "output");
      if (out(0).dtype != x.dtype)
        bad("output dtype " + std::string(dtypeName(out(0).dtype)) + " differs from the input's " + dtypeName(x.dtype) +
            " (a slice copies bytes)");
      break;
    }
    case OpKind::VocabCeStats:
    case OpKind::VocabCeStatsGrad: {
      const Buffer &l = in(sig.kind == OpKind::VocabCeStats ? 0 : 1);
      minRank(l, 1, "logits");
      const Buffer &t = in(sig.kind == OpKind::VocabCeStats ? 1 : 2);
      wantShape(t, lead(l), "targets");
      auto st = lead(l);
      st.push_back(2);
      if (sig.kind == OpKind::VocabCeStats) {
        wantShape(out(0), st, "stats");
      } else {
        wantShape(in(0), st, "dstats");
        wantShape(in(3), st, "stats");
        wantShape(out(0), l.shape, "dlogits");
      }
      break;
    }
    case OpKind::VocabCeLoss:
    case OpKind::VocabCeLossGrad: {
      const Buffer &s = in(0);
      double parts = ins->num("parts", 0);
      if (!(parts >= 1) || parts != std::floor(parts)) bad("attribute 'parts' must be a positive integer");
      if (s.shape.size() < 2 || s.shape.back() != 2 || s.shape[0] % int64_t(parts) != 0)
        bad("stats must be [parts*B,...,2], " + desc(s) + " is not");
      if (sig.kind == OpKind::VocabCeLoss) {
        wantShape(out(0), {}, "loss");
      } else {
        wantShape(in(1), {}, "dloss");
        wantShape(out(0), s.shape, "dstats");
      }
      break;
    }
    case OpKind::LossScaleUpdate: {
      for (size_t k = 0; k < 3; ++k) wantShape(in(k), {}, "input " + std::to_string(k));
      if (ins->out[0] != ins->in[1] || ins->out[1] != ins->in[2])
        bad("outputs must be the scale and good inputs (updated in place): in " + shapeStr(ins->in) + ", out " +
            shapeStr(ins->out));
      if (ins->in[0] == ins->in[1] || ins->in[0] == ins->in[2] || ins->in[1] == ins->in[2])
        bad("flag, scale and good must be distinct buffers");
      double n = ins->num("growth_interval", 2000), backoff = ins->num("backoff", 0.5), growth = ins->num("growth", 2);
      if (!(n >= 1) || n != std::floor(n)) bad("attribute 'growth_interval' must be a positive integer");
      if (!(backoff > 0 && backoff <= 1)) bad("attribute 'backoff' must be in (0, 1]");
      if (!(growth >= 1) || !std::isfinite(growth)) bad("attribute 'growth' must be >= 1");
      break;
    }
    case OpKind::AdamW: {
      const Buffer &param = in(0);
      wantShape(in(1), param.shape, "grad");
      wantShape(in(2), param.shape, "m");
      wantShape(in(3), param.shape, "v");
      for (size_t k = 4; k < ins->in.size(); ++k) wantShape(in(k), {}, "optional scalar input " + std::to_string(k));
      if (ins->out.size() == 4) {
        wantShape(out(3), param.shape, "half");
        for (size_t k = 0; k < ins->in.size(); ++k)
          if (ins->in[k] == ins->out[3]) bad("half (output 3) must be a buffer of its own, not input " + std::to_string(k));
      }
      if (ins->out[0] != ins->in[0] || ins->out[1] != ins->in[2] || ins->out[2] != ins->in[3])
        bad("outputs must be the param, m and v inputs (updated in place): in " + shapeStr(ins->in) +
            ", out " + shapeStr(ins->out));
      if (ins->in[0] == ins->in[2] || ins->in[0] == ins->in[3] || ins->in[2] == ins->in[3] ||
          ins->in[1] == ins->in[0] || ins->in[1] == ins->in[2] || ins->in[1] == ins->in[3])
        bad("param, grad, m and v must be distinct buffers");
      break;
    }
    }
  }

  // Inputs and outputs may not overlap in memory, except the exact in-place aliasing the format
  // allows, and a buffer updated in place (same id in `in` and `out`).
  void overlaps(const OpSignature &sig) const {
    auto intersect = [](const Buffer &a, const Buffer &b) {
      return a.space == b.space && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes &&
             b.offset < a.offset + a.bytes;
    };
    for (size_t o = 0; o < ins->out.size(); ++o) {
      const Buffer &y = out(o);
      for (size_t o2 = o + 1; o2 < ins->out.size(); ++o2) {
        if (ins->out[o2] == ins->out[o]) bad("output buffer " + std::to_string(y.id) + " appears twice");
        if (intersect(y, out(o2)))
          bad("outputs " + std::to_string(o) + " (" + desc(y) + ") and " + std::to_string(o2) + " (" +
              desc(out(o2)) + ") overlap in memory");
      }
      for (size_t i = 0; i < ins->in.size(); ++i) {
        const Buffer &x = in(i);
        if (x.id == y.id || !intersect(x, y)) continue;
        bool exact = x.offset == y.offset && x.bytes == y.bytes;
        if (sig.inPlace && exact &&
            (sig.kind == OpKind::Reshape || x.liveLast == int64_t(idx)))
          continue;
        std::string why = !sig.inPlace ? std::string(" (") + sig.name + " does not work in place)"
                          : !exact     ? std::string(" (in place needs exactly the same offset and size)")
                                       : std::string(" (in place needs this to be the input's last use, "
                                                     "but it is live until instruction ") +
                                             std::to_string(x.liveLast) + ")";
        bad("output " + std::to_string(o) + " (" + desc(y) + " at offset " + std::to_string(y.offset) +
            ") overlaps input " + std::to_string(i) + " (" + desc(x) + " at offset " +
            std::to_string(x.offset) + ")" + why);
      }
    }
  }
};

} // namespace

void validateProgram(const Program &p, const std::string &path) {
  if (p.version < kOldestProgramVersion || p.version > kProgramVersion)
    fail(path, "program format version " + std::to_string(p.version) + ", this runtime reads versions " +
                   std::to_string(kOldestProgramVersion) + " to " + std::to_string(kProgramVersion));
  if (p.batch <= 0 || p.seq <= 0 || p.vocab <= 0)
    fail(path, "config: batch, seq and vocab must be positive (batch " + std::to_string(p.batch) + ", seq " +
                   std::to_string(p.seq) + ", vocab " + std::to_string(p.vocab) + ")");
  if (p.microBatches < 1 || p.ranks < 1) fail(path, "config: micro_batches and ranks must be >= 1");
  if (p.dp < 1 || p.tp < 1 || p.pp < 1 || p.dp > 4096 || p.tp > 4096 || p.pp > 4096 || p.dp * p.tp * p.pp != p.ranks)
    fail(path, "config: the mesh dp " + std::to_string(p.dp) + " x tp " + std::to_string(p.tp) + " x pp " +
                   std::to_string(p.pp) + " must multiply to ranks " + std::to_string(p.ranks));
  if (p.zero < 0 || p.zero > 3) fail(path, "config: zero must be 0, 1, 2 or 3, is " + std::to_string(p.zero));
  if (p.pp != 1)
    fail(path, "config: the mesh has pp " + std::to_string(p.pp) +
                   "; this runtime runs data- and tensor-parallel meshes only (pp = 1)");
  if (p.precision != "fp32" && p.precision != "bf16" && p.precision != "fp16")
    fail(path, "config: unknown precision '" + p.precision + "' (fp32, bf16 or fp16)");
  {
    static const std::set<std::string> policies = {"none", "full", "selective", "auto"};
    if (!policies.count(p.recompute.policy))
      fail(path, "recompute: unknown policy '" + p.recompute.policy + "' (none, full, selective or auto)");
    if (p.recompute.savedBytes < 0 || p.recompute.flopsAdded < 0 || p.recompute.forwardFlops < 0)
      fail(path, "recompute: saved_bytes, flops_added and forward_flops must be >= 0");
  }

  std::set<std::string> spaceNames;
  for (size_t i = 0; i < p.spaces.size(); ++i) {
    const Space &s = p.spaces[i];
    if (s.name.empty()) fail(path, "spaces[" + std::to_string(i) + "]: empty name");
    if (s.name != "device" && s.name != "host")
      fail(path, "spaces[" + std::to_string(i) + "]: unknown memory space '" + s.name +
                     "' (version 2 knows device and host)");
    if (!spaceNames.insert(s.name).second) fail(path, "space '" + s.name + "' appears twice");
    if (s.arenaBytes < 0) fail(path, "space '" + s.name + "': arena_bytes is negative");
  }

  const int64_t nInst = int64_t(p.instructions.size());
  std::set<std::string> persistentNames;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer &b = p.buffers[i];
    std::string where = "buffer " + std::to_string(i) + " ('" + b.name + "')";
    if (b.id != int64_t(i))
      fail(path, where + ": id " + std::to_string(b.id) + " differs from its index " + std::to_string(i));
    const Space *s = p.space(b.space);
    if (!s) fail(path, where + ": unknown space '" + b.space + "' (not in 'spaces')");
    for (int64_t d : b.shape)
      if (d < 0) fail(path, where + ": negative dimension in shape " + shapeStr(b.shape));
    int64_t numel = 1;
    for (int64_t d : b.shape) {
      if (d != 0 && numel > std::numeric_limits<int64_t>::max() / 8 / d)
        fail(path, where + ": shape " + shapeStr(b.shape) + " is too large");
      numel *= d;
    }
    if (b.bytes != numel * dtypeSize(b.dtype))
      fail(path, where + ": bytes " + std::to_string(b.bytes) + " != " + std::to_string(numel) +
                     " elements x " + std::to_string(dtypeSize(b.dtype)) + " (" + dtypeName(b.dtype) + ")");
    if (b.shard) {
      int64_t full = 1;
      for (int64_t d : b.fullShape) {
        if (d < 0 || (d != 0 && full > std::numeric_limits<int64_t>::max() / 8 / d))
          fail(path, where + ": bad shard full_shape " + shapeStr(b.fullShape));
        full *= d;
      }
      if (b.shape.size() != 1 || b.shape[0] != (full + p.dp - 1) / p.dp)
        fail(path, where + ": a shard of " + shapeStr(b.fullShape) + " over dp " + std::to_string(p.dp) + " is [" +
                       std::to_string((full + p.dp - 1) / p.dp) + "], the buffer is " + shapeStr(b.shape));
    }
    if (b.tpDim >= 0) { // a tensor-parallel chunk: the whole shape with dim divided by tp
      const std::vector<int64_t> &local = b.shard ? b.fullShape : b.shape;
      if (b.tpFullShape.size() != local.size() || b.tpDim >= int64_t(local.size()) || b.tpSegments < 1 ||
          b.tpFullShape[size_t(b.tpDim)] % (p.tp * b.tpSegments) != 0)
        fail(path, where + ": bad tensor-parallel split (dim " + std::to_string(b.tpDim) + ", segments " +
                       std::to_string(b.tpSegments) + ") of " + shapeStr(b.tpFullShape) + " over tp " +
                       std::to_string(p.tp));
      for (size_t d = 0; d < local.size(); ++d)
        if (local[d] != (int64_t(d) == b.tpDim ? b.tpFullShape[d] / p.tp : b.tpFullShape[d]))
          fail(path, where + ": the chunk of " + shapeStr(b.tpFullShape) + " split on dim " + std::to_string(b.tpDim) +
                         " over tp " + std::to_string(p.tp) + " is not " + shapeStr(local));
    }
    if (b.offset < 0 || b.offset % kAlignment != 0)
      fail(path, where + ": offset " + std::to_string(b.offset) + " is not aligned to " +
                     std::to_string(kAlignment) + " bytes");
    if (b.offset > s->arenaBytes || b.bytes > s->arenaBytes - b.offset)
      fail(path, where + ": offset " + std::to_string(b.offset) + " + bytes " + std::to_string(b.bytes) +
                     " lies outside the '" + s->name + "' arena of " + std::to_string(s->arenaBytes) + " bytes");
    static const std::set<std::string> roles = {"param",           "master", "optimizer", "grad",     "activation",
                                                "activation_grad", "input",  "workspace", "transfer"};
    if (!roles.count(b.role)) fail(path, where + ": unknown role '" + b.role + "'");
    if (b.liveFirst > b.liveLast || b.liveFirst < 0 || (nInst > 0 && b.liveLast >= nInst))
      fail(path, where + ": live interval [" + std::to_string(b.liveFirst) + ", " + std::to_string(b.liveLast) +
                     "] is not within the " + std::to_string(nInst) + " instructions");
    if (b.persistent()) {
      if (!persistentNames.insert(b.name).second)
        fail(path, where + ": the name '" + b.name + "' is used by two persistent buffers");
      static const std::set<std::string> kinds = {"normal", "zeros", "ones", "copy", "fill"};
      if (!kinds.count(b.init.kind))
        fail(path, where + ": a " + b.role + " buffer needs an init of kind normal, zeros, ones, copy or fill" +
                       (b.init.kind.empty() ? std::string(" (none given)") : ", not '" + b.init.kind + "'"));
      if (b.init.kind == "normal" && !(b.init.std >= 0 && std::isfinite(b.init.std)))
        fail(path, where + ": init std must be a non-negative number");
      if (b.init.kind == "fill" && !std::isfinite(b.init.value))
        fail(path, where + ": init value must be a finite number");
      if (b.dtype == DType::I32) fail(path, where + ": a " + b.role + " buffer must be f32, bf16 or f16, not i32");
      if (b.role != "param" && b.dtype != DType::F32)
        fail(path, where + ": " + b.role + " buffers (fp32 weights of record, AdamW moments) must be f32, not " +
                       dtypeName(b.dtype));
    } else if (!b.init.kind.empty()) {
      fail(path, where + ": only param, master and optimizer buffers take an init");
    }
  }

  // init kind copy: the source is another persistent buffer of the same shape; no cycles.
  for (const Buffer &b : p.buffers) {
    if (!b.persistent() || b.init.kind != "copy") continue;
    std::string where = "buffer " + std::to_string(b.id) + " ('" + b.name + "')";
    const Buffer *cur = &b;
    for (size_t hops = 0; cur->init.kind == "copy"; ++hops) {
      const Buffer *src = nullptr;
      for (const Buffer &c : p.buffers)
        if (c.persistent() && c.name == cur->init.source) src = &c;
      if (!src)
        fail(path, where + ": init copies '" + cur->init.source + "', which is not a param, master or optimizer buffer");
      auto logical = [](const Buffer *x) { return x->shard ? x->fullShape : x->shape; };
      if (logical(src) != logical(cur))
        fail(path, where + ": init copies '" + src->name + "' of shape " + shapeStr(logical(src)) + " into shape " +
                       shapeStr(logical(cur)));
      if (src == &b || hops > p.buffers.size()) fail(path, where + ": init copies form a cycle");
      cur = src;
    }
  }

  auto bufferRef = [&](int64_t id, const std::string &what) {
    if (id < 0 || id >= int64_t(p.buffers.size()))
      fail(path, what + ": buffer id " + std::to_string(id) + " is out of range (" +
                     std::to_string(p.buffers.size()) + " buffers)");
    return &p.buffers[size_t(id)];
  };
  std::vector<int64_t> bt{p.batch, p.seq};
  std::vector<std::pair<std::string, const Buffer *>> inputBufs;
  for (int which = 0; which < 2; ++which) {
    const auto &ids = which ? p.targetInputs : p.tokenInputs;
    const std::string list = which ? "inputs.targets" : "inputs.tokens";
    if (int64_t(ids.size()) != p.microBatches)
      fail(path, list + " has " + std::to_string(ids.size()) + " buffer(s); config.micro_batches is " +
                     std::to_string(p.microBatches) + " (one [B,T] i32 buffer per micro-batch)");
    for (size_t k = 0; k < ids.size(); ++k) {
      std::string what = list + "[" + std::to_string(k) + "]";
      const Buffer *b = bufferRef(ids[k], what);
      if (b->dtype != DType::I32 || b->shape != bt)
        fail(path, what + " (buffer " + std::to_string(b->id) + " '" + b->name + "') must be i32 " + shapeStr(bt) +
                       ", is " + dtypeName(b->dtype) + " " + shapeStr(b->shape));
      inputBufs.emplace_back(what, b);
    }
  }
  for (size_t x = 0; x < inputBufs.size(); ++x)
    for (size_t y = x + 1; y < inputBufs.size(); ++y) {
      const Buffer *a = inputBufs[x].second, *b = inputBufs[y].second;
      if (a == b) fail(path, inputBufs[x].first + " and " + inputBufs[y].first + " must be different buffers");
      if (a->space == b->space && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes)
        fail(path, inputBufs[x].first + " and " + inputBufs[y].first + " overlap in memory");
    }
  if (p.lossScale >= 0 || p.foundInf >= 0) {
    for (auto [id, what] : {std::make_pair(p.lossScale, "loss_scaling.scale"),
                            std::make_pair(p.foundInf, "loss_scaling.found_inf")}) {
      const Buffer *b = bufferRef(id, what);
      if (b->dtype != DType::F32 || !b->shape.empty())
        fail(path, std::string(what) + " (buffer " + std::to_string(b->id) + " '" + b->name +
                       "') must be an f32 scalar [], is " + dtypeName(b->dtype) + " " + shapeStr(b->shape));
    }
  }
  const Buffer *loss = bufferRef(p.loss, "loss");
  if (loss->dtype != DType::F32 || !loss->shape.empty())
    fail(path, "loss (buffer " + std::to_string(loss->id) + " '" + loss->name + "') must be an f32 scalar [], is " +
                   dtypeName(loss->dtype) + " " + shapeStr(loss->shape));

  Validator v{p, path};
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction &ins = p.instructions[i];
    v.idx = i;
    v.ins = &ins;
    const OpSignature *sig = findOpSignature(ins.op);
    if (!sig) v.bad("unknown op '" + ins.op + "'");
    auto countOk = [](size_t n, int lo, int hi) { return int64_t(n) >= lo && (hi < 0 || int64_t(n) <= hi); };
    auto countStr = [](int lo, int hi) {
      if (lo == hi) return std::to_string(lo);
      if (hi < 0) return "at least " + std::to_string(lo);
      return std::to_string(lo) + " or " + std::to_string(hi);
    };
    if (sig->kind != OpKind::AdamW && !countOk(ins.in.size(), sig->minIn, sig->maxIn))
      v.bad("expects " + countStr(sig->minIn, sig->maxIn) + " inputs, has " + std::to_string(ins.in.size()));
    if (sig->kind != OpKind::AdamW && !countOk(ins.out.size(), sig->minOut, sig->maxOut))
      v.bad("expects " + countStr(sig->minOut, sig->maxOut) + " outputs, has " + std::to_string(ins.out.size()));
    if (sig->kind == OpKind::AdamW) {
      // in = [param, grad, m, v] + norm (clip) + loss_scale (unscale) + found_inf (skip_on_overflow);
      // out = [param, m, v] + half (write_half).
      std::string names = "param, grad, m, v";
      size_t nIn = 4;
      for (auto [attr, operand] : {std::make_pair("clip", "norm"), std::make_pair("unscale", "loss_scale"),
                                   std::make_pair("skip_on_overflow", "found_inf")})
        if (ins.flag(attr)) ++nIn, names += std::string(", ") + operand + " (" + attr + ")";
      if (ins.in.size() != nIn)
        v.bad("expects " + std::to_string(nIn) + " inputs [" + names + "] by its attributes, has " +
              std::to_string(ins.in.size()) + " (set clip, unscale, skip_on_overflow to match the optional operands)");
      size_t nOut = ins.flag("write_half") ? 4 : 3;
      if (ins.out.size() != nOut)
        v.bad("expects " + std::to_string(nOut) + " outputs [param, m, v" + (nOut == 4 ? ", half (write_half)" : "") +
              "] by its attributes, has " + std::to_string(ins.out.size()));
    }
    {
      static const std::set<std::string> streams = {"compute", "h2d", "d2h", "host", "comm", "comm_tp"};
      if (!streams.count(ins.stream))
        v.bad("unknown stream '" + ins.stream + "' (compute, h2d, d2h, host, comm or comm_tp)");
      const bool collective = sig->kind == OpKind::AllReduce || sig->kind == OpKind::ReduceScatter ||
                              sig->kind == OpKind::AllGather;
      const bool commStream = ins.stream == "comm" || ins.stream == "comm_tp";
      if (collective != commStream)
        v.bad(collective ? "a collective runs on the comm or comm_tp stream, not '" + ins.stream + "'"
                         : "only collectives run on the comm and comm_tp streams");
      // comm_tp: the tensor-parallel axis (1) only; comm: any other axis.
      if (collective && (ins.stream == "comm_tp") != (ins.num("axis", 0) == 1))
        v.bad(ins.stream == "comm_tp" ? "the comm_tp stream runs collectives over the tensor axis (axis 1) only"
                                      : "a collective over the tensor axis (axis 1) runs on the comm_tp stream");
      static const std::set<std::string> phases = {"", "forward", "backward", "optimizer"};
      if (!phases.count(ins.phase)) v.bad("unknown phase '" + ins.phase + "' (forward, backward or optimizer)");
      for (int64_t w : ins.wait) {
        if (w < 0 || w >= int64_t(i))
          v.bad("waits for instruction " + std::to_string(w) + ", which is not an earlier instruction (wait indices must be in [0, " +
                std::to_string(i) + "))");
        if (p.instructions[size_t(w)].stream == ins.stream)
          v.bad("waits for instruction " + std::to_string(w) + " on its own stream '" + ins.stream +
                "' (a wait must name an instruction of another stream; one stream runs in order)");
      }
    }
    for (size_t k = 0; k < ins.in.size() + ins.out.size(); ++k) {
      bool isIn = k < ins.in.size();
      size_t j = isIn ? k : k - ins.in.size();
      int64_t id = isIn ? ins.in[j] : ins.out[j];
      std::string what = std::string(isIn ? "input " : "output ") + std::to_string(j);
      if (id < 0 || id >= int64_t(p.buffers.size()))
        v.bad(what + ": buffer id " + std::to_string(id) + " is out of range (" + std::to_string(p.buffers.size()) +
              " buffers)");
      const Buffer &b = p.buffers[size_t(id)];
      switch (operandDType(sig->kind, isIn, j)) {
      case Want::I32:
        if (b.dtype != DType::I32) v.bad(what + " (" + v.desc(b) + ") must be i32, is " + dtypeName(b.dtype));
        break;
      case Want::F32:
        if (b.dtype != DType::F32)
          v.bad(what + " (" + v.desc(b) + ") must be f32 (statistics, scalars, master weights and moments are f32), is " +
                dtypeName(b.dtype));
        break;
      case Want::Float:
        if (b.dtype == DType::I32) v.bad(what + " (" + v.desc(b) + ") must be f32, bf16 or f16, is i32");
        break;
      case Want::Any: break;
      }
      if (int64_t(i) < b.liveFirst || int64_t(i) > b.liveLast)
        v.bad(what + " (" + v.desc(b) + ") is used outside its live interval [" + std::to_string(b.liveFirst) +
              ", " + std::to_string(b.liveLast) + "]");
    }
    v.shapes(*sig);
    v.overlaps(*sig);
  }

  // A mesh of several ranks runs collectives; one rank has none.
  // Buffers that share memory must not be live at the same time, except buffers joined by an
  // allowed in-place alias (union-find over those pairs). Inputs are written before instruction 0
  // and the loss is read after the last one, so their intervals are extended accordingly.
  std::vector<size_t> group(p.buffers.size());
  std::iota(group.begin(), group.end(), size_t(0));
  std::function<size_t(size_t)> root = [&](size_t x) {
    while (group[x] != x) x = group[x] = group[group[x]];
    return x;
  };
  for (const auto &ins : p.instructions) {
    const OpSignature *sig = findOpSignature(ins.op);
    if (!sig->inPlace) continue;
    for (int64_t o : ins.out)
      for (int64_t i : ins.in) {
        const Buffer &x = p.buffers[size_t(i)], &y = p.buffers[size_t(o)];
        if (x.space == y.space && x.offset == y.offset && x.bytes == y.bytes) group[root(size_t(i))] = root(size_t(o));
      }
  }
  auto interval = [&](const Buffer &b) {
    int64_t first = b.liveFirst, last = b.liveLast;
    for (int64_t id : p.tokenInputs) if (b.id == id) first = 0;
    for (int64_t id : p.targetInputs) if (b.id == id) first = 0;
    if (b.id == p.loss && nInst > 0) last = nInst - 1;
    if (b.persistent() && nInst > 0) first = 0, last = nInst - 1;
    return std::make_pair(first, last);
  };
  std::vector<const Buffer *> order;
  for (const auto &b : p.buffers)
    if (b.bytes > 0) order.push_back(&b);
  std::sort(order.begin(), order.end(), [](const Buffer *a, const Buffer *b) {
    return a->space != b->space ? a->space < b->space : a->offset < b->offset;
  });
  for (size_t i = 0; i < order.size(); ++i) {
    const Buffer &a = *order[i];
    auto ia = interval(a);
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Buffer &b = *order[j];
      if (b.space != a.space || b.offset >= a.offset + a.bytes) break;
      auto ib = interval(b);
      if (ia.second < ib.first || ib.second < ia.first) continue;
      if (root(size_t(a.id)) == root(size_t(b.id))) continue;
      fail(path, "buffers " + std::to_string(a.id) + " ('" + a.name + "', bytes [" + std::to_string(a.offset) + ", " +
                     std::to_string(a.offset + a.bytes) + ") live [" + std::to_string(ia.first) + ", " +
                     std::to_string(ia.second) + "]) and " + std::to_string(b.id) + " ('" + b.name + "', bytes [" +
                     std::to_string(b.offset) + ", " + std::to_string(b.offset + b.bytes) + ") live [" +
                     std::to_string(ib.first) + ", " + std::to_string(ib.second) +
                     "]) overlap in the '" + a.space + "' arena while both are live");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// serialization

std::string serializeProgram(const Program &p) {
  json root = json::object();
  root["version"] = p.version;
  root["producer"] = p.producer;
  root["source"] = p.source;
  root["config"] = {{"batch", p.batch},          {"seq", p.seq},     {"vocab", p.vocab},
                    {"precision", p.precision}, {"micro_batches", p.microBatches},
                    {"ranks", p.ranks},          {"zero", p.zero},
                    {"mesh", {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}}}};
  if (p.tp > 1)
    root["config"]["tensor_parallel"] = {{"sequence_parallel", p.sequenceParallel ? 1 : 0},
                                         {"replicated", p.tpReplicated}};
  root["optimizer"] = {{"kind", p.optimizer.kind},   {"lr", p.optimizer.lr},
                       {"beta1", p.optimizer.beta1}, {"beta2", p.optimizer.beta2},
                       {"eps", p.optimizer.eps},     {"weight_decay", p.optimizer.weightDecay},
                       {"grad_clip", p.optimizer.gradClip}};
  root["hardware"] = {{"name", p.hardwareName},
                      {"device_capacity_bytes", p.deviceCapacityBytes},
                      {"host_capacity_bytes", p.hostCapacityBytes},
                      {"device_reserve_bytes", p.deviceReserveBytes},
                      {"host_reserve_bytes", p.hostReserveBytes}};
  if (!p.deviceReserveParts.empty()) {
    json parts = json::object();
    for (const auto &[name, b] : p.deviceReserveParts) parts[name] = b;
    root["hardware"]["device_reserve"] = parts;
  }
  if (!p.initialWeights.empty())
    root["initial_weights"] = {{"path", p.initialWeights}, {"bytes", p.initialWeightsBytes}};
  json spaces = json::array();
  for (const auto &s : p.spaces)
    spaces.push_back({{"name", s.name},
                      {"arena_bytes", s.arenaBytes},
                      {"lower_bound_bytes", s.lowerBoundBytes},
                      {"capacity_bytes", s.capacityBytes}});
  root["spaces"] = spaces;
  json bufs = json::array();
  for (const auto &b : p.buffers) {
    json jb = {{"id", b.id},         {"name", b.name},   {"space", b.space},
               {"offset", b.offset}, {"bytes", b.bytes}, {"dtype", dtypeName(b.dtype)},
               {"shape", b.shape},   {"role", b.role},   {"live", {b.liveFirst, b.liveLast}}};
    if (!b.init.kind.empty()) {
      json ji = {{"kind", b.init.kind}};
      if (b.init.kind == "normal") ji["std"] = b.init.std;
      if (b.init.kind == "copy") ji["source"] = b.init.source;
      if (b.init.kind == "fill") ji["value"] = b.init.value;
      jb["init"] = ji;
    }
    if (b.shard) jb["shard"] = {{"axis", "dp"}, {"full_shape", b.fullShape}};
    if (b.tpDim >= 0) jb["tp"] = {{"dim", b.tpDim}, {"segments", b.tpSegments}, {"full_shape", b.tpFullShape}};
    bufs.push_back(std::move(jb));
  }
  root["buffers"] = std::move(bufs);
  root["inputs"] = {{"tokens", p.tokenInputs}, {"targets", p.targetInputs}};
  root["loss"] = p.loss;
  if (p.lossScale >= 0 || p.foundInf >= 0) root["loss_scaling"] = {{"scale", p.lossScale}, {"found_inf", p.foundInf}};
  root["recompute"] = {{"policy", p.recompute.policy},
                       {"saved_bytes", p.recompute.savedBytes},
                       {"flops_added", p.recompute.flopsAdded},
                       {"forward_flops", p.recompute.forwardFlops}};
  if (p.estimate.present) {
    json cs = json::array();
    for (const auto &c : p.estimate.collectives)
      cs.push_back({{"op", c.op}, {"count", c.count}, {"seconds", c.seconds}, {"hidden_seconds", c.hiddenSeconds},
                    {"queued_seconds", c.queuedSeconds}});
    root["estimate"] = {{"step_seconds", p.estimate.stepSeconds},
                        {"compute_seconds", p.estimate.computeSeconds},
                        {"collectives", cs}};
  }
  json insts = json::array();
  for (const auto &ins : p.instructions) {
    json attrs = json::object();
    for (const auto &[k, a] : ins.attrs) {
      if (a.isList) attrs[k] = a.list;
      else if (a.isReals) {
        json r = json::array();
        for (double x : a.reals) r.push_back(x); // doubles: written with a fraction or exponent, read back as reals
        attrs[k] = r;
      }
      else if (k == "transpose_a" || k == "transpose_b" || k == "clip" || k == "unscale" || k == "skip_on_overflow" ||
               k == "write_half")
        attrs[k] = a.num != 0.0;
      else if (a.num == std::floor(a.num) && std::fabs(a.num) < 9007199254740992.0) attrs[k] = int64_t(a.num);
      else attrs[k] = a.num;
    }
    json ji = {{"op", ins.op}, {"in", ins.in}, {"out", ins.out}, {"attrs", attrs}, {"loc", ins.loc}};
    if (ins.stream != "compute") ji["stream"] = ins.stream;
    if (!ins.wait.empty()) ji["wait"] = ins.wait;
    if (!ins.phase.empty()) ji["phase"] = ins.phase;
    if (ins.recompute) ji["recompute"] = true;
    insts.push_back(std::move(ji));
  }
  root["instructions"] = std::move(insts);

  // One buffer / instruction per line: compact, yet readable and diffable.
  std::string payload = "{";
  bool first = true;
  for (auto it = root.begin(); it != root.end(); ++it) {
    payload += first ? "\n" : ",\n";
    first = false;
    payload += json(it.key()).dump() + ": ";
    if (it.value().is_array() && !it.value().empty() && it.value()[0].is_object()) {
      payload += "[";
      for (size_t i = 0; i < it.value().size(); ++i) payload += (i ? ",\n  " : "\n  ") + it.value()[i].dump();
      payload += "\n]";
    } else {
      payload += it.value().dump();
    }
  }
  payload += "\n}\n";
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64(payload.data(), payload.size()));
  return "BIGC-PROGRAM " + std::to_string(kProgramVersion) + " " + std::to_string(payload.size()) + " " + hash +
         "\n" + payload;
}

void writeFileAtomic(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(path + ": cannot write: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw UserError(path + ": write failed: " + std::strerror(e));
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw UserError(path + ": fsync failed: " + std::strerror(e));
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw UserError(path + ": write failed: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw UserError(path + ": cannot rename " + tmp + " into place: " + std::strerror(e));
  }
}

OperandType operandType(OpKind k, bool isIn, size_t j) { return operandDType(k, isIn, j); }

} // namespace bigc::rt
