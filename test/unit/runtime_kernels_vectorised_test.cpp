// The CPU kernels' vectorised math (include/bigc/Runtime/fast_math.h) and the kernels built on it,
// against double-precision references written here: exp over the float range, GELU, SiLU and
// SwiGLU with their gradients (analytic derivatives in double), and blocked attention in the
// shapes the LLaMA family uses (grouped-query heads, a sliding window) forward and backward.
// Bounds: a few times the error measured when they were written (stated at each).
#include "bigc/Runtime/fast_math.h"
#include "bigc/Runtime/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace k = bigc::rt::cpu;

namespace {

using VecF = std::vector<float>;
using VecD = std::vector<double>;

VecF randVec(std::mt19937 &rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  VecF v(n);
  for (auto &x : v) x = d(rng);
  return v;
}

// max_i |got - want| / (|want| + floor)
double worstRel(const VecF &got, const VecD &want, double floor) {
  double w = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    w = std::max(w, std::fabs(double(got[i]) - want[i]) / (std::fabs(want[i]) + floor));
  return w;
}

double maxAbs(const VecD &v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

} // namespace

// Every 1024th float in [-87, 88] (about 2.2 million values): measured 7.9e-8 at most (0.66 of fp32's
// unit roundoff 1.19e-7) on 2026-11-26.
TEST(FastMath, ExpRelativeError) {
  double worst = 0.0;
  float at = 0.0f;
  int64_t n = 0;
  auto check = [&](uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    const double want = std::exp(double(x));
    const double e = std::fabs(double(k::fastExp(x)) - want) / want;
    if (e > worst) worst = e, at = x;
    ++n;
  };
  for (uint32_t b = 0; b <= 0x42B00000u; b += 1024) check(b);           // [0, 88]
  for (uint32_t b = 0x80000000u; b <= 0xC2AE0000u; b += 1024) check(b); // [-87, -0]
  EXPECT_GT(n, 2000000);
  EXPECT_LE(worst, 9e-8) << "at x = " << at; // every float of the range: 8.53e-8 (fast_math.h)
}

TEST(FastMath, ExpSpecialValues) {
  EXPECT_EQ(k::fastExp(0.0f), 1.0f);
  EXPECT_EQ(k::fastExp(-std::numeric_limits<float>::infinity()), 0.0f); // masked scores
  EXPECT_EQ(k::fastExp(-100.0f), 0.0f);
  EXPECT_EQ(k::fastExp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isnan(k::fastExp(std::numeric_limits<float>::quiet_NaN()))); // --check-numerics sees it
  EXPECT_TRUE(std::isfinite(k::fastExp(1000.0f)));
  EXPECT_NEAR(k::fastExp(88.0f) / std::exp(88.0), 1.0, 1e-6);
  EXPECT_NEAR(k::fastSigmoid(0.0f), 0.5f, 0.0f);
  EXPECT_EQ(k::fastSigmoid(200.0f), 1.0f);
  EXPECT_LT(k::fastSigmoid(-200.0f), 1e-37f);
}

namespace {
constexpr double kS = 0.7978845608028654, kC = 0.044715;
double geluD(double x) { return 0.5 * x * (1.0 + std::tanh(kS * (x + kC * x * x * x))); }
double geluGradD(double x) {
  const double th = std::tanh(kS * (x + kC * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kS * (1.0 + 3.0 * kC * x * x);
}
double sigmoidD(double x) { return 1.0 / (1.0 + std::exp(-x)); }
} // namespace

// GELU (tanh form) and its gradient on [-8, 8]. Errors relative to |value| + 1e-3 for the values
// and |value| + 0.1 for the gradients, whose zero crossings cancel terms of size ~1 (an absolute
// error near 5e-8 there). Measured 2026-11-26: values 6.2e-7, gradients 6.1e-7.
TEST(FastMath, GeluAndGradAgainstDouble) {
  std::mt19937 rng(101);
  const int64_t n = 50000; // above the parallel threshold
  VecF x = randVec(rng, n, -8.0f, 8.0f), dy(n, 1.0f), y(n), dx(n);
  k::gelu(x.data(), y.data(), n);
  k::geluGrad(x.data(), dy.data(), dx.data(), n);
  VecD yr(n), gr(n);
  for (int64_t i = 0; i < n; ++i) yr[i] = geluD(x[i]), gr[i] = geluGradD(x[i]);
  EXPECT_LE(worstRel(y, yr, 1e-3), 2e-6);
  EXPECT_LE(worstRel(dx, gr, 0.1), 2.5e-6);
}

// The exact (erf) GELU and its gradient on [-8, 8], measured as the tanh form's, against double
// erf; and erfc itself relative to its value on [0, 5.5] (where it is above 1e-14: the float
// rounding of z^2 in its exponent, 6e-8 z^2, is most of it there). Measured 2026-11-28: values
// 8.8e-7, gradients 7.2e-7, erfc 2.0e-6 (std::erf before: a libm call per element).
TEST(FastMath, ExactGeluAndGradAgainstDouble) {
  std::mt19937 rng(103);
  const int64_t n = 50000;
  VecF x = randVec(rng, n, -8.0f, 8.0f), dy(n, 1.0f), y(n), dx(n);
  k::gelu(x.data(), y.data(), n, /*exact=*/true);
  k::geluGrad(x.data(), dy.data(), dx.data(), n, /*exact=*/true);
  VecD yr(n), gr(n);
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i], cdf = 0.5 * std::erfc(-xi / std::sqrt(2.0));
    yr[i] = xi * cdf;
    gr[i] = cdf + xi * std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI);
  }
  EXPECT_LE(worstRel(y, yr, 1e-3), 2e-6);
  EXPECT_LE(worstRel(dx, gr, 0.1), 2e-6);
  double worst = 0;
  for (float z = 0.0f; z <= 5.5f; z += 1.0f / 1024)
    worst = std::max(worst, std::abs(double(k::fastErfc(z)) / std::erfc(double(z)) - 1.0));
  EXPECT_LE(worst, 2.5e-6);
  EXPECT_EQ(k::fastErfc(std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(k::fastOnePlusErf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(k::fastOnePlusErf(std::numeric_limits<float>::infinity()), 2.0f);
  EXPECT_TRUE(std::isnan(k::fastOnePlusErf(std::numeric_limits<float>::quiet_NaN())));
}

// SiLU, SwiGLU and their gradients on [-10, 10], measured as GELU's. Measured 2026-11-26: values
// 1.7e-7, gradients 6.9e-7.
TEST(FastMath, SiluSwigluAndGradsAgainstDouble) {
  std::mt19937 rng(102);
  const int64_t n = 40000;
  VecF g = randVec(rng, n, -10.0f, 10.0f), u = randVec(rng, n, -3.0f, 3.0f), dy = randVec(rng, n, -1.0f, 1.0f);
  VecF y(n), dx(n), sw(n), dg(n), du(n);
  k::silu(g.data(), y.data(), n);
  k::siluGrad(g.data(), dy.data(), dx.data(), n);
  k::swiglu(g.data(), u.data(), sw.data(), n);
  k::swigluGrad(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
  VecD yr(n), dxr(n), swr(n), dgr(n), dur(n);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i], s = sigmoidD(gi), ds = s * (1.0 + gi * (1.0 - s));
    yr[i] = gi * s;
    dxr[i] = dy[i] * ds;
    swr[i] = gi * s * u[i];
    dgr[i] = dy[i] * u[i] * ds;
    dur[i] = dy[i] * gi * s;
  }
  EXPECT_LE(worstRel(y, yr, 1e-3), 1e-6);
  EXPECT_LE(worstRel(sw, swr, 1e-3), 1e-6);
  EXPECT_LE(worstRel(dx, dxr, 0.1), 2.5e-6);
  EXPECT_LE(worstRel(dg, dgr, 0.1), 2.5e-6);
  EXPECT_LE(worstRel(du, dur, 0.1), 2.5e-6);
}

// GeGLU y = gelu(g) * u and its gradient, both GELU forms, on g in [-8, 8] and u in [-3, 3], against
// double (the erf form's derivative: Phi(g) + g phi(g)); in place (y over g) gives the same values.
// Tolerances as GELU's and SwiGLU's (relative to |value| + 1e-3 and + 0.1). Measured 2026-11-28:
// y 7.0e-7 (tanh) / 7.1e-7 (erf: through erfc; 1 + erf in float lost 2.4e-4 to cancellation at
// g < -3), dgate 8.3e-7 / 7.0e-7, dup 1.6e-7 / 1.6e-7.
TEST(FastMath, GegluAndGradAgainstDouble) {
  std::mt19937 rng(103);
  const int64_t n = 40000;
  VecF g = randVec(rng, n, -8.0f, 8.0f), u = randVec(rng, n, -3.0f, 3.0f), dy = randVec(rng, n, -1.0f, 1.0f);
  for (bool exact : {false, true}) {
    VecF y(n), dg(n), du(n);
    k::geglu(g.data(), u.data(), y.data(), n, exact);
    k::gegluGrad(g.data(), u.data(), dy.data(), dg.data(), du.data(), n, exact);
    VecD yr(n), dgr(n), dur(n);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i];
      const double a = exact ? 0.5 * gi * (1.0 + std::erf(gi / std::sqrt(2.0))) : geluD(gi);
      const double slope =
          exact ? 0.5 * (1.0 + std::erf(gi / std::sqrt(2.0))) + gi * std::exp(-0.5 * gi * gi) / std::sqrt(2.0 * M_PI)
                : geluGradD(gi);
      yr[i] = a * u[i], dgr[i] = dy[i] * u[i] * slope, dur[i] = dy[i] * a;
    }
    EXPECT_LE(worstRel(y, yr, 1e-3), 2e-6) << (exact ? "erf" : "tanh");
    EXPECT_LE(worstRel(dg, dgr, 0.1), 2.5e-6) << (exact ? "erf" : "tanh");
    EXPECT_LE(worstRel(du, dur, 0.1), 1e-6) << (exact ? "erf" : "tanh");
    VecF inPlace = g;
    k::geglu(inPlace.data(), u.data(), inPlace.data(), n, exact);
    EXPECT_EQ(inPlace, y);
  }
}

