// Program format version 2 in the runtime: 16-bit storage, new ops, AdamW v2, loss scaling,
// memory spaces and streams, micro-batches, init kinds copy/fill, weights of record.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bigc/Runtime/data.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Runtime/safetensors.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using bigc::rt::testing::ProgramBuilder;
using bigc::rt::testing::TinyModel;
using bigc::rt::testing::validateError;
using TM = TinyModel;
using json = nlohmann::json;

namespace {

Attr num(double v) { return ProgramBuilder::num(v); }

#define EXPECT_ERROR_HAS(msg, ...)                                                                                     \
  do {                                                                                                                 \
    std::string m_ = (msg);                                                                                            \
    EXPECT_FALSE(m_.empty()) << "expected an error";                                                                   \
    for (const char *k_ : {__VA_ARGS__}) EXPECT_NE(m_.find(k_), std::string::npos) << "'" << k_ << "' not in: " << m_; \
  } while (0)

using bigc::rt::testing::adamAttrs;
using bigc::rt::testing::batch;
using bigc::rt::testing::Batch;
using bigc::rt::testing::fp16Tiny;
using bigc::rt::testing::offloadTiny;
using namespace bigc::rt::testing::f16ids;

int run(std::vector<std::string> args) {
  std::vector<char *> argv;
  static std::string name = "bigc-run";
  argv.push_back(name.data());
  for (auto &a : args) argv.push_back(a.data());
  return runMain(int(argv.size()), argv.data(), 1);
}
std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace

// ----- 16-bit conversions

TEST(RuntimeHalf, Bf16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16ToF32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToF32(f32ToBf16(f)))) << h;
    } else {
      ASSERT_EQ(f32ToBf16(f), h) << "bf16 " << h << " does not round-trip";
    }
  }
  // Ties go to even; just above a tie rounds up.
  EXPECT_EQ(f32ToBf16(1.0f + 0x1p-8f), f32ToBf16(1.0f));               // 1 + half an ulp -> 1
  EXPECT_EQ(f32ToBf16(1.0f + 3 * 0x1p-8f), f32ToBf16(1.0f + 0x1p-6f)); // 1.5 ulp -> 2 ulp
  EXPECT_EQ(f32ToBf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), f32ToBf16(1.0f + 0x1p-7f));
  EXPECT_EQ(f32ToBf16(-1.0f - 0x1p-8f), f32ToBf16(-1.0f));
  EXPECT_EQ(f32ToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32ToBf16(std::numeric_limits<float>::max()), 0x7f80); // rounds up to inf
  EXPECT_TRUE(std::isnan(bf16ToF32(f32ToBf16(std::nanf("")))));
  EXPECT_EQ(f32ToBf16(-0.0f), 0x8000);
}

