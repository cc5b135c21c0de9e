// The training pipeline's options, declared once (include/bigc/Passes/TrainOptions.h): each pass's
// own options (passes/Passes.td, for running a pass alone with bigc-opt) default to the table's
// defaults where they mean the same thing, so that a pass run alone does what `bigc compile` does
// without the flag. The exceptions are passes whose option turns the pass on (a pass run alone is
// asked to do its job): bigc-mixed-precision's precision (bf16; the table's fp32 means "not run"),
// bigc-offload's offload and params (cpu, device; the table's none), bigc-pad-vocab's multiple (64;
// the table's 0).
#include <gtest/gtest.h>

#include "bigc/Passes/Passes.h"
#include "bigc/Passes/TrainOptions.h"

using namespace mlir::bigc;

namespace {
// The table's entries by name: whether each has a compile flag (the table lists them once).
struct Names {
  std::vector<std::string> all, flags;
  template <typename T> void option(const OptionInfo &i, T &, const Check<T> &) {
    all.push_back(i.name);
    if (i.compileFlag) flags.push_back(i.name);
  }
};
struct DefaultsHold {
  std::vector<std::string> bad;
  template <typename T> void option(const OptionInfo &i, T &field, const Check<T> &check) {
    if (!check(field).empty()) bad.push_back(std::string(i.name) + ": " + check(field));
  }
};
} // namespace

TEST(TrainOptions, PassDefaultsAreTheTables) {
  const TrainPipelineConfig t;
  const BigcAutodiffOptions ad;
  EXPECT_EQ(ad.lr, t.adamw.lr);
  EXPECT_EQ(ad.beta1, t.adamw.beta1);
  EXPECT_EQ(ad.beta2, t.adamw.beta2);
  EXPECT_EQ(ad.eps, t.adamw.eps);
  EXPECT_EQ(ad.weightDecay, t.adamw.weightDecay);
  EXPECT_EQ(ad.gradClip, t.adamw.gradClip);
  EXPECT_EQ(ad.optimizerStates, toString(t.adamw.states));
  const BigcTensorParallelOptions tp;
  EXPECT_EQ(tp.tp, t.tp);
  EXPECT_EQ(tp.ranks, t.ranks);
  EXPECT_EQ(tp.sequenceParallel, t.sequenceParallel);
  const BigcShardOptions sh;
  EXPECT_EQ(sh.ranks, t.ranks);
  EXPECT_EQ(sh.zero, t.zero);
  EXPECT_EQ(sh.bucketMb, t.bucketMb);
  EXPECT_EQ(BigcGradAccumOptions().microBatches, t.microBatches);
  const BigcPipelineOptions pp;
  EXPECT_EQ(pp.stages, t.pp);
  EXPECT_EQ(pp.stage, t.ppStage);
  EXPECT_EQ(pp.schedule, toString(t.ppSchedule));
  EXPECT_EQ(pp.virtualStages, virtualStagesOf(t));
  EXPECT_EQ(pp.ranks, t.ranks);
  EXPECT_EQ(pp.tp, t.tp);
  const BigcRecomputeOptions rc;
  EXPECT_EQ(rc.policy, toString(t.recompute));
  EXPECT_EQ(rc.drop, t.recomputeDrop);
  const BigcMixedPrecisionOptions mp;
  EXPECT_EQ(mp.lossScale, t.lossScaleInit);
  EXPECT_EQ(mp.growthInterval, t.lossScaleGrowthInterval);
  EXPECT_EQ(BigcOffloadNvmeOptions().chunk, t.nvmeChunk); // was 0 here and 2^24 in bigc compile
  EXPECT_EQ(BigcScheduleOptions().prefetch, t.prefetch);
  EXPECT_EQ(BigcFuseLossOptions().chunk, t.lossChunk);
  const BigcPadVocabOptions pv;
  EXPECT_EQ(pv.tp, t.tp);
}

TEST(TrainOptions, EveryNameOnceAndChecksHold) {
  Names n;
  TrainPipelineConfig c;
  bindTrainOptions(n, c);
  std::set<std::string> seen(n.all.begin(), n.all.end());
  EXPECT_EQ(seen.size(), n.all.size()) << "a name declared twice";
  EXPECT_GE(n.all.size(), 30u);
  // The defaults pass their own checks.
  DefaultsHold d;
  bindTrainOptions(d, c);
  EXPECT_TRUE(d.bad.empty()) << d.bad.front();
}
