//===- MemoryPlan.cpp - bigc-memory-plan ----------------------------------===//
//
// Liveness of every tensor of @train_step in its scheduled order, aliasing
// (reshape, in-place elementwise), and one offset per buffer in the arena of
// its space ("device", "host") from plan::planArena. The result is recorded
// as attributes so that every decision is visible in the IR and the emitter
// only copies it:
//   op            bigc.offsets = array<i64: ...>   (one per result, in the
//                 arena of the op's space)
//   bigc.param    bigc.offset = N : i64
//   @train_step   bigc.arg_offsets = array<i64: ...>, bigc.arena_bytes,
//                 bigc.lower_bound_bytes (the device arena), and with a host
//                 space bigc.host_arena_bytes, bigc.host_lower_bound_bytes
//
//===----------------------------------------------------------------------===//

#include "MemoryPlanAnalysis.h"

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCMEMORYPLAN
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

int64_t mlir::bigc::tensorBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape()) return -1;
  Type e = t.getElementType();
  int64_t size = 0;
  if (e.isF32() || e.isInteger(32))
    size = 4;
  else if (e.isBF16() || e.isF16())
    size = 2;
  else
    return -1;
  return t.getNumElements() * size;
}

bool mlir::bigc::isInPlaceElementwise(Operation *op) {
  return isa<AddOp, BiasAddOp, MulOp, ScaleOp, GeluOp, GeluGradOp, SiluOp, SiluGradOp, SwigluOp, GegluOp, RopeOp,
             SoftcapOp, SoftcapGradOp>(op);
}

SmallVector<unsigned> mlir::bigc::inPlaceOperands(Operation *op, unsigned result) {
  // (the program format's rule, format::mayAlias: the fused ops' kernels allow these pairs)
  if (isInPlaceElementwise(op) && op->getNumResults() == 1) {
    SmallVector<unsigned> all;
    for (unsigned k = 0; k < op->getNumOperands(); ++k) all.push_back(k);
    return all;
  }
  if (result != 0) return {};
  if (isa<AddLayerNormOp, AddRmsNormOp, GeluGradBiasOp>(op)) return {0, 1};
  if (isa<LayerNormGradAddOp>(op)) return {5};
  if (isa<RmsNormGradAddOp>(op)) return {4};
  if (isa<BiasGeluOp>(op)) return {0};
  // The loss's gradient over the logits, whose last use it is (the largest activation of a big
  // vocabulary: without this the peak holds both).
  if (isa<CrossEntropyGradOp>(op)) return {0};
  if (isa<VocabCeStatsGradOp>(op)) return {1};
  return {};
}

func::FuncOp mlir::bigc::getTrainStep(ModuleOp module) { return module.lookupSymbol<func::FuncOp>("train_step"); }

int64_t MemoryPlan::offsetOf(Value v) const {
  auto it = valueId.find(v);
  if (it == valueId.end()) return -1;
  return groups[values[it->second].group].offset;
}

