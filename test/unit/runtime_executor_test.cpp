// The executor on a hand-built tiny model, initialisation, grad capture, and `bigc run` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bigc/Runtime/data.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Runtime/safetensors.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using bigc::rt::testing::ProgramBuilder;
using bigc::rt::testing::TinyModel;
using TM = bigc::rt::testing::TinyModel;

namespace {

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch fixedBatch() {
  Batch b;
  for (int64_t i = 0; i < TM::B * TM::T; ++i) {
    b.tokens.push_back(int32_t((3 * i + 1) % TM::V));
    b.targets.push_back(int32_t((3 * i + 4) % TM::V));
  }
  return b;
}

// The tiny model's loss and gradients computed here in double, from the weights alone.
struct Reference {
  double loss = 0;
  std::vector<double> dwte, dw;
};
Reference reference(const float *wte, const float *w, const Batch &b) {
  const int64_t N = TM::B * TM::T, V = TM::V, C = TM::C;
  Reference r;
  r.dwte.assign(size_t(V * C), 0.0);
  r.dw.assign(size_t(C * V), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float *x = wte + b.tokens[size_t(n)] * C;
    std::vector<double> logits(static_cast<size_t>(V), 0.0);
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += double(x[c]) * w[c * V + v];
      logits[size_t(v)] = s;
      mx = std::max(mx, s);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - mx);
    int32_t t = b.targets[size_t(n)];
    r.loss += -(logits[size_t(t)] - mx - std::log(z)) / double(N);
    for (int64_t v = 0; v < V; ++v) {
      double d = (std::exp(logits[size_t(v)] - mx) / z - (v == t ? 1.0 : 0.0)) / double(N);
      for (int64_t c = 0; c < C; ++c) {
        r.dw[size_t(c * V + v)] += double(x[c]) * d;
        r.dwte[size_t(b.tokens[size_t(n)] * C + c)] += d * w[c * V + v];
      }
    }
  }
  return r;
}

