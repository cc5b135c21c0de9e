//===- Recompute.cpp - bigc-recompute -------------------------------------===//
//
// Activation recomputation (checkpointing), decided at compile time. See the
// description in Passes.td for the policies and why.
//
//   saved value   a result of a forward op used by a backward op; it is what
//                 the forward must keep alive for the backward.
//   dropped       a saved value the policy chooses not to keep: its backward
//                 uses are rewired to a clone of its defining op, made right
//                 before its first backward user from kept values (recursively
//                 cloning the forward values it needs that are not kept,
//                 memoized), marked `bigc.recompute` and phase "backward".
//
// Sequence parallelism (Megatron-SP): the whole-sequence input of a
// column-parallel matmul is gathered from the tensor ranks' parts
// (bigc.tp_all_gather with grad "reduce_scatter"). Under every policy, none
// included, the backward re-gathers it from this rank's part instead of
// keeping the whole tensor: the part stays alive (1/tp of the bytes), the
// gather is cloned before its first backward user, as Megatron-LM does.
//
// The decision is per op: all saved results of an op are kept or dropped
// together (a layernorm's y, mean and rstd are recomputed by one clone).
// The module records what was decided:
//   bigc.recompute = {policy, candidates, dropped, clones, saved_bytes,
//                     flops_added, forward_flops, backward_flops}
//
//===----------------------------------------------------------------------===//

#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h" // kLayerAttrName
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCRECOMPUTE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// A weight read as row tiles (bigc-tile): a bigc.split of a bigc.get_param, a parameter read.
bool isWeightTiles(Operation *op) { return isa<SplitOp>(op) && op->getOperand(0).getDefiningOp<GetParamOp>(); }

/// A forward op whose results may be recomputed (not a parameter read, not a message received from
/// another pipeline stage: those are kept).
bool isForwardOp(Operation *op) {
  return op && !isa<GetParamOp>(op) && !isWeightTiles(op) && !isP2P(op) && phaseOf(op) == kForwardPhase &&
         !isRecomputed(op);
}

/// Elementwise and normalisation ops: cheap to recompute (a few FLOPs per
/// element) and large (their results have the activations' size).
bool isCheapOp(Operation *op) {
  return isa<LayerNormOp, GeluOp, BiasAddOp, AddOp, ScaleOp, MulOp, ReshapeOp, TransposeOp, RmsNormOp, SiluOp, SwigluOp,
             GegluOp, RopeOp>(op) ||
         op->getName().getStringRef() == "bigc.cast";
}

struct SavedOp {
  Operation *op;
  int64_t bytes = 0;      ///< bytes of its saved results
  int64_t chainFlops = 0; ///< FLOPs to recompute it when every other saved value is kept
  int64_t order = 0;      ///< program order
};

class Recompute {
public:
  Recompute(Block &block) : block(block) {}

  /// Finds the saved values and their costs.
  void analyse() {
    int64_t order = 0;
    for (Operation &op : block.without_terminator()) {
      if (!isForwardOp(&op)) continue;
      int64_t bytes = 0;
      bool usedByBackward = false;
      for (Value r : op.getResults()) {
        bool used = llvm::any_of(r.getUsers(), [&](Operation *u) {
          Operation *top = block.findAncestorOpInBlock(*u);
          return top && phaseOf(top) == kBackwardPhase;
        });
        if (used) bytes += typeBytes(r.getType());
        usedByBackward |= used;
      }
      ++order;
      if (!usedByBackward) continue;
      SavedOp s;
      s.op = &op;
      s.bytes = bytes;
      s.order = order;
      savedIndex[&op] = saved.size();
      saved.push_back(s);
    }
    for (SavedOp &s : saved) {
      llvm::DenseSet<Operation *> visited;
      s.chainFlops = chainFlops(s.op, visited);
    }
  }

  /// Sequence parallelism: every saved whole-sequence gather is re-gathered
  /// in the backward (all policies); its input, this rank's part, is kept.
  void chooseRegather() {
    for (SavedOp &s : saved)
      if (auto g = dyn_cast<TpAllGatherOp>(s.op); g && g.getGrad() == "reduce_scatter") {
        dropped.insert(s.op);
        regathered.insert(s.op);
        regatherInputs.insert(g.getX());
      }
  }

  /// full: in each transformer block (ops with bigc.layer), keep only the
  /// values some forward op outside the block reads (the residual stream
  /// leaving it, i.e. the next block's input); ops outside blocks are kept.
  void chooseFull() {
    for (SavedOp &s : saved)
      if (insideBlock(s.op)) dropped.insert(s.op);
  }

