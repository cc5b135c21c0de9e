// Offsets in one arena from liveness intervals (see include/bigc/Plan/arena_planner.h).
//
// The algorithm is the "greedy by size" strategy of TFLite's arena planner and XLA's heap
// simulator: buffers are placed largest first; each goes into the smallest gap, among the buffers
// already placed whose live intervals intersect its own, that can hold it (best fit), or above the
// highest of them. Buffers that are never live at the same time may share memory.
//
// Cost: placed buffers are kept sorted by offset, so each placement is one linear scan over them
// (filtering on time overlap yields the overlapping buffers already in offset order): O(n^2) time
// overall, O(n) memory; a few thousand buffers take milliseconds.
#include "bigc/Plan/arena_planner.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace bigc::plan {

int64_t alignUp(int64_t x, int64_t alignment) {
  if (alignment <= 1) return x;
  return (x + alignment - 1) / alignment * alignment;
}

static void validate(const std::vector<Interval> &intervals, int64_t alignment) {
  if (alignment <= 0) throw std::invalid_argument("arena planner: alignment must be positive");
  for (size_t i = 0; i < intervals.size(); ++i) {
    const Interval &iv = intervals[i];
    if (iv.bytes < 0 || iv.last < iv.first) {
      std::ostringstream os;
      os << "arena planner: interval " << i << " is invalid (first " << iv.first << ", last " << iv.last << ", bytes "
         << iv.bytes << ")";
      throw std::invalid_argument(os.str());
    }
  }
}

int64_t lowerBound(const std::vector<Interval> &intervals, int64_t alignment) {
  validate(intervals, alignment);
  // Sweep: +bytes at `first`, -bytes after `last`. At equal times frees (which happen at last+1)
  // come before allocations, since [a,b] and [b+1,c] are disjoint.
  std::vector<std::pair<int64_t, int64_t>> events; // (time, delta)
  events.reserve(intervals.size() * 2);
  for (const Interval &iv : intervals) {
    int64_t b = alignUp(iv.bytes, alignment);
    if (b == 0) continue;
    events.push_back({iv.first, b});
    events.push_back({iv.last + 1, -b});
  }
  std::sort(events.begin(), events.end()); // negative deltas first at equal times
  int64_t live = 0, best = 0;
  for (const auto &e : events) {
    live += e.second;
    best = std::max(best, live);
  }
  return best;
}

static bool timeOverlap(const Interval &a, const Interval &b) { return a.first <= b.last && b.first <= a.last; }

ArenaPlan planArena(const std::vector<Interval> &intervals, int64_t alignment) {
  validate(intervals, alignment);
  const size_t n = intervals.size();
  ArenaPlan plan;
  plan.offsets.assign(n, 0);
  plan.lowerBoundBytes = lowerBound(intervals, alignment);

  std::vector<int64_t> size(n);
  for (size_t i = 0; i < n; ++i) size[i] = alignUp(intervals[i].bytes, alignment);

  // Largest first; ties: earlier first, then longer, then by index (deterministic).
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size[a] != size[b]) return size[a] > size[b];
    const Interval &x = intervals[a], &y = intervals[b];
    if (x.first != y.first) return x.first < y.first;
    int64_t lx = x.last - x.first, ly = y.last - y.first;
    if (lx != ly) return lx > ly;
    return a < b;
  });

  // Placed buffers sorted by offset (ties by end, irrelevant for correctness).
  struct Placed {
    int64_t offset, end;
    size_t id;
  };
  std::vector<Placed> placed;
  placed.reserve(n);

  for (size_t id : order) {
    const Interval &iv = intervals[id];
    const int64_t need = size[id];
    if (need == 0) { // occupies no memory: conflicts with nothing
      plan.offsets[id] = 0;
      continue;
    }
    // Scan the time-overlapping placed buffers in offset order; `top` is the highest end seen so
    // far, so [top, next.offset) is a free gap whenever next.offset > top.
    int64_t top = 0;
    int64_t bestOffset = -1, bestGap = INT64_MAX;
    for (const Placed &p : placed) {
      if (!timeOverlap(iv, intervals[p.id])) continue;
      if (p.offset > top) {
        int64_t gap = p.offset - top;
        if (gap >= need && gap < bestGap) {
          bestGap = gap;
          bestOffset = top;
        }
      }
      top = std::max(top, p.end);
    }
    int64_t offset = bestOffset >= 0 ? bestOffset : top;
    plan.offsets[id] = offset;
    Placed np{offset, offset + need, id};
    auto pos = std::upper_bound(placed.begin(), placed.end(), np, [](const Placed &a, const Placed &b) {
      return a.offset != b.offset ? a.offset < b.offset : a.end < b.end;
    });
    placed.insert(pos, np);
    plan.arenaBytes = std::max(plan.arenaBytes, offset + need);
  }
  return plan;
}

std::string checkPlan(const std::vector<Interval> &intervals, const ArenaPlan &plan, int64_t alignment) {
  std::ostringstream os;
  if (alignment <= 0) return "alignment must be positive";
  if (plan.offsets.size() != intervals.size()) {
    os << "plan has " << plan.offsets.size() << " offsets for " << intervals.size() << " buffers";
    return os.str();
  }
  const size_t n = intervals.size();
  for (size_t i = 0; i < n; ++i) {
    const Interval &iv = intervals[i];
    if (iv.bytes < 0 || iv.last < iv.first) {
      os << "buffer " << i << " has an invalid interval [" << iv.first << ", " << iv.last << "] or size " << iv.bytes;
      return os.str();
    }
    if (plan.offsets[i] < 0 || plan.offsets[i] % alignment != 0) {
      os << "buffer " << i << " offset " << plan.offsets[i] << " is not a non-negative multiple of " << alignment;
      return os.str();
    }
    if (plan.offsets[i] + iv.bytes > plan.arenaBytes && iv.bytes > 0) {
      os << "buffer " << i << " [" << plan.offsets[i] << ", " << plan.offsets[i] + iv.bytes
         << ") ends beyond the arena of " << plan.arenaBytes << " bytes";
      return os.str();
    }
  }
  // Sweep over time: buffers sorted by first instruction; an active set ordered by memory offset
  // would be the asymptotically best check, but a sort by start plus a scan of the still-live
  // ones is O(n * live) and plenty fast for plans of thousands of buffers.
  std::vector<size_t> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (intervals[i].bytes > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return intervals[a].first != intervals[b].first ? intervals[a].first < intervals[b].first : a < b;
  });
  std::vector<size_t> active;
  for (size_t i : order) {
    const Interval &iv = intervals[i];
    // Drop buffers that died before this one starts.
    active.erase(std::remove_if(active.begin(), active.end(), [&](size_t j) { return intervals[j].last < iv.first; }),
                 active.end());
    int64_t lo = plan.offsets[i], hi = lo + iv.bytes;
    for (size_t j : active) {
      int64_t lo2 = plan.offsets[j], hi2 = lo2 + intervals[j].bytes;
      if (lo < hi2 && lo2 < hi) {
        size_t a = std::min(i, j), b = std::max(i, j);
        os << "buffers " << a << " (live [" << intervals[a].first << ", " << intervals[a].last << "], bytes ["
           << plan.offsets[a] << ", " << plan.offsets[a] + intervals[a].bytes << ")) and " << b << " (live ["
           << intervals[b].first << ", " << intervals[b].last << "], bytes [" << plan.offsets[b] << ", "
           << plan.offsets[b] + intervals[b].bytes << ")) are live at the same time and overlap in memory";
        return os.str();
      }
    }
    active.push_back(i);
  }
  return "";
}

} // namespace bigc::plan
