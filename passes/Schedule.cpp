//===- Schedule.cpp - bigc-schedule ---------------------------------------===//
//
// One order for @train_step (see the description in Passes.td): the forward
// as written, the backward as bigc-autodiff wrote it, each bigc.adamw moved
// up to just after the last op it depends on, and bigc.get_param /
// bigc.fill sunk to just before their first user. With transfers
// (bigc-offload): host-to-device copies of parameters prefetched a layer
// ahead, each bigc.param_copy after the last reader of the tensor it writes,
// every side-stream op on its stream with an event, and the compute
// stream's bigc.wait ops.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <functional>

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCSCHEDULE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// The op of `block` that holds `op` (itself, or its ancestor in `block`).
Operation *inBlock(Block &block, Operation *op) { return block.findAncestorOpInBlock(*op); }

/// Each op of `block` by its place in it now.
llvm::DenseMap<Operation *, unsigned> positions(Block &block) {
  llvm::DenseMap<Operation *, unsigned> pos;
  unsigned i = 0;
  for (Operation &op : block) pos[&op] = i++;
  return pos;
}

/// The earliest op of `block` holding a user of `op` (and `accept`ing it), or `first` when that
/// is earlier; null when there is none.
Operation *firstUser(Block &block, Operation *op, Operation *first = nullptr,
                     llvm::function_ref<bool(Operation *)> accept = nullptr) {
  for (Operation *user : op->getUsers()) {
    Operation *u = inBlock(block, user);
    if (u && (!accept || accept(u)) && (!first || u->isBeforeInBlock(first))) first = u;
  }
  return first;
}

/// Sinks every bigc.get_param and bigc.fill to just before its first user in
/// the block (its value is then produced when it is needed, not earlier).
void sinkToFirstUse(Block &block) {
  SmallVector<Operation *> candidates;
  for (Operation &op : block.without_terminator())
    if (isa<GetParamOp, FillOp>(op)) candidates.push_back(&op);
  for (Operation *op : candidates) {
    Operation *first = firstUser(block, op);
    if (first && first != op->getNextNode()) op->moveBefore(first);
  }
}

/// The key of the "layer segment" of a compute op: its phase and its
/// bigc.layer. Consecutive compute ops with one key form a segment (the
/// forward of block i, the backward of block i, ...).
std::pair<StringRef, int64_t> segmentKey(Operation *op) { return {phaseOf(op), opLayer(op)}; }

/// Compute-stream instructions in order (not get_param, not wait, not a
/// transfer or host op) and, for each, the index of its segment.
struct Segments {
  SmallVector<Operation *> ops;
  SmallVector<unsigned> segment; ///< per op
  SmallVector<unsigned> firstOp; ///< per segment: index into ops
  llvm::DenseMap<Operation *, unsigned> position;
};

Segments computeSegments(Block &block, bool skipOptimizer = false) {
  Segments s;
  std::pair<StringRef, int64_t> key;
  for (Operation &op : block.without_terminator()) {
    if (isa<GetParamOp, WaitOp, CopyOp, ParamCopyOp>(op) || isCollective(&op) || isSideStream(&op) ||
        opSpace(&op) == kHostSpace)
      continue;
    if (skipOptimizer && (isa<AdamWOp, LossScaleUpdateOp>(op) || segmentKey(&op).first == kOptimizerPhase)) continue;
    auto k = segmentKey(&op);
    if (s.ops.empty() || k != key) {
      s.firstOp.push_back(s.ops.size());
      key = k;
    }
    s.position[&op] = s.ops.size();
    s.ops.push_back(&op);
    s.segment.push_back(s.firstOp.size() - 1);
  }
  return s;
}

/// The op after which a compute op reading the result of `collective` goes:
/// the last op before the segment that follows the segment the collective
/// is issued in (the end of the step when there is none).
Operation *afterCollective(Block &block, const Segments &seg, Operation *collective) {
  Operation *next = collective->getNextNode();
  while (next && !seg.position.count(next)) next = next->getNextNode();
  if (!next) return nullptr;
  unsigned target = seg.segment[seg.position.lookup(next)] + 1;
  if (target >= seg.firstOp.size()) return seg.ops.back();
  return seg.ops[seg.firstOp[target]]->getPrevNode();
}

/// The space of every bigc.param by name (a module's symbol lookup is a walk over all of them;
/// bigc-schedule moves ops but never changes a parameter's space).
struct ParamSpaces {
  llvm::StringMap<std::string> of;
  explicit ParamSpaces(ModuleOp module) {
    for (ParamOp p : module.getOps<ParamOp>()) of[p.getSymName()] = paramSpace(p).str();
  }
  /// "device" for a name that is no parameter.
  StringRef space(StringRef name) const {
    auto it = of.find(name);
    return it == of.end() ? StringRef(kDeviceSpace) : StringRef(it->second);
  }
  /// valueSpace(v), a bigc.get_param's from the map.
  StringRef valueSpace(Value v) const {
    return mlir::bigc::valueSpace(v, [&](StringRef name) { return space(name); });
  }
};

