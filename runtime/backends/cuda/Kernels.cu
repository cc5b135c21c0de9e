// CUDA backend kernels except attention (Attention.cu). Contracts: kernels.h. Each kernel reads
// its tensors in their storage type (f32, bf16, f16), computes in fp32, and rounds once to the
// output's type (round to nearest even). Elementwise kernels read element i before writing it,
// so an output may alias one input exactly (the in-place rule of the program format).
#include "kernels.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <initializer_list>
#include <string>

namespace bigc::rt::cuda {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

namespace {

constexpr int kThreads = 256;

int blocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return int(std::max<int64_t>(1, std::min<int64_t>(b, 4 * 65535)));
}

#define BIGC_GRID_LOOP(i, n)                                                                                           \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ void report(ErrSlot e, int64_t pos, int value) {
  if (atomicCAS(e.err, 0, e.instruction + 1) == 0) {
    e.err[1] = int(pos);
    e.err[2] = value;
  }
}

// ---- embedding ------------------------------------------------------------------------------

// The table holds rows [offset, offset + V) of a vocabulary of `vocab` ids (offset 0, vocab V
// unless vocabulary-parallel): ids outside the vocabulary are reported, ids of other rows give zeros.
template <class T>
__global__ void embeddingK(const T *table, const int32_t *ids, T *y, int64_t N, int64_t V, int64_t C, int64_t offset,
                           int64_t vocab, ErrSlot e) {
  BIGC_GRID_LOOP(i, N * C) {
    int64_t n = i / C, c = i - n * C;
    int32_t id = ids[n];
    const int64_t row = int64_t(id) - offset;
    if (id < 0 || id >= vocab) {
      if (c == 0) report(e, n, id);
      y[i] = T(0.0f);
    } else if (row < 0 || row >= V) {
      y[i] = T(0.0f);
    } else {
      y[i] = table[row * C + c];
    }
  }
}

__global__ void embKeysK(const int32_t *ids, int32_t *keys, int32_t *vals, int64_t N, int64_t V, int64_t offset,
                         int64_t vocab, ErrSlot e) {
  BIGC_GRID_LOOP(i, N) {
    int32_t id = ids[i];
    bool ok = id >= 0 && id < vocab;
    if (!ok) report(e, i, id);
    const int64_t row = int64_t(id) - offset;
    // out-of-range ids and other ranks' rows go to a bucket past the table
    keys[i] = ok && row >= 0 && row < V ? int32_t(row) : int32_t(V);
    vals[i] = int32_t(i);
  }
}

__global__ void embBoundsK(const int32_t *keys, int32_t *start, int32_t *end, int64_t N) {
  BIGC_GRID_LOOP(i, N) {
    int32_t k = keys[i];
    if (i == 0 || keys[i - 1] != k) start[k] = int32_t(i);
    if (i == N - 1 || keys[i + 1] != k) end[k] = int32_t(i + 1);
  }
}

// One block per vocabulary row: the sum of dy over the positions holding that id, in position
// order (the CPU's order), written once (rows no position names get zeros).
template <class T>
__global__ void embRowsK(const T *dy, const int32_t *pos, const int32_t *start, const int32_t *end, T *dtable,
                         int64_t C) {
  const int64_t v = blockIdx.x;
  const int32_t a = start[v], b = end[v];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int32_t j = a; j < b; ++j) acc += ld(dy, int64_t(pos[j]) * C + c);
    st(dtable, v * C + c, acc);
  }
}

int sortBits(int64_t V) {
  int bits = 1;
  while ((int64_t(1) << bits) <= V) ++bits; // keys are in [0, V]
  return bits;
}

// A CUDA call's error as an exception naming the call (the engine reports it with the op).
void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

size_t cubSortBytes(int64_t N, int64_t V) {
  size_t bytes = 0;
  checkCuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                            (const int32_t *)nullptr, (int32_t *)nullptr, int(N), 0, sortBits(V)),
            "cub::DeviceRadixSort::SortPairs (workspace size)");
  return bytes;
}

// ---- elementwise -----------------------------------------------------------------------------

template <class T> __global__ void addK(const T *a, const T *b, T *c, int64_t n) {
  BIGC_GRID_LOOP(i, n) st(c, i, ld(a, i) + ld(b, i));
}
template <class T> __global__ void mulK(const T *a, const T *b, T *c, int64_t n) {
  BIGC_GRID_LOOP(i, n) st(c, i, ld(a, i) * ld(b, i));
}
template <class T> __global__ void biasAddK(const T *x, const T *b, T *y, int64_t rows, int64_t cols) {
  BIGC_GRID_LOOP(i, rows * cols) st(y, i, ld(x, i) + ld(b, i % cols));
}
template <class T> __global__ void scaleK(const T *x, T *y, float f, int64_t n) {
  BIGC_GRID_LOOP(i, n) st(y, i, f * ld(x, i));
}
template <class T> __global__ void fillK(T *y, float v, int64_t n) { BIGC_GRID_LOOP(i, n) st(y, i, v); }
__global__ void squareK(const float *x, float *y, int64_t n) { BIGC_GRID_LOOP(i, n) y[i] = x[i] * x[i]; }
__global__ void sqrtK(float *x, int64_t n) { BIGC_GRID_LOOP(i, n) x[i] = sqrtf(x[i]); }

constexpr float kGeluS = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

