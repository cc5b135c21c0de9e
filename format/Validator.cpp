// Validating a parsed program: config, spaces, every buffer, the inputs, and every instruction
// (operand counts, streams, waits, dtypes, live intervals, shapes through ShapeRules.cpp, memory
// overlaps) (docs/program-format.md). No MLIR here.
#include "bigc/Format/validator.h"
#include "bigc/Format/ops.h"
#include "Checks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace bigc::format {

namespace detail {

void InstructionCheck::overlaps(const OpDef &sig) const {
  auto intersect = [](const Buffer &a, const Buffer &b) {
    return a.space == b.space && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes &&
           b.offset < a.offset + a.bytes;
  };
  for (size_t o = 0; o < ins->out.size(); ++o) {
    const Buffer &y = out(o);
    for (size_t o2 = o + 1; o2 < ins->out.size(); ++o2) {
      if (ins->out[o2] == ins->out[o]) bad("output buffer " + std::to_string(y.id) + " appears twice");
      if (intersect(y, out(o2)))
        bad("outputs " + std::to_string(o) + " (" + desc(y) + ") and " + std::to_string(o2) + " (" + desc(out(o2)) +
            ") overlap in memory");
    }
    for (size_t i = 0; i < ins->in.size(); ++i) {
      const Buffer &x = in(i);
      if (x.id == y.id || !intersect(x, y)) continue;
      bool exact = x.offset == y.offset && x.bytes == y.bytes;
      const bool may = mayAlias(sig, o, i);
      if (may && exact && (sig.kind == OpKind::Reshape || x.liveLast == int64_t(idx))) continue;
      std::string why = !sig.inPlace ? std::string(" (") + sig.name + " does not work in place)"
                        : !may       ? std::string(" (") + sig.name + "'s output " + std::to_string(o) +
                                     " may not take the place of input " + std::to_string(i) + ")"
                        : !exact ? std::string(" (in place needs exactly the same offset and size)")
                                 : std::string(" (in place needs this to be the input's last use, "
                                               "but it is live until instruction ") +
                                       std::to_string(x.liveLast) + ")";
      bad("output " + std::to_string(o) + " (" + desc(y) + " at offset " + std::to_string(y.offset) +
          ") overlaps input " + std::to_string(i) + " (" + desc(x) + " at offset " + std::to_string(x.offset) + ")" +
          why);
    }
  }
}

} // namespace detail

using detail::fail;

namespace {

// AdamW's hyperparameters, as the update computes them (fp32): a learning rate finite and >= 0,
// betas in [0, 1), eps positive, weight decay and the clipping norm finite and >= 0. `why` is empty
// when they hold, else what is wrong.
std::string adamWProblem(double lr, double beta1, double beta2, double eps, double wd, double maxNorm) {
  const double fmax = 3.4028234663852886e38;
  auto num = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return std::string(b);
  };
  if (!(lr >= 0 && lr <= fmax)) return "lr " + num(lr) + " must be finite and >= 0 (within the float range)";
  if (!(beta1 >= 0 && beta1 < 1)) return "beta1 " + num(beta1) + " must be in [0, 1)";
  if (!(beta2 >= 0 && beta2 < 1)) return "beta2 " + num(beta2) + " must be in [0, 1)";
  if (!(eps > 0 && eps <= fmax && float(eps) > 0.0f)) return "eps " + num(eps) + " must be positive (as a float)";
  if (!(wd >= 0 && wd <= fmax)) return "weight_decay " + num(wd) + " must be finite and >= 0";
  if (!(maxNorm >= 0 && maxNorm <= fmax)) return "max_norm (grad_clip) " + num(maxNorm) + " must be finite and >= 0";
  return "";
}

void checkAdamW(const detail::InstructionCheck &v, const Instruction &ins, const Optimizer &o) {
  const std::string why =
      adamWProblem(ins.num("lr", o.lr), ins.num("beta1", o.beta1), ins.num("beta2", o.beta2), ins.num("eps", o.eps),
                   ins.num("weight_decay", o.weightDecay), ins.num("max_norm", o.gradClip));
  if (!why.empty()) v.bad("AdamW's " + why);
}