TEST(RuntimeHalf, F16RoundTripRoundingInfNanSubnormals) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16ToF32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_EQ(f32ToF16(f) & 0x7c00, 0x7c00) << h;
      EXPECT_NE(f32ToF16(f) & 0x3ff, 0) << h;
    } else {
      ASSERT_EQ(f32ToF16(f), h) << "f16 " << h << " does not round-trip";
    }
  }
  EXPECT_EQ(f16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(f16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0001), 0x1p-24f); // smallest subnormal
  EXPECT_EQ(f16ToF32(0x0400), 0x1p-14f); // smallest normal
  EXPECT_TRUE(std::isinf(f16ToF32(0x7c00)) && f16ToF32(0xfc00) < 0);
  // Ties to even in the normal range.
  EXPECT_EQ(f32ToF16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32ToF16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(f32ToF16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  // Overflow: 65519 rounds to 65504, 65520 (the tie) to inf.
  EXPECT_EQ(f32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00);
  EXPECT_EQ(f32ToF16(-1e9f), 0xfc00);
  // Subnormals: 2^-25 is a tie between 0 and 2^-24 (-> 0), 3·2^-25 between 1 and 2 units (-> 2).
  EXPECT_EQ(f32ToF16(0x1p-25f), 0x0000);
  EXPECT_EQ(f32ToF16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32ToF16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(f32ToF16(5 * 0x1p-25f), 0x0002);
  EXPECT_EQ(f32ToF16(-0x1p-24f), 0x8001);
  EXPECT_EQ(f32ToF16(0x1p-14f - 0x1p-26f), 0x0400); // rounds up into the normal range
  EXPECT_EQ(f32ToF16(1e-10f), 0x0000);
  EXPECT_EQ(f32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(f32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);

  // Random floats: the result is a nearest f16, ties to even (checked against the neighbours).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-30.f, 17.f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::ldexp(1.0f + float(rng() % 1000000) / 1e6f, int(mag(rng))) * ((rng() & 1) ? -1.f : 1.f);
    uint16_t h = f32ToF16(x);
    double err = std::fabs(double(f16ToF32(h)) - double(x));
    if (std::isinf(f16ToF32(h))) {
      ASSERT_GE(std::fabs(x), 65520.0f);
      continue;
    }
    for (int d : {-1, 1}) {
      uint16_t nb = uint16_t(h + d);
      if ((nb & 0x7c00) == 0x7c00 || ((h & 0x7fff) == 0 && d < 0)) continue;
      double e2 = std::fabs(double(f16ToF32(nb)) - double(x));
      ASSERT_LE(err, e2) << x;
      if (err == e2) {
        ASSERT_EQ(h & 1, 0) << "tie not to even for " << x;
      }
    }
  }
}

TEST(RuntimeHalf, BulkConversionsAndChecks) {
  std::vector<float> x(100000);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 10.f);
  for (auto &v : x) v = nd(rng);
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  for (DType t : {DType::BF16, DType::F16}) {
    fromF32(x.data(), h.data(), t, int64_t(x.size()));
    toF32(h.data(), t, back.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); i += 997) {
      ASSERT_EQ(h[i], t == DType::BF16 ? f32ToBf16(x[i]) : f32ToF16(x[i]));
      ASSERT_EQ(back[i], t == DType::BF16 ? bf16ToF32(h[i]) : f16ToF32(h[i]));
    }
    EXPECT_FALSE(anyNonFinite(h.data(), t, int64_t(h.size())));
    h[77777] = t == DType::BF16 ? f32ToBf16(INFINITY) : f32ToF16(1e6f); // f16 overflows to inf
    EXPECT_TRUE(anyNonFinite(h.data(), t, int64_t(h.size())));
  }
  // The vector (F16C) bulk path equals the scalar code on every f16 and on rounding cases.
  std::vector<uint16_t> all(65536);
  for (uint32_t k = 0; k < 65536; ++k) all[k] = uint16_t(k);
  std::vector<float> allF(65536);
  toF32(all.data(), DType::F16, allF.data(), 65536);
  for (uint32_t k = 0; k < 65536; ++k) {
    float want = f16ToF32(uint16_t(k));
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(allF[k])) << k;
    else
      ASSERT_EQ(floatBits(allF[k]), floatBits(want)) << k;
  }
  std::vector<float> cases = {0x1p-25f,
                              3 * 0x1p-25f,
                              0x1p-14f - 0x1p-26f,
                              1.0f + 0x1p-11f,
                              1.0f + 3 * 0x1p-11f,
                              65519.f,
                              65520.f,
                              -65520.f,
                              INFINITY,
                              -INFINITY,
                              -0.0f,
                              1e-10f,
                              -0x1p-24f};
  for (uint32_t k = 0; k < 65536; ++k) cases.push_back(bitsFloat(k * 65537u + 12345u)); // spread over all floats
  std::vector<uint16_t> got(cases.size());
  fromF32(cases.data(), got.data(), DType::F16, int64_t(cases.size()));
  for (size_t k = 0; k < cases.size(); ++k) {
    if (std::isnan(cases[k]))
      ASSERT_TRUE(std::isnan(f16ToF32(got[k]))) << k;
    else
      ASSERT_EQ(got[k], f32ToF16(cases[k])) << cases[k];
  }

  EXPECT_FALSE(anyNonFinite(x.data(), DType::F32, int64_t(x.size())));
  x[5] = std::nanf("");
  EXPECT_TRUE(anyNonFinite(x.data(), DType::F32, int64_t(x.size())));
  // bf16 -> f16 goes through f32 (exact there) and rounds once.
  uint16_t b = f32ToBf16(3.140625f), f;
  convert(&b, DType::BF16, &f, DType::F16, 1);
  EXPECT_EQ(f, f32ToF16(3.140625f));
  // Round to odd before the 16-bit rounding gives the single rounding of the double.
  double tie = 1.0 + 0x1p-11 + 0x1p-40; // just above an f16 tie; a plain float cast lands on the tie
  EXPECT_EQ(float(tie), 1.0f + 0x1p-11f);
  EXPECT_EQ(f32ToF16(f64ToF32RoundOdd(tie)), 0x3c01);
  EXPECT_EQ(f32ToF16(float(tie)), 0x3c00);
}

// ----- validation of the version-2 fields