template <class T> __global__ void geluK(const T *x, T *y, int64_t n) {
  BIGC_GRID_LOOP(i, n) {
    const float xi = ld(x, i);
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    st(y, i, 0.5f * xi * (1.0f + tanhf(u)));
  }
}
template <class T> __global__ void geluGradK(const T *x, const T *dy, T *dx, int64_t n) {
  BIGC_GRID_LOOP(i, n) {
    const float xi = ld(x, i);
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    const float th = tanhf(u);
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    const float g = 0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du;
    st(dx, i, ld(dy, i) * g);
  }
}
// Vectorized forms: 16 bytes per access (8 bf16/f16 or 4 f32 elements), used when n is a multiple
// of the vector width and every pointer is 16-byte aligned.
template <class T> constexpr int kVec = 16 / int(sizeof(T));
template <class T> __device__ __forceinline__ void load16(const T *p, float (&f)[kVec<T>]) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) f[k] = ld(e, k);
}
template <class T> __device__ __forceinline__ void store16(T *p, const float (&f)[kVec<T>]) {
  uint4 u;
  T *e = reinterpret_cast<T *>(&u);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) st(e, k, f[k]);
  *reinterpret_cast<uint4 *>(p) = u;
}
struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulF {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct ScaleF {
  float f;
  __device__ float operator()(float a, float) const { return f * a; }
};
struct GeluF {
  __device__ float operator()(float xi, float) const {
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    return 0.5f * xi * (1.0f + tanhf(u));
  }
};
struct GeluGradF { // (x, dy)
  __device__ float operator()(float xi, float dy) const {
    const float u = kGeluS * (xi + kGeluC * xi * xi * xi);
    const float th = tanhf(u);
    const float du = kGeluS * (1.0f + 3.0f * kGeluC * xi * xi);
    return dy * (0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du);
  }
};
// y = f(a, b) elementwise; b == nullptr for unary ops; `bcols` > 0: b is a row vector of bcols
// elements broadcast over the rows (bias_add).
template <class T, class F> __global__ void mapVK(const T *a, const T *b, T *y, int64_t nv, int64_t bcols, F f) {
  constexpr int W = kVec<T>;
  BIGC_GRID_LOOP(v, nv) {
    float fa[W], fb[W], fy[W];
    load16(a + v * W, fa);
    if (b)
      load16(b + (bcols > 0 ? (v * W) % bcols : v * W), fb);
    else
#pragma unroll
      for (int k = 0; k < W; ++k) fb[k] = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) fy[k] = f(fa[k], fb[k]);
    store16(y + v * W, fy);
  }
}
bool vecOk(int64_t n, int width, std::initializer_list<const void *> ptrs) {
  if (n % width != 0) return false;
  for (const void *p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}
template <class T, class F>
bool tryVec(const void *a, const void *b, void *y, int64_t n, int64_t bcols, F f, cudaStream_t s) {
  constexpr int W = kVec<T>;
  if (!vecOk(n, W, {a, b, y}) || (bcols > 0 && bcols % W != 0)) return false;
  const int64_t nv = n / W;
  mapVK<T, F><<<blocksFor(nv), kThreads, 0, s>>>(static_cast<const T *>(a), static_cast<const T *>(b),
                                                 static_cast<T *>(y), nv, bcols, f);
  return true;
}

// ---- the LLaMA family's activations and GELU's exact form (the CPU's expressions) ------------

constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

struct GeluExactF {
  __device__ float operator()(float xi, float) const { return 0.5f * xi * (1.0f + erff(xi * kInvSqrt2)); }
};
struct GeluExactGradF { // (x, dy): Phi(x) + x phi(x)
  __device__ float operator()(float xi, float dy) const {
    const float cdf = 0.5f * (1.0f + erff(xi * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * xi * xi);
    return dy * (cdf + xi * pdf);
  }
};
struct SiluF {
  __device__ float operator()(float xi, float) const { return xi / (1.0f + expf(-xi)); }
};
struct SiluGradF { // (x, dy): silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
  __device__ float operator()(float xi, float dy) const {
    const float sg = 1.0f / (1.0f + expf(-xi));
    return dy * (sg * (1.0f + xi * (1.0f - sg)));
  }
};
struct SoftcapF {
  float cap;
  __device__ float operator()(float xi, float) const { return cap * tanhf(xi / cap); }
};
struct SoftcapGradF { // (y, dy)
  float cap;
  __device__ float operator()(float yi, float dy) const {
    const float u = yi / cap;
    return dy * (1.0f - u * u);
  }
};
struct SwigluF { // (g, u)
  __device__ float operator()(float g, float u) const { return (g / (1.0f + expf(-g))) * u; }
};
struct SwigluGradF { // (g, u, dy) -> (dg, du)
  __device__ void operator()(float g, float u, float d, float &dg, float &du) const {
    const float sg = 1.0f / (1.0f + expf(-g));
    const float a = g / (1.0f + expf(-g));
    dg = (d * u) * (sg * (1.0f + g * (1.0f - sg)));
    du = d * a;
  }
};
// GeGLU's GELU, as the CPU kernel's (the erf form through erfc: no cancellation at g << 0).
__device__ __forceinline__ float gegluGelu(float g, bool exact) {
  return exact ? 0.5f * g * erfcf(-g * kInvSqrt2) : GeluF{}(g, 0.f);
}
__device__ __forceinline__ float gegluSlope(float g, bool exact) {
  return exact ? 0.5f * erfcf(-g * kInvSqrt2) + g * (kInvSqrt2Pi * expf(-0.5f * g * g)) : GeluGradF{}(g, 1.0f);
}
struct GegluF { // (g, u): gelu(g) * u
  bool exact;
  __device__ float operator()(float g, float u) const { return gegluGelu(g, exact) * u; }
};
struct GegluGradF { // (g, u, dy) -> (dg, du)
  bool exact;
  __device__ void operator()(float g, float u, float d, float &dg, float &du) const {
    const float a = gegluGelu(g, exact);
    const float slope = gegluSlope(g, exact);
    dg = (d * u) * slope;
    du = d * a;
  }
};

// y = f(a, b) elementwise, one element per thread step (b == nullptr: unary).
template <class T, class F> __global__ void mapK(const T *a, const T *b, T *y, int64_t n, F f) {
  BIGC_GRID_LOOP(i, n) st(y, i, f(ld(a, i), b ? ld(b, i) : 0.0f));
}
template <class T, class F> void mapAny(const void *a, const void *b, void *y, int64_t n, F f, cudaStream_t s) {
  if (tryVec<T>(a, b, y, n, 0, f, s)) return;
  mapK<T, F><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(a), static_cast<const T *>(b),
                                               static_cast<T *>(y), n, f);
}

// The gated activations' gradients (swiglu_grad, geglu_grad): (g, u, dy) -> (dg, du) by F.
template <class T, class F>
__global__ void gatedGradK(const T *g, const T *u, const T *dy, T *dg, T *du, int64_t n, F f) {
  BIGC_GRID_LOOP(i, n) {
    float a, b;
    f(ld(g, i), ld(u, i), ld(dy, i), a, b);
    st(dg, i, a);
    st(du, i, b);
  }
}
template <class T, class F>
__global__ void gatedGradVK(const T *g, const T *u, const T *dy, T *dg, T *du, int64_t nv, F f) {
  constexpr int W = kVec<T>;
  BIGC_GRID_LOOP(v, nv) {
    float fg[W], fu[W], fd[W], og[W], ou[W];
    load16(g + v * W, fg);
    load16(u + v * W, fu);
    load16(dy + v * W, fd);
#pragma unroll
    for (int k = 0; k < W; ++k) f(fg[k], fu[k], fd[k], og[k], ou[k]);
    store16(dg + v * W, og);
    store16(du + v * W, ou);
  }
}
template <class T, class F>
void gatedGrad(const void *g, const void *u, const void *dy, void *dg, void *du, int64_t n, F f, cudaStream_t s) {
  const T *gT = static_cast<const T *>(g), *uT = static_cast<const T *>(u), *dyT = static_cast<const T *>(dy);
  T *dgT = static_cast<T *>(dg), *duT = static_cast<T *>(du);
  if (vecOk(n, kVec<T>, {g, u, dy, dg, du})) {
    const int64_t nv = n / kVec<T>;
    gatedGradVK<T, F><<<blocksFor(nv), kThreads, 0, s>>>(gT, uT, dyT, dgT, duT, nv, f);
  } else {
    gatedGradK<T, F><<<blocksFor(n), kThreads, 0, s>>>(gT, uT, dyT, dgT, duT, n, f);
  }
}

template <class A, class B> __global__ void castK(const A *x, B *y, int64_t n) {
  BIGC_GRID_LOOP(i, n) st(y, i, ld(x, i));
}

// ---- column sums (reduce_sum, layernorm's dw/db, rmsnorm's dw, gelu_grad_bias's db) -------------
// Phase 1: blocks of 32 x 8 threads over one chunk of rows each; a thread takes W consecutive
// columns (W = the 16-byte vector width where the columns and every pointer allow it, else 1) and
// its row lane y adds rows r0 + y, r0 + y + 8, ...; the 8 lanes are added in order into per-chunk
// column partials. Phase 2 adds the chunks in order. Deterministic, and the same sums in the same
// order whatever W.

struct ColPlan {
  int64_t chunks, rowsPerChunk;
};
// About 512 blocks of 256 columns (a block's width at 16-bit vectors), chunks of at least 64 rows,
// at most 128 chunks.
ColPlan colPlan(int64_t rows, int64_t cols) {
  int64_t colBlocks = (cols + 255) / 256;
  int64_t chunks = std::max<int64_t>(1, (512 + colBlocks - 1) / colBlocks);
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, (rows + 63) / 64));
  chunks = std::min<int64_t>(chunks, 128);
  int64_t per = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  return {(rows + per - 1) / per > 0 ? (rows + per - 1) / per : 1, per};
}

// W values of T at p as floats and back: one 16-byte access for W = kVec<T>, else W scalar ones.
template <int W, class T> __device__ __forceinline__ void ldv(const T *p, float (&f)[W]) {
  if constexpr (W == kVec<T>)
    load16(p, f);
  else
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = ld(p, k);
}
template <int W, class T> __device__ __forceinline__ void stv(T *p, const float (&f)[W]) {
  if constexpr (W == kVec<T>)
    store16(p, f);
  else
#pragma unroll
    for (int k = 0; k < W; ++k) st(p, k, f[k]);
}
bool aligned16(std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// A column load gives kSums values for each of the W columns from c of row r.
template <class T> struct SumLoad {
  using Type = T;
  static constexpr int kSums = 1;
  const T *x;
  bool aligned() const { return aligned16({x}); }
  template <int W> __device__ void at(int64_t r, int64_t c, int64_t cols, float (&v)[1][W]) const {
    ldv<W>(x + r * cols + c, v[0]);
  }
};
template <class T> struct DwDbLoad { // layernorm: dy * (x - mean) * rstd, and dy
  using Type = T;
  static constexpr int kSums = 2;
  const T *dy, *x;
  const float *mean, *rstd;
  bool aligned() const { return aligned16({dy, x}); }
  template <int W> __device__ void at(int64_t r, int64_t c, int64_t cols, float (&v)[2][W]) const {
    float fx[W];
    ldv<W>(dy + r * cols + c, v[1]);
    ldv<W>(x + r * cols + c, fx);
    const float m = mean[r], rs = rstd[r];
#pragma unroll
    for (int k = 0; k < W; ++k) v[0][k] = v[1][k] * ((fx[k] - m) * rs);
  }
};

template <int W, class L>
__global__ void colPartialK(L load, float *part0, float *part1, int64_t rows, int64_t cols, int64_t per) {
  constexpr int S = L::kSums;
  __shared__ float sh[S][8][32 * W];
  const int64_t c = (int64_t(blockIdx.x) * 32 + threadIdx.x) * W; // W divides cols when W > 1
  const int64_t r0 = int64_t(blockIdx.y) * per, r1 = min(rows, r0 + per);
  float acc[S][W];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int k = 0; k < W; ++k) acc[s][k] = 0.0f;
  if (c < cols) {
#pragma unroll 2
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      float v[S][W];
      load.template at<W>(r, c, cols, v);
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int k = 0; k < W; ++k) acc[s][k] += v[s][k];
    }
  }
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int k = 0; k < W; ++k) sh[s][threadIdx.y][threadIdx.x * W + k] = acc[s][k];
  __syncthreads();
  const int tid = int(threadIdx.y) * 32 + int(threadIdx.x);
  const int64_t c0 = int64_t(blockIdx.x) * 32 * W;
