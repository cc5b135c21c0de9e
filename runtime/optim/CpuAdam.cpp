// Fast CPU AdamW: see include/bigc/Runtime/cpu_adam.h for the semantics.
//
// One pass over memory per element (read param, grad, m, v; write param, m, v, half), OpenMP
// threads on contiguous, cache-line-aligned ranges, and vector code chosen at run time:
// AVX-512 (16 lanes, masked tails), AVX2+FMA+F16C (8 lanes, tail through a small buffer), or
// scalar. Every path evaluates the same expression with the same roundings (the fused
// multiply-adds are explicit, division and square root are correctly rounded everywhere), so
// the paths agree bit for bit; the tests check them against each other and against a double
// reference.
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define BIGC_X86 1
#else
#define BIGC_X86 0
#endif

namespace bigc::rt {
namespace {

using Consts = AdamWConsts;

// Scalar conversions: include/bigc/Runtime/half.h (round to nearest even, inf/nan/subnormals exact).

// ---- scalar update (the reference every vector path matches bit for bit) --------------------

inline float adamScalar(float &p, float g, float &m, float &v, const Consts &c) {
  g = g * c.gradScale;
  float pp = p * c.decay;
  float mm = std::fma(m, c.beta1, c.oneMinusBeta1 * g);
  float vv = std::fma(v, c.beta2, (c.oneMinusBeta2 * g) * g);
  float denom = std::fma(std::sqrt(vv), c.invBc2Sqrt, c.eps);
  float upd = mm / denom;
  pp = std::fma(-c.stepSize, upd, pp);
  p = pp;
  m = mm;
  v = vv;
  return pp;
}

template <DType GT> inline float loadGradScalar(const void *g, int64_t i) {
  if constexpr (GT == DType::F32)
    return static_cast<const float *>(g)[i];
  else if constexpr (GT == DType::BF16)
    return bf16ToF32(static_cast<const uint16_t *>(g)[i]);
  else
    return f16ToF32(static_cast<const uint16_t *>(g)[i]);
}

template <DType HT> inline void storeHalfScalar(void *h, int64_t i, float p) {
  if constexpr (HT == DType::F32)
    static_cast<float *>(h)[i] = p;
  else if constexpr (HT == DType::BF16)
    static_cast<uint16_t *>(h)[i] = f32ToBf16(p);
  else
    static_cast<uint16_t *>(h)[i] = f32ToF16(p);
}

template <DType GT, DType HT, bool WriteHalf>
void rangeScalar(float *p, const void *g, float *m, float *v, void *h, int64_t lo, int64_t hi, const Consts &c) {
  for (int64_t i = lo; i < hi; ++i) {
    float np = adamScalar(p[i], loadGradScalar<GT>(g, i), m[i], v[i], c);
    if constexpr (WriteHalf) storeHalfScalar<HT>(h, i, np);
  }
}

#if BIGC_X86
// ---- AVX-512 --------------------------------------------------------------------------------

#define BIGC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

template <DType GT> BIGC_AVX512 inline __m512 loadGrad512(const void *g, int64_t i, __mmask16 k) {
  if constexpr (GT == DType::F32) {
    return _mm512_maskz_loadu_ps(k, static_cast<const float *>(g) + i);
  } else {
    __m256i x = _mm256_maskz_loadu_epi16(k, static_cast<const uint16_t *>(g) + i);
    if constexpr (GT == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    else
      return _mm512_cvtph_ps(x);
  }
}

template <DType HT> BIGC_AVX512 inline void storeHalf512(void *h, int64_t i, __m512 p, __mmask16 k) {
  if constexpr (HT == DType::F32) {
    _mm512_mask_storeu_ps(static_cast<float *>(h) + i, k, p);
  } else {
    __m256i out;
    if constexpr (HT == DType::BF16) {
      __m512i u = _mm512_castps_si512(p);
      __m512i hiBits = _mm512_srli_epi32(u, 16);
      __m512i rounded = _mm512_add_epi32(
          u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hiBits, _mm512_set1_epi32(1))));
      rounded = _mm512_srli_epi32(rounded, 16);
      __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
      rounded = _mm512_mask_or_epi32(rounded, nan, hiBits, _mm512_set1_epi32(0x40));
      out = _mm512_cvtepi32_epi16(rounded);
    } else {
      out = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    _mm256_mask_storeu_epi16(static_cast<uint16_t *>(h) + i, k, out);
  }
}

template <DType GT, DType HT, bool WriteHalf>
BIGC_AVX512 inline void step512(float *p, const void *g, float *m, float *v, void *h, int64_t i, __mmask16 k,
                                const Consts &c) {
  __m512 gv = _mm512_mul_ps(loadGrad512<GT>(g, i, k), _mm512_set1_ps(c.gradScale));
  __m512 pv = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), _mm512_set1_ps(c.decay));
  __m512 mv = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, m + i), _mm512_set1_ps(c.beta1),
                              _mm512_mul_ps(_mm512_set1_ps(c.oneMinusBeta1), gv));
  __m512 vv = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, v + i), _mm512_set1_ps(c.beta2),
                              _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c.oneMinusBeta2), gv), gv));
  __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vv), _mm512_set1_ps(c.invBc2Sqrt), _mm512_set1_ps(c.eps));
  __m512 upd = _mm512_div_ps(mv, denom);
  pv = _mm512_fnmadd_ps(_mm512_set1_ps(c.stepSize), upd, pv);
  _mm512_mask_storeu_ps(p + i, k, pv);
  _mm512_mask_storeu_ps(m + i, k, mv);
  _mm512_mask_storeu_ps(v + i, k, vv);
  if constexpr (WriteHalf) storeHalf512<HT>(h, i, pv, k);
}