// Rotary embeddings in both layouts against double: pair i of a head is (x[i], x[i+D/2]) (Hugging
// Face's rotate_half) or (x[2i], x[2i+1]) (interleaved: Meta's llama, llama2.c), rotated by
// a = f32(inv_freq[i]) * f32(t) and scaled; the inverse undoes it. The kernel's cos/sin are double's
// rounded to f32 and its products f32: errors relative to |y| + 1 (the inputs are of size ~1, and a
// rotation's outputs cancel), measured 2026-11-28: y 8.1e-8 (halves) / 1.0e-7 (interleaved), the
// round trip 1.3e-7 / 2.1e-7. A partial rotary (R = 4 of D = 8, GPT-NeoX's) rotates the first R
// elements of each head as a head of R and copies the rest exactly (also in place).
TEST(Rope, BothLayoutsAgainstDouble) {
  std::mt19937 rng(104);
  const int64_t B = 2, T = 9, H = 3, D = 8, C = H * D, n = B * T * C;
  VecF x = randVec(rng, n, -2.0f, 2.0f);
  const float s = 1.25f;
  for (int64_t R : {D, int64_t(4)})
    for (bool interleaved : {false, true}) {
      VecF inv(size_t(R / 2));
      for (int64_t i = 0; i < R / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(R)));
      VecF y(n), back(n), inplace = x;
      k::rope(x.data(), y.data(), B, T, C, D, inv.data(), s, false, interleaved, R);
      k::rope(y.data(), back.data(), B, T, C, D, inv.data(), s, true, interleaved, R);
      k::rope(inplace.data(), inplace.data(), B, T, C, D, inv.data(), s, false, interleaved, R);
      EXPECT_EQ(inplace, y);
      VecD want(n), again(n);
      for (int64_t e = 0; e < n; ++e) // the elements a partial rotary passes through
        want[size_t(e)] = x[size_t(e)], again[size_t(e)] = x[size_t(e)];
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < R / 2; ++i) {
              const int64_t base = (b * T + t) * C + h * D;
              const int64_t i1 = base + (interleaved ? 2 * i : i), i2 = i1 + (interleaved ? 1 : R / 2);
              const double a = double(inv[size_t(i)] * float(t)), c = std::cos(a) * s, sn = std::sin(a) * s;
              want[size_t(i1)] = x[size_t(i1)] * c - x[size_t(i2)] * sn;
              want[size_t(i2)] = x[size_t(i2)] * c + x[size_t(i1)] * sn;
              again[size_t(i1)] = double(x[size_t(i1)]) * s * s, again[size_t(i2)] = double(x[size_t(i2)]) * s * s;
            }
      const std::string what = std::string(interleaved ? "interleaved" : "halves") + " R=" + std::to_string(R);
      EXPECT_LE(worstRel(y, want, 1.0), 5e-7) << what;
      EXPECT_LE(worstRel(back, again, 1.0), 1e-6) << what; // R(-a) s R(a) s x
      if (R < D) {
        for (int64_t r = 0; r < n / D; ++r)
          for (int64_t i = R; i < D; ++i) {
            ASSERT_EQ(y[size_t(r * D + i)], x[size_t(r * D + i)]) << what;
          }
      }
    }
  VecF inv(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(D)));
  // The two layouts are the same rotation of a permuted head: halves(P x) = P interleaved(x).
  VecF yi(n), yh(n), px(n);
  auto perm = [&](const VecF &v, VecF &out) { // interleaved pair i -> (i, i + D/2)
    for (int64_t r = 0; r < n / D; ++r)
      for (int64_t i = 0; i < D / 2; ++i)
        out[size_t(r * D + i)] = v[size_t(r * D + 2 * i)],
                           out[size_t(r * D + i + D / 2)] = v[size_t(r * D + 2 * i + 1)];
  };
  k::rope(x.data(), yi.data(), B, T, C, D, inv.data(), s, false, true);
  perm(x, px);
  k::rope(px.data(), yh.data(), B, T, C, D, inv.data(), s, false, false);
  VecF pyi(n);
  perm(yi, pyi);
  EXPECT_EQ(pyi, yh);
}

