// The CPU kernels of context parallelism's attention (ring_attention, ring_attention_grad): one
// block of keys at their positions in the sequence, merged into the partial softmax of the blocks
// before it; the gradient from the whole attention's out and lse (FlashAttention's backward), one
// block at a time. Plain loops over (batch, kv head): a reference, as the GPT-2 kernels' first form.
#include "bigc/Runtime/kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace bigc::rt::cpu {

namespace {

bool sees(const AttentionGeometry &g, int64_t qp, int64_t kp) {
  return kp <= qp && (g.window <= 0 || qp - kp < g.window);
}

// The score of query row qr and key row kr (scale, then the cap); `t` the cap's tanh (for the gradient).
float score(const AttentionGeometry &g, const float *qr, const float *kr, float *t = nullptr) {
  double s = 0;
  for (int64_t e = 0; e < g.D; ++e) s += double(qr[e]) * double(kr[e]);
  float x = float(s) * g.scale;
  if (g.softcap > 0) {
    const float th = std::tanh(x / g.softcap);
    if (t) *t = th;
    x = g.softcap * th;
  }
  return x;
}

} // namespace

void ringAttention(const AttentionGeometry &g, const float *q, const float *k, const float *v, const int64_t *qpos,
                   const int64_t *kpos, const float *accOut, const float *accLse, float *out, float *lse) {
  const int64_t T = g.T, D = g.D;
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t kh = g.kvHead(h);
      std::vector<float> s(static_cast<size_t>(T));
      std::vector<double> o(static_cast<size_t>(D));
      for (int64_t i = 0; i < T; ++i) {
        const float *qr = q + (b * T + i) * g.sq + h * D;
        float m = ninf;
        for (int64_t j = 0; j < T; ++j) {
          s[size_t(j)] = sees(g, qpos[i], kpos[j]) ? score(g, qr, k + (b * T + j) * g.skv + kh * D) : ninf;
          m = std::max(m, s[size_t(j)]);
        }
        double sum = 0;
        std::fill(o.begin(), o.end(), 0.0);
        if (m != ninf)
          for (int64_t j = 0; j < T; ++j) {
            if (s[size_t(j)] == ninf) continue;
            const double p = std::exp(double(s[size_t(j)] - m));
            sum += p;
            const float *vr = v + (b * T + j) * g.skv + kh * D;
            for (int64_t e = 0; e < D; ++e) o[size_t(e)] += p * double(vr[e]);
          }
        const double lb = m == ninf ? -INFINITY : double(m) + std::log(sum);
        float *orow = out + (b * T + i) * g.so + h * D;
        const int64_t li = (b * g.H + h) * T + i;
        double la = accLse ? double(accLse[li]) : -INFINITY;
        const double L = std::max(la, lb);
        if (L == -INFINITY) { // no key yet
          for (int64_t e = 0; e < D; ++e) orow[e] = 0.0f;
          lse[li] = ninf;
          continue;
        }
        const double l = L + std::log(std::exp(la - L) + std::exp(lb - L));
        const double wa = std::exp(la - l), wb = lb == -INFINITY ? 0.0 : std::exp(lb - l) / sum;
        const float *arow = accOut ? accOut + (b * T + i) * g.so + h * D : nullptr;
        for (int64_t e = 0; e < D; ++e) orow[e] = float((arow ? wa * double(arow[e]) : 0.0) + wb * o[size_t(e)]);
        lse[li] = float(l);
      }
    }
}

void ringAttentionGrad(const AttentionGeometry &g, const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const int64_t *qpos, const int64_t *kpos, const float *accDq,
                       const float *accDk, const float *accDv, float *dq, float *dk, float *dv) {
  const int64_t T = g.T, D = g.D;
  // The outputs start from what came before (or zero); rows this rank does not own stay as they are.
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t h = 0; h < g.H; ++h) {
        const int64_t at = (b * T + i) * g.sq + h * D;
        for (int64_t e = 0; e < D; ++e) dq[at + e] = accDq ? accDq[at + e] : 0.0f;
      }
      for (int64_t h = 0; h < g.Hkv; ++h) {
        const int64_t at = (b * T + i) * g.skv + h * D;
        for (int64_t e = 0; e < D; ++e) {
          dk[at + e] = accDk ? accDk[at + e] : 0.0f;
          dv[at + e] = accDv ? accDv[at + e] : 0.0f;
        }
      }
    }
    // Parallel over (batch, kv head): each owns its dk, dv rows and its query heads' dq rows.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t kh = 0; kh < g.Hkv; ++kh) {
      std::vector<double> dkAcc(static_cast<size_t>(T * D), 0.0), dvAcc(static_cast<size_t>(T * D), 0.0),
          dqRow(static_cast<size_t>(D));
      for (int64_t h = 0; h < g.H; ++h) {
        if (g.kvHead(h) != kh) continue;
        for (int64_t i = 0; i < T; ++i) {
          const float *qr = q + (b * T + i) * g.sq + h * D, *dor = dout + (b * T + i) * g.so + h * D,
                      *orow = out + (b * T + i) * g.so + h * D;
          double Di = 0;
          for (int64_t e = 0; e < D; ++e) Di += double(dor[e]) * double(orow[e]);
          const double l = lse[(b * g.H + h) * T + i];
          std::fill(dqRow.begin(), dqRow.end(), 0.0);
          for (int64_t j = 0; j < T; ++j) {
            if (!sees(g, qpos[i], kpos[j])) continue;
            const float *kr = k + (b * T + j) * g.skv + kh * D, *vr = v + (b * T + j) * g.skv + kh * D;
            float th = 0;
            const double p = std::exp(double(score(g, qr, kr, &th)) - l);
            double dp = 0;
            for (int64_t e = 0; e < D; ++e) {
              dvAcc[size_t(j * D + e)] += p * double(dor[e]);
              dp += double(dor[e]) * double(vr[e]);
            }
            double ds = p * (dp - Di) * double(g.scale);
            if (g.softcap > 0) ds *= 1.0 - double(th) * double(th);
            for (int64_t e = 0; e < D; ++e) {
              dqRow[size_t(e)] += ds * double(kr[e]);
              dkAcc[size_t(j * D + e)] += ds * double(qr[e]);
            }
          }
          float *dqr = dq + (b * T + i) * g.sq + h * D;
          for (int64_t e = 0; e < D; ++e) dqr[e] += float(dqRow[size_t(e)]);
        }
      }
      for (int64_t j = 0; j < T; ++j)
        for (int64_t e = 0; e < D; ++e) {
          dk[(b * T + j) * g.skv + kh * D + e] += float(dkAcc[size_t(j * D + e)]);
          dv[(b * T + j) * g.skv + kh * D + e] += float(dvAcc[size_t(j * D + e)]);
        }
    }
}

} // namespace bigc::rt::cpu
