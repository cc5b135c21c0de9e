// CPU backend kernels (runtime/backends/cpu/Kernels.cpp) against naive references written here:
// forward kernels against straightforward loops (double precision where it matters), gradient
// kernels against central finite differences of a double-precision reference forward with the
// loss L = sum(r * f(x)) for a random r. Sizes are chosen so that both the serial and the OpenMP
// paths of the kernels run (the kernels go parallel above 2^14 elements).
#include "bigc/Runtime/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace k = bigc::rt::cpu;

namespace {

using VecF = std::vector<float>;
using VecD = std::vector<double>;

VecF randVec(std::mt19937 &rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  VecF v(n);
  for (auto &x : v) x = d(rng);
  return v;
}

VecD toD(const VecF &v) { return VecD(v.begin(), v.end()); }

// |got - want| <= atol + rtol * |want| element by element; reports the first few mismatches.
template <typename A, typename B>
::testing::AssertionResult allClose(const A &got, const B &want, double rtol, double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int bad = 0;
  ::testing::AssertionResult res = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      if (bad < 5) res << "[" << i << "] got " << g << " want " << w << "; ";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return res << bad << " of " << got.size() << " elements differ";
}

double maxAbs(const VecD &v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Central finite differences of a scalar function of x (double).
VecD numericGrad(const std::function<double(const VecD &)> &f, VecD x, double h = 1e-3) {
  VecD g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double dotD(const VecD &a, const VecD &b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Gradient check: analytic (float kernel) vs numeric (double reference), tolerance relative to the
// largest gradient magnitude plus a per-element relative part.
::testing::AssertionResult gradClose(const VecF &analytic, const VecD &numeric, double rtol = 2e-3) {
  const double scale = std::max(maxAbs(numeric), 1e-6);
  return allClose(analytic, numeric, rtol, rtol * scale);
}

// ------------------------------------------------------------------------------------------------
// Reference implementations (double or templated).

template <typename T>
void matmulRef(const T *a, const T *b, T *c, int64_t batch, int64_t M, int64_t N, int64_t K, bool tA, bool tB,
               int64_t sA, int64_t sB, int64_t sC) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    const T *A = a + bi * sA;
    const T *Bm = b + bi * sB;
    T *Cm = c + bi * sC;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0.0;
        for (int64_t kk = 0; kk < K; ++kk) {
          const double av = tA ? A[kk * M + i] : A[i * K + kk];
          const double bv = tB ? Bm[j * K + kk] : Bm[kk * N + j];
          s += av * bv;
        }
        Cm[i * N + j] = static_cast<T>(s);
      }
  }
}

void layernormRef(const VecD &x, const VecD &w, const VecD &b, VecD &y, VecD &mean, VecD &rstd, int64_t N, int64_t C,
                  double eps) {
  y.assign(N * C, 0.0);
  mean.assign(N, 0.0);
  rstd.assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0.0;
    for (int64_t j = 0; j < C; ++j) m += x[n * C + j];
    m /= C;
    double v = 0.0;
    for (int64_t j = 0; j < C; ++j) v += (x[n * C + j] - m) * (x[n * C + j] - m);
    v /= C;
    const double rs = 1.0 / std::sqrt(v + eps);
    for (int64_t j = 0; j < C; ++j) y[n * C + j] = (x[n * C + j] - m) * rs * w[j] + b[j];
    mean[n] = m;
    rstd[n] = rs;
  }
}

double geluRef(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

// Naive attention: the full T×T score matrix with an explicit causal mask.
void attentionRef(const VecD &qkv, VecD &out, VecD &lse, int64_t B, int64_t T, int64_t C, int64_t H) {
  const int64_t hs = C / H;
  const double sc = 1.0 / std::sqrt(static_cast<double>(hs));
  out.assign(B * T * C, 0.0);
  lse.assign(B * H * T, 0.0);
  VecD S(T * T), P(T * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < T; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < hs; ++d)
            s += qkv[(b * T + t) * 3 * C + h * hs + d] * qkv[(b * T + j) * 3 * C + C + h * hs + d];
          S[t * T + j] = j > t ? -std::numeric_limits<double>::infinity() : s * sc;
        }
      for (int64_t t = 0; t < T; ++t) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) mx = std::max(mx, S[t * T + j]);
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(S[t * T + j] - mx);
        for (int64_t j = 0; j < T; ++j) P[t * T + j] = std::exp(S[t * T + j] - mx) / sum;
        lse[(b * H + h) * T + t] = mx + std::log(sum);
        for (int64_t d = 0; d < hs; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < T; ++j) o += P[t * T + j] * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
          out[(b * T + t) * C + h * hs + d] = o;
        }
      }
    }
}

