// CPU backend kernels (fp32). Semantics: docs/program-format.md, "Instructions"; signatures and
// contracts: include/bigc/Runtime/kernels.h.
//
// - GEMMs go through OpenBLAS (cblas_sgemm), one call per batch entry.
// - Everything else is plain C++ with OpenMP over rows (or over column blocks where a reduction
//   across rows must stay race-free). No kernel allocates memory: scratch is a small fixed-size
//   stack array, and nothing grows with T, N or V.
// - Attention is FlashAttention-2 on blocks of 64 queries x 64 keys: the forward keeps a running
//   max and sum per row (online softmax) and accumulates P V into the output rows; the backward
//   recomputes each block of probabilities from q, k and the saved log-sum-exp. Every product of
//   blocks is an sgemm (OpenBLAS runs it on the calling thread inside the parallel region). The
//   T x T matrix is never stored.
// - exp is fastExp (fast_math.h), which vectorises (libm's is a scalar call); GELU's tanh is written
//   as a sigmoid, 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), which has no cancellation for u < 0.
// - Elementwise kernels read element i before writing element i, so the output may alias one
//   input exactly.
#include "bigc/Runtime/kernels.h"
#include "bigc/Runtime/fast_math.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace bigc::rt::cpu {

namespace {

// Below this many elements the OpenMP fork/join costs more than it saves.
constexpr int64_t kParallelMin = 1 << 14;
// Column block for kernels that reduce over rows (race-free: one thread owns a block of columns).
constexpr int64_t kColBlock = 32;
// Queries x keys per block of attention (the scores of one block live on the stack: 16 KiB).
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;

inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
inline void axpy(float alpha, const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void scaleInPlace(float *y, float alpha, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

constexpr float kGeluS = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

} // namespace

// ---------------------------------------------------------------------------------------------
// Embedding

int64_t embedding(const float *table, const int32_t *ids, float *y, int64_t N, int64_t V, int64_t C) {
  // Check first so that nothing is written on bad input.
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] < 0 || ids[n] >= V) return n;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) std::memcpy(y + n * C, table + static_cast<int64_t>(ids[n]) * C, sizeof(float) * C);
  return -1;
}

void embeddingGrad(const float *dy, const int32_t *ids, float *dtable, int64_t N, int64_t V, int64_t C) {
  // Each thread owns a block of columns of the whole table: the scatter over rows stays race-free
  // and is done in row order (deterministic).
  const int64_t nBlocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if ((N + V) * C >= kParallelMin)
  for (int64_t blk = 0; blk < nBlocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock), w = c1 - c0;
    for (int64_t v = 0; v < V; ++v) std::memset(dtable + v * C + c0, 0, sizeof(float) * w);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids[n];
      if (id < 0 || id >= V) continue; // rejected by the forward; never write outside the table
      float *dst = dtable + id * C + c0;
      const float *src = dy + n * C + c0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) dst[j] += src[j];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Matmul

void matmul(const float *a, const float *b, float *c, int64_t batch, int64_t M, int64_t N, int64_t K, bool transA,
            bool transB, int64_t strideA, int64_t strideB, int64_t strideC) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < batch; ++i) std::memset(c + i * strideC, 0, sizeof(float) * M * N);
    return;
  }
  const blasint lda = static_cast<blasint>(transA ? M : K);
  const blasint ldb = static_cast<blasint>(transB ? K : N);
  const blasint ldc = static_cast<blasint>(N);
  for (int64_t i = 0; i < batch; ++i)
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, a + i * strideA, lda,
                b + i * strideB, ldb, 0.0f, c + i * strideC, ldc);
}

// ---------------------------------------------------------------------------------------------
// Elementwise

void add(const float *a, const float *b, float *c, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

void biasAdd(const float *x, const float *b, float *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] + b[j];
  }
}

void mul(const float *a, const float *b, float *c, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] * b[i];
}

void scale(const float *x, float *y, float factor, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = factor * x[i];
}

void reduceSum(const float *x, float *y, int64_t rows, int64_t cols) {
  const int64_t nBlocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t blk = 0; blk < nBlocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(cols, c0 + kColBlock) - c0;
    float acc[kColBlock];
    for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * cols + c0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] += xr[j];
    }
    for (int64_t j = 0; j < w; ++j) y[c0 + j] = acc[j];
  }
}

void fill(float *y, float value, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

namespace {
// One row of layernorm (layernorm and add_layernorm run the same code on each row).
inline void layernormRow(const float *xr, const float *w, const float *b, float *yr, float *mean, float *rstd,
                         int64_t n, int64_t C, float eps) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < C; ++j) s += xr[j];
  const float m = s / static_cast<float>(C);
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < C; ++j) {
    const float d = xr[j] - m;
    v += d * d;
  }
  v /= static_cast<float>(C);
  const float rs = 1.0f / std::sqrt(v + eps);
#pragma omp simd
  for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
  if (mean) mean[n] = m;
  if (rstd) rstd[n] = rs;
}

