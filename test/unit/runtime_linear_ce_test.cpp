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
