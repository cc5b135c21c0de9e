// Attention (GPT-2's, over qkv [B,T,3C]; grouped-query, over q, k, v) and rotary embeddings
// (docs/program-format.md, "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// rope and ring_attention(_grad)'s `cp`: the program's, over tokens that split in two chunks.
void checkCp(const Ctx &op, const Buffer &x) {
  const double cp = op.ins->num("cp", 1);
  if (cp != 1 && cp != double(op.p.cp))
    op.bad("attribute 'cp' " + std::to_string(int64_t(cp)) + " must be the program's cp " + std::to_string(op.p.cp));
  if (cp > 1 && x.shape[1] % 2 != 0)
    op.bad("with cp > 1 the " + std::to_string(x.shape[1]) + " tokens of " + op.desc(x) +
           " must be two chunks (an even number)");
}

// Rope
void shapeRope(const Ctx &op) {
  const Buffer &x = op.in(0);
  if (x.shape.size() != 3) op.bad("x must be [B,T,H*D], " + op.desc(x) + " is not");
  const double d = op.ins->num("head_dim", 0);
  if (d < 2 || d > 1024 || d != std::floor(d) || int64_t(d) % 2 != 0)
    op.bad("attribute 'head_dim' (an even integer in [2, 1024]) is required");
  if (x.shape[2] % int64_t(d) != 0) op.bad("the last dimension of " + op.desc(x) + " is not a multiple of head_dim");
  const std::vector<double> f = op.ins->reals("inv_freq");
  if (f.empty() || int64_t(f.size()) > int64_t(d) / 2)
    op.bad("attribute 'inv_freq' must hold 1 to head_dim / 2 = " + std::to_string(int64_t(d) / 2) +
           " numbers (the rotated pairs), holds " + std::to_string(f.size()));
  for (double v : f)
    if (!std::isfinite(v)) op.bad("attribute 'inv_freq' must be finite");
  op.sameShape(x, op.out(0), "output");
  checkCp(op, x);
}

// GqaAttention, GqaAttentionGrad
void shapeGqaAttention(const Ctx &op) {
  const bool grad = op.kind == OpKind::GqaAttentionGrad || op.kind == OpKind::RingAttentionGrad;
  const Buffer &q = op.in(grad ? 1 : 0), &k = op.in(grad ? 2 : 1), &v = op.in(grad ? 3 : 2);
  if (q.shape.size() != 3) op.bad("q must be [B,T,H*D], " + op.desc(q) + " is not");
  const double h = op.ins->num("heads", 0), hk = op.ins->num("kv_heads", 0), w = op.ins->num("window", 0);
  if (h < 1 || h != std::floor(h)) op.bad("attribute 'heads' (a positive integer) is required");
  if (hk < 1 || hk != std::floor(hk)) op.bad("attribute 'kv_heads' (a positive integer) is required");
  if (w < 0 || w != std::floor(w)) op.bad("attribute 'window' must be an integer >= 0");
  const double cap = op.ins->num("softcap", 0);
  if (!(cap >= 0) || !std::isfinite(cap)) op.bad("attribute 'softcap' must be a finite number >= 0 (0: none)");
  const int64_t H = int64_t(h), Hkv = int64_t(hk);
  const bool tpHeads = op.ins->flag("tp_heads");
  if (!tpHeads && H % Hkv != 0)
    op.bad("kv_heads = " + std::to_string(Hkv) + " does not divide heads = " + std::to_string(H));
  if (tpHeads && (H * op.p.tp) % Hkv != 0)
    op.bad("kv_heads = " + std::to_string(Hkv) + " does not divide the " + std::to_string(H * op.p.tp) +
           " heads of all tensor ranks");
  if (q.shape[2] % H != 0) op.bad("the last dimension of q is not divisible by heads = " + std::to_string(H));
  const int64_t B = q.shape[0], T = q.shape[1], D = q.shape[2] / H;
  op.wantShape(k, {B, T, Hkv * D}, "k");
  op.wantShape(v, {B, T, Hkv * D}, "v");
  if (grad) {
    op.wantShape(op.in(0), q.shape, "dout");
    op.wantShape(op.in(4), q.shape, "out");
    op.wantShape(op.in(5), {B, H, T}, "lse");
    op.wantShape(op.out(0), q.shape, "dq");
    op.wantShape(op.out(1), k.shape, "dk");
    op.wantShape(op.out(2), v.shape, "dv");
  } else {
    op.wantShape(op.out(0), q.shape, "out");
    op.wantShape(op.out(1), {B, H, T}, "lse");
  }
  if (op.kind == OpKind::RingAttention || op.kind == OpKind::RingAttentionGrad) { // a block of a context axis
    if (op.p.cp < 2)
      op.bad("ring attention needs a context axis (cp >= 2); this program has cp " + std::to_string(op.p.cp));
    checkCp(op, q);
    const double step = op.ins->num("step", -1);
    const bool a2a = op.ins->flag("a2a");
    if (step < 0 || step >= double(op.p.cp) || step != std::floor(step) || (a2a && step != 0))
      op.bad("attribute 'step' must be in [0, cp) (0 with a2a)");
    if (a2a && T % (2 * op.p.cp) != 0) op.bad("with a2a the " + std::to_string(T) + " tokens must be 2 x cp chunks");
    const size_t base = grad ? 6 : 3, accN = grad ? 3 : 2, n = op.ins->in.size();
    if (n != base && n != base + accN && !(grad && n == base + 1))
      op.bad("takes " + std::to_string(base) + " inputs, or " + std::to_string(base + accN) +
             " with the blocks so far" + (grad ? " (7: dq so far alone)" : ""));
    if (n > base) {
      if (grad) {
        op.wantShape(op.in(6), q.shape, "dq so far");
        if (n == 9) op.wantShape(op.in(7), k.shape, "dk so far");
        if (n == 9) op.wantShape(op.in(8), v.shape, "dv so far");
      } else {
        op.wantShape(op.in(3), q.shape, "out so far");
        op.wantShape(op.in(4), {B, H, T}, "lse so far");
      }
    }
  }
}