template <DType GT, DType HT, bool WriteHalf>
BIGC_AVX512 void range512(float *p, const void *g, float *m, float *v, void *h, int64_t lo, int64_t hi,
                          const Consts &c) {
  int64_t i = lo;
  for (; i + 32 <= hi; i += 32) {
    step512<GT, HT, WriteHalf>(p, g, m, v, h, i, 0xffff, c);
    step512<GT, HT, WriteHalf>(p, g, m, v, h, i + 16, 0xffff, c);
  }
  for (; i + 16 <= hi; i += 16) step512<GT, HT, WriteHalf>(p, g, m, v, h, i, 0xffff, c);
  if (i < hi) {
    __mmask16 k = __mmask16((1u << (hi - i)) - 1u);
    step512<GT, HT, WriteHalf>(p, g, m, v, h, i, k, c);
  }
}

// ---- AVX2 + FMA + F16C ----------------------------------------------------------------------

#define BIGC_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType GT> BIGC_AVX2 inline __m256 loadGrad256(const void *g, int64_t i) {
  if constexpr (GT == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float *>(g) + i);
  } else {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(g) + i));
    if constexpr (GT == DType::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
    else
      return _mm256_cvtph_ps(x);
  }
}

template <DType HT> BIGC_AVX2 inline void storeHalf256(void *h, int64_t i, __m256 p) {
  if constexpr (HT == DType::F32) {
    _mm256_storeu_ps(static_cast<float *>(h) + i, p);
  } else {
    __m128i out;
    if constexpr (HT == DType::BF16) {
      __m256i u = _mm256_castps_si256(p);
      __m256i hiBits = _mm256_srli_epi32(u, 16);
      __m256i rounded = _mm256_add_epi32(
          u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hiBits, _mm256_set1_epi32(1))));
      rounded = _mm256_srli_epi32(rounded, 16);
      __m256i quiet = _mm256_or_si256(hiBits, _mm256_set1_epi32(0x40));
      __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
      rounded = _mm256_blendv_epi8(rounded, quiet, nan);
      // Values are <= 0xffff: unsigned saturating pack is exact; fix the lane order.
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
      out = _mm256_castsi256_si128(packed);
    } else {
      out = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i *>(static_cast<uint16_t *>(h) + i), out);
  }
}

template <DType GT, DType HT, bool WriteHalf>
BIGC_AVX2 inline void step256(float *p, const void *g, float *m, float *v, void *h, int64_t i, const Consts &c) {
  __m256 gv = _mm256_mul_ps(loadGrad256<GT>(g, i), _mm256_set1_ps(c.gradScale));
  __m256 pv = _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_set1_ps(c.decay));
  __m256 mv = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), _mm256_set1_ps(c.beta1),
                              _mm256_mul_ps(_mm256_set1_ps(c.oneMinusBeta1), gv));
  __m256 vv = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), _mm256_set1_ps(c.beta2),
                              _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(c.oneMinusBeta2), gv), gv));
  __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vv), _mm256_set1_ps(c.invBc2Sqrt), _mm256_set1_ps(c.eps));
  __m256 upd = _mm256_div_ps(mv, denom);
  pv = _mm256_fnmadd_ps(_mm256_set1_ps(c.stepSize), upd, pv);
  _mm256_storeu_ps(p + i, pv);
  _mm256_storeu_ps(m + i, mv);
  _mm256_storeu_ps(v + i, vv);
  if constexpr (WriteHalf) storeHalf256<HT>(h, i, pv);
}