// Naive attention backward with the full T×T probability matrix (double).
VecD attentionGradRef(const VecD &dout, const VecD &qkv, int64_t B, int64_t T, int64_t C, int64_t H) {
  const int64_t hs = C / H;
  const double sc = 1.0 / std::sqrt(static_cast<double>(hs));
  VecD out, lse;
  attentionRef(qkv, out, lse, B, T, C, H);
  VecD dqkv(B * T * 3 * C, 0.0), P(T * T), dS(T * T);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return (b * T + t) * 3 * C + part * C + h * hs + d;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < T; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < hs; ++d) s += qkv[at(b, t, 0, h, d)] * qkv[at(b, j, 1, h, d)];
          P[t * T + j] = j > t ? 0.0 : std::exp(s * sc - lse[(b * H + h) * T + t]);
        }
      for (int64_t t = 0; t < T; ++t) {
        // dP = dout vᵀ; dS = P (dP - sum_j P dP)
        double rowSum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          double dp = 0.0;
          for (int64_t d = 0; d < hs; ++d) dp += dout[(b * T + t) * C + h * hs + d] * qkv[at(b, j, 2, h, d)];
          dS[t * T + j] = dp;
          rowSum += P[t * T + j] * dp;
        }
        for (int64_t j = 0; j < T; ++j) dS[t * T + j] = P[t * T + j] * (dS[t * T + j] - rowSum);
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < hs; ++d) {
            dqkv[at(b, t, 0, h, d)] += sc * dS[t * T + j] * qkv[at(b, j, 1, h, d)];
            dqkv[at(b, j, 1, h, d)] += sc * dS[t * T + j] * qkv[at(b, t, 0, h, d)];
            dqkv[at(b, j, 2, h, d)] += P[t * T + j] * dout[(b * T + t) * C + h * hs + d];
          }
    }
  return dqkv;
}

double crossEntropyRef(const VecD &logits, const std::vector<int32_t> &tg, int64_t N, int64_t V) {
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[n * V + j]);
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[n * V + j] - mx);
    total += std::log(s) + mx - logits[n * V + tg[n]];
  }
  return total / N;
}

std::vector<int32_t> randIds(std::mt19937 &rng, size_t n, int32_t V) {
  std::uniform_int_distribution<int32_t> d(0, V - 1);
  std::vector<int32_t> ids(n);
  for (auto &i : ids) i = d(rng);
  return ids;
}

} // namespace

// ------------------------------------------------------------------------------------------------
// Embedding

TEST(KernelEmbedding, ForwardMatchesReference) {
  std::mt19937 rng(1);
  const int64_t V = 50, C = 37, N = 600; // N*C > 2^14: parallel path
  VecF table = randVec(rng, V * C);
  auto ids = randIds(rng, N, V);
  ids[0] = 0;
  ids[1] = V - 1;
  VecF y(N * C, -7.0f);
  EXPECT_EQ(k::embedding(table.data(), ids.data(), y.data(), N, V, C), -1);
  VecF ref(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < C; ++j) ref[n * C + j] = table[ids[n] * C + j];
  EXPECT_TRUE(allClose(y, ref, 0.0, 0.0));
}

TEST(KernelEmbedding, BadIdReportsFirstBadIndex) {
  const int64_t V = 4, C = 3;
  VecF table(V * C, 1.0f), y(5 * C, 0.0f);
  std::vector<int32_t> ids = {0, 3, 4, 1, -1};
  EXPECT_EQ(k::embedding(table.data(), ids.data(), y.data(), 5, V, C), 2);
  ids = {0, 3, -1, 1, 9};
  EXPECT_EQ(k::embedding(table.data(), ids.data(), y.data(), 5, V, C), 2);
  ids = {0, 3, 2, 1, V};
  EXPECT_EQ(k::embedding(table.data(), ids.data(), y.data(), 5, V, C), 4);
  ids = {0, 3, 2, 1, V - 1};
  EXPECT_EQ(k::embedding(table.data(), ids.data(), y.data(), 5, V, C), -1);
}

TEST(KernelEmbedding, GradMatchesReferenceAndOverwrites) {
  std::mt19937 rng(2);
  const int64_t V = 40, C = 70, N = 300; // repeated ids; several column blocks
  VecF dy = randVec(rng, N * C);
  auto ids = randIds(rng, N, V);
  ids[5] = ids[6] = ids[7] = 3;
  VecF dtable(V * C, 123.0f); // must be overwritten, not accumulated into
  k::embeddingGrad(dy.data(), ids.data(), dtable.data(), N, V, C);
  VecD ref(V * C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < C; ++j) ref[ids[n] * C + j] += dy[n * C + j];
  EXPECT_TRUE(allClose(dtable, ref, 1e-5, 1e-5));
}

TEST(KernelEmbedding, GradFiniteDifference) {
  std::mt19937 rng(3);
  const int64_t V = 6, C = 5, N = 9;
  VecF table = randVec(rng, V * C);
  auto ids = randIds(rng, N, V);
  ids[1] = ids[2] = 4;
  VecF r = randVec(rng, N * C);
  VecF dtable(V * C);
  k::embeddingGrad(r.data(), ids.data(), dtable.data(), N, V, C);
  VecD rD = toD(r);
  auto loss = [&](const VecD &t) {
    double L = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < C; ++j) L += rD[n * C + j] * t[ids[n] * C + j];
    return L;
  };
  EXPECT_TRUE(gradClose(dtable, numericGrad(loss, toD(table))));
}

// ------------------------------------------------------------------------------------------------
// Matmul