// Attention, AttentionGrad
void shapeAttention(const Ctx &op) {
  bool grad = op.kind == OpKind::AttentionGrad;
  const Buffer &qkv = grad ? op.in(1) : op.in(0);
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0) op.bad("qkv must be [B,T,3C], " + op.desc(qkv) + " is not");
  int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  double h = op.ins->num("heads", 0);
  if (h < 1 || h != std::floor(h)) op.bad("attribute 'heads' (a positive integer) is required");
  int64_t H = int64_t(h);
  if (C % H != 0) op.bad("C = " + std::to_string(C) + " is not divisible by heads = " + std::to_string(H));
  if (grad) {
    op.wantShape(op.in(0), {B, T, C}, "dout");
    op.wantShape(op.in(2), {B, T, C}, "out");
    op.wantShape(op.in(3), {B, H, T}, "lse");
    op.wantShape(op.out(0), qkv.shape, "dqkv");
  } else {
    op.wantShape(op.out(0), {B, T, C}, "out");
    op.wantShape(op.out(1), {B, H, T}, "lse");
  }
}

// Rope
void dimsRope(const Ctx &op, OpDims &d) {
  const Buffer &x = op.in(0);
  d.B = x.shape[0], d.T = x.shape[1], d.C = x.shape[2];
  d.headDim = int64_t(op.ins->num("head_dim", 2));
  for (double f : op.ins->reals("inv_freq")) d.invFreq.push_back(float(f));
  d.scale = float(op.ins->num("attention_scaling", 1.0));
  d.inverse = op.ins->flag("inverse");
  d.interleaved = op.ins->flag("interleaved");
  d.cp = int64_t(op.ins->num("cp", 1));
}

