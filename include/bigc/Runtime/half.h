// 16-bit floating point storage for the CPU backend: bf16 and IEEE fp16 <-> fp32, round to nearest
// even, with inf, nan and (fp16) subnormals handled exactly. No MLIR here.
#pragma once

#include <cstdint>
#include <cstring>

#include "bigc/Runtime/program.h"

namespace bigc::rt {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16ToF32(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

inline uint16_t f32ToBf16(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u); // nan stays a (quiet) nan
  x += 0x7fffu + ((x >> 16) & 1u);                                         // round to nearest even
  return uint16_t(x >> 16);
}

inline float f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bitsFloat(sign);
    float v = float(man) * (1.0f / 16777216.0f); // man · 2⁻²⁴, exact
    return bitsFloat(sign | floatBits(v));
  }
  if (exp == 31) return bitsFloat(sign | 0x7f800000u | (man << 13));
  return bitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32ToF16(float f) {
  uint32_t x = floatBits(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) // inf, nan (keep a quiet nan)
    return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u); // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                                // normal fp16 (>= 2⁻¹⁴)
    uint32_t r = ax - 0x38000000u;                        // rebias the exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return uint16_t(sign | (r >> 13));
  }
  uint32_t e = ax >> 23;
  if (e < 102) return sign; // below 2⁻²⁵: rounds to zero
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e; // value in units of 2⁻²⁴ is m >> shift
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// double -> float rounding to odd: a later rounding to a 16-bit type then equals the direct
// (single) rounding of the double (used for initial values computed in double).
inline float f64ToF32RoundOdd(double d) {
  float f = float(d);
  if (double(f) == d || f != f) return f;
  uint32_t u = floatBits(f);
  if ((f > 0) == (double(f) > d) && (u & 0x7fffffffu) != 0) --u; // toward zero
  if ((u & 0x7fffffffu) >= 0x7f800000u) return f;                // overflowed to inf
  return bitsFloat(u | 1u);
}

inline float loadAs32(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::F32: return static_cast<const float *>(p)[i];
  case DType::BF16: return bf16ToF32(static_cast<const uint16_t *>(p)[i]);
  case DType::F16: return f16ToF32(static_cast<const uint16_t *>(p)[i]);
  case DType::I32: return float(static_cast<const int32_t *>(p)[i]);
  }
  return 0.f;
}

inline void storeFrom32(void *p, DType t, int64_t i, float v) {
  switch (t) {
  case DType::F32: static_cast<float *>(p)[i] = v; break;
  case DType::BF16: static_cast<uint16_t *>(p)[i] = f32ToBf16(v); break;
  case DType::F16: static_cast<uint16_t *>(p)[i] = f32ToF16(v); break;
  case DType::I32: static_cast<int32_t *>(p)[i] = int32_t(v); break;
  }
}

// Bulk conversions (multithreaded for large n). toF32: n elements of type `from` into dst.
// fromF32: n floats into dst of type `to`. convert: any float type to any float type (a copy when
// the types are equal). src and dst must not overlap unless they are the same pointer and type.
void toF32(const void *src, DType from, float *dst, int64_t n);
void fromF32(const float *src, void *dst, DType to, int64_t n);
void convert(const void *src, DType from, void *dst, DType to, int64_t n);
// True when any of the n elements is inf or nan.
bool anyNonFinite(const void *x, DType t, int64_t n);
// Sum of squares of n elements read as f32, accumulated in double.
double sumSquaresAs32(const void *x, DType t, int64_t n);

} // namespace bigc::rt
