// bf16 / fp16 <-> fp32 bulk conversions for the CPU backend (include/bigc/Runtime/half.h).
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <cmath>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define BIGC_F16C 1
#else
#define BIGC_F16C 0
#endif

namespace bigc::rt {

namespace {
constexpr int64_t kParallelMin = 1 << 16; // below this, one thread

template <class F> void forEach(int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// f16 <-> f32 with the F16C instructions (IEEE round to nearest even, subnormals, inf, nan: the
// same results as the scalar code), 8 elements at a time, in blocks across threads.
template <class F> void forBlocks(int64_t n, F f) {
  constexpr int64_t kBlock = 4096;
  int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) f(b * kBlock, std::min(n, (b + 1) * kBlock));
}

void f16ToF32Bulk(const uint16_t *s, float *d, int64_t n) {
#if BIGC_F16C
  forBlocks(n, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
      _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i))));
    for (; i < hi; ++i) d[i] = f16ToF32(s[i]);
  });
#else
  forEach(n, [&](int64_t i) { d[i] = f16ToF32(s[i]); });
#endif
}

void f32ToF16Bulk(const float *s, uint16_t *d, int64_t n) {
#if BIGC_F16C
  forBlocks(n, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < hi; ++i) d[i] = f32ToF16(s[i]);
  });
#else
  forEach(n, [&](int64_t i) { d[i] = f32ToF16(s[i]); });
#endif
}
} // namespace

void toF32(const void *src, DType from, float *dst, int64_t n) {
  switch (from) {
  case DType::F32:
    if (src != dst) std::memcpy(dst, src, size_t(n) * 4);
    return;
  case DType::BF16: {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    forEach(n, [&](int64_t i) { dst[i] = bf16ToF32(s[i]); });
    return;
  }
  case DType::F16: f16ToF32Bulk(static_cast<const uint16_t *>(src), dst, n); return;
  case DType::I32: {
    const int32_t *s = static_cast<const int32_t *>(src);
    forEach(n, [&](int64_t i) { dst[i] = float(s[i]); });
    return;
  }
  }
}

void fromF32(const float *src, void *dst, DType to, int64_t n) {
  switch (to) {
  case DType::F32:
    if (src != dst) std::memcpy(dst, src, size_t(n) * 4);
    return;
  case DType::BF16: {
    uint16_t *d = static_cast<uint16_t *>(dst);
    forEach(n, [&](int64_t i) { d[i] = f32ToBf16(src[i]); });
    return;
  }
  case DType::F16: f32ToF16Bulk(src, static_cast<uint16_t *>(dst), n); return;
  case DType::I32: {
    int32_t *d = static_cast<int32_t *>(dst);
    forEach(n, [&](int64_t i) { d[i] = int32_t(src[i]); });
    return;
  }
  }
}

void convert(const void *src, DType from, void *dst, DType to, int64_t n) {
  if (from == to) {
    if (src != dst) std::memmove(dst, src, size_t(n) * size_t(dtypeSize(to)));
    return;
  }
  if (from == DType::F32) return fromF32(static_cast<const float *>(src), dst, to, n);
  if (to == DType::F32) return toF32(src, from, static_cast<float *>(dst), n);
  forEach(n, [&](int64_t i) { storeFrom32(dst, to, i, loadAs32(src, from, i)); });
}

bool anyNonFinite(const void *x, DType t, int64_t n) {
  int found = 0;
  switch (t) {
  case DType::F32: {
    const uint32_t *p = static_cast<const uint32_t *>(x);
#pragma omp parallel for reduction(| : found) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) found |= (p[i] & 0x7f800000u) == 0x7f800000u;
    break;
  }
  case DType::BF16: {
    const uint16_t *p = static_cast<const uint16_t *>(x);
#pragma omp parallel for reduction(| : found) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) found |= (p[i] & 0x7f80u) == 0x7f80u;
    break;
  }
  case DType::F16: {
    const uint16_t *p = static_cast<const uint16_t *>(x);
#pragma omp parallel for reduction(| : found) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) found |= (p[i] & 0x7c00u) == 0x7c00u;
    break;
  }
  case DType::I32: break;
  }
  return found != 0;
}

double sumSquaresAs32(const void *x, DType t, int64_t n) {
  double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    double v = loadAs32(x, t, i);
    s += v * v;
  }
  return s;
}

} // namespace bigc::rt