namespace {
// Union-find over plan values whose group data merge on union.
struct Groups {
  std::vector<unsigned> parent;
  std::vector<AliasGroup> data;
  unsigned find(unsigned x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void unite(unsigned a, unsigned b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent[b] = a;
    AliasGroup &x = data[a], &y = data[b];
    x.bytes = std::max(x.bytes, y.bytes);
    x.first = std::min(x.first, y.first);
    x.last = std::max(x.last, y.last);
    x.persistent |= y.persistent;
    x.pinned |= y.pinned;
    if (x.space != y.space) // never: aliasing stays within a space
      x.space = kDeviceSpace.str();
  }
};
} // namespace

FailureOr<MemoryPlan> mlir::bigc::computeMemoryPlan(ModuleOp module, func::FuncOp func, int64_t alignment) {
  MemoryPlan mp;
  mp.func = func;
  mp.alignment = alignment;
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return func.emitError("bigc-memory-plan: @") << func.getSymName() << " must have a body of one block";
  Block &block = func.front();

  // Instruction indices.
  int64_t n = 0;
  for (Operation &op : block.without_terminator())
    if (!isa<GetParamOp>(op)) mp.index[&op] = n++;
  mp.numInstructions = n;
  const int64_t end = std::max<int64_t>(n - 1, 0);

  auto addValue = [&](PlanValue pv) {
    mp.values.push_back(pv);
    return unsigned(mp.values.size() - 1);
  };

  // Persistent buffers: every bigc.param, live over the whole step (a
  // transfer one from its first to its last touch, found below).
  for (ParamOp p : module.getOps<ParamOp>()) {
    PlanValue pv;
    pv.kind = PlanValue::Param;
    pv.param = p;
    pv.space = paramSpace(p).str();
    pv.bytes = tensorBytes(p.getType());
    if (pv.bytes < 0) return p.emitError("bigc-memory-plan: cannot size parameter type ") << p.getType();
    bool transient = p.getRole() == kTransferRole;
    pv.first = transient ? n : 0;
    pv.last = transient ? -1 : end;
    unsigned id = addValue(pv);
    mp.paramId[p] = id;
    mp.paramByName[p.getSymName()] = id;
  }
  // Function arguments (tokens, targets): written before instruction 0.
  for (BlockArgument a : block.getArguments()) {
    PlanValue pv;
    pv.kind = PlanValue::Arg;
    pv.value = a;
    pv.bytes = tensorBytes(a.getType());
    if (pv.bytes < 0)
      return func.emitError("bigc-memory-plan: cannot size argument #")
             << a.getArgNumber() << " of type " << a.getType();
    pv.first = pv.last = 0;
    mp.valueId[a] = addValue(pv);
  }
  // Results: live from their definition to their last use.
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<GetParamOp>(op)) {
      auto it = mp.paramByName.find(gp.getParam());
      if (it == mp.paramByName.end()) return gp.emitError("bigc-memory-plan: unknown parameter @") << gp.getParam();
      mp.valueId[gp.getResult()] = it->second;
      continue;
    }
    int64_t i = mp.index[&op];
    for (Value operand : op.getOperands()) {
      auto it = mp.valueId.find(operand);
      if (it == mp.valueId.end())
        return op.emitError("bigc-memory-plan: operand not defined in @") << func.getSymName();
      PlanValue &pv = mp.values[it->second];
      pv.last = std::max(pv.last, i);
      if (pv.kind == PlanValue::Param && pv.param.getRole() == kTransferRole) pv.first = std::min(pv.first, i);
    }
    // Parameters named by symbol (adamw, param_copy, loss_scale_update):
    // what a transfer parameter's interval is made of.
    for (NamedAttribute na : op.getAttrs()) {
      auto ref = dyn_cast<FlatSymbolRefAttr>(na.getValue());
      if (!ref) continue;
      auto it = mp.paramByName.find(ref.getValue());
      if (it == mp.paramByName.end()) continue;
      PlanValue &pv = mp.values[it->second];
      if (pv.param.getRole() == kTransferRole) {
        pv.first = std::min(pv.first, i);
        pv.last = std::max(pv.last, i);
      }
    }
    for (Value r : op.getResults()) {
      PlanValue pv;
      pv.kind = PlanValue::Result;
      pv.value = r;
      pv.space = opSpace(&op).str();
      pv.bytes = tensorBytes(r.getType());
      if (pv.bytes < 0) return op.emitError("bigc-memory-plan: cannot size result type ") << r.getType();
      pv.first = pv.last = i;
      mp.valueId[r] = addValue(pv);
    }
  }
  // A transfer parameter nothing touches: one instruction.
  for (PlanValue &pv : mp.values)
    if (pv.kind == PlanValue::Param && pv.first > pv.last) pv.first = pv.last = 0;

  // Side-stream ops: what they touch stays live until the bigc.wait that
  // names their event (the compute stream may reuse the memory only after
  // it), or the end of the step.
  // A stream runs its ops in order: a wait for one of them joins every
  // earlier op of its stream too (the emitter's and the runtime's rule), so
  // an op is joined at the first wait naming it or a later op of its stream.
  llvm::DenseMap<int64_t, int64_t> joinedAt; // event -> index of its wait
  {
    llvm::StringMap<SmallVector<int64_t>> order;                 // stream -> its events in order
    llvm::DenseMap<int64_t, std::pair<StringRef, size_t>> where; // event -> (stream, position)
    for (Operation &op : block.without_terminator()) {
      int64_t e = opEvent(&op);
      if (e < 0 || isa<GetParamOp>(op)) continue;
      auto &list = order[opStream(&op)];
      where[e] = {opStream(&op), list.size()};
      list.push_back(e);
    }
    llvm::StringMap<size_t> done; // stream -> how many of its events are joined
    for (Operation &op : block.without_terminator())
      if (auto w = dyn_cast<WaitOp>(op))
        for (int64_t e : w.getEvents()) {
          auto it = where.find(e);
          if (it == where.end()) continue;
          auto &list = order[it->second.first];
          size_t &k = done[it->second.first];
          for (; k <= it->second.second; ++k) joinedAt.try_emplace(list[k], mp.index[&op]);
        }
  }
  for (Operation &op : block.without_terminator()) {
    int64_t e = opEvent(&op);
    if (e < 0 || isa<GetParamOp>(op)) continue;
    auto jt = joinedAt.find(e);
    int64_t until = jt == joinedAt.end() ? end : std::max(jt->second, mp.index[&op]);
    auto extend = [&](unsigned id) {
      PlanValue &pv = mp.values[id];
      pv.last = std::max(pv.last, until);
    };
    for (Value v : op.getOperands()) extend(mp.valueId[v]);
    for (Value r : op.getResults()) extend(mp.valueId[r]);
    for (NamedAttribute na : op.getAttrs())
      if (auto ref = dyn_cast<FlatSymbolRefAttr>(na.getValue())) {
        auto it = mp.paramByName.find(ref.getValue());
        if (it != mp.paramByName.end()) extend(it->second);
      }
  }

  // The returned values (the loss) are read after the last instruction, and
  // so is the found_inf flag of bigc.check_finite (fp16: the runtime logs
  // `skipped` from it).
  llvm::DenseSet<unsigned> returned;
  SmallVector<Value> readAfterStep(block.getTerminator()->getOperands());
  for (Operation &op : block.without_terminator()) {
    if (isa<CheckFiniteOp>(op)) readAfterStep.push_back(op.getResult(0));
    if (auto u = dyn_cast<LossScaleUpdateOp>(op)) // the flag as reduced over the ranks (bigc-shard)
      readAfterStep.push_back(u.getFoundInf());
    if (auto a = dyn_cast<AdamWOp>(op); a && a.getFoundInf()) // a pipeline stage without the update
      readAfterStep.push_back(a.getFoundInf());
  }
  for (Value operand : readAfterStep) {
    auto it = mp.valueId.find(operand);
    if (it == mp.valueId.end()) continue;
    mp.values[it->second].last = end;
    returned.insert(it->second);
  }

  // Alias groups.
  Groups g;
  g.parent.resize(mp.values.size());
  g.data.resize(mp.values.size());
  for (unsigned k = 0; k < mp.values.size(); ++k) {
    const PlanValue &pv = mp.values[k];
    g.parent[k] = k;
    AliasGroup &d = g.data[k];
    d.space = pv.space;
    d.bytes = pv.bytes;
    d.first = pv.first;
    d.last = pv.last;
    d.persistent = pv.kind == PlanValue::Param && ParamOp(pv.param).getRole() != kTransferRole;
    d.pinned = pv.kind == PlanValue::Arg || returned.count(k) || pv.kind == PlanValue::Param; // never reused in place
  }
  for (Operation &op : block.without_terminator()) {
    if (isa<GetParamOp>(op)) continue;
    int64_t i = mp.index[&op];
    if (auto rs = dyn_cast<ReshapeOp>(op)) {
      // Same elements, same bytes: the result is the operand, seen anew.
      g.unite(mp.valueId[rs.getX()], mp.valueId[rs.getY()]);
      continue;
    }
    SmallVector<unsigned> candidates = inPlaceOperands(&op, 0);
    if (candidates.empty()) continue;
    Value r = op.getResult(0);
    unsigned rid = mp.valueId[r];
    for (unsigned k : candidates) {
      Value operand = op.getOperand(k);
      if (operand.getType() != r.getType()) continue;
      unsigned root = g.find(mp.valueId[operand]);
      const AliasGroup &d = g.data[root];
      if (d.space != mp.values[rid].space) continue;
      // Reuse only a buffer that nothing reads after this op: not a
      // parameter, an argument or the result, and dead after instruction i.
      if (d.persistent || d.pinned || d.last != i || d.bytes != mp.values[rid].bytes) continue;
      g.unite(root, rid);
      break;
    }
  }

  // One interval per group, planned together with the groups of its space.
  llvm::DenseMap<unsigned, unsigned> groupIndex;
  std::vector<::bigc::plan::Interval> intervals;
  for (unsigned k = 0; k < mp.values.size(); ++k) {
    unsigned root = g.find(k);
    auto [it, inserted] = groupIndex.try_emplace(root, mp.groups.size());
    if (inserted) {
      AliasGroup d = g.data[root];
      if (d.persistent) {
        d.first = 0;
        d.last = end;
      }
      mp.groups.push_back(d);
      ::bigc::plan::Interval iv;
      iv.first = d.first;
      iv.last = d.last;
      iv.bytes = d.bytes;
      intervals.push_back(iv);
    }
    mp.values[k].group = it->second;
  }
  std::map<std::string, std::vector<size_t>> bySpace;
  bySpace[kDeviceSpace.str()]; // always planned, possibly empty
  for (size_t k = 0; k < mp.groups.size(); ++k) bySpace[mp.groups[k].space].push_back(k);
  // With an nvme space, its arena and the host's (the staging tensors the nvme stream reads
  // into and writes from) are planned with O_DIRECT's alignment of offsets and sizes.
  const bool nvme = bySpace.count(kNvmeSpace.str()) > 0;
  for (auto &[space, members] : bySpace) {
    std::vector<::bigc::plan::Interval> ivs;
    for (size_t k : members) ivs.push_back(intervals[k]);
    const int64_t align = nvme && space != kDeviceSpace ? std::max(alignment, kNvmeAlignment) : alignment;
    ::bigc::plan::ArenaPlan plan = ::bigc::plan::planArena(ivs, align);
    std::string problem = ::bigc::plan::checkPlan(ivs, plan, align);
    if (!problem.empty())
      return func.emitError("bigc-memory-plan: internal error, the plan of "
                            "the ")
             << space << " space is invalid: " << problem;
    for (size_t j = 0; j < members.size(); ++j) mp.groups[members[j]].offset = plan.offsets[j];
    mp.arenas[space] = std::move(plan);
  }
  mp.arena = mp.arenas[kDeviceSpace.str()];
  return mp;
}

