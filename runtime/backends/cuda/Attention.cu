// Causal multi-head attention on the GPU, forward and backward, never storing the T x T matrix.
//
// Layout (docs/program-format.md): qkv [B,T,3C] holds q, k, v as the column blocks [0,C),
// [C,2C), [2C,3C); head h takes columns [h·D, (h+1)·D) of each (D = C/H). out [B,T,C], lse
// [B,H,T] = log Σ_{j<=t} exp(s·q_t·k_j) with s = 1/√D (natural log).
//
// Tensor-core path (bf16/f16, D in {16, 32, 64, 128}, C % 8 == 0): flash-attention tiles of 64
// queries x 64 keys, 4 warps per block, each warp owning 16 rows; products with mma.sync m16n8k16
// and scores in registers for D <= 64, with WMMA (16x16x16) tiles in shared memory for D = 128
// (fp32 accumulation in both), the softmax in fp32 with an online max and sum per row (FlashAttention-2's
// recurrence). The backward recomputes the probabilities from lse: one kernel per key tile
// accumulates dK and dV over the query tiles at or after it; another per query tile
// accumulates dQ over the key tiles at or before it (no atomics: deterministic, and dqkv is
// written exactly once per element). D_t = dout_t · out_t is computed first.
//
// Generic path (any dtype, head size up to 256, fp32 math): one warp per (b, h, row), on strided
// rows (AttentionGeometry, kernels.h): the packed form above (q, k, v at columns 0, C, 2C of rows
// of 3C) and grouped-query attention (gqa_attention: separate q, k, v; query head h reads kv head
// (headOffset + h) / group; an optional sliding window; a given softmax scale) share its kernels.
// Its backward: dQ one warp per query row; dK and dV one warp per key row of each kv head, summing
// over the query heads of its group in order (no atomics: deterministic, written once).
#include "kernels.cuh"

#include <mma.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

namespace bigc::rt::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- strided geometry (kernels.h, AttentionGeometry) ----------------------------------------------

struct Geo {
  int B, T, H, Hkv, D;
  int64_t sq, skv, so; // row strides (elements) of q (and dq), k/v (and dk/dv), out (and dout)
  int group, headOffset, window;
  float sc;
  __device__ int kvHead(int h) const { return (headOffset + h) / group; }
  __device__ int firstKey(int t) const { return window > 0 ? max(0, t - window + 1) : 0; }
  __device__ int endQuery(int j) const { return window > 0 ? min(T, j + window) : T; } // queries seeing key j: [j, end)
};

// ---- D_t = dout_t . out_t ------------------------------------------------------------------------

// One warp per (b, h, t) of B*H*T rows (the index of lse): rows of dout/out at stride so.
template <class T>
__global__ void rowDotK(const T *dout, const T *out, float *Dv, int B, int T_, int H, int D, int64_t so) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; // over B*H*T
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(B) * H * T_) return;
  const int t = int(row % T_);
  const int64_t bh = row / T_;
  const int h = int(bh % H), b = int(bh / H);
  const int64_t off = (int64_t(b) * T_ + t) * so + int64_t(h) * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += ld(dout, off + d) * ld(out, off + d);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) Dv[row] = s;
}

// ---- generic path ----------------------------------------------------------------------------

constexpr int kMaxPerLane = 8; // head size up to 256
static_assert(32 * kMaxPerLane == kGenericAttentionMaxHead, "the generic kernels' head size limit");

// Forward: one warp per (b, h, t). Lanes take keys 32 at a time (from the window's first key); the
// output row is spread over the lanes (dimension d at lane d % 32).
template <class T> __global__ void attnFwdGenericK(const T *qp, const T *kp, const T *vp, T *out, float *lse, Geo g) {
  extern __shared__ float shq[]; // per warp: D floats of q
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.H * g.T) return;
  const int t = int(row % g.T);
  const int64_t bh = row / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const int D = g.D, kh = g.kvHead(h);
  const float sc = g.sc;
  const T *kb = kp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  const T *vb = vp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  float *q = shq + w * D;
  const T *qr = qp + (int64_t(b) * g.T + t) * g.sq + int64_t(h) * D;
  for (int d = lane; d < D; d += 32) q[d] = ld(qr, d);
  __syncwarp();
  float o[kMaxPerLane];
  for (int k = 0; k < kMaxPerLane; ++k) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = g.firstKey(t); j0 <= t; j0 += 32) {
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j <= t) {
      const T *kr = kb + int64_t(j) * g.skv;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += q[d] * ld(kr, d);
      s = sc * acc;
    }
    float cmax = s;
    for (int x = 16; x > 0; x >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, x));
    const float mNew = fmaxf(m, cmax);
    const float corr = m == -INFINITY ? 0.0f : expf(m - mNew);
    const float p = j <= t ? expf(s - mNew) : 0.0f;
    float psum = p;
    for (int x = 16; x > 0; x >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, x);
    l = l * corr + psum;
    m = mNew;
    for (int k = 0; k < kMaxPerLane; ++k) o[k] *= corr;
    const int last = min(31, t - j0);
    for (int jj = 0; jj <= last; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const T *vr = vb + int64_t(j0 + jj) * g.skv;
#pragma unroll
      for (int k = 0; k < kMaxPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < D) o[k] += pj * ld(vr, d);
      }
    }
  }
  const int64_t ooff = (int64_t(b) * g.T + t) * g.so + int64_t(h) * D;
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) st(out, ooff + d, o[k] / l);
  }
  if (lane == 0) lse[row] = m + logf(l);
}

// dQ: one warp per (b, h, t): dq = s Σ_j p_tj (dp_tj - D_t) k_j over the keys row t sees.
template <class T>
__global__ void attnDqGenericK(const T *dout, const T *qp, const T *kp, const T *vp, const float *lse, const float *Dv,
                               T *dqp, Geo g) {
  extern __shared__ float sh[]; // per warp: q (D), dout (D)
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.H * g.T) return;
  const int t = int(row % g.T);
  const int64_t bh = row / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const int D = g.D, kh = g.kvHead(h);
  const float sc = g.sc;
  const T *kb = kp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  const T *vb = vp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  float *q = sh + w * 2 * D, *dor = q + D;
  const int64_t qoff = (int64_t(b) * g.T + t) * g.sq + int64_t(h) * D;
  const int64_t ooff = (int64_t(b) * g.T + t) * g.so + int64_t(h) * D;
  for (int d = lane; d < D; d += 32) {
    q[d] = ld(qp, qoff + d);
    dor[d] = ld(dout, ooff + d);
  }
  __syncwarp();
  const float L = lse[row], Dt = Dv[row];
  float dq[kMaxPerLane];
  for (int k = 0; k < kMaxPerLane; ++k) dq[k] = 0.0f;
  for (int j0 = g.firstKey(t); j0 <= t; j0 += 32) {
    const int j = j0 + lane;
    float ds = 0.0f;
    if (j <= t) {
      const T *kr = kb + int64_t(j) * g.skv, *vr = vb + int64_t(j) * g.skv;
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        qk += q[d] * ld(kr, d);
        dp += dor[d] * ld(vr, d);
      }
      const float p = expf(sc * qk - L);
      ds = p * (dp - Dt);
    }
    const int last = min(31, t - j0);
    for (int jj = 0; jj <= last; ++jj) {
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
      const T *kr = kb + int64_t(j0 + jj) * g.skv;
#pragma unroll
      for (int k = 0; k < kMaxPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < D) dq[k] += dsj * ld(kr, d);
      }
    }
  }
  T *dst = dqp + qoff;
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) st(dst, d, sc * dq[k]);
  }
}

