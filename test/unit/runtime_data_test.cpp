// Token files (nanoGPT, llm.c), batch order, synthetic data, `bigc data encode`.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "bigc/Runtime/data.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/run_command.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using namespace bigc::rt::data;

namespace {
std::vector<uint16_t> iota(int n) {
  std::vector<uint16_t> v;
  for (int i = 0; i < n; ++i) v.push_back(uint16_t(i));
  return v;
}
std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(RuntimeData, BothFormatsAreDetected) {
  std::string dir = bigc::rt::testing::tempDir();
  writeLlmcTokens(dir + "/a.bin", iota(50));
  writeNanoGptTokens(dir + "/b.bin", iota(50));
  TokenFile a(dir + "/a.bin"), b(dir + "/b.bin");
  EXPECT_STREQ(a.format(), "llm.c");
  EXPECT_STREQ(b.format(), "nanoGPT");
  ASSERT_EQ(a.size(), 50);
  ASSERT_EQ(b.size(), 50);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a[i], i);
    EXPECT_EQ(b[i], i);
  }
  // The llm.c layout, byte for byte: 256 int32 header, then uint16.
  std::ifstream f(dir + "/a.bin", std::ios::binary);
  int32_t header[256];
  f.read(reinterpret_cast<char *>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 50);
}

TEST(RuntimeData, BatchesInLlmcOrderWithWrapAround) {
  std::string dir = bigc::rt::testing::tempDir();
  writeLlmcTokens(dir + "/t.bin", iota(20));
  const int64_t B = 2, T = 3; // B·T = 6
  FileTokenSource src(dir + "/t.bin", B, T, 256);
  std::vector<int32_t> in(6), tg(6);
  // p = 0, 6, 12 fit (12 + 6 + 1 = 19 <= 20); p = 18 does not: back to 0.
  for (int64_t p : {0, 6, 12, 0, 6}) {
    src.next(in.data(), tg.data());
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(in[size_t(i)], p + i) << "p " << p;
      EXPECT_EQ(tg[size_t(i)], p + i + 1) << "p " << p;
    }
  }
  // Exactly B·T+1 tokens: every batch is the same.
  writeNanoGptTokens(dir + "/e.bin", iota(7));
  FileTokenSource e(dir + "/e.bin", B, T, 256);
  for (int k = 0; k < 3; ++k) {
    e.next(in.data(), tg.data());
    EXPECT_EQ(in[0], 0);
    EXPECT_EQ(tg[5], 6);
  }
}