TEST(KernelMatmul, AllTransposeCombos2D) {
  std::mt19937 rng(4);
  const int64_t M = 7, N = 5, K = 11;
  for (int tA = 0; tA < 2; ++tA)
    for (int tB = 0; tB < 2; ++tB) {
      VecF a = randVec(rng, M * K), b = randVec(rng, K * N);
      VecF c(M * N, 99.0f), ref(M * N);
      k::matmul(a.data(), b.data(), c.data(), 1, M, N, K, tA, tB, 0, 0, 0);
      matmulRef(a.data(), b.data(), ref.data(), 1, M, N, K, tA, tB, 0, 0, 0);
      EXPECT_TRUE(allClose(c, ref, 1e-5, 1e-5)) << "transA=" << tA << " transB=" << tB;
    }
}

TEST(KernelMatmul, BatchedStridesAndBroadcast) {
  std::mt19937 rng(5);
  const int64_t batch = 3, M = 4, N = 6, K = 5;
  for (int tA = 0; tA < 2; ++tA)
    for (int tB = 0; tB < 2; ++tB)
      for (int mode = 0; mode < 3; ++mode) {
        // mode 0: both batched; 1: b broadcast (stride 0); 2: a broadcast (stride 0).
        // Batched operands are given a padded stride (> M*K) to check strides are honoured.
        const int64_t sA = mode == 2 ? 0 : M * K + 3;
        const int64_t sB = mode == 1 ? 0 : K * N + 2;
        const int64_t sC = M * N + 1;
        VecF a = randVec(rng, (batch - 1) * sA + M * K), b = randVec(rng, (batch - 1) * sB + K * N);
        VecF c((batch - 1) * sC + M * N, 0.5f), ref = c;
        k::matmul(a.data(), b.data(), c.data(), batch, M, N, K, tA, tB, sA, sB, sC);
        matmulRef(a.data(), b.data(), ref.data(), batch, M, N, K, tA, tB, sA, sB, sC);
        EXPECT_TRUE(allClose(c, ref, 1e-5, 1e-5)) << "transA=" << tA << " transB=" << tB << " mode=" << mode;
      }
}

TEST(KernelMatmul, LargeMatchesReference) {
  std::mt19937 rng(6);
  const int64_t M = 64, N = 96, K = 130;
  VecF a = randVec(rng, M * K), b = randVec(rng, K * N), c(M * N), ref(M * N);
  k::matmul(a.data(), b.data(), c.data(), 1, M, N, K, false, true, 0, 0, 0);
  matmulRef(a.data(), b.data(), ref.data(), 1, M, N, K, false, true, 0, 0, 0);
  EXPECT_TRUE(allClose(c, ref, 1e-5, 1e-4));
}

// Gradients of c = op(a) @ op(b) expressed with matmul itself (as the compiler's autodiff does):
//   plain:   da = dc @ bᵀ (b, transB), db = aᵀ @ dc (a, transA)
//   linear:  c = x @ wᵀ, w stored [N,K]: dx = dc @ w, dw = dcᵀ @ x (dc, transA)
TEST(KernelMatmul, GradientsViaTransposesFiniteDifference) {
  std::mt19937 rng(7);
  const int64_t M = 4, N = 3, K = 5;
  VecF a = randVec(rng, M * K), b = randVec(rng, K * N), w = randVec(rng, N * K), r = randVec(rng, M * N);
  VecD rD = toD(r);
  {
    VecF da(M * K), db(K * N);
    k::matmul(r.data(), b.data(), da.data(), 1, M, K, N, false, true, 0, 0, 0);
    k::matmul(a.data(), r.data(), db.data(), 1, K, N, M, true, false, 0, 0, 0);
    VecD bD = toD(b), aD = toD(a);
    auto lossA = [&](const VecD &x) {
      VecD c(M * N);
      matmulRef(x.data(), bD.data(), c.data(), 1, M, N, K, false, false, 0, 0, 0);
      return dotD(rD, c);
    };
    auto lossB = [&](const VecD &x) {
      VecD c(M * N);
      matmulRef(aD.data(), x.data(), c.data(), 1, M, N, K, false, false, 0, 0, 0);
      return dotD(rD, c);
    };
    EXPECT_TRUE(gradClose(da, numericGrad(lossA, aD)));
    EXPECT_TRUE(gradClose(db, numericGrad(lossB, bD)));
  }
  {
    VecF dx(M * K), dw(N * K);
    k::matmul(r.data(), w.data(), dx.data(), 1, M, K, N, false, false, 0, 0, 0);
    k::matmul(r.data(), a.data(), dw.data(), 1, N, K, M, true, false, 0, 0, 0);
    VecD wD = toD(w), xD = toD(a);
    auto lossX = [&](const VecD &x) {
      VecD c(M * N);
      matmulRef(x.data(), wD.data(), c.data(), 1, M, N, K, false, true, 0, 0, 0);
      return dotD(rD, c);
    };
    auto lossW = [&](const VecD &ww) {
      VecD c(M * N);
      matmulRef(xD.data(), ww.data(), c.data(), 1, M, N, K, false, true, 0, 0, 0);
      return dotD(rD, c);
    };
    EXPECT_TRUE(gradClose(dx, numericGrad(lossX, xD)));
    EXPECT_TRUE(gradClose(dw, numericGrad(lossW, wD)));
  }
}

// ------------------------------------------------------------------------------------------------
// Elementwise, reductions