// dK, dV: one warp per (b, kv head, key j), summing over the query heads of the kv head's group
// (in head order) and each head's queries that see key j (in order): dk = s Σ ds_tj q_t,
// dv = Σ p_tj dout_t. Each warp writes its rows once: race-free, no atomics, deterministic; a kv
// head no query head here reads gets zeros.
template <class T>
__global__ void attnDkvGenericK(const T *dout, const T *qp, const T *kp, const T *vp, const float *lse, const float *Dv,
                                T *dkp, T *dvp, Geo g) {
  extern __shared__ float sh[]; // per warp: k (D), v (D)
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.Hkv * g.T) return;
  const int j = int(row % g.T);
  const int64_t bk = row / g.T;
  const int kh = int(bk % g.Hkv), b = int(bk / g.Hkv);
  const int D = g.D;
  const float sc = g.sc;
  const int64_t kvoff = (int64_t(b) * g.T + j) * g.skv + int64_t(kh) * D;
  float *kj = sh + w * 2 * D, *vj = kj + D;
  for (int d = lane; d < D; d += 32) {
    kj[d] = ld(kp, kvoff + d);
    vj[d] = ld(vp, kvoff + d);
  }
  __syncwarp();
  float dk[kMaxPerLane], dv[kMaxPerLane];
  for (int k = 0; k < kMaxPerLane; ++k) dk[k] = dv[k] = 0.0f;
  // The query heads h with (headOffset + h) / group == kh.
  const int hLo = max(0, kh * g.group - g.headOffset), hHi = min(g.H, (kh + 1) * g.group - g.headOffset);
  const int tEnd = g.endQuery(j);
  for (int h = hLo; h < hHi; ++h) {
    const int64_t bh = int64_t(b) * g.H + h;
    const float *Lrow = lse + bh * g.T, *Drow = Dv + bh * g.T;
    const T *qb = qp + int64_t(b) * g.T * g.sq + int64_t(h) * D;
    const T *ob = dout + int64_t(b) * g.T * g.so + int64_t(h) * D;
    for (int t0 = j; t0 < tEnd; t0 += 32) {
      const int t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < tEnd) {
        const T *qr = qb + int64_t(t) * g.sq;
        const T *dr = ob + int64_t(t) * g.so;
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < D; ++d) {
          qk += ld(qr, d) * kj[d];
          dp += ld(dr, d) * vj[d];
        }
        p = expf(sc * qk - Lrow[t]);
        ds = p * (dp - Drow[t]);
      }
      const int last = min(31, tEnd - 1 - t0);
      for (int tt = 0; tt <= last; ++tt) {
        const float pt = __shfl_sync(0xffffffffu, p, tt), dst = __shfl_sync(0xffffffffu, ds, tt);
        const T *qr = qb + int64_t(t0 + tt) * g.sq;
        const T *dr = ob + int64_t(t0 + tt) * g.so;
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < D) {
            dk[k] += dst * ld(qr, d);
            dv[k] += pt * ld(dr, d);
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) {
      st(dkp, kvoff + d, sc * dk[k]);
      st(dvp, kvoff + d, dv[k]);
    }
  }
}

// ---- tensor-core path --------------------------------------------------------------------------

constexpr int kTile = 64;       // queries and keys per tile
constexpr int kWarps = 4;       // 16 rows each
constexpr int kPLd = kTile + 8; // leading dimension (elements) of the 16-bit 16 x 64 tiles

template <int D> struct TileGeom {
  static constexpr int LD = D + 8;                       // 16-bit tiles of 64 x D
  static constexpr int SW = (D > kTile ? D : kTile) + 4; // fp32 scratch of 16 x max(64, D) per warp
};

// Copies rows [r0, r0 + 64) of the column block at `col` (D columns) of a [.., stride] matrix into
// a 64 x LD tile; rows at or beyond T are zeros. 16-byte accesses.
template <class T, int D>
__device__ __forceinline__ void loadTile(T *tile, const T *src, int64_t stride, int64_t col, int r0, int T_) {
  constexpr int LD = TileGeom<D>::LD, V = D / 8;
  for (int i = threadIdx.x; i < kTile * V; i += blockDim.x) {
    const int r = i / V, c = (i % V) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < T_) val = *reinterpret_cast<const uint4 *>(src + int64_t(r0 + r) * stride + col + c);
    *reinterpret_cast<uint4 *>(tile + r * LD + c) = val;
  }
}