// ------------------------------------------------------------------------------------------------
// Attention on the general geometry: q [B,T,H*D], k and v [B,T,Hkv*D] (query head h reads kv head
// h / (H/Hkv)), out [B,T,H*D]; keys j with t - window < j <= t (window 0: all j <= t).

namespace {
struct AttnCase {
  int64_t B, T, H, Hkv, D, window;
  double softcap = 0; // > 0: scores capped as c tanh(s / c) (Gemma 2)
};

bigc::rt::AttentionGeometry geometry(const AttnCase &c) {
  bigc::rt::AttentionGeometry g;
  g.B = c.B, g.T = c.T, g.H = c.H, g.D = c.D, g.Hkv = c.Hkv;
  g.sq = g.so = c.H * c.D, g.skv = c.Hkv * c.D;
  g.group = c.H / c.Hkv, g.window = c.window;
  g.scale = float(1.0 / std::sqrt(double(c.D)));
  g.softcap = float(c.softcap);
  return g;
}

// Forward and backward in double with the whole score matrix of each (b, h).
void attentionGeomRef(const AttnCase &c, const VecF &q, const VecF &kk, const VecF &v, const VecF &dout, VecD &out,
                      VecD &lse, VecD &dq, VecD &dk, VecD &dv) {
  const int64_t B = c.B, T = c.T, H = c.H, D = c.D, sq = H * D, skv = c.Hkv * D, group = H / c.Hkv;
  const double sc = 1.0 / std::sqrt(double(D));
  out.assign(B * T * sq, 0.0), lse.assign(B * H * T, 0.0);
  dq.assign(B * T * sq, 0.0), dk.assign(B * T * skv, 0.0), dv.assign(B * T * skv, 0.0);
  VecD P(T * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / group;
      auto Q = [&](int64_t t, int64_t d) { return double(q[(b * T + t) * sq + h * D + d]); };
      auto K = [&](int64_t t, int64_t d) { return double(kk[(b * T + t) * skv + kh * D + d]); };
      auto V = [&](int64_t t, int64_t d) { return double(v[(b * T + t) * skv + kh * D + d]); };
      auto dO = [&](int64_t t, int64_t d) { return double(dout[(b * T + t) * sq + h * D + d]); };
      auto seen = [&](int64_t t, int64_t j) { return j <= t && (c.window == 0 || j > t - c.window); };
      for (int64_t t = 0; t < T; ++t) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += Q(t, d) * K(j, d);
          if (c.softcap > 0) s = c.softcap * std::tanh(s * sc / c.softcap) / sc;
          P[t * T + j] = seen(t, j) ? s * sc : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, P[t * T + j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(P[t * T + j] - mx);
        for (int64_t j = 0; j < T; ++j) P[t * T + j] = std::exp(P[t * T + j] - mx) / sum;
        lse[(b * H + h) * T + t] = mx + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < T; ++j) o += P[t * T + j] * V(j, d);
          out[(b * T + t) * sq + h * D + d] = o;
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        VecD dp(T);
        double Dt = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += dO(t, d) * V(j, d);
          dp[j] = s;
          Dt += P[t * T + j] * s;
        }
        for (int64_t j = 0; j < T; ++j) {
          const double p = P[t * T + j];
          double ds = p * (dp[j] - Dt);
          if (p == 0.0) continue;
          if (c.softcap > 0) { // d(c tanh(u / c))/du = 1 - tanh^2
            double s = 0.0;
            for (int64_t d = 0; d < D; ++d) s += Q(t, d) * K(j, d);
            const double th = std::tanh(s * sc / c.softcap);
            ds *= 1.0 - th * th;
          }
          for (int64_t d = 0; d < D; ++d) {
            dq[(b * T + t) * sq + h * D + d] += sc * ds * K(j, d);
            dk[(b * T + j) * skv + kh * D + d] += sc * ds * Q(t, d);
            dv[(b * T + j) * skv + kh * D + d] += p * dO(t, d);
          }
        }
      }
    }
}