TEST(KernelElementwise, AddMulScaleFill) {
  std::mt19937 rng(8);
  for (int64_t n : {int64_t(13), int64_t(40000)}) {
    VecF a = randVec(rng, n), b = randVec(rng, n), c(n), ref(n);
    k::add(a.data(), b.data(), c.data(), n);
    for (int64_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
    EXPECT_TRUE(allClose(c, ref, 0.0, 0.0)) << "add n=" << n;
    k::mul(a.data(), b.data(), c.data(), n);
    for (int64_t i = 0; i < n; ++i) ref[i] = a[i] * b[i];
    EXPECT_TRUE(allClose(c, ref, 0.0, 0.0)) << "mul n=" << n;
    k::scale(a.data(), c.data(), -2.5f, n);
    for (int64_t i = 0; i < n; ++i) ref[i] = -2.5f * a[i];
    EXPECT_TRUE(allClose(c, ref, 0.0, 0.0)) << "scale n=" << n;
    k::fill(c.data(), 3.25f, n);
    EXPECT_TRUE(allClose(c, VecF(n, 3.25f), 0.0, 0.0)) << "fill n=" << n;
  }
}

TEST(KernelElementwise, BiasAddAndReduceSum) {
  std::mt19937 rng(9);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {200, 101}}) {
    VecF x = randVec(rng, rows * cols), b = randVec(rng, cols), y(rows * cols), ref(rows * cols);
    k::biasAdd(x.data(), b.data(), y.data(), rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) ref[i * cols + j] = x[i * cols + j] + b[j];
    EXPECT_TRUE(allClose(y, ref, 0.0, 0.0)) << rows << "x" << cols;
    VecF s(cols, 77.0f);
    VecD sref(cols, 0.0);
    k::reduceSum(x.data(), s.data(), rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) sref[j] += x[i * cols + j];
    EXPECT_TRUE(allClose(s, sref, 1e-5, 1e-5)) << rows << "x" << cols;
  }
}