// GqaAttention, GqaAttentionGrad
void dimsGqaAttention(const Ctx &op, OpDims &d) {
  const Buffer &q = op.kind == OpKind::GqaAttention || op.kind == OpKind::RingAttention ? op.in(0) : op.in(1);
  d.B = q.shape[0], d.T = q.shape[1], d.H = int64_t(op.ins->num("heads", 1));
  d.Hkv = int64_t(op.ins->num("kv_heads", 1));
  d.headDim = q.shape[2] / std::max<int64_t>(1, d.H);
  d.window = int64_t(op.ins->num("window", 0));
  const double sc = op.ins->num("scale", 0.0);
  d.scale = float(sc > 0 ? sc : 1.0 / std::sqrt(double(d.headDim)));
  d.tpHeads = op.ins->flag("tp_heads");
  d.softcap = float(op.ins->num("softcap", 0.0));
  d.group = std::max<int64_t>(1, (d.H * (d.tpHeads ? op.p.tp : 1)) / std::max<int64_t>(1, d.Hkv));
  d.cp = int64_t(op.ins->num("cp", 1)), d.step = int64_t(op.ins->num("step", 0));
  d.a2a = op.ins->flag("a2a");
  // (acc: the outputs so far are given; the gradient's dk and dv too only with all 9 inputs)
  d.acc = op.ins->in.size() > (op.kind == OpKind::RingAttentionGrad ? 6u : 3u);
  d.accKv = op.ins->in.size() == 9u;
}

// Attention, AttentionGrad
void dimsAttention(const Ctx &op, OpDims &d) {
  const Buffer &qkv = op.kind == OpKind::Attention ? op.in(0) : op.in(1);
  d.B = qkv.shape[0], d.T = qkv.shape[1], d.C = qkv.shape[2] / 3, d.H = int64_t(op.ins->num("heads", 1));
}

// Attention over P (query, key) pairs with head size d: 4*P*d (Q K^T and P V) + 6*P (softmax); the
// gradient 10*P*d (scores again, dV, dP, dQ, dK) + 8*P, and 2*B*T*C (attention) or 2*B*T*H*d
// (grouped-query) more. P = B*H*T(T+1)/2 causal pairs, or the pairs a sliding window allows.
int64_t attentionFlops(const OpView &v, bool grad) {
  const std::vector<int64_t> s = v.inShape(grad ? 1 : 0); // qkv [B,T,3C]
  const int64_t heads = int64_t(v.num("heads", 0));
  if (s.size() != 3 || heads <= 0) return 0;
  const int64_t b = s[0], t = s[1], c = s[2] / 3;
  const int64_t pairs = b * heads * (t * (t + 1) / 2), d = c / heads;
  return grad ? 10 * pairs * d + 8 * pairs + 2 * b * t * c : 4 * pairs * d + 6 * pairs;
}
int64_t gqaFlops(const OpView &v, bool grad) {
  const std::vector<int64_t> q = v.inShape(grad ? 1 : 0); // q [B,T,H*D]
  const int64_t heads = int64_t(v.num("heads", 0)), window = int64_t(v.num("window", 0));
  if (q.size() != 3 || heads <= 0) return 0;
  const int64_t b = q[0], t = q[1], d = q[2] / heads;
  int64_t perRow = t * (t + 1) / 2; // causal pairs of one head
  if (window > 0 && window < t) perRow = window * (window + 1) / 2 + (t - window) * window;
  const int64_t pairs = b * heads * perRow;
  const int64_t cap = v.num("softcap", 0) > 0 ? pairs * (grad ? 8 : 4) : 0; // tanh, and its derivative
  return (grad ? 10 * pairs * d + 8 * pairs + 2 * b * t * heads * d : 4 * pairs * d + 6 * pairs) + cap;
}
// One block of ring attention: step 0 (the rank's own two chunks) has the causal pairs, T(T+1)/2
// per head; every other block half of T x T (one chunk of queries sees both, or both queries one).
// All-to-all attention: the causal pairs of the whole sequence it holds.
int64_t ringFlops(const OpView &v, bool grad) {
  if (v.has("a2a") || v.num("step", 0) == 0) return gqaFlops(v, grad);
  const std::vector<int64_t> q = v.inShape(grad ? 1 : 0);
  const int64_t heads = int64_t(v.num("heads", 0));
  if (q.size() != 3 || heads <= 0) return 0;
  const int64_t b = q[0], t = q[1], d = q[2] / heads, pairs = b * heads * t * t / 2;
  const int64_t cap = v.num("softcap", 0) > 0 ? pairs * (grad ? 8 : 4) : 0;
  return (grad ? 10 * pairs * d + 8 * pairs + 2 * b * t * heads * d : 4 * pairs * d + 6 * pairs + 3 * b * t * q[2]) +
         cap;
}
// rope: 6 per element (sin/cos per position and frequency counted apart).

} // namespace

