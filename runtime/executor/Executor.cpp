// The executor: arenas, buffer placement, initialisation, and the instruction loop (CPU backend).
#include "bigc/runtime/executor.h"
#include "bigc/runtime/kernels.h"
#include "bigc/runtime/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace bigc::rt {

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name) {
  uint64_t state = seed ^ fnv1a64(name.data(), name.size());
  const double twoPi = 6.283185307179586476925286766559;
  const double inv53 = 1.0 / 9007199254740992.0; // 2^-53
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = double((splitmix64(state) >> 11) + 1) * inv53;
    double u2 = double(splitmix64(state) >> 11) * inv53;
    double r = std::sqrt(-2.0 * std::log(u1));
    x[i] = float(std * r * std::cos(twoPi * u2));
    if (i + 1 < n) x[i + 1] = float(std * r * std::sin(twoPi * u2));
  }
}

struct Executor::Op {
  OpKind kind;
  size_t index = 0;
  const Instruction *ins = nullptr;
  std::vector<void *> in, out;
  std::vector<int64_t> inBytes, outBytes;
  // Decoded dimensions (meaning per op, see prepare()).
  int64_t n = 0, rows = 0, cols = 0, V = 0, C = 0, B = 0, T = 0, H = 0;
  int64_t batch = 1, M = 0, N = 0, K = 0, sA = 0, sB = 0, sC = 0;
  bool ta = false, tb = false;
  float value = 0.f;
  std::vector<int64_t> shape, perm;
  std::vector<float *> parts;
  std::vector<const float *> cparts;
  cpu::AdamWParams adam{};
  double maxNorm = 0.0;
};