TEST(RuntimeV2Validation, Errors) {
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    EXPECT_EQ(validateError(p), "");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[8].wait = {9};
    EXPECT_ERROR_HAS(validateError(p), "instruction 8 (copy", "waits for instruction 9", "not an earlier");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[11].wait = {8};
    EXPECT_ERROR_HAS(validateError(p), "instruction 11", "own stream 'd2h'");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[11].stream = "disk";
    EXPECT_ERROR_HAS(validateError(p), "instruction 11", "unknown stream 'disk'");
  }
  {
    // The nvme stream runs copies between the nvme space and the host only.
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[11].stream = "nvme";
    EXPECT_ERROR_HAS(validateError(p), "instruction 11", "only a copy between the nvme space and a host buffer");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[11].phase = "warmup";
    EXPECT_ERROR_HAS(validateError(p), "unknown phase 'warmup'");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.spaces.pop_back(); // the host arena is gone; host buffers name an undeclared space
    EXPECT_ERROR_HAS(validateError(p), "buffer 0 ('wte.weight')", "unknown space 'host'");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.spaces[1].name = "disk";
    EXPECT_ERROR_HAS(validateError(p), "unknown memory space 'disk'");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.instructions[14].attrs["clip"] = num(0); // norm given but not announced
    EXPECT_ERROR_HAS(validateError(p), "instruction 14 (adamw", "expects 4 inputs", "has 5");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.instructions[11].in.pop_back(); // skip_on_overflow without found_inf
    EXPECT_ERROR_HAS(validateError(p), "instruction 11 (adamw", "expects 7 inputs", "found_inf (skip_on_overflow)",
                     "has 6");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.instructions[11].out.pop_back(); // write_half without the half output
    EXPECT_ERROR_HAS(validateError(p), "instruction 11 (adamw", "expects 4 outputs", "has 3");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_FOUND].dtype = DType::F16, p.buffers[F_FOUND].bytes = 2; // flags are f32
    EXPECT_ERROR_HAS(validateError(p), "loss_scaling.found_inf", "must be an f32 scalar");
    p.lossScale = p.foundInf = -1;
    EXPECT_ERROR_HAS(validateError(p), "instruction 9 (check_finite", "output 0", "must be f32");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_NORM].dtype = DType::BF16, p.buffers[F_NORM].bytes = 2; // norms are f32
    EXPECT_ERROR_HAS(validateError(p), "instruction 10 (global_norm", "must be f32");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_M0].dtype = DType::BF16, p.buffers[F_M0].bytes /= 2; // moments: both f32 or both bf16
    EXPECT_ERROR_HAS(validateError(p), "(adamw", "the moments m and v must be both f32 or both bf16, are bf16 and f32");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_M0].dtype = DType::F16, p.buffers[F_M0].bytes /= 2; // no f16 moments
    EXPECT_ERROR_HAS(validateError(p), "wte.weight.m", "must be f32 (moments: or bf16), not f16");
  }
  {
    // Statistics are f32: layernorm mean in bf16 is rejected.
    ProgramBuilder b(1, 2, 4);
    int64_t tok = b.buffer("tokens", {1, 2}, "input", DType::I32),
            tgt = b.buffer("targets", {1, 2}, "input", DType::I32);
    int64_t x = b.buffer("x", {2, 4}, "activation", DType::BF16);
    int64_t w = b.buffer("w", {4}, "param", DType::BF16, Init{"ones"}),
            bb = b.buffer("b", {4}, "param", DType::BF16, Init{"zeros"});
    int64_t y = b.buffer("y", {2, 4}, "activation", DType::BF16);
    int64_t mean = b.buffer("mean", {2}, "activation", DType::BF16), rstd = b.buffer("rstd", {2}, "activation");
    int64_t loss = b.buffer("loss", {}, "activation");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
    b.inst("fill", {}, {x}, {{"value", num(1)}});
    b.inst("layernorm", {x, w, bb}, {y, mean, rstd});
    EXPECT_ERROR_HAS(validateError(b.finish()), "instruction 1 (layernorm", "output 1", "must be f32", "is bf16");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.microBatches = 2;
    EXPECT_ERROR_HAS(validateError(p), "inputs.tokens has 1 buffer(s)", "micro_batches is 2");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.lossScale = F_DW;
    EXPECT_ERROR_HAS(validateError(p), "loss_scaling.scale", "f32 scalar");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_WTE_H].init.source = "nope";
    EXPECT_ERROR_HAS(validateError(p), "init copies 'nope'");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.buffers[F_WTE_M].init = Init{"copy", 0, "wte.weight.half"}; // a cycle
    EXPECT_ERROR_HAS(validateError(p), "cycle");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.precision = "fp8";
    EXPECT_ERROR_HAS(validateError(p), "unknown precision 'fp8'");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.recompute.policy = "sometimes";
    EXPECT_ERROR_HAS(validateError(p), "recompute", "'sometimes'");
  }
  {
    Program p = fp16Tiny(0.05, 1024);
    p.instructions[13].out = {F_GOOD, F_SCALE};
    EXPECT_ERROR_HAS(validateError(p), "loss_scale_update", "in place");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.buffers[23].liveLast = 13; // grad_norm.host is read by the host adamw at 14 and 15
    EXPECT_ERROR_HAS(validateError(p), "instruction 14", "outside its live interval");
  }
  {
    Program p = offloadTiny(0.05, 1.0, 0.0);
    p.buffers[22].dtype = DType::F16, p.buffers[22].bytes /= 2; // copy changes the dtype
    EXPECT_ERROR_HAS(validateError(p), "instruction 11 (copy", "keeps the dtype");
  }
}

TEST(RuntimeV2Validation, SerializeParseRoundTrip) {
  Program p = offloadTiny(0.05, 1.0, 0.1);
  p.recompute = RecomputeInfo{"selective", 1234, 5678, 91011};
  p.instructions[3].phase = "backward";
  p.instructions[1].recompute = true;
  std::string bytes = serializeProgram(p);
  ASSERT_EQ(bytes.rfind("BIGC-PROGRAM 3 ", 0), 0u);
  Program q = parseProgram(bytes, "m.bigc");
  EXPECT_EQ(q.tokenInputs, p.tokenInputs);
  EXPECT_EQ(q.targetInputs, p.targetInputs);
  EXPECT_EQ(q.recompute.policy, "selective");
  EXPECT_EQ(q.recompute.savedBytes, 1234);
  EXPECT_EQ(q.recompute.flopsAdded, 5678);
  EXPECT_EQ(q.recompute.forwardFlops, 91011);
  ASSERT_EQ(q.spaces.size(), 2u);
  EXPECT_EQ(q.spaces[1].name, "host");
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    EXPECT_EQ(q.instructions[i].stream, p.instructions[i].stream) << i;
    EXPECT_EQ(q.instructions[i].wait, p.instructions[i].wait) << i;
    EXPECT_EQ(q.instructions[i].phase, p.instructions[i].phase) << i;
    EXPECT_EQ(q.instructions[i].recompute, p.instructions[i].recompute) << i;
  }
  EXPECT_EQ(q.buffers[2].init.kind, "copy");
  EXPECT_EQ(q.buffers[2].init.source, "wte.weight");
  EXPECT_EQ(q.buffers[0].space, "host");
  EXPECT_EQ(serializeProgram(q), bytes);

  Program f = fp16Tiny(0.05, 1024);
  Program g = parseProgram(serializeProgram(f), "m.bigc");
  EXPECT_EQ(g.lossScale, F_SCALE);
  EXPECT_EQ(g.foundInf, F_FOUND);
  EXPECT_EQ(g.precision, "fp16");
  EXPECT_EQ(g.buffers[F_SCALE].init.kind, "fill");
  EXPECT_EQ(g.buffers[F_SCALE].init.value, 1024);
  EXPECT_TRUE(g.instructions[11].flag("skip_on_overflow"));
  // The JSON writes the adamw flags as bools and omits default stream fields.
  std::string payload = serializeProgram(f);
  EXPECT_NE(payload.find("\"write_half\":true"), std::string::npos);
  EXPECT_EQ(payload.find("\"stream\""), std::string::npos);
  EXPECT_NE(payload.find("\"loss_scaling\": {\"found_inf\":" + std::to_string(F_FOUND)), std::string::npos);
}