#pragma unroll
  for (int s = 0; s < S; ++s)
    for (int j = tid; j < 32 * W; j += 256) {
      if (c0 + j >= cols) continue;
      float sum = 0.0f;
      for (int k = 0; k < 8; ++k) sum += sh[s][k][j];
      (s == 0 ? part0 : part1)[int64_t(blockIdx.y) * cols + c0 + j] = sum;
    }
}

// A column's chunk partials added in chunk order; 8 loads issued before their adds (one add waiting
// on each load made a 768-wide sum of 128 chunks latency-bound: 128 trips to L2 in a row).
template <class T> __global__ void colFinalK(const float *part, T *y, int64_t chunks, int64_t cols) {
  BIGC_GRID_LOOP(c, cols) {
    float s = 0.0f;
    int64_t k = 0;
    for (; k + 8 <= chunks; k += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = part[(k + j) * cols + c];
#pragma unroll
      for (int j = 0; j < 8; ++j) s += v[j];
    }
    for (; k < chunks; ++k) s += part[k * cols + c];
    st(y, c, s);
  }
}

// part1: the second sum's partials (kSums == 2).
template <class L>
void colPartial(L load, float *part0, int64_t rows, int64_t cols, const ColPlan &p, cudaStream_t s,
                float *part1 = nullptr) {
  constexpr int V = kVec<typename L::Type>;
  const dim3 block(32, 8);
  if (cols % V == 0 && load.aligned())
    colPartialK<V><<<dim3(unsigned((cols / V + 31) / 32), unsigned(p.chunks)), block, 0, s>>>(load, part0, part1, rows,
                                                                                              cols, p.rowsPerChunk);
  else
    colPartialK<1><<<dim3(unsigned((cols + 31) / 32), unsigned(p.chunks)), block, 0, s>>>(load, part0, part1, rows,
                                                                                          cols, p.rowsPerChunk);
}

// v as a tensor of T stores it (the fused ops round the value between their halves so).
template <class T> __device__ __forceinline__ float rnd(float v) {
  const T h = fromFloat<T>(v);
  return ld(&h, 0);
}

// gelu_grad_bias's column sums: the load of (r, c) computes dx there (as gelu_grad stores it),
// writes it, and returns it to the sum (each element is loaded once, in reduce_sum's order).
template <class T, class F> struct GeluGradBiasLoad {
  using Type = T;
  static constexpr int kSums = 1;
  const T *x, *dy;
  T *dx;
  F f;
  bool aligned() const { return aligned16({x, dy, dx}); }
  template <int W> __device__ void at(int64_t r, int64_t c, int64_t cols, float (&v)[1][W]) const {
    const int64_t i = r * cols + c;
    float fx[W], fd[W];
    ldv<W>(x + i, fx);
    ldv<W>(dy + i, fd);
#pragma unroll
    for (int k = 0; k < W; ++k) v[0][k] = rnd<T>(f(fx[k], fd[k]));
    stv<W>(dx + i, v[0]);
  }
};

template <class T, class F>
__global__ void biasGeluK(const T *x, const T *b, T *pre, T *y, int64_t rows, int64_t cols, F f) {
  BIGC_GRID_LOOP(i, rows * cols) {
    const float p = rnd<T>(ld(x, i) + ld(b, i % cols));
    st(pre, i, p);
    st(y, i, f(p, 0.0f));
  }
}

// ---- layernorm ---------------------------------------------------------------------------------

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The row a layernorm or rmsnorm normalises: x's, or with x2 (add_layernorm, add_rmsnorm of
// bigc-fuse) the residual sum x + x2, stored in sum as the add stores it (rounded to T; sum may be x
// or x2: each lane reads and writes only its own columns) and read back from there. The norm kernels
// take W columns at a time (16-byte vectors where C and the pointers allow, else W = 1); lane l
// takes vectors l, l + 32, ... of the row, in that order.
template <int W, class T>
__device__ const T *normRow(const T *x, const T *x2, T *sum, int64_t row, int64_t C, int lane) {
  const T *xr = x + row * C;
  if (!x2) return xr;
  T *sr = sum + row * C;
  const T *x2r = x2 + row * C;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    float a[W], b[W];
    ldv<W>(xr + c, a);
    ldv<W>(x2r + c, b);
#pragma unroll
    for (int k = 0; k < W; ++k) a[k] += b[k];
    stv<W>(sr + c, a);
  }
  return sr;
}

// One warp per row (of normRow): mean, rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * w + b.
template <int W, class T>
__global__ void layernormK(const T *x, const T *w, const T *b, T *y, float *mean, float *rstd, int64_t N, int64_t C,
                           float eps, const T *x2, T *sum) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T *xr = normRow<W>(x, x2, sum, row, C, lane);
  float f[W], s = 0.0f;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    ldv<W>(xr + c, f);
#pragma unroll
    for (int k = 0; k < W; ++k) s += f[k];
  }
  const float m = warpSum(s) / float(C);
  float v = 0.0f;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    ldv<W>(xr + c, f);
#pragma unroll
    for (int k = 0; k < W; ++k) v += (f[k] - m) * (f[k] - m);
  }
  v = warpSum(v) / float(C);
  const float rs = 1.0f / sqrtf(v + eps);
  T *yr = y + row * C;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    float fw[W], fb[W];
    ldv<W>(xr + c, f);
    ldv<W>(w + c, fw);
    ldv<W>(b + c, fb);
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = (f[k] - m) * rs * fw[k] + fb[k];
    stv<W>(yr + c, f);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// dx = rstd * (dy*w - mean(dy*w) - norm * mean(dy*w*norm)), norm = (x - mean) * rstd.
// res (layernorm_grad_add): dx = res + dx as stored; dx may be res.
template <int W, class T>
__global__ void layernormDxK(const T *dy, const T *x, const T *w, const float *mean, const float *rstd, T *dx,
                             int64_t N, int64_t C, const T *res) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T *dyr = dy + row * C, *xr = x + row * C;
  const float m = mean[row], rs = rstd[row];
  float fd[W], fx[W], fw[W], sD = 0.0f, sDN = 0.0f;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    ldv<W>(dyr + c, fd);
    ldv<W>(xr + c, fx);
    ldv<W>(w + c, fw);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float dn = fd[k] * fw[k];
      sD += dn;
      sDN += dn * ((fx[k] - m) * rs);
    }
  }
  const float mD = warpSum(sD) / float(C), mDN = warpSum(sDN) / float(C);
  T *dxr = dx + row * C;
  const T *rr = res ? res + row * C : nullptr;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    float fr[W];
    ldv<W>(dyr + c, fd);
    ldv<W>(xr + c, fx);
    ldv<W>(w + c, fw);
    if (rr) ldv<W>(rr + c, fr);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float norm = (fx[k] - m) * rs;
      const float v = rs * (fd[k] * fw[k] - mD - norm * mDN);
      fd[k] = rr ? rnd<T>(v) + fr[k] : v;
    }
    stv<W>(dxr + c, fd);
  }
}

// ---- rmsnorm ---------------------------------------------------------------------------------------

// One warp per row: rstd = 1/sqrt(mean(x^2) + eps), y = w * (x * rstd).
template <int W, class T>
__global__ void rmsnormK(const T *x, const T *w, T *y, float *rstd, int64_t N, int64_t C, float eps, const T *x2,
                         T *sum) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T *xr = normRow<W>(x, x2, sum, row, C, lane);
  float f[W], s = 0.0f;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    ldv<W>(xr + c, f);
#pragma unroll
    for (int k = 0; k < W; ++k) s += f[k] * f[k];
  }
  const float rs = 1.0f / sqrtf(warpSum(s) / float(C) + eps);
  T *yr = y + row * C;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    float fw[W];
    ldv<W>(xr + c, f);
    ldv<W>(w + c, fw);
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = fw[k] * (f[k] * rs);
    stv<W>(yr + c, f);
  }
  if (lane == 0 && rstd) rstd[row] = rs;
}

template <class T> struct RmsDwLoad { // dy * (x * rstd)
  using Type = T;
  static constexpr int kSums = 1;
  const T *dy, *x;
  const float *rstd;
  bool aligned() const { return aligned16({dy, x}); }
  template <int W> __device__ void at(int64_t r, int64_t c, int64_t cols, float (&v)[1][W]) const {
    float fx[W];
    ldv<W>(dy + r * cols + c, v[0]);
    ldv<W>(x + r * cols + c, fx);
    const float rs = rstd[r];
#pragma unroll
    for (int k = 0; k < W; ++k) v[0][k] = v[0][k] * (fx[k] * rs);
  }
};