// v as the 16-bit type `r` stores it (r = None: v).
inline float rounded(float v, Round r) {
  switch (r) {
  case Round::BF16: return bf16ToF32(f32ToBf16(v));
  case Round::F16: return f16ToF32(f32ToF16(v));
  default: return v;
  }
}
inline void roundAll(float *x, int64_t n, Round r) {
  if (r == Round::None) return;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = rounded(x[i], r);
}
} // namespace

void layernorm(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, int64_t N, int64_t C,
               float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) layernormRow(x + n * C, w, b, y + n * C, mean, rstd, n, C, eps);
}

void addLayernorm(const float *a, const float *r, const float *w, const float *b, float *s, float *y, float *mean,
                  float *rstd, int64_t N, int64_t C, float eps, Round t) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *ar = a + n * C, *rr = r + n * C;
    float *sr = s + n * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) sr[j] = ar[j] + rr[j];
    if (t != Round::None)
      for (int64_t j = 0; j < C; ++j) sr[j] = rounded(sr[j], t);
    layernormRow(sr, w, b, y + n * C, mean, rstd, n, C, eps);
  }
}

void layernormGrad(const float *dy, const float *x, const float *w, const float *mean, const float *rstd, float *dx,
                   float *dw, float *db, int64_t N, int64_t C, const float *res, Round t) {
  // dw, db first (each thread owns a block of columns; overwritten, not accumulated), so that
  // dy and x are fully read before dx is written.
  const int64_t nBlocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nBlocks; ++blk) {
    const int64_t c0 = blk * kColBlock, wdt = std::min(C, c0 + kColBlock) - c0;
    float accW[kColBlock], accB[kColBlock];
    for (int64_t j = 0; j < wdt; ++j) accW[j] = accB[j] = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const float *dyr = dy + n * C + c0;
      const float *xr = x + n * C + c0;
      const float m = mean[n], rs = rstd[n];
#pragma omp simd
      for (int64_t j = 0; j < wdt; ++j) {
        accW[j] += dyr[j] * ((xr[j] - m) * rs);
        accB[j] += dyr[j];
      }
    }
    for (int64_t j = 0; j < wdt; ++j) {
      dw[c0 + j] = accW[j];
      db[c0 + j] = accB[j];
    }
  }
  // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w (llm.c).
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *dyr = dy + n * C;
    const float *xr = x + n * C;
    float *dxr = dx + n * C;
    const float m = mean[n], rs = rstd[n];
    float sD = 0.0f, sDN = 0.0f;
#pragma omp simd reduction(+ : sD, sDN)
    for (int64_t j = 0; j < C; ++j) {
      const float dn = dyr[j] * w[j];
      sD += dn;
      sDN += dn * ((xr[j] - m) * rs);
    }
    const float mD = sD / static_cast<float>(C), mDN = sDN / static_cast<float>(C);
    if (!res) {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) {
        const float norm = (xr[j] - m) * rs;
        dxr[j] = rs * (dyr[j] * w[j] - mD - norm * mDN);
      }
    } else { // layernorm_grad_add: dx as stored, plus the residual's gradient (dx may be res)
      const float *rr = res + n * C;
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) {
        const float norm = (xr[j] - m) * rs;
        dxr[j] = rounded(rs * (dyr[j] * w[j] - mD - norm * mDN), t) + rr[j];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GELU (tanh approximation)

void gelu(const float *x, float *y, int64_t n, bool exact) {
  if (exact) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * fastOnePlusErf(x[i] * kInvSqrt2);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    y[i] = xi / (1.0f + fastExp(-2.0f * u)); // 0.5 (1 + tanh u) = sigmoid(2u), no cancellation
  }
}

void geluGrad(const float *x, const float *dy, float *dx, int64_t n, bool exact) {
  if (exact) { // Phi(x) + x phi(x)
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float xi = x[i];
      const float cdf = 0.5f * fastOnePlusErf(xi * kInvSqrt2);
      const float pdf = kInvSqrt2Pi * fastExp(-0.5f * xi * xi);
      dx[i] = dy[i] * (cdf + xi * pdf);
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    // With s = sigmoid(2u) = 0.5 (1 + tanh u): 1 - tanh^2 u = 4 s (1 - s), 1 - s = e s, e = exp(-2u).
    const float e = fastExp(-2.0f * u);
    const float sg = 1.0f / (1.0f + e);
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    const float g = sg + 2.0f * xi * (sg * (e * sg)) * du;
    dx[i] = dy[i] * g;
  }
}

// ---------------------------------------------------------------------------------------------
// The LLaMA family: SiLU, SwiGLU, RMSNorm, rotary embeddings (docs/frontend.md). The arithmetic
// follows PyTorch's (and Hugging Face's) order, so fp32 results agree to rounding.

void softcap(const float *x, float *y, int64_t n, float cap) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = cap * std::tanh(x[i] / cap);
}

void softcapGrad(const float *y, const float *dy, float *dx, int64_t n, float cap) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float u = y[i] / cap;
    dx[i] = dy[i] * (1.0f - u * u);
  }
}

void silu(const float *x, float *y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + fastExp(-x[i]));
}

// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
void siluGrad(const float *x, const float *dy, float *dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float s = fastSigmoid(x[i]);
    dx[i] = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
  }
}