/// A bigc.param_copy to or from the nvme space (bigc-offload-nvme).
bool isNvmeCopy(ParamCopyOp pc, const ParamSpaces &spaces) {
  return spaces.space(pc.getFrom()) == kNvmeSpace || spaces.space(pc.getTo()) == kNvmeSpace;
}

/// Moves each bigc.adamw to just after the latest of: the definitions of
/// its operands (gradient, norm, loss scale, found_inf), and every reader of
/// a bigc.get_param of the parameter it updates or of the compute copy it
/// writes (`half`). Then each bigc.param_copy to just after the latest of:
/// the op that writes its source (the adamw whose `half` it is) and every
/// reader of its destination.
void hoistOptimizer(Block &block, const ParamSpaces &spaces) {
  // Readers of each parameter, and the adamw ops in order.
  llvm::StringMap<SmallVector<Operation *>> readers;
  SmallVector<AdamWOp> updates;
  SmallVector<ParamCopyOp> paramCopies;
  SmallVector<ParamAllGatherOp> paramGathers;
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<GetParamOp>(op)) {
      auto &list = readers[gp.getParam()];
      list.push_back(&op);
      for (Operation *user : gp->getUsers())
        if (Operation *u = inBlock(block, user)) list.push_back(u);
    } else if (auto a = dyn_cast<AdamWOp>(op)) {
      updates.push_back(a);
    } else if (auto pc = dyn_cast<ParamCopyOp>(op)) {
      if (!isNvmeCopy(pc, spaces)) paramCopies.push_back(pc); // (placeNvmeCopies places those)
    } else if (auto pg = dyn_cast<ParamAllGatherOp>(op)) {
      paramGathers.push_back(pg);
    }
  }
  // ZeRO-1/2: each gather of the updated weights moves to the next step, just before the first
  // reader of the whole copy it writes (bigc-schedule's prefetch then moves it a layer ahead): it
  // reads the shard the previous step's update wrote (the step's end joins every stream), so it
  // overlaps this step's forward instead of idling after the optimizer. The update of this step
  // then follows it (it reads the shard the update overwrites).
  llvm::StringMap<Operation *> firstReader;
  for (auto &[sym, list] : readers)
    for (Operation *r : list)
      if (!isa<GetParamOp>(r) && (!firstReader.lookup(sym) || r->isBeforeInBlock(firstReader[sym])))
        firstReader[sym] = r;
  SmallVector<ParamAllGatherOp> stayAfterUpdate;
  for (ParamAllGatherOp pg : paramGathers) {
    if (Operation *first = firstReader.lookup(pg.getTo())) {
      pg->moveBefore(first);
      for (StringRef tag : {StringRef(kPhaseAttrName), StringRef(kLayerAttrName), StringRef(kMicroBatchAttrName)})
        pg->removeAttr(tag);
      copyPlacementTags(first, pg);
      readers[pg.getFrom()].push_back(pg);
    } else {
      stayAfterUpdate.push_back(pg);
    }
  }
  paramGathers = stayAfterUpdate;
  // The target of each update, computed before anything moves. Reverse
  // order keeps updates that share a target in their original order.
  SmallVector<std::pair<AdamWOp, Operation *>> moves;
  Segments seg = computeSegments(block, /*skipOptimizer=*/true); // the ops that do not move
  for (AdamWOp a : updates) {
    Operation *after = nullptr;
    auto later = [&](Operation *op) {
      if (op && (!after || after->isBeforeInBlock(op))) after = op;
    };
    for (Value operand : a->getOperands())
      if (Operation *d = operand.getDefiningOp()) {
        later(inBlock(block, d));
        // A gradient reduced by a collective: the update waits for it a layer later, so that
        // the collective overlaps the backward of the layer before instead of stalling it.
        if (isa<AllReduceOp, ReduceScatterOp>(d)) later(afterCollective(block, seg, d));
      }
    for (std::optional<StringRef> sym : {std::optional<StringRef>(a.getParam()), a.getHalf()}) {
      if (!sym) continue;
      auto it = readers.find(*sym);
      if (it != readers.end())
        for (Operation *r : it->second) later(r);
    }
    // Never after another update: those move too (a layer after a collective can be where an
    // update still stands, e.g. in a pipeline stage whose backward ends in updates), and "after
    // it" would follow it to its new place, possibly before this update's gradient. The op before
    // it stays, and is at or after everything this update waits for (updates define nothing).
    while (after && isa<AdamWOp>(after)) after = after->getPrevNode();
    moves.push_back({a, after});
  }
  for (auto &[a, after] : llvm::reverse(moves)) {
    if (after)
      a->moveAfter(after);
    else
      a->moveBefore(&block.front());
  }
  // Each param_copy after the update that writes its source and after the
  // last reader of its destination (the positions of the updates are final);
  // then each param_all_gather still here (one whose whole copy nothing
  // reads) likewise, after the update or host-to-device copy of its shard.
  llvm::StringMap<Operation *> writerOf;
  for (AdamWOp a : updates)
    if (std::optional<StringRef> half = a.getHalf()) writerOf[*half] = a;
  auto placeAfterWriterAndReaders = [&](auto ops) {
    SmallVector<std::pair<Operation *, Operation *>> toMove;
    for (auto op : ops) {
      Operation *after = nullptr;
      auto later = [&](Operation *x) {
        if (x && x != op.getOperation() && (!after || after->isBeforeInBlock(x))) after = x;
      };
      later(writerOf.lookup(op.getFrom()));
      auto it = readers.find(op.getTo());
      if (it != readers.end())
        for (Operation *r : it->second) later(r);
      toMove.push_back({op, after});
    }
    for (auto &[op, after] : llvm::reverse(toMove))
      if (after) op->moveAfter(after);
  };
  placeAfterWriterAndReaders(paramCopies);
  for (ParamCopyOp pc : paramCopies) writerOf[pc.getTo()] = pc;
  placeAfterWriterAndReaders(paramGathers);
}