template <DType GT, DType HT, bool WriteHalf>
BIGC_AVX2 void range256(float *p, const void *g, float *m, float *v, void *h, int64_t lo, int64_t hi, const Consts &c) {
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    step256<GT, HT, WriteHalf>(p, g, m, v, h, i, c);
    step256<GT, HT, WriteHalf>(p, g, m, v, h, i + 8, c);
  }
  for (; i + 8 <= hi; i += 8) step256<GT, HT, WriteHalf>(p, g, m, v, h, i, c);
  if (i < hi) {
    // Tail: through 8-element buffers, so it takes exactly the vector path.
    int64_t r = hi - i;
    alignas(32) float bp[8] = {}, bm[8] = {}, bv[8] = {}, bh[8] = {};
    alignas(32) uint8_t bg[32] = {};
    size_t gsz = GT == DType::F32 ? 4 : 2, hsz = HT == DType::F32 ? 4 : 2;
    std::memcpy(bp, p + i, r * 4);
    std::memcpy(bm, m + i, r * 4);
    std::memcpy(bv, v + i, r * 4);
    std::memcpy(bg, static_cast<const uint8_t *>(g) + i * gsz, r * gsz);
    step256<GT, HT, WriteHalf>(bp, bg, bm, bv, bh, 0, c);
    std::memcpy(p + i, bp, r * 4);
    std::memcpy(m + i, bm, r * 4);
    std::memcpy(v + i, bv, r * 4);
    if constexpr (WriteHalf) std::memcpy(static_cast<uint8_t *>(h) + i * hsz, bh, r * hsz);
  }
}
#endif // BIGC_X86

// ---- dispatch -------------------------------------------------------------------------------

enum Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

#if BIGC_X86
// F16C through cpuid (leaf 1, ecx bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool hasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

bool machineHas(Isa isa) {
#if BIGC_X86
  __builtin_cpu_init();
  if (isa == kAvx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
           hasF16c();
  if (isa == kAvx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hasF16c();
#endif
  return isa == kScalar;
}

Isa bestIsa() {
  static const Isa best = machineHas(kAvx512) ? kAvx512 : machineHas(kAvx2) ? kAvx2 : kScalar;
  return best;
}

std::atomic<int> forcedIsa{-1};

Isa currentIsa() {
  int f = forcedIsa.load(std::memory_order_relaxed);
  return f >= 0 ? Isa(f) : bestIsa();
}

using RangeFn = void (*)(float *, const void *, float *, float *, void *, int64_t, int64_t, const Consts &);

template <DType GT, DType HT, bool WriteHalf> RangeFn pickIsa(Isa isa) {
#if BIGC_X86
  if (isa == kAvx512) return &range512<GT, HT, WriteHalf>;
  if (isa == kAvx2) return &range256<GT, HT, WriteHalf>;
#endif
  (void)isa;
  return &rangeScalar<GT, HT, WriteHalf>;
}

template <DType GT> RangeFn pickHalf(Isa isa, bool writeHalf, DType ht) {
  if (!writeHalf) return pickIsa<GT, DType::F32, false>(isa);
  switch (ht) {
  case DType::F32: return pickIsa<GT, DType::F32, true>(isa);
  case DType::BF16: return pickIsa<GT, DType::BF16, true>(isa);
  case DType::F16: return pickIsa<GT, DType::F16, true>(isa);
  default: return nullptr;
  }
}

RangeFn pick(Isa isa, DType gt, bool writeHalf, DType ht) {
  switch (gt) {
  case DType::F32: return pickHalf<DType::F32>(isa, writeHalf, ht);
  case DType::BF16: return pickHalf<DType::BF16>(isa, writeHalf, ht);
  case DType::F16: return pickHalf<DType::F16>(isa, writeHalf, ht);
  default: return nullptr;
  }
}

const char *typeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::I32: return "i32";
  }
  return "?";
}

// The hyperparameters arrive as floats; PyTorch keeps them as Python doubles and forms 1 - beta,
// beta^t, 1 - lr*wd and lr / (1 - beta1^t) in double. Taking the float's shortest decimal (the
// number the user wrote: 0.999f -> "0.999") back to double reproduces PyTorch's constants
// (1 - 0.999f would be 0.00099998713, PyTorch's 1 - 0.999 rounds to 0.001f).
double asWritten(float x) {
  char buf[48];
  auto r = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  if (r.ec != std::errc()) return double(x);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Below this many elements one thread does it all (a parallel region costs a few microseconds).
constexpr int64_t kSerialBelow = 1 << 15;

// f(lo, hi) over [0, n): serially when n is small or the caller is already in a parallel region,
// else a contiguous range per OpenMP thread (each thread streams its own part), boundaries on
// 64-element multiples so no two threads write one cache line of any buffer.
template <class F> void overThreads(int64_t n, F f) {
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (n < kSerialBelow || threads <= 1) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t blocks = (n + 63) / 64;
    int64_t lo = std::min(n, blocks * tid / nt * 64);
    int64_t hi = std::min(n, blocks * (tid + 1) / nt * 64);
    if (lo < hi) f(lo, hi);
  }
}

} // namespace

