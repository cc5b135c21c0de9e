// Context parallelism's attention on the GPU (ring_attention, ring_attention_grad; kernels.h): the
// generic kernels of Attention.cu (one warp per row, fp32 math) with every token at its position in
// the whole sequence (format::cpPosition) instead of its index, the block's softmax merged into the
// earlier blocks' and the block's gradients added to those so far. The CPU's cpu::ringAttention is
// the reference (CudaKernels.RingAttention).
#include "kernels.cuh"

namespace bigc::rt::cuda {

namespace {

constexpr int kPerLane = 8; // head size up to 256
constexpr int kWarps = 4;

struct RingGeo {
  int B, T, H, Hkv, D;
  int64_t sq, skv, so;
  int group, headOffset, window;
  float sc;
  int cp, qRank, kRank;
  bool a2a;
  __device__ int kvHead(int h) const { return (headOffset + h) / group; }
  // format::cpPosition of rank c's token t of n; with a2a the gathered token i of the whole sequence
  __device__ int64_t place(int t, int c) const {
    if (a2a) {
      const int part = T / cp;
      c = t / part, t = t % part;
      const int64_t half = part / 2;
      return t < half ? c * half + t : (2 * cp - 1 - c) * half + (t - half);
    }
    const int64_t half = T / 2;
    return t < half ? c * half + t : (2 * cp - 1 - c) * half + (t - half);
  }
  __device__ int64_t qpos(int t) const { return place(t, qRank); }
  __device__ int64_t kpos(int j) const { return place(j, kRank); }
  __device__ bool sees(int64_t qp, int64_t kp) const { return kp <= qp && (window <= 0 || qp - kp < window); }
};

// Forward: one warp per (b, h, t); lanes take keys 32 at a time (every key of the block, masked by
// position); then the merge with the earlier blocks' (out, lse).
template <class T, class O>
__global__ void ringFwdK(const T *qp, const T *kp, const T *vp, const float *accOut, const float *accLse, O *out,
                         float *lse, RingGeo g) {
  extern __shared__ float shq[];
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.H * g.T) return;
  const int t = int(row % g.T);
  const int64_t bh = row / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const int D = g.D, kh = g.kvHead(h);
  const T *kb = kp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  const T *vb = vp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  float *q = shq + w * D;
  const T *qr = qp + (int64_t(b) * g.T + t) * g.sq + int64_t(h) * D;
  for (int d = lane; d < D; d += 32) q[d] = ld(qr, d);
  __syncwarp();
  const int64_t qpos = g.qpos(t);
  float o[kPerLane];
  for (int k = 0; k < kPerLane; ++k) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = 0; j0 < g.T; j0 += 32) {
    const int j = j0 + lane;
    const bool on = j < g.T && g.sees(qpos, g.kpos(j));
    float s = -INFINITY;
    if (on) {
      const T *kr = kb + int64_t(j) * g.skv;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += q[d] * ld(kr, d);
      s = g.sc * acc;
    }
    float cmax = s;
    for (int x = 16; x > 0; x >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, x));
    if (cmax == -INFINITY) continue; // no key of these 32 seen
    const float mNew = fmaxf(m, cmax);
    const float corr = m == -INFINITY ? 0.0f : expf(m - mNew);
    const float p = on ? expf(s - mNew) : 0.0f;
    float psum = p;
    for (int x = 16; x > 0; x >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, x);
    l = l * corr + psum;
    m = mNew;
    for (int k = 0; k < kPerLane; ++k) o[k] *= corr;
    const int last = min(31, g.T - 1 - j0);
    for (int jj = 0; jj <= last; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      if (pj == 0.0f) continue;
      const T *vr = vb + int64_t(j0 + jj) * g.skv;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < D) o[k] += pj * ld(vr, d);
      }
    }
  }
  // This block's softmax (lse lb; none seen: -inf), merged with the earlier blocks' (la).
  const float lb = m == -INFINITY ? -INFINITY : m + logf(l);
  const float la = accLse ? accLse[row] : -INFINITY;
  const float L = fmaxf(la, lb);
  const int64_t ooff = (int64_t(b) * g.T + t) * g.so + int64_t(h) * D;
  if (L == -INFINITY) {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k)
      if (lane + 32 * k < D) st(out, ooff + lane + 32 * k, 0.0f);
    if (lane == 0) lse[row] = -INFINITY;
    return;
  }
  const float lm = L + logf(expf(la - L) + expf(lb - L));
  const float wa = expf(la - lm), wb = lb == -INFINITY ? 0.0f : expf(lb - lm) / l;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) st(out, ooff + d, (accOut ? wa * accOut[ooff + d] : 0.0f) + wb * o[k]);
  }
  if (lane == 0) lse[row] = lm;
}