/// NVMe offload (bigc-offload-nvme): each write back of a host update's staging tensor goes right
/// after the update, and each read into it one update ahead: just before the previous update that
/// streams from the nvme space (issued with it, so the read overlaps that update and the compute
/// around it; the first read goes just before its own update). The copies of an update (or of a
/// chunk of one) carry its number (bigc.nvme_update). A staging tensor is free once its update and
/// write back are joined, two layer boundaries later (the host stream's rule): the host holds
/// about two layers' staging, whatever the depth; a chunked update's two staging sets take turns
/// (a read into a set waits for the update two chunks before, the emitter's cross-stream order).
void placeNvmeCopies(Block &block, const ParamSpaces &spaces) {
  llvm::DenseMap<int64_t, SmallVector<ParamCopyOp>> reads, writes; // by update number
  llvm::DenseMap<int64_t, SmallVector<CopyOp>> gradReads;          // (--offload-grads nvme)
  SmallVector<AdamWOp> updates;
  auto number = [](Operation *op) -> std::optional<int64_t> {
    if (auto t = op->getAttrOfType<IntegerAttr>(kNvmeUpdateAttrName)) return t.getInt();
    return std::nullopt;
  };
  for (Operation &op : block.without_terminator()) {
    if (auto pc = dyn_cast<ParamCopyOp>(op); pc && isNvmeCopy(pc, spaces)) {
      std::optional<int64_t> id = number(pc);
      if (!id) continue; // (a weight's read for a use: placeNvmeFetches)
      if (spaces.space(pc.getTo()) == kNvmeSpace)
        writes[*id].push_back(pc);
      else
        reads[*id].push_back(pc);
    } else if (auto a = dyn_cast<AdamWOp>(op)) {
      updates.push_back(a);
    } else if (auto c = dyn_cast<CopyOp>(op)) {
      if (std::optional<int64_t> id = number(c)) gradReads[*id].push_back(c);
    }
  }
  // The order before the moves (the updates and the gradients' writes do not move here; asking
  // the block after a move would renumber it).
  const llvm::DenseMap<Operation *, unsigned> pos = positions(block);
  Operation *previous = nullptr; // the last update with staging so far
  for (AdamWOp a : updates) {
    std::optional<int64_t> id = number(a);
    if (!id) continue;
    SmallVector<ParamCopyOp> in = reads.lookup(*id), out = writes.lookup(*id);
    SmallVector<CopyOp> grad = gradReads.lookup(*id);
    if (in.empty() && out.empty() && grad.empty()) continue;
    Operation *before = previous ? previous : a.getOperation();
    for (ParamCopyOp pc : in) pc->moveBefore(before);
    // A gradient's read back: not above its write to the drive (an update that does not wait for
    // the end of the backward can come before a later gradient is written); then before its update.
    for (CopyOp c : grad) {
      Operation *write = c.getX().getDefiningOp();
      c->moveBefore(write && write->getBlock() == &block && pos.lookup(before) < pos.lookup(write) ? a.getOperation()
                                                                                                   : before);
    }
    Operation *after = a;
    for (ParamCopyOp pc : out) {
      pc->moveAfter(after);
      after = pc;
    }
    previous = a;
  }
}

