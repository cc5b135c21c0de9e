// Fast CPU AdamW (runtime/optim/CpuAdam.cpp) against a scalar double-precision AdamW written
// here (PyTorch's torch.optim.AdamW formulas), over several steps, for every gradient dtype and
// half-copy dtype, odd lengths (vector tails), weight decay, grad scaling, the serial and the
// OpenMP paths, and every instruction set the machine has (each must agree with the scalar code
// to within 1 ulp). The 16-bit half copies are checked against an independent round-to-nearest-
// even written in double.
#include "bigc/Runtime/cpu_adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace rt = bigc::rt;
using rt::DType;

namespace {

// ---- independent conversions (double arithmetic, not the library's bit tricks) -------------

// Round x to a binary format with `mant` fraction bits, smallest normal exponent `emin` and
// largest finite `maxFinite`, ties to even; overflow gives inf.
double roundToFormat(double x, int mant, int emin, double maxFinite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int k;
  std::frexp(x, &k); // |x| = f * 2^k, f in [0.5, 1)
  int e = std::max(k - 1, emin);
  double q = std::ldexp(1.0, e - mant);
  double r = std::nearbyint(x / q) * q;
  if (std::fabs(r) > maxFinite) return std::copysign(INFINITY, x);
  return r;
}
double roundBf16(float f) { return roundToFormat(f, 7, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127)); }
double roundF16(float f) { return roundToFormat(f, 10, -14, 65504.0); }

double decodeBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double decodeF16(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}
uint16_t encodeExact(double x, DType t) {
  // x is exactly representable in t (a value from roundBf16/roundF16): find its bits by search
  // over the 65536 codes would be slow; build them instead and verify by decoding.
  if (t == DType::BF16) {
    float f = float(x);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t(u >> 16);
  }
  _Float16 h = (_Float16)x; // exact: x is an f16 value
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// ---- reference AdamW in double -------------------------------------------------------------

struct RefState {
  std::vector<double> p, m, v;
  std::vector<double> mAbs; // m computed from |g|: the scale of m's rounding errors (m cancels)
};

// Hyperparameters as PyTorch holds them (Python doubles, as written); the library gets floats.
struct Hyper {
  double lr, beta1, beta2, eps, wd, gradScale;
  rt::CpuAdamArgs args() const {
    rt::CpuAdamArgs a;
    a.lr = float(lr);
    a.beta1 = float(beta1);
    a.beta2 = float(beta2);
    a.eps = float(eps);
    a.weightDecay = float(wd);
    a.gradScale = float(gradScale);
    return a;
  }
};

void refStep(RefState &s, const std::vector<float> &gradAsFloat, const Hyper &h, int64_t t) {
  double bc1 = 1.0 - std::pow(h.beta1, double(t));
  double bc2 = 1.0 - std::pow(h.beta2, double(t));
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = double(gradAsFloat[i]) * double(float(h.gradScale));
    s.p[i] *= 1.0 - h.lr * h.wd;
    s.m[i] = h.beta1 * s.m[i] + (1.0 - h.beta1) * g;
    s.mAbs[i] = h.beta1 * s.mAbs[i] + (1.0 - h.beta1) * std::fabs(g);
    s.v[i] = h.beta2 * s.v[i] + (1.0 - h.beta2) * g * g;
    double denom = std::sqrt(s.v[i] / bc2) + h.eps;
    s.p[i] -= h.lr * (s.m[i] / bc1) / denom;
  }
}

// ---- helpers -------------------------------------------------------------------------------

size_t dsize(DType t) { return t == DType::F32 ? 4 : 2; }

// Store float values as dtype t (the library's input); returns the values as they read back.
std::vector<float> makeGrad(std::mt19937 &rng, size_t n, DType t, float scale, std::vector<uint8_t> &bytes) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> asFloat(n);
  bytes.assign(n * dsize(t), 0);
  for (size_t i = 0; i < n; ++i) {
    float x = d(rng);
    if (t == DType::F32) {
      std::memcpy(&bytes[i * 4], &x, 4);
      asFloat[i] = x;
    } else {
      double r = t == DType::BF16 ? roundBf16(x) : roundF16(x);
      uint16_t b = encodeExact(r, t);
      std::memcpy(&bytes[i * 2], &b, 2);
      asFloat[i] = float(t == DType::BF16 ? decodeBf16(b) : decodeF16(b));
      EXPECT_EQ(double(asFloat[i]), r);
    }
  }
  return asFloat;
}