// Kernel against the reference; errors relative to each output's largest magnitude. Measured
// 2026-11-26 over the cases below: out 4.0e-7 (head size 128), dq, dk, dv 3.6e-7.
void checkAttention(const AttnCase &c, unsigned seed) {
  std::mt19937 rng(seed);
  const int64_t nq = c.B * c.T * c.H * c.D, nkv = c.B * c.T * c.Hkv * c.D;
  VecF q = randVec(rng, nq, -2.0f, 2.0f), kk = randVec(rng, nkv, -2.0f, 2.0f), v = randVec(rng, nkv, -1.0f, 1.0f);
  VecF dout = randVec(rng, nq, -1.0f, 1.0f);
  const auto g = geometry(c);
  VecF out(nq, 42.0f), lse(c.B * c.H * c.T, 42.0f), dq(nq, 7.0f), dk(nkv, 7.0f), dv(nkv, 7.0f);
  k::attention(g, q.data(), kk.data(), v.data(), out.data(), lse.data());
  k::attentionGrad(g, dout.data(), q.data(), kk.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                   dv.data());
  VecD outR, lseR, dqR, dkR, dvR;
  attentionGeomRef(c, q, kk, v, dout, outR, lseR, dqR, dkR, dvR);
  const std::string what = "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                           " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D) +
                           " window=" + std::to_string(c.window) + " softcap=" + std::to_string(c.softcap);
  // dq and dk are exactly 0 where a row sees one key (window 1, T = 1): rounding noise there is
  // measured against 1, the size of the other gradients.
  EXPECT_LE(worstRel(out, outR, maxAbs(outR)), 1.5e-6) << what;
  EXPECT_LE(worstRel(lse, lseR, maxAbs(lseR)), 1.5e-6) << what;
  EXPECT_LE(worstRel(dq, dqR, std::max(1.0, maxAbs(dqR))), 1.5e-6) << what;
  EXPECT_LE(worstRel(dk, dkR, std::max(1.0, maxAbs(dkR))), 1.5e-6) << what;
  EXPECT_LE(worstRel(dv, dvR, maxAbs(dvR)), 1.5e-6) << what;
}
} // namespace