/// --offload-params nvme: each read of a weight from the nvme space into the staging tensor a
/// bigc.get_param reads (for the host-to-device copy before a use, which prefetchParams and
/// prefetchGathers have placed) goes to the start of the layer segment before the one that copy is
/// issued in: the read overlaps a layer's compute, and the copy waits for it (the emitter's
/// cross-stream conflicts). Its staging then lives about two layers.
void placeNvmeFetches(Block &block, const ParamSpaces &spaces) {
  llvm::StringMap<Operation *> firstRead; // staging tensor -> its bigc.get_param
  SmallVector<ParamCopyOp> fetches;
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<GetParamOp>(op)) {
      if (!firstRead.count(gp.getParam())) firstRead[gp.getParam()] = &op;
    } else if (auto pc = dyn_cast<ParamCopyOp>(op); pc && isNvmeCopy(pc, spaces)) {
      fetches.push_back(pc);
    }
  }
  Segments seg = computeSegments(block);
  // The order before the moves: a move invalidates the block's order, and asking it again after
  // each would renumber the block each time (a 190-layer plan: seconds). The compute ops and the
  // reads compared here do not move.
  const llvm::DenseMap<Operation *, unsigned> pos = positions(block);
  for (ParamCopyOp pc : fetches) {
    Operation *use = firstRead.lookup(pc.getTo());
    if (!use) continue; // (an update's staging: placeNvmeCopies placed it)
    Operation *target = use;
    Operation *o = use;
    while (o && !seg.position.count(o)) o = o->getNextNode();
    if (o) {
      unsigned s = seg.segment[seg.position.lookup(o)];
      Operation *start = seg.ops[seg.firstOp[s > 0 ? s - 1 : 0]];
      if (pos.lookup(start) < pos.lookup(use)) target = start;
    }
    pc->moveBefore(target);
  }
}

/// ZeRO-2/3 with micro-batches: the add of each micro-batch's reduce-scattered gradient shard
/// into its fp32 accumulator (and the cast before it, ops marked bigc.grad_accum by bigc-shard)
/// moves up to where an update would read that shard: a layer after the collective is issued, so
/// that it overlaps compute, instead of the start of the next micro-batch. Otherwise the 16-bit
/// shards of a whole micro-batch's backward are live together.
void accumulateShardsEarly(Block &block) {
  Segments seg = computeSegments(block);
  llvm::DenseSet<Operation *> fromShard; // accumulation ops that read a reduce-scatter's shard
  SmallVector<std::pair<Operation *, Operation *>> moves;
  for (Operation &op : block.without_terminator()) {
    if (!isGradAccum(&op) || !isa<CastOp, AddOp>(op)) continue;
    Operation *after = nullptr;
    bool shard = false;
    for (Value v : op.getOperands()) {
      Operation *d = v.getDefiningOp() ? inBlock(block, v.getDefiningOp()) : nullptr;
      if (!d) continue;
      Operation *at = d;
      if (isa<ReduceScatterOp>(d)) {
        shard = true;
        if (Operation *a = afterCollective(block, seg, d)) at = a->isBeforeInBlock(d) ? d : a;
      }
      shard |= fromShard.count(d) > 0;
      if (!after || after->isBeforeInBlock(at)) after = at;
    }
    if (!shard || !after) continue;
    fromShard.insert(&op);
    if (after->isBeforeInBlock(&op))
      moves.push_back({&op, after}); // (an add right after its cast still follows the cast's move)
  }
  // In order: an add moves after the cast it reads, which moved before it. The place is checked
  // again against the operands where they are now: an anchor (the op before a segment) may be an
  // accumulation that moved up itself (interleaved pipelines with ZeRO 2/3 and several buckets
  // interleave micro-batches' segments), which would put the op above its collective.
  for (auto &[op, after] : moves) {
    Operation *at = after;
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp() ? inBlock(block, v.getDefiningOp()) : nullptr)
        if (at->isBeforeInBlock(d)) at = d;
    if (at->isBeforeInBlock(op)) op->moveAfter(at);
  }
}

/// bigc-offload's norm of one gradient (bigc.partial_norm) reads it where it is made; one whose
/// gradient a collective makes moves a layer later (as an update would wait for it), so that the
/// compute stream does not wait for the collective just issued, though not past the reduction
/// that reads it. It takes the placement tags of the op it now follows (its segment's).
void deferPartialNorms(Block &block) {
  Segments seg = computeSegments(block);
  llvm::DenseSet<Operation *> moving; // (a target is none of these: they move)
  for (Operation &op : block.without_terminator())
    if (Operation *d = op.hasAttr(kPartialNormAttrName) ? op.getOperand(0).getDefiningOp() : nullptr;
        d && d->getBlock() == &block && isa<AllReduceOp, ReduceScatterOp>(d))
      moving.insert(&op);
  SmallVector<std::pair<Operation *, Operation *>> moves;
  for (Operation &op : block.without_terminator()) {
    if (!moving.count(&op)) continue;
    Operation *target = afterCollective(block, seg, op.getOperand(0).getDefiningOp());
    for (Operation *user : op.getUsers())
      if (Operation *u = inBlock(block, user); target && u && !target->isBeforeInBlock(u)) target = u->getPrevNode();
    while (target && moving.count(target)) target = target->getPrevNode();
    if (target && target != &op && op.isBeforeInBlock(target)) moves.push_back({&op, target});
  }
  for (auto &[op, target] : llvm::reverse(moves)) {
    op->moveAfter(target);
    for (StringRef tag : {StringRef(kPhaseAttrName), StringRef(kLayerAttrName), StringRef(kMicroBatchAttrName)})
      op->removeAttr(tag);
    copyPlacementTags(target, op);
  }
}