void swiglu(const float *g, const float *u, float *y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float a = g[i] / (1.0f + fastExp(-g[i]));
    y[i] = a * u[i];
  }
}

void swigluGrad(const float *g, const float *u, const float *dy, float *dg, float *du, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dy[i];
    const float e = fastExp(-gi);
    const float s = 1.0f / (1.0f + e);
    const float a = gi / (1.0f + e);
    dg[i] = (d * ui) * (s * (1.0f + gi * (1.0f - s)));
    du[i] = d * a;
  }
}

// GELU's value and derivative at one point, as gelu and geluGrad compute them.
namespace {
inline float geluAt(float x, bool exact) {
  if (exact) return 0.5f * x * fastOnePlusErf(x * kInvSqrt2);
  const float u = kGeluS * (x + kGeluC * x * x * x);
  return x / (1.0f + fastExp(-2.0f * u));
}
inline float geluSlope(float x, bool exact) {
  if (exact) return 0.5f * fastOnePlusErf(x * kInvSqrt2) + x * (kInvSqrt2Pi * fastExp(-0.5f * x * x));
  const float u = kGeluS * (x + kGeluC * x * x * x);
  const float e = fastExp(-2.0f * u);
  const float sg = 1.0f / (1.0f + e);
  const float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return sg + 2.0f * x * (sg * (e * sg)) * du;
}
} // namespace

void geglu(const float *g, const float *u, float *y, int64_t n, bool exact) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = geluAt(g[i], exact) * u[i];
}

void gegluGrad(const float *g, const float *u, const float *dy, float *dg, float *du, int64_t n, bool exact) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dy[i];
    dg[i] = (d * ui) * geluSlope(gi, exact);
    du[i] = d * geluAt(gi, exact);
  }
}

namespace {
inline void rmsnormRow(const float *xr, const float *w, float *yr, float *rstd, int64_t n, int64_t C, float eps) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < C; ++j) s += xr[j] * xr[j];
  const float rs = 1.0f / std::sqrt(s / static_cast<float>(C) + eps);
#pragma omp simd
  for (int64_t j = 0; j < C; ++j) yr[j] = w[j] * (xr[j] * rs);
  if (rstd) rstd[n] = rs;
}
} // namespace

void rmsnorm(const float *x, const float *w, float *y, float *rstd, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) rmsnormRow(x + n * C, w, y + n * C, rstd, n, C, eps);
}

void addRmsnorm(const float *a, const float *r, const float *w, float *s, float *y, float *rstd, int64_t N, int64_t C,
                float eps, Round t) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *ar = a + n * C, *rr = r + n * C;
    float *sr = s + n * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) sr[j] = ar[j] + rr[j];
    if (t != Round::None)
      for (int64_t j = 0; j < C; ++j) sr[j] = rounded(sr[j], t);
    rmsnormRow(sr, w, y + n * C, rstd, n, C, eps);
  }
}

// y = w * xh, xh = x r: dw = sum_rows dy xh; dx = r (dxh - xh mean(dxh xh)), dxh = dy w.
void rmsnormGrad(const float *dy, const float *x, const float *w, const float *rstd, float *dx, float *dw, int64_t N,
                 int64_t C, const float *res, Round t) {
  const int64_t nBlocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nBlocks; ++blk) {
    const int64_t c0 = blk * kColBlock, wdt = std::min(C, c0 + kColBlock) - c0;
    float acc[kColBlock];
    for (int64_t j = 0; j < wdt; ++j) acc[j] = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const float *dyr = dy + n * C + c0, *xr = x + n * C + c0;
      const float rs = rstd[n];
#pragma omp simd
      for (int64_t j = 0; j < wdt; ++j) acc[j] += dyr[j] * (xr[j] * rs);
    }
    for (int64_t j = 0; j < wdt; ++j) dw[c0 + j] = acc[j];
  }
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *dyr = dy + n * C, *xr = x + n * C;
    float *dxr = dx + n * C;
    const float rs = rstd[n];
    float sDN = 0.0f;
#pragma omp simd reduction(+ : sDN)
    for (int64_t j = 0; j < C; ++j) sDN += (dyr[j] * w[j]) * (xr[j] * rs);
    const float mDN = sDN / static_cast<float>(C);
    if (!res) {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) dxr[j] = rs * (dyr[j] * w[j] - (xr[j] * rs) * mDN);
    } else { // rmsnorm_grad_add (dx may be res)
      const float *rr = res + n * C;
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) dxr[j] = rounded(rs * (dyr[j] * w[j] - (xr[j] * rs) * mDN), t) + rr[j];
    }
  }
}

// The unfused pairs' kernels in turn, the intermediate rounded as the pair stores it.
void biasGelu(const float *x, const float *b, float *pre, float *y, int64_t rows, int64_t cols, bool exact, Round t) {
  biasAdd(x, b, pre, rows, cols);
  roundAll(pre, rows * cols, t);
  gelu(pre, y, rows * cols, exact);
}

void geluGradBias(const float *x, const float *dy, float *dx, float *db, int64_t rows, int64_t cols, bool exact,
                  Round t) {
  geluGrad(x, dy, dx, rows * cols, exact);
  roundAll(dx, rows * cols, t);
  reduceSum(dx, db, rows, cols);
}