namespace {
struct BigcMemoryPlanPass : public mlir::bigc::impl::BigcMemoryPlanBase<BigcMemoryPlanPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = getTrainStep(module);
    if (!func) {
      module.emitError("bigc-memory-plan: the module has no func.func "
                       "@train_step (run bigc-autodiff first)");
      return signalPassFailure();
    }
    FailureOr<MemoryPlan> mp = computeMemoryPlan(module, func);
    if (failed(mp)) return signalPassFailure();

    Builder b(module.getContext());
    for (ParamOp p : module.getOps<ParamOp>()) {
      const PlanValue &pv = mp->values[mp->paramId[p]];
      p->setAttr(kOffsetAttrName, b.getI64IntegerAttr(mp->groups[pv.group].offset));
    }
    Block &block = func.front();
    SmallVector<int64_t> argOffsets;
    for (BlockArgument a : block.getArguments()) argOffsets.push_back(mp->offsetOf(a));
    for (Operation &op : block.without_terminator()) {
      if (op.getNumResults() == 0) continue;
      SmallVector<int64_t> offsets;
      for (Value r : op.getResults()) offsets.push_back(mp->offsetOf(r));
      op.setAttr(kOffsetsAttrName, b.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr(kArgOffsetsAttrName, b.getDenseI64ArrayAttr(argOffsets));
    func->setAttr(kArenaBytesAttrName, b.getI64IntegerAttr(mp->arena.arenaBytes));
    func->setAttr(kLowerBoundBytesAttrName, b.getI64IntegerAttr(mp->arena.lowerBoundBytes));
    func->removeAttr(kHostArenaBytesAttrName);
    func->removeAttr(kHostLowerBoundBytesAttrName);
    auto host = mp->arenas.find(kHostSpace.str());
    if (host != mp->arenas.end()) {
      func->setAttr(kHostArenaBytesAttrName, b.getI64IntegerAttr(host->second.arenaBytes));
      func->setAttr(kHostLowerBoundBytesAttrName, b.getI64IntegerAttr(host->second.lowerBoundBytes));
    }
    func->removeAttr(kNvmeArenaBytesAttrName);
    func->removeAttr(kNvmeLowerBoundBytesAttrName);
    auto nvme = mp->arenas.find(kNvmeSpace.str());
    if (nvme != mp->arenas.end()) {
      func->setAttr(kNvmeArenaBytesAttrName, b.getI64IntegerAttr(nvme->second.arenaBytes));
      func->setAttr(kNvmeLowerBoundBytesAttrName, b.getI64IntegerAttr(nvme->second.lowerBoundBytes));
    }
  }
};
} // namespace