const char *name(DType t) { return rt::dtypeName(t); }

std::vector<std::string> isas() {
  std::vector<std::string> out;
  for (const char *s : {"scalar", "avx2", "avx512"})
    if (rt::cpuAdamForceIsa(s)) out.push_back(s);
  rt::cpuAdamForceIsa("");
  return out;
}

// Distance in ulps between two floats of one sign (0 when bitwise equal).
int64_t ulpDist(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = int32_t(0x80000000u) - ia;
  if (ib < 0) ib = int32_t(0x80000000u) - ib;
  return std::llabs(int64_t(ia) - int64_t(ib));
}

struct Case {
  DType grad, half;
  bool writeHalf;
};

// Runs `steps` AdamW steps of length n on the forced ISA; checks against the double reference
// and the half copy against rounding of the fp32 result. Returns final (p, m, v, half bytes).
struct Result {
  std::vector<float> p, m, v;
  std::vector<uint8_t> half;
};

Result runAndCheck(const std::string &isa, const Case &cs, size_t n, int steps, const Hyper &hp, uint32_t seed) {
  EXPECT_TRUE(rt::cpuAdamForceIsa(isa.c_str()));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  Result r;
  r.p.resize(n);
  r.m.assign(n, 0.0f);
  r.v.assign(n, 0.0f);
  for (auto &x : r.p) x = ud(rng);
  r.half.assign(n * dsize(cs.half), 0xAB);
  RefState ref{std::vector<double>(r.p.begin(), r.p.end()), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
               std::vector<double>(n, 0.0)};
  for (int s = 1; s <= steps; ++s) {
    rt::CpuAdamArgs a = hp.args();
    a.step = s;
    std::vector<uint8_t> gbytes;
    std::vector<float> g = makeGrad(rng, n, cs.grad, 0.5f / a.gradScale, gbytes);
    rt::cpuAdamW(r.p.data(), gbytes.data(), cs.grad, r.m.data(), r.v.data(), cs.writeHalf ? r.half.data() : nullptr,
                 cs.half, int64_t(n), a);
    refStep(ref, g, hp, s);
  }
  rt::cpuAdamForceIsa("");
  // fp32 state vs double: a few float roundings per step.
  size_t bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    double tolP = 1e-6 * std::fabs(ref.p[i]) + 1e-6 * hp.lr;
    double tolM = 1e-6 * ref.mAbs[i] + 1e-12;
    double tolV = 2e-6 * std::fabs(ref.v[i]) + 1e-12;
    if (std::fabs(r.p[i] - ref.p[i]) > tolP || std::fabs(r.m[i] - ref.m[i]) > tolM ||
        std::fabs(r.v[i] - ref.v[i]) > tolV) {
      ++bad;
      ADD_FAILURE() << isa << " grad=" << name(cs.grad) << " n=" << n << " i=" << i << ": p " << r.p[i] << " vs "
                    << ref.p[i] << ", m " << r.m[i] << " vs " << ref.m[i] << ", v " << r.v[i] << " vs " << ref.v[i];
    }
  }
  if (cs.writeHalf) {
    for (size_t i = 0; i < n && bad < 5; ++i) {
      bool ok;
      if (cs.half == DType::F32) {
        float h;
        std::memcpy(&h, &r.half[i * 4], 4);
        ok = h == r.p[i];
      } else {
        uint16_t b;
        std::memcpy(&b, &r.half[i * 2], 2);
        double got = cs.half == DType::BF16 ? decodeBf16(b) : decodeF16(b);
        double want = cs.half == DType::BF16 ? roundBf16(r.p[i]) : roundF16(r.p[i]);
        ok = got == want;
      }
      if (!ok) {
        ++bad;
        ADD_FAILURE() << isa << " half " << name(cs.half) << " n=" << n << " i=" << i << " p=" << r.p[i];
      }
    }
  } else {
    for (uint8_t b : r.half) {
      if (b != 0xAB) {
        ADD_FAILURE() << "half written although null was passed";
        break;
      }
    }
  }
  return r;
}

} // namespace