// dx = rstd * (dy*w - xh * mean(dy*w*xh)), xh = x * rstd.
template <int W, class T>
__global__ void rmsnormDxK(const T *dy, const T *x, const T *w, const float *rstd, T *dx, int64_t N, int64_t C,
                           const T *res) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T *dyr = dy + row * C, *xr = x + row * C;
  const float rs = rstd[row];
  float fd[W], fx[W], fw[W], sDN = 0.0f;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    ldv<W>(dyr + c, fd);
    ldv<W>(xr + c, fx);
    ldv<W>(w + c, fw);
#pragma unroll
    for (int k = 0; k < W; ++k) sDN += (fd[k] * fw[k]) * (fx[k] * rs);
  }
  const float mDN = warpSum(sDN) / float(C);
  T *dxr = dx + row * C;
  const T *rr = res ? res + row * C : nullptr;
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) {
    float fr[W];
    ldv<W>(dyr + c, fd);
    ldv<W>(xr + c, fx);
    ldv<W>(w + c, fw);
    if (rr) ldv<W>(rr + c, fr);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = rs * (fd[k] * fw[k] - (fx[k] * rs) * mDN);
      fd[k] = rr ? rnd<T>(v) + fr[k] : v;
    }
    stv<W>(dxr + c, fd);
  }
}

// Launches kernel<W> over N rows, one warp a row: W = the 16-byte vector width of T where it divides
// C and every pointer is 16-byte aligned, else 1.
template <class T, class K1, class KV, class... A>
void launchRows(int64_t N, int64_t C, std::initializer_list<const void *> ptrs, cudaStream_t s, K1 k1, KV kv,
                A... args) {
  if (N <= 0) return;
  const int rowsPerBlock = 8;
  const unsigned grid = unsigned((N + rowsPerBlock - 1) / rowsPerBlock);
  if (C % kVec<T> == 0 && aligned16(ptrs))
    kv<<<grid, rowsPerBlock * 32, 0, s>>>(args...);
  else
    k1<<<grid, rowsPerBlock * 32, 0, s>>>(args...);
}

// ---- rotary embeddings -------------------------------------------------------------------------------

struct RopeFreq {
  float f[kRopeMaxHalf];
};

// One block per token row (b, t): its cos/sin table of D/2 frequencies in shared memory, then every
// (head, i) pair of the row; each pair is read before it is written by the same thread (in place).
template <class T>
__global__ void ropeK(const T *x, T *y, int64_t T_, int64_t C, int64_t D, int half, RopeFreq fr, float scale,
                      bool inverse, bool interleaved, int cp, int cpRank) {
  extern __shared__ float tab[]; // cos [half], sin [half]
  const int64_t row = blockIdx.x;
  // the token's position: in the whole sequence of a context-parallel rank's part (format::cpPosition)
  const int64_t t = row % T_, halfT = T_ / 2;
  const float tf =
      cp > 1 ? float(t < halfT ? cpRank * halfT + t : (2 * cp - 1 - cpRank) * halfT + (t - halfT)) : float(t);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float a = fr.f[i] * tf; // an fp32 product, as the CPU's (and Hugging Face's)
    double sv, cv;
    sincos(double(a), &sv, &cv);
    tab[i] = float(cv) * scale;
    tab[half + i] = float(sv) * scale;
  }
  __syncthreads();
  const T *xr = x + row * C;
  T *yr = y + row * C;
  const int64_t heads = C / D, pairs = heads * half;
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int64_t h = p / half;
    const int i = int(p - h * half);
    // pair i of head h: (o, o + half), or (o, o + 1) interleaved (Meta's llama)
    const int64_t o = h * D + (interleaved ? 2 * i : i), o2 = o + (interleaved ? 1 : half);
    const float x1 = ld(xr, o), x2 = ld(xr, o2);
    const float c = tab[i], sn = tab[half + i];
    if (!inverse) {
      st(yr, o, x1 * c - x2 * sn);
      st(yr, o2, x2 * c + x1 * sn);
    } else {
      st(yr, o, x1 * c + x2 * sn);
      st(yr, o2, x2 * c - x1 * sn);
    }
  }
  const int64_t rest = D - 2 * half; // a partial rotary's unrotated elements (GPT-NeoX)
  if (rest > 0 && xr != yr)
    for (int64_t e = threadIdx.x; e < heads * rest; e += blockDim.x) {
      const int64_t h = e / rest, o = h * D + 2 * half + (e - h * rest);
      yr[o] = xr[o];
    }
}

// ---- transpose -----------------------------------------------------------------------------------

struct TShape {
  int rank;
  int64_t yshape[8];
  int64_t xstride[8]; // x's stride for y's dimension d
};

template <class E> __global__ void transposeK(const E *x, E *y, TShape sh, int64_t total) {
  BIGC_GRID_LOOP(i, total) {
    int64_t rem = i, off = 0;
    for (int d = sh.rank - 1; d >= 0; --d) {
      const int64_t k = rem % sh.yshape[d];
      rem /= sh.yshape[d];
      off += k * sh.xstride[d];
    }
    y[i] = x[off];
  }
}

// ---- 2-D copies (staging of GEMM operands) -------------------------------------------------------

template <class E> __global__ void copy2dK(const E *src, int64_t sp, E *dst, int64_t dp, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x)
      dst[r * dp + c] = src[r * sp + c];
}

// ---- cross-entropy ---------------------------------------------------------------------------------

__device__ __forceinline__ void lseCombine(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2, s = s2;
    return;
  }
  const float M = fmaxf(m, m2);
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}

// A row of V elements is read 16 bytes per load where it can be: the scalar elements before the
// first 16-byte boundary (rowHead of them), vectors of kVec<T>, the scalar tail (rows of an odd
// vocabulary start anywhere); the block's threads stride over it.
template <class T> __device__ __forceinline__ int64_t rowHead(const T *row, int64_t V) {
  const int64_t h = int64_t(((16 - (reinterpret_cast<uintptr_t>(row) & 15)) & 15) / sizeof(T));
  return h < V ? h : V;
}
// out[j] = g(j, row[j]) over a row, 16 bytes per load and store where both rows are alike aligned.
template <class T, class G> __device__ __forceinline__ void mapRow(const T *row, T *out, int64_t V, G &&g) {
  constexpr int W = kVec<T>;
  if ((reinterpret_cast<uintptr_t>(row) & 15) != (reinterpret_cast<uintptr_t>(out) & 15)) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) st(out, j, g(j, ld(row, j)));
    return;
  }
  const int64_t head = rowHead(row, V), nv = (V - head) / W;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) st(out, j, g(j, ld(row, j)));
  for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
    float x[W];
    load16(row + head + v * W, x);
#pragma unroll
    for (int k = 0; k < W; ++k) x[k] = g(head + v * W + k, x[k]);
    store16(out + head + v * W, x);
  }
  for (int64_t j = head + nv * W + threadIdx.x; j < V; j += blockDim.x) st(out, j, g(j, ld(row, j)));
}

// Block-wide (max, sum of exp) of one row, online; every thread gets the result. Columns of -inf
// (masked) are skipped, a row of them gives sum 0 (for a masked vocabulary; not yet tested).
template <class T> __device__ void rowLse(const T *row, int64_t V, float &M, float &S) {
  __shared__ float shm[32], shs[32];
  constexpr int W = kVec<T>;
  float m = -INFINITY, s = 0.0f;
  auto one = [&](float x) {
    if (x > m) {
      s = s * __expf(m - x) + 1.0f; // (m = -inf: s was 0)
      m = x;
    } else if (m != -INFINITY) {
      s += __expf(x - m);
    }
  };
  // Vectors of W: the running max moves once per vector.
  const int64_t head = rowHead(row, V), nv = (V - head) / W;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) one(ld(row, j));
  for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
    float x[W];
    load16(row + head + v * W, x);
    float cm = x[0];
#pragma unroll
    for (int k = 1; k < W; ++k) cm = fmaxf(cm, x[k]);
    if (cm > m) {
      s *= __expf(m - cm);
      m = cm;
    }
    if (m != -INFINITY)
#pragma unroll
      for (int k = 0; k < W; ++k) s += __expf(x[k] - m);
  }
  for (int64_t j = head + nv * W + threadIdx.x; j < V; j += blockDim.x) one(ld(row, j));
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lseCombine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
  if (lane == 0) shm[warp] = m, shs[warp] = s;
  __syncthreads();
  if (warp == 0) {
    m = lane < nw ? shm[lane] : -INFINITY;
    s = lane < nw ? shs[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      lseCombine(m, s, m2, s2);
    }
    if (lane == 0) shm[0] = m, shs[0] = s;
  }
  __syncthreads();
  M = shm[0], S = shs[0];
}

