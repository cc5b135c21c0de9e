// Tests of the arena planner (include/bigc/Plan/arena_planner.h), in the style of TFLite's
// arena planner and XLA's heap simulator tests: tiny literal interval sets with the expected
// offsets written out and the placement trace explained, then a randomized stress test.
//
// Reminder of the algorithm: buffers are placed by decreasing aligned size (ties: earlier first,
// then longer, then lower index). Each goes into the smallest free gap among the already placed
// buffers whose live intervals intersect its own, or above the highest of them.
#include <cstdio>
#include "bigc/Plan/arena_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

using bigc::plan::alignUp;
using bigc::plan::ArenaPlan;
using bigc::plan::checkPlan;
using bigc::plan::Interval;
using bigc::plan::lowerBound;
using bigc::plan::planArena;

namespace {

Interval iv(int64_t first, int64_t last, int64_t bytes) {
  Interval i;
  i.first = first;
  i.last = last;
  i.bytes = bytes;
  return i;
}

// Independent O(n^2) oracle for checkPlan.
bool bruteForceValid(const std::vector<Interval> &ivs, const ArenaPlan &p, int64_t alignment) {
  for (size_t i = 0; i < ivs.size(); ++i) {
    if (p.offsets[i] % alignment != 0 || p.offsets[i] < 0) return false;
    if (ivs[i].bytes > 0 && p.offsets[i] + ivs[i].bytes > p.arenaBytes) return false;
    for (size_t j = i + 1; j < ivs.size(); ++j) {
      if (ivs[i].bytes == 0 || ivs[j].bytes == 0) continue;
      bool time = ivs[i].first <= ivs[j].last && ivs[j].first <= ivs[i].last;
      bool mem = p.offsets[i] < p.offsets[j] + ivs[j].bytes && p.offsets[j] < p.offsets[i] + ivs[i].bytes;
      if (time && mem) return false;
    }
  }
  return true;
}

} // namespace

TEST(ArenaPlanner, AlignUp) {
  EXPECT_EQ(alignUp(0, 64), 0);
  EXPECT_EQ(alignUp(1, 64), 64);
  EXPECT_EQ(alignUp(64, 64), 64);
  EXPECT_EQ(alignUp(65, 64), 128);
  EXPECT_EQ(alignUp(7, 1), 7);
}

TEST(ArenaPlanner, Empty) {
  ArenaPlan p = planArena({});
  EXPECT_TRUE(p.offsets.empty());
  EXPECT_EQ(p.arenaBytes, 0);
  EXPECT_EQ(p.lowerBoundBytes, 0);
  EXPECT_EQ(checkPlan({}, p), "");
}

// A chain x0 -> x1 -> x2 -> x3, each value read by the next instruction (alignment 1).
//   0: [0,1] 100   1: [1,2] 200   2: [2,3] 100   3: [3,4] 50
// Order by size: 1 (200), 0 (100, starts first), 2 (100), 3 (50).
//   place 1: nothing placed                      -> 0    [0,200)
//   place 0: overlaps 1 at t=1; no gap below 1   -> 200  [200,300)
//   place 2: overlaps 1 at t=2 (0 died at t=1)   -> 200  [200,300)  reuses 0's bytes
//   place 3: overlaps 2 only; gap [0,200) holds  -> 0    [0,50)     reuses 1's bytes
// Live bytes per instruction: 100, 300, 300, 150, 50 -> lower bound 300 = arena.
TEST(ArenaPlanner, ChainReusesDeadBuffers) {
  std::vector<Interval> ivs = {iv(0, 1, 100), iv(1, 2, 200), iv(2, 3, 100), iv(3, 4, 50)};
  ArenaPlan p = planArena(ivs, 1);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{200, 0, 200, 0}));
  EXPECT_EQ(p.arenaBytes, 300);
  EXPECT_EQ(p.lowerBoundBytes, 300);
  EXPECT_EQ(checkPlan(ivs, p, 1), "");
}