TEST(CpuAdam, ReportsIsa) {
  std::string isa = rt::cpuAdamIsa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "scalar") << isa;
  EXPECT_TRUE(rt::cpuAdamForceIsa("scalar"));
  EXPECT_STREQ(rt::cpuAdamIsa(), "scalar");
  EXPECT_FALSE(rt::cpuAdamForceIsa("sse9"));
  EXPECT_STREQ(rt::cpuAdamIsa(), "scalar");
  EXPECT_TRUE(rt::cpuAdamForceIsa(""));
  EXPECT_EQ(std::string(rt::cpuAdamIsa()), isa);
}

// Every grad dtype x every half dtype (and none), odd lengths, weight decay and grad scaling,
// 5 steps, on every ISA; every ISA must agree with the scalar code to within 1 ulp.
TEST(CpuAdam, MatchesDoubleReferenceAllDtypesAllIsas) {
  // gradScale as with fp16 loss scaling; beta2 = 0.999 (far from its float: 1 - 0.999f is off by
  // 1.3e-5 relative, which the v tolerance catches).
  Hyper base{1e-2, 0.9, 0.999, 1e-8, 0.1, 1.0 / 1024.0};
  const DType ts[] = {DType::F32, DType::BF16, DType::F16};
  std::vector<std::string> all = isas();
  ASSERT_FALSE(all.empty());
  for (size_t n : {size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(33), size_t(1001)}) {
    for (DType g : ts) {
      for (DType h : ts) {
        for (bool writeHalf : {false, true}) {
          if (!writeHalf && h != DType::F32) continue;
          Case cs{g, h, writeHalf};
          uint32_t seed = uint32_t(n * 131 + int(g) * 7 + int(h) * 3 + writeHalf);
          Result scalar = runAndCheck("scalar", cs, n, 5, base, seed);
          for (const std::string &isa : all) {
            if (isa == "scalar") continue;
            Result r = runAndCheck(isa, cs, n, 5, base, seed);
            int64_t worst = 0;
            for (size_t i = 0; i < n; ++i) {
              worst = std::max(
                  {worst, ulpDist(r.p[i], scalar.p[i]), ulpDist(r.m[i], scalar.m[i]), ulpDist(r.v[i], scalar.v[i])});
            }
            EXPECT_LE(worst, 1) << isa << " vs scalar, grad " << name(g) << " n=" << n;
            if (writeHalf && h != DType::F32) {
              // Half copies of (nearly) equal params: equal except at a rounding boundary.
              size_t diff = 0;
              for (size_t i = 0; i < n; ++i)
                diff += std::memcmp(&r.half[i * 2], &scalar.half[i * 2], 2) != 0 && r.p[i] == scalar.p[i];
              EXPECT_EQ(diff, 0u) << isa << " half " << name(h);
            }
          }
        }
      }
    }
  }
}

// Large enough for the OpenMP path (several threads, uneven split, tail at the end).
TEST(CpuAdam, ParallelPathMatchesReference) {
  Hyper base{3e-4, 0.9, 0.95, 1e-8, 0.01, 0.5};
  size_t n = (1u << 18) + 13;
  for (const std::string &isa : isas()) {
    runAndCheck(isa, Case{DType::F32, DType::F32, false}, n, 3, base, 11);
    runAndCheck(isa, Case{DType::BF16, DType::BF16, true}, n, 3, base, 12);
    runAndCheck(isa, Case{DType::F16, DType::F16, true}, n, 3, base, 13);
  }
}