// Threads per row of the loss kernels: the gradient reads its row twice (the log-sum-exp, then the
// softmax); with 1024 threads a block the rows in flight (two blocks per SM: about 26 MB of a
// 50257-wide bf16 vocabulary on 132 SMs) fit in L2, so the second read can hit it (not measured).
constexpr int kCeThreads = 1024;

template <class T>
__global__ void ceRowK(const T *logits, const int32_t *targets, float *rowLoss, int64_t N, int64_t V, int64_t ldr,
                       ErrSlot e) {
  const int64_t n = blockIdx.x;
  const T *row = logits + n * ldr; // (ldr > V: a padded vocabulary's columns after the V classes)
  float M, S;
  rowLse(row, V, M, S);
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    if (t < 0 || t >= V) {
      report(e, n, t);
      rowLoss[n] = 0.0f;
    } else {
      rowLoss[n] = logf(S) + M - ld(row, t);
    }
  }
}

// Vocabulary-parallel cross-entropy (the logits' V columns are ids [offset, offset + V) of `vocab`):
// per position its log-sum-exp over the columns and its target's logit (0 when another rank's).
template <class T>
__global__ void vocabStatsK(const T *logits, const int32_t *targets, float *stats, int64_t V, int64_t ldr,
                            int64_t offset, int64_t vocab, ErrSlot e) {
  const int64_t n = blockIdx.x;
  const T *row = logits + n * ldr;
  float M, S;
  rowLse(row, V, M, S);
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    if (t < 0 || t >= vocab) report(e, n, t);
    const int64_t j = int64_t(t) - offset;
    stats[2 * n] = logf(S) + M;
    stats[2 * n + 1] = t >= 0 && t < vocab && j >= 0 && j < V ? ld(row, j) : 0.0f;
  }
}

template <class T>
__global__ void vocabStatsGradK(const float *dstats, const T *logits, const int32_t *targets, const float *stats,
                                T *dlogits, int64_t V, int64_t ldr, int64_t offset) {
  const int64_t n = blockIdx.x;
  const T *row = logits + n * ldr;
  T *drow = dlogits + n * ldr;
  const float lse = stats[2 * n], g = dstats[2 * n], gt = dstats[2 * n + 1];
  const int64_t t = int64_t(targets[n]) - offset;
  for (int64_t j = threadIdx.x; j < ldr; j += blockDim.x) {
    float d = j < V ? g * expf(ld(row, j) - lse) : 0.0f; // a padded vocabulary's columns: 0
    if (j == t) d += gt;
    st(drow, j, d);
  }
}

// The fused LM head and loss: one chunk's statistics merged into the running ones (one block a row).
__global__ void linearCeChunkStatsK(const float *L, const int32_t *targets, float *stats, float *run, int64_t cw,
                                    int64_t c0, int64_t offset, int64_t vocab, bool first, ErrSlot e) {
  const int64_t n = blockIdx.x;
  const float *row = L + n * cw;
  float M, S;
  rowLse(row, cw, M, S);
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    float m = first ? -INFINITY : stats[2 * n], s = first ? 0.0f : run[n];
    if (first) {
      if (t < 0 || t >= vocab) report(e, n, t);
      stats[2 * n + 1] = 0.0f;
    }
    const float mx = fmaxf(m, M);
    if (mx != -INFINITY) s = (s == 0.0f ? 0.0f : s * __expf(m - mx)) + (S == 0.0f ? 0.0f : S * __expf(M - mx));
    stats[2 * n] = mx;
    run[n] = s;
    const int64_t j = int64_t(t) - offset - c0;
    if (t >= 0 && t < vocab && j >= 0 && j < cw) stats[2 * n + 1] = row[j];
  }
}

__global__ void linearCeFinishK(float *stats, const float *run, int64_t N) {
  BIGC_GRID_LOOP(n, N) stats[2 * n] = logf(run[n]) + stats[2 * n];
}

template <class T>
__global__ void linearCeChunkGradK(const float *dstats, const float *L, const int32_t *targets, const float *stats,
                                   T *dL, int64_t N, int64_t cw, int64_t offset) {
  BIGC_GRID_LOOP(i, N * cw) {
    const int64_t n = i / cw, j = i - n * cw;
    float d = dstats[2 * n] * expf(L[i] - stats[2 * n]);
    if (j == int64_t(targets[n]) - offset) d += dstats[2 * n + 1];
    st(dL, i, d);
  }
}

// stats: P parts of N positions, (lse, target logit) each. Per position: log Σ_r exp(lse_r), in double.
__device__ double partsLseD(const float *stats, int64_t N, int64_t P, int64_t n) {
  double mx = -INFINITY;
  for (int64_t r = 0; r < P; ++r) mx = fmax(mx, double(stats[2 * (r * N + n)]));
  double s = 0.0;
  for (int64_t r = 0; r < P; ++r) s += exp(double(stats[2 * (r * N + n)]) - mx);
  return log(s) + mx;
}

__global__ void vocabLossRowsK(const float *stats, float *rowLoss, int64_t N, int64_t P) {
  BIGC_GRID_LOOP(n, N) {
    double target = 0.0;
    for (int64_t r = 0; r < P; ++r) target += double(stats[2 * (r * N + n) + 1]);
    rowLoss[n] = float(partsLseD(stats, N, P, n) - target);
  }
}

__global__ void vocabLossGradK(const float *stats, const float *dloss, float *dstats, int64_t N, int64_t P) {
  BIGC_GRID_LOOP(n, N) {
    const double g = double(*dloss) / double(N), lse = partsLseD(stats, N, P, n);
    for (int64_t r = 0; r < P; ++r) {
      dstats[2 * (r * N + n)] = float(g * exp(double(stats[2 * (r * N + n)]) - lse));
      dstats[2 * (r * N + n) + 1] = float(-g);
    }
  }
}

