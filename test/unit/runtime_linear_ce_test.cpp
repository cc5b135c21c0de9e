// The fused LM head + loss statistics (bigc-fuse-loss's linear_ce_stats and its gradient) against a
// naive double-precision reference: the logits h @ op(w) formed whole, their log-sum-exp and target
// logit, the gradient of the logits as vocab_ce_stats_grad defines it, dh and dw by the chain rule.
#include "bigc/Runtime/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace bigc::rt;

namespace {

struct Case {
  int64_t N, C, V, chunk;
  bool tb;
  int64_t offset, vocab; // this rank's columns start at id `offset` of `vocab`
};

struct Ref {
  std::vector<double> stats, dh, dw;
};

// w [C,V] or [V,C] (tb); dstats given.
Ref reference(const Case &k, const std::vector<float> &h, const std::vector<float> &w, const std::vector<int32_t> &t,
              const std::vector<float> &dstats) {
  auto W = [&](int64_t c, int64_t v) { return double(k.tb ? w[size_t(v * k.C + c)] : w[size_t(c * k.V + v)]); };
  Ref r;
  r.stats.assign(size_t(2 * k.N), 0.0);
  r.dh.assign(size_t(k.N * k.C), 0.0);
  r.dw.assign(size_t(k.C * k.V), 0.0); // in w's layout
  std::vector<double> l(size_t(k.V)), dl(size_t(k.V));
  for (int64_t n = 0; n < k.N; ++n) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < k.V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < k.C; ++c) s += double(h[size_t(n * k.C + c)]) * W(c, v);
      l[size_t(v)] = s, mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < k.V; ++v) sum += std::exp(l[size_t(v)] - mx);
    const double lse = std::log(sum) + mx;
    const int64_t tt = t[size_t(n)] - k.offset;
    r.stats[size_t(2 * n)] = lse;
    r.stats[size_t(2 * n + 1)] = tt >= 0 && tt < k.V ? l[size_t(tt)] : 0.0;
    for (int64_t v = 0; v < k.V; ++v)
      dl[size_t(v)] = double(dstats[size_t(2 * n)]) * std::exp(l[size_t(v)] - lse) +
                      (v == tt ? double(dstats[size_t(2 * n + 1)]) : 0.0);
    for (int64_t c = 0; c < k.C; ++c)
      for (int64_t v = 0; v < k.V; ++v) {
        r.dh[size_t(n * k.C + c)] += dl[size_t(v)] * W(c, v);
        r.dw[size_t(k.tb ? v * k.C + c : c * k.V + v)] += dl[size_t(v)] * double(h[size_t(n * k.C + c)]);
      }
  }
  return r;
}

double maxRelErr(const std::vector<float> &got, const std::vector<double> &want) {
  double scale = 0, err = 0;
  for (double x : want) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(double(got[i]) - want[i]));
  return err / std::max(scale, 1e-30);
}

void check(const Case &k) {
  std::mt19937 rng(uint32_t(k.N * 131 + k.V * 7 + k.chunk));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> h(size_t(k.N * k.C)), w(size_t(k.C * k.V)), dstats(size_t(2 * k.N));
  for (float &x : h) x = nd(rng);
  for (float &x : w) x = 0.3f * nd(rng);
  for (float &x : dstats) x = nd(rng);
  std::vector<int32_t> t(size_t(k.N));
  for (int32_t &x : t) x = int32_t(rng() % uint32_t(k.vocab)); // some outside this rank's columns
  const Ref want = reference(k, h, w, t, dstats);

  std::vector<float> stats(size_t(2 * k.N)), ws(size_t(k.N * std::min(k.chunk, k.V) + 2 * k.N));
  int64_t bad = 7;
  cpu::linearCeStats(h.data(), w.data(), t.data(), stats.data(), ws.data(), k.N, k.C, k.V, k.chunk, k.tb, k.offset,
                     k.vocab, &bad);
  EXPECT_EQ(bad, -1);
  std::vector<float> dh(h.size()), dw(w.size()), ws2(size_t(k.N * std::min(k.chunk, k.V) + k.N * k.C));
  cpu::linearCeStatsGrad(dstats.data(), h.data(), w.data(), t.data(), stats.data(), dh.data(), dw.data(), ws2.data(),
                         k.N, k.C, k.V, k.chunk, k.tb, k.offset);
  // Measured over these cases (fp32 GEMMs and exp against double), relative to each tensor's
  // largest element: stats <= 4.7e-8, dh <= 4.2e-7, dw <= 1.4e-7; the bounds are 4x those.
  EXPECT_LT(maxRelErr(stats, want.stats), 2e-7) << "stats";
  EXPECT_LT(maxRelErr(dh, want.dh), 1.7e-6) << "dh";
  EXPECT_LT(maxRelErr(dw, want.dw), 6e-7) << "dw";
}

} // namespace

