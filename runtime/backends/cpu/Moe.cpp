// The CPU kernels of a mixture of experts (bigc.moe, Mixtral's block): the router's top-k over a
// softmax, then each expert's SwiGLU on the tokens routed to it, as sgemms over the gathered rows.
#include "bigc/Runtime/fast_math.h"
#include "bigc/Runtime/kernels.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

namespace bigc::rt::cpu {

namespace {

struct Routing {
  std::vector<float> p;                    // [N,E] the router's softmax
  std::vector<int32_t> idx;                // [N,k] the chosen experts, best first (a tie: the lower index)
  std::vector<float> w;                    // [N,k] their weights
  std::vector<float> sum;                  // [N] the chosen probabilities' sum (normalize)
  std::vector<std::vector<int64_t>> pairs; // per expert: the (token, slot) pairs n * k + j routed to it
};

void route(const float *x, const float *router, int64_t N, int64_t C, int64_t E, int64_t k, bool normalize,
           Routing &r) {
  r.p.assign(size_t(N * E), 0.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(N), blasint(E), blasint(C), 1.0f, x, blasint(C), router,
              blasint(C), 0.0f, r.p.data(), blasint(E));
  r.idx.assign(size_t(N * k), 0), r.w.assign(size_t(N * k), 0.0f), r.sum.assign(size_t(N), 1.0f);
#pragma omp parallel for schedule(static) if (N * E >= 4096)
  for (int64_t n = 0; n < N; ++n) {
    float *row = r.p.data() + n * E;
    float mx = row[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, row[e]);
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += double(row[e] = std::exp(row[e] - mx));
    for (int64_t e = 0; e < E; ++e) row[e] = float(double(row[e]) / s);
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    float total = 0.0f;
    for (int64_t j = 0; j < k; ++j) total += row[order[size_t(j)]];
    r.sum[size_t(n)] = total;
    for (int64_t j = 0; j < k; ++j) {
      r.idx[size_t(n * k + j)] = order[size_t(j)];
      r.w[size_t(n * k + j)] = normalize ? row[order[size_t(j)]] / total : row[order[size_t(j)]];
    }
  }
  r.pairs.assign(size_t(E), {});
  for (int64_t q = 0; q < N * k; ++q) r.pairs[size_t(r.idx[size_t(q)])].push_back(q);
}

// The rows of x of the tokens of `pairs` ([M, C]).
void gather(const float *x, int64_t C, int64_t k, const std::vector<int64_t> &pairs, std::vector<float> &out) {
  out.resize(pairs.size() * size_t(C));
  for (size_t i = 0; i < pairs.size(); ++i)
    std::memcpy(out.data() + i * size_t(C), x + (pairs[i] / k) * C, sizeof(float) * size_t(C));
}

// A = X gate_up_e^T [M, 2F], then H = silu(G) * U [M, F] (G the first F columns).
void expertHidden(const float *X, const float *gu, int64_t M, int64_t C, int64_t F, std::vector<float> &A,
                  std::vector<float> &H) {
  A.resize(size_t(M * 2 * F)), H.resize(size_t(M * F));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(M), blasint(2 * F), blasint(C), 1.0f, X, blasint(C), gu,
              blasint(C), 0.0f, A.data(), blasint(2 * F));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f) {
      const float g = A[size_t(m * 2 * F + f)], u = A[size_t(m * 2 * F + F + f)];
      H[size_t(m * F + f)] = g / (1.0f + std::exp(-g)) * u;
    }
}

} // namespace

void moe(const float *x, const float *router, const float *gateUp, const float *down, float *y, int64_t N, int64_t C,
         int64_t E, int64_t F, int64_t k, bool normalize) {
  Routing r;
  route(x, router, N, C, E, k, normalize, r);
  std::vector<float> O(size_t(N * k * C), 0.0f); // each (token, slot)'s expert output
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t> &pairs = r.pairs[size_t(e)];
    const int64_t M = int64_t(pairs.size());
    if (M == 0) continue;
    std::vector<float> X, A, H, Oe(size_t(M * C));
    gather(x, C, k, pairs, X);
    expertHidden(X.data(), gateUp + e * 2 * F * C, M, C, F, A, H);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(M), blasint(C), blasint(F), 1.0f, H.data(), blasint(F),
                down + e * C * F, blasint(F), 0.0f, Oe.data(), blasint(C));
    for (int64_t i = 0; i < M; ++i)
      std::memcpy(O.data() + pairs[size_t(i)] * C, Oe.data() + i * C, sizeof(float) * size_t(C));
  }
  // y = sum over the slots in order (deterministic)
#pragma omp parallel for schedule(static) if (N * C >= 65536)
  for (int64_t n = 0; n < N; ++n) {
    float *yr = y + n * C;
    std::memset(yr, 0, sizeof(float) * size_t(C));
    for (int64_t j = 0; j < k; ++j) {
      const float wj = r.w[size_t(n * k + j)];
      const float *o = O.data() + (n * k + j) * C;
      for (int64_t c = 0; c < C; ++c) yr[c] += wj * o[c];
    }
  }
}