__global__ void meanK(const float *x, int64_t n, float *out) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += double(x[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = n > 0 ? float(sh[0] / double(n)) : 0.0f;
}

template <class T>
__global__ void ceGradK(const T *logits, const int32_t *targets, const float *dloss, T *dlogits, int64_t N, int64_t V,
                        int64_t ldr) {
  const int64_t n = blockIdx.x;
  const T *row = logits + n * ldr;
  float M, S;
  rowLse(row, V, M, S);
  const float g = *dloss / float(N);
  const float f = g / S;
  const int32_t t = targets[n];
  mapRow(row, dlogits + n * ldr, ldr, [&](int64_t j, float x) {
    if (j >= V) return 0.0f; // a padded vocabulary's columns
    const float d = __expf(x - M) * f;
    return j == t ? d - g : d;
  });
}

// ---- multi-tensor reductions ---------------------------------------------------------------

template <class T> __global__ void sumSqK(const T *x, int64_t n, double *part) {
  __shared__ double sh[kThreads];
  float acc = 0.0f;
  BIGC_GRID_LOOP(i, n) {
    const float v = ld(x, i);
    acc += v * v;
  }
  sh[threadIdx.x] = double(acc);
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

__global__ void sqrtOfSumK(const double *part, int64_t slots, float *out) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) s += part[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = float(sqrt(sh[0]));
}

template <class T> __global__ void nonFiniteK(const T *x, int64_t n, int *flag) {
  bool bad = false;
  BIGC_GRID_LOOP(i, n) bad |= !isfinite(ld(x, i));
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

__global__ void flagToFloatK(const int *flag, float *out) { *out = *flag ? 1.0f : 0.0f; }

// ---- optimizer ---------------------------------------------------------------------------------

struct NoHalf {};

// 4 consecutive elements of T as floats and back: one 16-byte (f32) or 8-byte (16-bit) access.
template <class T> struct alignas(4 * sizeof(T)) Quad { T e[4]; };
template <class T> __device__ __forceinline__ void ld4(const T *p, float (&f)[4]) {
  const Quad<T> q = *reinterpret_cast<const Quad<T> *>(p);
#pragma unroll
  for (int k = 0; k < 4; ++k) f[k] = ld(q.e, k);
}
template <class T> __device__ __forceinline__ void st4(T *p, const float (&f)[4]) {
  Quad<T> q;
#pragma unroll
  for (int k = 0; k < 4; ++k) st(q.e, k, f[k]);
  *reinterpret_cast<Quad<T> *>(p) = q;
}

// W = 4: each thread updates 4 consecutive elements with wide accesses (n a multiple of 4, every
// pointer aligned to 4 of its elements); W = 1: one. The same expression per element either way.
template <int W, class G, class H>
__global__ void adamwK(AdamWConsts c, float *p, const G *g, float *m, float *v, H *half, int64_t n, const float *norm,
                       double maxNorm, const float *lossScale, const float *foundInf) {
  if (foundInf && *foundInf != 0.0f) return; // overflow: the step is skipped, nothing is written
  double inv = lossScale ? 1.0 / double(*lossScale) : 1.0;
  double clip = 1.0;
  if (norm && maxNorm > 0.0) clip = fmin(1.0, maxNorm / (double(*norm) * inv + 1e-6));
  c.gradScale = float(clip * inv);
  BIGC_GRID_LOOP(q, n / W) {
    const int64_t i = q * W;
    float fg[W], fp[W], fm[W], fv[W];
    if constexpr (W == 4) {
      ld4(g + i, fg), ld4(p + i, fp), ld4(m + i, fm), ld4(v + i, fv);
    } else {
      fg[0] = ld(g, i), fp[0] = p[i], fm[0] = m[i], fv[0] = v[i];
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float gi = fg[k] * c.gradScale;
      float pp = fp[k] * c.decay;
      const float mm = fmaf(fm[k], c.beta1, c.oneMinusBeta1 * gi);
      const float vv = fmaf(fv[k], c.beta2, (c.oneMinusBeta2 * gi) * gi);
      const float denom = fmaf(sqrtf(vv), c.invBc2Sqrt, c.eps);
      const float upd = mm / denom;
      fp[k] = fmaf(-c.stepSize, upd, pp);
      fm[k] = mm;
      fv[k] = vv;
    }
    if constexpr (W == 4) {
      st4(p + i, fp), st4(m + i, fm), st4(v + i, fv);
      if constexpr (!std::is_same<H, NoHalf>::value) st4(half + i, fp);
    } else {
      p[i] = fp[0], m[i] = fm[0], v[i] = fv[0];
      if constexpr (!std::is_same<H, NoHalf>::value) st(half, i, fp[0]);
    }
  }
}

__global__ void lossScaleUpdateK(const float *foundInf, float *scale, float *good, double backoff, double growth,
                                 double interval) {
  if (*foundInf != 0.0f) {
    *scale = float(double(*scale) * backoff);
    *good = 0.0f;
  } else {
    *good += 1.0f;
    if (double(*good) >= interval) {
      *scale = float(double(*scale) * growth);
      *good = 0.0f;
    }
  }
}

} // namespace

// ---- launchers -----------------------------------------------------------------------------------

void embedding(DType t, const void *table, const int32_t *ids, void *y, int64_t N, int64_t V, int64_t C, ErrSlot e,
               cudaStream_t s, int64_t offset, int64_t vocab) {
  if (vocab < 0) vocab = V;
  BIGC_DISPATCH(t, embeddingK<T><<<blocksFor(N * C), kThreads, 0, s>>>(static_cast<const T *>(table), ids,
                                                                       static_cast<T *>(y), N, V, C, offset, vocab, e));
}

size_t embeddingGradWorkspace(int64_t N, int64_t V) {
  return align256(cubSortBytes(N, V)) + 4 * align256(size_t(N) * 4) + 2 * align256(size_t(V + 1) * 4);
}

void embeddingGrad(DType t, const void *dy, const int32_t *ids, void *dtable, int64_t N, int64_t V, int64_t C, void *ws,
                   size_t wsBytes, ErrSlot e, cudaStream_t s, int64_t offset, int64_t vocab) {
  if (vocab < 0) vocab = V;
  char *w = static_cast<char *>(ws);
  size_t sortBytes = cubSortBytes(N, V);
  void *temp = w;
  w += align256(sortBytes);
  int32_t *keysIn = reinterpret_cast<int32_t *>(w);
  w += align256(size_t(N) * 4);
  int32_t *keysOut = reinterpret_cast<int32_t *>(w);
  w += align256(size_t(N) * 4);
  int32_t *valsIn = reinterpret_cast<int32_t *>(w);
  w += align256(size_t(N) * 4);
  int32_t *valsOut = reinterpret_cast<int32_t *>(w);
  w += align256(size_t(N) * 4);
  int32_t *start = reinterpret_cast<int32_t *>(w);
  w += align256(size_t(V + 1) * 4);
  int32_t *end = reinterpret_cast<int32_t *>(w);
  if (size_t(w - static_cast<char *>(ws)) + align256(size_t(V + 1) * 4) > wsBytes)
    throw std::runtime_error("embedding_grad: workspace too small (internal error)");
  if (N > 0) {
    embKeysK<<<blocksFor(N), kThreads, 0, s>>>(ids, keysIn, valsIn, N, V, offset, vocab, e);
    size_t bytes = sortBytes;
    checkCuda(cub::DeviceRadixSort::SortPairs(temp, bytes, keysIn, keysOut, valsIn, valsOut, int(N), 0, sortBits(V), s),
              "cub::DeviceRadixSort::SortPairs (embedding_grad)");
  }
  checkCuda(cudaMemsetAsync(start, 0, size_t(V + 1) * 4, s), "cudaMemsetAsync (embedding_grad)");
  checkCuda(cudaMemsetAsync(end, 0, size_t(V + 1) * 4, s), "cudaMemsetAsync (embedding_grad)");
  if (N > 0) embBoundsK<<<blocksFor(N), kThreads, 0, s>>>(keysOut, start, end, N);
  if (V > 0)
    BIGC_DISPATCH(t, embRowsK<T><<<unsigned(V), 128, 0, s>>>(static_cast<const T *>(dy), valsOut, start, end,
                                                             static_cast<T *>(dtable), C));
}

void add(DType t, const void *a, const void *b, void *c, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, if (tryVec<T>(a, b, c, n, 0, AddF{}, s)) return );
  BIGC_DISPATCH(t, addK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(a), static_cast<const T *>(b),
                                                             static_cast<T *>(c), n));
}
void mul(DType t, const void *a, const void *b, void *c, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, if (tryVec<T>(a, b, c, n, 0, MulF{}, s)) return );
  BIGC_DISPATCH(t, mulK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(a), static_cast<const T *>(b),
                                                             static_cast<T *>(c), n));
}
void biasAdd(DType t, const void *x, const void *b, void *y, int64_t rows, int64_t cols, cudaStream_t s) {
  if (cols > 0) BIGC_DISPATCH(t, if (tryVec<T>(x, b, y, rows * cols, cols, AddF{}, s)) return );
  BIGC_DISPATCH(t, biasAddK<T><<<blocksFor(rows * cols), kThreads, 0, s>>>(
                       static_cast<const T *>(x), static_cast<const T *>(b), static_cast<T *>(y), rows, cols));
}
void scale(DType t, const void *x, void *y, float factor, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, if (tryVec<T>(x, nullptr, y, n, 0, ScaleF{factor}, s)) return );
  BIGC_DISPATCH(t,
                scaleK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(x), static_cast<T *>(y), factor, n));
}
void squareF32(const float *x, float *y, int64_t n, cudaStream_t s) {
  squareK<<<blocksFor(n), kThreads, 0, s>>>(x, y, n);
}
void sqrtF32(float *x, int64_t n, cudaStream_t s) { sqrtK<<<blocksFor(n), kThreads, 0, s>>>(x, n); }
void fill(DType t, void *y, float value, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, fillK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<T *>(y), value, n));
}
void gelu(DType t, const void *x, void *y, int64_t n, cudaStream_t s, bool exact) {
  if (exact) {
    BIGC_DISPATCH(t, mapAny<T>(x, nullptr, y, n, GeluExactF{}, s));
    return;
  }
  BIGC_DISPATCH(t, if (tryVec<T>(x, nullptr, y, n, 0, GeluF{}, s)) return );
  BIGC_DISPATCH(t, geluK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(x), static_cast<T *>(y), n));
}
void geluGrad(DType t, const void *x, const void *dy, void *dx, int64_t n, cudaStream_t s, bool exact) {
  if (exact) {
    BIGC_DISPATCH(t, mapAny<T>(x, dy, dx, n, GeluExactGradF{}, s));
    return;
  }
  BIGC_DISPATCH(t, if (tryVec<T>(x, dy, dx, n, 0, GeluGradF{}, s)) return );
  BIGC_DISPATCH(t, geluGradK<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(x), static_cast<const T *>(dy),
                                                                  static_cast<T *>(dx), n));
}
void silu(DType t, const void *x, void *y, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(x, nullptr, y, n, SiluF{}, s));
}
void siluGrad(DType t, const void *x, const void *dy, void *dx, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(x, dy, dx, n, SiluGradF{}, s));
}
void softcap(DType t, const void *x, void *y, int64_t n, float cap, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(x, nullptr, y, n, SoftcapF{cap}, s));
}
void softcapGrad(DType t, const void *y, const void *dy, void *dx, int64_t n, float cap, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(y, dy, dx, n, SoftcapGradF{cap}, s));
}
void swiglu(DType t, const void *g, const void *u, void *y, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(g, u, y, n, SwigluF{}, s));
}
void swigluGrad(DType t, const void *g, const void *u, const void *dy, void *dg, void *du, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(t, gatedGrad<T>(g, u, dy, dg, du, n, SwigluGradF{}, s));
}
void geglu(DType t, const void *g, const void *u, void *y, int64_t n, bool exact, cudaStream_t s) {
  BIGC_DISPATCH(t, mapAny<T>(g, u, y, n, GegluF{exact}, s));
}
void gegluGrad(DType t, const void *g, const void *u, const void *dy, void *dg, void *du, int64_t n, bool exact,
               cudaStream_t s) {
  BIGC_DISPATCH(t, gatedGrad<T>(g, u, dy, dg, du, n, GegluGradF{exact}, s));
}