// With lr = 0 the param stays what it was, so the half copy is cast(p) for any p: random bit
// patterns (subnormals, huge values, inf, nan) check the rounding against the double reference.
TEST(CpuAdam, HalfCastRoundsToNearestEvenEverywhere) {
  std::mt19937 rng(5);
  const size_t n = 4099;
  std::vector<float> p0(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = rng();
    if (i % 4 == 0) u = (u & 0x8000ffffu) | (uint32_t(103 + (i / 4) % 40) << 23); // around f16 range ends
    if (i % 8 == 1) u = (u & 0x80000000u) | 0x38000000u | (u & 0x7fffffu);        // f16 subnormals
    if (i % 16 == 3) u = (u & 0xffff0000u) | 0x8000u;                             // exact bf16 ties
    if (i % 16 == 5) u = (u & 0xffffe000u) | 0x1000u;                             // exact f16 ties
    std::memcpy(&p0[i], &u, 4);
  }
  p0[0] = INFINITY;
  p0[1] = -INFINITY;
  p0[2] = NAN;
  p0[3] = 65519.99f;
  p0[4] = 65520.0f;
  p0[5] = -0.0f;
  rt::CpuAdamArgs a;
  a.lr = 0.0f;
  for (const std::string &isa : isas()) {
    ASSERT_TRUE(rt::cpuAdamForceIsa(isa.c_str()));
    for (DType h : {DType::BF16, DType::F16}) {
      std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
      std::vector<uint16_t> half(n);
      rt::cpuAdamW(p.data(), g.data(), DType::F32, m.data(), v.data(), half.data(), h, int64_t(n), a);
      size_t bad = 0;
      for (size_t i = 0; i < n && bad < 5; ++i) {
        // (a signalling NaN comes back quiet: p * 1 quiets it)
        ASSERT_TRUE(std::memcmp(&p[i], &p0[i], 4) == 0 || (std::isnan(p[i]) && std::isnan(p0[i])))
            << "lr=0 changed p at " << i;
        double got = h == DType::BF16 ? decodeBf16(half[i]) : decodeF16(half[i]);
        double want = h == DType::BF16 ? roundBf16(p0[i]) : roundF16(p0[i]);
        bool ok = std::isnan(want) ? std::isnan(got) : (got == want && std::signbit(got) == std::signbit(want));
        if (!ok) {
          ++bad;
          ADD_FAILURE() << isa << " " << name(h) << " cast of " << p0[i] << " gave " << got << ", want " << want;
        }
      }
    }
  }
  rt::cpuAdamForceIsa("");
}

// AdamW by hand for one element (betas exact in binary): p=1, g=0.5, lr=0.1, wd=0.1, b1=0.5,
// b2=0.75, t=1: p*(1-0.01)=0.99; m=0.25, v=0.0625; mhat=0.5, vhat=0.25 -> p = 0.99-0.1*0.5/0.5
// = 0.89. Second step, g=-0.5, t=2: p=0.89*0.99=0.8811; m=0.125-0.25=-0.125, v=0.046875+0.0625
// =0.109375; mhat=-0.125/0.75=-1/6, vhat=0.109375/0.4375=0.25 -> p = 0.8811 + 0.1*(1/6)/0.5.
TEST(CpuAdam, HandComputedStep) {
  for (const std::string &isa : isas()) {
    ASSERT_TRUE(rt::cpuAdamForceIsa(isa.c_str()));
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    rt::CpuAdamArgs a;
    a.lr = 0.1f;
    a.weightDecay = 0.1f;
    a.beta1 = 0.5f;
    a.beta2 = 0.75f;
    a.step = 1;
    rt::cpuAdamW(&p, &g, DType::F32, &m, &v, nullptr, DType::F32, 1, a);
    EXPECT_NEAR(p, 0.89, 2e-7) << isa;
    EXPECT_EQ(m, 0.25f) << isa;
    EXPECT_EQ(v, 0.0625f) << isa;
    g = -0.5f;
    a.step = 2;
    rt::cpuAdamW(&p, &g, DType::F32, &m, &v, nullptr, DType::F32, 1, a);
    EXPECT_NEAR(p, 0.8811 + 0.1 * (1.0 / 6.0) / 0.5, 2e-7) << isa;
    EXPECT_EQ(m, -0.125f) << isa;
    EXPECT_EQ(v, 0.109375f) << isa;
  }
  rt::cpuAdamForceIsa("");
}

// PyTorch forms 1 - beta2 from the Python double (1 - 0.999 -> 0.001f), not from the float
// 0.999f (-> 0.00099998713f): after one step from v = 0, v = (0.001f * g) * g exactly.
TEST(CpuAdam, BetasAsWrittenLikePyTorch) {
  for (const std::string &isa : isas()) {
    ASSERT_TRUE(rt::cpuAdamForceIsa(isa.c_str()));
    std::vector<float> p(19, 1.0f), g(19), m(19, 0.0f), v(19, 0.0f);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.37f * float(i + 1);
    rt::CpuAdamArgs a;
    a.beta1 = 0.9f;
    a.beta2 = 0.999f;
    rt::cpuAdamW(p.data(), g.data(), DType::F32, m.data(), v.data(), nullptr, DType::F32, 19, a);
    const float oneMinusB2 = float(1.0 - 0.999), oneMinusB1 = float(1.0 - 0.9);
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(v[i], (oneMinusB2 * g[i]) * g[i]) << isa << " i=" << i;
      EXPECT_EQ(m[i], oneMinusB1 * g[i]) << isa << " i=" << i;
    }
  }
  rt::cpuAdamForceIsa("");
}