/// A device copy of a parameter (bigc-offload with params=host) and the
/// bigc.get_param it reads.
GetParamOp fetchedParam(Operation *op, const ParamSpaces &spaces) {
  auto c = dyn_cast<CopyOp>(op);
  if (!c || opSpace(c) != kDeviceSpace) return {};
  auto gp = c.getX().getDefiningOp<GetParamOp>();
  if (!gp || spaces.space(gp.getParam()) != kHostSpace) return {};
  return gp;
}

/// Prefetch: each host-to-device copy of a parameter moves (with its
/// bigc.get_param) to the start of the segment before the one of its first
/// user, so that the transfer overlaps the previous layer's compute.
void prefetchParams(Block &block, const ParamSpaces &spaces) {
  Segments seg = computeSegments(block);
  SmallVector<std::pair<Operation *, Operation *>> moves;
  for (Operation &op : block.without_terminator()) {
    GetParamOp gp = fetchedParam(&op, spaces);
    // (an offloaded activation's way back, bigc-offload-activations: the same, without a get_param)
    auto act = dyn_cast<CopyOp>(op);
    const bool activation = act && opSpace(act) == kDeviceSpace && act.getX().getDefiningOp<CopyOp>() &&
                            spaces.valueSpace(act.getX()) == kHostSpace;
    if (!gp && !activation) continue;
    Operation *first = firstUser(block, &op);
    auto it = first ? seg.position.find(first) : seg.position.end();
    if (it == seg.position.end()) continue;
    unsigned s = seg.segment[it->second];
    if (s == 0) continue;
    moves.push_back({&op, seg.ops[seg.firstOp[s - 1]]});
  }
  // Decided on the order before the moves (each copy and its get_param move once, the targets
  // not at all): asking the block after each move would renumber it each time.
  const llvm::DenseMap<Operation *, unsigned> pos = positions(block);
  for (auto &[copy, target] : moves) {
    if (pos.lookup(copy) > pos.lookup(target)) {
      auto gp = cast<CopyOp>(copy).getX().getDefiningOp();
      copy->moveBefore(target);
      // (copy is now just before target: before gp when gp comes after target)
      if (gp->getBlock() == &block && pos.lookup(gp) > pos.lookup(target)) {
        if (!isa<GetParamOp>(gp)) { // an activation's host copy is made in the forward: stay after it
          copy->moveAfter(gp);
          continue;
        }
        gp->moveBefore(copy);
      }
    }
  }
}

/// Moves the ops of `block` that define operands of `op` (and theirs, in
/// turn) from after `op` to just before it, keeping their order.
void moveDefsBefore(Block &block, Operation *op) {
  for (Value in : op->getOperands())
    if (Operation *d = in.getDefiningOp(); d && d->getBlock() == &block && op->isBeforeInBlock(d)) {
      d->moveBefore(op);
      moveDefsBefore(block, d);
    }
}

