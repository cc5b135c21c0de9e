// The point-to-point groups of a pipeline stage: see include/bigc/Format/p2p_groups.h.
#include "bigc/Format/p2p_groups.h"

#include <algorithm>
#include <map>

namespace bigc::format {

namespace {

// Bytes [lo, hi) of one space's arena.
struct Extent {
  const std::string *space;
  int64_t lo, hi;
  bool write;
};

bool conflict(const Extent &a, const Extent &b) {
  return (a.write || b.write) && *a.space == *b.space && a.lo < b.hi && b.lo < a.hi;
}

} // namespace

std::vector<std::vector<int64_t>> p2pGroups(const Program &p) {
  const auto &insts = p.instructions;
  const int64_t n = int64_t(insts.size());
  // Per instruction: the one before it on its stream (-1: none).
  std::vector<int64_t> prevOnStream(size_t(n), -1);
  {
    std::map<std::string, int64_t> last;
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = last.emplace(insts[size_t(i)].stream, i);
      if (!fresh) prevOnStream[size_t(i)] = it->second, it->second = i;
    }
  }
  auto extents = [&](int64_t i) {
    std::vector<Extent> e;
    const Instruction &ins = insts[size_t(i)];
    for (int64_t b : ins.in) {
      const Buffer &buf = p.buffers[size_t(b)];
      e.push_back({&buf.space, buf.offset, buf.offset + buf.bytes, false});
    }
    for (int64_t b : ins.out) {
      const Buffer &buf = p.buffers[size_t(b)];
      e.push_back({&buf.space, buf.offset, buf.offset + buf.bytes, true});
    }
    return e;
  };
  // Whether an instruction of `members` (all earlier than i) happens before instruction i other
  // than through i's own stream order: a walk back from i's wait list over wait lists and stream
  // order. Happening before means coming earlier in program order, so the walk stops below the
  // first member.
  std::vector<int64_t> seen(size_t(n), -1);
  auto dependsOn = [&](int64_t i, const std::vector<int64_t> &members) {
    const int64_t floor = *std::min_element(members.begin(), members.end());
    std::vector<int64_t> todo(insts[size_t(i)].wait.begin(), insts[size_t(i)].wait.end());
    while (!todo.empty()) {
      const int64_t j = todo.back();
      todo.pop_back();
      if (j < floor || seen[size_t(j)] == i) continue;
      seen[size_t(j)] = i;
      if (std::find(members.begin(), members.end(), j) != members.end()) return true;
      for (int64_t w : insts[size_t(j)].wait) todo.push_back(w);
      if (prevOnStream[size_t(j)] >= 0) todo.push_back(prevOnStream[size_t(j)]);
    }
    return false;
  };
  std::vector<std::vector<int64_t>> groups;
  std::vector<Extent> touched;
  for (int64_t i = 0; i < n; ++i) {
    const Instruction &ins = insts[size_t(i)];
    if (ins.op != "send" && ins.op != "recv") continue;
    std::vector<Extent> mine = extents(i);
    bool join = !groups.empty() && !dependsOn(i, groups.back());
    for (size_t a = 0; join && a < mine.size(); ++a)
      for (const Extent &t : touched)
        if (conflict(mine[a], t)) {
          join = false;
          break;
        }
    if (!join) groups.emplace_back(), touched.clear();
    groups.back().push_back(i);
    touched.insert(touched.end(), mine.begin(), mine.end());
  }
  return groups;
}

} // namespace bigc::format