// loadTile's asynchronous form (cp.async, 16 bytes each, zeros for rows at or beyond T): the copy
// runs while the block computes on the other buffer; cpAsyncWait then __syncthreads before use.
__device__ __forceinline__ void cpAsync16(void *dst, const void *src, bool valid) {
  const unsigned a = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
template <class T, int D>
__device__ __forceinline__ void loadTileAsync(T *tile, const T *src, int64_t stride, int64_t col, int r0, int T_) {
  constexpr int LD = TileGeom<D>::LD, V = D / 8;
  for (int i = threadIdx.x; i < kTile * V; i += blockDim.x) {
    const int r = i / V, c = (i % V) * 8;
    const bool valid = r0 + r < T_;
    cpAsync16(tile + r * LD + c, src + int64_t(valid ? r0 + r : 0) * stride + col + c, valid);
  }
}

template <class T, int D> size_t fwdSmem() {
  return size_t(3 * kTile * TileGeom<D>::LD) * sizeof(T) + size_t(kWarps * 16 * TileGeom<D>::SW) * 4 +
         size_t(kWarps * 16 * kPLd) * sizeof(T);
}

template <class T, int D>
__global__ void __launch_bounds__(128) flashFwdK(const T *qkv, T *out, float *lse, int T_, int C, int H, float scLog2) {
  constexpr int LD = TileGeom<D>::LD, SW = TileGeom<D>::SW, HALF = D / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  T *sQ = reinterpret_cast<T *>(smem);
  T *sK = sQ + kTile * LD;
  T *sV = sK + kTile * LD;
  float *sS = reinterpret_cast<float *>(sV + kTile * LD);
  T *sP = reinterpret_cast<T *>(sS + kWarps * 16 * SW);

  const int nt = gridDim.x;
  const int qt = nt - 1 - int(blockIdx.x); // the longest rows first
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int q0 = qt * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  float *sSw = sS + warp * 16 * SW;
  T *sPw = sP + warp * 16 * kPLd;
  const int r = lane >> 1, half = lane & 1; // this lane's row of the warp's 16 and half of the columns
  const int qrow = q0 + warp * 16 + r;

  loadTile<T, D>(sQ, base, C3, int64_t(h) * D, q0, T_);

  float o[HALF];
#pragma unroll
  for (int d = 0; d < HALF; ++d) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    loadTile<T, D>(sK, base, C3, C + int64_t(h) * D, k0, T_);
    loadTile<T, D>(sV, base, C3, 2LL * C + int64_t(h) * D, k0, T_);
    __syncthreads();

    { // S = Q_w K^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTile / 16];
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, sQ + warp * 16 * LD + kk * 16, LD);
#pragma unroll
        for (int n = 0; n < kTile / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
          wmma::load_matrix_sync(bf, sK + n * 16 * LD + kk * 16, LD);
          wmma::mma_sync(acc[n], a, bf, acc[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) wmma::store_matrix_sync(sSw + n * 16, acc[n], SW, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of this lane's half row (log2 domain).
    const float *srow = sSw + r * SW + half * 32;
    float mx = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int key = k0 + half * 32 + c;
      if (key <= qrow && key < T_) mx = fmaxf(mx, srow[c] * scLog2);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float mNew = fmaxf(m, mx);
    const float alpha = (m == -INFINITY) ? 0.0f : exp2f(m - mNew);
    float rowsum = 0.0f;
    T *prow = sPw + r * kPLd + half * 32;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int key = k0 + half * 32 + c;
      const float p = (key <= qrow && key < T_ && mNew != -INFINITY) ? exp2f(srow[c] * scLog2 - mNew) : 0.0f;
      rowsum += p;
      prow[c] = fromFloat<T>(p);
    }
    rowsum += __shfl_xor_sync(0xffffffffu, rowsum, 1);
    l = l * alpha + rowsum;
    m = mNew;
#pragma unroll
    for (int d = 0; d < HALF; ++d) o[d] *= alpha;
    __syncwarp();

    { // O_w += P_w V
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[D / 16];
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, sPw + kk * 16, kPLd);
#pragma unroll
        for (int n = 0; n < D / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
          wmma::load_matrix_sync(bf, sV + kk * 16 * LD + n * 16, LD);
          wmma::mma_sync(acc[n], a, bf, acc[n]);
        }
      }
      __syncwarp();
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(sSw + n * 16, acc[n], SW, wmma::mem_row_major);
    }
    __syncwarp();
    const float *pv = sSw + r * SW + half * HALF;
#pragma unroll
    for (int d = 0; d < HALF; ++d) o[d] += pv[d];
    __syncwarp();
  }

  if (qrow < T_) {
    const float inv = 1.0f / l;
    T *orow = out + (int64_t(b) * T_ + qrow) * C + int64_t(h) * D + half * HALF;
#pragma unroll
    for (int d = 0; d < HALF; ++d) orow[d] = fromFloat<T>(o[d] * inv);
    if (half == 0) lse[int64_t(bh) * T_ + qrow] = m * kLn2 + logf(l);
  }
}

template <class T, int D> size_t bwdSmem() {
  return size_t(4 * kTile * TileGeom<D>::LD) * sizeof(T) + size_t(2 * kTile) * 4 +
         size_t(2 * kWarps * 16 * TileGeom<D>::SW) * 4 + size_t(2 * kWarps * 16 * kPLd) * sizeof(T);
}

// One block per (key tile, b·h): dK and dV of its 64 keys over the query tiles at or after it.
template <class T, int D>
__global__ void __launch_bounds__(128)
    flashDkvK(const T *dout, const T *qkv, const float *lse, const float *Dv, T *dqkv, int T_, int C, int H, float sc) {
  constexpr int LD = TileGeom<D>::LD, SW = TileGeom<D>::SW;
  extern __shared__ __align__(128) unsigned char smem[];
  T *sK = reinterpret_cast<T *>(smem);
  T *sV = sK + kTile * LD;
  T *sQ = sV + kTile * LD;
  T *sO = sQ + kTile * LD; // dout tile
  float *sL = reinterpret_cast<float *>(sO + kTile * LD);
  float *sD = sL + kTile;
  float *sS = sD + kTile;                               // per warp 16 x SW: S^T
  float *sT = sS + kWarps * 16 * SW;                    // per warp 16 x SW: dP^T
  T *sP = reinterpret_cast<T *>(sT + kWarps * 16 * SW); // per warp 16 x kPLd: P^T
  T *sG = sP + kWarps * 16 * kPLd;                      // per warp 16 x kPLd: dS^T

  const int nt = (T_ + kTile - 1) / kTile;
  const int jt = blockIdx.x; // key tile: the first ones have the most query tiles
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int k0 = jt * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  const T *obase = dout + int64_t(b) * T_ * C;
  const float scLog2 = sc * kLog2e;
  float *sSw = sS + warp * 16 * SW, *sTw = sT + warp * 16 * SW;
  T *sPw = sP + warp * 16 * kPLd, *sGw = sG + warp * 16 * kPLd;
  const int r = lane >> 1, half = lane & 1;
  const int key = k0 + warp * 16 + r;

  loadTile<T, D>(sK, base, C3, C + int64_t(h) * D, k0, T_);
  loadTile<T, D>(sV, base, C3, 2LL * C + int64_t(h) * D, k0, T_);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dK[D / 16], dV[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dK[n], 0.0f), wmma::fill_fragment(dV[n], 0.0f);

  for (int it = jt; it < nt; ++it) {
    const int q0 = it * kTile;
    __syncthreads();
    loadTile<T, D>(sQ, base, C3, int64_t(h) * D, q0, T_);
    loadTile<T, D>(sO, obase, C, int64_t(h) * D, q0, T_);
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const int q = q0 + i;
      sL[i] = q < T_ ? lse[int64_t(bh) * T_ + q] * kLog2e : 0.0f;
      sD[i] = q < T_ ? Dv[int64_t(bh) * T_ + q] : 0.0f;
    }
    __syncthreads();
    { // S^T_w = K_w Q^T, dP^T_w = V_w dO^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[kTile / 16], dp[kTile / 16];
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(s[n], 0.0f), wmma::fill_fragment(dp[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ak, av;
        wmma::load_matrix_sync(ak, sK + warp * 16 * LD + kk * 16, LD);
        wmma::load_matrix_sync(av, sV + warp * 16 * LD + kk * 16, LD);
#pragma unroll
        for (int n = 0; n < kTile / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bq, bo;
          wmma::load_matrix_sync(bq, sQ + n * 16 * LD + kk * 16, LD);
          wmma::load_matrix_sync(bo, sO + n * 16 * LD + kk * 16, LD);
          wmma::mma_sync(s[n], ak, bq, s[n]);
          wmma::mma_sync(dp[n], av, bo, dp[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) {
        wmma::store_matrix_sync(sSw + n * 16, s[n], SW, wmma::mem_row_major);
        wmma::store_matrix_sync(sTw + n * 16, dp[n], SW, wmma::mem_row_major);
      }
    }
    __syncwarp();
    // P^T and dS^T of this lane's key row, half of the queries.
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c, q = q0 + col;
      const bool on = q >= key && q < T_ && key < T_;
      const float p = on ? exp2f(sSw[r * SW + col] * scLog2 - sL[col]) : 0.0f;
      const float ds = p * (sTw[r * SW + col] - sD[col]);
      sPw[r * kPLd + col] = fromFloat<T>(p);
      sGw[r * kPLd + col] = fromFloat<T>(ds);
    }
    __syncwarp();
    // dV_w += P^T_w dO, dK_w += dS^T_w Q
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ap, ag;
      wmma::load_matrix_sync(ap, sPw + kk * 16, kPLd);
      wmma::load_matrix_sync(ag, sGw + kk * 16, kPLd);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bo, bq;
        wmma::load_matrix_sync(bo, sO + kk * 16 * LD + n * 16, LD);
        wmma::load_matrix_sync(bq, sQ + kk * 16 * LD + n * 16, LD);
        wmma::mma_sync(dV[n], ap, bo, dV[n]);
        wmma::mma_sync(dK[n], ag, bq, dK[n]);
      }
    }
  }
  // Write dK (scaled by s) and dV through the warp's scratch.
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(sSw + n * 16, dK[n], SW, wmma::mem_row_major);
    wmma::store_matrix_sync(sTw + n * 16, dV[n], SW, wmma::mem_row_major);
  }
  __syncwarp();
  if (key < T_) {
    T *dst = dqkv + (int64_t(b) * T_ + key) * C3 + int64_t(h) * D;
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) {
      dst[C + d] = fromFloat<T>(sc * sSw[r * SW + d]);
      dst[2LL * C + d] = fromFloat<T>(sTw[r * SW + d]);
    }
  }
}