// Several query and key blocks of 64 (T not a multiple), the last block short.
TEST(KernelAttentionBlocked, GroupedQueryHeads) {
  checkAttention({2, 150, 4, 2, 16, 0}, 201);
  checkAttention({1, 130, 6, 1, 8, 0}, 202); // multi-query: one kv head for all
}

// Windows shorter than a block, equal to it and spanning blocks: whole key blocks before the window
// are skipped, partly seen ones masked.
TEST(KernelAttentionBlocked, SlidingWindow) {
  checkAttention({1, 200, 2, 1, 8, 37}, 203);
  checkAttention({2, 192, 2, 2, 16, 64}, 204);
  checkAttention({1, 260, 4, 2, 8, 100}, 205);
  checkAttention({1, 70, 2, 2, 8, 1}, 206); // each row sees only itself
}

// Soft-capped scores (Gemma 2's attn_logit_softcapping, c tanh(s / c)): a cap that binds (2.0,
// under scores of up to ~|q||k|/sqrt(D) ~ 4-9 here) and one that hardly does (50, Gemma 2's own),
// grouped and with a sliding window (Gemma 2's alternate layers).
TEST(KernelAttentionBlocked, SoftCappedScores) {
  checkAttention({2, 150, 4, 2, 16, 0, 2.0}, 209);
  checkAttention({1, 130, 4, 2, 16, 37, 2.0}, 210);
  checkAttention({1, 70, 2, 1, 32, 0, 50.0}, 211);
}

