//===- Pipeline.cpp - bigc-pipeline ---------------------------------------===//
//
// Pipeline parallelism: the training step (after bigc-grad-accum) split into
// P stages along its layers, and this module made stage `stage` of it: its
// ops, its parameters, a send/recv for every value crossing stages, its
// micro-batches in the schedule's order (see the description in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcAttrNames.h"
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
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCPIPELINE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

// Nominal rates for balancing the stages (only the ratios of the stages' times matter).
constexpr double kFlopsPerS = 100e12, kBytesPerS = 1e12;

bool isZeroOperand(Operation *op) { return op->getNumOperands() == 0; }

struct BigcPipelinePass : public mlir::bigc::impl::BigcPipelineBase<BigcPipelinePass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  ModuleOp module;
  Block *block = nullptr;
  int64_t P = 1, S = 0, L = 0, K = 1;
  std::vector<Operation *> ops; // the block's ops in order, the terminator aside

  /// Stage of every op under `stageOfLayer` (size L): layered ops on their layer's stage, others
  /// after their operands (forward: the latest; backward: the earliest; none: `fwdDefault` /
  /// `bwdDefault`), reads of parameters and fills on their first reader's stage.
  llvm::DenseMap<Operation *, int64_t> assign(const std::vector<int64_t> &stageOfLayer, int64_t fwdDefault,
                                              int64_t bwdDefault) {
    llvm::DenseMap<Operation *, int64_t> st;
    for (Operation *op : ops) {
      if (isZeroOperand(op) && opLayer(op) < 0) continue;
      if (int64_t l = opLayer(op); l >= 0) {
        st[op] = stageOfLayer[size_t(l)];
        continue;
      }
      const bool backward = phaseOf(op) == kBackwardPhase;
      int64_t best = -1;
      for (Value v : op->getOperands()) {
        Operation *d = v.getDefiningOp();
        if (!d) continue;
        auto it = st.find(d);
        if (it == st.end()) continue;
        best = best < 0 ? it->second : backward ? std::min(best, it->second) : std::max(best, it->second);
      }
      st[op] = best >= 0 ? best : backward ? bwdDefault : fwdDefault;
    }
    for (Operation *op : ops) { // parameter reads, fills: on their first reader's stage
      if (!isZeroOperand(op) || opLayer(op) >= 0) continue;
      int64_t best = -1;
      for (Operation *u : op->getUsers()) {
        auto it = st.find(u);
        if (it != st.end()) best = best < 0 ? it->second : std::min(best, it->second);
      }
      st[op] = best >= 0 ? best : phaseOf(op) == kBackwardPhase ? bwdDefault : fwdDefault;
    }
    return st;
  }

  /// The first layer of each model chunk (size N + 1, last = L; N = P stages, or P x V under the
  /// interleaved schedule), balanced by the cost model, or `split`.
  FailureOr<std::vector<int64_t>> partition(int64_t N) {
    std::vector<int64_t> first(size_t(N) + 1, 0);
    first[size_t(N)] = L;
    if (!split.empty()) {
      auto bad = [&]() {
        InFlightDiagnostic d = module.emitError("--pp-split ");
        for (size_t i = 0; i < split.size(); ++i) d << (i ? "," : "") << int64_t(split[i]);
        d << ": give the first layer of each " << (N > P ? "model chunk" : "stage") << " after the first, " << (N - 1)
          << " increasing numbers within 1.." << (L - 1) << " (the model has " << L << " layers), e.g. --pp-split ";
        for (int64_t s = 1; s < N; ++s) d << (s > 1 ? "," : "") << s * L / N;
        return d;
      };
      if (int64_t(split.size()) != N - 1) return bad();
      for (int64_t s = 1; s < N; ++s) {
        first[size_t(s)] = split[size_t(s - 1)];
        if (first[size_t(s)] <= first[size_t(s - 1)] || first[size_t(s)] >= L) return bad();
      }
      return first;
    }
    // Cost of each layer (its forward and backward over every micro-batch, and the ops without a
    // layer that follow it), and of what comes before the first layer (stage 0's).
    std::vector<int64_t> provisional(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) provisional[size_t(l)] = l + 1;
    auto st = assign(provisional, 0, L + 1);
    std::vector<double> cost(size_t(L), 0.0);
    double pre = 0;
    for (Operation *op : ops) {
      if (phaseOf(op) == kOptimizerPhase) continue;
      const double t = rooflineSeconds(opCost(op), kFlopsPerS, kBytesPerS);
      const int64_t p = st.lookup(op);
      if (p <= 0)
        pre += t;
      else
        cost[size_t(std::min(p, L) - 1)] += t;
    }
    // The split minimising the most expensive stage, and among those the sum of the stages'
    // squared costs (the others as even as they can be): a dynamic program over the boundaries.
    std::vector<double> prefix(size_t(L) + 1, 0.0);
    for (int64_t l = 0; l < L; ++l) prefix[size_t(l) + 1] = prefix[size_t(l)] + cost[size_t(l)];
    const double inf = std::numeric_limits<double>::infinity();
    using Score = std::pair<double, double>; // (most expensive stage, sum of squares)
    // best[s][j]: stages 0..s-1 cover layers [0, j).
    std::vector<std::vector<Score>> best(size_t(N) + 1, std::vector<Score>(size_t(L) + 1, Score{inf, inf}));
    std::vector<std::vector<int64_t>> from(size_t(N) + 1, std::vector<int64_t>(size_t(L) + 1, 0));
    best[0][0] = {0, 0};
    for (int64_t s = 1; s <= N; ++s)
      for (int64_t j = s; j <= L; ++j)
        for (int64_t i = s - 1; i < j; ++i) {
          const Score &prev = best[size_t(s - 1)][size_t(i)];
          if (prev.first == inf) continue;
          const double c = prefix[size_t(j)] - prefix[size_t(i)] + (s == 1 ? pre : 0.0);
          const Score m{std::max(prev.first, c), prev.second + c * c};
          if (m < best[size_t(s)][size_t(j)]) best[size_t(s)][size_t(j)] = m, from[size_t(s)][size_t(j)] = i;
        }
    for (int64_t s = N, j = L; s > 0; --s) {
      first[size_t(s)] = j;
      j = from[size_t(s)][size_t(j)];
    }
    first[0] = 0;
    return first;
  }

  /// The order of stage S's units: (micro-batch, part) with part 0 forward, 1 backward (its input
  /// gradients only under zero-bubble), 2 the weight gradients (zero-bubble).
  enum Part { kF = 0, kB = 1, kW = 2 };
  /// Interleaved (Megatron-LM's schedule with V model chunks per stage; K a multiple of P): the
  /// units (micro-batch, local chunk v, part); forwards go through the chunks in groups of P
  /// micro-batches, backwards through them in reverse; (P-S-1)*2 + (V-1)*P warm-up forwards.
  std::vector<std::tuple<int64_t, int64_t, int>> interleavedUnits(int64_t S) const {
    const int64_t V = virtualStages, total = K * V;
    auto unit = [&](int64_t k, bool backward) {
      const int64_t g = (k / P) % V;
      const int64_t m = (k / (P * V)) * P + k % P;
      return std::make_tuple(m, backward ? V - 1 - g : g, backward ? int(kB) : int(kF));
    };
    std::vector<std::tuple<int64_t, int64_t, int>> u;
    const int64_t warm = K == P ? total : std::min((P - S - 1) * 2 + (V - 1) * P, total);
    int64_t f = 0, b = 0;
    for (; f < warm; ++f) u.push_back(unit(f, false));
    while (b < total) {
      if (f < total) u.push_back(unit(f++, false));
      u.push_back(unit(b++, true));
    }
    return u;
  }

  std::vector<std::pair<int64_t, int>> units(int64_t S) const {
    std::vector<std::pair<int64_t, int>> u;
    if (schedule == "gpipe") {
      for (int64_t m = 0; m < K; ++m) u.push_back({m, kF});
      for (int64_t m = 0; m < K; ++m) u.push_back({m, kB});
      return u;
    }
    // 1F1B (PipeDream-Flush): P-1-S warm-up forwards, then one forward and one backward in turn.
    const int64_t warm = std::min(P - 1 - S, K);
    int64_t f = 0, b = 0, w = 0;
    for (; f < warm; ++f) u.push_back({f, kF});
    if (schedule != "zero-bubble") {
      while (b < K) {
        if (f < K) u.push_back({f++, kF});
        u.push_back({b++, kB});
      }
      return u;
    }
    // ZB-H1 (Qi et al.): 1F1B's order with each backward split: its input-gradient part (B) goes
    // first, so the gradient is sent up the stages before the weight-gradient part (W) runs. In
    // the steady state W follows its B (as many micro-batches in flight as 1F1B: the same memory);
    // in the cool-down, where the stage waits for the next one's gradients, each W runs one
    // backward later, so that it fills the wait instead of delaying the next send.
    while (b < K) {
      if (f < K) {
        u.push_back({f++, kF});
        u.push_back({b++, kB});
        if (w < b) u.push_back({w++, kW});
      } else {
        u.push_back({b++, kB});
        if (w < b - 1) u.push_back({w++, kW});
      }
    }
    while (w < K) u.push_back({w++, kW});
    return u;
  }

  /// Stage `stage`'s units in its order: (micro-batch, local chunk, part) -> place.
  std::map<std::tuple<int64_t, int64_t, int>, int64_t> unitIndexOf(int64_t stage) const {
    std::map<std::tuple<int64_t, int64_t, int>, int64_t> idx;
    if (schedule == "interleaved") {
      auto u = interleavedUnits(stage);
      for (size_t i = 0; i < u.size(); ++i) idx[u[i]] = int64_t(i);
    } else {
      auto u = units(stage);
      for (size_t i = 0; i < u.size(); ++i) idx[{u[i].first, 0, u[i].second}] = int64_t(i);
    }
    return idx;
  }

  /// Tied weights (the embedding and the LM head): each micro-batch's gradient of the weight is
  /// the sum of a part computed on another stage and one on the weight's stage, and the
  /// accumulation over the micro-batches adds those sums: one send of a whole gradient per
  /// micro-batch. Reassociated, each stage accumulates its own parts over the micro-batches and
  /// the other stage's sum is sent once, at the end of the step (Megatron-LM reduces the embedding
  /// gradient between the first and last stage once per step too). The chains made carry
  /// bigc.grad_accum like those of bigc-grad-accum; casts to f32 (16-bit gradients) are made for
  /// each part. Returns the sums that are sent (the remote stage's). Rebuilds `ops`.
  llvm::DenseSet<Operation *> accumulateTiedGrads(llvm::DenseMap<Operation *, int64_t> &st,
                                                  llvm::DenseMap<Operation *, int64_t> &chunk, OpBuilder &b) {
    llvm::DenseSet<Operation *> sums;
    if (K < 2) return sums;
    auto isAccAdd = [](Operation *op) { return op && isa<AddOp>(op) && isGradAccum(op); };
    SmallVector<Operation *> roots;
    for (Operation *op : ops)
      if (isAccAdd(op) && llvm::none_of(op->getUsers(), [&](Operation *u) { return isAccAdd(u); })) roots.push_back(op);
    auto stageOfValue = [&](Value v) -> int64_t {
      Operation *d = v.getDefiningOp();
      auto it = d ? st.find(d) : st.end();
      return it == st.end() ? -1 : it->second;
    };
    std::vector<Operation *> dead;
    for (Operation *root : roots) {
      // The accumulation's terms in order (a left-leaning chain of adds over the micro-batches).
      SmallVector<Value> terms;
      SmallVector<Operation *> chain;
      std::function<bool(Value)> collect = [&](Value v) {
        Operation *d = v.getDefiningOp();
        if (isAccAdd(d)) {
          if (!d->hasOneUse() && d != root) return false;
          chain.push_back(d);
          return collect(d->getOperand(0)) && collect(d->getOperand(1));
        }
        terms.push_back(v);
        return true;
      };
      if (!collect(root->getResult(0)) || int64_t(terms.size()) != K) continue;
      const int64_t owner = st.lookup(root);
      int64_t remote = -1;
      struct Term {
        Operation *add, *cast; // the micro-batch's sum, and its cast to f32 (or null)
        Value local, other;
      };
      SmallVector<Term> parts;
      for (Value t : terms) {
        Operation *d = t.getDefiningOp();
        Operation *c = nullptr;
        if (d && isa<CastOp>(d) && isGradAccum(d) && d->hasOneUse()) c = d, d = d->getOperand(0).getDefiningOp();
        if (!d || !isa<AddOp>(d) || isGradAccum(d) || !d->hasOneUse()) break;
        const int64_t s0 = stageOfValue(d->getOperand(0)), s1 = stageOfValue(d->getOperand(1));
        if (s0 < 0 || s1 < 0 || s0 == s1 || (s0 != owner && s1 != owner)) break;
        const int64_t r = s0 == owner ? s1 : s0;
        if (remote >= 0 && r != remote) break;
        remote = r;
        parts.push_back(Term{d, c, s0 == owner ? d->getOperand(0) : d->getOperand(1),
                             s0 == owner ? d->getOperand(1) : d->getOperand(0)});
      }
      if (int64_t(parts.size()) != K) continue;
      const bool f32 = parts[0].cast == nullptr;
      auto place = [&](Operation *op, Operation *like, Value from, int64_t stage) {
        copyPlacementTags(like, op);
        op->setAttr(kGradAccumAttrName, b.getUnitAttr());
        st[op] = stage;
        if (Operation *d = from.getDefiningOp(); d && chunk.count(d)) chunk[op] = chunk.lookup(d);
      };
      Value accLocal, accOther;
      for (Term &t : parts) {
        Operation *like = t.cast ? t.cast : t.add;
        // Each part accumulated right after it is made (its buffer freed there; on the remote
        // stage before the backward's later ops and sends).
        auto widen = [&](Value v, int64_t stage) -> Value {
          if (Operation *d = v.getDefiningOp())
            b.setInsertionPointAfter(d);
          else
            b.setInsertionPoint(like);
          if (f32) return v;
          auto c = b.create<CastOp>(v.getLoc(), t.cast->getResult(0).getType(), v);
          place(c, like, v, stage);
          return c;
        };
        auto accumulate = [&](Value acc, Value v, int64_t stage) -> Value {
          Value w = widen(v, stage);
          if (!acc) return w;
          b.setInsertionPointAfterValue(w);
          auto a = b.create<AddOp>(v.getLoc(), acc.getType(), acc, w);
          place(a, like, v, stage);
          return a;
        };
        accLocal = accumulate(accLocal, t.local, owner);
        accOther = accumulate(accOther, t.other, remote);
        dead.push_back(like);
        if (t.cast) dead.push_back(t.add);
      }
      b.setInsertionPointAfter(root);
      auto total = b.create<AddOp>(root->getLoc(), accLocal.getType(), accLocal, accOther);
      place(total, root, root->getResult(0), owner);
      root->getResult(0).replaceAllUsesWith(total.getResult());
      sums.insert(accOther.getDefiningOp());
      dead.insert(dead.end(), chain.begin(), chain.end());
    }
    // Users before their definitions: the chain from its root down, then the terms.
    for (Operation *op : dead) {
      st.erase(op), chunk.erase(op);
      op->dropAllUses();
    }
    for (Operation *op : dead) op->erase();
    ops.clear();
    for (Operation &op : block->without_terminator()) ops.push_back(&op);
    return sums;
  }

  LogicalResult run() {
    module = getOperation();
    MLIRContext *ctx = module.getContext();
    P = stages, S = stage;
    if (P < 1) return module.emitError("--pp must be at least 1, got ") << P;
    if (P == 1) return success();
    const int64_t R = ranks, T = tp;
    if (T < 1 || R < 1 || R % (T * P) != 0)
      return module.emitError("--pp ") << P << (T > 1 ? " with --tp " + std::to_string(T) : std::string())
                                       << " does not divide --ranks " << R
                                       << ": the mesh is dp x tp x pp = ranks (e.g. --ranks "
                                       << T * P * std::max<int64_t>(1, R / (T * P)) << ")";
    if (S < 0 || S >= P) return module.emitError("bigc-pipeline: stage ") << S << " is not in [0, " << P << ")";
    if (schedule != "gpipe" && schedule != "1f1b" && schedule != "zero-bubble" && schedule != "interleaved")
      return module.emitError("--pp-schedule ")
             << std::string(schedule) << " is not a schedule: use 1f1b, zero-bubble, interleaved or gpipe";
    const bool interleaved = schedule == "interleaved";
    if (virtualStages < 1 || (virtualStages != 1 && !interleaved))
      return module.emitError("--virtual-stages ") << int64_t(virtualStages) << " needs --pp-schedule interleaved";
    if (interleaved && virtualStages < 2)
      return module.emitError("--pp-schedule interleaved needs --virtual-stages 2 or more (model chunks per stage)");
    if (module->hasAttr(kPipelineAttrName))
      return module.emitError("bigc-pipeline: already applied (the module has bigc.pipeline)");
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      return module.emitError("bigc-pipeline: the module has no func.func @train_step of one block (run "
                              "bigc-autodiff first)");
    block = &func.front();
    for (Operation &op : block->without_terminator()) {
      ops.push_back(&op);
      L = std::max(L, opLayer(&op) + 1);
    }
    if (auto k = module->getAttrOfType<IntegerAttr>(kMicroBatchesAttrName)) K = k.getInt();
    if (L == 0)
      return module.emitError("--pp ") << P
                                       << ": the model marks no layers (bigc.layer on its ops), so there is nothing to "
                                          "split into stages";
    if (P > L)
      return module.emitError("--pp ") << P << ": more stages than the model's " << L << " layers; use --pp " << L
                                       << " or fewer";
    // Model chunks: one per stage, or V per stage under the interleaved schedule (chunk c on stage
    // c mod P, Megatron's layout); the split balances the chunks.
    const int64_t N = P * (interleaved ? int64_t(virtualStages) : 1);
    if (N > L)
      return module.emitError("--pp ") << P << " with --virtual-stages " << int64_t(virtualStages) << ": " << N
                                       << " model chunks for the model's " << L
                                       << " layers; use fewer virtual stages or stages";
    if (interleaved && K % P != 0)
      return module.emitError("--pp-schedule interleaved: --micro-batches ")
             << K << " is not a multiple of --pp " << P << " (the schedule runs the micro-batches in groups of P)";
    FailureOr<std::vector<int64_t>> firstOr = partition(N);
    if (failed(firstOr)) return failure();
    const std::vector<int64_t> first = *firstOr;
    std::vector<int64_t> chunkOfLayer(static_cast<size_t>(L));
    for (int64_t c = 0; c < N; ++c)
      for (int64_t l = first[size_t(c)]; l < first[size_t(c) + 1]; ++l) chunkOfLayer[size_t(l)] = c;
    llvm::DenseMap<Operation *, int64_t> chunk = assign(chunkOfLayer, 0, N - 1);
    llvm::DenseMap<Operation *, int64_t> st;
    for (auto &[op, c] : chunk) st[op] = c % P;

    // A parameter's stage: where it is read (its first reader's); an optimizer op runs there.
    llvm::StringMap<int64_t> owner;
    for (Operation *op : ops)
      if (auto gp = dyn_cast<GetParamOp>(op)) {
        auto [it, fresh] = owner.try_emplace(gp.getParam(), st[op]);
        if (!fresh) it->second = std::min(it->second, st[op]);
      }
    SmallVector<GlobalNormOp> norms;
    SmallVector<CheckFiniteOp> flags;
    for (Operation *op : ops) {
      if (auto a = dyn_cast<AdamWOp>(op)) {
        auto it = owner.find(a.getParam()); // the weight read, or its 16-bit compute copy
        if (it == owner.end() && a.getHalf()) it = owner.find(*a.getHalf());
        if (it == owner.end())
          return a.emitError("bigc-pipeline: the parameter @") << a.getParam() << " is updated but never read";
        st[op] = it->second;
      } else if (auto gn = dyn_cast<GlobalNormOp>(op)) {
        norms.push_back(gn);
      } else if (auto cf = dyn_cast<CheckFiniteOp>(op)) {
        flags.push_back(cf);
      } else if (auto u = dyn_cast<LossScaleUpdateOp>(op)) {
        // fp16 loss scaling: the scale's update runs where the scale lives (its first reader's
        // stage); the other stages read the scale sent them once per step.
        auto it = owner.find(u.getScale());
        st[op] = it == owner.end() ? 0 : it->second;
      }
    }

    OpBuilder b(ctx);
    // The mesh and the module's stage first: the collectives and p2p ops below are checked
    // against them.
    const int64_t dp = R / (T * P);
    module->setAttr(kMeshAttrName, b.getDictionaryAttr({b.getNamedAttr(kDpAxis, b.getI64IntegerAttr(dp)),
                                                        b.getNamedAttr(kPpAxis, b.getI64IntegerAttr(P)),
                                                        b.getNamedAttr(kTpAxis, b.getI64IntegerAttr(T))}));
    SmallVector<int64_t> splitOut(first.begin() + 1, first.end() - 1);
    module->setAttr(kPipelineAttrName,
                    b.getDictionaryAttr({b.getNamedAttr("stages", b.getI64IntegerAttr(P)),
                                         b.getNamedAttr("stage", b.getI64IntegerAttr(S)),
                                         b.getNamedAttr("schedule", b.getStringAttr(schedule)),
                                         b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(virtualStages)),
                                         b.getNamedAttr("split", b.getDenseI64ArrayAttr(splitOut))}));

    // Reductions over every stage's gradients (the global norm of a gradient clip, the fp16
    // overflow flag): this stage's part of it, combined over the stages by an all_reduce
    // (`reduce`: norm, or max so that every stage skips the same steps). Every stage makes its own:
    // what reads it on another stage is not sent it.
    llvm::DenseSet<Operation *> perStage;
    auto overStages = [&](auto whole, StringRef reduce) {
      using OpT = decltype(whole);
      SmallVector<Value> mine;
      for (Value g : whole.getInputs())
        if (Operation *d = g.getDefiningOp(); d && st.lookup(d) == S) mine.push_back(g);
      b.setInsertionPoint(whole);
      Value part = mine.empty() ? b.create<FillOp>(whole.getLoc(), whole.getType(), b.getF64FloatAttr(0.0)).getResult()
                                : b.create<OpT>(whole.getLoc(), whole.getType(), mine).getResult();
      copyPlacementTags(whole, part.getDefiningOp());
      auto ar = b.create<AllReduceOp>(whole.getLoc(), TypeRange{whole.getType()}, ValueRange{part},
                                      b.getStringAttr(kPpAxis), b.getStringAttr(reduce));
      copyPlacementTags(whole, ar);
      whole.getResult().replaceAllUsesWith(ar.getResult(0));
      st[part.getDefiningOp()] = S, st[ar] = S;
      perStage.insert(ar);
      st[whole] = -1; // dropped on every stage
    };
    for (GlobalNormOp gn : norms) overStages(gn, kReduceNorm);
    for (CheckFiniteOp cf : flags) overStages(cf, kReduceMax);
    llvm::DenseSet<Operation *> tiedSums = accumulateTiedGrads(st, chunk, b);

    // Values crossing stages: one send/recv pair per (value, receiving stage); a parameter read by
    // another stage is sent once per step (every micro-batch's read of it there takes that one).
    // Tags count the pairs in program order: every stage's module numbers them alike.
    struct Cross {
      Value sent;
      int64_t from = 0, to = 0, tag = 0;
      RecvOp recv; // on stage S when to == S
      bool sendMade = false;
      bool once = false; // a parameter, sent once per step (at its start)
      // Where the sender sends it: (its unit's place in the sender's schedule, the value's place in
      // the graph, the tag); a tied weight's gradient sum after every unit.
      std::tuple<int64_t, int64_t, int64_t> sentAt{0, 0, 0};
    };
    // A value's key: the parameter it reads (uniqued symbol name), else the value itself.
    auto keyOf = [](Value v) -> const void * {
      if (auto gp = v.getDefiningOp<GetParamOp>()) return gp.getParamAttr().getAttr().getAsOpaquePointer();
      return v.getAsOpaquePointer();
    };
    // The place of an op's unit in stage `stage`'s schedule (the order its stage runs the units
    // in: the sort below), after every unit when it is in none (the optimizer, or made by this
    // pass: the zero loss); and the place of each op in the graph.
    std::map<int64_t, std::map<std::tuple<int64_t, int64_t, int>, int64_t>> unitsOf;
    auto unitAt = [&](int64_t stage, Operation *op) -> int64_t {
      auto &idx = unitsOf[stage];
      if (idx.empty()) idx = unitIndexOf(stage);
      StringRef ph = phaseOf(op);
      if (ph != kForwardPhase && ph != kBackwardPhase) return int64_t(idx.size());
      int64_t v = 0;
      if (interleaved) {
        auto c = chunk.find(op);
        if (c == chunk.end()) return int64_t(idx.size());
        v = c->second / P;
      }
      auto it = idx.find({microBatchOf(op).value_or(0), v, ph == kForwardPhase ? kF : isWeightGrad(op) ? kW : kB});
      return it == idx.end() ? int64_t(idx.size()) : it->second;
    };
    llvm::DenseMap<Operation *, int64_t> position;
    for (Operation &op : block->without_terminator()) position[&op] = int64_t(position.size());
    std::map<std::pair<const void *, int64_t>, size_t> crossOf; // (value key, receiving stage) -> index
    std::vector<Cross> crosses;
    for (Operation *op : ops) {
      auto sit = st.find(op);
      if (sit == st.end() || sit->second < 0) continue;
      const int64_t to = sit->second;
      for (OpOperand &use : op->getOpOperands()) {
        Operation *d = use.get().getDefiningOp();
        if (!d) continue;
        const int64_t from = st.lookup(d);
        if (from == to || from < 0 || perStage.contains(d)) continue;
        auto key = std::make_pair(keyOf(use.get()), to);
        auto [it, fresh] = crossOf.try_emplace(key, crosses.size());
        if (fresh) {
          crosses.push_back(Cross{use.get(), from, to, int64_t(crosses.size()), RecvOp(), false,
                                  bool(use.get().getDefiningOp<GetParamOp>())});
          const bool tied = tiedSums.contains(d);
          crosses.back().sentAt = {tied ? std::numeric_limits<int64_t>::max() : unitAt(from, d),
                                   tied ? 0 : position.lookup(d), crosses.back().tag};
        }
        Cross &c = crosses[it->second];
        if (to == S) {
          if (!c.recv) {
            b.setInsertionPoint(op);
            c.recv = b.create<RecvOp>(op->getLoc(), use.get().getType(), b.getI64IntegerAttr(c.from),
                                      b.getI64IntegerAttr(c.tag));
            copyPlacementTags(op, c.recv);
          }
          use.set(c.recv.getResult());
        }
        if (c.from == S && !c.sendMade) {
          b.setInsertionPointAfter(c.sent.getDefiningOp());
          auto send = b.create<SendOp>(c.sent.getLoc(), c.sent, b.getI64IntegerAttr(c.to), b.getI64IntegerAttr(c.tag));
          copyPlacementTags(c.sent.getDefiningOp(), send);
          c.sendMade = true;
          st[send] = S;
        }
      }
    }
    for (Cross &c : crosses)
      if (c.recv) st[c.recv] = S;

    // The loss: the last stage's; the others return zero.
    auto ret = cast<func::ReturnOp>(block->getTerminator());
    if (S != P - 1) {
      b.setInsertionPoint(ret);
      for (OpOperand &r : ret->getOpOperands()) {
        auto zero = b.create<FillOp>(ret.getLoc(), r.get().getType(), b.getF64FloatAttr(0.0));
        zero->setAttr(kPhaseAttrName, b.getStringAttr(kForwardPhase)); // with the last micro-batch's forward
        if (K > 1) zero->setAttr(kMicroBatchAttrName, b.getI64IntegerAttr(K - 1));
        st[zero] = S;
        r.set(zero);
      }
    }

    // Only this stage's ops stay (users before their definitions).
    std::vector<Operation *> all;
    for (Operation &op : block->without_terminator()) all.push_back(&op);
    auto kept = [&](Operation *op) {
      auto s = st.find(op);
      return s != st.end() && s->second == S;
    };
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (kept(*it)) continue;
      for (Operation *u : (*it)->getUsers())
        if (kept(u) || isa<func::ReturnOp>(u))
          return u->emitError("bigc-pipeline: internal error: a value of stage ")
                 << st.lookup(*it) << " read on stage " << S << " without a send (please report it)";
      (*it)->erase();
    }
    // Only the parameters (and optimizer states) this stage reads or updates.
    llvm::StringSet<> used;
    if (auto uses = SymbolTable::getSymbolUses(func))
      for (const SymbolTable::SymbolUse &u : *uses) used.insert(u.getSymbolRef().getRootReference().getValue());
    for (Operation &op : llvm::make_early_inc_range(module.getBody()->getOperations()))
      if (auto p = dyn_cast<ParamOp>(op); p && !used.contains(p.getSymName())) p.erase();

    // Zero-bubble: each micro-batch's backward split into what this stage's sends need (the input
    // gradients going up the stages, directly or through other ops) and the rest (the weights'
    // gradients and their accumulation), marked bigc.weight_grad.
    if (schedule == "zero-bubble") {
      llvm::DenseSet<Operation *> needed;
      std::vector<Operation *> rev;
      for (Operation &op : block->without_terminator()) rev.push_back(&op);
      for (auto it = rev.rbegin(); it != rev.rend(); ++it) {
        Operation *op = *it;
        // (A tied weight's gradient sum is sent at the end of the step: part of the W work.)
        bool need = isa<SendOp>(op) && !tiedSums.contains(cast<SendOp>(op).getInput().getDefiningOp());
        for (Operation *u : op->getUsers()) need = need || needed.contains(u);
        if (need) needed.insert(op);
      }
      for (Operation *op : rev)
        if (phaseOf(op) == kBackwardPhase && microBatchOf(op) && !needed.contains(op) && !isa<RecvOp>(op))
          op->setAttr(kWeightGradAttrName, b.getUnitAttr());
    }

    // The schedule's order: units (micro-batch, part), the optimizer after them; each recv just
    // before its first reader, each send just after its value.
    const int64_t tail = int64_t(unitIndexOf(S).size());
    auto unitOf = [&](Operation *op) { return unitAt(S, op); };
    std::vector<Operation *> order;
    for (Operation &op : block->without_terminator())
      if (!isa<SendOp, RecvOp>(op)) order.push_back(&op);
    llvm::DenseMap<Operation *, int64_t> pos;
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = int64_t(i);
    std::stable_sort(order.begin(), order.end(), [&](Operation *x, Operation *y) { return unitOf(x) < unitOf(y); });
    for (Operation *op : order) op->moveBefore(block->getTerminator());
    SmallVector<RecvOp> recvs(block->getOps<RecvOp>());
    SmallVector<SendOp> sends(block->getOps<SendOp>());
    // Parameters sent once per step leave their stage first thing and are received first thing,
    // in the order of their tags: a backend whose send waits for its recv (NCCL) pairs the
    // messages between two stages in the order they are issued, and a stage's compute may wait for
    // such a send or recv before it sends or receives anything else.
    llvm::DenseSet<Operation *> once;
    {
      std::vector<Operation *> front; // the parameters' reads, then the messages in tag order
      for (Cross &c : crosses)
        if (c.once && c.from == S && once.insert(c.sent.getDefiningOp()).second)
          front.push_back(c.sent.getDefiningOp());
      for (Cross &c : crosses) {
        if (!c.once) continue;
        if (c.recv) {
          front.push_back(c.recv);
          for (Operation *u : c.recv->getUsers()) {
            copyPlacementTags(u, c.recv);
            break;
          }
        }
        if (c.from == S)
          for (SendOp snd : sends)
            if (snd.getInput() == c.sent && int64_t(snd.getTag()) == c.tag) front.push_back(snd);
      }
      Operation *prev = nullptr;
      for (Operation *op : front) {
        if (prev)
          op->moveAfter(prev);
        else if (op != &block->front())
          op->moveBefore(&block->front());
        prev = op, once.insert(op);
      }
    }
    for (RecvOp r : recvs) {
      if (once.contains(r)) continue;
      Operation *firstUser = nullptr;
      for (Operation *u : r->getUsers())
        if (!firstUser || u->isBeforeInBlock(firstUser)) firstUser = u;
      if (firstUser) {
        r->moveBefore(firstUser);
        copyPlacementTags(firstUser, r);
      }
    }
    // The recvs from each stage in the order that stage sends them (a recv that would come after
    // one sent later moves up to just before it): a backend whose send waits for its recv (NCCL)
    // pairs the messages of two ranks in the order they are issued. Moving a recv up never makes
    // a stage wait longer: what it moves above waits for a message sent after it.
    {
      std::map<int64_t, std::vector<Cross *>> fromStage;
      for (Cross &c : crosses)
        if (c.recv && !c.once) fromStage[c.from].push_back(&c);
      for (auto &[from, cs] : fromStage) {
        std::stable_sort(cs.begin(), cs.end(), [](const Cross *a, const Cross *b) { return a->sentAt < b->sentAt; });
        Operation *next = nullptr;
        for (auto it = cs.rbegin(); it != cs.rend(); ++it) {
          Operation *r = (*it)->recv;
          if (next && next->isBeforeInBlock(r)) r->moveBefore(next);
          next = r;
        }
      }
    }
    // The last op of the units (the optimizer and the rest of the step come after).
    Operation *lastOfUnits = nullptr;
    for (Operation &op : block->without_terminator())
      if (!isa<SendOp, RecvOp>(op) && unitOf(&op) < tail) lastOfUnits = &op;
    // Each send just after its value, those of one value in tag order; a tied weight's gradient
    // sums after every unit, in tag order, as the last messages of their pair (the receiver takes
    // them after the micro-batches' gradients). The receiver orders its recvs alike (sentAt).
    std::stable_sort(sends.begin(), sends.end(),
                     [](SendOp a, SendOp b) { return int64_t(a.getTag()) < int64_t(b.getTag()); });
    llvm::DenseMap<Operation *, Operation *> lastAfter; // anchor -> the last send placed after it
    Operation *lastTied = nullptr;
    for (SendOp s : sends) {
      Operation *d = s.getInput().getDefiningOp();
      if (!d || once.contains(s)) continue;
      if (tiedSums.contains(d)) {
        if (lastOfUnits && d->isBeforeInBlock(lastOfUnits)) d = lastOfUnits;
        if (lastTied && d->isBeforeInBlock(lastTied)) d = lastTied;
        lastTied = s;
      }
      Operation *&last = lastAfter[d];
      s->moveAfter(last ? last : d);
      last = s;
    }
    return success();
  }
};

} // namespace
