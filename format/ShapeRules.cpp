// The shape rules of the instructions (docs/program-format.md, "Instructions"): what each op's
// operands must look like, checked by the validator one instruction at a time. No MLIR here.
#include "Checks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace bigc::format::detail {

void InstructionCheck::shapes(const OpSignature &sig) const {
  switch (sig.kind) {
  case OpKind::Embedding: {
    const Buffer &t = in(0), &ids = in(1), &y = out(0);
    if (t.shape.size() != 2) bad("table must be [V,C], " + desc(t) + " is not");
    classesWithin(t.shape[0] * (ins->num("vocab_axis", 0) == 1 ? p.tp : 1));
    auto want = ids.shape;
    want.push_back(t.shape[1]);
    wantShape(y, want, "output");
    break;
  }
  case OpKind::EmbeddingGrad: {
    const Buffer &dy = in(0), &ids = in(1), &dt = out(0);
    if (dt.shape.size() != 2) bad("dtable must be [V,C], " + desc(dt) + " is not");
    classesWithin(dt.shape[0] * (ins->num("vocab_axis", 0) == 1 ? p.tp : 1));
    auto want = ids.shape;
    want.push_back(dt.shape[1]);
    wantShape(dy, want, "dy");
    break;
  }
  case OpKind::Matmul: {
    const Buffer &a = in(0), &b = in(1), &c = out(0);
    bool ta = ins->flag("transpose_a"), tb = ins->flag("transpose_b");
    size_t ra = a.shape.size(), rb = b.shape.size();
    if (ra < 2 || rb < 2) bad("matmul operands must have rank >= 2: " + desc(a) + " @ " + desc(b));
    std::vector<int64_t> want;
    if (ra == 2 && rb == 2) {
    } else if (ra > 2 && rb == 2) {
      if (ta)
        bad("matmul shape: transpose_a is not allowed when a has rank > 2 and b rank 2 (" + desc(a) + " @ " + desc(b) +
            ")");
    } else if (ra == rb) {
      if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
        bad("batched matmul shape mismatch: leading dimensions differ: " + desc(a) + " @ " + desc(b));
    } else {
      bad("matmul shape: unsupported ranks " + std::to_string(ra) + " and " + std::to_string(rb) + " (" + desc(a) +
          " @ " + desc(b) + "); allowed: 2@2, N@2, N@N with equal leading dims");
    }
    int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
    int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
    int64_t K2 = tb ? b.shape[rb - 1] : b.shape[rb - 2];
    int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
    if (K != K2)
      bad("matmul shape mismatch: inner dimensions " + std::to_string(K) + " and " + std::to_string(K2) + " differ (" +
          desc(a) + (ta ? "ᵀ" : "") + " @ " + desc(b) + (tb ? "ᵀ" : "") + ")");
    want.assign(a.shape.begin(), a.shape.end() - 2);
    want.push_back(M);
    want.push_back(N);
    if (c.shape != want) bad("matmul shape mismatch: output must be " + shapeStr(want) + ", " + desc(c) + " is not");
    break;
  }
  case OpKind::Add:
  case OpKind::Mul:
    sameShape(in(0), in(1), "inputs");
    sameShape(in(0), out(0), "output");
    break;
  case OpKind::BiasAdd:
    if (!isSuffix(in(1).shape, in(0).shape)) bad("bias " + desc(in(1)) + " must be a suffix of x " + desc(in(0)));
    sameShape(in(0), out(0), "output");
    break;
  case OpKind::Scale:
  case OpKind::Gelu:
  case OpKind::Silu: sameShape(in(0), out(0), "output"); break;
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
    if (!tpHeads && H % Hkv != 0)
      bad("kv_heads = " + std::to_string(Hkv) + " does not divide heads = " + std::to_string(H));
    if (tpHeads && (H * p.tp) % Hkv != 0)
      bad("kv_heads = " + std::to_string(Hkv) + " does not divide the " + std::to_string(H * p.tp) +
          " heads of all tensor ranks");
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
    if (!isSuffix(out(0).shape, in(0).shape)) bad("output " + desc(out(0)) + " must be a suffix of x " + desc(in(0)));
    break;
  case OpKind::Fill: break;
  case OpKind::Layernorm: {
    const Buffer &x = in(0);
    minRank(x, 1, "x");
    std::vector<int64_t> c{x.shape.back()};
    wantShape(in(1), c, "w");
    wantShape(in(2), c, "b");
    wantShape(out(0), x.shape, "y");
    wantShape(out(1), lead(x), "mean");
    wantShape(out(2), lead(x), "rstd");
    if (!(ins->num("eps", 1e-5) > 0)) bad("attribute 'eps' must be a positive number");
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
  case OpKind::AddLayernorm:
  case OpKind::AddRmsNorm: {
    const bool ln = sig.kind == OpKind::AddLayernorm;
    const Buffer &x = in(0);
    minRank(x, 1, "a");
    std::vector<int64_t> c{x.shape.back()};
    wantShape(in(1), x.shape, "r");
    wantShape(in(2), c, "w");
    if (ln) wantShape(in(3), c, "b");
    wantShape(out(0), x.shape, "s");
    wantShape(out(1), x.shape, "y");
    for (size_t k = 2; k < ins->out.size(); ++k) wantShape(out(k), lead(x), ln && k == 2 ? "mean" : "rstd");
    if (!(ins->num("eps", ln ? 1e-5 : 0) > 0)) bad("attribute 'eps' (a positive number) is required");
    break;
  }
  case OpKind::LayernormGradAdd:
  case OpKind::RmsNormGradAdd: {
    const bool ln = sig.kind == OpKind::LayernormGradAdd;
    const Buffer &x = in(1);
    minRank(x, 1, "x");
    std::vector<int64_t> c{x.shape.back()};
    wantShape(in(0), x.shape, "dy");
    wantShape(in(2), c, "w");
    if (ln) wantShape(in(3), lead(x), "mean");
    wantShape(in(ln ? 4 : 3), lead(x), "rstd");
    wantShape(in(ln ? 5 : 4), x.shape, "r");
    wantShape(out(0), x.shape, "dx");
    wantShape(out(1), c, "dw");
    if (ln) wantShape(out(2), c, "db");
    break;
  }
  case OpKind::BiasGelu:
    if (in(1).shape.empty() || !isSuffix(in(1).shape, in(0).shape))
      bad("bias " + desc(in(1)) + " must be a non-empty suffix of x " + desc(in(0)));
    sameShape(in(0), out(0), "pre");
    sameShape(in(0), out(1), "y");
    break;
  case OpKind::GeluGradBias:
    sameShape(in(0), in(1), "x and dy");
    sameShape(in(0), out(0), "dx");
    if (out(1).shape.empty() || !isSuffix(out(1).shape, in(0).shape))
      bad("db " + desc(out(1)) + " must be a non-empty suffix of x " + desc(in(0)));
    break;
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
      bad("attribute 'perm' " + shapeStr(perm) + " is not a permutation of the " + std::to_string(x.shape.size()) +
          " dimensions of " + desc(x));
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
      bad("dimension " + std::to_string(ax) + " of " + desc(whole) + " does not split into " + std::to_string(parts) +
          " equal parts");
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
    classesWithin(l.shape.back());
    if (sig.kind == OpKind::CrossEntropy) {
      wantShape(out(0), {}, "loss");
    } else {
      wantShape(in(2), {}, "dloss");
      wantShape(out(0), l.shape, "dlogits");
    }
    break;
  }
  case OpKind::GlobalNorm: wantShape(out(0), {}, "norm"); break;
  case OpKind::Cast: sameShape(in(0), out(0), "output"); break;
  case OpKind::Copy:
    if (ins->attrs.count("count")) { // a range: out[out_offset, +count) = in[in_offset, +count)
      const double c = ins->num("count", 0), io = ins->num("in_offset", 0), oo = ins->num("out_offset", 0);
      for (auto [name, x] : {std::pair<const char *, double>{"count", c}, {"in_offset", io}, {"out_offset", oo}})
        if (x != std::floor(x) || x < (std::string(name) == "count" ? 1 : 0))
          bad(std::string("attribute '") + name +
              "' must be an integer >= " + (std::string(name) == "count" ? "1" : "0"));
      if (io + c > double(in(0).numel()) || oo + c > double(out(0).numel()))
        bad("elements [" + std::to_string(int64_t(io)) + ", " + std::to_string(int64_t(io + c)) + ") of an input of " +
            std::to_string(in(0).numel()) + " to [" + std::to_string(int64_t(oo)) + ", " +
            std::to_string(int64_t(oo + c)) + ") of an output of " + std::to_string(out(0).numel()) + ": out of range");
    } else {
      if (ins->attrs.count("in_offset") || ins->attrs.count("out_offset"))
        bad("attributes 'in_offset' and 'out_offset' need 'count'");
      sameShape(in(0), out(0), "output");
    }
    if (in(0).dtype != out(0).dtype)
      bad(std::string("copy keeps the dtype: ") + dtypeName(in(0).dtype) + " -> " + dtypeName(out(0).dtype) +
          " (use cast)");
    if (ins->in[0] == ins->out[0]) bad("copy onto itself");
    break;
  case OpKind::Wait:
  case OpKind::Send: // bytes as they are (any dtype and shape; the peer's recv must match: Validator.cpp)
  case OpKind::Recv: break;
  case OpKind::CheckFinite: wantShape(out(0), {}, "flag"); break;
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather: {
    if (ins->in.size() != ins->out.size())
      bad("a collective has one output per input, has " + std::to_string(ins->in.size()) + " inputs and " +
          std::to_string(ins->out.size()) + " outputs");
    double axis = ins->num("axis", 0);
    if (axis == 2 && p.pp <= 1) bad("attribute 'axis' 2 (pp) names the pipeline axis, but this program has pp 1");
    if (axis != 0 && axis != 1 && axis != 2) bad("attribute 'axis' must be 0 (dp), 1 (tp) or 2 (pp)");
    const int64_t n = p.axisSize(int64_t(axis));
    if (sig.kind != OpKind::AllGather) {
      double r = ins->num("reduce", -1);
      if (r != 0 && r != 1 && r != 2 && r != 3)
        bad("attribute 'reduce' must be 0 (sum), 1 (mean), 2 (max) or 3 (norm)");
      if (sig.kind == OpKind::ReduceScatter && r > 1) bad("reduce_scatter reduces by sum (0) or mean (1)");
      if (r == 3)
        for (size_t k = 0; k < ins->in.size(); ++k)
          if (in(k).dtype != DType::F32)
            bad("reduce 3 (norm) combines f32 norms; input " + std::to_string(k) + " is " + dtypeName(in(k).dtype));
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
      const Buffer &whole = sig.kind == OpKind::ReduceScatter ? a : b,
                   &part = sig.kind == OpKind::ReduceScatter ? b : a;
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
    classesWithin(l.shape.back() * p.tp);
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
  case OpKind::LinearCeStats:
  case OpKind::LinearCeStatsGrad: {
    const bool fwd = sig.kind == OpKind::LinearCeStats;
    const Buffer &h = in(fwd ? 0 : 1), &w = in(fwd ? 1 : 2), &t = in(fwd ? 2 : 3);
    const bool tb = ins->flag("transpose_b");
    minRank(h, 2, "h");
    if (w.shape.size() != 2) bad("w must be [C,V] (or [V,C] with transpose_b), " + desc(w) + " is not");
    const int64_t C = h.shape.back(), V = tb ? w.shape[0] : w.shape[1];
    if (C < 1 || V < 1) bad("h's width and w's vocabulary columns must be at least 1: " + desc(h) + ", " + desc(w));
    if ((tb ? w.shape[1] : w.shape[0]) != C)
      bad("w " + desc(w) + " does not match h's width " + std::to_string(C) + (tb ? " (transpose_b)" : ""));
    if (h.dtype != w.dtype)
      bad(std::string("h and w must have one dtype, are ") + dtypeName(h.dtype) + " and " + dtypeName(w.dtype));
    wantShape(t, lead(h), "targets");
    classesWithin(ins->num("vocab_axis", 0) == 1 ? V * p.tp : V);
    if (ins->attrs.count("classes") && !tb) bad("attribute 'classes' (a padded vocabulary) needs transpose_b");
    const double chunk = ins->num("chunk", 0);
    if (!(chunk >= 1) || chunk != std::floor(chunk)) bad("attribute 'chunk' must be a positive integer");
    const int64_t N = C ? h.numel() / C : 0, cols = std::min<int64_t>(int64_t(chunk), V);
    auto st = lead(h);
    st.push_back(2);
    if (fwd) {
      wantShape(out(0), st, "stats");
      wantShape(out(1), {N * cols + 2 * N}, "workspace");
    } else {
      wantShape(in(0), st, "dstats");
      wantShape(in(4), st, "stats");
      wantShape(out(0), h.shape, "dh");
      wantShape(out(1), w.shape, "dw");
      wantShape(out(2), {N * cols + N * C}, "workspace");
      if (out(0).dtype != h.dtype || out(1).dtype != w.dtype) bad("dh and dw must have h's and w's dtype");
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
    const bool chunk = ins->attrs.count("count") || ins->attrs.count("offset");
    if (chunk) { // elements [offset, offset + count) of the gradient; param, m, v hold them at [0, count)
      const double c = ins->num("count", 0), o = ins->num("offset", -1);
      if (c != std::floor(c) || c < 1 || o != std::floor(o) || o < 0)
        bad("attributes 'offset' (an integer >= 0) and 'count' (an integer >= 1) go together");
      if (o + c > double(in(1).numel()))
        bad("elements [" + std::to_string(int64_t(o)) + ", " + std::to_string(int64_t(o + c)) + ") of a gradient of " +
            std::to_string(in(1).numel()) + ": out of range");
      for (size_t k : {size_t(0), size_t(2), size_t(3)})
        if (double(in(k).numel()) < c)
          bad(std::string(k == 0   ? "param"
                          : k == 2 ? "m"
                                   : "v") +
              " holds " + std::to_string(in(k).numel()) + " elements, fewer than the update's " +
              std::to_string(int64_t(c)));
      if (ins->out.size() == 4 && out(3).numel() != in(1).numel() && double(out(3).numel()) < c)
        bad("half holds " + std::to_string(out(3).numel()) + " elements: neither the gradient's " +
            std::to_string(in(1).numel()) + " nor at least the update's " + std::to_string(int64_t(c)));
    } else {
      wantShape(in(1), param.shape, "grad");
      wantShape(in(2), param.shape, "m");
      wantShape(in(3), param.shape, "v");
    }
    if (ins->attrs.count("weight")) {
      const double w = ins->num("weight", -1);
      if (w != std::floor(w) || w < 0 || w >= double(p.buffers.size()) || !p.buffers[size_t(w)].persistent())
        bad("attribute 'weight' must be the id of a persistent buffer (the tensor of record)");
    }
    for (size_t k = 4; k < ins->in.size(); ++k) wantShape(in(k), {}, "optional scalar input " + std::to_string(k));
    if (ins->out.size() == 4) {
      if (!chunk) wantShape(out(3), param.shape, "half");
      for (size_t k = 0; k < ins->in.size(); ++k)
        if (ins->in[k] == ins->out[3])
          bad("half (output 3) must be a buffer of its own, not input " + std::to_string(k));
    }
    if (ins->out[0] != ins->in[0] || ins->out[1] != ins->in[2] || ins->out[2] != ins->in[3])
      bad("outputs must be the param, m and v inputs (updated in place): in " + shapeStr(ins->in) + ", out " +
          shapeStr(ins->out));
    if (ins->in[0] == ins->in[2] || ins->in[0] == ins->in[3] || ins->in[2] == ins->in[3] || ins->in[1] == ins->in[0] ||
        ins->in[1] == ins->in[2] || ins->in[1] == ins->in[3])
      bad("param, grad, m and v must be distinct buffers");
    break;
  }
  }
}

} // namespace bigc::format::detail
