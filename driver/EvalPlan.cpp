//===- EvalPlan.cpp - the evaluation program's own memory plan ------------===//
//
// See include/bigc/Driver/EvalPlan.h.
//
//===----------------------------------------------------------------------===//
#include "bigc/Driver/EvalPlan.h"

#include "bigc/Driver/Compile.h"
#include "bigc/Format/evaluation.h"
#include "bigc/Format/ops.h"
#include "bigc/Format/validator.h"
#include "bigc/Format/verifier.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace bigc {

namespace {

// Buffers at one place by design in the evaluation (an in-place update or a reshape view of one
// of its instructions, at the same place in the step's plan): placed together.
struct Group {
  std::string space;
  int64_t bytes = 0;
  bool persistent = false;
  int64_t first = 0, last = 0;   // live interval over the evaluation's instructions
  std::vector<int64_t> accesses; // instructions of the step (HappensBefore::kStart, or n: after the last)
  std::vector<int64_t> members;  // buffer ids
  int64_t offset = -1;
};

size_t findRoot(std::vector<size_t> &u, size_t x) {
  while (u[x] != x) x = u[x] = u[u[x]];
  return x;
}

} // namespace

void planEvaluation(format::Program &p, const std::string &path) {
  p.evalPlan = {};
  if (p.pp > 1 || !p.stages.empty() || p.evalInstructions.empty() || p.space("nvme")) return;
  const std::vector<int64_t> &E = p.evalInstructions;
  const int64_t n = int64_t(E.size()), end = int64_t(p.instructions.size());
  const size_t nb = p.buffers.size();

  // What it keeps: what its instructions touch, the weights of record, the inputs and the loss.
  std::vector<char> kept(nb, 0);
  for (int64_t i : E)
    for (const auto *ids : {&p.instructions[size_t(i)].in, &p.instructions[size_t(i)].out})
      for (int64_t id : *ids) kept[size_t(id)] = 1;
  for (const format::Buffer &b : p.buffers)
    if (b.role == "param" || b.role == "master") kept[size_t(b.id)] = 1;
  std::vector<char> input(nb, 0);
  for (const auto *l : {&p.tokenInputs, &p.targetInputs})
    for (int64_t id : *l) kept[size_t(id)] = input[size_t(id)] = 1;
  if (p.loss >= 0) kept[size_t(p.loss)] = 1;

  // Groups: the in-place updates and views of the evaluation's own instructions.
  std::vector<size_t> root(nb);
  std::iota(root.begin(), root.end(), size_t(0));
  for (int64_t i : E) {
    const format::Instruction &ins = p.instructions[size_t(i)];
    const format::OpDef *sig = format::findOp(ins.op);
    if (!sig || !sig->inPlace) continue;
    for (int64_t o : ins.out)
      for (int64_t x : ins.in) {
        const format::Buffer &bo = p.buffers[size_t(o)], &bx = p.buffers[size_t(x)];
        if (o != x && bo.space == bx.space && bo.offset == bx.offset && bo.bytes == bx.bytes)
          root[findRoot(root, size_t(o))] = findRoot(root, size_t(x));
      }
  }
  std::vector<Group> groups;
  std::vector<int64_t> groupOf(nb, -1);
  for (size_t id = 0; id < nb; ++id) {
    if (!kept[id]) continue;
    const size_t r = findRoot(root, id);
    if (groupOf[r] < 0) groupOf[r] = int64_t(groups.size()), groups.emplace_back();
    Group &g = groups[size_t(groupOf[r])];
    const format::Buffer &b = p.buffers[id];
    groupOf[id] = groupOf[r];
    g.space = b.space;
    g.bytes = std::max(g.bytes, b.bytes);
    g.persistent = g.persistent || b.persistent();
    g.members.push_back(int64_t(id));
  }
  for (Group &g : groups) g.first = n, g.last = -1;
  auto touch = [&](int64_t id, int64_t j, int64_t step) {
    Group &g = groups[size_t(groupOf[size_t(id)])];
    g.first = std::min(g.first, std::max<int64_t>(j, 0)), g.last = std::max(g.last, std::min(j, n - 1));
    g.accesses.push_back(step);
  };
  for (size_t id = 0; id < nb; ++id)
    if (input[id]) touch(int64_t(id), 0, format::HappensBefore::kStart);
  for (int64_t j = 0; j < n; ++j)
    for (const auto *ids : {&p.instructions[size_t(E[size_t(j)])].in, &p.instructions[size_t(E[size_t(j)])].out})
      for (int64_t id : *ids) touch(id, j, E[size_t(j)]);
  if (p.loss >= 0) touch(p.loss, n - 1, end);
  for (Group &g : groups)
    if (g.persistent || g.last < 0) g.first = 0, g.last = n - 1;

  // Two groups may share bytes when neither is persistent, their live intervals are disjoint, and
  // every access of the earlier happens before every access of the later (in the step, and so in
  // the evaluation: its waits keep the step's order between its instructions).
  const format::HappensBefore hb(p);
  auto compatible = [&](const Group &a, const Group &b) {
    if (a.persistent || b.persistent) return false;
    if (!(a.last < b.first || b.last < a.first)) return false;
    const Group &x = a.last < b.first ? a : b, &y = a.last < b.first ? b : a;
    for (int64_t u : x.accesses)
      for (int64_t w : y.accesses)
        if (!hb(u, w)) return false;
    return true;
  };

  // Persistent groups first, one after another; then the others, largest first, each at the
  // lowest aligned offset clear of every placed group it cannot share bytes with.
  std::map<std::string, int64_t> arenas;
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Group &x = groups[a], &y = groups[b];
    if (x.persistent != y.persistent) return x.persistent;
    if (x.persistent) return false;
    return x.bytes > y.bytes;
  });
  std::map<std::string, std::vector<size_t>> placed;
  for (size_t gi : order) {
    Group &g = groups[gi];
    arenas.emplace(g.space, 0);
    if (g.bytes == 0) {
      g.offset = 0;
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> busy; // [begin, end) taken
    for (size_t h : placed[g.space])
      if (!compatible(g, groups[h])) busy.push_back({groups[h].offset, groups[h].offset + groups[h].bytes});
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto &[b, e] : busy) {
      if (at + g.bytes <= b) break;
      at = std::max(at, (e + format::kAlignment - 1) / format::kAlignment * format::kAlignment);
    }
    g.offset = at;
    placed[g.space].push_back(gi);
    arenas[g.space] =
        std::max(arenas[g.space], (at + g.bytes + format::kAlignment - 1) / format::kAlignment * format::kAlignment);
  }

  // Never more than the step's own arenas: where first-fit does worse, the step's places (which
  // the same rules allow) are kept.
  bool worse = false;
  for (const auto &[space, bytes] : arenas)
    if (const format::Space *s = p.space(space); s && bytes > s->arenaBytes) worse = true;
  format::Program::EvalPlan &ep = p.evalPlan;
  for (size_t id = 0; id < nb; ++id) {
    if (!kept[id]) continue;
    ep.buffers.push_back(int64_t(id));
    ep.offsets.push_back(worse ? p.buffers[id].offset : groups[size_t(groupOf[id])].offset);
  }
  for (const auto &[space, bytes] : arenas) ep.arenas[space] = worse ? p.space(space)->arenaBytes : bytes;

  // The proof: the evaluation program, on its own, is a valid and safe program.
  try {
    const format::Program view = format::evaluationProgram(p);
    format::validateProgram(view, path);
    std::vector<std::string> issues = format::verifyPlan(view, 3);
    if (!issues.empty()) {
      std::string msg = "internal error: the plan verifier found the evaluation's memory plan unsafe: " + issues[0];
      for (size_t i = 1; i < issues.size(); ++i) msg += "; " + issues[i];
      throw InternalError(msg + " (please report it)");
    }
  } catch (const UserError &e) {
    throw InternalError(std::string("internal error: the evaluation's memory plan is invalid: ") + e.what() +
                        " (please report it)");
  }
}

} // namespace bigc