TEST(CpuAdam, BadArgumentsAreUserErrors) {
  float p = 1, m = 0, v = 0, g = 0;
  rt::CpuAdamArgs a;
  EXPECT_THROW(rt::cpuAdamW(&p, &g, DType::I32, &m, &v, nullptr, DType::F32, 1, a), rt::UserError);
  int32_t h32 = 0;
  EXPECT_THROW(rt::cpuAdamW(&p, &g, DType::F32, &m, &v, &h32, DType::I32, 1, a), rt::UserError);
  a.step = 0;
  EXPECT_THROW(rt::cpuAdamW(&p, &g, DType::F32, &m, &v, nullptr, DType::F32, 1, a), rt::UserError);
  a.step = 1;
  EXPECT_THROW(rt::cpuAdamW(&p, &g, DType::F32, &m, &v, nullptr, DType::F32, -1, a), rt::UserError);
  // n == 0 is a no-op.
  EXPECT_NO_THROW(rt::cpuAdamW(&p, &g, DType::F32, &m, &v, nullptr, DType::F32, 0, a));
  EXPECT_EQ(p, 1.0f);
}

// --optimizer-states bf16: cpuAdamWStates with bf16 moments equals, bit for bit, the fp32 update
// of the moments widened from bf16 followed by a round to the nearest even bf16 (rounded here in
// double, independently of the library's conversion), for the parameter, the moments and the
// half copy, over several steps, on the serial path and the OpenMP path (odd lengths, pieces of
// 2048 and thread boundaries), every instruction set the machine has.
TEST(CpuAdam, Bf16MomentsAreTheFp32UpdateRounded) {
  auto toBf16 = [](double x) {
    float f = float(x);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t(u >> 16); // x is already a bf16 value
  };
  auto fromBf16 = [](uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (const std::string &isa : isas())
    for (size_t n : {size_t(5000), size_t((1u << 17) + 7)}) {
      ASSERT_TRUE(rt::cpuAdamForceIsa(isa.c_str())) << isa;
      std::mt19937 rng(7);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> p(n), pRef(n), g(n), mf(n), vf(n);
      std::vector<uint16_t> m(n), v(n), half(n), halfRef(n);
      for (size_t i = 0; i < n; ++i) p[i] = pRef[i] = nd(rng);
      rt::CpuAdamArgs a;
      a.lr = 1e-2f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weightDecay = 0.1f;
      for (int64_t t = 1; t <= 4; ++t) {
        for (size_t i = 0; i < n; ++i) g[i] = nd(rng) * 1e-2f;
        a.step = t;
        for (size_t i = 0; i < n; ++i) mf[i] = fromBf16(m[i]), vf[i] = fromBf16(v[i]);
        rt::cpuAdamW(pRef.data(), g.data(), DType::F32, mf.data(), vf.data(), halfRef.data(), DType::BF16, int64_t(n),
                     a);
        rt::cpuAdamWStates(p.data(), g.data(), DType::F32, m.data(), v.data(), DType::BF16, half.data(), DType::BF16,
                           int64_t(n), a);
        size_t bad = 0;
        for (size_t i = 0; i < n && bad < 5; ++i) {
          const uint16_t wm = toBf16(roundBf16(mf[i])), wv = toBf16(roundBf16(vf[i]));
          if (p[i] != pRef[i] || m[i] != wm || v[i] != wv || half[i] != halfRef[i]) {
            ++bad;
            ADD_FAILURE() << isa << " n=" << n << " step " << t << " i=" << i << ": p " << p[i] << " vs " << pRef[i]
                          << ", m " << fromBf16(m[i]) << " vs " << fromBf16(wm) << ", v " << fromBf16(v[i]) << " vs "
                          << fromBf16(wv);
          }
        }
        for (size_t i = 0; i < n; ++i) p[i] = pRef[i]; // the next step from the same parameters
      }
    }
  rt::cpuAdamForceIsa("");
  float p = 1, g = 0;
  uint16_t m = 0, v = 0;
  rt::CpuAdamArgs a;
  EXPECT_THROW(rt::cpuAdamWStates(&p, &g, DType::F32, &m, &v, DType::F16, nullptr, DType::F32, 1, a), rt::UserError);
}
