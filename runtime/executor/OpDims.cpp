// Decoding of instructions into kernel sizes, and the optimizer's instructions on host memory.
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/kernels.h"
#include "bigc/Runtime/loss_scale.h"

#include <algorithm>
#include <cmath>

namespace bigc::rt {

namespace {
int64_t prodRange(const std::vector<int64_t> &s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}
} // namespace

OpDims decodeOp(const Program &p, const Instruction &ins, OpKind kind) {
  OpDims d;
  auto in = [&](size_t k) -> const Buffer & { return p.buffers[size_t(ins.in[k])]; };
  auto out = [&](size_t k) -> const Buffer & { return p.buffers[size_t(ins.out[k])]; };
  switch (kind) {
  case OpKind::Embedding:
    d.V = in(0).shape[0], d.C = in(0).shape[1], d.n = in(1).numel();
    d.vocabParallel = ins.num("vocab_axis", 0) == 1;
    d.vocab = d.vocabParallel ? d.V * p.tp : d.V;
    d.classes = int64_t(ins.num("classes", 0)); // a padded table: ids from here on are no tokens
    break;
  case OpKind::EmbeddingGrad:
    d.V = out(0).shape[0], d.C = out(0).shape[1], d.n = in(1).numel();
    d.vocabParallel = ins.num("vocab_axis", 0) == 1;
    d.vocab = d.vocabParallel ? d.V * p.tp : d.V;
    d.classes = int64_t(ins.num("classes", 0));
    break;
  case OpKind::Matmul: {
    const auto &a = in(0).shape, &b = in(1).shape;
    size_t ra = a.size(), rb = b.size();
    d.ta = ins.flag("transpose_a"), d.tb = ins.flag("transpose_b");
    d.N = d.tb ? b[rb - 2] : b[rb - 1];
    d.K = d.tb ? b[rb - 1] : b[rb - 2];
    if (ra > 2 && rb == 2) { // linear layer: flatten a's leading dims
      d.batch = 1;
      d.M = prodRange(a, 0, ra - 1);
    } else {
      d.batch = prodRange(a, 0, ra - 2);
      d.M = d.ta ? a[ra - 1] : a[ra - 2];
      if (d.batch > 1) d.sA = d.M * d.K, d.sB = d.K * d.N, d.sC = d.M * d.N;
    }
    break;
  }
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Scale:
  case OpKind::Gelu:
  case OpKind::GeluGrad:
  case OpKind::Silu:
  case OpKind::SiluGrad:
  case OpKind::Swiglu:
  case OpKind::SwigluGrad:
  case OpKind::Fill:
    d.n = out(0).numel();
    d.value = float(ins.num(kind == OpKind::Scale ? "factor" : "value", kind == OpKind::Scale ? 1.0 : 0.0));
    d.exact = ins.flag("exact");
    break;
  case OpKind::RmsNorm:
  case OpKind::RmsNormGrad: {
    const Buffer &x = kind == OpKind::RmsNorm ? in(0) : in(1);
    d.C = x.shape.back();
    d.N = d.C ? x.numel() / d.C : 0;
    d.value = float(ins.num("eps", 1e-6));
    break;
  }
  case OpKind::Rope: {
    const Buffer &x = in(0);
    d.B = x.shape[0], d.T = x.shape[1], d.C = x.shape[2];
    d.headDim = int64_t(ins.num("head_dim", 2));
    for (double f : ins.reals("inv_freq")) d.invFreq.push_back(float(f));
    d.scale = float(ins.num("attention_scaling", 1.0));
    d.inverse = ins.flag("inverse");
    break;
  }
  case OpKind::GqaAttention:
  case OpKind::GqaAttentionGrad: {
    const Buffer &q = kind == OpKind::GqaAttention ? in(0) : in(1);
    d.B = q.shape[0], d.T = q.shape[1], d.H = int64_t(ins.num("heads", 1));
    d.Hkv = int64_t(ins.num("kv_heads", 1));
    d.headDim = q.shape[2] / std::max<int64_t>(1, d.H);
    d.window = int64_t(ins.num("window", 0));
    const double sc = ins.num("scale", 0.0);
    d.scale = float(sc > 0 ? sc : 1.0 / std::sqrt(double(d.headDim)));
    d.tpHeads = ins.flag("tp_heads");
    d.group = std::max<int64_t>(1, (d.H * (d.tpHeads ? p.tp : 1)) / std::max<int64_t>(1, d.Hkv));
    break;
  }
  case OpKind::BiasAdd:
    d.cols = in(1).numel();
    d.rows = d.cols ? in(0).numel() / d.cols : 0;
    break;
  case OpKind::ReduceSum:
    d.cols = out(0).numel();
    d.rows = d.cols ? in(0).numel() / d.cols : 0;
    break;
  case OpKind::BiasGelu:
    d.cols = in(1).numel();
    d.n = in(0).numel();
    d.rows = d.cols ? d.n / d.cols : 0;
    d.exact = ins.flag("exact");
    break;
  case OpKind::GeluGradBias:
    d.cols = out(1).numel();
    d.n = in(0).numel();
    d.rows = d.cols ? d.n / d.cols : 0;
    d.exact = ins.flag("exact");
    break;
  case OpKind::AddRmsNorm:
  case OpKind::RmsNormGradAdd: {
    const Buffer &x = kind == OpKind::AddRmsNorm ? in(0) : in(1);
    d.C = x.shape.back();
    d.N = d.C ? x.numel() / d.C : 0;
    d.value = float(ins.num("eps", 1e-6));
    break;
  }
  case OpKind::Layernorm:
  case OpKind::LayernormGrad:
  case OpKind::AddLayernorm:
  case OpKind::LayernormGradAdd: {
    const Buffer &x = kind == OpKind::Layernorm || kind == OpKind::AddLayernorm ? in(0) : in(1);
    d.C = x.shape.back();
    d.N = d.C ? x.numel() / d.C : 0;
    d.value = float(ins.num("eps", 1e-5));
    break;
  }
  case OpKind::Attention:
  case OpKind::AttentionGrad: {
    const Buffer &qkv = kind == OpKind::Attention ? in(0) : in(1);
    d.B = qkv.shape[0], d.T = qkv.shape[1], d.C = qkv.shape[2] / 3, d.H = int64_t(ins.num("heads", 1));
    break;
  }
  case OpKind::Transpose:
    d.shape = in(0).shape;
    d.perm = ins.ints("perm");
    break;
  case OpKind::Reshape: d.n = in(0).bytes; break;
  case OpKind::Copy:
    d.n = in(0).bytes;
    if (ins.attrs.count("count")) { // a range (bigc-offload-nvme's chunks), in bytes here
      const int64_t size = int64_t(dtypeSize(in(0).dtype));
      d.n = int64_t(ins.num("count", 0)) * size;
      d.inOffset = int64_t(ins.num("in_offset", 0)) * size;
      d.outOffset = int64_t(ins.num("out_offset", 0)) * size;
    }
    break;
  case OpKind::Split:
  case OpKind::Concat: {
    bool split = kind == OpKind::Split;
    const Buffer &whole = split ? in(0) : out(0);
    int64_t parts = int64_t(split ? ins.out.size() : ins.in.size());
    int64_t ax = int64_t(ins.num("axis", 0));
    if (ax < 0) ax += int64_t(whole.shape.size());
    d.rows = prodRange(whole.shape, 0, size_t(ax));
    d.cols = whole.shape[size_t(ax)] / parts * prodRange(whole.shape, size_t(ax) + 1, whole.shape.size());
    d.n = parts;
    break;
  }
  case OpKind::CrossEntropy:
  case OpKind::CrossEntropyGrad:
  case OpKind::VocabCeStats:
    d.classes = int64_t(ins.num("classes", 0));
    d.V = in(0).shape.back();
    d.N = d.V ? in(0).numel() / d.V : 0;
    d.vocabParallel = true, d.vocab = d.V * p.tp;
    break;
  case OpKind::VocabCeStatsGrad:
    d.classes = int64_t(ins.num("classes", 0));
    d.V = in(1).shape.back();
    d.N = d.V ? in(1).numel() / d.V : 0;
    d.vocabParallel = true, d.vocab = d.V * p.tp;
    break;
  case OpKind::LinearCeStats:
  case OpKind::LinearCeStatsGrad: { // h [N,C] @ op(w) -> V columns, n at a time
    const bool fwd = kind == OpKind::LinearCeStats;
    const Buffer &h = in(fwd ? 0 : 1), &w = in(fwd ? 1 : 2);
    d.tb = ins.flag("transpose_b");
    d.C = h.shape.back();
    d.N = d.C ? h.numel() / d.C : 0;
    d.V = d.tb ? w.shape[0] : w.shape[1];
    d.n = std::min<int64_t>(int64_t(ins.num("chunk", 1)), d.V);
    d.vocabParallel = ins.num("vocab_axis", 0) == 1;
    d.vocab = d.vocabParallel ? d.V * p.tp : d.V;
    d.classes = int64_t(ins.num("classes", 0));
    break;
  }
  case OpKind::VocabCeLoss:
  case OpKind::VocabCeLossGrad: // n parts of N positions
    d.n = int64_t(ins.num("parts", 1));
    d.N = in(0).numel() / 2 / std::max<int64_t>(1, d.n);
    break;
  case OpKind::TpSlice: {
    const auto &x = in(0).shape;
    const int64_t dim = int64_t(ins.num("dim", 0));
    d.sliceRun = int64_t(dtypeSize(in(0).dtype));
    for (int64_t k = 0; k < int64_t(x.size()); ++k)
      if (k < dim)
        d.slicePre *= x[size_t(k)];
      else if (k > dim)
        d.sliceRun *= x[size_t(k)];
    d.rows = x[size_t(dim)] / std::max<int64_t>(1, p.tp); // rows of the chunk
    d.cols = x[size_t(dim)];
    break;
  }
  case OpKind::GlobalNorm:
  case OpKind::CheckFinite:
  case OpKind::Wait:
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather: break;
  case OpKind::Cast: d.n = in(0).numel(); break;
  case OpKind::Send:
  case OpKind::Recv:
    d.n = kind == OpKind::Send ? in(0).bytes : out(0).bytes;
    d.peer = int64_t(ins.num("peer", -1)), d.tag = int64_t(ins.num("tag", -1));
    break;
  case OpKind::AdamW: {
    const Optimizer &o = p.optimizer;
    d.n = in(0).numel();
    if (ins.attrs.count("count")) { // a chunk: elements [offset, offset + count) of the gradient
      d.n = int64_t(ins.num("count", 0));
      d.gradOffset = int64_t(ins.num("offset", 0));
      if (ins.flag("write_half") && out(3).numel() == in(1).numel()) d.halfOffset = d.gradOffset;
    }
    d.baseLr = ins.num("lr", o.lr);
    d.adam.lr = float(d.baseLr);
    d.adam.beta1 = float(ins.num("beta1", o.beta1));
    d.adam.beta2 = float(ins.num("beta2", o.beta2));
    d.adam.eps = float(ins.num("eps", o.eps));
    d.adam.weightDecay = float(ins.num("weight_decay", o.weightDecay));
    d.adam.gradScale = 1.0f;
    d.maxNorm = ins.num("max_norm", o.gradClip);
    d.clip = ins.flag("clip"), d.unscale = ins.flag("unscale"), d.skip = ins.flag("skip_on_overflow");
    d.writeHalf = ins.flag("write_half");
    int k = 4;
    if (d.clip) d.iNorm = k++;
    if (d.unscale) d.iScale = k++;
    if (d.skip) d.iFound = k++;
    break;
  }
  case OpKind::LossScaleUpdate:
    d.growthInterval = ins.num("growth_interval", 2000);
    d.backoff = ins.num("backoff", 0.5);
    d.growth = ins.num("growth", 2.0);
    break;
  }
  return d;
}

bool runOptimizerOpOnHost(OpKind kind, const OpDims &d, const std::vector<void *> &in, const std::vector<void *> &out,
                          const std::vector<DType> &inT, const std::vector<DType> &outT,
                          const std::vector<int64_t> &inN, int64_t updates, float lr) {
  auto scalar = [&](size_t k) { return *static_cast<const float *>(in[k]); };
  switch (kind) {
  case OpKind::AdamW: {
    double inv = 1.0;
    if (d.unscale) inv = 1.0 / double(scalar(size_t(d.iScale)));
    // A chunk of an update: its elements of the gradient (and of a whole half).
    const void *grad = static_cast<const char *>(in[1]) + d.gradOffset * int64_t(dtypeSize(inT[1]));
    void *half = d.writeHalf ? static_cast<char *>(out[3]) + d.halfOffset * int64_t(dtypeSize(outT[3])) : nullptr;
    if (d.skip && scalar(size_t(d.iFound)) != 0.0f) { // overflow: the weights and moments stay as they are,
      if (d.writeHalf) convert(out[0], DType::F32, half, outT[3], d.n); // and half is (again) cast(param)
      return true;
    }
    double c = 1.0;
    if (d.clip && d.maxNorm > 0.0) {
      double norm = double(scalar(size_t(d.iNorm))) * inv;
      c = std::min(1.0, d.maxNorm / (norm + 1e-6));
    }
    CpuAdamArgs a = d.adam;
    a.lr = lr;
    a.gradScale = float(c * inv);
    a.step = updates + 1;
    cpuAdamWStates(static_cast<float *>(out[0]), grad, inT[1], out[1], out[2], outT[1], half,
                   d.writeHalf ? outT[3] : DType::F32, d.n, a);
    return true;
  }
  case OpKind::CheckFinite: {
    bool bad = false;
    for (size_t k = 0; k < in.size() && !bad; ++k) bad = anyNonFinite(in[k], inT[k], inN[k]);
    *static_cast<float *>(out[0]) = bad ? 1.0f : 0.0f;
    return true;
  }
  case OpKind::GlobalNorm: {
    double s = 0.0;
    for (size_t k = 0; k < in.size(); ++k)
      s += inT[k] == DType::F32 ? cpu::sumSquares(static_cast<const float *>(in[k]), inN[k])
                                : sumSquaresAs32(in[k], inT[k], inN[k]);
    *static_cast<float *>(out[0]) = float(std::sqrt(s));
    return true;
  }
  case OpKind::LossScaleUpdate:
    lossScaleUpdate(scalar(0), static_cast<float *>(out[0]), static_cast<float *>(out[1]), d.backoff, d.growth,
                    d.growthInterval);
    return true;
  default: return false;
  }
}

bool handlesOwnDtypes(OpKind k) {
  switch (k) {
  case OpKind::Cast:
  case OpKind::Copy:
  case OpKind::Reshape:
  case OpKind::Wait:
  case OpKind::CheckFinite:
  case OpKind::GlobalNorm:
  case OpKind::AdamW:
  case OpKind::LossScaleUpdate:
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::Send:
  case OpKind::Recv: return true;
  default: return false;
  }
}

} // namespace bigc::rt