// One block per (query tile, b·h): dQ of its 64 queries over the key tiles at or before it.
template <class T, int D>
__global__ void __launch_bounds__(128)
    flashDqK(const T *dout, const T *qkv, const float *lse, const float *Dv, T *dqkv, int T_, int C, int H, float sc) {
  constexpr int LD = TileGeom<D>::LD, SW = TileGeom<D>::SW;
  extern __shared__ __align__(128) unsigned char smem[];
  T *sQ = reinterpret_cast<T *>(smem);
  T *sO = sQ + kTile * LD;
  T *sK = sO + kTile * LD;
  T *sV = sK + kTile * LD;
  float *sL = reinterpret_cast<float *>(sV + kTile * LD);
  float *sD = sL + kTile;
  float *sS = sD + kTile;
  float *sT = sS + kWarps * 16 * SW;
  T *sG = reinterpret_cast<T *>(sT + kWarps * 16 * SW);

  const int nt = gridDim.x;
  const int it = nt - 1 - int(blockIdx.x); // the most key tiles first
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int q0 = it * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  const T *obase = dout + int64_t(b) * T_ * C;
  const float scLog2 = sc * kLog2e;
  float *sSw = sS + warp * 16 * SW, *sTw = sT + warp * 16 * SW;
  T *sGw = sG + warp * 16 * kPLd;
  const int r = lane >> 1, half = lane & 1;
  const int qrow = q0 + warp * 16 + r;

  loadTile<T, D>(sQ, base, C3, int64_t(h) * D, q0, T_);
  loadTile<T, D>(sO, obase, C, int64_t(h) * D, q0, T_);
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const int q = q0 + i;
    sL[i] = q < T_ ? lse[int64_t(bh) * T_ + q] * kLog2e : 0.0f;
    sD[i] = q < T_ ? Dv[int64_t(bh) * T_ + q] : 0.0f;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dQ[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dQ[n], 0.0f);

  for (int jt = 0; jt <= it; ++jt) {
    const int k0 = jt * kTile;
    __syncthreads();
    loadTile<T, D>(sK, base, C3, C + int64_t(h) * D, k0, T_);
    loadTile<T, D>(sV, base, C3, 2LL * C + int64_t(h) * D, k0, T_);
    __syncthreads();
    { // S_w = Q_w K^T, dP_w = dO_w V^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[kTile / 16], dp[kTile / 16];
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(s[n], 0.0f), wmma::fill_fragment(dp[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> aq, ao;
        wmma::load_matrix_sync(aq, sQ + warp * 16 * LD + kk * 16, LD);
        wmma::load_matrix_sync(ao, sO + warp * 16 * LD + kk * 16, LD);
#pragma unroll
        for (int n = 0; n < kTile / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bk, bv;
          wmma::load_matrix_sync(bk, sK + n * 16 * LD + kk * 16, LD);
          wmma::load_matrix_sync(bv, sV + n * 16 * LD + kk * 16, LD);
          wmma::mma_sync(s[n], aq, bk, s[n]);
          wmma::mma_sync(dp[n], ao, bv, dp[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) {
        wmma::store_matrix_sync(sSw + n * 16, s[n], SW, wmma::mem_row_major);
        wmma::store_matrix_sync(sTw + n * 16, dp[n], SW, wmma::mem_row_major);
      }
    }
    __syncwarp();
    const int rowIn = warp * 16 + r;
    const float L = sL[rowIn], Dt = sD[rowIn];
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c, key = k0 + col;
      const bool on = key <= qrow && key < T_ && qrow < T_;
      const float p = on ? exp2f(sSw[r * SW + col] * scLog2 - L) : 0.0f;
      sGw[r * kPLd + col] = fromFloat<T>(p * (sTw[r * SW + col] - Dt));
    }
    __syncwarp();
    // dQ_w += dS_w K
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ag;
      wmma::load_matrix_sync(ag, sGw + kk * 16, kPLd);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bk;
        wmma::load_matrix_sync(bk, sK + kk * 16 * LD + n * 16, LD);
        wmma::mma_sync(dQ[n], ag, bk, dQ[n]);
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(sSw + n * 16, dQ[n], SW, wmma::mem_row_major);
  __syncwarp();
  if (qrow < T_) {
    T *dst = dqkv + (int64_t(b) * T_ + qrow) * C3 + int64_t(h) * D;
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) dst[d] = fromFloat<T>(sc * sSw[r * SW + d]);
  }
}

// ---- tensor-core path, register-resident (head sizes 16, 32, 64) ---------------------------------
// FlashAttention-2's structure with mma.sync.m16n8k16 (bf16/f16 in, fp32 accumulate): operands
// come from shared memory through ldmatrix, the scores stay in registers, and the accumulator
// fragment of S = Q K^T is re-packed in registers as the A operand of P V (the m16n8 C layout of
// two adjacent n-tiles is the m16k16 A layout). Fragment layouts (PTX ISA, mma.m16n8k16): with
// g = lane / 4 and c = lane % 4, A holds rows g and g + 8 at columns 2c, 2c + 1 (and + 8); B holds
// k = 2c, 2c + 1 (and + 8) at column g; C holds rows g and g + 8 at columns 2c, 2c + 1.

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void *p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void *p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, bf16>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x in one instruction (the SFU's ex2.approx: relative error about 2^-22, denormal results
// flushed to zero; 2^-inf = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same<T, bf16>::value) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
}

// Addresses for ldmatrix.x4 (lane = this thread's lane): the A operand (16 x 16 at row r0, column
// c0 of a row-major tile), the B operand of two n-tiles from an [n][k] tile (non-transposed) and
// from a [k][n] tile (transposed).
template <int LD, class T> __device__ __forceinline__ const T *aAddr(const T *tile, int r0, int c0, int lane) {
  return tile + (r0 + (lane & 15)) * LD + c0 + (lane >> 4) * 8;
}
template <int LD, class T> __device__ __forceinline__ const T *bAddrNK(const T *tile, int n0, int k0, int lane) {
  return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8;
}
template <int LD, class T> __device__ __forceinline__ const T *bAddrKN(const T *tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8;
}

// acc[NT][4] += A (16 x 16·KD, fragments a) times the [n][k] tile's rows n0.. (NT n-tiles of 8).
template <class T, int LD, int NT, int KD>
__device__ __forceinline__ void mmaNK(float (&acc)[NT][4], const uint32_t (&a)[KD][4], const T *tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < KD; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm4(b, bAddrNK<LD>(tile, np * 16, kk * 16, lane));
      mma16816<T>(acc[2 * np], a[kk], b[0], b[1]);
      mma16816<T>(acc[2 * np + 1], a[kk], b[2], b[3]);
    }
}

// acc[DT][4] += P (16 x 64, the C fragments p of 8 n-tiles) times the [k][n] tile (64 x 8·DT).
template <class T, int LD, int DT>
__device__ __forceinline__ void mmaPV(float (&acc)[DT][4], const float (&p)[8][4], const T *tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                           pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      uint32_t b[4];
      ldsm4t(b, bAddrKN<LD>(tile, kk * 16, dp * 16, lane));
      mma16816<T>(acc[2 * dp], a, b[0], b[1]);
      mma16816<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

template <class T, int D> size_t fa2Smem(int tiles) {
  return size_t(tiles * kTile * TileGeom<D>::LD) * sizeof(T) + 2 * kTile * 4;
}

template <class T, int D>
__global__ void __launch_bounds__(128) fa2FwdK(const T *qkv, T *out, float *lse, int T_, int C, int H, float scLog2) {
  constexpr int LD = TileGeom<D>::LD, DT = D / 8, KD = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  // Q, then two buffers of K and V: the next key tile loads while this one is used.
  T *sQ = reinterpret_cast<T *>(smem);
  T *sKV = sQ + kTile * LD; // [buffer][K, V][64][LD]
  const int qt = int(gridDim.x) - 1 - int(blockIdx.x);
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, tc = lane & 3;
  const int q0 = qt * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  auto loadKV = [&](int kt) {
    T *dst = sKV + (kt & 1) * 2 * kTile * LD;
    loadTileAsync<T, D>(dst, base, C3, C + int64_t(h) * D, kt * kTile, T_);
    loadTileAsync<T, D>(dst + kTile * LD, base, C3, 2LL * C + int64_t(h) * D, kt * kTile, T_);
    cpAsyncCommit();
  };
  loadTileAsync<T, D>(sQ, base, C3, int64_t(h) * D, q0, T_);
  cpAsyncCommit();
  loadKV(0);
  cpAsyncWait<1>(); // Q (the first K, V may still be on their way)
  __syncthreads();
  uint32_t qf[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) ldsm4(qf[kk], aAddr<LD>(sQ, warp * 16, kk * 16, lane));
  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    if (kt < qt) { // the next tile's copy starts; this one's is waited for
      loadKV(kt + 1);
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const T *sK = sKV + (kt & 1) * 2 * kTile * LD, *sV = sK + kTile * LD;
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    mmaNK<T, LD, 8, KD>(s, qf, sK, lane);
    // Only the diagonal tile has keys after a query (and the keys at or beyond T, in the last tile,
    // are on it): the masking there alone. Every row sees key 0 in the first tile, so its running
    // max is finite from then on and 2^(-inf - m) = 0 needs no test.
    if (kt == qt) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + j * 8 + tc * 2 + (e & 1);
          if (key > row[e >> 1] || key >= T_) s[j][e] = -INFINITY;
        }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    float alpha[2], rs[2] = {0.0f, 0.0f}, ms[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float mn = fmaxf(m[i], mx[i] * scLog2); // (the scale is positive: the max of the scaled)
      alpha[i] = ex2(m[i] - mn);                    // (0 on the first tile: m = -inf)
      m[i] = mn;
      ms[i] = -mn;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = ex2(fmaf(s[j][e], scLog2, ms[e >> 1]));
        s[j][e] = p;
        rs[e >> 1] += p;
      }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 1);
      rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 2);
      l[i] = l[i] * alpha[i] + rs[i];
    }
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] *= alpha[0], o[d][1] *= alpha[0], o[d][2] *= alpha[1], o[d][3] *= alpha[1];
    mmaPV<T, LD, DT>(o, s, sV, lane);
    __syncthreads(); // this buffer is the one the iteration after next loads into
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row[i] >= T_) continue;
    const float inv = 1.0f / l[i];
    T *dst = out + (int64_t(b) * T_ + row[i]) * C + int64_t(h) * D;