// ----- executor

TEST(RuntimeV2Executor, OffloadStreamsEqualSerial) {
  Program serialP = TM::build(0.05, 1.0, 0.1);
  Program offP = offloadTiny(0.05, 1.0, 0.1);
  ASSERT_EQ(validateError(offP), "");
  Executor serial(serialP, 42), off(offP, 42);
  EXPECT_EQ(off.streams(), (std::vector<std::string>{"compute", "d2h", "host", "h2d"}));
  EXPECT_GT(off.arenaBytes().at("host"), 0);
  ASSERT_EQ(off.weights().size(), 2u);
  EXPECT_EQ(off.weights()[0]->name, "wte.weight");
  EXPECT_EQ(off.weights()[0]->role, "master");
  // Compute copies start equal to the masters (init kind copy).
  EXPECT_EQ(0, std::memcmp(off.data(2), off.data(0), TM::V * TM::C * 4));
  EXPECT_EQ(0, std::memcmp(off.data(0), serial.data(TM::WTE), TM::V * TM::C * 4));
  for (int s = 0; s < 30; ++s) {
    Batch b = batch(s);
    float a = serial.step(b.tokens.data(), b.targets.data());
    float c = off.step(b.tokens.data(), b.targets.data());
    ASSERT_EQ(a, c) << "step " << s;
  }
  EXPECT_EQ(0, std::memcmp(off.data(0), serial.data(TM::WTE), TM::V * TM::C * 4));
  EXPECT_EQ(0, std::memcmp(off.data(1), serial.data(TM::W), TM::V * TM::C * 4));
  EXPECT_EQ(0, std::memcmp(off.data(3), serial.data(TM::W), TM::V * TM::C * 4)) << "device copy is the new weight";
  EXPECT_EQ(off.updateCount(), 30);
}

TEST(RuntimeV2Executor, WaitTimeoutIsAnErrorNotAHang) {
  Program p = offloadTiny(0.05, 1.0, 0.1);
  Executor ex(p, 1);
  Batch b = batch(0);
  ex.step(b.tokens.data(), b.targets.data());
  // 2 s: the legitimate waits of the step finish within it even on a machine whose cores are busy.
  ex.setWaitTimeoutForTesting(2.0);
  ex.setNeverFinishForTesting(16); // the h2d copy the final wait (18) and nothing else waits for
  auto t0 = std::chrono::steady_clock::now();
  try {
    ex.step(b.tokens.data(), b.targets.data());
    FAIL() << "expected a timeout";
  } catch (const UserError &) {
    FAIL() << "a stuck stream is an internal error, not a user error";
  } catch (const std::runtime_error &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("step 2: instruction 18 (wait on stream 'compute') waited 2 s for instruction 16 (copy on "
                     "stream 'h2d'"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("has not finished"), std::string::npos) << m;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 60.0); // stopped by the timeout, not hung
  // The executor is still usable once the hook is gone.
  ex.setNeverFinishForTesting(-1);
  ex.setWaitTimeoutForTesting(300);
  EXPECT_TRUE(std::isfinite(ex.step(b.tokens.data(), b.targets.data())));
}