// A head size of 128 (LLaMA) and one row.
TEST(KernelAttentionBlocked, WideHeadsAndOneRow) {
  checkAttention({1, 96, 2, 1, 128, 0}, 207);
  checkAttention({2, 1, 2, 2, 16, 0}, 208);
}

// ------------------------------------------------------------------------------------------------
// Context parallelism's attention (ring_attention, ring_attention_grad): a sequence of C x T tokens
// split over C ranks in 2C chunks (rank c: chunks c and 2C-1-c); each rank's queries meet the key
// blocks of every rank in the ring's order, merged, and the block gradients summed per block's
// owner; against the double reference of the whole sequence's attention (causal, a window, a
// cap). Measured 2026-11-28 over the cases below: out and lse 9.8e-8, gradients 1.4e-7 relative to
// each tensor's largest (the kernel sums in double); bounds 5e-7.
namespace {
void checkRing(const AttnCase &whole, int64_t C, unsigned seed) {
  std::mt19937 rng(seed);
  const int64_t B = whole.B, Tw = whole.T, T = Tw / C, H = whole.H, Hkv = whole.Hkv, D = whole.D;
  const int64_t nq = B * Tw * H * D, nkv = B * Tw * Hkv * D;
  VecF q = randVec(rng, nq, -2.0f, 2.0f), kk = randVec(rng, nkv, -2.0f, 2.0f), v = randVec(rng, nkv, -1.0f, 1.0f);
  VecF dout = randVec(rng, nq, -1.0f, 1.0f);
  VecD outR, lseR, dqR, dkR, dvR;
  attentionGeomRef(whole, q, kk, v, dout, outR, lseR, dqR, dkR, dvR);
  // Rank c's rows (token t at position cpPosition(t, T, C, c)) of a [B, Tw, W] tensor, and back.
  auto local = [&](const VecF &x, int64_t W, int64_t c) {
    VecF y(static_cast<size_t>(B * T * W));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&y[size_t((b * T + t) * W)], &x[size_t((b * Tw + bigc::format::cpPosition(t, T, C, c)) * W)],
                    size_t(W) * sizeof(float));
    return y;
  };
  AttnCase lc = whole;
  lc.T = T;
  const auto g = geometry(lc);
  VecF out(nq), lse(size_t(B * H * Tw)), dq(nq), dk(nkv), dv(nkv);
  std::vector<VecF> outs(static_cast<size_t>(C)), lses(static_cast<size_t>(C));
  std::vector<int64_t> qpos(static_cast<size_t>(T)), kpos(static_cast<size_t>(T));
  for (int64_t c = 0; c < C; ++c) { // the forward: C blocks merged
    const VecF ql = local(q, H * D, c);
    VecF o, l, oPrev, lPrev;
    for (int64_t s = 0; s < C; ++s) {
      const int64_t src = ((c - s) % C + C) % C;
      for (int64_t t = 0; t < T; ++t)
        qpos[size_t(t)] = bigc::format::cpPosition(t, T, C, c),
        kpos[size_t(t)] = bigc::format::cpPosition(t, T, C, src);
      o.assign(ql.size(), 9.0f), l.assign(size_t(B * H * T), 9.0f);
      k::ringAttention(g, ql.data(), local(kk, Hkv * D, src).data(), local(v, Hkv * D, src).data(), qpos.data(),
                       kpos.data(), s ? oPrev.data() : nullptr, s ? lPrev.data() : nullptr, o.data(), l.data());
      oPrev = o, lPrev = l;
    }
    outs[size_t(c)] = o, lses[size_t(c)] = l;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = bigc::format::cpPosition(t, T, C, c);
        std::memcpy(&out[size_t((b * Tw + p) * H * D)], &o[size_t((b * T + t) * H * D)], size_t(H * D) * sizeof(float));
        for (int64_t h = 0; h < H; ++h) lse[size_t((b * H + h) * Tw + p)] = l[size_t((b * H + h) * T + t)];
      }
  }
  std::vector<VecF> dkl(static_cast<size_t>(C), VecF(static_cast<size_t>(B * T * Hkv * D), 0.0f)),
      dvl = dkl;                    // per block's owner
  for (int64_t c = 0; c < C; ++c) { // the backward: each block's part, summed where the block belongs
    const VecF ql = local(q, H * D, c), dol = local(dout, H * D, c);
    VecF dqAcc;
    for (int64_t s = 0; s < C; ++s) {
      const int64_t src = ((c - s) % C + C) % C;
      for (int64_t t = 0; t < T; ++t)
        qpos[size_t(t)] = bigc::format::cpPosition(t, T, C, c),
        kpos[size_t(t)] = bigc::format::cpPosition(t, T, C, src);
      VecF dqs(ql.size()), dks(size_t(B * T * Hkv * D)), dvs(dks.size());
      k::ringAttentionGrad(g, dol.data(), ql.data(), local(kk, Hkv * D, src).data(), local(v, Hkv * D, src).data(),
                           outs[size_t(c)].data(), lses[size_t(c)].data(), qpos.data(), kpos.data(),
                           s ? dqAcc.data() : nullptr, dkl[size_t(src)].data(), dvl[size_t(src)].data(), dqs.data(),
                           dks.data(), dvs.data());
      dqAcc = dqs, dkl[size_t(src)] = dks, dvl[size_t(src)] = dvs;
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&dq[size_t((b * Tw + bigc::format::cpPosition(t, T, C, c)) * H * D)],
                    &dqAcc[size_t((b * T + t) * H * D)], size_t(H * D) * sizeof(float));
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = bigc::format::cpPosition(t, T, C, c), W = Hkv * D;
        std::memcpy(&dk[size_t((b * Tw + p) * W)], &dkl[size_t(c)][size_t((b * T + t) * W)], size_t(W) * sizeof(float));
        std::memcpy(&dv[size_t((b * Tw + p) * W)], &dvl[size_t(c)][size_t((b * T + t) * W)], size_t(W) * sizeof(float));
      }
  const std::string what = "C=" + std::to_string(C) + " B=" + std::to_string(B) + " T=" + std::to_string(Tw) +
                           " window=" + std::to_string(whole.window) + " softcap=" + std::to_string(whole.softcap);
  EXPECT_LE(worstRel(out, outR, maxAbs(outR)), 5e-7) << what;
  EXPECT_LE(worstRel(lse, lseR, maxAbs(lseR)), 5e-7) << what;
  EXPECT_LE(worstRel(dq, dqR, std::max(1.0, maxAbs(dqR))), 5e-7) << what;
  EXPECT_LE(worstRel(dk, dkR, std::max(1.0, maxAbs(dkR))), 5e-7) << what;
  EXPECT_LE(worstRel(dv, dvR, maxAbs(dvR)), 5e-7) << what;
}
} // namespace