std::string runError(Executor &ex, const Batch &b) {
  try {
    ex.step(b.tokens.data(), b.targets.data());
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(RuntimeExecutor, LossAndGradientsMatchReference) {
  Program p = TM::build(0.05);
  validateProgram(p, "tiny");
  Executor ex(p, 1337);
  ex.enableGradCapture();
  Batch b = fixedBatch();
  std::vector<float> wte(ex.f32(TM::WTE), ex.f32(TM::WTE) + TM::V * TM::C);
  std::vector<float> w(ex.f32(TM::W), ex.f32(TM::W) + TM::C * TM::V);
  Reference ref = reference(wte.data(), w.data(), b);

  float loss = ex.step(b.tokens.data(), b.targets.data());
  EXPECT_EQ(ex.stepCount(), 1);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::max(1.0, ref.loss));
  const auto &grads = ex.capturedGrads();
  ASSERT_EQ(grads.size(), 2u);
  const auto &gw = grads.at("head.weight");
  const auto &gwte = grads.at("wte.weight");
  double sq = 0;
  for (size_t i = 0; i < gw.size(); ++i) {
    EXPECT_NEAR(gw[i], ref.dw[i], 1e-5) << i;
    sq += ref.dw[i] * ref.dw[i];
  }
  for (size_t i = 0; i < gwte.size(); ++i) {
    EXPECT_NEAR(gwte[i], ref.dwte[i], 1e-5) << i;
    sq += ref.dwte[i] * ref.dwte[i];
  }
  EXPECT_NEAR(*ex.f32(TM::NORM), std::sqrt(sq), 1e-5);

  // AdamW at t = 1 without clipping or decay: param -= lr * g / (|g| + eps).
  const float *w1 = ex.f32(TM::W);
  for (size_t i = 0; i < gw.size(); ++i) {
    double g = gw[i];
    double want = double(w[i]) - 0.05 * g / (std::fabs(g) + 1e-8);
    EXPECT_NEAR(w1[i], want, 1e-5) << i;
  }
}

TEST(RuntimeExecutor, LossFallsOverSteps) {
  Executor ex(TM::build(0.05), 7);
  Batch b = fixedBatch();
  float first = ex.step(b.tokens.data(), b.targets.data());
  float last = first;
  for (int s = 0; s < 60; ++s) last = ex.step(b.tokens.data(), b.targets.data());
  EXPECT_EQ(ex.stepCount(), 61);
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

TEST(RuntimeExecutor, ClippingAndWeightDecay) {
  // With max_norm tiny the update is scaled but Adam normalises it away except through eps; with
  // weight decay a zero-gradient parameter shrinks by (1 - lr·wd).
  Program p = TM::build(0.1, 1e-3, 0.5);
  Executor ex(p, 3);
  Batch b = fixedBatch();
  for (auto &t : b.tokens)
    if (t == 7) t = 0;
  // Row of wte for a token not in the batch gets zero gradient: only decay applies.
  std::vector<bool> used(TM::V, false);
  for (int32_t t : b.tokens) used[size_t(t)] = true;
  int64_t unused = -1;
  for (int64_t v = 0; v < TM::V; ++v)
    if (!used[size_t(v)]) unused = v;
  ASSERT_GE(unused, 0);
  float before = ex.f32(TM::WTE)[unused * TM::C];
  ex.step(b.tokens.data(), b.targets.data());
  EXPECT_NEAR(ex.f32(TM::WTE)[unused * TM::C], before * (1 - 0.1 * 0.5), 1e-6);
}

TEST(RuntimeExecutor, BadTokenIsAUserErrorNamingStepAndLoc) {
  Executor ex(TM::build(), 1);
  Batch b = fixedBatch();
  ex.step(b.tokens.data(), b.targets.data());
  b.tokens[5] = 99;
  std::string m = runError(ex, b);
  EXPECT_NE(m.find("step 2"), std::string::npos) << m;
  EXPECT_NE(m.find("test.mlir:1:3"), std::string::npos) << m;
  EXPECT_NE(m.find("99"), std::string::npos) << m;
  b.tokens[5] = 1;
  b.targets[2] = -1;
  m = runError(ex, b);
  EXPECT_NE(m.find("cross_entropy"), std::string::npos) << m;
}

// A padded table (bigc-pad-vocab): the embedding's `classes` bounds the token ids, the padding rows
// are no tokens (the data loader refuses them first; this is the kernel's own check).
TEST(RuntimeExecutor, TokenInAPaddedTablesPaddingIsAUserError) {
  Program p = TM::build();
  p.version = 4;
  for (auto &ins : p.instructions)
    if (ins.op == "embedding" || ins.op == "embedding_grad") ins.attrs["classes"].num = double(TM::V - 2);
  validateProgram(p, "padded");
  Executor ex(p, 1);
  Batch b = fixedBatch();
  for (auto &t : b.tokens) t %= int32_t(TM::V - 2);
  for (auto &t : b.targets) t %= int32_t(TM::V - 2);
  ex.step(b.tokens.data(), b.targets.data());
  b.tokens[5] = int32_t(TM::V - 1); // a row of the table, but of its padding
  std::string m = runError(ex, b);
  EXPECT_NE(m.find(std::to_string(TM::V - 1)), std::string::npos) << m;
  EXPECT_NE(m.find("[0, " + std::to_string(TM::V - 2) + ")"), std::string::npos) << m;
  // Attribute `classes` needs format version 4.
  p.version = 3;
  try {
    validateProgram(p, "v3");
    FAIL() << "classes accepted in a version-3 program";
  } catch (const UserError &e) {
    EXPECT_NE(std::string(e.what()).find("needs program format version 4"), std::string::npos) << e.what();
  }
}

TEST(RuntimeExecutor, InitIsDeterministicAndIndependentOfBufferOrder) {
  Program p = TM::build();
  Executor a(p, 42), b2(p, 42), c(p, 43);
  const int64_t n = TM::V * TM::C;
  EXPECT_EQ(0, std::memcmp(a.f32(TM::WTE), b2.f32(TM::WTE), size_t(n) * 4));
  EXPECT_NE(0, std::memcmp(a.f32(TM::WTE), c.f32(TM::WTE), size_t(n) * 4));
  EXPECT_NE(0, std::memcmp(a.f32(TM::WTE), a.f32(TM::W), size_t(n) * 4)) << "different names, different values";
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a.f32(TM::M0)[i], 0.0f);

  // The same parameter in a program with buffers in another order gets the same values.
  ProgramBuilder pb(1, 2, TM::V);
  int64_t w = pb.param("head.weight", {TM::C, TM::V}, 0.5);
  int64_t tok = pb.buffer("tokens", {1, 2}, "input", DType::I32);
  int64_t tgt = pb.buffer("targets", {1, 2}, "input", DType::I32);
  int64_t x = pb.buffer("x", {1, 2, TM::C}, "activation");
  int64_t wte = pb.param("wte.weight", {TM::V, TM::C}, 0.5);
  int64_t lg = pb.buffer("logits", {1, 2, TM::V}, "activation");
  int64_t loss = pb.buffer("loss", {}, "activation");
  pb.p.tokenInputs = {tok}, pb.p.targetInputs = {tgt}, pb.p.loss = loss;
  pb.inst("embedding", {wte, tok}, {x});
  pb.inst("matmul", {x, w}, {lg});
  pb.inst("cross_entropy", {lg, tgt}, {loss});
  Program q = pb.finish();
  validateProgram(q, "q");
  Executor d(q, 42);
  EXPECT_EQ(0, std::memcmp(a.f32(TM::WTE), d.f32(wte), size_t(n) * 4));
  EXPECT_EQ(0, std::memcmp(a.f32(TM::W), d.f32(w), size_t(n) * 4));

  // Statistics of a large draw.
  std::vector<float> big(200001);
  initNormal(big.data(), int64_t(big.size()), 0.02, 1337, "h.0.mlp.c_fc.weight");
  double s = 0, s2 = 0;
  for (float v : big) s += v, s2 += double(v) * v;
  double mean = s / double(big.size()), sd = std::sqrt(s2 / double(big.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 3e-4);
  EXPECT_NEAR(sd, 0.02, 3e-4);
  // Odd length: the prefix equals the even-length draw's prefix.
  std::vector<float> odd(5), even(6);
  initNormal(odd.data(), 5, 1.0, 9, "p");
  initNormal(even.data(), 6, 1.0, 9, "p");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(odd[size_t(i)], even[size_t(i)]);
}

// A padded vocabulary (bigc-pad-vocab, vocab_rows): the model's rows get the values the unpadded
// tensor gets, the padding rows zero; vocab_rows outside 1..rows is refused by the validator.
TEST(RuntimeExecutor, InitLeavesAPaddedVocabularysRowsZero) {
  Program p = TM::build();
  Executor a(p, 42);
  Program q = TM::build();
  const int64_t rows = TM::V - 3;
  q.buffers[size_t(TM::WTE)].vocabRows = rows;
  validateProgram(q, "padded");
  Executor b(q, 42);
  for (int64_t i = 0; i < TM::V * TM::C; ++i)
    ASSERT_EQ(b.f32(TM::WTE)[i], i < rows * TM::C ? a.f32(TM::WTE)[i] : 0.0f) << "element " << i;
  EXPECT_EQ(q.parameterCount(), p.parameterCount() - 3 * TM::C);
  for (int64_t bad : {int64_t(-1), TM::V + 1}) {
    Program r = TM::build();
    r.buffers[size_t(TM::WTE)].vocabRows = bad;
    try {
      validateProgram(r, "r");
      FAIL() << "vocab_rows " << bad << " accepted";
    } catch (const UserError &e) {
      EXPECT_NE(std::string(e.what()).find("vocab_rows " + std::to_string(bad) + " must be in 1.."), std::string::npos)
          << e.what();
    }
  }
}

TEST(RuntimeExecutor, ReshapeInPlaceAndCopy) {
  // The same program with x2/dl2 aliased onto x/dlogits (free reshape) computes the same loss.
  Program a = TM::build(0.05);
  ProgramBuilder pb(TM::B, TM::T, TM::V);
  pb.p = a;
  Program b = pb.finish({{TM::X2, TM::X}, {TM::DL2, TM::DLOGITS}});
  validateProgram(b, "aliased");
  Executor ea(a, 5), eb(b, 5);
  Batch bt = fixedBatch();
  for (int s = 0; s < 3; ++s) {
    float la = ea.step(bt.tokens.data(), bt.targets.data());
    float lb = eb.step(bt.tokens.data(), bt.targets.data());
    EXPECT_EQ(la, lb);
  }
  EXPECT_LT(eb.arenaBytes().at("device"), ea.arenaBytes().at("device"));
}

// The memory the executor reports is measured (the arena pages the steps touched), not the plan
// copied: an arena planned 8 MiB larger than anything placed in it shows the untouched pages, and
// the pages the buffers use are all counted.
TEST(RuntimeExecutor, MeasuredBytesAreTheTouchedPagesOfTheArena) {
  Program p = TM::build(0.05);
  const int64_t used = p.spaces[0].arenaBytes;
  p.spaces[0].arenaBytes = used + (int64_t(8) << 20);
  Executor ex(p, 7);
  Batch b = fixedBatch();
  ex.step(b.tokens.data(), b.targets.data());
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t touched = ex.measuredBytes().at("device");
  EXPECT_GE(touched, used / page * page) << "every page a buffer lives in was written";
  EXPECT_LE(touched, (used + page - 1) / page * page + page) << "the untouched 8 MiB are not counted";
  EXPECT_LT(touched, p.spaces[0].arenaBytes);
}

TEST(RuntimeExecutor, RefusesArenaLargerThanMemory) {
  Program p = TM::build();
  p.spaces[0].arenaBytes = int64_t(1) << 60;
  try {
    Executor ex(p, 1);
    FAIL();
  } catch (const UserError &e) {
    EXPECT_NE(std::string(e.what()).find("device 1152921504606846976 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("physical memory"), std::string::npos) << e.what();
  }
}

// ----- bigc run end to end (runMain)

namespace {
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

TEST(RuntimeRun, TrainsLogsSavesAndLoads) {
  std::string dir = bigc::rt::testing::tempDir();
  std::string model = dir + "/tiny.bigc";
  writeFileAtomic(model, serializeProgram(TM::build(0.05)));

  ASSERT_EQ(run({model, "--steps", "20", "--log", dir + "/log.jsonl", "--save-weights", dir + "/w.safetensors",
                 "--dump-grads", dir + "/g.safetensors", "--quiet", "--threads", "1"}),
            0);
  std::istringstream log(slurp(dir + "/log.jsonl"));
  std::string line;
  std::vector<double> losses;
  while (std::getline(log, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int64_t>(), int64_t(losses.size()) + 1);
    EXPECT_TRUE(j["tokens_per_s"].is_number());
    EXPECT_TRUE(j["elapsed_s"].is_number());
    EXPECT_EQ(j["peak_bytes"]["device"].get<int64_t>(), TM::build().spaces[0].arenaBytes);
    losses.push_back(j["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 20u);
  EXPECT_LT(losses.back(), losses.front());
  auto w = bigc::rt::safetensors::read(dir + "/w.safetensors");
  ASSERT_EQ(w.tensors.size(), 2u);
  EXPECT_NE(w.find("wte.weight"), nullptr);
  auto g = bigc::rt::safetensors::read(dir + "/g.safetensors");
  ASSERT_NE(g.find("head.weight"), nullptr);
  EXPECT_EQ(g.find("head.weight")->shape, (std::vector<int64_t>{TM::C, TM::V}));

  // --steps 0 --save-weights writes the initial weights: those of an executor with the same seed.
  ASSERT_EQ(run({model, "--steps", "0", "--save-weights", dir + "/init.safetensors", "--seed", "5"}), 0);
  Executor ex(TM::build(), 5);
  auto init = bigc::rt::safetensors::read(dir + "/init.safetensors");
  auto v = init.find("wte.weight")->toF32();
  EXPECT_EQ(0, std::memcmp(v.data(), ex.f32(TM::WTE), v.size() * 4));

  // Load the trained weights and continue: the loss starts near where it ended.
  ASSERT_EQ(
      run({model, "--steps", "1", "--load-weights", dir + "/w.safetensors", "--log", dir + "/log2.jsonl", "--quiet"}),
      0);
  auto j2 = nlohmann::json::parse(slurp(dir + "/log2.jsonl"));
  EXPECT_LT(j2["loss"].get<double>(), losses.front());

  // Real token data.
  std::vector<uint16_t> toks;
  for (int i = 0; i < 100; ++i) toks.push_back(uint16_t((i * 5) % TM::V));
  data::writeLlmcTokens(dir + "/t.bin", toks);
  EXPECT_EQ(run({model, "--steps", "3", "--data", dir + "/t.bin", "--quiet"}), 0);
}

TEST(RuntimeRun, UserErrorsExitOne) {
  std::string dir = bigc::rt::testing::tempDir();
  std::string model = dir + "/tiny.bigc";
  writeFileAtomic(model, serializeProgram(TM::build()));
  EXPECT_EQ(run({}), 1);
  EXPECT_EQ(run({dir + "/missing.bigc"}), 1);
  EXPECT_EQ(run({model, "--stpes", "3"}), 1);
  EXPECT_EQ(run({model, "--steps", "x"}), 1);
  if (!cudaDeviceVisible(nullptr)) {
    EXPECT_EQ(run({model, "--backend", "cuda"}), 1); // no GPU: one clear error
  }
  EXPECT_EQ(run({model, "--backend", "tpu"}), 1);
  EXPECT_EQ(run({model, "--checkpoint-dir", dir, "--checkpoint-every", "0"}), 1);
  EXPECT_EQ(run({model, "--checkpoint-every", "2"}), 1); // needs --checkpoint-dir
  EXPECT_EQ(run({model, "--resume"}), 1);
  EXPECT_EQ(run({model, "--data", dir + "/none.bin"}), 1);
  EXPECT_EQ(run({model, "--save-weights", dir + "/no/dir/w.safetensors"}), 1);
  EXPECT_EQ(run({model, "--steps", "0", "--dump-grads", dir + "/g.safetensors"}), 1);
  // A failing run leaves no output files behind, not even temporaries.
  std::vector<uint16_t> toks(100, 1);
  toks[50] = 300; // outside the vocabulary
  data::writeNanoGptTokens(dir + "/bad.bin", toks);
  EXPECT_EQ(run({model, "--data", dir + "/bad.bin", "--log", dir + "/l.jsonl", "--save-weights", dir + "/w.st"}), 1);
  EXPECT_FALSE(std::ifstream(dir + "/l.jsonl").good());
  EXPECT_FALSE(std::ifstream(dir + "/l.jsonl.tmp").good());
  EXPECT_FALSE(std::ifstream(dir + "/w.st").good());
  // Weights of another model.
  bigc::rt::safetensors::File f;
  float zero[4] = {0, 0, 0, 0};
  f.tensors.push_back(bigc::rt::safetensors::Tensor::fromF32("wte.weight", {2, 2}, zero));
  bigc::rt::safetensors::write(dir + "/other.safetensors", f);
  EXPECT_EQ(run({model, "--load-weights", dir + "/other.safetensors"}), 1);
  EXPECT_EQ(run({"--help"}), 0);
}