// D_t = dout_t . out_t, one warp per (b, h, t).
template <class T> __global__ void ringRowDotK(const T *dout, const T *out, float *Dv, RingGeo g) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(g.B) * g.H * g.T) return;
  const int t = int(row % g.T);
  const int64_t bh = row / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const int64_t off = (int64_t(b) * g.T + t) * g.so + int64_t(h) * g.D;
  float s = 0.0f;
  for (int d = lane; d < g.D; d += 32) s += ld(dout, off + d) * ld(out, off + d);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) Dv[row] = s;
}

// dq: one warp per (b, h, t) over the block's keys it sees, added to accDq.
template <class T, class O>
__global__ void ringDqK(const T *dout, const T *qp, const T *kp, const T *vp, const float *lse, const float *Dv,
                        const float *accDq, O *dqp, RingGeo g) {
  extern __shared__ float sh[];
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.H * g.T) return;
  const int t = int(row % g.T);
  const int64_t bh = row / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const int D = g.D, kh = g.kvHead(h);
  const T *kb = kp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  const T *vb = vp + int64_t(b) * g.T * g.skv + int64_t(kh) * D;
  float *q = sh + w * 2 * D, *dor = q + D;
  const int64_t qoff = (int64_t(b) * g.T + t) * g.sq + int64_t(h) * D;
  const int64_t ooff = (int64_t(b) * g.T + t) * g.so + int64_t(h) * D;
  for (int d = lane; d < D; d += 32) q[d] = ld(qp, qoff + d), dor[d] = ld(dout, ooff + d);
  __syncwarp();
  const float L = lse[row], Dt = Dv[row];
  const int64_t qpos = g.qpos(t);
  float dq[kPerLane];
  for (int k = 0; k < kPerLane; ++k) dq[k] = 0.0f;
  for (int j0 = 0; j0 < g.T; j0 += 32) {
    const int j = j0 + lane;
    float ds = 0.0f;
    if (j < g.T && g.sees(qpos, g.kpos(j))) {
      const T *kr = kb + int64_t(j) * g.skv, *vr = vb + int64_t(j) * g.skv;
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) qk += q[d] * ld(kr, d), dp += dor[d] * ld(vr, d);
      ds = expf(g.sc * qk - L) * (dp - Dt);
    }
    const int last = min(31, g.T - 1 - j0);
    for (int jj = 0; jj <= last; ++jj) {
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
      if (dsj == 0.0f) continue;
      const T *kr = kb + int64_t(j0 + jj) * g.skv;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < D) dq[k] += dsj * ld(kr, d);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) st(dqp, qoff + d, (accDq ? accDq[qoff + d] : 0.0f) + g.sc * dq[k]);
  }
}

// dk, dv: one warp per (b, kv head, key j), over the query heads of its group and the queries that
// see it, added to accDk / accDv (f32).
template <class T>
__global__ void ringDkvK(const T *dout, const T *qp, const T *kp, const T *vp, const float *lse, const float *Dv,
                         const float *accDk, const float *accDv, float *dkp, float *dvp, RingGeo g) {
  extern __shared__ float sh[];
  const int warpsPer = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * warpsPer + w;
  if (row >= int64_t(g.B) * g.Hkv * g.T) return;
  const int j = int(row % g.T);
  const int64_t bk = row / g.T;
  const int kh = int(bk % g.Hkv), b = int(bk / g.Hkv);
  const int D = g.D;
  const int64_t kvoff = (int64_t(b) * g.T + j) * g.skv + int64_t(kh) * D;
  float *kj = sh + w * 2 * D, *vj = kj + D;
  for (int d = lane; d < D; d += 32) kj[d] = ld(kp, kvoff + d), vj[d] = ld(vp, kvoff + d);
  __syncwarp();
  const int64_t kpos = g.kpos(j);
  float dk[kPerLane], dv[kPerLane];
  for (int k = 0; k < kPerLane; ++k) dk[k] = dv[k] = 0.0f;
  const int hLo = max(0, kh * g.group - g.headOffset), hHi = min(g.H, (kh + 1) * g.group - g.headOffset);
  for (int h = hLo; h < hHi; ++h) {
    const int64_t bh = int64_t(b) * g.H + h;
    const float *Lrow = lse + bh * g.T, *Drow = Dv + bh * g.T;
    const T *qb = qp + int64_t(b) * g.T * g.sq + int64_t(h) * D;
    const T *ob = dout + int64_t(b) * g.T * g.so + int64_t(h) * D;
    for (int t0 = 0; t0 < g.T; t0 += 32) {
      const int t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < g.T && g.sees(g.qpos(t), kpos)) {
        const T *qr = qb + int64_t(t) * g.sq, *dr = ob + int64_t(t) * g.so;
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < D; ++d) qk += ld(qr, d) * kj[d], dp += ld(dr, d) * vj[d];
        p = expf(g.sc * qk - Lrow[t]);
        ds = p * (dp - Drow[t]);
      }
      const int last = min(31, g.T - 1 - t0);
      for (int tt = 0; tt <= last; ++tt) {
        const float pt = __shfl_sync(0xffffffffu, p, tt), dst = __shfl_sync(0xffffffffu, ds, tt);
        if (pt == 0.0f && dst == 0.0f) continue;
        const T *qr = qb + int64_t(t0 + tt) * g.sq, *dr = ob + int64_t(t0 + tt) * g.so;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < D) dk[k] += dst * ld(qr, d), dv[k] += pt * ld(dr, d);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) {
      dkp[kvoff + d] = (accDk ? accDk[kvoff + d] : 0.0f) + g.sc * dk[k];
      dvp[kvoff + d] = (accDv ? accDv[kvoff + d] : 0.0f) + dv[k];
    }
  }
}