// One program: a program of one stage (pp = 1: the program), its messages prefixed by `path`.
void validateStage(const Program &p, const std::string &path) {
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
  if (p.cp < 1 || p.dp % p.cp != 0 || (p.cp > 1 && p.seq % 2 != 0))
    fail(path, "config: the mesh's cp " + std::to_string(p.cp) + " must divide dp " + std::to_string(p.dp) +
                   (p.cp > 1 ? " and seq (" + std::to_string(p.seq) + ") be even (two chunks per rank)" : ""));
  if (p.zero < 0 || p.zero > 3) fail(path, "config: zero must be 0, 1, 2 or 3, is " + std::to_string(p.zero));
  {
    const Optimizer &o = p.optimizer;
    const std::string why = adamWProblem(o.lr, o.beta1, o.beta2, o.eps, o.weightDecay, o.gradClip);
    if (!why.empty()) fail(path, "optimizer: " + why);
    const LrSchedule &s = o.schedule;
    const bool decays = s.kind == "cosine" || s.kind == "linear" || s.kind == "wsd";
    auto bad = [&](const std::string &what) { fail(path, "optimizer.schedule: " + what); };
    if (!decays && s.kind != "constant") bad("unknown kind '" + s.kind + "' (constant, cosine, linear or wsd)");
    if (s.warmupSteps < 0) bad("warmup_steps must be >= 0");
    if (!(s.minLr >= 0 && s.minLr <= o.lr)) bad("min_lr must be in [0, lr]");
    if (decays && s.decaySteps <= s.warmupSteps) bad("decay_steps must exceed warmup_steps");
    if (!decays && (s.decaySteps != 0 || s.minLr != 0 || s.wsdDecaySteps != 0))
      bad("a constant rate has no decay_steps, min_lr or wsd_decay_steps");
    if (s.kind == "wsd" && (s.wsdDecaySteps < 1 || s.wsdDecaySteps > s.decaySteps - s.warmupSteps))
      bad("wsd_decay_steps must be in [1, decay_steps - warmup_steps]");
    if (s.kind != "wsd" && s.wsdDecaySteps != 0) bad("wsd_decay_steps belongs to the wsd kind");
    if (s.present() && p.version < 5) bad("a schedule needs program format version 5");
  }
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
    if (s.name != "device" && s.name != "host" && s.name != "nvme")
      fail(path, "spaces[" + std::to_string(i) + "]: unknown memory space '" + s.name + "' (device, host or nvme)");
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
      fail(path, where + ": bytes " + std::to_string(b.bytes) + " != " + std::to_string(numel) + " elements x " +
                     std::to_string(dtypeSize(b.dtype)) + " (" + dtypeName(b.dtype) + ")");
    if (b.shard) {
      int64_t full = 1;
      for (int64_t d : b.fullShape) {
        if (d < 0 || (d != 0 && full > std::numeric_limits<int64_t>::max() / 8 / d))
          fail(path, where + ": bad shard full_shape " + shapeStr(b.fullShape));
        full *= d;
      }
      if (b.tiles != 1 && (b.tiles < 1 || b.fullShape.empty() || b.fullShape[0] % b.tiles != 0 || !b.persistent()))
        fail(path, where + ": shard tiles " + std::to_string(b.tiles) +
                       " must divide the first dimension of a persistent tensor (is " + shapeStr(b.fullShape) +
                       ", role '" + b.role + "')");
      const int64_t want = b.tiles * ((full / b.tiles + p.dp - 1) / p.dp);
      if (b.shape.size() != 1 || b.shape[0] != want)
        fail(path, where + ": a shard of " + shapeStr(b.fullShape) + " over dp " + std::to_string(p.dp) +
                       (b.tiles > 1 ? " in " + std::to_string(b.tiles) + " tiles" : std::string()) + " is [" +
                       std::to_string(want) + "], the buffer is " + shapeStr(b.shape));
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
    if (b.vocabRows != 0) { // bigc-pad-vocab: the whole tensor's first rows are the model's
      const std::vector<int64_t> &w = b.wholeShape();
      if (!b.persistent() || w.size() < 2 || b.vocabRows < 1 || b.vocabRows > w[0])
        fail(path, where + ": vocab_rows " + std::to_string(b.vocabRows) +
                       " must be in 1.. the first dimension of a persistent tensor of 2 or more dimensions (is " +
                       shapeStr(w) + ", role '" + b.role + "')");
    }
    if (b.offset < 0 || b.offset % kAlignment != 0)
      fail(path, where + ": offset " + std::to_string(b.offset) + " is not aligned to " + std::to_string(kAlignment) +
                     " bytes");
    if (b.space == "nvme" && (b.offset % kNvmeAlignment != 0 || !(b.persistent() || b.role == "grad")))
      fail(path, where +
                     ": an nvme buffer must be persistent (param, master, optimizer) or a gradient waiting for "
                     "its update (grad) at an offset aligned to " +
                     std::to_string(kNvmeAlignment) + " bytes (is role '" + b.role + "' at " +
                     std::to_string(b.offset) + ")");
    if (b.offset > s->arenaBytes || b.bytes > s->arenaBytes - b.offset)
      fail(path, where + ": offset " + std::to_string(b.offset) + " + bytes " + std::to_string(b.bytes) +
                     " lies outside the '" + s->name + "' arena of " + std::to_string(s->arenaBytes) + " bytes");
    static const std::set<std::string> roles = {"param",           "master", "optimizer", "grad",    "activation",
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
      if (b.role != "param" && b.dtype != DType::F32 && !(b.role == "optimizer" && b.dtype == DType::BF16))
        fail(path, where + ": " + b.role +
                       " buffers (fp32 weights of record, AdamW moments) must be f32 (moments: or bf16), not " +
                       dtypeName(b.dtype));
    } else if (!b.init.kind.empty()) {
      fail(path, where + ": only param, master and optimizer buffers take an init");
    }
  }

  // init kind copy: the source is another persistent buffer of the same shape; no cycles.
  std::map<std::string, const Buffer *> persistentByName; // (the last of a name, as a scan would find)
  for (const Buffer &c : p.buffers)
    if (c.persistent()) persistentByName[c.name] = &c;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent() || b.init.kind != "copy") continue;
    std::string where = "buffer " + std::to_string(b.id) + " ('" + b.name + "')";
    const Buffer *cur = &b;
    for (size_t hops = 0; cur->init.kind == "copy"; ++hops) {
      auto found = persistentByName.find(cur->init.source);
      const Buffer *src = found == persistentByName.end() ? nullptr : found->second;
      if (!src)
        fail(path,
             where + ": init copies '" + cur->init.source + "', which is not a param, master or optimizer buffer");
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
      fail(path, what + ": buffer id " + std::to_string(id) + " is out of range (" + std::to_string(p.buffers.size()) +
                     " buffers)");
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
    for (auto [id, what] :
         {std::make_pair(p.lossScale, "loss_scaling.scale"), std::make_pair(p.foundInf, "loss_scaling.found_inf")}) {
      // A pipeline stage other than the one holding the scale has the flag only (scale -1).
      if (id < 0 && p.pp > 1 && std::string(what) == "loss_scaling.scale") continue;
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

  detail::InstructionCheck v{p, path};
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction &ins = p.instructions[i];
    v.idx = i;
    v.ins = &ins;
    const OpDef *sig = findOp(ins.op);
    if (!sig) v.bad("unknown op '" + ins.op + "'");
    v.kind = sig->kind;
    if (ins.microBatch < -1 || ins.microBatch >= p.microBatches)
      v.bad("micro_batch " + std::to_string(ins.microBatch) + " is not one of the step's " +
            std::to_string(p.microBatches) + " micro-batches");
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
      auto known = [&](int64_t id) { return id >= 0 && id < int64_t(p.buffers.size()); };
      if (ins.in.size() >= 4 && known(ins.in[2]) && known(ins.in[3])) { // (ids out of range: below)
        const DType m = p.buffers.at(size_t(ins.in[2])).dtype, vv = p.buffers.at(size_t(ins.in[3])).dtype;
        if (!((m == DType::F32 && vv == DType::F32) || (m == DType::BF16 && vv == DType::BF16)))
          v.bad(std::string("the moments m and v must be both f32 or both bf16, are ") + dtypeName(m) + " and " +
                dtypeName(vv));
      }
      size_t nOut = ins.flag("write_half") ? 4 : 3;
      if (ins.out.size() != nOut)
        v.bad("expects " + std::to_string(nOut) + " outputs [param, m, v" + (nOut == 4 ? ", half (write_half)" : "") +
              "] by its attributes, has " + std::to_string(ins.out.size()));
    }
    {
      static const std::set<std::string> streams = {"compute", "h2d",     "d2h",     "host", "nvme",
                                                    "comm",    "comm_tp", "comm_cp", "p2p"};
      if (!streams.count(ins.stream))
        v.bad("unknown stream '" + ins.stream + "' (compute, h2d, d2h, host, nvme, comm, comm_tp, comm_cp or p2p)");
      // The nvme space: only a copy on the nvme stream touches it, between it and an aligned host buffer.
      {
        auto spaceOf = [&](int64_t id) {
          return id >= 0 && id < int64_t(p.buffers.size()) ? p.buffers[size_t(id)].space : std::string();
        };
        bool touchesNvme = false;
        for (const auto *list : {&ins.in, &ins.out})
          for (int64_t id : *list) touchesNvme |= spaceOf(id) == "nvme";
        if (touchesNvme || ins.stream == "nvme") {
          const bool pair = ins.op == "copy" && ins.in.size() == 1 && ins.out.size() == 1 &&
                            ((spaceOf(ins.in[0]) == "nvme") != (spaceOf(ins.out[0]) == "nvme")) &&
                            (spaceOf(ins.in[0]) == "host" || spaceOf(ins.out[0]) == "host");
          if (!pair || ins.stream != "nvme")
            v.bad("only a copy between the nvme space and a host buffer, on the nvme stream, touches the nvme space "
                  "or runs on the nvme stream");
          else
            for (int64_t id : {ins.in[0], ins.out[0]})
              if (p.buffers[size_t(id)].offset % kNvmeAlignment != 0)
                v.bad("buffer " + std::to_string(id) + " of an nvme copy is not aligned to " +
                      std::to_string(kNvmeAlignment) + " bytes");
        }
      }
      const bool collective = isCollectiveOp(sig->kind);
      const bool commStream = ins.stream == "comm" || ins.stream == "comm_tp" || ins.stream == "comm_cp";
      if (collective != commStream)
        v.bad(collective ? "a collective runs on the comm, comm_tp or comm_cp stream, not '" + ins.stream + "'"
                         : "only collectives run on the comm, comm_tp and comm_cp streams");
      const bool p2p = sig->kind == OpKind::Send || sig->kind == OpKind::Recv;
      if (p2p != (ins.stream == "p2p"))
        v.bad(p2p ? ins.op + " runs on the p2p stream, not '" + ins.stream + "'"
                  : "only send and recv run on the p2p stream");
      if (p2p) { // between the stages of a pipeline: `peer` another stage, `tag` >= 0
        if (p.pp <= 1) v.bad(ins.op + " moves a value between pipeline stages; this program has pp 1");
        for (const char *a : {"peer", "tag"}) {
          auto it = ins.attrs.find(a);
          if (it == ins.attrs.end() || it->second.isList || it->second.isReals ||
              it->second.num != std::floor(it->second.num))
            v.bad(std::string("attribute '") + a + "' (an integer) is required");
        }
        const double peer = ins.num("peer", -1), tag = ins.num("tag", -1);
        if (peer < 0 || peer >= double(p.pp) || peer == double(p.stage))
          v.bad("attribute 'peer' " + std::to_string(int64_t(peer)) + " must be another stage in [0, " +
                std::to_string(p.pp) + ") (this is stage " + std::to_string(p.stage) + ")");
        if (tag < 0) v.bad("attribute 'tag' " + std::to_string(int64_t(tag)) + " must be >= 0");
      }
      // comm_tp: the tensor-parallel axis (1) only; comm: any other axis.
      const bool cpCollective = sig->kind == OpKind::RingShift || sig->kind == OpKind::CpAllToAll;
      if (collective && (ins.stream == "comm_cp") != cpCollective)
        v.bad(ins.stream == "comm_cp" ? "the comm_cp stream runs the context axis's ring shifts and all-to-alls only"
                                      : ins.op + " (the context axis) runs on the comm_cp stream");
      if (collective && (ins.stream == "comm_tp") != (ins.num("axis", 0) == 1))
        v.bad(ins.stream == "comm_tp" ? "the comm_tp stream runs collectives over the tensor axis (axis 1) only"
                                      : "a collective over the tensor axis (axis 1) runs on the comm_tp stream");
      static const std::set<std::string> phases = {"", "forward", "backward", "optimizer"};
      if (!phases.count(ins.phase)) v.bad("unknown phase '" + ins.phase + "' (forward, backward or optimizer)");
      for (int64_t w : ins.wait) {
        if (w < 0 || w >= int64_t(i))
          v.bad("waits for instruction " + std::to_string(w) +
                ", which is not an earlier instruction (wait indices must be in [0, " + std::to_string(i) + "))");
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
      switch (operandType(sig->kind, isIn, j)) {
      case OperandType::I32:
        if (b.dtype != DType::I32) v.bad(what + " (" + v.desc(b) + ") must be i32, is " + dtypeName(b.dtype));
        break;
      case OperandType::F32:
        if (b.dtype != DType::F32)
          v.bad(what + " (" + v.desc(b) +
                ") must be f32 (statistics, scalars, master weights and moments are f32), is " + dtypeName(b.dtype));
        break;
      case OperandType::Float:
        if (b.dtype == DType::I32) v.bad(what + " (" + v.desc(b) + ") must be f32, bf16 or f16, is i32");
        break;
      case OperandType::Any: break;
      }
      if (int64_t(i) < b.liveFirst || int64_t(i) > b.liveLast)
        v.bad(what + " (" + v.desc(b) + ") is used outside its live interval [" + std::to_string(b.liveFirst) + ", " +
              std::to_string(b.liveLast) + "]");
    }
    // Every attribute is one its op declares (format/ops/), of the declared type: numbers finite
    // and, where they count something, exact (the format's numbers are doubles: integers beyond
    // 2^53 would be read as other integers); flags 0 or 1; lists where lists are taken.
    for (const auto &[key, a] : ins.attrs) {
      const AttrSpec *spec = sig->attr(key);
      if (!spec) {
        std::string known;
        for (const AttrSpec &s : sig->attrs) known += std::string(known.empty() ? "" : ", ") + s.name;
        v.bad("unknown attribute '" + key + "' (" + ins.op + " takes " + (known.empty() ? "none" : known) + ")");
      }
      const bool list = a.isList || a.isReals;
      switch (spec->type) {
      case AttrType::Ints:
        if (!a.isList && !(a.isReals && a.reals.empty())) v.bad("attribute '" + key + "' must be a list of integers");
        break;
      case AttrType::Reals:
        if (!list) v.bad("attribute '" + key + "' must be a list of numbers");
        for (double x : a.reals)
          if (!std::isfinite(x)) v.bad("attribute '" + key + "' must hold finite numbers");
        break;
      case AttrType::Int:
      case AttrType::Real:
      case AttrType::Flag:
        if (list) v.bad("attribute '" + key + "' must be a number, not a list");
        if (!std::isfinite(a.num)) v.bad("attribute '" + key + "' is not a finite number");
        if (spec->type == AttrType::Int && (a.num != std::floor(a.num) || std::fabs(a.num) > 9007199254740992.0))
          v.bad("attribute '" + key + "' must be an integer within what a program holds exactly (|x| <= 2^53), is " +
                std::to_string(a.num));
        if (spec->type == AttrType::Flag && a.num != 0.0 && a.num != 1.0)
          v.bad("attribute '" + key + "' is a flag: true or false (1 or 0), is " + std::to_string(a.num));
        break;
      }
    }
    if (sig->kind == OpKind::AdamW) checkAdamW(v, ins, p.optimizer);
    if (sig->shape) sig->shape(v);
    v.overlaps(*sig);
  }
  // The evaluation program: forward instructions of the step, in order, closed under their inputs
  // (each read is a weight or other persistent buffer, a token or target input, or written by an
  // earlier instruction of it), so that it runs alone between two steps.
  if (!p.evalInstructions.empty()) {
    std::vector<char> written(p.buffers.size(), 0);
    for (const Buffer &b : p.buffers) written[size_t(b.id)] = b.persistent();
    for (int64_t id : p.tokenInputs) written[size_t(id)] = 1;
    for (int64_t id : p.targetInputs) written[size_t(id)] = 1;
    int64_t prev = -1;
    for (int64_t i : p.evalInstructions) {
      if (i <= prev || i >= int64_t(p.instructions.size()))
        fail(path, "eval: instruction " + std::to_string(i) +
                       " is out of order or out of range (increasing indices "
                       "below " +
                       std::to_string(p.instructions.size()) + ")");
      prev = i;
      const Instruction &ins = p.instructions[size_t(i)];
      // (a pipeline's messages may be scheduled with the backward: a tied weight sent once a step)
      if ((ins.phase != "forward" || ins.recompute) && ins.op != "send" && ins.op != "recv")
        fail(path, "eval: instruction " + std::to_string(i) + " (" + ins.op + ") is not of the forward (phase '" +
                       ins.phase + "'" + (ins.recompute ? ", recomputed" : "") + ")");
      for (int64_t id : ins.in)
        if (!written[size_t(id)])
          fail(path, "eval: instruction " + std::to_string(i) + " (" + ins.op + ") reads buffer " + std::to_string(id) +
                         " '" + p.buffers[size_t(id)].name + "', which nothing of the evaluation writes before it");
      for (int64_t id : ins.out) written[size_t(id)] = 1;
    }
  }
  // The evaluation program's own plan (its placement is proven with the plan verifier on the
  // evaluation program: verifyProgram): the buffers it keeps, each inside its space's arena.
  if (p.evalPlan.present()) {
    const auto &ep = p.evalPlan;
    if (p.evalInstructions.empty()) fail(path, "eval.plan: a plan without eval instructions");
    if (ep.buffers.size() != ep.offsets.size())
      fail(path, "eval.plan: " + std::to_string(ep.buffers.size()) + " buffers but " +
                     std::to_string(ep.offsets.size()) + " offsets");
    for (const auto &[space, bytes] : ep.arenas) {
      if (!p.space(space)) fail(path, "eval.plan: arena of space '" + space + "', which the program does not have");
      if (bytes < 0) fail(path, "eval.plan: the '" + space + "' arena has " + std::to_string(bytes) + " bytes");
    }
    std::vector<char> kept(p.buffers.size(), 0);
    for (size_t k = 0; k < ep.buffers.size(); ++k) {
      const int64_t id = ep.buffers[k], off = ep.offsets[k];
      if (id < 0 || id >= int64_t(p.buffers.size()) || (k > 0 && id <= ep.buffers[k - 1]))
        fail(path, "eval.plan: buffer " + std::to_string(id) +
                       " is out of order or out of range (increasing ids below " + std::to_string(p.buffers.size()) +
                       ")");
      const Buffer &b = p.buffers[size_t(id)];
      auto arena = ep.arenas.find(b.space);
      if (arena == ep.arenas.end())
        fail(path, "eval.plan: buffer " + std::to_string(id) + " '" + b.name + "' is in space '" + b.space +
                       "', which has no arena in the plan");
      if (off < 0 || off % kAlignment != 0)
        fail(path, "eval.plan: buffer " + std::to_string(id) + " '" + b.name + "' at offset " + std::to_string(off) +
                       " (an offset must be a multiple of " + std::to_string(kAlignment) + ", >= 0)");
      if (off > arena->second - b.bytes)
        fail(path, "eval.plan: buffer " + std::to_string(id) + " '" + b.name + "': offset " + std::to_string(off) +
                       " + bytes " + std::to_string(b.bytes) + " lies outside the plan's '" + b.space + "' arena of " +
                       std::to_string(arena->second) + " bytes");
      kept[size_t(id)] = 1;
    }
    auto need = [&](int64_t id, const std::string &why) {
      if (id >= 0 && !kept[size_t(id)])
        fail(path, "eval.plan: buffer " + std::to_string(id) + " '" + p.buffers[size_t(id)].name + "' (" + why +
                       ") has no place in it");
    };
    for (int64_t i : p.evalInstructions) {
      for (int64_t id : p.instructions[size_t(i)].in) need(id, "read by instruction " + std::to_string(i));
      for (int64_t id : p.instructions[size_t(i)].out) need(id, "written by instruction " + std::to_string(i));
    }
    for (int64_t id : p.tokenInputs) need(id, "a token input");
    for (int64_t id : p.targetInputs) need(id, "a target input");
    for (const Buffer &b : p.buffers)
      if (b.role == "param" || b.role == "master") need(b.id, "a weight");
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
    const OpDef *sig = findOp(ins.op);
    if (!sig->inPlace) continue;
    for (int64_t o : ins.out)
      for (int64_t i : ins.in) {
        const Buffer &x = p.buffers[size_t(i)], &y = p.buffers[size_t(o)];
        if (x.space == y.space && x.offset == y.offset && x.bytes == y.bytes) group[root(size_t(i))] = root(size_t(o));
      }
  }
  auto interval = [&](const Buffer &b) {
    int64_t first = b.liveFirst, last = b.liveLast;
    for (int64_t id : p.tokenInputs)
      if (b.id == id) first = 0;
    for (int64_t id : p.targetInputs)
      if (b.id == id) first = 0;
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
                     std::to_string(ib.first) + ", " + std::to_string(ib.second) + "]) overlap in the '" + a.space +
                     "' arena while both are live");
    }
  }
}

} // namespace