TEST(KernelRingAttention, BlocksMergeToTheWholeSequence) {
  checkRing({2, 64, 4, 2, 16, 0}, 2, 301);
  checkRing({1, 96, 4, 1, 8, 0}, 4, 302);       // multi-query, 4 ranks
  checkRing({2, 64, 4, 2, 16, 11}, 4, 303);     // a window across the chunks
  checkRing({1, 48, 2, 2, 16, 0, 2.0}, 3, 304); // a binding cap, 3 ranks
}

// ------------------------------------------------------------------------------------------------
// A mixture of experts (bigc.moe, Mixtral's block) against a double reference of its definition,
// and its gradient against central differences of that reference (h = 1e-5 in double): the loss
// L = sum(y * g) for a fixed g, through the router's softmax and top-k (the choice does not change
// under h), the normalisation of the chosen weights (Mixtral) or not (Qwen-MoE), and each SwiGLU
// expert (k = 1 normalised: a weight of 1, the router's gradient exactly 0). Measured 2026-11-28:
// y 8.6e-8, gradients 1.8e-7 relative to each tensor's largest; bounds 5e-7 and 1e-6.
namespace {
struct MoeCase {
  int64_t N, C, E, F, k;
  bool normalize;
};

VecD moeRef(const MoeCase &c, const VecD &x, const VecD &r, const VecD &gu, const VecD &dn) {
  const int64_t N = c.N, C = c.C, E = c.E, F = c.F;
  VecD y(size_t(N * C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    VecD p(static_cast<size_t>(E));
    double mx = -1e300, s = 0;
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t i = 0; i < C; ++i) l += x[size_t(n * C + i)] * r[size_t(e * C + i)];
      p[size_t(e)] = l, mx = std::max(mx, l);
    }
    for (double &v : p) s += (v = std::exp(v - mx));
    for (double &v : p) v /= s;
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    double tot = 0;
    for (int64_t j = 0; j < c.k; ++j) tot += p[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t e = order[size_t(j)];
      const double w = c.normalize ? p[size_t(e)] / tot : p[size_t(e)];
      VecD h(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < C; ++i) {
          g += gu[size_t((e * 2 * F + f) * C + i)] * x[size_t(n * C + i)];
          u += gu[size_t((e * 2 * F + F + f) * C + i)] * x[size_t(n * C + i)];
        }
        h[size_t(f)] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t i = 0; i < C; ++i) {
        double o = 0;
        for (int64_t f = 0; f < F; ++f) o += dn[size_t((e * C + i) * F + f)] * h[size_t(f)];
        y[size_t(n * C + i)] += w * o;
      }
    }
  }
  return y;
}
} // namespace