TEST(KernelElementwise, InPlaceAliasing) {
  std::mt19937 rng(10);
  for (int64_t n : {int64_t(17), int64_t(50000)}) {
    const VecF a0 = randVec(rng, n, -3.0f, 3.0f), b0 = randVec(rng, n, -3.0f, 3.0f);
    VecF ref(n), a, b;
    // add: c == a, c == b
    for (int64_t i = 0; i < n; ++i) ref[i] = a0[i] + b0[i];
    a = a0, b = b0;
    k::add(a.data(), b.data(), a.data(), n);
    EXPECT_TRUE(allClose(a, ref, 0.0, 0.0)) << "add c==a";
    a = a0, b = b0;
    k::add(a.data(), b.data(), b.data(), n);
    EXPECT_TRUE(allClose(b, ref, 0.0, 0.0)) << "add c==b";
    // mul
    for (int64_t i = 0; i < n; ++i) ref[i] = a0[i] * b0[i];
    a = a0, b = b0;
    k::mul(a.data(), b.data(), a.data(), n);
    EXPECT_TRUE(allClose(a, ref, 0.0, 0.0)) << "mul c==a";
    a = a0, b = b0;
    k::mul(a.data(), b.data(), b.data(), n);
    EXPECT_TRUE(allClose(b, ref, 0.0, 0.0)) << "mul c==b";
    // scale
    for (int64_t i = 0; i < n; ++i) ref[i] = 0.125f * a0[i];
    a = a0;
    k::scale(a.data(), a.data(), 0.125f, n);
    EXPECT_TRUE(allClose(a, ref, 0.0, 0.0)) << "scale y==x";
    // gelu
    VecF g(n);
    k::gelu(a0.data(), g.data(), n);
    a = a0;
    k::gelu(a.data(), a.data(), n);
    EXPECT_TRUE(allClose(a, g, 0.0, 0.0)) << "gelu y==x";
    // geluGrad: dx == x, dx == dy
    VecF gg(n);
    k::geluGrad(a0.data(), b0.data(), gg.data(), n);
    a = a0, b = b0;
    k::geluGrad(a.data(), b.data(), a.data(), n);
    EXPECT_TRUE(allClose(a, gg, 0.0, 0.0)) << "geluGrad dx==x";
    a = a0, b = b0;
    k::geluGrad(a.data(), b.data(), b.data(), n);
    EXPECT_TRUE(allClose(b, gg, 0.0, 0.0)) << "geluGrad dx==dy";
  }
  // biasAdd: y == x
  const int64_t rows = 300, cols = 70;
  VecF x = randVec(rng, rows * cols), bias = randVec(rng, cols), ref(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ref[i * cols + j] = x[i * cols + j] + bias[j];
  k::biasAdd(x.data(), bias.data(), x.data(), rows, cols);
  EXPECT_TRUE(allClose(x, ref, 0.0, 0.0)) << "biasAdd y==x";
}

// ------------------------------------------------------------------------------------------------
// LayerNorm

TEST(KernelLayernorm, ForwardMatchesReference) {
  std::mt19937 rng(11);
  const int64_t N = 70, C = 300; // parallel path, several column blocks
  VecF x = randVec(rng, N * C, -2.0f, 3.0f), w = randVec(rng, C), b = randVec(rng, C);
  VecF y(N * C), mean(N), rstd(N);
  k::layernorm(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
  VecD yr, mr, rr;
  layernormRef(toD(x), toD(w), toD(b), yr, mr, rr, N, C, 1e-5);
  EXPECT_TRUE(allClose(y, yr, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(mean, mr, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(rstd, rr, 1e-5, 1e-6));
}

TEST(KernelLayernorm, EpsDominatesConstantRow) {
  const int64_t C = 8;
  VecF x(C, 2.0f), w(C, 1.0f), b(C, 0.5f), y(C), mean(1), rstd(1);
  k::layernorm(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), 1, C, 0.25f);
  EXPECT_FLOAT_EQ(mean[0], 2.0f);
  EXPECT_FLOAT_EQ(rstd[0], 2.0f); // 1/sqrt(0 + 0.25)
  EXPECT_TRUE(allClose(y, VecF(C, 0.5f), 0.0, 1e-7));
}

TEST(KernelLayernorm, GradFiniteDifference) {
  std::mt19937 rng(12);
  const int64_t N = 5, C = 7;
  const double eps = 1e-5;
  VecF x = randVec(rng, N * C, -2.0f, 2.0f), w = randVec(rng, C), b = randVec(rng, C), r = randVec(rng, N * C);
  VecF y(N * C), mean(N), rstd(N);
  k::layernorm(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, float(eps));
  VecF dx(N * C), dw(C, 55.0f), db(C, -55.0f); // dw, db are overwritten
  k::layernormGrad(r.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), N, C);
  VecD xD = toD(x), wD = toD(w), bD = toD(b), rD = toD(r);
  auto loss = [&](const VecD &xx, const VecD &ww, const VecD &bb) {
    VecD yy, m, rs;
    layernormRef(xx, ww, bb, yy, m, rs, N, C, eps);
    return dotD(rD, yy);
  };
  EXPECT_TRUE(gradClose(dx, numericGrad([&](const VecD &v) { return loss(v, wD, bD); }, xD)));
  EXPECT_TRUE(gradClose(dw, numericGrad([&](const VecD &v) { return loss(xD, v, bD); }, wD)));
  EXPECT_TRUE(gradClose(db, numericGrad([&](const VecD &v) { return loss(xD, wD, v); }, bD)));
}

TEST(KernelLayernorm, GradLargeMatchesSmallReference) {
  // The parallel, multi-block path against a double-precision analytic reference (llm.c form).
  std::mt19937 rng(13);
  const int64_t N = 90, C = 200;
  VecF x = randVec(rng, N * C, -2.0f, 2.0f), w = randVec(rng, C), b = randVec(rng, C), dy = randVec(rng, N * C);
  VecF y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 1.0f), db(C, 1.0f);
  k::layernorm(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
  k::layernormGrad(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), N, C);
  VecD yr, mr, rr;
  layernormRef(toD(x), toD(w), toD(b), yr, mr, rr, N, C, 1e-5);
  VecD dxr(N * C), dwr(C, 0.0), dbr(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mD = 0.0, mDN = 0.0;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[n * C + j] - mr[n]) * rr[n];
      const double dn = double(dy[n * C + j]) * w[j];
      mD += dn;
      mDN += dn * norm;
      dwr[j] += dy[n * C + j] * norm;
      dbr[j] += dy[n * C + j];
    }
    mD /= C;
    mDN /= C;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[n * C + j] - mr[n]) * rr[n];
      dxr[n * C + j] = rr[n] * (double(dy[n * C + j]) * w[j] - mD - norm * mDN);
    }
  }
  EXPECT_TRUE(allClose(dx, dxr, 1e-4, 1e-5));
  EXPECT_TRUE(allClose(dw, dwr, 1e-4, 1e-4));
  EXPECT_TRUE(allClose(db, dbr, 1e-4, 1e-4));
}

// ------------------------------------------------------------------------------------------------
// GELU

TEST(KernelGelu, ForwardMatchesReference) {
  std::mt19937 rng(14);
  const int64_t n = 30000;
  VecF x = randVec(rng, n, -6.0f, 6.0f), y(n);
  x[0] = 0.0f;
  k::gelu(x.data(), y.data(), n);
  VecD ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = geluRef(x[i]);
  EXPECT_TRUE(allClose(y, ref, 1e-5, 1e-6));
  EXPECT_EQ(y[0], 0.0f);
}

TEST(KernelGelu, GradFiniteDifference) {
  std::mt19937 rng(15);
  const int64_t n = 64;
  VecF x = randVec(rng, n, -4.0f, 4.0f), r = randVec(rng, n), dx(n);
  k::geluGrad(x.data(), r.data(), dx.data(), n);
  VecD rD = toD(r);
  auto loss = [&](const VecD &xx) {
    double L = 0.0;
    for (int64_t i = 0; i < n; ++i) L += rD[i] * geluRef(xx[i]);
    return L;
  };
  EXPECT_TRUE(gradClose(dx, numericGrad(loss, toD(x))));
}

// ------------------------------------------------------------------------------------------------
// Attention

namespace {
void checkAttentionForward(int64_t B, int64_t T, int64_t C, int64_t H, float amp, unsigned seed) {
  std::mt19937 rng(seed);
  VecF qkv = randVec(rng, B * T * 3 * C, -amp, amp);
  VecF out(B * T * C, 42.0f), lse(B * H * T, 42.0f);
  k::attention(qkv.data(), out.data(), lse.data(), B, T, C, H);
  VecD outR, lseR;
  attentionRef(toD(qkv), outR, lseR, B, T, C, H);
  EXPECT_TRUE(allClose(out, outR, 1e-4, 1e-5)) << "out B=" << B << " T=" << T << " C=" << C << " H=" << H;
  EXPECT_TRUE(allClose(lse, lseR, 1e-5, 1e-5)) << "lse B=" << B << " T=" << T << " C=" << C << " H=" << H;
}
} // namespace