void rope(const float *x, float *y, int64_t B, int64_t T, int64_t C, int64_t D, const float *invFreq, float scale,
          bool inverse, bool interleaved, int64_t rotary, int64_t cp, int64_t cpRank) {
  const int64_t R = rotary > 0 ? rotary : D, half = R / 2, heads = C / D;
#pragma omp parallel for schedule(static) if (B * T * C >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    float cs[512], sn[512]; // head dims up to 1024
    const float pos = static_cast<float>(format::cpPosition(t, T, cp, cpRank));
    for (int64_t i = 0; i < half && i < 512; ++i) {
      const float a = invFreq[i] * pos; // an fp32 product, as Hugging Face's
      cs[i] = static_cast<float>(std::cos(static_cast<double>(a))) * scale;
      sn[i] = static_cast<float>(std::sin(static_cast<double>(a))) * scale;
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const float *xr = x + (b * T + t) * C + h * D;
        float *yr = y + (b * T + t) * C + h * D;
        const int64_t step = interleaved ? 2 : 1, other = interleaved ? 1 : half; // pair i: (i1, i1 + other)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = i * step, i2 = i1 + other;
          const float x1 = xr[i1], x2 = xr[i2];
          if (!inverse) {
            yr[i1] = x1 * cs[i] - x2 * sn[i];
            yr[i2] = x2 * cs[i] + x1 * sn[i];
          } else {
            yr[i1] = x1 * cs[i] + x2 * sn[i];
            yr[i2] = x2 * cs[i] - x1 * sn[i];
          }
        }
        if (yr != xr)
          for (int64_t i = R; i < D; ++i) yr[i] = xr[i];
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Causal attention, flash-style, on strided rows (AttentionGeometry): GPT-2's packed qkv and the
// grouped-query form of the LLaMA family are the same kernel.
//
// lse[b,h,t] = log sum_j exp(scale * q_t . k_j) over the keys row t sees.

namespace {
// One block of scores, row-major [rows x cols], rows <= kQueryBlock, cols <= kKeyBlock, with its
// leading dimension kKeyBlock: S = scale * Q K^T through sgemm (single-threaded inside the parallel
// region), capped as c tanh(S / c) with a softcap c, then the causal and window masks as -inf.
void scoreBlock(const AttentionGeometry &g, const float *q, const float *k, int64_t t0, int64_t rows, int64_t j0,
                int64_t cols, float *S) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(cols),
              static_cast<blasint>(g.D), g.scale, q, static_cast<blasint>(g.sq), k, static_cast<blasint>(g.skv), 0.0f,
              S, static_cast<blasint>(kKeyBlock));
  if (g.softcap > 0.0f)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float &s = S[i * kKeyBlock + j];
        s = g.softcap * std::tanh(s / g.softcap);
      }
  const float ninf = -std::numeric_limits<float>::infinity();
  const bool causalCut = j0 + cols - 1 > t0;                                // some key after some query
  const bool windowCut = g.window > 0 && j0 < t0 + rows - 1 - g.window + 1; // some key before a window
  if (!causalCut && !windowCut) return;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = t0 + i;
    const int64_t lo = g.window > 0 ? t - g.window + 1 : 0;
    float *Si = S + i * kKeyBlock;
    for (int64_t j = 0; j < cols; ++j)
      if (j0 + j > t || j0 + j < lo) Si[j] = ninf;
  }
}

// The key blocks a query block [t0, t1) sees: [first, t1) with first the window's start.
inline int64_t firstKey(const AttentionGeometry &g, int64_t t0) {
  return g.window > 0 ? std::max<int64_t>(0, t0 - g.window + 1) : 0;
}
} // namespace