TEST(RuntimeData, Errors) {
  std::string dir = bigc::rt::testing::tempDir();
  writeNanoGptTokens(dir + "/short.bin", iota(6));
  std::string m = errorOf([&] { FileTokenSource s(dir + "/short.bin", 2, 3, 256); });
  EXPECT_NE(m.find("data file " + dir + "/short.bin has 6 tokens; one batch of 2×3 needs B·T+1 = 7"), std::string::npos)
      << m;

  auto toks = iota(40);
  toks[17] = 300;
  writeLlmcTokens(dir + "/big.bin", toks);
  m = errorOf([&] { FileTokenSource s(dir + "/big.bin", 2, 3, 256); });
  EXPECT_NE(m.find("big.bin"), std::string::npos) << m;
  EXPECT_NE(m.find("token 300 at position 17"), std::string::npos) << m;

  m = errorOf([&] { TokenFile f(dir + "/nonexistent.bin"); });
  EXPECT_NE(m.find("nonexistent.bin: cannot open"), std::string::npos) << m;

  {
    std::ofstream f(dir + "/odd.bin", std::ios::binary);
    f << "abc";
  }
  m = errorOf([&] { TokenFile f(dir + "/odd.bin"); });
  EXPECT_NE(m.find("odd size"), std::string::npos) << m;

  // llm.c header announcing more tokens than the file holds.
  writeLlmcTokens(dir + "/trunc.bin", iota(40));
  {
    std::ifstream in(dir + "/trunc.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(dir + "/trunc.bin", std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), long(bytes.size() - 10));
  }
  m = errorOf([&] { TokenFile f(dir + "/trunc.bin"); });
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;

  // Empty file.
  { std::ofstream f(dir + "/empty.bin"); }
  m = errorOf([&] { FileTokenSource s(dir + "/empty.bin", 1, 1, 256); });
  EXPECT_NE(m.find("has 0 tokens"), std::string::npos) << m;
}

TEST(RuntimeData, SyntheticIsDeterministicAndLearnable) {
  const int64_t B = 4, T = 64, V = 64;
  SyntheticTokenSource a(B, T, V, 1), b(B, T, V, 1), c(B, T, V, 2);
  std::vector<int32_t> ia(B * T), ta(B * T), ib(B * T), tb(B * T), ic(B * T), tc(B * T);
  std::map<int32_t, std::map<int32_t, int>> next;
  bool differs = false;
  int32_t prevLast = -1;
  for (int k = 0; k < 50; ++k) {
    a.next(ia.data(), ta.data());
    b.next(ib.data(), tb.data());
    c.next(ic.data(), tc.data());
    EXPECT_EQ(ia, ib);
    differs |= ia != ic;
    if (prevLast >= 0) {
      EXPECT_EQ(ia[0], prevLast) << "the stream continues across batches";
    }
    prevLast = ta.back();
    for (size_t i = 0; i < ia.size(); ++i) {
      ASSERT_GE(ia[i], 0);
      ASSERT_LT(ia[i], V);
      if (i + 1 < ia.size()) {
        EXPECT_EQ(ta[i], ia[i + 1]);
      }
      next[ia[i]][ta[i]]++;
    }
  }
  EXPECT_TRUE(differs);
  // Each token has at most 3 successors; the empirical conditional entropy is far below ln V.
  double h = 0, total = 0;
  for (auto &[tok, succ] : next) {
    EXPECT_LE(succ.size(), 3u);
    double n = 0;
    for (auto &[s, cnt] : succ) n += cnt;
    for (auto &[s, cnt] : succ) h -= cnt * std::log(cnt / n);
    total += n;
  }
  h /= total;
  EXPECT_LT(h, 1.2);
  EXPECT_NEAR(a.entropy(), 0.898, 0.05);
  EXPECT_LT(a.entropy(), 0.5 * std::log(double(V)));
}

TEST(RuntimeData, EncodeCommand) {
  std::string dir = bigc::rt::testing::tempDir();
  {
    std::ofstream f(dir + "/in.txt", std::ios::binary);
    f << "hello\n\xff";
  }
  std::vector<std::string> args = {"bigc", "data", "encode", dir + "/in.txt", "-o", dir + "/out.bin"};
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  ASSERT_EQ(dataMain(int(argv.size()), argv.data()), 0);
  TokenFile t(dir + "/out.bin");
  EXPECT_STREQ(t.format(), "llm.c");
  ASSERT_EQ(t.size(), 7);
  EXPECT_EQ(t[0], 'h');
  EXPECT_EQ(t[5], '\n');
  EXPECT_EQ(t[6], 255);

  std::vector<std::string> bad = {"bigc", "data", "encode", dir + "/missing.txt", "-o", dir + "/x.bin"};
  argv.clear();
  for (auto &a : bad) argv.push_back(a.data());
  EXPECT_EQ(dataMain(int(argv.size()), argv.data()), 1);
  std::vector<std::string> noOut = {"bigc", "data", "encode", dir + "/in.txt"};
  argv.clear();
  for (auto &a : noOut) argv.push_back(a.data());
  EXPECT_EQ(dataMain(int(argv.size()), argv.data()), 1);
  std::vector<std::string> sub = {"bigc", "data", "decode"};
  argv.clear();
  for (auto &a : sub) argv.push_back(a.data());
  EXPECT_EQ(dataMain(int(argv.size()), argv.data()), 1);
}