namespace {
int64_t prodRange(const std::vector<int64_t> &s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}
std::string human(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
} // namespace

Executor::Executor(Program program, uint64_t seed) : prog_(std::move(program)) {
  if (prog_.precision != "fp32" || prog_.ranks != 1 || prog_.microBatches != 1)
    throw UserError("this runtime runs fp32 programs of one rank and one micro-batch; this program is " +
                    prog_.precision + " with " + std::to_string(prog_.ranks) + " rank(s) and " +
                    std::to_string(prog_.microBatches) + " micro-batch(es)");
  int64_t total = 0;
  for (const auto &s : prog_.spaces) total += s.arenaBytes;
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0) {
    int64_t phys = int64_t(pages) * int64_t(pageSize);
    for (const auto &s : prog_.spaces)
      if (s.arenaBytes > phys)
        throw UserError("the '" + s.name + "' arena needs " + std::to_string(s.arenaBytes) + " bytes (" +
                        human(s.arenaBytes) + ") but this machine has " + human(phys) +
                        " of memory; compile for a smaller model or batch, or run on a larger machine");
    if (total > phys)
      throw UserError("the arenas need " + std::to_string(total) + " bytes (" + human(total) +
                      ") together but this machine has " + human(phys) + " of memory");
  }
  for (size_t i = 0; i < prog_.spaces.size(); ++i) {
    const Space &s = prog_.spaces[i];
    size_t bytes = size_t((std::max<int64_t>(s.arenaBytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
    void *p = std::aligned_alloc(size_t(kAlignment), bytes);
    if (!p) {
      for (void *a : arenas_) std::free(a);
      throw UserError("cannot allocate the '" + s.name + "' arena of " + std::to_string(s.arenaBytes) + " bytes (" +
                      human(s.arenaBytes) + ")");
    }
    std::memset(p, 0, bytes);
    arenas_.push_back(p);
    arenaIndex_[s.name] = int64_t(i);
  }
  ptrs_.resize(prog_.buffers.size());
  for (const auto &b : prog_.buffers)
    ptrs_[size_t(b.id)] = static_cast<char *>(arenas_[size_t(arenaIndex_.at(b.space))]) + b.offset;
  prepare();
  initialize(seed);
}

Executor::~Executor() {
  for (void *a : arenas_) std::free(a);
}

void Executor::initialize(uint64_t seed) {
  for (const auto &b : prog_.buffers) {
    if (!b.persistent()) continue;
    float *x = f32(b.id);
    int64_t n = b.numel();
    if (b.init.kind == "normal") initNormal(x, n, b.init.std, seed, b.name);
    else if (b.init.kind == "ones") std::fill(x, x + n, 1.0f);
    else std::fill(x, x + n, 0.0f);
  }
  step_ = 0;
}

const Buffer *Executor::findPersistent(const std::string &name) const {
  for (const auto &b : prog_.buffers)
    if (b.persistent() && b.name == name) return &b;
  return nullptr;
}

std::vector<const Buffer *> Executor::params() const {
  std::vector<const Buffer *> out;
  for (const auto &b : prog_.buffers)
    if (b.role == "param") out.push_back(&b);
  return out;
}

std::map<std::string, int64_t> Executor::arenaBytes() const {
  std::map<std::string, int64_t> out;
  for (const auto &s : prog_.spaces) out[s.name] = s.arenaBytes;
  return out;
}

void Executor::enableGradCapture() {
  capture_ = true;
  captureDst_.assign(ops_.size(), nullptr);
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op &op = ops_[i];
    if (op.kind != OpKind::AdamW) continue;
    const Buffer &param = prog_.buffers[size_t(op.ins->in[0])];
    auto &dst = grads_[param.name];
    dst.assign(size_t(param.numel()), 0.0f);
    captureDst_[i] = dst.data();
  }
}

void Executor::prepare() {
  ops_.clear();
  ops_.reserve(prog_.instructions.size());
  for (size_t i = 0; i < prog_.instructions.size(); ++i) {
    const Instruction &ins = prog_.instructions[i];
    const OpSignature *sig = findOpSignature(ins.op);
    if (!sig) throw UserError("instruction " + std::to_string(i) + ": unknown op '" + ins.op + "'");
    Op op;
    op.kind = sig->kind;
    op.index = i;
    op.ins = &ins;
    for (int64_t id : ins.in) op.in.push_back(ptrs_[size_t(id)]), op.inBytes.push_back(prog_.buffers[size_t(id)].bytes);
    for (int64_t id : ins.out)
      op.out.push_back(ptrs_[size_t(id)]), op.outBytes.push_back(prog_.buffers[size_t(id)].bytes);
    auto in = [&](size_t k) -> const Buffer & { return prog_.buffers[size_t(ins.in[k])]; };
    auto out = [&](size_t k) -> const Buffer & { return prog_.buffers[size_t(ins.out[k])]; };
    switch (op.kind) {
    case OpKind::Embedding:
      op.V = in(0).shape[0], op.C = in(0).shape[1], op.n = in(1).numel();
      break;
    case OpKind::EmbeddingGrad:
      op.V = out(0).shape[0], op.C = out(0).shape[1], op.n = in(1).numel();
      break;
    case OpKind::Matmul: {
      const auto &a = in(0).shape, &b = in(1).shape;
      size_t ra = a.size(), rb = b.size();
      op.ta = ins.flag("transpose_a"), op.tb = ins.flag("transpose_b");
      op.N = op.tb ? b[rb - 2] : b[rb - 1];
      op.K = op.tb ? b[rb - 1] : b[rb - 2];
      if (ra > 2 && rb == 2) { // linear layer: flatten a's leading dims
        op.batch = 1;
        op.M = prodRange(a, 0, ra - 1);
      } else {
        op.batch = prodRange(a, 0, ra - 2);
        op.M = op.ta ? a[ra - 1] : a[ra - 2];
        if (op.batch > 1) op.sA = op.M * op.K, op.sB = op.K * op.N, op.sC = op.M * op.N;
      }
      break;
    }
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::Scale:
    case OpKind::Gelu:
    case OpKind::GeluGrad:
    case OpKind::Fill:
      op.n = out(0).numel();
      op.value = float(ins.num(op.kind == OpKind::Scale ? "factor" : "value", op.kind == OpKind::Scale ? 1.0 : 0.0));
      break;
    case OpKind::BiasAdd:
      op.cols = in(1).numel();
      op.rows = op.cols ? in(0).numel() / op.cols : 0;
      break;
    case OpKind::ReduceSum:
      op.cols = out(0).numel();
      op.rows = op.cols ? in(0).numel() / op.cols : 0;
      break;
    case OpKind::Layernorm:
    case OpKind::LayernormGrad: {
      const Buffer &x = op.kind == OpKind::Layernorm ? in(0) : in(1);
      op.C = x.shape.back();
      op.N = op.C ? x.numel() / op.C : 0;
      op.value = float(ins.num("eps", 1e-5));
      break;
    }
    case OpKind::Attention:
    case OpKind::AttentionGrad: {
      const Buffer &qkv = op.kind == OpKind::Attention ? in(0) : in(1);
      op.B = qkv.shape[0], op.T = qkv.shape[1], op.C = qkv.shape[2] / 3, op.H = int64_t(ins.num("heads", 1));
      break;
    }
    case OpKind::Transpose:
      op.shape = in(0).shape;
      op.perm = ins.ints("perm");
      break;
    case OpKind::Reshape:
      op.n = in(0).bytes;
      break;
    case OpKind::Split:
    case OpKind::Concat: {
      bool split = op.kind == OpKind::Split;
      const Buffer &whole = split ? in(0) : out(0);
      int64_t parts = int64_t(split ? ins.out.size() : ins.in.size());
      int64_t ax = int64_t(ins.num("axis", 0));
      if (ax < 0) ax += int64_t(whole.shape.size());
      op.rows = prodRange(whole.shape, 0, size_t(ax));
      op.cols = whole.shape[size_t(ax)] / parts * prodRange(whole.shape, size_t(ax) + 1, whole.shape.size());
      op.n = parts;
      if (split)
        for (void *p : op.out) op.parts.push_back(static_cast<float *>(p));
      else
        for (void *p : op.in) op.cparts.push_back(static_cast<const float *>(p));
      break;
    }
    case OpKind::CrossEntropy:
    case OpKind::CrossEntropyGrad:
      op.V = in(0).shape.back();
      op.N = op.V ? in(0).numel() / op.V : 0;
      break;
    case OpKind::GlobalNorm:
      break;
    case OpKind::AdamW: {
      const Optimizer &o = prog_.optimizer;
      op.n = in(0).numel();
      op.adam.lr = float(ins.num("lr", o.lr));
      op.adam.beta1 = float(ins.num("beta1", o.beta1));
      op.adam.beta2 = float(ins.num("beta2", o.beta2));
      op.adam.eps = float(ins.num("eps", o.eps));
      op.adam.weightDecay = float(ins.num("weight_decay", o.weightDecay));
      op.adam.gradScale = 1.0f;
      op.maxNorm = ins.num("max_norm", o.gradClip);
      break;
    }
    }
    ops_.push_back(std::move(op));
  }
  captureDst_.assign(ops_.size(), nullptr);
}

void Executor::runtimeError(const Op &op, const std::string &msg) const {
  std::string where = "step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                      op.ins->op + (op.ins->loc.empty() ? std::string() : " at " + op.ins->loc) + ")";
  throw UserError(where + ": " + msg);
}

float Executor::step(const int32_t *tokens, const int32_t *targets) {
  ++step_;
  const int64_t bt = prog_.batch * prog_.seq;
  std::memcpy(ptrs_[size_t(prog_.tokens)], tokens, size_t(bt) * sizeof(int32_t));
  std::memcpy(ptrs_[size_t(prog_.targets)], targets, size_t(bt) * sizeof(int32_t));

  for (size_t i = 0; i < ops_.size(); ++i) {
    Op &op = ops_[i];
    auto fi = [&](size_t k) { return static_cast<const float *>(op.in[k]); };
    auto fo = [&](size_t k) { return static_cast<float *>(op.out[k]); };
    auto ii = [&](size_t k) { return static_cast<const int32_t *>(op.in[k]); };
    switch (op.kind) {
    case OpKind::Embedding: {
      int64_t bad = cpu::embedding(fi(0), ii(1), fo(0), op.n, op.V, op.C);
      if (bad >= 0)
        runtimeError(op, "token id " + std::to_string(ii(1)[bad]) + " at position " + std::to_string(bad) +
                             " is outside the embedding table [0, " + std::to_string(op.V) + ")");
      break;
    }
    case OpKind::EmbeddingGrad:
      for (int64_t k = 0; k < op.n; ++k)
        if (ii(1)[k] < 0 || ii(1)[k] >= op.V)
          runtimeError(op, "token id " + std::to_string(ii(1)[k]) + " at position " + std::to_string(k) +
                               " is outside the embedding table [0, " + std::to_string(op.V) + ")");
      cpu::embeddingGrad(fi(0), ii(1), fo(0), op.n, op.V, op.C);
      break;
    case OpKind::Matmul:
      cpu::matmul(fi(0), fi(1), fo(0), op.batch, op.M, op.N, op.K, op.ta, op.tb, op.sA, op.sB, op.sC);
      break;
    case OpKind::Add: cpu::add(fi(0), fi(1), fo(0), op.n); break;
    case OpKind::BiasAdd: cpu::biasAdd(fi(0), fi(1), fo(0), op.rows, op.cols); break;
    case OpKind::Mul: cpu::mul(fi(0), fi(1), fo(0), op.n); break;
    case OpKind::Scale: cpu::scale(fi(0), fo(0), op.value, op.n); break;
    case OpKind::ReduceSum: cpu::reduceSum(fi(0), fo(0), op.rows, op.cols); break;
    case OpKind::Fill: cpu::fill(fo(0), op.value, op.n); break;
    case OpKind::Layernorm:
      cpu::layernorm(fi(0), fi(1), fi(2), fo(0), fo(1), fo(2), op.N, op.C, op.value);
      break;
    case OpKind::LayernormGrad:
      cpu::layernormGrad(fi(0), fi(1), fi(2), fi(3), fi(4), fo(0), fo(1), fo(2), op.N, op.C);
      break;
    case OpKind::Gelu: cpu::gelu(fi(0), fo(0), op.n); break;
    case OpKind::GeluGrad: cpu::geluGrad(fi(0), fi(1), fo(0), op.n); break;
    case OpKind::Attention: cpu::attention(fi(0), fo(0), fo(1), op.B, op.T, op.C, op.H); break;
    case OpKind::AttentionGrad:
      cpu::attentionGrad(fi(0), fi(1), fi(2), fi(3), fo(0), op.B, op.T, op.C, op.H);
      break;
    case OpKind::Transpose:
      cpu::transpose(fi(0), fo(0), op.shape.data(), op.perm.data(), int(op.shape.size()));
      break;
    case OpKind::Reshape:
      if (op.in[0] != op.out[0]) std::memmove(op.out[0], op.in[0], size_t(op.n));
      break;
    case OpKind::Split: cpu::split(fi(0), op.parts.data(), op.rows, op.cols, op.n); break;
    case OpKind::Concat: cpu::concat(op.cparts.data(), fo(0), op.rows, op.cols, op.n); break;
    case OpKind::CrossEntropy: {
      int64_t bad = -1;
      float loss = cpu::crossEntropy(fi(0), ii(1), op.N, op.V, &bad);
      if (bad >= 0)
        runtimeError(op, "target id " + std::to_string(ii(1)[bad]) + " at position " + std::to_string(bad) +
                             " is outside the vocabulary [0, " + std::to_string(op.V) + ")");
      *fo(0) = loss;
      break;
    }
    case OpKind::CrossEntropyGrad:
      cpu::crossEntropyGrad(fi(0), ii(1), *fi(2), fo(0), op.N, op.V);
      break;
    case OpKind::GlobalNorm: {
      double s = 0.0;
      for (size_t k = 0; k < op.in.size(); ++k) s += cpu::sumSquares(fi(k), op.inBytes[k] / 4);
      *fo(0) = float(std::sqrt(s));
      break;
    }
    case OpKind::AdamW: {
      if (captureDst_[i]) std::memcpy(captureDst_[i], op.in[1], size_t(op.inBytes[1]));
      cpu::AdamWParams p = op.adam;
      p.step = step_;
      p.gradScale = 1.0f;
      if (op.in.size() == 5 && op.maxNorm > 0.0) {
        double norm = *fi(4);
        p.gradScale = float(std::min(1.0, op.maxNorm / (norm + 1e-6)));
      }
      cpu::adamw(fo(0), fi(1), fo(1), fo(2), op.n, p);
      break;
    }
    }
  }
  return *static_cast<const float *>(ptrs_[size_t(prog_.loss)]);
}

} // namespace bigc::rt