void cast(DType from, const void *x, DType to, void *y, int64_t n, cudaStream_t s) {
  BIGC_DISPATCH(from, {
    using A = T;
    BIGC_DISPATCH(to, castK<A, T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const A *>(x), static_cast<T *>(y), n));
  });
}

size_t reduceSumWorkspace(int64_t rows, int64_t cols) {
  ColPlan p = colPlan(rows, cols);
  return align256(size_t(p.chunks * cols) * 4);
}

void reduceSum(DType t, const void *x, void *y, int64_t rows, int64_t cols, void *ws, cudaStream_t s) {
  if (cols <= 0) return;
  ColPlan p = colPlan(rows, cols);
  float *part = static_cast<float *>(ws);
  BIGC_DISPATCH(t, {
    colPartial(SumLoad<T>{static_cast<const T *>(x)}, part, rows, cols, p, s);
    colFinalK<T><<<blocksFor(cols), kThreads, 0, s>>>(part, static_cast<T *>(y), p.chunks, cols);
  });
}

void layernorm(DType t, const void *x, const void *w, const void *b, void *y, float *mean, float *rstd, int64_t N,
               int64_t C, float eps, cudaStream_t s, const void *x2, void *sum) {
  BIGC_DISPATCH(t, launchRows<T>(N, C, {x, w, b, y, x2, sum}, s, layernormK<1, T>, layernormK<kVec<T>, T>,
                                 static_cast<const T *>(x), static_cast<const T *>(w), static_cast<const T *>(b),
                                 static_cast<T *>(y), mean, rstd, N, C, eps, static_cast<const T *>(x2),
                                 static_cast<T *>(sum)));
}

void biasGelu(DType t, const void *x, const void *b, void *pre, void *y, int64_t rows, int64_t cols, bool exact,
              cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  BIGC_DISPATCH(t, {
    const T *xT = static_cast<const T *>(x), *bT = static_cast<const T *>(b);
    if (exact)
      biasGeluK<T><<<blocksFor(n), kThreads, 0, s>>>(xT, bT, static_cast<T *>(pre), static_cast<T *>(y), rows, cols,
                                                     GeluExactF{});
    else
      biasGeluK<T>
          <<<blocksFor(n), kThreads, 0, s>>>(xT, bT, static_cast<T *>(pre), static_cast<T *>(y), rows, cols, GeluF{});
  });
}

void geluGradBias(DType t, const void *x, const void *dy, void *dx, void *db, int64_t rows, int64_t cols, bool exact,
                  void *ws, cudaStream_t s) {
  if (cols <= 0) return;
  ColPlan p = colPlan(rows, cols);
  float *part = static_cast<float *>(ws);
  BIGC_DISPATCH(t, {
    const T *xT = static_cast<const T *>(x), *dyT = static_cast<const T *>(dy);
    if (exact)
      colPartial(GeluGradBiasLoad<T, GeluExactGradF>{xT, dyT, static_cast<T *>(dx), GeluExactGradF{}}, part, rows, cols,
                 p, s);
    else
      colPartial(GeluGradBiasLoad<T, GeluGradF>{xT, dyT, static_cast<T *>(dx), GeluGradF{}}, part, rows, cols, p, s);
    colFinalK<T><<<blocksFor(cols), kThreads, 0, s>>>(part, static_cast<T *>(db), p.chunks, cols);
  });
}

size_t layernormGradWorkspace(int64_t N, int64_t C) {
  ColPlan p = colPlan(N, C);
  return 2 * align256(size_t(p.chunks * C) * 4);
}

void layernormGrad(DType t, const void *dy, const void *x, const void *w, const float *mean, const float *rstd,
                   void *dx, void *dw, void *db, int64_t N, int64_t C, void *ws, cudaStream_t s, const void *res) {
  if (C <= 0) return;
  ColPlan p = colPlan(N, C);
  float *partW = static_cast<float *>(ws);
  float *partB = reinterpret_cast<float *>(static_cast<char *>(ws) + align256(size_t(p.chunks * C) * 4));
  BIGC_DISPATCH(t, {
    const T *dyT = static_cast<const T *>(dy), *xT = static_cast<const T *>(x);
    colPartial(DwDbLoad<T>{dyT, xT, mean, rstd}, partW, N, C, p, s, partB);
    colFinalK<T><<<blocksFor(C), kThreads, 0, s>>>(partW, static_cast<T *>(dw), p.chunks, C);
    colFinalK<T><<<blocksFor(C), kThreads, 0, s>>>(partB, static_cast<T *>(db), p.chunks, C);
    launchRows<T>(N, C, {dy, x, w, dx, res}, s, layernormDxK<1, T>, layernormDxK<kVec<T>, T>, dyT, xT,
                  static_cast<const T *>(w), mean, rstd, static_cast<T *>(dx), N, C, static_cast<const T *>(res));
  });
}

void rmsnorm(DType t, const void *x, const void *w, void *y, float *rstd, int64_t N, int64_t C, float eps,
             cudaStream_t s, const void *x2, void *sum) {
  BIGC_DISPATCH(t, launchRows<T>(N, C, {x, w, y, x2, sum}, s, rmsnormK<1, T>, rmsnormK<kVec<T>, T>,
                                 static_cast<const T *>(x), static_cast<const T *>(w), static_cast<T *>(y), rstd, N, C,
                                 eps, static_cast<const T *>(x2), static_cast<T *>(sum)));
}

size_t rmsnormGradWorkspace(int64_t N, int64_t C) {
  ColPlan p = colPlan(N, C);
  return align256(size_t(p.chunks * C) * 4);
}

void rmsnormGrad(DType t, const void *dy, const void *x, const void *w, const float *rstd, void *dx, void *dw,
                 int64_t N, int64_t C, void *ws, cudaStream_t s, const void *res) {
  if (C <= 0) return;
  ColPlan p = colPlan(N, C);
  float *partW = static_cast<float *>(ws);
  BIGC_DISPATCH(t, {
    const T *dyT = static_cast<const T *>(dy), *xT = static_cast<const T *>(x);
    colPartial(RmsDwLoad<T>{dyT, xT, rstd}, partW, N, C, p, s);
    colFinalK<T><<<blocksFor(C), kThreads, 0, s>>>(partW, static_cast<T *>(dw), p.chunks, C);
    launchRows<T>(N, C, {dy, x, w, dx, res}, s, rmsnormDxK<1, T>, rmsnormDxK<kVec<T>, T>, dyT, xT,
                  static_cast<const T *>(w), rstd, static_cast<T *>(dx), N, C, static_cast<const T *>(res));
  });
}

void rope(DType t, const void *x, void *y, int64_t B, int64_t T, int64_t C, int64_t D, const float *invFreq,
          float scale, bool inverse, cudaStream_t s, bool interleaved, int64_t rotary, int64_t cp, int64_t cpRank) {
  const int64_t half = (rotary > 0 ? rotary : D) / 2;
  if (B * T <= 0 || C <= 0) return;
  if (half < 1 || half > kRopeMaxHalf || C % D != 0 || 2 * half > D)
    throw std::runtime_error("rope: head size " + std::to_string(D) + " of rows of " + std::to_string(C) +
                             " (the CUDA backend takes even head sizes up to " + std::to_string(2 * kRopeMaxHalf) +
                             " dividing the row)");
  RopeFreq fr{};
  for (int64_t i = 0; i < half; ++i) fr.f[i] = invFreq[i];
  const int64_t pairs = C / 2; // threads for the whole row: a partial rotary's copies too
  const int threads = int(std::min<int64_t>(kThreads, std::max<int64_t>(32, (pairs + 31) / 32 * 32)));
  const size_t smem = size_t(2 * half) * 4;
  const unsigned rows = unsigned(B * T);
  const int64_t seq = T;
  BIGC_DISPATCH(t,
                ropeK<T><<<rows, threads, smem, s>>>(static_cast<const T *>(x), static_cast<T *>(y), seq, C, D,
                                                     int(half), fr, scale, inverse, interleaved, int(cp), int(cpRank)));
}