#pragma unroll
    for (int d = 0; d < DT; ++d)
      *reinterpret_cast<uint32_t *>(dst + d * 8 + tc * 2) = pack2<T>(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
    if (tc == 0) lse[int64_t(bh) * T_ + row[i]] = m[i] * kLn2 + logf(l[i]);
  }
}

// dK, dV of one tile of 64 keys (each warp 16 keys) over the query tiles at or after it.
template <class T, int D>
__global__ void __launch_bounds__(128)
    fa2DkvK(const T *dout, const T *qkv, const float *lse, const float *Dv, T *dqkv, int T_, int C, int H, float sc) {
  constexpr int LD = TileGeom<D>::LD, DT = D / 8, KD = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  // K, V, then two buffers of Q and dO (the next query tile loads while this one is used), then lse
  // and D of the current query tile.
  T *sK = reinterpret_cast<T *>(smem);
  T *sV = sK + kTile * LD;
  T *sQO = sV + kTile * LD; // [buffer][Q, dO][64][LD]
  float *sL = reinterpret_cast<float *>(sQO + 4 * kTile * LD);
  float *sD = sL + kTile;
  const int nt = (T_ + kTile - 1) / kTile;
  const int jt = blockIdx.x;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, tc = lane & 3;
  const int k0 = jt * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  const T *obase = dout + int64_t(b) * T_ * C;
  const float scLog2 = sc * kLog2e;
  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

  auto loadQO = [&](int it) {
    T *dst = sQO + ((it - jt) & 1) * 2 * kTile * LD;
    loadTileAsync<T, D>(dst, base, C3, int64_t(h) * D, it * kTile, T_);
    loadTileAsync<T, D>(dst + kTile * LD, obase, C, int64_t(h) * D, it * kTile, T_);
    cpAsyncCommit();
  };
  loadTileAsync<T, D>(sK, base, C3, C + int64_t(h) * D, k0, T_);
  loadTileAsync<T, D>(sV, base, C3, 2LL * C + int64_t(h) * D, k0, T_);
  cpAsyncCommit();
  loadQO(jt);
  cpAsyncWait<1>(); // K and V (the first Q, dO may still be on their way)
  __syncthreads();
  uint32_t kf[KD][4], vf[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    ldsm4(kf[kk], aAddr<LD>(sK, warp * 16, kk * 16, lane));
    ldsm4(vf[kk], aAddr<LD>(sV, warp * 16, kk * 16, lane));
  }
  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;

  for (int it = jt; it < nt; ++it) {
    const int q0 = it * kTile;
    if (it + 1 < nt) { // the next tile's copy starts; this one's is waited for
      loadQO(it + 1);
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    const T *sQ = sQO + ((it - jt) & 1) * 2 * kTile * LD, *sO = sQ + kTile * LD;
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const int q = q0 + i;
      sL[i] = q < T_ ? lse[int64_t(bh) * T_ + q] * kLog2e : 0.0f;
      sD[i] = q < T_ ? Dv[int64_t(bh) * T_ + q] : 0.0f;
    }
    __syncthreads();
    float s[8][4], dp[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    mmaNK<T, LD, 8, KD>(s, kf, sQ, lane);  // S^T = K Q^T (rows: keys, columns: queries)
    mmaNK<T, LD, 8, KD>(dp, vf, sO, lane); // dP^T = V dO^T
    // Masked only on the diagonal tile and the last one (queries at or beyond T).
    const bool edge = it == jt || q0 + kTile > T_;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + tc * 2 + (e & 1);
        float p = ex2(fmaf(s[j][e], scLog2, -sL[col]));
        if (edge) {
          const int q = q0 + col, k = key[e >> 1];
          if (q < k || q >= T_ || k >= T_) p = 0.0f;
        }
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - sD[col]);
      }
    mmaPV<T, LD, DT>(dv, s, sO, lane);  // dV += P^T dO
    mmaPV<T, LD, DT>(dk, dp, sQ, lane); // dK += dS^T Q
    __syncthreads();                    // (lse, D and this buffer are rewritten by the next iterations)
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (key[i] >= T_) continue;
    T *dst = dqkv + (int64_t(b) * T_ + key[i]) * C3 + int64_t(h) * D;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      *reinterpret_cast<uint32_t *>(dst + C + d * 8 + tc * 2) = pack2<T>(sc * dk[d][2 * i], sc * dk[d][2 * i + 1]);
      *reinterpret_cast<uint32_t *>(dst + 2LL * C + d * 8 + tc * 2) = pack2<T>(dv[d][2 * i], dv[d][2 * i + 1]);
    }
  }
}