  /// selective: drop the saved results of cheap ops whose inputs are kept
  /// anyway (or are themselves cheaply recomputed from kept values): no
  /// extra bytes stay alive, only a few FLOPs per element are added.
  void chooseSelective() {
    for (SavedOp &s : saved)
      if (isCheapOp(s.op) && llvm::all_of(s.op->getOperands(), [&](Value v) { return cheaplyAvailable(v); }))
        dropped.insert(s.op);
  }

  /// auto: the candidates are what `full` drops (so that dropping them all
  /// is `full`: a block's recomputation starts from its kept input and never
  /// chains into other blocks). They are ranked by bytes saved per FLOP
  /// added (alone, every other saved value kept); the first `n` (all when
  /// n < 0) are dropped.
  void chooseAuto(int64_t n) {
    SmallVector<SavedOp *> ranked;
    for (SavedOp &s : saved)
      if (s.bytes > 0 && insideBlock(s.op) && !regathered.count(s.op)) ranked.push_back(&s);
    std::stable_sort(ranked.begin(), ranked.end(), [](SavedOp *a, SavedOp *b) {
      // a.bytes / a.flops > b.bytes / b.flops, without dividing by zero.
      __int128 l = (__int128)a->bytes * std::max<int64_t>(b->chainFlops, 1);
      __int128 r = (__int128)b->bytes * std::max<int64_t>(a->chainFlops, 1);
      if (l != r) return l > r;
      return a->bytes > b->bytes;
    });
    candidates = int64_t(ranked.size());
    if (n < 0 || n > candidates) n = candidates;
    for (int64_t i = 0; i < n; ++i) dropped.insert(ranked[size_t(i)]->op);
  }

  /// Rewires every backward use of a dropped value to its recomputation.
  void rewrite() {
    SmallVector<Operation *> backward;
    for (Operation &op : block.without_terminator())
      if (phaseOf(&op) == kBackwardPhase && !isRecomputed(&op)) backward.push_back(&op);
    for (Operation *user : backward)
      for (OpOperand &use : user->getOpOperands()) {
        Operation *def = use.get().getDefiningOp();
        if (def && dropped.count(def)) use.set(materialize(use.get(), user));
      }
    for (Operation *op : dropped) savedBytes += saved[savedIndex[op]].bytes;
    // The parts the re-gathers read stay alive when nothing else kept them.
    for (Value v : regatherInputs)
      if (Operation *def = v.getDefiningOp(); isForwardOp(def) && !isSaved(def) && !dropped.count(def))
        savedBytes -= typeBytes(v.getType());
  }

  /// FLOPs of the ops of one phase (clones excluded).
  int64_t phaseFlops(StringRef phase) const {
    int64_t f = 0;
    for (Operation &op : block.without_terminator())
      if (phaseOf(&op) == phase && !isRecomputed(&op)) f += opCost(&op).flops;
    return f;
  }

  int64_t numCandidates() const { return candidates >= 0 ? candidates : int64_t(saved.size()); }

  Block &block;
  std::vector<SavedOp> saved;
  llvm::DenseMap<Operation *, size_t> savedIndex;
  llvm::SetVector<Operation *> dropped;
  llvm::SetVector<Operation *> regathered; ///< sequence-parallel gathers redone in the backward
  llvm::DenseSet<Value> regatherInputs;    ///< their inputs: kept unless their op is dropped
  int64_t candidates = -1;
  int64_t savedBytes = 0, flopsAdded = 0, clones = 0;

private:
  llvm::DenseMap<Value, Value> recomputed;
  llvm::DenseMap<Value, bool> cheapMemo;

  bool isSaved(Operation *op) const { return savedIndex.count(op); }

  /// An op of a transformer block (bigc.layer) whose results no forward op
  /// outside its block reads: not the residual stream the block passes on.
  bool insideBlock(Operation *op) const {
    Attribute layer = op->getAttr(kLayerAttrName);
    if (!layer) return false;
    for (Value r : op->getResults())
      for (Operation *u : r.getUsers()) {
        Operation *top = block.findAncestorOpInBlock(*u);
        if (top && isForwardOp(top) && top->getAttr(kLayerAttrName) != layer) return false;
      }
    return true;
  }