TEST(LinearCrossEntropy, WholeVocabularyInOneChunk) { check({6, 16, 40, 64, true, 0, 40}); }
TEST(LinearCrossEntropy, ChunksThatDoNotDivideTheVocabulary) { check({9, 24, 101, 17, true, 0, 101}); }
TEST(LinearCrossEntropy, UntransposedWeight) { check({8, 12, 70, 32, false, 0, 70}); }
TEST(LinearCrossEntropy, ChunkOfOneColumn) { check({5, 8, 13, 1, false, 0, 13}); }
TEST(LinearCrossEntropy, TensorRanksColumnsOfALargerVocabulary) {
  check({12, 16, 48, 20, true, 48, 192}); // rank 1 of 4: ids [48, 96); most targets elsewhere
  check({12, 16, 48, 20, false, 144, 192});
}

TEST(LinearCrossEntropy, TargetOutsideTheVocabularyIsReported) {
  std::vector<float> h(2 * 4, 0.5f), w(4 * 8, 0.1f), stats(4), ws(2 * 8 + 4);
  std::vector<int32_t> t = {3, 8};
  int64_t bad = -1;
  cpu::linearCeStats(h.data(), w.data(), t.data(), stats.data(), ws.data(), 2, 4, 8, 8, true, 0, 8, &bad);
  EXPECT_EQ(bad, 1);
}

// A padded vocabulary (bigc-pad-vocab): rows of `ld` logits of which the first V are classes. The
// loss, the statistics and the gradients of the classes are those of the unpadded rows bit for bit
// (the same arithmetic on the same values), whatever the padding columns hold; their gradient is 0.
TEST(PaddedVocabulary, ColumnsPastTheClassesAreOutsideTheLoss) {
  const int64_t N = 7, V = 37, ld = 48, offset = 37, vocab = 96; // (stats: rank 1's columns of a larger one)
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> padded(size_t(N * ld)), compact(size_t(N * V));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < ld; ++j) {
      const float x = j < V ? nd(g) : 100.0f + float(j); // padding: large, would dominate a softmax
      padded[size_t(n * ld + j)] = x;
      if (j < V) compact[size_t(n * V + j)] = x;
    }
  std::vector<int32_t> t(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) t[size_t(n)] = int32_t((n * 11) % V);
  int64_t bad = -1;
  const float lp = cpu::crossEntropy(padded.data(), t.data(), N, V, &bad, ld);
  EXPECT_EQ(bad, -1);
  EXPECT_EQ(lp, cpu::crossEntropy(compact.data(), t.data(), N, V, &bad));
  std::vector<float> dp(size_t(N * ld), -1.0f), dc(size_t(N * V));
  cpu::crossEntropyGrad(padded.data(), t.data(), 0.7f, dp.data(), N, V, ld);
  cpu::crossEntropyGrad(compact.data(), t.data(), 0.7f, dc.data(), N, V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < ld; ++j)
      ASSERT_EQ(dp[size_t(n * ld + j)], j < V ? dc[size_t(n * V + j)] : 0.0f) << "row " << n << " column " << j;
  // A target in the padding is outside the vocabulary.
  std::vector<int32_t> tb = t;
  tb[3] = int32_t(V + 2);
  cpu::crossEntropy(padded.data(), tb.data(), N, V, &bad, ld);
  EXPECT_EQ(bad, 3);
  // The vocabulary-parallel statistics and their gradient, this rank's ids [37, 74) of 96.
  std::vector<int32_t> tv(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) // a third of the targets another rank's
    tv[size_t(n)] = int32_t(n % 3 == 0 ? (n * 7) % offset : offset + (n * 5) % V);
  std::vector<float> sp(size_t(2 * N)), sc(size_t(2 * N));
  cpu::vocabCeStats(padded.data(), tv.data(), sp.data(), N, V, offset, vocab, &bad, ld);
  EXPECT_EQ(bad, -1);
  cpu::vocabCeStats(compact.data(), tv.data(), sc.data(), N, V, offset, vocab, &bad);
  EXPECT_EQ(sp, sc);
  std::vector<float> ds(size_t(2 * N));
  for (auto &x : ds) x = nd(g);
  std::fill(dp.begin(), dp.end(), -1.0f);
  cpu::vocabCeStatsGrad(ds.data(), padded.data(), tv.data(), sp.data(), dp.data(), N, V, offset, ld);
  cpu::vocabCeStatsGrad(ds.data(), compact.data(), tv.data(), sc.data(), dc.data(), N, V, offset);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < ld; ++j)
      ASSERT_EQ(dp[size_t(n * ld + j)], j < V ? dc[size_t(n * V + j)] : 0.0f) << "row " << n << " column " << j;
  // A rank holding no class (V = 0 of its columns): log-sum-exp -inf, target 0, gradient 0.
  cpu::vocabCeStats(padded.data(), tv.data(), sp.data(), N, 0, 96, vocab, &bad, ld);
  EXPECT_TRUE(std::isinf(sp[0]) && sp[0] < 0 && sp[1] == 0.0f);
}
