// Offsets in one arena from liveness intervals. No MLIR here: the memory-plan pass, the tests and
// (later) the plan verifier share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigc::plan {

// A buffer that must hold `bytes` from the start of instruction `first` to the end of instruction
// `last` (inclusive). Buffers whose intervals intersect must not overlap in memory.
struct Interval {
  int64_t first = 0, last = 0;
  int64_t bytes = 0;
};

struct ArenaPlan {
  std::vector<int64_t> offsets; // one per interval, multiples of `alignment`
  int64_t arenaBytes = 0;       // max(offset + aligned size)
  int64_t lowerBoundBytes = 0;  // max over time of the aligned bytes live at once
};

int64_t alignUp(int64_t x, int64_t alignment);

// Most aligned bytes live at one instruction.
int64_t lowerBound(const std::vector<Interval> &intervals, int64_t alignment = 64);

// Largest-first best-fit: place buffers by decreasing size (ties: earlier first, then longer), each
// in the smallest gap, among already placed buffers whose intervals intersect it, that holds it;
// otherwise above the highest of them.
ArenaPlan planArena(const std::vector<Interval> &intervals, int64_t alignment = 64);

// Empty when no two time-overlapping intervals overlap in memory and every offset is aligned;
// otherwise a description of the first conflict found.
std::string checkPlan(const std::vector<Interval> &intervals, const ArenaPlan &plan, int64_t alignment = 64);

} // namespace bigc::plan