  /// The value is there in the backward without recomputing anything
  /// expensive: an argument, a parameter read, a kept saved value, or the
  /// result of a cheap op of such values.
  bool cheaplyAvailable(Value v) {
    Operation *def = v.getDefiningOp();
    if (!isForwardOp(def)) return true;
    if (isSaved(def) && !dropped.count(def)) return true;
    auto it = cheapMemo.find(v);
    if (it != cheapMemo.end()) return it->second;
    bool ok = isCheapOp(def) && llvm::all_of(def->getOperands(), [&](Value o) { return cheaplyAvailable(o); });
    cheapMemo[v] = ok;
    return ok;
  }

  /// FLOPs of recomputing `op` and the forward values it needs that are not
  /// saved (saved values are assumed kept).
  int64_t chainFlops(Operation *op, llvm::DenseSet<Operation *> &visited) {
    if (!visited.insert(op).second) return 0;
    int64_t f = opCost(op).flops;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (isForwardOp(def) && !isSaved(def)) f += chainFlops(def, visited);
    }
    return f;
  }

  /// Kept for the backward: not produced by a forward op (an argument, a
  /// parameter read, a backward value) or a saved value (or a re-gather's
  /// input) whose op is not dropped.
  bool isKept(Value v) const {
    Operation *def = v.getDefiningOp();
    if (!isForwardOp(def)) return true;
    return (isSaved(def) || regatherInputs.count(v)) && !dropped.count(def);
  }

  /// `v` in the backward at `before`: itself when kept, else a clone of its
  /// defining op (made once, before the first user that needs it).
  Value materialize(Value v, Operation *before) {
    if (isKept(v)) return v;
    if (Value c = recomputed.lookup(v)) return c;
    Operation *def = v.getDefiningOp();
    IRMapping map;
    for (Value o : def->getOperands()) map.map(o, materialize(o, before));
    OpBuilder b(before);
    Operation *clone = b.clone(*def, map);
    clone->setAttr(kRecomputeAttrName, b.getUnitAttr());
    clone->setAttr(kPhaseAttrName, b.getStringAttr(kBackwardPhase));
    for (auto [orig, copy] : llvm::zip(def->getResults(), clone->getResults())) recomputed[orig] = copy;
    flopsAdded += opCost(clone).flops;
    ++clones;
    return recomputed.lookup(v);
  }
};

struct BigcRecomputePass : public mlir::bigc::impl::BigcRecomputeBase<BigcRecomputePass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string p = policy;
    if (p != "none" && p != "full" && p != "selective" && p != "auto") {
      module.emitError("bigc-recompute: unknown policy '") << p << "' (expected none, full, selective or auto)";
      return signalPassFailure();
    }
    if (drop < -1) {
      module.emitError("bigc-recompute: drop must be >= 0 (or -1: every "
                       "candidate), got ")
          << drop.getValue();
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      module.emitError("bigc-recompute: the module has no func.func "
                       "@train_step of one block (run bigc-autodiff first)");
      return signalPassFailure();
    }
    Recompute rc(func.front());
    rc.analyse();
    int64_t forwardFlops = rc.phaseFlops(kForwardPhase);
    int64_t backwardFlops = rc.phaseFlops(kBackwardPhase);
    rc.chooseRegather();
    if (p == "full")
      rc.chooseFull();
    else if (p == "selective")
      rc.chooseSelective();
    else if (p == "auto")
      rc.chooseAuto(drop);
    rc.rewrite();

    Builder b(module.getContext());
    NamedAttribute fields[] = {
        b.getNamedAttr("policy", b.getStringAttr(p)),
        b.getNamedAttr("candidates", b.getI64IntegerAttr(rc.numCandidates())),
        b.getNamedAttr("dropped", b.getI64IntegerAttr(int64_t(rc.dropped.size()))),
        b.getNamedAttr("clones", b.getI64IntegerAttr(rc.clones)),
        b.getNamedAttr("saved_bytes", b.getI64IntegerAttr(rc.savedBytes)),
        b.getNamedAttr("flops_added", b.getI64IntegerAttr(rc.flopsAdded)),
        b.getNamedAttr("forward_flops", b.getI64IntegerAttr(forwardFlops)),
        b.getNamedAttr("backward_flops", b.getI64IntegerAttr(backwardFlops)),
    };
    SmallVector<NamedAttribute> all(std::begin(fields), std::end(fields));
    if (!rc.regathered.empty()) // sequence parallelism: gathers redone in the backward
      all.push_back(b.getNamedAttr("regathered", b.getI64IntegerAttr(int64_t(rc.regathered.size()))));
    module->setAttr(kRecomputeAttrName, b.getDictionaryAttr(all));
  }
};

} // namespace