AdamWConsts adamWConsts(const CpuAdamArgs &a) {
  AdamWConsts c;
  double t = double(a.step);
  double lr = asWritten(a.lr), b1 = asWritten(a.beta1), b2 = asWritten(a.beta2), wd = asWritten(a.weightDecay);
  double bc1 = 1.0 - std::pow(b1, t);
  double bc2 = 1.0 - std::pow(b2, t);
  c.gradScale = a.gradScale;
  c.decay = float(1.0 - lr * wd);
  c.beta1 = a.beta1;
  c.oneMinusBeta1 = float(1.0 - b1);
  c.beta2 = a.beta2;
  c.oneMinusBeta2 = float(1.0 - b2);
  c.stepSize = float(lr / bc1);
  c.invBc2Sqrt = float(1.0 / std::sqrt(bc2));
  c.eps = a.eps;
  return c;
}

void cpuAdamW(float *param, const void *grad, DType gradType, float *m, float *v, void *half, DType halfType, int64_t n,
              const CpuAdamArgs &a) {
  if (n < 0) throw UserError("cpu adamw: negative element count " + std::to_string(n));
  if (a.step < 1) throw UserError("cpu adamw: step counter must be >= 1, got " + std::to_string(a.step));
  RangeFn fn = pick(currentIsa(), gradType, half != nullptr, halfType);
  if (!fn) {
    DType bad = (gradType == DType::F32 || gradType == DType::BF16 || gradType == DType::F16) ? halfType : gradType;
    throw UserError(std::string("cpu adamw: unsupported dtype ") + typeName(bad) +
                    " (gradients and the half copy are f32, bf16 or f16)");
  }
  if (n == 0) return;
  if (!param || !grad || !m || !v) throw UserError("cpu adamw: null buffer");

  const Consts c = adamWConsts(a);
  overThreads(n, [&](int64_t lo, int64_t hi) { fn(param, grad, m, v, half, lo, hi, c); });
}

void cpuAdamWStates(float *param, const void *grad, DType gradType, void *m, void *v, DType stateType, void *half,
                    DType halfType, int64_t n, const CpuAdamArgs &a) {
  if (stateType == DType::F32)
    return cpuAdamW(param, grad, gradType, static_cast<float *>(m), static_cast<float *>(v), half, halfType, n, a);
  if (stateType != DType::BF16)
    throw UserError(std::string("cpu adamw: unsupported moment dtype ") + typeName(stateType) + " (f32 or bf16)");
  if (n < 0) throw UserError("cpu adamw: negative element count " + std::to_string(n));
  if (a.step < 1) throw UserError("cpu adamw: step counter must be >= 1, got " + std::to_string(a.step));
  RangeFn fn = pick(currentIsa(), gradType, half != nullptr, halfType);
  if (!fn) throw UserError("cpu adamw: unsupported dtype (gradients and the half copy are f32, bf16 or f16)");
  if (n == 0) return;
  if (!param || !grad || !m || !v) throw UserError("cpu adamw: null buffer");
  const Consts c = adamWConsts(a);
  const int64_t gs = dtypeSize(gradType), hs = half ? dtypeSize(halfType) : 0;
  auto range = [&](int64_t lo, int64_t hi) {
    constexpr int64_t kPiece = 2048;
    alignas(64) float mf[kPiece], vf[kPiece];
    for (int64_t at = lo; at < hi; at += kPiece) {
      const int64_t len = std::min(kPiece, hi - at);
      uint16_t *mb = static_cast<uint16_t *>(m) + at, *vb = static_cast<uint16_t *>(v) + at;
      convert(mb, DType::BF16, mf, DType::F32, len);
      convert(vb, DType::BF16, vf, DType::F32, len);
      fn(param + at, static_cast<const char *>(grad) + at * gs, mf, vf,
         half ? static_cast<char *>(half) + at * hs : nullptr, 0, len, c);
      convert(mf, DType::F32, mb, DType::BF16, len);
      convert(vf, DType::F32, vb, DType::BF16, len);
    }
  };
  overThreads(n, range);
}

const char *cpuAdamIsa() {
  switch (currentIsa()) {
  case kAvx512: return "avx512";
  case kAvx2: return "avx2";
  default: return "scalar";
  }
}

bool cpuAdamForceIsa(const char *isa) {
  std::string s = isa ? isa : "";
  if (s.empty()) {
    forcedIsa.store(-1);
    return true;
  }
  Isa want;
  if (s == "avx512")
    want = kAvx512;
  else if (s == "avx2")
    want = kAvx2;
  else if (s == "scalar")
    want = kScalar;
  else
    return false;
  if (!machineHas(want)) return false;
  forcedIsa.store(int(want));
  return true;
}

} // namespace bigc::rt