// dQ of one tile of 64 queries (each warp 16) over the key tiles at or before it.
template <class T, int D>
__global__ void __launch_bounds__(128)
    fa2DqK(const T *dout, const T *qkv, const float *lse, const float *Dv, T *dqkv, int T_, int C, int H, float sc) {
  constexpr int LD = TileGeom<D>::LD, DT = D / 8, KD = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  // Q, dO, then two buffers of K and V: the next key tile loads while this one is used.
  T *sQ = reinterpret_cast<T *>(smem);
  T *sO = sQ + kTile * LD;
  T *sKV = sO + kTile * LD; // [buffer][K, V][64][LD]
  const int it = int(gridDim.x) - 1 - int(blockIdx.x);
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, tc = lane & 3;
  const int q0 = it * kTile;
  const int64_t C3 = 3LL * C;
  const T *base = qkv + int64_t(b) * T_ * C3;
  const T *obase = dout + int64_t(b) * T_ * C;
  const float scLog2 = sc * kLog2e;
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  auto loadKV = [&](int jt) {
    T *dst = sKV + (jt & 1) * 2 * kTile * LD;
    loadTileAsync<T, D>(dst, base, C3, C + int64_t(h) * D, jt * kTile, T_);
    loadTileAsync<T, D>(dst + kTile * LD, base, C3, 2LL * C + int64_t(h) * D, jt * kTile, T_);
    cpAsyncCommit();
  };
  loadTileAsync<T, D>(sQ, base, C3, int64_t(h) * D, q0, T_);
  loadTileAsync<T, D>(sO, obase, C, int64_t(h) * D, q0, T_);
  cpAsyncCommit();
  loadKV(0);
  cpAsyncWait<1>(); // Q and dO (the first K, V may still be on their way)
  __syncthreads();
  uint32_t qf[KD][4], of[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    ldsm4(qf[kk], aAddr<LD>(sQ, warp * 16, kk * 16, lane));
    ldsm4(of[kk], aAddr<LD>(sO, warp * 16, kk * 16, lane));
  }
  float L[2], Dr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    L[i] = row[i] < T_ ? lse[int64_t(bh) * T_ + row[i]] * kLog2e : 0.0f;
    Dr[i] = row[i] < T_ ? Dv[int64_t(bh) * T_ + row[i]] : 0.0f;
  }
  float dq[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

  for (int jt = 0; jt <= it; ++jt) {
    const int k0 = jt * kTile;
    if (jt < it) { // the next tile's copy starts; this one's is waited for
      loadKV(jt + 1);
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const T *sK = sKV + (jt & 1) * 2 * kTile * LD, *sV = sK + kTile * LD;
    float s[8][4], dp[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    mmaNK<T, LD, 8, KD>(s, qf, sK, lane);  // S = Q K^T
    mmaNK<T, LD, 8, KD>(dp, of, sV, lane); // dP = dO V^T
    // Masked only on the diagonal tile (the keys at or beyond T are on it; rows at or beyond T are
    // not written).
    const bool diag = jt == it;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        float p = ex2(fmaf(s[j][e], scLog2, -L[i]));
        if (diag) {
          const int k = k0 + j * 8 + tc * 2 + (e & 1);
          if (k > row[i] || k >= T_) p = 0.0f;
        }
        s[j][e] = p * (dp[j][e] - Dr[i]);
      }
    mmaPV<T, LD, DT>(dq, s, sK, lane); // dQ += dS K
    __syncthreads();                   // this buffer is the one the iteration after next loads into
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row[i] >= T_) continue;
    T *dst = dqkv + (int64_t(b) * T_ + row[i]) * C3 + int64_t(h) * D;
#pragma unroll
    for (int d = 0; d < DT; ++d)
      *reinterpret_cast<uint32_t *>(dst + d * 8 + tc * 2) = pack2<T>(sc * dq[d][2 * i], sc * dq[d][2 * i + 1]);
  }
}