/// ZeRO-3 prefetch: each all-gather of weights moves (with the reads of
/// its shards) to the start of the segment `ahead` segments before the one
/// of its first user, so that it overlaps the compute of the layers before
/// (0: it stays just before its first user).
void prefetchGathers(Block &block, int64_t ahead) {
  if (ahead <= 0) return;
  Segments seg = computeSegments(block);
  SmallVector<std::pair<Operation *, Operation *>> moves;
  // The first reader of each persistent tensor (a ZeRO-1/2 gather's users read it by symbol).
  llvm::StringMap<Operation *> firstReader;
  for (Operation &op : block.without_terminator())
    if (auto gp = dyn_cast<GetParamOp>(op))
      for (Operation *user : gp->getUsers())
        if (Operation *u = inBlock(block, user);
            u && (!firstReader.lookup(gp.getParam()) || u->isBeforeInBlock(firstReader[gp.getParam()])))
          firstReader[gp.getParam()] = u;
  // A weight's row tiles (bigc-tile): the gathers of one shard read after its first go one tile
  // ahead, before the first reader of the tile gathered before (two tiles alive, not all).
  llvm::DenseMap<Value, Operation *> lastTile; // shard read -> its latest tile gather so far
  for (Operation &op : block.without_terminator()) {
    if (!isa<AllGatherOp, ParamAllGatherOp>(op)) continue;
    // Weights only (ZeRO over "dp"): a tensor-parallel gather of activations is on the critical
    // path of the very computation that produces its input; it runs where it is.
    if (auto g = op.getAttrOfType<StringAttr>("group"); g && g.getValue() != kDpAxis) continue;
    if (auto ag = dyn_cast<AllGatherOp>(op); ag && ag.getTile()) {
      Operation *&prev = lastTile[ag.getInputs().front()];
      Operation *previous = prev;
      prev = &op;
      if (previous) {
        if (Operation *first = firstUser(block, previous)) moves.push_back({&op, first});
        continue;
      }
    }
    Operation *first = nullptr;
    if (auto pg = dyn_cast<ParamAllGatherOp>(op)) first = firstReader.lookup(pg.getTo());
    first = firstUser(block, &op, first);
    auto it = first ? seg.position.find(first) : seg.position.end();
    if (it == seg.position.end()) continue;
    unsigned s = seg.segment[it->second];
    unsigned target = s >= unsigned(ahead) ? s - unsigned(ahead) : 0;
    if (target == s) continue;
    moves.push_back({&op, seg.ops[seg.firstOp[target]]});
  }
  // Decided on the order before the moves, then moved in one go: each gather, after the ops of the
  // block that define its operands (and theirs) and stand at or after its target, goes before its
  // target. (Asking the block's order after each move renumbered it every few moves: a layer's
  // gathers all move before one op; the 1T plan spent 65% of its compile there.)
  const llvm::DenseMap<Operation *, unsigned> pos = positions(block);
  llvm::DenseMap<Operation *, Operation *> targetOf; // op -> the op it goes before (the earliest)
  llvm::MapVector<Operation *, SmallVector<Operation *>> before;
  std::function<void(Operation *, Operation *)> place = [&](Operation *op, Operation *target) {
    for (Value in : op->getOperands())
      if (Operation *d = in.getDefiningOp(); d && d->getBlock() == &block && pos.lookup(d) >= pos.lookup(target))
        if (Operation *t = targetOf.lookup(d); !t || pos.lookup(t) > pos.lookup(target)) place(d, target);
    if (Operation *t = targetOf.lookup(op)) {
      if (pos.lookup(t) <= pos.lookup(target)) return;
      llvm::erase(before[t], op);
    }
    targetOf[op] = target;
    before[target].push_back(op);
  };
  for (auto &[gather, target] : moves)
    if (pos.lookup(gather) > pos.lookup(target)) place(gather, target);
  for (auto &[target, ops] : before)
    for (Operation *op : ops) op->moveBefore(target);
}

/// Tensor-parallel collectives (group "tp", stream comm_tp) are on the critical path: the compute
/// that follows needs their result. Each is issued as soon as its input exists: right after the
/// op that produces it (bringing along the reshapes and transposes bigc-shard put in between).
/// One whose input comes from an earlier phase than its first compute reader (a backward
/// re-gather of a forward activation) is issued one matmul or attention ahead of that reader
/// (within the reader's segment), so that the whole tensor is not kept alive longer than that. The compute that does
/// not read it runs while it is in flight: the column-parallel backward's re-gather overlaps the input-gradient matmul,
/// whose reduction overlaps the weight-gradient matmul, as in Megatron-LM.
void hoistTpCollectives(Block &block) {
  Segments seg = computeSegments(block);
  SmallVector<Operation *> colls;
  for (Operation &op : block.without_terminator())
    if (isCollective(&op) && collectiveStream(&op) == kTpCommStream) colls.push_back(&op);
  auto layoutOnly = [](Operation *op) { return isa<ReshapeOp, TransposeOp>(op) && op->hasOneUse(); };
  auto heavy = [](Operation *op) { return isa<MatmulOp, AttentionOp, AttentionGradOp>(op); };
  for (Operation *c : colls) {
    Operation *first = firstUser(block, c, nullptr, [&](Operation *u) { return seg.position.count(u) > 0; });
    if (!first) continue;
    const unsigned at = seg.position.lookup(first);
    const unsigned segStart = seg.firstOp[seg.segment[at]];
    // The op after the latest producer of an input (through layout-only ops), and whether every
    // input comes from an earlier phase (the forward, for a backward re-gather).
    Operation *ready = nullptr;
    bool earlierPhase = true;
    for (Value v : c->getOperands()) {
      Operation *d = v.getDefiningOp();
      while (d && d->getBlock() == &block && layoutOnly(d) && d->getOperand(0).getDefiningOp())
        d = d->getOperand(0).getDefiningOp();
      if (!d || d->getBlock() != &block) continue;
      earlierPhase &= segmentKey(d).first != segmentKey(first).first;
      if (Operation *next = d->getNextNode(); next && (!ready || ready->isBeforeInBlock(next))) ready = next;
    }
    Operation *target = ready;
    if (!ready || earlierPhase) {
      unsigned k = at;
      while (k > segStart && !heavy(seg.ops[k - 1])) --k;
      target = seg.ops[k > segStart ? k - 1 : segStart];
    }
    if (target == c || !target->isBeforeInBlock(c)) continue;
    c->moveBefore(target);
    moveDefsBefore(block, c);
  }
}

