// Initial values of persistent buffers (docs/program-format.md, `init`): the normal stream of
// (seed, name), computed for any range of elements, in parallel, at memory speed.
//
// The stream is counter-based: SplitMix64 adds a constant to its state before each draw, so draw j
// of a stream seeded with s0 is mix(s0 + (j + 1)·γ), and pair k (elements 2k, 2k+1) needs draws 2k
// and 2k+1 only. Any range of a tensor, on any thread or rank, is computed without the elements
// before it: the values do not depend on the thread count, the chunking or the rank layout.
//
// The format defines the values through the C library's log, cos and sin in double, rounded once
// to the buffer's dtype. Those calls cost ~25 ns per element; here each pair is computed with
// polynomial log/sin/cos that vectorize (relative error below 2e-12),
// and each element's rounding is checked: when the fast value v and its error bound δ round to the
// same result at v − δ and v + δ, that result is the defined one; otherwise (about one element in
// 500, where v lies within δ of a rounding boundary) the element is computed the defined way. So
// the output is bit for bit the format's values (tested against a direct implementation).
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <omp.h>
#include <string>
#include <type_traits>
#include <sys/mman.h>
#include <unistd.h>

namespace bigc::rt {

namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kInv53 = 1.0 / 9007199254740992.0; // 2^-53

// SplitMix64's output function, on one state or on four lanes of them (V4u below).
template <class U> inline U mix64(U z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The format's definition of pair k (std·r·cos, std·r·sin), through the C library.
inline void referencePair(uint64_t s0, int64_t k, double std, double &c, double &s) {
  const uint64_t a = mix64(s0 + (2 * uint64_t(k) + 1) * kGamma), b = mix64(s0 + (2 * uint64_t(k) + 2) * kGamma);
  const double u1 = double((a >> 11) + 1) * kInv53, u2 = double(b >> 11) * kInv53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  c = std * r * std::cos(kTwoPi * u2);
  s = std * r * std::sin(kTwoPi * u2);
}

constexpr int kBlock = 256; // pairs computed together (a multiple of 4)

// Four lanes of doubles and of 64-bit integers (GCC/Clang vector extensions: AVX where the target
// has it, pairs of SSE2 registers or scalar code elsewhere).
typedef double V4d __attribute__((vector_size(32)));
typedef uint64_t V4u __attribute__((vector_size(32)));
typedef int64_t V4i __attribute__((vector_size(32)));

// x < 2^53 as a double, exactly, without a 64-bit integer conversion (which AVX2 lacks): x >> 1
// (< 2^52) through the 2^52 exponent trick, doubled, plus the low bit. The low bit is made 0 or 1
// before it is added: 2(x >> 1) + 2^52 + 1 would be rounded to even above 2^53.
inline V4d toDouble53(V4u x) {
  const V4d half = (V4d)((x >> 1) | 0x4330000000000000ull) - 4503599627370496.0;
  const V4d low = (V4d)((x & 1u) | 0x4330000000000000ull) - 4503599627370496.0;
  return (half + half) + low;
}

// Pairs [k0, k0 + np) the fast way (np a multiple of 4): c[j] = std·r·cos, s[j] = std·r·sin and
// a[j] = std·r of pair k0 + j.
void fastPairs(uint64_t s0, int64_t k0, int np, double std, double *c, double *s, double *a) {
  const double ln2Hi = 6.93147180369123816490e-01, ln2Lo = 1.90821492927058770002e-10;
  const double pio2_1 = 1.57079632673412561417e+00, pio2_2 = 6.07710050630396597660e-11,
               pio2_3 = 2.02226624871116645580e-21, twoOverPi = 6.36619772367581382433e-01;
  const double toInt = 6755399441055744.0; // 1.5·2^52: adding it rounds to an integer
  // Three passes over the block (draws; radius; angle), each a short loop whose iterations the
  // processor overlaps: one pass doing all three is a long dependency chain (a division, a square
  // root) per iteration, and ran at two thirds of this speed.
  for (int j = 0; j < np; j += 4) { // draws 2k + 1 and 2k + 2 of the SplitMix64 stream (k = k0 + j + lane)
    const V4u k = V4u{0, 1, 2, 3} + uint64_t(k0 + j);
    const V4u da = mix64(s0 + (2 * k + 1) * kGamma), db = mix64(s0 + (2 * k + 2) * kGamma);
    const V4d u = (toDouble53(da >> 11) + 1.0) * kInv53;
    const V4d xv = kTwoPi * (toDouble53(db >> 11) * kInv53); // the argument the definition passes to cos and sin
    std::memcpy(a + j, &u, 32);
    std::memcpy(c + j, &xv, 32);
  }
  for (int j = 0; j < np; j += 4) { // std·r = std·sqrt(−2 ln u1)
    V4d u;
    std::memcpy(&u, a + j, 32);
    // ln u1 = e·ln 2 + ln m, m in [√½, √2): ln m = 2 atanh(t), t = (m − 1)/(m + 1), |t| ≤ 0.172.
    const V4u bits = (V4u)u;
    const V4u eb = (bits >> 52) | 0x4330000000000000ull; // 2^52 + biased exponent, as a double
    V4d de = (V4d)eb - (4503599627370496.0 + 1022.0);
    V4d m = (V4d)((bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull); // in [0.5, 1)
    const V4i low = m < 0.70710678118654752440;
    m = low ? m + m : m;
    de = low ? de - 1.0 : de;
    const V4d t = (m - 1.0) / (m + 1.0), t2 = t * t;
    V4d p = t2 * (1.0 / 15) + 1.0 / 13;
    p = p * t2 + 1.0 / 11;
    p = p * t2 + 1.0 / 9;
    p = p * t2 + 1.0 / 7;
    p = p * t2 + 1.0 / 5;
    p = p * t2 + 1.0 / 3;
    const V4d lnm = 2.0 * t + 2.0 * t * t2 * p;
    const V4d ln = de * ln2Hi + (de * ln2Lo + lnm);
    const V4d arg = -2.0 * ln;
#ifdef __AVX__
    const V4d r = __builtin_ia32_sqrtpd256(arg);
#else
    V4d r;
    for (int l = 0; l < 4; ++l) r[l] = std::sqrt(arg[l]);
#endif
    const V4d av = std * r;
    std::memcpy(a + j, &av, 32);
  }
  for (int j = 0; j < np; j += 4) { // std·r·cos x, std·r·sin x
    V4d xv, av;
    std::memcpy(&xv, c + j, 32);
    std::memcpy(&av, a + j, 32);
    // x = q·π/2 + y, |y| ≤ π/4 (x in [0, 2π): q in 0..4), Taylor to y^13.
    const V4d qr = xv * twoOverPi + toInt; // q in the low mantissa bits
    const V4d qd = qr - toInt;
    const V4d y = ((xv - qd * pio2_1) - qd * pio2_2) - qd * pio2_3, y2 = y * y;
    V4d sp = y2 * (1.0 / 6227020800.0) - 1.0 / 39916800.0;
    sp = sp * y2 + 1.0 / 362880.0;
    sp = sp * y2 - 1.0 / 5040.0;
    sp = sp * y2 + 1.0 / 120.0;
    sp = sp * y2 - 1.0 / 6.0;
    const V4d sinY = y + y * y2 * sp;
    V4d cp = y2 * (1.0 / 479001600.0) - 1.0 / 3628800.0;
    cp = cp * y2 + 1.0 / 40320.0;
    cp = cp * y2 - 1.0 / 720.0;
    cp = cp * y2 + 1.0 / 24.0;
    const V4d cosY = 1.0 - 0.5 * y2 + y2 * y2 * cp;
    // Quadrant q: cos x = (cos y, −sin y, −cos y, sin y)[q], sin x = (sin y, cos y, −sin y, −cos y)[q].
    const V4u q = (V4u)qr & 3u;
    const V4i odd = (q & 1u) != 0;
    const V4u cyb = (V4u)cosY, syb = (V4u)sinY;
    const V4d cosX = (V4d)((odd ? syb : cyb) ^ (((q + 1u) & 2u) << 62));
    const V4d sinX = (V4d)((odd ? cyb : syb) ^ ((q & 2u) << 62));
    const V4d cv = av * cosX, sv = av * sinX;
    std::memcpy(c + j, &cv, 32);
    std::memcpy(s + j, &sv, 32);
  }
}

// The defined rounding of a double to `dtype` (f32: to nearest even; 16-bit: once, through f32
// rounded to odd), as the stored bits.
template <DType D> inline uint32_t roundTo(double v) {
  if constexpr (D == DType::F32)
    return floatBits(float(v));
  else if constexpr (D == DType::BF16)
    return f32ToBf16(f64ToF32RoundOdd(v));
  else
    return f32ToF16(f64ToF32RoundOdd(v));
}

// Elements [begin, end) of the stream into x (x[0] is element begin).
template <DType D> void normalRange(void *x, int64_t begin, int64_t end, double std, uint64_t s0) {
  using Bits = std::conditional_t<D == DType::F32, uint32_t, uint16_t>;
  alignas(32) double c[kBlock], s[kBlock], a[kBlock];
  alignas(32) Bits buf[2 * kBlock];
  alignas(32) uint8_t bad[kBlock];
  // Bound on |fast − defined|: the defined value is within a few ulps (2^-52) of the exact one, the
  // fast one within 2e-12 (the series' truncation: ln to t^15, sin to y^13, cos to y^12); 2^-34
  // (6e-11) leaves a factor of 30 and sends about 1 element in 500 the defined way; 2^-80·std·r
  // covers values near a zero of cos or sin. A value whose v − δ and v + δ round alike has that
  // rounding as its defined one; the others (and 0, for its sign) are computed the defined way.
  const double rel = 0x1p-34, abs = 0x1p-80;
  for (int64_t k0 = begin / 2; 2 * k0 < end; k0 += kBlock) {
    const int np = int(std::min<int64_t>(kBlock, (end + 1) / 2 - k0));
    const int np4 = (np + 3) / 4 * 4;
    fastPairs(s0, k0, np4, std, c, s, a);
    // A whole block of the range goes straight to x, a part of one through `buf`.
    const int64_t first = std::max<int64_t>(begin - 2 * k0, 0), last = std::min<int64_t>(end - 2 * k0, 2 * np);
    Bits *dst = static_cast<Bits *>(x) + (2 * k0 + first - begin);
    const bool whole = first == 0 && last == 2 * np4;
    Bits *out = whole ? dst : buf;
    // Branch-free over the block, so that it vectorizes.
    for (int j = 0; j < np4; ++j) {
      const double dc = std::fabs(c[j]) * rel + std::fabs(a[j]) * abs,
                   ds = std::fabs(s[j]) * rel + std::fabs(a[j]) * abs;
      uint32_t loC, hiC, loS, hiS;
      if constexpr (D == DType::F32) {
        loC = floatBits(float(c[j] - dc)), hiC = floatBits(float(c[j] + dc));
        loS = floatBits(float(s[j] - ds)), hiS = floatBits(float(s[j] + ds));
      } else {
        loC = roundTo<D>(c[j] - dc), hiC = roundTo<D>(c[j] + dc);
        loS = roundTo<D>(s[j] - ds), hiS = roundTo<D>(s[j] + ds);
      }
      out[2 * j] = Bits(loC), out[2 * j + 1] = Bits(loS);
      bad[j] = uint8_t((loC != hiC) | (loS != hiS) | (c[j] == 0.0) | (s[j] == 0.0));
    }
    for (int j = np4; j < (np4 + 7) / 8 * 8; ++j) bad[j] = 0;
    for (int j0 = 0; j0 < np; j0 += 8) { // eight flags at a time: one in about 250 is set
      uint64_t any;
      std::memcpy(&any, bad + j0, 8);
      if (!any) continue;
      for (int j = j0; j < std::min(np, j0 + 8); ++j) {
        if (!bad[j]) continue; // near a rounding boundary (or 0): the defined way
        double rc, rs;
        referencePair(s0, k0 + j, std, rc, rs);
        out[2 * j] = Bits(roundTo<D>(rc)), out[2 * j + 1] = Bits(roundTo<D>(rs));
      }
    }
    if (!whole) std::memcpy(dst, out + first, size_t(last - first) * sizeof(Bits));
  }
}

} // namespace

uint64_t splitmix64(uint64_t &state) { return mix64(state += kGamma); }

void initNormalRange(void *x, DType dtype, int64_t begin, int64_t count, double std, uint64_t seed,
                     const std::string &name) {
  if (count <= 0) return;
  const uint64_t s0 = seed ^ fnv1a64(name.data(), name.size());
  const int64_t end = begin + count, esize = dtypeSize(dtype);
  // Chunks of 64Ki elements (even boundaries of the whole tensor), spread over the threads.
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t first = begin / kChunk, last = (end - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 4) if (last > first)
  for (int64_t c = first; c <= last; ++c) {
    const int64_t b = std::max(begin, c * kChunk), e = std::min(end, (c + 1) * kChunk);
    void *dst = static_cast<char *>(x) + (b - begin) * esize;
    switch (dtype) {
    case DType::BF16: normalRange<DType::BF16>(dst, b, e, std, s0); break;
    case DType::F16: normalRange<DType::F16>(dst, b, e, std, s0); break;
    default: normalRange<DType::F32>(dst, b, e, std, s0); break;
    }
  }
}

void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name) {
  initNormalRange(x, DType::F32, 0, n, std, seed, name);
}

void initNormalAs(void *x, DType dtype, int64_t n, double std, uint64_t seed, const std::string &name) {
  initNormalRange(x, dtype, 0, n, std, seed, name);
}

void populatePages(void *x, int64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(x) + page - 1) / page * page, hi = (uintptr_t(x) + uintptr_t(bytes)) / page * page;
  if (hi > lo) (void)::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_POPULATE_WRITE); // (else: faults)