void attention(const AttentionGeometry &g, const float *qp, const float *kp, const float *vp, float *out, float *lse) {
  const int64_t B = g.B, T = g.T, H = g.H, hs = g.D;
  const int64_t nq = (T + kQueryBlock - 1) / kQueryBlock;
  // Work grows with the query block's index (causal): the last blocks first, handed out one at a
  // time, keeps both threads busy to the end.
#pragma omp parallel for collapse(3) schedule(dynamic, 1) if (B * H * T * T * hs >= kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t qbRev = 0; qbRev < nq; ++qbRev) {
        const int64_t qb = nq - 1 - qbRev;
        const int64_t t0 = qb * kQueryBlock, rows = std::min(T, t0 + kQueryBlock) - t0;
        const int64_t kh = g.kvHead(h);
        const float *q = qp + (b * T + t0) * g.sq + h * hs;
        const float *kb = kp + b * T * g.skv + kh * hs, *vb = vp + b * T * g.skv + kh * hs;
        float *o = out + (b * T + t0) * g.so + h * hs;
        float S[kQueryBlock * kKeyBlock];
        float m[kQueryBlock], l[kQueryBlock];
        for (int64_t i = 0; i < rows; ++i) {
          m[i] = -std::numeric_limits<float>::infinity();
          l[i] = 0.0f;
          std::memset(o + i * g.so, 0, sizeof(float) * hs);
        }
        for (int64_t j0 = firstKey(g, t0); j0 < t0 + rows; j0 += kKeyBlock) {
          const int64_t cols = std::min(t0 + rows, j0 + kKeyBlock) - j0;
          scoreBlock(g, q, kb + j0 * g.skv, t0, rows, j0, cols, S);
          for (int64_t i = 0; i < rows; ++i) {
            float *Si = S + i * kKeyBlock;
            float bmax = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : bmax)
            for (int64_t j = 0; j < cols; ++j) bmax = std::max(bmax, Si[j]);
            const float mNew = std::max(m[i], bmax);
            if (mNew == -std::numeric_limits<float>::infinity()) { // nothing seen yet on this row
              for (int64_t j = 0; j < cols; ++j) Si[j] = 0.0f;
              continue;
            }
            if (mNew > m[i] && l[i] > 0.0f) { // rescale what was accumulated under the old max
              const float corr = fastExp(m[i] - mNew);
              l[i] *= corr;
              scaleInPlace(o + i * g.so, corr, hs);
            }
            m[i] = mNew;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < cols; ++j) {
              const float p = fastExp(Si[j] - mNew);
              Si[j] = p;
              sum += p;
            }
            l[i] += sum;
          }
          // O += P V
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(hs),
                      static_cast<blasint>(cols), 1.0f, S, static_cast<blasint>(kKeyBlock), vb + j0 * g.skv,
                      static_cast<blasint>(g.skv), 1.0f, o, static_cast<blasint>(g.so));
        }
        for (int64_t i = 0; i < rows; ++i) {
          scaleInPlace(o + i * g.so, 1.0f / l[i], hs);
          lse[(b * H + h) * T + t0 + i] = m[i] + std::log(l[i]);
        }
      }
}

// Per (b, key/value head) (dk, dv accumulate over the query rows of every query head reading that
// key/value head, and dq over the key blocks, so all of them belong to one thread), FlashAttention-2's
// backward on blocks of kQueryBlock queries x kKeyBlock keys, each product an sgemm:
//   D_t = dout_t . out_t
//   P = exp(scale Q K^T - lse), dV += P^T dO, dP = dO V^T, dS = P (dP - D),
//   dQ += scale dS K, dK += scale dS^T Q
// With a softcap c the scores are S = c tanh(scale Q K^T / c) and dS carries their derivative,
// 1 - (S / c)^2.
void attentionGrad(const AttentionGeometry &g, const float *dout, const float *qp, const float *kp, const float *vp,
                   const float *out, const float *lse, float *dqp, float *dkp, float *dvp) {
  const int64_t B = g.B, T = g.T, H = g.H, hs = g.D, Hkv = g.Hkv;
  const int64_t nq = (T + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (B * H * T * T * hs >= kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      for (int64_t t = 0; t < T; ++t) {
        std::memset(dkp + (b * T + t) * g.skv + kh * hs, 0, sizeof(float) * hs);
        std::memset(dvp + (b * T + t) * g.skv + kh * hs, 0, sizeof(float) * hs);
      }
      const float *kb = kp + b * T * g.skv + kh * hs, *vb = vp + b * T * g.skv + kh * hs;
      float *dkb = dkp + b * T * g.skv + kh * hs, *dvb = dvp + b * T * g.skv + kh * hs;
      float S[kQueryBlock * kKeyBlock], dP[kQueryBlock * kKeyBlock], D[kQueryBlock];
      float capGrad[kQueryBlock * kKeyBlock]; // softcap: 1 - (S / c)^2 (0 where masked)
      for (int64_t h = 0; h < H; ++h) {
        if (g.kvHead(h) != kh) continue;
        for (int64_t t = 0; t < T; ++t) std::memset(dqp + (b * T + t) * g.sq + h * hs, 0, sizeof(float) * hs);
        for (int64_t qb = 0; qb < nq; ++qb) {
          const int64_t t0 = qb * kQueryBlock, rows = std::min(T, t0 + kQueryBlock) - t0;
          const float *q = qp + (b * T + t0) * g.sq + h * hs;
          const float *dO = dout + (b * T + t0) * g.so + h * hs;
          const float *O = out + (b * T + t0) * g.so + h * hs;
          const float *L = lse + (b * H + h) * T + t0;
          float *dq = dqp + (b * T + t0) * g.sq + h * hs;
          for (int64_t i = 0; i < rows; ++i) D[i] = dot(dO + i * g.so, O + i * g.so, hs);
          for (int64_t j0 = firstKey(g, t0); j0 < t0 + rows; j0 += kKeyBlock) {
            const int64_t cols = std::min(t0 + rows, j0 + kKeyBlock) - j0;
            scoreBlock(g, q, kb + j0 * g.skv, t0, rows, j0, cols, S);
            if (g.softcap > 0.0f)
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j) {
                  const float s = S[i * kKeyBlock + j], u = s / g.softcap;
                  capGrad[i * kKeyBlock + j] = std::isinf(s) ? 0.0f : 1.0f - u * u;
                }
            for (int64_t i = 0; i < rows; ++i) {
              float *Si = S + i * kKeyBlock;
              const float Li = L[i];
#pragma omp simd
              for (int64_t j = 0; j < cols; ++j) Si[j] = fastExp(Si[j] - Li); // masked: exp(-inf) = 0
            }
            const auto ib = [](int64_t v) { return static_cast<blasint>(v); };
            // dV_j += P^T dO
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ib(cols), ib(hs), ib(rows), 1.0f, S, ib(kKeyBlock), dO,
                        ib(g.so), 1.0f, dvb + j0 * g.skv, ib(g.skv));
            // dP = dO V_j^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ib(rows), ib(cols), ib(hs), 1.0f, dO, ib(g.so),
                        vb + j0 * g.skv, ib(g.skv), 0.0f, dP, ib(kKeyBlock));
            // dS = scale P (dP - D), in dP
            for (int64_t i = 0; i < rows; ++i) {
              const float *Si = S + i * kKeyBlock;
              float *dPi = dP + i * kKeyBlock;
              const float Di = D[i];
#pragma omp simd
              for (int64_t j = 0; j < cols; ++j) dPi[j] = g.scale * Si[j] * (dPi[j] - Di);
              if (g.softcap > 0.0f)
                for (int64_t j = 0; j < cols; ++j) dPi[j] *= capGrad[i * kKeyBlock + j];
            }
            // dQ += dS K_j; dK_j += dS^T Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ib(rows), ib(hs), ib(cols), 1.0f, dP, ib(kKeyBlock),
                        kb + j0 * g.skv, ib(g.skv), 1.0f, dq, ib(g.sq));
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ib(cols), ib(hs), ib(rows), 1.0f, dP, ib(kKeyBlock), q,
                        ib(g.sq), 1.0f, dkb + j0 * g.skv, ib(g.skv));
          }
        }
      }
    }
}