// Opts `kernel` in to `bytes` of dynamic shared memory above the default 48 KiB. The attribute
// belongs to the current device: set once per (kernel, device), so that every GPU of a process
// (one engine per device) can launch the kernel, not only the first one that did.
template <class K> void allowSmem(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::set<std::pair<const void *, int>> done;
  auto check = [](cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
  };
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({reinterpret_cast<const void *>(kernel), device})) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        "cudaFuncSetAttribute (the attention kernel's shared memory)");
  done.insert({reinterpret_cast<const void *>(kernel), device});
}

template <class T, int D>
void flashForward(const T *qkv, T *out, float *lse, int B, int T_, int C, int H, cudaStream_t s) {
  if constexpr (D <= 64) {                // the register-tiled kernels; the shared-memory ones for D = 128
    const size_t smem = fa2Smem<T, D>(5); // Q and two buffers of K, V
    allowSmem(fa2FwdK<T, D>, smem);
    dim3 grid(unsigned((T_ + kTile - 1) / kTile), unsigned(B * H));
    fa2FwdK<T, D><<<grid, kWarps * 32, smem, s>>>(qkv, out, lse, T_, C, H, kLog2e / sqrtf(float(D)));
    return;
  }
  const size_t smem = fwdSmem<T, D>();
  allowSmem(flashFwdK<T, D>, smem);
  dim3 grid(unsigned((T_ + kTile - 1) / kTile), unsigned(B * H));
  const float sc = 1.0f / sqrtf(float(D));
  flashFwdK<T, D><<<grid, kWarps * 32, smem, s>>>(qkv, out, lse, T_, C, H, sc * kLog2e);
}

template <class T, int D>
void flashBackward(const T *dout, const T *qkv, const float *lse, const float *Dv, T *dqkv, int B, int T_, int C, int H,
                   cudaStream_t s) {
  if constexpr (D <= 64) {
    const size_t smem = fa2Smem<T, D>(6); // two tiles and two buffers of two
    allowSmem(fa2DkvK<T, D>, smem);
    allowSmem(fa2DqK<T, D>, smem);
    dim3 grid(unsigned((T_ + kTile - 1) / kTile), unsigned(B * H));
    const float sc = 1.0f / sqrtf(float(D));
    fa2DkvK<T, D><<<grid, kWarps * 32, smem, s>>>(dout, qkv, lse, Dv, dqkv, T_, C, H, sc);
    fa2DqK<T, D><<<grid, kWarps * 32, smem, s>>>(dout, qkv, lse, Dv, dqkv, T_, C, H, sc);
    return;
  }
  const size_t smemKv = bwdSmem<T, D>();
  const size_t smemQ = size_t(4 * kTile * TileGeom<D>::LD) * sizeof(T) + size_t(2 * kTile) * 4 +
                       size_t(2 * kWarps * 16 * TileGeom<D>::SW) * 4 + size_t(kWarps * 16 * kPLd) * sizeof(T);
  allowSmem(flashDkvK<T, D>, smemKv);
  allowSmem(flashDqK<T, D>, smemQ);
  dim3 grid(unsigned((T_ + kTile - 1) / kTile), unsigned(B * H));
  const float sc = 1.0f / sqrtf(float(D));
  flashDkvK<T, D><<<grid, kWarps * 32, smemKv, s>>>(dout, qkv, lse, Dv, dqkv, T_, C, H, sc);
  flashDqK<T, D><<<grid, kWarps * 32, smemQ, s>>>(dout, qkv, lse, Dv, dqkv, T_, C, H, sc);
}

bool tensorCoreShape(int64_t C, int64_t H) {
  if (H <= 0 || C % H != 0 || C % 8 != 0) return false;
  const int64_t D = C / H;
  return D == 16 || D == 32 || D == 64 || D == 128;
}

void checkGrid(int64_t B, int64_t H) {
  if (B * H > 65535)
    throw std::runtime_error("attention: batch x heads = " + std::to_string(B * H) +
                             " exceeds the CUDA backend's limit of 65535");
}

} // namespace

bool attentionUsesTensorCores(DType t, int64_t C, int64_t H) {
  return (t == DType::BF16 || t == DType::F16) && tensorCoreShape(C, H);
}

size_t attentionGradWorkspace(int64_t B, int64_t T, int64_t H) { return align256(size_t(B * H * T) * 4); }