void validateProgram(const Program &p, const std::string &path) {
  if (p.pp <= 1) {
    if (!p.stages.empty())
      fail(path, "pipeline: 'stages' holds " + std::to_string(p.stages.size()) + " payload(s), but config.mesh.pp is " +
                     std::to_string(p.pp) + " (one stage)");
    if (p.stage != 0)
      fail(path, "pipeline: stage " + std::to_string(p.stage) + " of a program whose config.mesh.pp is " +
                     std::to_string(p.pp));
    validateStage(p, path);
    return;
  }
  // Pipeline parallelism: P stage programs, each a program on its own, agreeing on the config.
  const int64_t P = p.pp;
  if (p.stage != 0)
    fail(path, "pipeline: the file's payload is stage 0, this one says stage " + std::to_string(p.stage));
  if (int64_t(p.stages.size()) != P - 1)
    fail(path, "pipeline: config.mesh.pp is " + std::to_string(P) + ", so 'stages' must hold the " +
                   std::to_string(P - 1) + " payload(s) of stages 1.." + std::to_string(P - 1) + ", it holds " +
                   std::to_string(p.stages.size()));
  static const std::set<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zero-bubble"};
  if (!schedules.count(p.ppSchedule))
    fail(path, "pipeline: unknown schedule '" + p.ppSchedule + "' (gpipe, 1f1b, interleaved or zero-bubble)");
  if (p.virtualStages < 1) fail(path, "pipeline: virtual_stages must be >= 1, is " + std::to_string(p.virtualStages));
  if (!p.ppSplit.empty()) {
    bool ok = int64_t(p.ppSplit.size()) == p.pp * p.virtualStages - 1;
    for (size_t i = 0; ok && i < p.ppSplit.size(); ++i) ok = p.ppSplit[i] > (i ? p.ppSplit[i - 1] : 0);
    if (!ok)
      fail(path,
           "pipeline: split must hold " + std::to_string(p.pp * p.virtualStages - 1) +
               " increasing layer numbers above 0 (the first layer of each stage or model chunk after the first)");
  }
  auto stagePath = [&](int64_t s) { return path + ": stage " + std::to_string(s); };
  for (int64_t s = 1; s < P; ++s) {
    const Program &q = p.stages[size_t(s - 1)];
    const std::string sp = stagePath(s);
    if (q.stage != s)
      fail(sp, "pipeline: stages[" + std::to_string(s - 1) + "] must be stage " + std::to_string(s) + ", says stage " +
                   std::to_string(q.stage));
    if (!q.stages.empty()) fail(sp, "pipeline: a stage's payload holds no 'stages' of its own");
    if (q.ppSchedule != p.ppSchedule || q.virtualStages != p.virtualStages)
      fail(sp, "pipeline: schedule '" + q.ppSchedule + "' with virtual_stages " + std::to_string(q.virtualStages) +
                   " differs from stage 0's '" + p.ppSchedule + "' with " + std::to_string(p.virtualStages));
    auto differs = [&](const char *what, const std::string &mine, const std::string &stage0) {
      if (mine != stage0)
        fail(sp, std::string("config: ") + what + " " + mine + " differs from stage 0's " + stage0 +
                     " (the stages of a pipeline share the config)");
    };
    auto str = [](int64_t x) { return std::to_string(x); };
    auto mesh = [](const Program &x) {
      return "dp " + std::to_string(x.dp) + " x tp " + std::to_string(x.tp) + " x pp " + std::to_string(x.pp);
    };
    auto opt = [](const Program &x) {
      const Optimizer &o = x.optimizer;
      char b[256];
      std::snprintf(b, sizeof b, "%s (lr %g, beta1 %g, beta2 %g, eps %g, weight_decay %g, grad_clip %g)",
                    o.kind.c_str(), o.lr, o.beta1, o.beta2, o.eps, o.weightDecay, o.gradClip);
      return std::string(b) + (o.schedule.present() ? ", " + describeSchedule(o) : std::string());
    };
    differs("batch", str(q.batch), str(p.batch));
    differs("seq", str(q.seq), str(p.seq));
    differs("vocab", str(q.vocab), str(p.vocab));
    differs("micro_batches", str(q.microBatches), str(p.microBatches));
    differs("ranks", str(q.ranks), str(p.ranks));
    differs("mesh", mesh(q), mesh(p));
    differs("zero", str(q.zero), str(p.zero));
    differs("precision", q.precision, p.precision);
    differs("optimizer", opt(q), opt(p));
  }
  for (int64_t s = 0; s < P; ++s) validateStage(p.stageProgram(s), stagePath(s));

  // Persistent buffers are whole tensors of the model, each held by one stage: names unique
  // across the stages (checkpoints and weights files name them).
  std::map<std::string, int64_t> owner;
  for (int64_t s = 0; s < P; ++s)
    for (const Buffer &b : p.stageProgram(s).buffers) {
      if (!b.persistent()) continue;
      auto [it, fresh] = owner.emplace(b.name, s);
      if (!fresh)
        fail(stagePath(s), "buffer " + std::to_string(b.id) + " ('" + b.name + "'): the name '" + b.name +
                               "' is used by a persistent buffer of stage " + std::to_string(it->second) +
                               " too (each weight and its state belong to one stage)");
    }
  // A tied weight's other names: of a weight the program has, and no name of its own.
  {
    std::set<std::string> seen;
    for (const auto &[name, list] : p.aliases) {
      if (!owner.count(name)) fail(path, "aliases: '" + name + "' is not a weight of the program");
      for (const std::string &a : list)
        if (a.empty() || owner.count(a) || !seen.insert(a).second)
          fail(path, "aliases of '" + name + "': '" + a + "' is empty, a name of the program's own, or listed twice");
    }
  }

  // The evaluation programs of the stages pair their messages as the step does: a send in one
  // stage's evaluation has its recv in the peer's, and the other way round.
  if (P > 1) {
    std::set<std::tuple<int64_t, int64_t, int64_t, bool>> ends; // from, to, tag, is a send
    for (int64_t s = 0; s < P; ++s)
      for (int64_t i : p.stageProgram(s).evalInstructions) {
        const Instruction &ins = p.stageProgram(s).instructions[size_t(i)];
        const int64_t peer = int64_t(ins.num("peer", -1)), tag = int64_t(ins.num("tag", -1));
        if (ins.op == "send") ends.insert({s, peer, tag, true});
        if (ins.op == "recv") ends.insert({peer, s, tag, false});
      }
    for (const auto &[from, to, tag, isSend] : ends)
      if (!ends.count({from, to, tag, !isSend}))
        fail(stagePath(isSend ? from : to), "eval: the " + std::string(isSend ? "send" : "recv") + " of tag " +
                                                std::to_string(tag) + " between stages " + std::to_string(from) +
                                                " and " + std::to_string(to) +
                                                " is in one stage's evaluation program and not in the other's");
  }
  // Every send has exactly one recv in its peer stage (from this stage, same tag) of the same
  // dtype and bytes, and the other way round; tags are unique per sender -> receiver pair.
  struct End {
    int64_t stage, index;
    const Instruction *ins;
    const Buffer *buf;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t>; // from, to, tag
  std::map<Key, End> sends, recvs;
  auto insWhere = [&](const End &e) {
    return "instruction " + std::to_string(e.index) + " (" + e.ins->op +
           (e.ins->loc.empty() ? std::string() : " at " + e.ins->loc) + ")";
  };
  auto valueOf = [](const End &e) {
    return std::string(dtypeName(e.buf->dtype)) + " " + shapeStr(e.buf->shape) + " (" + std::to_string(e.buf->bytes) +
           " bytes)";
  };
  for (int64_t s = 0; s < P; ++s) {
    const Program &q = p.stageProgram(s);
    for (size_t i = 0; i < q.instructions.size(); ++i) {
      const Instruction &ins = q.instructions[i];
      const bool isSend = ins.op == "send";
      if (!isSend && ins.op != "recv") continue;
      const int64_t peer = int64_t(ins.num("peer", -1)), tag = int64_t(ins.num("tag", -1));
      const End e{s, int64_t(i), &ins, &q.buffers[size_t(isSend ? ins.in[0] : ins.out[0])]};
      const Key k = isSend ? Key{s, peer, tag} : Key{peer, s, tag};
      auto [it, fresh] = (isSend ? sends : recvs).emplace(k, e);
      if (!fresh)
        fail(stagePath(s), insWhere(e) + ": tag " + std::to_string(tag) + (isSend ? " to" : " from") + " stage " +
                               std::to_string(peer) + " is used by instruction " + std::to_string(it->second.index) +
                               " too (a tag names one message per sender -> receiver pair)");
    }
  }
  for (const auto &[k, snd] : sends) {
    const auto [from, to, tag] = k;
    auto it = recvs.find(k);
    if (it == recvs.end())
      fail(stagePath(from), insWhere(snd) + ": sends tag " + std::to_string(tag) + " to stage " + std::to_string(to) +
                                ", which has no recv from stage " + std::to_string(from) + " with that tag");
    const End &rcv = it->second;
    if (snd.buf->dtype != rcv.buf->dtype || snd.buf->bytes != rcv.buf->bytes)
      fail(stagePath(to), insWhere(rcv) + ": receives " + valueOf(rcv) + " with tag " + std::to_string(tag) +
                              " from stage " + std::to_string(from) + ", whose " + insWhere(snd) + " sends " +
                              valueOf(snd) + " (a send and its recv move one dtype and byte count)");
  }
  for (const auto &[k, rcv] : recvs) {
    const auto [from, to, tag] = k;
    if (!sends.count(k))
      fail(stagePath(to), insWhere(rcv) + ": receives tag " + std::to_string(tag) + " from stage " +
                              std::to_string(from) + ", which has no send to stage " + std::to_string(to) +
                              " with that tag");
  }

  // Collectives over the pipeline axis (2): every stage runs the same ones in the same order (the
  // k-th of each stage meet).
  std::vector<std::vector<std::pair<size_t, const Instruction *>>> ppColl(static_cast<size_t>(P));
  for (int64_t s = 0; s < P; ++s) {
    const Program &q = p.stageProgram(s);
    for (size_t i = 0; i < q.instructions.size(); ++i) {
      const Instruction &ins = q.instructions[i];
      const OpDef *sig = findOp(ins.op);
      const bool collective =
          sig->kind == OpKind::AllReduce || sig->kind == OpKind::ReduceScatter || sig->kind == OpKind::AllGather;
      if (collective && ins.num("axis", 0) == 2) ppColl[size_t(s)].push_back({i, &ins});
    }
  }
  for (int64_t s = 1; s < P; ++s) {
    const auto &a = ppColl[0], &b = ppColl[size_t(s)];
    for (size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
      if (k >= b.size())
        fail(stagePath(s), std::to_string(b.size()) + " collective(s) over the pipeline axis (axis 2), stage 0 has " +
                               std::to_string(a.size()) + ": stage 0's instruction " + std::to_string(a[k].first) +
                               " (" + a[k].second->op +
                               ") has no partner here (every stage runs the same ones in "
                               "the same order)");
      if (k >= a.size())
        fail(stagePath(s), "instruction " + std::to_string(b[k].first) + " (" + b[k].second->op + "): collective " +
                               std::to_string(k) + " over the pipeline axis (axis 2), but stage 0 has only " +
                               std::to_string(a.size()) + " (every stage runs the same ones in the same order)");
      const Instruction &x = *a[k].second, &y = *b[k].second;
      if (x.op != y.op || x.num("reduce", 0) != y.num("reduce", 0) || x.in.size() != y.in.size())
        fail(stagePath(s), "instruction " + std::to_string(b[k].first) + " (" + y.op + "): collective " +
                               std::to_string(k) + " over the pipeline axis (axis 2) differs from stage 0's (" +
                               "instruction " + std::to_string(a[k].first) + ", " + x.op + " of " +
                               std::to_string(x.in.size()) + " tensor(s), reduce " +
                               std::to_string(int64_t(x.num("reduce", 0))) + ")");
      for (size_t t = 0; t < x.in.size(); ++t) {
        const Buffer &bx = p.buffers[size_t(x.in[t])], &by = p.stages[size_t(s - 1)].buffers[size_t(y.in[t])];
        if (bx.dtype != by.dtype || bx.numel() != by.numel())
          fail(stagePath(s), "instruction " + std::to_string(b[k].first) + " (" + y.op + "): input " +
                                 std::to_string(t) + " is " + dtypeName(by.dtype) + " of " +
                                 std::to_string(by.numel()) + " elements, stage 0's collective " + std::to_string(k) +
                                 " over the pipeline axis has " + dtypeName(bx.dtype) + " of " +
                                 std::to_string(bx.numel()));
      }
    }
  }
}

} // namespace bigc::format