TEST(KernelAttention, ForwardMatchesNaiveSmall) {
  checkAttentionForward(2, 5, 8, 2, 1.0f, 16);
  checkAttentionForward(1, 1, 4, 1, 1.0f, 17);
  checkAttentionForward(3, 7, 12, 3, 2.0f, 18);
}

TEST(KernelAttention, ForwardMatchesNaiveAcrossKeyBlocks) {
  // T larger than the kernel's key block (128), with large scores so that the running max moves
  // between blocks (online-softmax rescaling).
  checkAttentionForward(1, 300, 16, 2, 2.5f, 19);
  checkAttentionForward(2, 130, 8, 1, 1.0f, 20);
}

TEST(KernelAttention, GradFiniteDifference) {
  std::mt19937 rng(21);
  const int64_t B = 2, T = 5, C = 8, H = 2;
  VecF qkv = randVec(rng, B * T * 3 * C, -1.5f, 1.5f), r = randVec(rng, B * T * C);
  VecF out(B * T * C), lse(B * H * T);
  k::attention(qkv.data(), out.data(), lse.data(), B, T, C, H);
  VecF dqkv(B * T * 3 * C, 1234.0f); // must be overwritten
  k::attentionGrad(r.data(), qkv.data(), out.data(), lse.data(), dqkv.data(), B, T, C, H);
  VecD rD = toD(r);
  auto loss = [&](const VecD &x) {
    VecD o, l;
    attentionRef(x, o, l, B, T, C, H);
    return dotD(rD, o);
  };
  EXPECT_TRUE(gradClose(dqkv, numericGrad(loss, toD(qkv))));
}

TEST(KernelAttention, GradLargerFiniteDifference) {
  // Longer sequence (several dk/dv accumulations per key, parallel over (b,h) pairs).
  std::mt19937 rng(22);
  const int64_t B = 1, T = 40, C = 6, H = 3;
  VecF qkv = randVec(rng, B * T * 3 * C, -1.0f, 1.0f), r = randVec(rng, B * T * C);
  VecF out(B * T * C), lse(B * H * T);
  k::attention(qkv.data(), out.data(), lse.data(), B, T, C, H);
  VecF dqkv(B * T * 3 * C, -5.0f);
  k::attentionGrad(r.data(), qkv.data(), out.data(), lse.data(), dqkv.data(), B, T, C, H);
  VecD rD = toD(r);
  auto loss = [&](const VecD &x) {
    VecD o, l;
    attentionRef(x, o, l, B, T, C, H);
    return dotD(rD, o);
  };
  EXPECT_TRUE(gradClose(dqkv, numericGrad(loss, toD(qkv))));
}

TEST(KernelAttention, GradLargeMatchesNaiveBackward) {
  // Parallel path (many (b,h) pairs), T across the forward's key blocks.
  std::mt19937 rng(30);
  const int64_t B = 2, T = 150, C = 32, H = 4;
  VecF qkv = randVec(rng, B * T * 3 * C, -1.5f, 1.5f), dout = randVec(rng, B * T * C);
  VecF out(B * T * C), lse(B * H * T);
  k::attention(qkv.data(), out.data(), lse.data(), B, T, C, H);
  VecF dqkv(B * T * 3 * C, 7.0f);
  k::attentionGrad(dout.data(), qkv.data(), out.data(), lse.data(), dqkv.data(), B, T, C, H);
  const VecD ref = attentionGradRef(toD(dout), toD(qkv), B, T, C, H);
  EXPECT_TRUE(allClose(dqkv, ref, 1e-3, 1e-4 * maxAbs(ref)));
}

// ------------------------------------------------------------------------------------------------
// Layout

namespace {
// numpy transpose reference: y[j0..jr-1] = x[i] with i[perm[d]] = j[d].
VecF transposeRef(const VecF &x, const std::vector<int64_t> &shape, const std::vector<int64_t> &perm) {
  const int rank = int(shape.size());
  std::vector<int64_t> yshape(rank), xstride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) xstride[d] = xstride[d + 1] * shape[d + 1];
  for (int d = 0; d < rank; ++d) yshape[d] = shape[perm[d]];
  VecF y(x.size());
  std::vector<int64_t> j(rank, 0);
  for (size_t flat = 0; flat < y.size(); ++flat) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += j[d] * xstride[perm[d]];
    y[flat] = x[off];
    for (int d = rank - 1; d >= 0; --d) {
      if (++j[d] < yshape[d]) break;
      j[d] = 0;
    }
  }
  return y;
}
} // namespace