#else
  (void)x, (void)bytes;
#endif
}

void zeroFill(void *x, int64_t bytes, bool mappedZero) {
  // In 16 MiB chunks over the threads. Memory known to be freshly mapped (zero pages) is only
  // populated (MADV_POPULATE_WRITE: the kernel maps zeroed pages in bulk, several times faster than
  // a fault per page later, in the middle of a step); else, or where that is not supported, set.
  constexpr int64_t kChunk = int64_t(16) << 20;
  const long page = sysconf(_SC_PAGESIZE);
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    char *b = static_cast<char *>(x) + c * kChunk;
    const int64_t n = std::min(kChunk, bytes - c * kChunk);
#ifdef MADV_POPULATE_WRITE
    if (mappedZero) {
      const uintptr_t lo = (uintptr_t(b) + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page),
                      hi = (uintptr_t(b) + uintptr_t(n)) / uintptr_t(page) * uintptr_t(page);
      if (hi > lo && ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_POPULATE_WRITE) == 0) {
        std::memset(b, 0, lo - uintptr_t(b));
        std::memset(reinterpret_cast<void *>(hi), 0, uintptr_t(b) + uintptr_t(n) - hi);
        continue;
      }
    }
#endif
    std::memset(b, 0, size_t(n));
  }
}

void initConstantRange(void *x, DType dtype, int64_t count, float value) {
  if (count <= 0) return;
  if (value == 0.0f && !std::signbit(value)) {
    zeroFill(x, count * dtypeSize(dtype), false);
    return;
  }
#pragma omp parallel for schedule(static) if (count >= (int64_t(1) << 18))
  for (int64_t i = 0; i < count; ++i) storeFrom32(x, dtype, i, value);
}

} // namespace bigc::rt
