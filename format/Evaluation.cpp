// The evaluation program as a program of its own (include/bigc/Format/evaluation.h).
#include "bigc/Format/evaluation.h"

#include "bigc/Format/verifier.h"

#include <algorithm>

namespace bigc::format {

bool hasEvaluationPlan(const Program &p) {
  return p.pp <= 1 && p.stages.empty() && !p.evalInstructions.empty() && p.evalPlan.present();
}

Program evaluationProgram(const Program &p) {
  if (!hasEvaluationPlan(p))
    throw UserError(p.pp > 1 ? "a pipelined program's evaluation has no memory plan of its own"
                             : "this program's evaluation has no memory plan of its own (compiled by an older bigc, "
                               "or its evaluation touches the nvme space)");
  const Program::EvalPlan &ep = p.evalPlan;
  Program v;
  // The header as it is (config, mesh, optimizer, names, weights); the step's own parts replaced.
  v.version = p.version;
  v.producer = p.producer, v.source = p.source;
  v.batch = p.batch, v.seq = p.seq, v.vocab = p.vocab, v.microBatches = p.microBatches, v.ranks = p.ranks;
  v.dp = p.dp, v.tp = p.tp, v.pp = p.pp, v.cp = p.cp, v.zero = p.zero;
  v.sequenceParallel = p.sequenceParallel, v.tpReplicated = p.tpReplicated;
  v.precision = p.precision, v.optimizer = p.optimizer, v.hardwareName = p.hardwareName;
  v.deviceCapacityBytes = p.deviceCapacityBytes, v.hostCapacityBytes = p.hostCapacityBytes;
  v.nvmeCapacityBytes = p.nvmeCapacityBytes, v.nvmePath = p.nvmePath;
  v.deviceReserveBytes = p.deviceReserveBytes, v.hostReserveBytes = p.hostReserveBytes;
  v.deviceReserveParts = p.deviceReserveParts;
  v.initialWeights = p.initialWeights, v.initialWeightsBytes = p.initialWeightsBytes, v.initialNames = p.initialNames;
  v.initialBuffers = p.initialBuffers;
  v.aliases = p.aliases, v.hfConfig = p.hfConfig, v.hfPrefix = p.hfPrefix;
  for (const Space &s : p.spaces) {
    Space t = s;
    auto a = ep.arenas.find(s.name);
    t.arenaBytes = a == ep.arenas.end() ? 0 : a->second;
    v.spaces.push_back(t);
  }

  // Buffers: the plan's, renumbered in order, at the plan's offsets.
  std::vector<int64_t> id(p.buffers.size(), -1);
  for (size_t k = 0; k < ep.buffers.size(); ++k) {
    Buffer b = p.buffers[size_t(ep.buffers[k])];
    id[size_t(b.id)] = int64_t(k);
    b.id = int64_t(k);
    b.offset = ep.offsets[k];
    v.buffers.push_back(std::move(b));
  }
  auto remap = [&](int64_t x) { return x < 0 ? int64_t(-1) : id[size_t(x)]; };
  for (int64_t x : p.tokenInputs) v.tokenInputs.push_back(remap(x));
  for (int64_t x : p.targetInputs) v.targetInputs.push_back(remap(x));
  v.loss = remap(p.loss), v.lossScale = remap(p.lossScale), v.foundInf = remap(p.foundInf);

  // Instructions: the evaluation's in order. Waits: for instruction b and each other stream t, the
  // last of the evaluation's instructions on t that happens before b in the step (at or before the
  // last position on t that b's vector clock holds): "a happens before b" between two of them then
  // holds here exactly when it holds in the step.
  const HappensBefore hb(p);
  const std::vector<int64_t> &E = p.evalInstructions;
  const int64_t n = int64_t(E.size());
  std::vector<std::vector<std::pair<int, int64_t>>> onStream(hb.streams().size()); // (position in p, index in v)
  for (int64_t j = 0; j < n; ++j)
    onStream[size_t(hb.streamOf(E[size_t(j)]))].push_back({hb.positionOf(E[size_t(j)]), j});
  std::vector<size_t> seen(onStream.size(), 0); // per stream: how many of its instructions are before j
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = E[size_t(j)];
    Instruction ins = p.instructions[size_t(i)];
    for (int64_t &x : ins.in) x = remap(x);
    for (int64_t &x : ins.out) x = remap(x);
    ins.wait.clear();
    const int s = hb.streamOf(i);
    for (size_t t = 0; t < onStream.size(); ++t) {
      if (int(t) == s) continue;
      const int last = hb.latestOn(i, int(t));
      if (last < 0) continue;
      // Among the evaluation's instructions on t before j, the last at a position <= last.
      const auto &list = onStream[t];
      auto it = std::upper_bound(list.begin(), list.begin() + std::ptrdiff_t(seen[t]), std::make_pair(last, n));
      if (it != list.begin()) ins.wait.push_back(std::prev(it)->second);
    }
    std::sort(ins.wait.begin(), ins.wait.end());
    ++seen[size_t(s)];
    v.instructions.push_back(std::move(ins));
  }

  // Live intervals from its own instructions (the step's inputs from the first, the loss to the
  // last, persistent buffers throughout: the validator's rules).
  for (Buffer &b : v.buffers) b.liveFirst = n, b.liveLast = -1;
  for (int64_t j = 0; j < n; ++j)
    for (const auto *ids : {&v.instructions[size_t(j)].in, &v.instructions[size_t(j)].out})
      for (int64_t x : *ids) {
        Buffer &b = v.buffers[size_t(x)];
        b.liveFirst = std::min(b.liveFirst, j), b.liveLast = std::max(b.liveLast, j);
      }
  for (Buffer &b : v.buffers)
    if (b.liveLast < 0 || b.persistent()) b.liveFirst = 0, b.liveLast = std::max<int64_t>(n - 1, 0);
  for (const auto *l : {&v.tokenInputs, &v.targetInputs})
    for (int64_t x : *l)
      if (x >= 0) v.buffers[size_t(x)].liveFirst = 0;
  if (v.loss >= 0) v.buffers[size_t(v.loss)].liveLast = n - 1;

  for (int64_t j = 0; j < n; ++j) v.evalInstructions.push_back(j);
  return v;
}

} // namespace bigc::format