TEST(RuntimeV2Executor, ErrorOnASideStreamReachesTheCaller) {
  // The embedding runs on the host stream; everything on compute waits for it. A bad token id
  // there must come back from step() as the UserError, with no stream left hanging.
  Program p = TM::build(0.05, 1.0, 0.0);
  p.instructions[0].stream = "host";
  p.instructions[1].wait = {0};
  p.instructions[9].wait = {0}; // embedding_grad reads the same tokens; order is not needed, harmless
  ASSERT_EQ(validateError(p), "");
  Executor ex(p, 1);
  ex.setWaitTimeoutForTesting(30);
  Batch b = batch(1);
  float good = ex.step(b.tokens.data(), b.targets.data());
  EXPECT_TRUE(std::isfinite(good));
  b.tokens[3] = 99;
  auto t0 = std::chrono::steady_clock::now();
  try {
    ex.step(b.tokens.data(), b.targets.data());
    FAIL();
  } catch (const UserError &e) {
    EXPECT_NE(std::string(e.what()).find("step 2: instruction 0 (embedding"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("token id 99"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  b.tokens[3] = 1;
  EXPECT_TRUE(std::isfinite(ex.step(b.tokens.data(), b.targets.data())));
}

TEST(RuntimeV2Executor, LossScaleUpdateAndCheckFinite) {
  ProgramBuilder b(1, 1, 2);
  int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32), tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
  int64_t g = b.buffer("g", {3}, "param", DType::F16, Init{"ones"});
  int64_t h = b.buffer("h", {2}, "param", DType::BF16, Init{"ones"});
  int64_t scale = b.buffer("scale", {}, "optimizer", DType::F32, Init{"fill", 0, "", 256});
  int64_t good = b.buffer("good", {}, "optimizer", DType::F32, Init{"zeros"});
  int64_t flag = b.buffer("flag", {}, "workspace");
  int64_t loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.p.lossScale = scale, b.p.foundInf = flag;
  b.inst("fill", {}, {loss}, {{"value", num(0.5)}});
  b.inst("check_finite", {g, h}, {flag});
  b.inst("loss_scale_update", {flag, scale, good}, {scale, good}, {{"growth_interval", num(3)}});
  Program p = b.finish();
  ASSERT_EQ(validateError(p), "");
  Executor ex(p, 1);
  int32_t t = 0;
  auto stepOnce = [&] { ex.step(&t, &t); };
  EXPECT_EQ(*ex.f32(scale), 256.f);
  stepOnce();
  stepOnce();
  EXPECT_EQ(*ex.f32(scale), 256.f);
  EXPECT_EQ(*ex.f32(good), 2.f);
  stepOnce(); // third clean step: grow, reset
  EXPECT_EQ(ex.lastLossScale(), 256.f);
  EXPECT_FALSE(ex.lastSkipped());
  EXPECT_EQ(*ex.f32(scale), 512.f);
  EXPECT_EQ(*ex.f32(good), 0.f);
  static_cast<uint16_t *>(ex.data(g))[1] = 0x7c00; // f16 inf
  stepOnce();
  EXPECT_EQ(ex.lastLossScale(), 512.f);
  EXPECT_TRUE(ex.lastSkipped());
  EXPECT_EQ(*ex.f32(flag), 1.f);
  EXPECT_EQ(*ex.f32(scale), 256.f);
  EXPECT_EQ(*ex.f32(good), 0.f);
  static_cast<uint16_t *>(ex.data(g))[1] = f32ToF16(1.f);
  static_cast<uint16_t *>(ex.data(h))[0] = 0x7fc1; // bf16 nan
  stepOnce();
  EXPECT_TRUE(ex.lastSkipped());
  EXPECT_EQ(*ex.f32(scale), 128.f);
  static_cast<uint16_t *>(ex.data(h))[0] = f32ToBf16(2.f);
  stepOnce();
  EXPECT_FALSE(ex.lastSkipped());
  EXPECT_EQ(*ex.f32(good), 1.f);
  EXPECT_EQ(ex.stepCount(), 6);
  EXPECT_EQ(ex.updateCount(), 4);
}

TEST(RuntimeV2Executor, AdamWSkipUnscaleClipWriteHalf) {
  ProgramBuilder b(1, 1, 2);
  int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32), tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
  int64_t w = b.buffer("w", {4}, "master", DType::F32, Init{"normal", 1.0});
  int64_t wh = b.buffer("w.half", {4}, "param", DType::BF16, Init{"copy", 0, "w"});
  int64_t grad = b.buffer("w.grad", {4}, "param", DType::F16, Init{"zeros"}); // set by the test
  int64_t m = b.buffer("w.m", {4}, "optimizer", DType::F32, Init{"zeros"});
  int64_t v = b.buffer("w.v", {4}, "optimizer", DType::F32, Init{"zeros"});
  int64_t norm = b.buffer("norm", {}, "workspace");
  int64_t scale = b.buffer("scale", {}, "optimizer", DType::F32, Init{"fill", 0, "", 8});
  int64_t found = b.buffer("found", {}, "optimizer", DType::F32, Init{"zeros"});
  int64_t loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.p.lossScale = scale, b.p.foundInf = found;
  b.inst("fill", {}, {loss}, {{"value", num(1)}});
  b.inst("global_norm", {grad}, {norm});
  auto adam = adamAttrs(0.1, 0.5, 0.0);
  for (const char *f : {"clip", "unscale", "skip_on_overflow", "write_half"}) adam[f] = num(1);
  b.inst("adamw", {w, grad, m, v, norm, scale, found}, {w, m, v, wh}, adam);
  Program p = b.finish();
  ASSERT_EQ(validateError(p), "");
  Executor ex(p, 3);
  ex.enableGradCapture();
  const std::vector<float> g = {8.f, -16.f, 4.f, 0.f}; // scaled by 8: true grads 1, -2, 0.5, 0
  fromF32(g.data(), ex.data(grad), DType::F16, 4);
  std::vector<float> w0 = ex.readF32(w);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(static_cast<uint16_t *>(ex.data(wh))[k], f32ToBf16(w0[size_t(k)]));

  int32_t t = 0;
  *ex.f32(found) = 1.f; // overflow: nothing moves, t does not advance
  ex.step(&t, &t);
  EXPECT_TRUE(ex.lastSkipped());
  EXPECT_EQ(ex.readF32(w), w0);
  EXPECT_EQ(ex.readF32(m), std::vector<float>(4, 0.f));
  EXPECT_EQ(ex.updateCount(), 0);
  EXPECT_EQ(ex.capturedGrads().at("w"), (std::vector<float>{1.f, -2.f, 0.5f, 0.f})) << "captured grads are unscaled";

  *ex.f32(found) = 0.f;
  ex.step(&t, &t);
  EXPECT_FALSE(ex.lastSkipped());
  EXPECT_EQ(ex.updateCount(), 1);
  // Reference at t = 1: g = grad/8 · c, c = min(1, 0.5 / (norm/8 + 1e-6)), norm/8 = sqrt(1+4+0.25).
  double c = std::min(1.0, 0.5 / (std::sqrt(5.25) + 1e-6));
  std::vector<float> w1 = ex.readF32(w);
  for (int k = 0; k < 4; ++k) {
    double gk = g[size_t(k)] / 8.0 * c;
    double mk = 0.1 * gk, vk = 0.05 * gk * gk;
    double want = w0[size_t(k)] - 0.1 * (mk / 0.1) / (std::sqrt(vk / 0.05) + 1e-8);
    EXPECT_NEAR(w1[size_t(k)], want, 1e-6) << k;
    EXPECT_EQ(static_cast<uint16_t *>(ex.data(wh))[k], f32ToBf16(w1[size_t(k)])) << "write_half";
  }
  EXPECT_NEAR(ex.readF32(m)[0], 0.1 * (1.0 * c), 1e-7);
}

TEST(RuntimeV2Executor, Bf16OpsComputeInFp32AndRound) {
  // The same chain in f32 and in bf16 storage: the bf16 run equals the f32 run on bf16-rounded
  // values within bf16 rounding at each step; stats stay f32; gelu works in place on bf16.
  auto build = [](DType t) {
    ProgramBuilder b(1, 1, 2);
    int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32),
            tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
    int64_t a = b.buffer("a", {2, 3, 8}, "param", t, Init{"normal", 1.0});
    int64_t w = b.buffer("w", {8, 16}, "param", t, Init{"normal", 0.5});
    int64_t lw = b.buffer("ln.w", {16}, "param", t, Init{"normal", 1.0});
    int64_t lb = b.buffer("ln.b", {16}, "param", t, Init{"normal", 1.0});
    int64_t y = b.buffer("y", {2, 3, 16}, "activation", t);
    int64_t gy = b.buffer("gy", {2, 3, 16}, "activation", t);
    int64_t z = b.buffer("z", {2, 3, 16}, "activation", t);
    int64_t mean = b.buffer("mean", {2, 3}, "activation"), rstd = b.buffer("rstd", {2, 3}, "activation");
    int64_t loss = b.buffer("loss", {}, "activation");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
    b.inst("matmul", {a, w}, {y});
    b.inst("gelu", {y}, {gy});
    b.inst("layernorm", {gy, lw, lb}, {z, mean, rstd});
    b.inst("fill", {}, {loss}, {{"value", num(0)}});
    return b.finish({{gy, y}}); // gelu in place
  };
  Program pb = build(DType::BF16), pf = build(DType::F32);
  ASSERT_EQ(validateError(pb), "");
  Executor eb(pb, 11), ef(pf, 11);
  EXPECT_GT(eb.stagingBytes().at("compute"), 0);
  EXPECT_EQ(ef.stagingBytes().at("compute"), 0);
  // Give the f32 run the bf16-rounded inputs.
  for (int64_t id : {0, 1, 2, 3, 4, 5}) {
    if (pb.buffers[size_t(id)].role != "param") continue;
    std::vector<float> v = eb.readF32(id);
    ef.writeF32(id, v.data());
    std::vector<float> direct(size_t(pb.buffers[size_t(id)].numel()));
    initNormal(direct.data(), int64_t(direct.size()), pb.buffers[size_t(id)].init.std, 11, pb.buffers[size_t(id)].name);
    for (size_t k = 0; k < v.size(); ++k) ASSERT_NEAR(v[k], direct[k], std::fabs(direct[k]) * 0x1p-8 + 1e-30);
  }
  int32_t t = 0;
  eb.step(&t, &t);
  ef.step(&t, &t);
  std::vector<float> zb = eb.readF32(8), zf = ef.readF32(8);
  double maxErr = 0;
  for (size_t k = 0; k < zb.size(); ++k) maxErr = std::max(maxErr, double(std::fabs(zb[k] - zf[k])));
  EXPECT_GT(maxErr, 0.0) << "bf16 storage must round somewhere";
  EXPECT_LT(maxErr, 0.1) << "three bf16 roundings (rel. 2^-8 each) on values of order 1-3";
  // Stats are f32 and close.
  std::vector<float> rb = eb.readF32(10), rf = ef.readF32(10);
  for (size_t k = 0; k < rb.size(); ++k) EXPECT_NEAR(rb[k], rf[k], 0.02 * std::fabs(rf[k]));
}

TEST(RuntimeV2Executor, MicroBatchesReadConsecutiveBatches) {
  // K = 2: two forward chains, loss = mean of the two micro-batch losses.
  ProgramBuilder b(TM::B, TM::T, TM::V);
  int64_t wte = b.param("wte.weight", {TM::V, TM::C}, 0.5), w = b.param("head.weight", {TM::C, TM::V}, 0.5);
  std::vector<int64_t> toks, tgts, losses;
  for (int k = 0; k < 2; ++k) {
    toks.push_back(b.buffer("tokens." + std::to_string(k), {TM::B, TM::T}, "input", DType::I32));
    tgts.push_back(b.buffer("targets." + std::to_string(k), {TM::B, TM::T}, "input", DType::I32));
  }
  for (int k = 0; k < 2; ++k) {
    int64_t x = b.buffer("x" + std::to_string(k), {TM::B, TM::T, TM::C}, "activation");
    int64_t lg = b.buffer("logits" + std::to_string(k), {TM::B, TM::T, TM::V}, "activation");
    int64_t l = b.buffer("loss" + std::to_string(k), {}, "activation");
    b.inst("embedding", {wte, toks[size_t(k)]}, {x});
    b.inst("matmul", {x, w}, {lg});
    b.inst("cross_entropy", {lg, tgts[size_t(k)]}, {l});
    losses.push_back(l);
  }
  int64_t sum = b.buffer("sum", {}, "activation"), loss = b.buffer("loss", {}, "activation");
  b.inst("add", {losses[0], losses[1]}, {sum});
  b.inst("scale", {sum}, {loss}, {{"factor", num(0.5)}});
  b.p.microBatches = 2, b.p.tokenInputs = toks, b.p.targetInputs = tgts, b.p.loss = loss;
  Program p = b.finish();
  ASSERT_EQ(validateError(p), "");
  Executor ex(p, 9), ref(TM::build(0.0), 9); // lr 0: the reference does not move
  Batch b0 = batch(0), b1 = batch(1);
  Batch both;
  both.tokens = b0.tokens, both.targets = b0.targets;
  both.tokens.insert(both.tokens.end(), b1.tokens.begin(), b1.tokens.end());
  both.targets.insert(both.targets.end(), b1.targets.begin(), b1.targets.end());
  float l = ex.step(both.tokens.data(), both.targets.data());
  float l0 = ref.step(b0.tokens.data(), b0.targets.data()), l1 = ref.step(b1.tokens.data(), b1.targets.data());
  EXPECT_FLOAT_EQ(l, 0.5f * (l0 + l1));
  EXPECT_NE(l0, l1);
  EXPECT_EQ(0, std::memcmp(ex.data(toks[1]), b1.tokens.data(), b1.tokens.size() * 4));
}

TEST(RuntimeV2Executor, Fp16LossScalingTrainsAndSkipsOnOverflow) {
  // Scale 1024: no overflow; the fp16 run tracks the fp32 run. fp16 keeps 11 significant bits:
  // weights, activations and logits carry relative errors of ~2^-11 each, so over 20 steps the
  // loss (about ln 8 ≈ 2.1) stays within 1e-2 of fp32.
  Executor f16(fp16Tiny(0.05, 1024, 1000), 42), f32(TM::build(0.05, 1.0, 0.0), 42);
  for (int s = 0; s < 20; ++s) {
    Batch b = batch(s);
    float a = f32.step(b.tokens.data(), b.targets.data()), c = f16.step(b.tokens.data(), b.targets.data());
    ASSERT_FALSE(f16.lastSkipped()) << s;
    ASSERT_NEAR(c, a, 1e-2) << "step " << s;
  }
  // Scale 2^20: dlogits = (p - onehot)·2^20/8 overflows f16; the step is skipped, the scale halves
  // until the grads fit; the weights do not move while skipping.
  Executor over(fp16Tiny(0.05, 1048576.0), 42);
  std::vector<float> w0 = over.readF32(F_WTE_M);
  Batch b = batch(0);
  over.step(b.tokens.data(), b.targets.data());
  EXPECT_TRUE(over.lastSkipped());
  EXPECT_EQ(over.lastLossScale(), 1048576.f);
  EXPECT_EQ(over.readF32(F_WTE_M), w0);
  int skipped = 1;
  for (int s = 0; s < 10 && over.lastSkipped(); ++s) {
    over.step(b.tokens.data(), b.targets.data());
    skipped += over.lastSkipped();
  }
  EXPECT_FALSE(over.lastSkipped());
  EXPECT_EQ(over.lastLossScale(), float(1048576.0 / double(1 << skipped)));
  EXPECT_NE(over.readF32(F_WTE_M), w0);
  EXPECT_EQ(over.updateCount(), 1);
}

TEST(RuntimeV2Run, LogsLossScaleSkippedAndSavesMasters) {
  std::string dir = bigc::rt::testing::tempDir();
  std::string model = dir + "/f16.bigc";
  writeFileAtomic(model, serializeProgram(fp16Tiny(0.05, 1048576.0, 1000)));
  ASSERT_EQ(run({model, "--steps", "6", "--log", dir + "/log.jsonl", "--save-weights", dir + "/w.safetensors",
                 "--dump-grads", dir + "/g.safetensors", "--quiet"}),
            0);
  std::istringstream log(slurp(dir + "/log.jsonl"));
  std::string line;
  std::vector<json> lines;
  while (std::getline(log, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["loss_scale"].get<double>(), 1048576.0);
  EXPECT_TRUE(lines[0]["skipped"].get<bool>());
  EXPECT_EQ(lines[1]["loss_scale"].get<double>(), 524288.0);
  EXPECT_FALSE(lines.back()["skipped"].get<bool>());
  EXPECT_TRUE(lines[0]["peak_bytes"].contains("device"));
  // Saved weights: the fp32 masters under the Hugging Face names, not the f16 copies.
  auto w = bigc::rt::safetensors::read(dir + "/w.safetensors");
  ASSERT_EQ(w.tensors.size(), 2u);
  ASSERT_NE(w.find("wte.weight"), nullptr);
  EXPECT_EQ(w.find("wte.weight")->dtype, DType::F32);
  EXPECT_EQ(w.find("wte.weight.half"), nullptr);
  // Grads are f32 and unscaled (order of a cross-entropy gradient, not of 2^20 times it).
  auto g = bigc::rt::safetensors::read(dir + "/g.safetensors");
  auto gv = g.find("head.weight")->toF32();
  double mx = 0;
  for (float x : gv) mx = std::max(mx, double(std::fabs(x)));
  EXPECT_GT(mx, 1e-4);
  EXPECT_LT(mx, 10.0);

  // Loading writes the masters and refreshes the f16 copies by a cast.
  Executor ex(fp16Tiny(0.05, 1024), 777);
  bigc::rt::safetensors::loadWeights(ex, w, dir + "/w.safetensors");
  auto wm = w.find("wte.weight")->toF32();
  EXPECT_EQ(ex.readF32(F_WTE_M), wm);
  for (size_t k = 0; k < wm.size(); ++k) ASSERT_EQ(static_cast<const uint16_t *>(ex.data(F_WTE_H))[k], f32ToF16(wm[k]));
  // Progress lines with the loss scale (without --quiet; smoke).
  EXPECT_EQ(run({model, "--steps", "1"}), 0);
}

TEST(RuntimeV2Executor, RefusesArenasBeyondPhysicalMemoryNamingSpaces) {
  Program p = offloadTiny(0.05, 1.0, 0.0);
  p.spaces[1].arenaBytes = int64_t(1) << 55;
  try {
    Executor ex(p, 1);
    FAIL();
  } catch (const UserError &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("host 36028797018963968 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("device "), std::string::npos) << m;
    EXPECT_NE(m.find("physical memory"), std::string::npos) << m;
  }
}

// A chunked update (bigc-offload-nvme --nvme-chunk): range copies of the state into chunk-sized
// staging tensors, one adamw per chunk (offset, count: its elements of the gradient, and of a
// whole half) and range copies back, equal the whole update bit for bit; the weight's gradient is
// captured under `weight`'s name at each chunk's offset. Out-of-range ranges are refused.
TEST(RuntimeV2Executor, ChunkedAdamWEqualsWholeUpdate) {
  auto build = [](bool chunked) {
    ProgramBuilder b(1, 1, 2);
    int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32),
            tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
    int64_t w = b.buffer("w", {2, 5}, "master", DType::F32, Init{"normal", 1.0});
    int64_t wh = b.buffer("w.half", {2, 5}, "param", DType::BF16, Init{"copy", 0, "w"});
    int64_t grad = b.buffer("w.grad", {2, 5}, "param", DType::F32, Init{"normal", 1.0});
    int64_t m = b.buffer("w.m", {2, 5}, "optimizer", DType::F32, Init{"normal", 0.1});
    int64_t v = b.buffer("w.v", {2, 5}, "optimizer", DType::F32, Init{"fill", 0, "", 0.01});
    int64_t loss = b.buffer("loss", {}, "activation");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
    b.inst("fill", {}, {loss}, {{"value", num(1)}});
    auto adam = adamAttrs(0.1, 0.0, 0.01);
    adam["write_half"] = num(1);
    if (!chunked) {
      b.inst("adamw", {w, grad, m, v}, {w, m, v, wh}, adam);
      return b.finish();
    }
    // Chunks of 6 and 4 elements through 6-element staging (two sets would take turns; one here).
    int64_t ws = b.buffer("w.io.c0", {6}, "param", DType::F32, Init{"zeros"});
    int64_t ms = b.buffer("w.m.io.c0", {6}, "param", DType::F32, Init{"zeros"});
    int64_t vs = b.buffer("w.v.io.c0", {6}, "param", DType::F32, Init{"zeros"});
    for (auto [off, count] : {std::pair<int, int>{0, 6}, {6, 4}}) {
      auto range = [&](int in, int out) {
        return std::map<std::string, Attr>{{"in_offset", num(in)}, {"out_offset", num(out)}, {"count", num(count)}};
      };
      for (auto [from, to] : {std::pair<int64_t, int64_t>{w, ws}, {m, ms}, {v, vs}})
        b.inst("copy", {from}, {to}, range(off, 0));
      auto a = adam;
      a["offset"] = num(off), a["count"] = num(count), a["weight"] = num(double(w));
      b.inst("adamw", {ws, grad, ms, vs}, {ws, ms, vs, wh}, a);
      for (auto [from, to] : {std::pair<int64_t, int64_t>{ws, w}, {ms, m}, {vs, v}})
        b.inst("copy", {from}, {to}, range(0, off));
    }
    return b.finish();
  };
  Program whole = build(false), chunked = build(true);
  ASSERT_EQ(validateError(whole), "");
  ASSERT_EQ(validateError(chunked), "");
  Executor a(whole, 5), c(chunked, 5);
  a.enableGradCapture();
  c.enableGradCapture();
  int32_t t = 0;
  for (int s = 0; s < 3; ++s) a.step(&t, &t), c.step(&t, &t);
  auto id = [](const Program &p, const std::string &name) {
    for (const Buffer &x : p.buffers)
      if (x.name == name) return x.id;
    return int64_t(-1);
  };
  for (const char *name : {"w", "w.m", "w.v", "w.half"}) {
    ASSERT_GE(id(chunked, name), 0) << name;
    EXPECT_EQ(a.readF32(id(whole, name)), c.readF32(id(chunked, name))) << name << " after 3 steps";
  }
  EXPECT_EQ(a.capturedGrads().at("w"), c.capturedGrads().at("w"));
  EXPECT_EQ(c.capturedGrads().count("w.io.c0"), 0u) << "captured under the weight's name";

  Program bad = chunked;
  bad.instructions[1].attrs["in_offset"] = num(5); // 5 + 6 > 10
  EXPECT_ERROR_HAS(validateError(bad), "instruction 1 (copy", "elements [5, 11) of an input of 10", "out of range");
  bad = chunked;
  bad.instructions[4].attrs["offset"] = num(6); // 6 + 6 > 10
  EXPECT_ERROR_HAS(validateError(bad), "instruction 4 (adamw", "elements [6, 12) of a gradient of 10");
  bad = chunked;
  bad.instructions[4].attrs.erase("count");
  EXPECT_ERROR_HAS(validateError(bad), "instruction 4 (adamw", "'offset'", "'count'", "go together");
}