// GPT-2's packed form: qkv [B,T,3C] (q, k, v side by side), out [B,T,C].
void attention(const float *qkv, float *out, float *lse, int64_t B, int64_t T, int64_t C, int64_t H) {
  AttentionGeometry g;
  g.B = B, g.T = T, g.H = H, g.D = C / H, g.Hkv = H, g.sq = g.skv = 3 * C, g.so = C;
  g.scale = 1.0f / std::sqrt(static_cast<float>(g.D));
  attention(g, qkv, qkv + C, qkv + 2 * C, out, lse);
}

void attentionGrad(const float *dout, const float *qkv, const float *out, const float *lse, float *dqkv, int64_t B,
                   int64_t T, int64_t C, int64_t H) {
  AttentionGeometry g;
  g.B = B, g.T = T, g.H = H, g.D = C / H, g.Hkv = H, g.sq = g.skv = 3 * C, g.so = C;
  g.scale = 1.0f / std::sqrt(static_cast<float>(g.D));
  attentionGrad(g, dout, qkv, qkv + C, qkv + 2 * C, out, lse, dqkv, dqkv + C, dqkv + 2 * C);
}

// ---------------------------------------------------------------------------------------------
// Layout

void transpose(const float *x, float *y, const int64_t *shape, const int64_t *perm, int rank) {
  constexpr int kMaxRank = 16;
  if (rank < 0 || rank > kMaxRank) {
    std::fprintf(stderr, "bigc: internal error: transpose of rank %d (at most %d supported)\n", rank, kMaxRank);
    std::abort();
  }
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  int64_t xstride[kMaxRank], ystride[kMaxRank], yshape[kMaxRank];
  int64_t total = 1;
  for (int d = rank - 1; d >= 0; --d) {
    xstride[d] = total;
    total *= shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    yshape[d] = shape[perm[d]];
    ystride[d] = xstride[perm[d]]; // x stride of y's dim d
  }
  if (total == 0) return;
  const int64_t inner = yshape[rank - 1];
  const int64_t innerStride = ystride[rank - 1];
  const int64_t rows = total / inner;
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t i = rem % yshape[d];
      rem /= yshape[d];
      off += i * ystride[d];
    }
    const float *src = x + off;
    float *dst = y + r * inner;
    if (innerStride == 1)
      std::memcpy(dst, src, sizeof(float) * inner);
    else
      for (int64_t i = 0; i < inner; ++i) dst[i] = src[i * innerStride];
  }
}

void split(const float *x, float *const *ys, int64_t outer, int64_t inner, int64_t parts) {
#pragma omp parallel for schedule(static) if (outer * inner * parts >= kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < parts; ++p)
      std::memcpy(ys[p] + o * inner, x + (o * parts + p) * inner, sizeof(float) * inner);
}

void concat(const float *const *xs, float *y, int64_t outer, int64_t inner, int64_t parts) {
#pragma omp parallel for schedule(static) if (outer * inner * parts >= kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < parts; ++p)
      std::memcpy(y + (o * parts + p) * inner, xs[p] + o * inner, sizeof(float) * inner);
}

// ---------------------------------------------------------------------------------------------
// Loss

namespace {
// The row's max, vectorised (a NaN in the row comes out of the sum below).
float rowMax(const float *row, int64_t V) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
  return mx;
}