TEST(KernelTranspose, AllPermutationsUpToRank4AndRank8) {
  std::mt19937 rng(23);
  std::vector<std::vector<int64_t>> shapes = {{7}, {3, 5}, {2, 3, 4}, {2, 3, 4, 5}, {40, 30, 20}};
  for (const auto &shape : shapes) {
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
    VecF x = randVec(rng, n);
    std::vector<int64_t> perm(shape.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      VecF y(n, -9.0f);
      k::transpose(x.data(), y.data(), shape.data(), perm.data(), int(shape.size()));
      ::testing::AssertionResult ok = allClose(y, transposeRef(x, shape, perm), 0.0, 0.0);
      EXPECT_TRUE(ok) << "rank " << shape.size() << " perm[0]=" << perm[0];
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  // rank 8 with a few random permutations
  std::vector<int64_t> shape = {2, 3, 1, 2, 4, 2, 3, 2};
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
  VecF x = randVec(rng, n);
  std::vector<int64_t> perm = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int rep = 0; rep < 10; ++rep) {
    std::shuffle(perm.begin(), perm.end(), rng);
    VecF y(n, -9.0f);
    k::transpose(x.data(), y.data(), shape.data(), perm.data(), 8);
    EXPECT_TRUE(allClose(y, transposeRef(x, shape, perm), 0.0, 0.0)) << "rank 8 rep " << rep;
  }
}

TEST(KernelTranspose, KnownValues) {
  // x = [[0,1,2],[3,4,5]] -> xᵀ = [[0,3],[1,4],[2,5]]
  VecF x = {0, 1, 2, 3, 4, 5}, y(6);
  std::vector<int64_t> shape = {2, 3}, perm = {1, 0};
  k::transpose(x.data(), y.data(), shape.data(), perm.data(), 2);
  EXPECT_EQ(y, (VecF{0, 3, 1, 4, 2, 5}));
}

TEST(KernelSplitConcat, MatchesReferenceAndRoundTrips) {
  std::mt19937 rng(24);
  for (auto [outer, inner, parts] : {std::tuple<int64_t, int64_t, int64_t>{4, 3, 3}, {1, 10, 2}, {500, 16, 3}}) {
    VecF x = randVec(rng, outer * inner * parts);
    std::vector<VecF> ys(parts, VecF(outer * inner, 0.0f));
    std::vector<float *> yp;
    for (auto &y : ys) yp.push_back(y.data());
    k::split(x.data(), yp.data(), outer, inner, parts);
    for (int64_t p = 0; p < parts; ++p) {
      VecF ref(outer * inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) ref[o * inner + i] = x[o * parts * inner + p * inner + i];
      EXPECT_TRUE(allClose(ys[p], ref, 0.0, 0.0)) << "part " << p;
    }
    std::vector<const float *> xp(yp.begin(), yp.end());
    VecF back(x.size(), 0.0f);
    k::concat(xp.data(), back.data(), outer, inner, parts);
    EXPECT_TRUE(allClose(back, x, 0.0, 0.0));
  }
}

// ------------------------------------------------------------------------------------------------
// Cross-entropy

TEST(KernelCrossEntropy, ForwardMatchesReference) {
  std::mt19937 rng(25);
  const int64_t N = 64, V = 300;
  VecF logits = randVec(rng, N * V, -4.0f, 4.0f);
  auto tg = randIds(rng, N, V);
  int64_t bad = 77;
  const float L = k::crossEntropy(logits.data(), tg.data(), N, V, &bad);
  EXPECT_EQ(bad, -1);
  const double ref = crossEntropyRef(toD(logits), tg, N, V);
  EXPECT_NEAR(L, ref, 1e-5 * std::fabs(ref));
}

TEST(KernelCrossEntropy, StableForLargeLogits) {
  // logits near 1e4 overflow exp() without the max subtraction.
  const int64_t N = 2, V = 3;
  VecF logits = {10000.0f, 10001.0f, 10002.0f, -10000.0f, -10001.0f, -10000.0f};
  std::vector<int32_t> tg = {2, 1};
  int64_t bad = 0;
  const float L = k::crossEntropy(logits.data(), tg.data(), N, V, &bad);
  const double l0 = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  const double l1 = std::log(1.0 + std::exp(-1.0) + 1.0) + 1.0;
  EXPECT_TRUE(std::isfinite(L));
  EXPECT_NEAR(L, (l0 + l1) / 2, 1e-5);
  VecF d(N * V);
  k::crossEntropyGrad(logits.data(), tg.data(), 1.0f, d.data(), N, V);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

TEST(KernelCrossEntropy, BadTargetReported) {
  const int64_t N = 4, V = 5;
  VecF logits(N * V, 0.0f);
  std::vector<int32_t> tg = {0, 4, 5, -1};
  int64_t bad = -1;
  EXPECT_EQ(k::crossEntropy(logits.data(), tg.data(), N, V, &bad), 0.0f);
  EXPECT_EQ(bad, 2);
  tg = {0, -3, 1, 1};
  EXPECT_EQ(k::crossEntropy(logits.data(), tg.data(), N, V, &bad), 0.0f);
  EXPECT_EQ(bad, 1);
  tg = {0, 1, 2, 3};
  const float L = k::crossEntropy(logits.data(), tg.data(), N, V, &bad);
  EXPECT_EQ(bad, -1);
  EXPECT_NEAR(L, std::log(5.0), 1e-6);
}

TEST(KernelCrossEntropy, GradFiniteDifference) {
  std::mt19937 rng(26);
  const int64_t N = 4, V = 7;
  const float dloss = 1.7f;
  VecF logits = randVec(rng, N * V, -3.0f, 3.0f);
  auto tg = randIds(rng, N, V);
  VecF d(N * V, 9.0f);
  k::crossEntropyGrad(logits.data(), tg.data(), dloss, d.data(), N, V);
  auto loss = [&](const VecD &x) { return double(dloss) * crossEntropyRef(x, tg, N, V); };
  EXPECT_TRUE(gradClose(d, numericGrad(loss, toD(logits))));
}

TEST(KernelCrossEntropy, GradLargeMatchesFormula) {
  std::mt19937 rng(27);
  const int64_t N = 100, V = 500;
  VecF logits = randVec(rng, N * V, -3.0f, 3.0f);
  auto tg = randIds(rng, N, V);
  VecF d(N * V);
  k::crossEntropyGrad(logits.data(), tg.data(), 0.5f, d.data(), N, V);
  VecD ref(N * V);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e30, s = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[n * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[n * V + j] - mx);
    for (int64_t j = 0; j < V; ++j)
      ref[n * V + j] = (std::exp(logits[n * V + j] - mx) / s - (j == tg[n] ? 1.0 : 0.0)) * 0.5 / N;
  }
  EXPECT_TRUE(allClose(d, ref, 1e-4, 1e-9));
}

// ------------------------------------------------------------------------------------------------
// Optimizer

TEST(KernelSumSquares, MatchesReference) {
  std::mt19937 rng(28);
  for (int64_t n : {int64_t(1), int64_t(100), int64_t(100000)}) {
    VecF x = randVec(rng, n, -2.0f, 2.0f);
    double ref = 0.0;
    for (float v : x) ref += double(v) * v;
    EXPECT_NEAR(k::sumSquares(x.data(), n), ref, 1e-10 * ref) << "n=" << n;
  }
  VecF x = {3.0f, 4.0f};
  EXPECT_EQ(k::sumSquares(x.data(), 2), 25.0);
}

TEST(KernelAdamW, TwoStepsHandComputed) {
  // One element, hand-computed in double (PyTorch AdamW, decoupled weight decay):
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.5, gs = 0.5;
  float p = 1.0f, m = 0.0f, v = 0.0f;
  float g = 0.4f; // scaled: 0.2
  k::AdamWParams prm{float(lr), float(b1), float(b2), float(eps), float(wd), float(gs), 1};
  k::adamw(&p, &g, &m, &v, 1, prm);
  // step 1: p = 1*(1-0.05) = 0.95; m = 0.1*0.2 = 0.02; v = 0.01*0.04 = 4e-4;
  //   mhat = 0.02/0.1 = 0.2, vhat = 4e-4/0.01 = 0.04, p -= 0.1*0.2/(0.2+1e-8) = 0.1 -> 0.85
  EXPECT_NEAR(m, 0.02, 1e-8);
  EXPECT_NEAR(v, 4e-4, 1e-9);
  EXPECT_NEAR(p, 0.85, 1e-6);
  g = -1.2f; // scaled: -0.6
  prm.step = 2;
  k::adamw(&p, &g, &m, &v, 1, prm);
  // step 2: p = 0.85*0.95 = 0.8075; m = 0.9*0.02 + 0.1*(-0.6) = -0.042;
  //   v = 0.99*4e-4 + 0.01*0.36 = 0.003996; bc1 = 1-0.81 = 0.19; bc2 = 1-0.9801 = 0.0199
  //   mhat = -0.042/0.19, vhat = 0.003996/0.0199; p -= 0.1*mhat/(sqrt(vhat)+eps)
  const double mhat = -0.042 / 0.19, vhat = 0.003996 / 0.0199;
  const double p2 = 0.8075 - 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
  EXPECT_NEAR(m, -0.042, 1e-7);
  EXPECT_NEAR(v, 0.003996, 1e-8);
  EXPECT_NEAR(p, p2, 1e-6);
  EXPECT_NEAR(p, 0.8568298, 1e-6); // the same number written out
}

TEST(KernelAdamW, VectorMatchesReferenceLoop) {
  std::mt19937 rng(29);
  const int64_t n = 40000;
  VecF p = randVec(rng, n), g = randVec(rng, n), m = randVec(rng, n, -0.1f, 0.1f), v = randVec(rng, n, 0.0f, 0.1f);
  VecD pr = toD(p), mr = toD(m), vr = toD(v);
  k::AdamWParams prm{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 5};
  k::adamw(p.data(), g.data(), m.data(), v.data(), n, prm);
  const double bc1 = 1 - std::pow(double(prm.beta1), 5), bc2 = 1 - std::pow(double(prm.beta2), 5);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = double(g[i]) * prm.gradScale;
    pr[i] *= 1 - double(prm.lr) * prm.weightDecay;
    mr[i] = prm.beta1 * mr[i] + (1 - double(prm.beta1)) * gi;
    vr[i] = prm.beta2 * vr[i] + (1 - double(prm.beta2)) * gi * gi;
    pr[i] -= prm.lr * (mr[i] / bc1) / (std::sqrt(vr[i] / bc2) + prm.eps);
  }
  EXPECT_TRUE(allClose(m, mr, 1e-5, 1e-8));
  EXPECT_TRUE(allClose(v, vr, 1e-5, 1e-10));
  EXPECT_TRUE(allClose(p, pr, 1e-5, 1e-7));
}