void moeGrad(const float *dy, const float *x, const float *router, const float *gateUp, const float *down, float *dx,
             float *drouter, float *dgateUp, float *ddown, int64_t N, int64_t C, int64_t E, int64_t F, int64_t k,
             bool normalize) {
  Routing r;
  route(x, router, N, C, E, k, normalize, r);
  std::vector<float> dw(size_t(N * k), 0.0f), dXp(size_t(N * k * C), 0.0f);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t> &pairs = r.pairs[size_t(e)];
    const int64_t M = int64_t(pairs.size());
    float *dgu = dgateUp + e * 2 * F * C, *dd = ddown + e * C * F;
    if (M == 0) {
      std::memset(dgu, 0, sizeof(float) * size_t(2 * F * C));
      std::memset(dd, 0, sizeof(float) * size_t(C * F));
      continue;
    }
    const float *gu = gateUp + e * 2 * F * C, *dn = down + e * C * F;
    std::vector<float> X, A, H, O(size_t(M * C)), dO(size_t(M * C)), dH(size_t(M * F)), dA(size_t(M * 2 * F)),
        dX(size_t(M * C));
    gather(x, C, k, pairs, X);
    expertHidden(X.data(), gu, M, C, F, A, H);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(M), blasint(C), blasint(F), 1.0f, H.data(), blasint(F),
                dn, blasint(F), 0.0f, O.data(), blasint(C));
    for (int64_t i = 0; i < M; ++i) {
      const int64_t q = pairs[size_t(i)];
      const float *dyr = dy + (q / k) * C;
      const float wq = r.w[size_t(q)];
      double dot = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        dot += double(dyr[c]) * double(O[size_t(i * C + c)]);
        dO[size_t(i * C + c)] = wq * dyr[c];
      }
      dw[size_t(q)] = float(dot);
    }
    // ddown_e = dO^T H [C,F]; dH = dO down_e [M,F]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(C), blasint(F), blasint(M), 1.0f, dO.data(),
                blasint(C), H.data(), blasint(F), 0.0f, dd, blasint(F));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(M), blasint(F), blasint(C), 1.0f, dO.data(),
                blasint(C), dn, blasint(F), 0.0f, dH.data(), blasint(F));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t f = 0; f < F; ++f) {
        const float g = A[size_t(m * 2 * F + f)], u = A[size_t(m * 2 * F + F + f)];
        const float s = 1.0f / (1.0f + std::exp(-g)), h = dH[size_t(m * F + f)];
        dA[size_t(m * 2 * F + f)] = h * u * s * (1.0f + g * (1.0f - s)); // d silu(g) / dg
        dA[size_t(m * 2 * F + F + f)] = h * g * s;
      }
    // dgate_up_e = dA^T X [2F,C]; dX = dA gate_up_e [M,C]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(2 * F), blasint(C), blasint(M), 1.0f, dA.data(),
                blasint(2 * F), X.data(), blasint(C), 0.0f, dgu, blasint(C));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(M), blasint(C), blasint(2 * F), 1.0f, dA.data(),
                blasint(2 * F), gu, blasint(C), 0.0f, dX.data(), blasint(C));
    for (int64_t i = 0; i < M; ++i)
      std::memcpy(dXp.data() + pairs[size_t(i)] * C, dX.data() + i * C, sizeof(float) * size_t(C));
  }
  // The router: the weights' gradient to the chosen probabilities (through the normalisation),
  // then through the softmax to the logits dL [N,E].
  std::vector<float> dL(size_t(N * E), 0.0f);
#pragma omp parallel for schedule(static) if (N * C >= 65536)
  for (int64_t n = 0; n < N; ++n) {
    float *dxr = dx + n * C;
    std::memset(dxr, 0, sizeof(float) * size_t(C));
    for (int64_t j = 0; j < k; ++j) {
      const float *d = dXp.data() + (n * k + j) * C;
      for (int64_t c = 0; c < C; ++c) dxr[c] += d[c];
    }
    const float *p = r.p.data() + n * E;
    float *dl = dL.data() + n * E;
    double wdw = 0.0; // sum_i dw_i w_i
    for (int64_t j = 0; j < k; ++j) wdw += double(dw[size_t(n * k + j)]) * double(r.w[size_t(n * k + j)]);
    for (int64_t j = 0; j < k; ++j) {
      const float g = dw[size_t(n * k + j)];
      dl[r.idx[size_t(n * k + j)]] = normalize ? float((double(g) - wdw) / double(r.sum[size_t(n)])) : g;
    }
    double pdp = 0.0;
    for (int64_t e = 0; e < E; ++e) pdp += double(p[e]) * double(dl[e]);
    for (int64_t e = 0; e < E; ++e) dl[e] = float(double(p[e]) * (double(dl[e]) - pdp));
  }
  // dx += dL router; drouter = dL^T x
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(N), blasint(C), blasint(E), 1.0f, dL.data(),
              blasint(E), router, blasint(C), 1.0f, dx, blasint(C));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(E), blasint(C), blasint(N), 1.0f, dL.data(), blasint(E),
              x, blasint(C), 0.0f, drouter, blasint(C));
}

} // namespace bigc::rt::cpu