void transpose(int elemBytes, const void *x, void *y, const int64_t *shape, const int64_t *perm, int rank,
               cudaStream_t s) {
  if (rank > 8)
    throw std::runtime_error("transpose of rank " + std::to_string(rank) + " (the CUDA backend supports 8)");
  TShape sh{};
  sh.rank = rank;
  int64_t xstride[8], total = 1;
  for (int d = rank - 1; d >= 0; --d) {
    xstride[d] = total;
    total *= shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    sh.yshape[d] = shape[perm[d]];
    sh.xstride[d] = xstride[perm[d]];
  }
  if (rank == 0) {
    sh.rank = 0;
    total = 1;
  }
  if (total == 0) return;
  if (elemBytes == 4)
    transposeK<uint32_t>
        <<<blocksFor(total), kThreads, 0, s>>>(static_cast<const uint32_t *>(x), static_cast<uint32_t *>(y), sh, total);
  else
    transposeK<uint16_t>
        <<<blocksFor(total), kThreads, 0, s>>>(static_cast<const uint16_t *>(x), static_cast<uint16_t *>(y), sh, total);
}

void copy2d(int elemBytes, const void *src, int64_t srcPitch, void *dst, int64_t dstPitch, int64_t rows, int64_t cols,
            cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  dim3 grid(unsigned(std::min<int64_t>((cols + kThreads - 1) / kThreads, 64)),
            unsigned(std::min<int64_t>(rows, 65535)));
  if (elemBytes == 4)
    copy2dK<uint32_t><<<grid, kThreads, 0, s>>>(static_cast<const uint32_t *>(src), srcPitch,
                                                static_cast<uint32_t *>(dst), dstPitch, rows, cols);
  else
    copy2dK<uint16_t><<<grid, kThreads, 0, s>>>(static_cast<const uint16_t *>(src), srcPitch,
                                                static_cast<uint16_t *>(dst), dstPitch, rows, cols);
}

size_t crossEntropyWorkspace(int64_t N) { return align256(size_t(std::max<int64_t>(N, 1)) * 4); }

void crossEntropy(DType t, const void *logits, const int32_t *targets, float *loss, int64_t N, int64_t V, int64_t ldr,
                  void *ws, ErrSlot e, cudaStream_t s) {
  float *rows = static_cast<float *>(ws);
  if (N > 0)
    BIGC_DISPATCH(t, ceRowK<T>
                  <<<unsigned(N), kCeThreads, 0, s>>>(static_cast<const T *>(logits), targets, rows, N, V, ldr, e));
  meanK<<<1, kThreads, 0, s>>>(rows, N, loss);
}

void crossEntropyGrad(DType t, const void *logits, const int32_t *targets, const float *dloss, void *dlogits, int64_t N,
                      int64_t V, int64_t ldr, cudaStream_t s) {
  if (N <= 0) return;
  BIGC_DISPATCH(t, ceGradK<T><<<unsigned(N), kCeThreads, 0, s>>>(static_cast<const T *>(logits), targets, dloss,
                                                                 static_cast<T *>(dlogits), N, V, ldr));
}

void vocabCeStats(DType t, const void *logits, const int32_t *targets, float *stats, int64_t N, int64_t V, int64_t ldr,
                  int64_t offset, int64_t vocab, ErrSlot e, cudaStream_t s) {
  if (N <= 0) return;
  BIGC_DISPATCH(t, vocabStatsK<T><<<unsigned(N), kThreads, 0, s>>>(static_cast<const T *>(logits), targets, stats, V,
                                                                   ldr, offset, vocab, e));
}

void vocabCeStatsGrad(DType t, const float *dstats, const void *logits, const int32_t *targets, const float *stats,
                      void *dlogits, int64_t N, int64_t V, int64_t ldr, int64_t offset, cudaStream_t s) {
  if (N <= 0) return;
  BIGC_DISPATCH(t,
                vocabStatsGradK<T><<<unsigned(N), kThreads, 0, s>>>(dstats, static_cast<const T *>(logits), targets,
                                                                    stats, static_cast<T *>(dlogits), V, ldr, offset));
}

size_t vocabCeLossWorkspace(int64_t N) { return crossEntropyWorkspace(N); }

void linearCeChunkStats(const float *L, const int32_t *targets, float *stats, float *run, int64_t N, int64_t cw,
                        int64_t c0, int64_t offset, int64_t vocab, bool first, ErrSlot e, cudaStream_t s) {
  if (N <= 0) return;
  linearCeChunkStatsK<<<unsigned(N), 256, 0, s>>>(L, targets, stats, run, cw, c0, offset, vocab, first, e);
}

void linearCeFinish(float *stats, const float *run, int64_t N, cudaStream_t s) {
  if (N > 0) linearCeFinishK<<<blocksFor(N), kThreads, 0, s>>>(stats, run, N);
}

void linearCeChunkGrad(DType t, const float *dstats, const float *L, const int32_t *targets, const float *stats,
                       void *dL, int64_t N, int64_t cw, int64_t offset, cudaStream_t s) {
  if (N * cw <= 0) return;
  BIGC_DISPATCH(t, linearCeChunkGradK<T><<<blocksFor(N * cw), kThreads, 0, s>>>(dstats, L, targets, stats,
                                                                                static_cast<T *>(dL), N, cw, offset));
}

void vocabCeLoss(const float *stats, float *loss, int64_t N, int64_t P, void *ws, cudaStream_t s) {
  float *rows = static_cast<float *>(ws);
  if (N > 0) vocabLossRowsK<<<blocksFor(N), kThreads, 0, s>>>(stats, rows, N, P);
  meanK<<<1, kThreads, 0, s>>>(rows, N, loss);
}

void vocabCeLossGrad(const float *stats, const float *dloss, float *dstats, int64_t N, int64_t P, cudaStream_t s) {
  if (N <= 0) return;
  vocabLossGradK<<<blocksFor(N), kThreads, 0, s>>>(stats, dloss, dstats, N, P);
}

int64_t partialSlots(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>((n + 4095) / 4096, 256)); }

void sumSquaresPartial(DType t, const void *x, int64_t n, double *partials, int64_t *slot, cudaStream_t s) {
  int64_t g = partialSlots(n);
  BIGC_DISPATCH(t, sumSqK<T><<<unsigned(g), kThreads, 0, s>>>(static_cast<const T *>(x), n, partials + *slot));
  *slot += g;
}

void sqrtOfSum(const double *partials, int64_t slots, float *out, cudaStream_t s) {
  sqrtOfSumK<<<1, kThreads, 0, s>>>(partials, slots, out);
}

void nonFiniteAny(DType t, const void *x, int64_t n, int *flag, cudaStream_t s) {
  if (n <= 0) return;
  BIGC_DISPATCH(t, nonFiniteK<T><<<unsigned(partialSlots(n)), kThreads, 0, s>>>(static_cast<const T *>(x), n, flag));
}

void flagToFloat(const int *flag, float *out, cudaStream_t s) { flagToFloatK<<<1, 1, 0, s>>>(flag, out); }

void adamw(const AdamWConsts &c, float *param, const void *grad, DType gradType, float *m, float *v, void *half,
           DType halfType, int64_t n, const float *norm, double maxNorm, const float *lossScale, const float *foundInf,
           cudaStream_t s) {
  if (n <= 0) return;
  // Wide accesses where n and every pointer allow (4 elements: 16 bytes of f32, 8 of 16-bit types).
  auto al = [](const void *ptr, int64_t bytes) { return !ptr || reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  const bool quad = n % 4 == 0 && al(param, 16) && al(m, 16) && al(v, 16) && al(grad, 4 * dtypeSize(gradType)) &&
                    (!half || al(half, 4 * dtypeSize(halfType)));
  const int blocks = blocksFor(quad ? n / 4 : n);
  BIGC_DISPATCH(gradType, {
    using G = T;
    const G *gT = static_cast<const G *>(grad);
    if (!half) {
      if (quad)
        adamwK<4, G, NoHalf>
            <<<blocks, kThreads, 0, s>>>(c, param, gT, m, v, nullptr, n, norm, maxNorm, lossScale, foundInf);
      else
        adamwK<1, G, NoHalf>
            <<<blocks, kThreads, 0, s>>>(c, param, gT, m, v, nullptr, n, norm, maxNorm, lossScale, foundInf);
    } else {
      BIGC_DISPATCH(halfType, {
        if (quad)
          adamwK<4, G, T><<<blocks, kThreads, 0, s>>>(c, param, gT, m, v, static_cast<T *>(half), n, norm, maxNorm,
                                                      lossScale, foundInf);
        else
          adamwK<1, G, T><<<blocks, kThreads, 0, s>>>(c, param, gT, m, v, static_cast<T *>(half), n, norm, maxNorm,
                                                      lossScale, foundInf);
      });
    }
  });
}

void lossScaleUpdate(const float *foundInf, float *scale, float *good, double backoff, double growth,
                     double growthInterval, cudaStream_t s) {
  lossScaleUpdateK<<<1, 1, 0, s>>>(foundInf, scale, good, backoff, growth, growthInterval);
}

} // namespace bigc::rt::cuda