TEST(KernelMoe, AgainstDoubleAndFiniteDifferences) {
  for (const MoeCase c : {MoeCase{7, 8, 4, 5, 2, true}, MoeCase{9, 6, 5, 3, 3, false}, MoeCase{4, 8, 3, 4, 1, true}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " E=" + std::to_string(c.E) + " k=" + std::to_string(c.k) +
                 (c.normalize ? " normalize" : ""));
    std::mt19937 rng(unsigned(300 + c.N));
    const int64_t N = c.N, C = c.C, E = c.E, F = c.F;
    VecF x = randVec(rng, N * C, -1.0f, 1.0f), r = randVec(rng, E * C, -1.0f, 1.0f);
    VecF gu = randVec(rng, E * 2 * F * C, -0.5f, 0.5f), dn = randVec(rng, E * C * F, -0.5f, 0.5f);
    VecF g = randVec(rng, N * C, -1.0f, 1.0f);
    VecF y(size_t(N * C)), dx(x.size(), 7.0f), dr(r.size(), 7.0f), dgu(gu.size(), 7.0f), ddn(dn.size(), 7.0f);
    k::moe(x.data(), r.data(), gu.data(), dn.data(), y.data(), N, C, E, F, c.k, c.normalize);
    k::moeGrad(g.data(), x.data(), r.data(), gu.data(), dn.data(), dx.data(), dr.data(), dgu.data(), ddn.data(), N, C,
               E, F, c.k, c.normalize);
    auto D = [](const VecF &v) { return VecD(v.begin(), v.end()); };
    VecD xd = D(x), rd = D(r), gud = D(gu), dnd = D(dn), gd = D(g);
    const VecD yR = moeRef(c, xd, rd, gud, dnd);
    EXPECT_LE(worstRel(y, yR, maxAbs(yR)), 5e-7);
    auto loss = [&]() {
      const VecD yy = moeRef(c, xd, rd, gud, dnd);
      double s = 0;
      for (size_t i = 0; i < yy.size(); ++i) s += yy[i] * gd[i];
      return s;
    };
    auto fd = [&](VecD &v) {
      VecD out(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i], h = 1e-5;
        v[i] = keep + h;
        const double lp = loss();
        v[i] = keep - h;
        const double lm = loss();
        v[i] = keep;
        out[i] = (lp - lm) / (2 * h);
      }
      return out;
    };
    const VecD fx = fd(xd), fr = fd(rd), fgu = fd(gud), fdn = fd(dnd);
    EXPECT_LE(worstRel(dx, fx, maxAbs(fx)), 1e-6) << "dx";
    EXPECT_LE(worstRel(dr, fr, maxAbs(fr)), 1e-6) << "drouter";
    EXPECT_LE(worstRel(dgu, fgu, maxAbs(fgu)), 1e-6) << "dgate_up";
    EXPECT_LE(worstRel(ddn, fdn, maxAbs(fdn)), 1e-6) << "ddown";
  }
}