/// The stream of a transfer-aware op from the spaces it connects.
StringRef streamOf(Operation *op, const ParamSpaces &spaces) {
  if (isCollective(op)) return collectiveStream(op);
  if (isP2P(op)) return kP2PStream;
  auto between = [](StringRef from, StringRef to) -> StringRef {
    if (from == kNvmeSpace || to == kNvmeSpace) return kNvmeStream;
    if (from == to) return from == kHostSpace ? StringRef(kHostStream) : StringRef(kComputeStream);
    return to == kHostSpace ? StringRef(kD2HStream) : StringRef(kH2DStream);
  };
  if (auto c = dyn_cast<CopyOp>(op)) return between(spaces.valueSpace(c.getX()), opSpace(op));
  if (auto pc = dyn_cast<ParamCopyOp>(op)) {
    return between(spaces.space(pc.getFrom()), spaces.space(pc.getTo()));
  }
  if (opSpace(op) == kHostSpace) return kHostStream;
  return kComputeStream;
}

/// Streams, events and waits (see Passes.td). Returns the number of events.
int64_t assignStreamsAndWaits(Block &block, ModuleOp module, const ParamSpaces &spaces) {
  MLIRContext *ctx = module.getContext();
  // Streams and events.
  int64_t events = 0;
  for (Operation &op : block.without_terminator()) {
    if (isa<GetParamOp>(op)) continue;
    op.removeAttr(kEventAttrName);
    StringRef stream = streamOf(&op, spaces);
    if (stream == kComputeStream) {
      op.removeAttr(kStreamAttrName);
      continue;
    }
    op.setAttr(kStreamAttrName, StringAttr::get(ctx, stream));
    op.setAttr(kEventAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), events++));
  }
  if (events == 0) return 0;

  // Data waits: before the first compute op that reads a side-stream
  // result (or a parameter a side-stream op wrote earlier in this step).
  llvm::DenseSet<Operation *> joined;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> waitBefore;
  llvm::StringMap<Operation *> sideWriter; // parameter -> last side op writing it
  auto symbolsWritten = [](Operation *op) {
    SmallVector<StringRef> out;
    if (auto a = dyn_cast<AdamWOp>(op)) {
      out.push_back(a.getParam());
      if (auto h = a.getHalf()) out.push_back(*h);
    } else if (auto pc = dyn_cast<ParamCopyOp>(op)) {
      out.push_back(pc.getTo());
    } else if (auto lsu = dyn_cast<LossScaleUpdateOp>(op)) {
      out.push_back(lsu.getScale());
      out.push_back(lsu.getGood());
    } else if (auto pg = dyn_cast<ParamAllGatherOp>(op)) {
      out.push_back(pg.getTo());
    }
    return out;
  };
  llvm::DenseMap<Operation *, Operation *> dataWaiter; // side op -> the compute op that joins it
  for (Operation &op : block.without_terminator()) {
    if (isa<GetParamOp, WaitOp>(op)) continue;
    if (isSideStream(&op)) {
      for (StringRef sym : symbolsWritten(&op)) sideWriter[sym] = &op;
      continue;
    }
    SmallVector<int64_t> need;
    auto require = [&](Operation *side) {
      if (side && isSideStream(side) && joined.insert(side).second) {
        need.push_back(opEvent(side));
        dataWaiter[side] = &op;
      }
    };
    for (Value v : op.getOperands()) {
      Operation *d = v.getDefiningOp();
      if (!d) continue;
      if (auto gp = dyn_cast<GetParamOp>(d))
        require(sideWriter.lookup(gp.getParam()));
      else
        require(inBlock(block, d));
    }
    if (!need.empty()) waitBefore[&op] = need;
  }

  // Memory waits: every other side-stream op is joined at a layer boundary
  // after it (d2h copies read device memory: the next boundary; host work
  // and host-to-device copies: the second), where the memory it touches may
  // be reused; none left: the end of the step. A side op whose first reader
  // is in a later segment than that boundary (a gradient's reduce-scatter
  // read only by the fp16 overflow check or the clipping norm at the end of
  // the backward) is joined at the boundary instead: what it reads (the
  // whole gradient) is free from there, not kept until its result is read.
  Segments seg = computeSegments(block);
  // The first segment op at or after each op (one backward pass: the optimizer's tail can hold
  // tens of thousands of side ops after the last compute op).
  llvm::DenseMap<Operation *, Operation *> nextSegmentOp;
  {
    Operation *next = nullptr;
    for (Operation &o : llvm::reverse(block)) {
      if (seg.position.count(&o)) next = &o;
      nextSegmentOp[&o] = next;
    }
  }
  // The segment of a compute op (or of the first segment op after it).
  auto segmentAt = [&](Operation *op) -> unsigned {
    if (Operation *o = nextSegmentOp.lookup(op)) return seg.segment[seg.position.lookup(o)];
    return unsigned(seg.firstOp.size());
  };
  auto moveDataWait = [&](Operation *side, Operation *target) {
    auto it = dataWaiter.find(side);
    auto &list = waitBefore[it->second];
    list.erase(std::remove(list.begin(), list.end(), opEvent(side)), list.end());
    if (list.empty()) waitBefore.erase(it->second);
    waitBefore[target].push_back(opEvent(side));
  };
  // Side ops after the last layer boundary (the optimizer's tail: host updates, copies back):
  // each is joined before the op two later on its stream is issued, so that at most two of them
  // hold memory at once (the compute stream is idle there: the waits cost nothing).
  llvm::StringMap<SmallVector<Operation *>> tail;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> tailWaitBefore;
  for (Operation &op : block.without_terminator()) {
    if (!isSideStream(&op)) continue;
    // A gather into a persistent weight frees nothing: the end of the step joins it (the next
    // step's reads of the weight come after that).
    if (isa<ParamAllGatherOp>(op)) continue;
    // (nvme copies: the next boundary too; their staging is freed with the host update's join
    // anyway, and fewer of them fall into the tail below, where each is joined in turn.)
    unsigned boundaries = opStream(&op) == kD2HStream || opStream(&op) == kCommStream || opStream(&op) == kP2PStream ||
                                  opStream(&op) == kNvmeStream
                              ? 1
                              : 2;
    // The first compute op after `op`.
    Operation *next = op.getNextNode() ? nextSegmentOp.lookup(op.getNextNode()) : nullptr;
    // The start of the `boundaries`-th segment after the one `next` is in
    // (at least one compute op runs alongside the transfer).
    unsigned target = next ? seg.segment[seg.position[next]] + boundaries : unsigned(seg.firstOp.size());
    if (joined.count(&op)) {
      if (dataWaiter.count(&op) && target < seg.firstOp.size() && segmentAt(dataWaiter[&op]) > target)
        moveDataWait(&op, seg.ops[seg.firstOp[target]]);
      continue;
    }
    if (target >= seg.firstOp.size()) {
      auto &list = tail[opStream(&op)];
      if (list.size() >= 2) {
        Operation *old = list[list.size() - 2];
        tailWaitBefore[&op].push_back(opEvent(old));
        joined.insert(old);
      }
      list.push_back(&op);
      continue;
    }
    waitBefore[seg.ops[seg.firstOp[target]]].push_back(opEvent(&op));
    joined.insert(&op);
  }
  for (auto &[op, list] : tailWaitBefore)
    for (int64_t e : list) waitBefore[op].push_back(e);

  OpBuilder b(ctx);
  for (auto &[op, list] : waitBefore) {
    llvm::sort(list);
    b.setInsertionPoint(op);
    auto w = b.create<WaitOp>(op->getLoc(), b.getDenseI64ArrayAttr(list));
    if (Attribute phase = op->getAttr(kPhaseAttrName)) w->setAttr(kPhaseAttrName, phase);
  }
  return events;
}

struct BigcSchedulePass : public mlir::bigc::impl::BigcScheduleBase<BigcSchedulePass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func) {
      module.emitError("bigc-schedule: the module has no func.func "
                       "@train_step (run bigc-autodiff first)");
      return signalPassFailure();
    }
    if (func.isExternal() || !func.getBody().hasOneBlock()) {
      func.emitError("bigc-schedule: @train_step must have a body of one "
                     "block");
      return signalPassFailure();
    }
    Block &block = func.front();
    // Idempotent: waits and events of an earlier run are recomputed.
    for (Operation &op : llvm::make_early_inc_range(block))
      if (isa<WaitOp>(op)) op.erase();
    sinkToFirstUse(block);
    const ParamSpaces spaces(module);
    hoistOptimizer(block, spaces);
    placeNvmeCopies(block, spaces);
    accumulateShardsEarly(block);
    prefetchParams(block, spaces);
    prefetchGathers(block, prefetch);
    hoistTpCollectives(block);
    deferPartialNorms(block);
    placeNvmeFetches(block, spaces);
    assignStreamsAndWaits(block, module, spaces);
  }
};

} // namespace