// Σ_j exp(row[j] - mx), each term in fp32, summed in double.
double rowSumExp(const float *row, int64_t V, float mx) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; ++j) s += static_cast<double>(fastExp(row[j] - mx));
  return s;
}

// log Σ_j exp(row[j]), stable (the row's max taken out), summed in double.
double rowLogSumExp(const float *row, int64_t V) {
  const float mx = rowMax(row, V);
  return std::log(rowSumExp(row, V, mx)) + static_cast<double>(mx);
}
} // namespace

float crossEntropy(const float *logits, const int32_t *targets, int64_t N, int64_t V, int64_t *badIndex, int64_t ld) {
  if (ld <= 0) ld = V;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] < 0 || targets[n] >= V) {
      if (badIndex) *badIndex = n;
      return 0.0f;
    }
  if (badIndex) *badIndex = -1;
  if (N <= 0) return 0.0f;
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * ld;
    total += rowLogSumExp(row, V) - static_cast<double>(row[targets[n]]);
  }
  return static_cast<float>(total / static_cast<double>(N));
}

void crossEntropyGrad(const float *logits, const int32_t *targets, float dloss, float *dlogits, int64_t N, int64_t V,
                      int64_t ld) {
  if (N <= 0) return;
  if (ld <= 0) ld = V;
  const float g = dloss / static_cast<float>(N);
#pragma omp parallel for schedule(static) if (N * ld >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * ld;
    float *drow = dlogits + n * ld;
    const float mx = rowMax(row, V);
    const float f = g / static_cast<float>(rowSumExp(row, V, mx));
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) drow[j] = fastExp(row[j] - mx) * f;
    std::fill(drow + V, drow + ld, 0.0f); // a padded vocabulary's columns
    const int64_t tgt = targets[n];
    if (tgt >= 0 && tgt < V) drow[tgt] -= g;
  }
}

// Vocabulary-parallel cross-entropy: each rank's V columns of the logits, ids [offset, offset + V).

void vocabCeStats(const float *logits, const int32_t *targets, float *stats, int64_t N, int64_t V, int64_t offset,
                  int64_t vocab, int64_t *badIndex, int64_t ld) {
  *badIndex = -1;
  if (ld <= 0) ld = V;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] < 0 || targets[n] >= vocab) {
      *badIndex = n;
      return;
    }
#pragma omp parallel for schedule(static) if (N * ld >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * ld;
    stats[2 * n] = static_cast<float>(rowLogSumExp(row, V)); // (no columns: -inf, nothing in the sum)
    const int64_t t = int64_t(targets[n]) - offset;
    stats[2 * n + 1] = t >= 0 && t < V ? row[t] : 0.0f;
  }
}

void vocabCeStatsGrad(const float *dstats, const float *logits, const int32_t *targets, const float *stats,
                      float *dlogits, int64_t N, int64_t V, int64_t offset, int64_t ld) {
  if (ld <= 0) ld = V;
#pragma omp parallel for schedule(static) if (N * ld >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * ld;
    float *drow = dlogits + n * ld;
    const float lse = stats[2 * n], g = dstats[2 * n];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) drow[j] = g * fastExp(row[j] - lse);
    std::fill(drow + V, drow + ld, 0.0f); // a padded vocabulary's columns
    const int64_t t = int64_t(targets[n]) - offset;
    if (t >= 0 && t < V) drow[t] += dstats[2 * n + 1];
  }
}

// The LM head fused with the statistics of the loss (bigc-fuse-loss): the logits h @ op(w) a chunk
// of `chunk` vocabulary columns at a time, into the workspace.
namespace {
// L [N, cw] = h [N, C] @ op(w)'s columns [c0, c0 + cw).
void headChunk(const float *h, const float *w, float *L, int64_t N, int64_t C, int64_t V, int64_t c0, int64_t cw,
               bool tb) {
  const blasint n = blasint(N), c = blasint(C), k = blasint(cw);
  if (tb) // w [V, C]: rows c0..
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, k, c, 1.0f, h, c, w + c0 * C, c, 0.0f, L, k);
  else // w [C, V]: columns c0..
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, c, 1.0f, h, c, w + c0, blasint(V), 0.0f, L, k);
}
} // namespace

void linearCeStats(const float *h, const float *w, const int32_t *targets, float *stats, float *ws, int64_t N,
                   int64_t C, int64_t V, int64_t chunk, bool tb, int64_t offset, int64_t vocab, int64_t *badIndex) {
  *badIndex = -1;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] < 0 || targets[n] >= vocab) {
      *badIndex = n;
      return;
    }
  if (N <= 0) return;
  chunk = std::max<int64_t>(1, std::min(chunk, V));
  float *L = ws;
  char *sums = reinterpret_cast<char *>(ws + N * chunk); // N doubles: Σ exp(l - running max)
  for (int64_t n = 0; n < N; ++n) stats[2 * n] = -std::numeric_limits<float>::infinity(), stats[2 * n + 1] = 0.0f;
  std::memset(sums, 0, size_t(N) * sizeof(double));
  for (int64_t c0 = 0; c0 < V; c0 += chunk) {
    const int64_t cw = std::min(chunk, V - c0);
    headChunk(h, w, L, N, C, V, c0, cw, tb);
#pragma omp parallel for schedule(static) if (N * cw >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const float *row = L + n * cw;
      const float mc = rowMax(row, cw), m = stats[2 * n], mx = std::max(m, mc);
      double s;
      std::memcpy(&s, sums + n * sizeof(double), sizeof(double));
      if (mx != -std::numeric_limits<float>::infinity()) // (columns of -inf so far: nothing to add)
        s = (s == 0.0 ? 0.0 : s * std::exp(double(m) - double(mx))) + rowSumExp(row, cw, mx);
      std::memcpy(sums + n * sizeof(double), &s, sizeof(double));
      stats[2 * n] = mx;
      const int64_t t = int64_t(targets[n]) - offset - c0;
      if (t >= 0 && t < cw) stats[2 * n + 1] = row[t];
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    double s;
    std::memcpy(&s, sums + n * sizeof(double), sizeof(double));
    stats[2 * n] = static_cast<float>(std::log(s) + double(stats[2 * n]));
  }
}