// Best fit, not first fit (alignment 1). Two short-lived buffers S1, S2 leave holes of 150 and
// 130 bytes between long-lived ones once they die at t=2:
//   0 L1 [0,9] 200 -> 0    [0,200)
//   1 S1 [0,2] 150 -> 200  [200,350)   above L1
//   2 M1 [0,9] 140 -> 350  [350,490)   above S1
//   3 S2 [0,2] 130 -> 490  [490,620)
//   4 M2 [0,9] 120 -> 620  [620,740)
//   5 E  [5,9] 100: live with L1, M1, M2; holes [200,350) (150) and [490,620) (130);
//                   the smallest that holds it is 130      -> 490  [490,590)  (first fit: 200)
//   6 F  [6,9]  40: holes [200,350) (150) and [590,620) (30, too small)  -> 200  [200,240)
//   7 G  [7,9]  20: holes [240,350) (110) and [590,620) (30)             -> 590  [590,610)
// Lower bound: at t=0..2, 200+150+140+130+120 = 740 = arena.
TEST(ArenaPlanner, BestFitPicksSmallestGap) {
  std::vector<Interval> ivs = {iv(0, 9, 200), iv(0, 2, 150), iv(0, 9, 140), iv(0, 2, 130),
                               iv(0, 9, 120), iv(5, 9, 100), iv(6, 9, 40),  iv(7, 9, 20)};
  ArenaPlan p = planArena(ivs, 1);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 200, 350, 490, 620, 490, 200, 590}));
  EXPECT_EQ(p.arenaBytes, 740);
  EXPECT_EQ(p.lowerBoundBytes, 740);
  EXPECT_EQ(checkPlan(ivs, p, 1), "");
}

// Ties on size: earlier first, then longer (alignment 64).
//   0: [2,5] 64   1: [0,3] 64   2: [0,6] 64
// Order: 2 (starts at 0, longest), 1 (starts at 0), 0 (starts at 2).
//   place 2 -> 0;  place 1 (overlaps 2) -> 64;  place 0 (overlaps 2 and 1) -> 128.
TEST(ArenaPlanner, TiesEarlierThenLonger) {
  std::vector<Interval> ivs = {iv(2, 5, 64), iv(0, 3, 64), iv(0, 6, 64)};
  ArenaPlan p = planArena(ivs);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{128, 64, 0}));
  EXPECT_EQ(p.arenaBytes, 192);
  EXPECT_EQ(p.lowerBoundBytes, 192);
  EXPECT_EQ(checkPlan(ivs, p), "");
}

// Sizes are rounded up to the alignment before ordering and placing (alignment 64).
//   0: [0,1] 1 byte (64 aligned)  1: [0,1] 65 (128)  2: [1,2] 100 (128)
// Order: 1 (128, starts at 0), 2 (128, starts at 1), 0 (64).
//   place 1 -> 0 [0,128);  place 2 (overlaps 1 at t=1) -> 128 [128,256);
//   place 0 (overlaps 1 and 2)  -> 256 [256,320).
// Lower bound: t=0: 64+128, t=1: 64+128+128 = 320, t=2: 128.
TEST(ArenaPlanner, Alignment) {
  std::vector<Interval> ivs = {iv(0, 1, 1), iv(0, 1, 65), iv(1, 2, 100)};
  ArenaPlan p = planArena(ivs);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{256, 0, 128}));
  EXPECT_EQ(p.arenaBytes, 320);
  EXPECT_EQ(p.lowerBoundBytes, 320);
  EXPECT_EQ(checkPlan(ivs, p), "");
  for (int64_t o : p.offsets) EXPECT_EQ(o % 64, 0);
}

// Zero-size buffers occupy nothing: offset 0, not counted in the arena or the lower bound, and
// never in conflict.
TEST(ArenaPlanner, ZeroSizeBuffers) {
  std::vector<Interval> ivs = {iv(0, 5, 0), iv(0, 5, 64), iv(2, 3, 0)};
  ArenaPlan p = planArena(ivs);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(p.arenaBytes, 64);
  EXPECT_EQ(p.lowerBoundBytes, 64);
  EXPECT_EQ(checkPlan(ivs, p), "");

  std::vector<Interval> onlyZero = {iv(0, 1, 0), iv(0, 1, 0)};
  ArenaPlan z = planArena(onlyZero);
  EXPECT_EQ(z.arenaBytes, 0);
  EXPECT_EQ(z.lowerBoundBytes, 0);
  EXPECT_EQ(checkPlan(onlyZero, z), "");
}