std::vector<OpDef> attentionOps() {
  const std::vector<AttrSpec> gqa = {{"heads", Int},  {"kv_heads", Int},  {"window", Int},
                                     {"scale", Real}, {"tp_heads", Flag}, {"softcap", Real}};
  std::vector<AttrSpec> ring = gqa;
  ring.insert(ring.end(), {{"cp", Int}, {"step", Int}, {"a2a", Flag}});
  return {
      // qkv [B,T,3C] -> out [B,T,C], lse [B,H,T] (causal)
      Def("attention", OpKind::Attention)
          .in(1)
          .out(2)
          .types({Fl}, {Fl, F32})
          .attrs({{"heads", Int}})
          .shape(shapeAttention)
          .dims(dimsAttention)
          .flops([](const OpView &v) { return attentionFlops(v, false); }),
      // dout, qkv, out, lse -> dqkv
      Def("attention_grad", OpKind::AttentionGrad)
          .in(4)
          .out(1)
          .types({Fl, Fl, Fl, F32}, {Fl})
          .attrs({{"heads", Int}})
          .shape(shapeAttention)
          .dims(dimsAttention)
          .flops([](const OpView &v) { return attentionFlops(v, true); }),
      // q [B,T,H*D], k, v [B,T,Hkv*D] -> out [B,T,H*D], lse [B,H,T] (causal; a sliding window)
      Def("gqa_attention", OpKind::GqaAttention)
          .in(3)
          .out(2)
          .types({Fl}, {Fl, F32})
          .attrs(gqa)
          .shape(shapeGqaAttention)
          .dims(dimsGqaAttention)
          .flops([](const OpView &v) { return gqaFlops(v, false); }),
      // dout, q, k, v, out, lse -> dq, dk, dv
      Def("gqa_attention_grad", OpKind::GqaAttentionGrad)
          .in(6)
          .out(3)
          .types({Fl, Fl, Fl, Fl, Fl, F32}, {Fl})
          .attrs(gqa)
          .shape(shapeGqaAttention)
          .dims(dimsGqaAttention)
          .flops([](const OpView &v) { return gqaFlops(v, true); }),
      // context parallelism: q, one block of k, v [, out, lse so far] -> out, lse (merged)
      Def("ring_attention", OpKind::RingAttention)
          .in(3, 5)
          .out(2)
          .types({Fl, Fl, Fl, Fl, F32}, {Fl, F32})
          .attrs(ring)
          .shape(shapeGqaAttention)
          .dims(dimsGqaAttention)
          .flops([](const OpView &v) { return ringFlops(v, false); }),
      // dout, q, k, v, out, lse [, dq, dk, dv so far] -> dq, dk, dv (this block's added)
      Def("ring_attention_grad", OpKind::RingAttentionGrad)
          .in(6, 9)
          .out(3)
          .types({Fl, Fl, Fl, Fl, Fl, F32, Fl}, {Fl})
          .attrs(ring)
          .shape(shapeGqaAttention)
          .dims(dimsGqaAttention)
          .flops([](const OpView &v) { return ringFlops(v, true); }),
      // x [B,T,H*D] rotated by position (the inverse rotation: the gradient)
      Def("rope", OpKind::Rope)
          .in(1)
          .out(1)
          .inPlace()
          .attrs({{"head_dim", Int},
                  {"inv_freq", Reals},
                  {"attention_scaling", Real},
                  {"inverse", Flag},
                  {"interleaved", Flag},
                  {"cp", Int}})
          .shape(shapeRope)
          .dims(dimsRope)
          .flops(perResult<6>),
  };
}

} // namespace bigc::format::ops