void linearCeStatsGrad(const float *dstats, const float *h, const float *w, const int32_t *targets, const float *stats,
                       float *dh, float *dw, float *ws, int64_t N, int64_t C, int64_t V, int64_t chunk, bool tb,
                       int64_t offset) {
  chunk = std::max<int64_t>(1, std::min(chunk, V));
  float *dL = ws, *acc = ws + N * chunk; // dh accumulated in f32 over the chunks
  std::memset(acc, 0, sizeof(float) * size_t(N * C));
  for (int64_t c0 = 0; c0 < V; c0 += chunk) {
    const int64_t cw = std::min(chunk, V - c0);
    headChunk(h, w, dL, N, C, V, c0, cw, tb);
    // The gradient of these logits, in place: vocab_ce_stats_grad of columns [offset + c0, ...).
    vocabCeStatsGrad(dstats, dL, targets, stats, dL, N, cw, offset + c0);
    const blasint n = blasint(N), c = blasint(C), k = blasint(cw);
    if (tb) { // w [V, C]: dw rows c0.. = dLᵀ h; dh += dL w[c0.., :]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, c, n, 1.0f, dL, k, h, c, 0.0f, dw + c0 * C, c);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, k, 1.0f, dL, k, w + c0 * C, c, 1.0f, acc, c);
    } else { // w [C, V]: dw columns c0.. = hᵀ dL; dh += dL w[:, c0..]ᵀ
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, k, n, 1.0f, h, c, dL, k, 0.0f, dw + c0, blasint(V));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, c, k, 1.0f, dL, k, w + c0, blasint(V), 1.0f, acc, c);
    }
  }
  std::memcpy(dh, acc, sizeof(float) * size_t(N * C));
}

namespace {
// log Σ_r exp(stats[r, n, 0]) over the P parts.
double partsLse(const float *stats, int64_t N, int64_t P, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < P; ++r) mx = std::max(mx, double(stats[2 * (r * N + n)]));
  double s = 0.0;
  for (int64_t r = 0; r < P; ++r) s += std::exp(double(stats[2 * (r * N + n)]) - mx);
  return std::log(s) + mx;
}
} // namespace

float vocabCeLoss(const float *stats, int64_t N, int64_t P) {
  if (N <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    double target = 0.0;
    for (int64_t r = 0; r < P; ++r) target += double(stats[2 * (r * N + n) + 1]);
    total += partsLse(stats, N, P, n) - target;
  }
  return static_cast<float>(total / static_cast<double>(N));
}

void vocabCeLossGrad(const float *stats, float dloss, float *dstats, int64_t N, int64_t P) {
  if (N <= 0) return;
  const double g = double(dloss) / double(N);
  for (int64_t n = 0; n < N; ++n) {
    const double lse = partsLse(stats, N, P, n);
    for (int64_t r = 0; r < P; ++r) {
      dstats[2 * (r * N + n)] = static_cast<float>(g * std::exp(double(stats[2 * (r * N + n)]) - lse));
      dstats[2 * (r * N + n) + 1] = static_cast<float>(-g);
    }
  }
}

void embeddingGradRows(const float *dy, const int32_t *ids, float *dtable, int64_t N, int64_t V, int64_t C,
                       int64_t offset) {
  std::memset(dtable, 0, sizeof(float) * size_t(V * C));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = int64_t(ids[n]) - offset;
    if (id < 0 || id >= V) continue; // another rank's row
    float *dst = dtable + id * C;
    const float *src = dy + n * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) dst[j] += src[j];
  }
}

// ---------------------------------------------------------------------------------------------
// Optimizer

double sumSquares(const float *x, int64_t n) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

// torch.optim.AdamW (single-tensor path, amsgrad=False, maximize=False):
//   param *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   param -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamw(float *param, const float *grad, float *m, float *v, int64_t n, const AdamWParams &p) {
  const double t = static_cast<double>(p.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  const float stepSize = static_cast<float>(static_cast<double>(p.lr) / bc1);
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weightDecay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, gs = p.gradScale;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - stepSize * mi / (std::sqrt(vi) / bc2Sqrt + eps);
  }
}

} // namespace bigc::rt::cpu