// A buffer reuses the bytes of one that is not live at the same time, even when it is placed
// first (alignment 1):
//   0 A [0,3] 100   1 D [2,3] 95   2 B [0,1] 90   3 C [0,3] 80
// Order by size: A, D, B, C.
//   place A                                          -> 0    [0,100)
//   place D [2,3]: live with A                       -> 100  [100,195)
//   place B [0,1]: live with A only (D starts at 2)  -> 100  [100,190)  same bytes as D
//   place C [0,3]: live with A, B, D; no gap         -> 195  [195,275)
// Lower bound: t=0,1: 100+90+80 = 270; t=2,3: 100+95+80 = 275 = arena.
TEST(ArenaPlanner, SharedBytesAcrossTime) {
  std::vector<Interval> ivs = {iv(0, 3, 100), iv(2, 3, 95), iv(0, 1, 90), iv(0, 3, 80)};
  ArenaPlan p = planArena(ivs, 1);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 100, 100, 195}));
  EXPECT_EQ(p.arenaBytes, 275);
  EXPECT_EQ(p.lowerBoundBytes, 275);
  EXPECT_EQ(checkPlan(ivs, p, 1), "");
}

// Greedy is not optimal: the hole a dead buffer leaves gets split (alignment 1).
//   0 A [0,3] 100   1 B [0,1] 90   2 C [0,3] 50   3 D [2,3] 45   4 E [2,3] 46
// Order by size: A, B, C, E, D.
//   place A                                      -> 0    [0,100)
//   place B [0,1]: live with A                   -> 100  [100,190)
//   place C [0,3]: live with A, B                -> 190  [190,240)
//   place E [2,3]: live with A, C; hole [100,190) (90 bytes, B is dead)  -> 100  [100,146)
//   place D [2,3]: live with A, E, C; hole [146,190) is 44 < 45; above C -> 240  [240,285)
// Lower bound: t=0,1: 100+90+50 = 240; t=2,3: 100+50+45+46 = 241. Greedy needs 285; an optimal
// plan (A 0, C 100, B 150, E 150, D 196) needs 241.
TEST(ArenaPlanner, HoleTooSmall) {
  std::vector<Interval> ivs = {iv(0, 3, 100), iv(0, 1, 90), iv(0, 3, 50), iv(2, 3, 45), iv(2, 3, 46)};
  ArenaPlan p = planArena(ivs, 1);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 100, 190, 240, 100}));
  EXPECT_EQ(p.arenaBytes, 285);
  EXPECT_EQ(p.lowerBoundBytes, 241);
  EXPECT_EQ(checkPlan(ivs, p, 1), "");
}

TEST(ArenaPlanner, LowerBound) {
  EXPECT_EQ(lowerBound({}), 0);
  // Disjoint intervals never add up.
  EXPECT_EQ(lowerBound({iv(0, 1, 100), iv(2, 3, 200)}, 1), 200);
  // Inclusive ends: [0,2] and [2,4] are both live at instruction 2.
  EXPECT_EQ(lowerBound({iv(0, 2, 100), iv(2, 4, 200)}, 1), 300);
  // Nested intervals.
  EXPECT_EQ(lowerBound({iv(0, 10, 10), iv(2, 8, 20), iv(4, 6, 30), iv(9, 10, 35)}, 1), 60);
  // Aligned sizes: 3 buffers of 1 byte live together take 3 x 64.
  EXPECT_EQ(lowerBound({iv(0, 0, 1), iv(0, 0, 1), iv(0, 0, 1)}), 192);
  // Zero-size buffers count for nothing.
  EXPECT_EQ(lowerBound({iv(0, 0, 0), iv(0, 0, 64)}), 64);
}

TEST(ArenaPlanner, CheckPlanFindsConflicts) {
  std::vector<Interval> ivs = {iv(0, 3, 128), iv(2, 5, 128), iv(4, 6, 64)};
  ArenaPlan ok = planArena(ivs);
  ASSERT_EQ(checkPlan(ivs, ok), "");

  ArenaPlan overlap = ok;
  overlap.offsets[1] = overlap.offsets[0]; // 0 and 1 are both live at t=2,3
  std::string msg = checkPlan(ivs, overlap);
  EXPECT_NE(msg, "");
  EXPECT_NE(msg.find("buffers 0"), std::string::npos) << msg;

  ArenaPlan misaligned = ok;
  misaligned.offsets[2] += 8;
  EXPECT_NE(checkPlan(ivs, misaligned), "");

  ArenaPlan tooSmall = ok;
  tooSmall.arenaBytes = 64;
  EXPECT_NE(checkPlan(ivs, tooSmall), "");

  ArenaPlan wrongCount = ok;
  wrongCount.offsets.pop_back();
  EXPECT_NE(checkPlan(ivs, wrongCount), "");

  // Partial overlap in memory, disjoint in time: fine.
  std::vector<Interval> disjoint = {iv(0, 1, 128), iv(2, 3, 128)};
  ArenaPlan shared;
  shared.offsets = {0, 64};
  shared.arenaBytes = 192;
  EXPECT_EQ(checkPlan(disjoint, shared), "");
}