RingGeo ringGeoOf(const AttentionGeometry &a, const RingPositions &pos) {
  if (a.D > 32 * kPerLane)
    throw std::runtime_error("ring attention: head size " + std::to_string(a.D) +
                             " exceeds the CUDA backend's limit of " + std::to_string(32 * kPerLane));
  if (a.softcap > 0) throw std::runtime_error("ring attention: soft-capped scores have no CUDA kernel yet");
  RingGeo g;
  g.B = int(a.B), g.T = int(a.T), g.H = int(a.H), g.Hkv = int(a.Hkv), g.D = int(a.D);
  g.sq = a.sq, g.skv = a.skv, g.so = a.so;
  g.group = int(a.group), g.headOffset = int(a.headOffset), g.window = int(a.window);
  g.sc = a.scale;
  g.cp = int(pos.cp), g.qRank = int(pos.qRank), g.kRank = int(pos.kRank), g.a2a = pos.a2a;
  return g;
}

unsigned warpsGrid(int64_t rows) { return unsigned((rows + kWarps - 1) / kWarps); }

} // namespace

void ringAttention(DType t, DType outT, const AttentionGeometry &a, const RingPositions &pos, const void *q,
                   const void *k, const void *v, const float *accOut, const float *accLse, void *out, float *lse,
                   cudaStream_t s) {
  const int64_t rows = a.B * a.H * a.T;
  if (rows == 0) return;
  const RingGeo g = ringGeoOf(a, pos);
  const size_t smem = size_t(kWarps * g.D) * 4;
  if (outT != t && outT != DType::F32)
    throw std::runtime_error("ring attention: the output is the inputs' dtype or f32, got " +
                             std::string(dtypeName(outT)));
  BIGC_DISPATCH(t, {
    const T *qT = static_cast<const T *>(q), *kT = static_cast<const T *>(k), *vT = static_cast<const T *>(v);
    if (outT == DType::F32)
      ringFwdK<T, float>
          <<<warpsGrid(rows), kWarps * 32, smem, s>>>(qT, kT, vT, accOut, accLse, static_cast<float *>(out), lse, g);
    else
      ringFwdK<T, T>
          <<<warpsGrid(rows), kWarps * 32, smem, s>>>(qT, kT, vT, accOut, accLse, static_cast<T *>(out), lse, g);
  });
}

size_t ringAttentionGradWorkspace(int64_t B, int64_t T, int64_t H) { return align256(size_t(B * H * T) * 4); }

void ringAttentionGrad(DType t, DType dqT, const AttentionGeometry &a, const RingPositions &pos, const void *dout,
                       const void *q, const void *k, const void *v, const void *out, const float *lse,
                       const float *accDq, const float *accDk, const float *accDv, void *dq, float *dk, float *dv,
                       void *ws, cudaStream_t s) {
  if (a.B * a.T == 0) return;
  const RingGeo g = ringGeoOf(a, pos);
  if (dqT != t && dqT != DType::F32)
    throw std::runtime_error("ring attention: dq is the inputs' dtype or f32, got " + std::string(dtypeName(dqT)));
  const int64_t qRows = a.B * a.H * a.T, kvRows = a.B * a.Hkv * a.T;
  float *Dv = static_cast<float *>(ws);
  const size_t smem = size_t(kWarps * 2 * g.D) * 4;
  BIGC_DISPATCH(t, {
    const T *dO = static_cast<const T *>(dout), *qT = static_cast<const T *>(q);
    const T *kT = static_cast<const T *>(k), *vT = static_cast<const T *>(v);
    ringRowDotK<T><<<unsigned((qRows + 7) / 8), 256, 0, s>>>(dO, static_cast<const T *>(out), Dv, g);
    if (dqT == DType::F32)
      ringDqK<T, float>
          <<<warpsGrid(qRows), kWarps * 32, smem, s>>>(dO, qT, kT, vT, lse, Dv, accDq, static_cast<float *>(dq), g);
    else
      ringDqK<T, T>
          <<<warpsGrid(qRows), kWarps * 32, smem, s>>>(dO, qT, kT, vT, lse, Dv, accDq, static_cast<T *>(dq), g);
    ringDkvK<T><<<warpsGrid(kvRows), kWarps * 32, smem, s>>>(dO, qT, kT, vT, lse, Dv, accDk, accDv, dk, dv, g);
  });
}

} // namespace bigc::rt::cuda