namespace {

Geo geoOf(const AttentionGeometry &a) {
  if (a.D > kGenericAttentionMaxHead)
    throw std::runtime_error("attention: head size " + std::to_string(a.D) + " exceeds the CUDA backend's limit of " +
                             std::to_string(kGenericAttentionMaxHead));
  if (a.H <= 0 || a.Hkv <= 0 || a.group <= 0 || a.D <= 0)
    throw std::runtime_error("attention: bad geometry (heads " + std::to_string(a.H) + ", kv heads " +
                             std::to_string(a.Hkv) + ", group " + std::to_string(a.group) + ", head size " +
                             std::to_string(a.D) + ")");
  Geo g;
  g.B = int(a.B), g.T = int(a.T), g.H = int(a.H), g.Hkv = int(a.Hkv), g.D = int(a.D);
  g.sq = a.sq, g.skv = a.skv, g.so = a.so;
  g.group = int(a.group), g.headOffset = int(a.headOffset), g.window = int(a.window);
  g.sc = a.scale;
  return g;
}

// The packed form's geometry: q, k, v at columns 0, C, 2C of rows of 3C; out rows of C.
AttentionGeometry packedGeometry(int64_t B, int64_t T, int64_t C, int64_t H) {
  AttentionGeometry a;
  a.B = B, a.T = T, a.H = H, a.D = C / H, a.Hkv = H;
  a.sq = a.skv = 3 * C, a.so = C;
  a.scale = 1.0f / sqrtf(float(a.D));
  return a;
}

constexpr int kGenericWarps = 4;

void genericForward(DType t, const Geo &g, const void *q, const void *k, const void *v, void *out, float *lse,
                    cudaStream_t s) {
  const int64_t rows = int64_t(g.B) * g.H * g.T;
  if (rows == 0) return;
  const unsigned grid = unsigned((rows + kGenericWarps - 1) / kGenericWarps);
  const size_t smem = size_t(kGenericWarps * g.D) * 4;
  BIGC_DISPATCH(t, attnFwdGenericK<T>
                <<<grid, kGenericWarps * 32, smem, s>>>(static_cast<const T *>(q), static_cast<const T *>(k),
                                                        static_cast<const T *>(v), static_cast<T *>(out), lse, g));
}

void rowDot(DType t, const Geo &g, const void *dout, const void *out, float *Dv, cudaStream_t s) {
  const int64_t rows = int64_t(g.B) * g.H * g.T;
  if (rows == 0) return;
  const unsigned grid = unsigned((rows + 7) / 8);
  BIGC_DISPATCH(t, rowDotK<T><<<grid, 256, 0, s>>>(static_cast<const T *>(dout), static_cast<const T *>(out), Dv, g.B,
                                                   g.T, g.H, g.D, g.so));
}

// dq (one warp per query row), then dk and dv (one warp per key row of each kv head).
void genericBackward(DType t, const Geo &g, const void *dout, const void *q, const void *k, const void *v,
                     const float *lse, const float *Dv, void *dq, void *dk, void *dv, cudaStream_t s) {
  const int64_t qRows = int64_t(g.B) * g.H * g.T, kvRows = int64_t(g.B) * g.Hkv * g.T;
  const size_t smem = size_t(kGenericWarps * 2 * g.D) * 4;
  BIGC_DISPATCH(t, {
    const T *dO = static_cast<const T *>(dout), *qT = static_cast<const T *>(q);
    const T *kT = static_cast<const T *>(k), *vT = static_cast<const T *>(v);
    if (qRows > 0)
      attnDqGenericK<T><<<unsigned((qRows + kGenericWarps - 1) / kGenericWarps), kGenericWarps * 32, smem, s>>>(
          dO, qT, kT, vT, lse, Dv, static_cast<T *>(dq), g);
    if (kvRows > 0)
      attnDkvGenericK<T><<<unsigned((kvRows + kGenericWarps - 1) / kGenericWarps), kGenericWarps * 32, smem, s>>>(
          dO, qT, kT, vT, lse, Dv, static_cast<T *>(dk), static_cast<T *>(dv), g);
  });
}

const void *at(const void *p, int64_t elems, DType t) { return static_cast<const char *>(p) + elems * dtypeSize(t); }
void *at(void *p, int64_t elems, DType t) { return static_cast<char *>(p) + elems * dtypeSize(t); }

} // namespace

void attention(DType t, const void *qkv, void *out, float *lse, int64_t B, int64_t T, int64_t C, int64_t H,
               cudaStream_t s) {
  if (B * T == 0) return;
  const int64_t D = C / H;
  if (attentionUsesTensorCores(t, C, H)) {
    checkGrid(B, H);
    auto run = [&](auto tag) {
      using TT = decltype(tag);
      const TT *q = static_cast<const TT *>(qkv);
      TT *o = static_cast<TT *>(out);
      switch (D) {
      case 16: flashForward<TT, 16>(q, o, lse, int(B), int(T), int(C), int(H), s); break;
      case 32: flashForward<TT, 32>(q, o, lse, int(B), int(T), int(C), int(H), s); break;
      case 64: flashForward<TT, 64>(q, o, lse, int(B), int(T), int(C), int(H), s); break;
      default: flashForward<TT, 128>(q, o, lse, int(B), int(T), int(C), int(H), s); break;
      }
    };
    if (t == DType::BF16)
      run(bf16{});
    else
      run(f16{});
    return;
  }
  const Geo g = geoOf(packedGeometry(B, T, C, H));
  genericForward(t, g, qkv, at(qkv, C, t), at(qkv, 2 * C, t), out, lse, s);
}

void attentionGrad(DType t, const void *dout, const void *qkv, const void *out, const float *lse, void *dqkv, int64_t B,
                   int64_t T, int64_t C, int64_t H, void *ws, cudaStream_t s) {
  if (B * T == 0) return;
  const int64_t D = C / H;
  float *Dv = static_cast<float *>(ws);
  const bool tensorCores = attentionUsesTensorCores(t, C, H);
  const Geo g = geoOf(packedGeometry(B, T, C, H)); // (tensor-core head sizes are within the generic limit)
  rowDot(t, g, dout, out, Dv, s);
  if (tensorCores) {
    checkGrid(B, H);
    auto run = [&](auto tag) {
      using TT = decltype(tag);
      const TT *dO = static_cast<const TT *>(dout), *q = static_cast<const TT *>(qkv);
      TT *dq = static_cast<TT *>(dqkv);
      switch (D) {
      case 16: flashBackward<TT, 16>(dO, q, lse, Dv, dq, int(B), int(T), int(C), int(H), s); break;
      case 32: flashBackward<TT, 32>(dO, q, lse, Dv, dq, int(B), int(T), int(C), int(H), s); break;
      case 64: flashBackward<TT, 64>(dO, q, lse, Dv, dq, int(B), int(T), int(C), int(H), s); break;
      default: flashBackward<TT, 128>(dO, q, lse, Dv, dq, int(B), int(T), int(C), int(H), s); break;
      }
    };
    if (t == DType::BF16)
      run(bf16{});
    else
      run(f16{});
    return;
  }
  genericBackward(t, g, dout, qkv, at(qkv, C, t), at(qkv, 2 * C, t), lse, Dv, dqkv, at(dqkv, C, t), at(dqkv, 2 * C, t),
                  s);
}

void gqaAttention(DType t, const AttentionGeometry &a, const void *q, const void *k, const void *v, void *out,
                  float *lse, cudaStream_t s) {
  if (a.B * a.T == 0) return;
  genericForward(t, geoOf(a), q, k, v, out, lse, s);
}

void gqaAttentionGrad(DType t, const AttentionGeometry &a, const void *dout, const void *q, const void *k,
                      const void *v, const void *out, const float *lse, void *dq, void *dk, void *dv, void *ws,
                      cudaStream_t s) {
  if (a.B * a.T == 0) return;
  const Geo g = geoOf(a);
  float *Dv = static_cast<float *>(ws);
  rowDot(t, g, dout, out, Dv, s);
  genericBackward(t, g, dout, q, k, v, lse, Dv, dq, dk, dv, s);
}

} // namespace bigc::rt::cuda