TEST(ArenaPlanner, InvalidIntervalsThrow) {
  EXPECT_THROW(planArena({iv(3, 2, 64)}), std::invalid_argument);
  EXPECT_THROW(planArena({iv(0, 2, -1)}), std::invalid_argument);
  EXPECT_THROW(lowerBound({iv(0, 1, 64)}, 0), std::invalid_argument);
}

// Many random sets: every plan is valid (checkPlan and an independent oracle agree), aligned, at
// least the lower bound, and a deliberately broken plan is caught.
TEST(ArenaPlanner, RandomizedStress) {
  std::mt19937_64 rng(12345);
  int broken = 0;
  for (int round = 0; round < 400; ++round) {
    const int64_t alignment = (round % 3 == 0) ? 1 : 64;
    const int n = 1 + int(rng() % 120);
    const int64_t horizon = 1 + int64_t(rng() % 60);
    std::vector<Interval> ivs;
    for (int i = 0; i < n; ++i) {
      int64_t a = int64_t(rng() % horizon), b = int64_t(rng() % horizon);
      if (a > b) std::swap(a, b);
      int64_t bytes;
      switch (rng() % 5) {
      case 0: bytes = 0; break;
      case 1: bytes = 1 + int64_t(rng() % 100); break;
      case 2: bytes = 64 * (1 + int64_t(rng() % 8)); break; // many equal sizes: exercises ties
      default: bytes = 1 + int64_t(rng() % 100000); break;
      }
      ivs.push_back(iv(a, b, bytes));
    }
    ArenaPlan p = planArena(ivs, alignment);
    ASSERT_EQ(checkPlan(ivs, p, alignment), "") << "round " << round;
    ASSERT_TRUE(bruteForceValid(ivs, p, alignment)) << "round " << round;
    ASSERT_EQ(p.lowerBoundBytes, lowerBound(ivs, alignment));
    ASSERT_GE(p.arenaBytes, p.lowerBoundBytes);
    int64_t maxAligned = 0;
    for (size_t i = 0; i < ivs.size(); ++i) {
      maxAligned = std::max(maxAligned, alignUp(ivs[i].bytes, alignment));
      ASSERT_EQ(p.offsets[i] % alignment, 0);
    }
    ASSERT_GE(p.arenaBytes, maxAligned);

    // Break it: move one buffer onto another that is live at the same time.
    for (size_t i = 0; i < ivs.size(); ++i) {
      bool done = false;
      for (size_t j = 0; j < ivs.size() && !done; ++j) {
        if (i == j || ivs[i].bytes == 0 || ivs[j].bytes == 0) continue;
        if (ivs[i].first <= ivs[j].last && ivs[j].first <= ivs[i].last) {
          ArenaPlan bad = p;
          bad.offsets[j] = bad.offsets[i];
          bad.arenaBytes = std::max(bad.arenaBytes, bad.offsets[j] + ivs[j].bytes);
          ASSERT_NE(checkPlan(ivs, bad, alignment), "") << "round " << round;
          ASSERT_FALSE(bruteForceValid(ivs, bad, alignment));
          ++broken;
          done = true;
        }
      }
      if (done) break;
    }
  }
  EXPECT_GT(broken, 300);
}

// GPT-sized programs have thousands of buffers, a few hundred persistent ones live throughout: a
// valid plan above the bound. (How long it takes is a benchmark's to say, not a test's: no timing is
// asserted here; the time is printed.)
TEST(ArenaPlanner, ThousandsOfBuffers) {
  std::mt19937_64 rng(7);
  std::vector<Interval> ivs;
  const int64_t steps = 6000;
  for (int i = 0; i < 1500; ++i) ivs.push_back(iv(0, steps - 1, 64 * (1 + int64_t(rng() % 10000))));
  for (int64_t t = 0; t < steps; ++t) {
    int64_t len = 1 + int64_t(rng() % 50);
    if (rng() % 10 == 0) len = int64_t(rng() % steps); // some activations live across the step
    ivs.push_back(iv(t, std::min(steps - 1, t + len), 64 * (1 + int64_t(rng() % 20000))));
  }
  auto t0 = std::chrono::steady_clock::now();
  ArenaPlan p = planArena(ivs);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(checkPlan(ivs, p), "");
  EXPECT_GE(p.arenaBytes, p.lowerBoundBytes);
  std::printf("planned %zu buffers in %.3f s\n", ivs.size(), s);
}
