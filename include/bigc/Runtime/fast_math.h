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

} // namespace bigc::rt::cpu
