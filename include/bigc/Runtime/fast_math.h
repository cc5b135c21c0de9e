// Elementwise math the CPU kernels vectorise (header-only; no libm call inside the loops).
#pragma once

#include <cstdint>
#include <cstring>

namespace bigc::rt::cpu {

// exp(x) in a form the compiler vectorises inside `omp simd` loops (std::exp is a scalar libm call
// there: it kept GELU, SiLU, softmax and the loss at one element per call). Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for exp(r), 2^n built in the exponent
// bits. Relative error at most 8.53e-8 over every float of [-87, 88] against double (measured with
// the kernels' flags; FastMath.ExpRelativeError checks 9e-8 on every 1024th); exp(-inf) and anything below -100 give
// exactly 0, NaN stays NaN, x > 88 is taken as 88. Vectorised by GCC only with -fno-trapping-math (else the clamps stay
// branches).
inline float fastExp(float x) {
  x = x < -100.0f ? -100.0f : x; // NaN fails both comparisons and stays NaN
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest, no libm call).
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const float n = shifted - 12582912.0f;
  int32_t ni = bits - 0x4B400000;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as a float; n <= -127 gives 0 (the result underflows to 0, as exp does below about -103).
  ni = ni < -127 ? -127 : ni;
  const uint32_t eb = static_cast<uint32_t>(ni + 127) << 23;
  float scale;
  std::memcpy(&scale, &eb, sizeof scale);
  return p * scale;
}

inline float fastSigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }

// erfc(z) for z >= 0 (Numerical Recipes' erfcc: a Chebyshev fit of fractional error below 1.2e-7,
// times fastExp), vectorised as fastExp; relative error up to 2.0e-6 on [0, 5.5], most of it the
// float rounding of z*z in the exponent (6e-8 z^2; FastMath.ExactGeluAndGradAgainstDouble).
// +inf gives 0, NaN stays NaN.
inline float fastErfc(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * fastExp(-z * z + p);
}

// 1 + erf(z) without cancellation at z << 0 (it is erfc(-z) there): the exact GELU's 2 Phi(x) at
// z = x / sqrt 2.
inline float fastOnePlusErf(float z) {
  const float e = fastErfc(z < 0.0f ? -z : z);
  return z < 0.0f ? e : 2.0f - e;
}

} // namespace bigc::rt::cpu
