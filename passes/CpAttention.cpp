//===- CpAttention.cpp - bigc-cp-attention ---------------------------------===//
//
// The attention of a context-parallel step (see the description in
// Passes.td): each bigc.gqa_attention (and its gradient) that
// bigc-context-parallel marked `cp` becomes ring_attention blocks with
// ring_shift transfers (kind ring) or an all-to-all around one
// ring_attention over the whole sequence of a cp-th of the heads (kind a2a).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCCPATTENTION
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }
RankedTensorType f32Like(Value v) {
  return RankedTensorType::get(tensorOf(v).getShape(), Float32Type::get(v.getContext()));
}

/// [B,T,N] <-> [B,C*T,N/C].
RankedTensorType headSplit(RankedTensorType t, int64_t C) {
  return RankedTensorType::get({t.getDimSize(0), t.getDimSize(1) * C, t.getDimSize(2) / C}, t.getElementType());
}
RankedTensorType seqSplit(RankedTensorType t, int64_t C) {
  return RankedTensorType::get({t.getDimSize(0), t.getDimSize(1) / C, t.getDimSize(2) * C}, t.getElementType());
}

struct BigcCpAttentionPass : public mlir::bigc::impl::BigcCpAttentionBase<BigcCpAttentionPass> {
  using Base::Base;

  int64_t C = 1;
  bool a2a = false;
  /// a2a: the head-split values made for a forward's q, k, v, out and lse (reused by its gradient).
  llvm::DenseMap<Value, Value> heads;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  /// Copies what the op carries for the later passes (layer, phase, recompute marks).
  static void inherit(Operation *from, Operation *to) {
    for (NamedAttribute a : from->getDiscardableAttrs()) to->setAttr(a.getName(), a.getValue());
  }

  template <typename OpT> OpT tagged(OpBuilder &b, Operation *from, OpT op) {
    inherit(from, op);
    return op;
  }

  ValueRange shift(OpBuilder &b, Operation *at, ValueRange xs) {
    SmallVector<Type> types;
    for (Value x : xs) types.push_back(x.getType());
    return tagged(b, at, b.create<RingShiftOp>(at->getLoc(), types, xs, b.getStringAttr(kCpAxis)))->getResults();
  }

  /// One all-to-all of several tensors (one collective).
  SmallVector<Value> allToAll(OpBuilder &b, Operation *at, ValueRange xs, bool toHeads) {
    SmallVector<Type> types;
    for (Value x : xs) types.push_back(toHeads ? headSplit(tensorOf(x), C) : seqSplit(tensorOf(x), C));
    auto op = b.create<CpAllToAllOp>(at->getLoc(), types, xs, b.getStringAttr(kCpAxis),
                                     toHeads ? b.getUnitAttr() : UnitAttr());
    return SmallVector<Value>(tagged(b, at, op)->getResults());
  }

  /// The head-split copies of q, k, v (made once, in one all-to-all).
  SmallVector<Value> headsOf(OpBuilder &b, Operation *at, Value q, Value k, Value v) {
    if (heads.count(q) && heads.count(k) && heads.count(v)) return {heads[q], heads[k], heads[v]};
    SmallVector<Value> h = allToAll(b, at, ValueRange{q, k, v}, true);
    heads[q] = h[0], heads[k] = h[1], heads[v] = h[2];
    return h;
  }

  template <typename OpT> NamedAttrList attention(OpBuilder &b, OpT g, int64_t step) {
    NamedAttrList attrs;
    const int64_t div = a2a ? C : 1;
    attrs.append("heads", b.getI64IntegerAttr(g.getHeads() / div));
    attrs.append("kv_heads", b.getI64IntegerAttr(g.getKvHeads() / div));
    attrs.append("window", g.getWindowAttr());
    attrs.append("scale", g.getScaleAttr());
    if (g.getTpHeads()) attrs.append("tp_heads", b.getUnitAttr());
    if (g.getSoftcapAttr()) attrs.append("softcap", g.getSoftcapAttr());
    attrs.append("cp", b.getI64IntegerAttr(C));
    attrs.append("step", b.getI64IntegerAttr(step));
    if (a2a) attrs.append("a2a", b.getUnitAttr());
    return attrs;
  }

  void lowerForward(GqaAttentionOp g) {
    OpBuilder b(g);
    Location loc = g.getLoc();
    Type lseT = g.getLse().getType();
    if (a2a) {
      SmallVector<Value> qkv = headsOf(b, g, g.getQ(), g.getK(), g.getV());
      Value q = qkv[0], k = qkv[1], v = qkv[2];
      auto lse =
          RankedTensorType::get({tensorOf(q).getDimSize(0), int64_t(g.getHeads()) / C, tensorOf(q).getDimSize(1)},
                                cast<RankedTensorType>(lseT).getElementType());
      auto r = tagged(b, g,
                      b.create<RingAttentionOp>(loc, TypeRange{q.getType(), lse}, ValueRange{q, k, v},
                                                attention(b, g, 0).getAttrs()));
      Value out = allToAll(b, g, ValueRange{r.getOut()}, false)[0];
      heads[out] = r.getOut(); // (the gradient reads out as the rank's tokens, after the replacement)
      heads[g.getLse()] = r.getLse();
      g.getOut().replaceAllUsesWith(out);
      // The lse keeps its place for the gradient (lowered below, with the head-split one).
      return;
    }
    // The next block is passed on before this one is used: its transfer overlaps this block's attention.
    Value k = g.getK(), v = g.getV(), out, lse;
    for (int64_t s = 0; s < C; ++s) {
      SmallVector<Value> next;
      if (s + 1 < C) next = SmallVector<Value>(shift(b, g, ValueRange{k, v}));
      Type outT = s + 1 == C ? g.getOut().getType() : Type(f32Like(g.getOut()));
      SmallVector<Value> operands{g.getQ(), k, v};
      if (s > 0) operands.append({out, lse});
      auto r =
          tagged(b, g, b.create<RingAttentionOp>(loc, TypeRange{outT, lseT}, operands, attention(b, g, s).getAttrs()));
      out = r.getOut(), lse = r.getLse();
      if (s + 1 < C) k = next[0], v = next[1];
    }
    g.getOut().replaceAllUsesWith(out);
    g.getLse().replaceAllUsesWith(lse);
  }

  LogicalResult lowerGradient(GqaAttentionGradOp g) {
    OpBuilder b(g);
    Location loc = g.getLoc();
    if (a2a) {
      Value out = heads.lookup(g.getOut()), lse = heads.lookup(g.getLse());
      if (!out || !lse)
        return g.emitError("bigc-cp-attention: the gradient's out and lse come from no lowered gqa_attention");
      Value dout = allToAll(b, g, ValueRange{g.getDout()}, true)[0];
      SmallVector<Value> qkv = headsOf(b, g, g.getQ(), g.getK(), g.getV());
      Value q = qkv[0], k = qkv[1], v = qkv[2];
      auto r =
          tagged(b, g,
                 b.create<RingAttentionGradOp>(loc, TypeRange{q.getType(), k.getType(), v.getType()},
                                               ValueRange{dout, q, k, v, out, lse}, attention(b, g, 0).getAttrs()));
      SmallVector<Value> back = allToAll(b, g, ValueRange{r.getDq(), r.getDk(), r.getDv()}, false);
      g.getDq().replaceAllUsesWith(back[0]);
      g.getDk().replaceAllUsesWith(back[1]);
      g.getDv().replaceAllUsesWith(back[2]);
      return success();
    }
    // Step s: the next block's k, v passed on first (overlapping this block); the block's own
    // key/value gradients, computed without the ones so far, then added to those that arrived
    // while it ran (the previous step's shift overlaps this block), and the sum passed to the next
    // rank (after the last step: home to the block's own rank).
    Value k = g.getK(), v = g.getV(), dq, dk, dv;
    for (int64_t s = 0; s < C; ++s) {
      SmallVector<Value> next;
      if (s + 1 < C) next = SmallVector<Value>(shift(b, g, ValueRange{k, v}));
      SmallVector<Value> operands{g.getDout(), g.getQ(), k, v, g.getOut(), g.getLse()};
      if (s > 0) operands.push_back(dq);
      Type dqT = s + 1 == C ? g.getDq().getType() : Type(f32Like(g.getDq()));
      auto r = tagged(b, g,
                      b.create<RingAttentionGradOp>(loc, TypeRange{dqT, f32Like(g.getDk()), f32Like(g.getDv())},
                                                    operands, attention(b, g, s).getAttrs()));
      dq = r.getDq();
      Value sk = r.getDk(), sv = r.getDv();
      if (s > 0) {
        sk = tagged(b, g, b.create<AddOp>(loc, sk.getType(), sk, dk)).getResult();
        sv = tagged(b, g, b.create<AddOp>(loc, sv.getType(), sv, dv)).getResult();
      }
      SmallVector<Value> moved(shift(b, g, ValueRange{sk, sv}));
      dk = moved[0], dv = moved[1];
      if (s + 1 < C) k = next[0], v = next[1];
    }
    if (dk.getType() != g.getDk().getType()) {
      dk = tagged(b, g, b.create<CastOp>(loc, g.getDk().getType(), dk)).getResult();
      dv = tagged(b, g, b.create<CastOp>(loc, g.getDv().getType(), dv)).getResult();
    }
    g.getDq().replaceAllUsesWith(dq);
    g.getDk().replaceAllUsesWith(dk);
    g.getDv().replaceAllUsesWith(dv);
    return success();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    auto cpAttr = module->getAttrOfType<DictionaryAttr>(kContextParallelAttrName);
    if (!cpAttr) return success();
    auto size = cpAttr.getAs<IntegerAttr>("size");
    auto kind = cpAttr.getAs<StringAttr>("kind");
    if (!size || !kind || size.getInt() < 2 || (kind.getValue() != "ring" && kind.getValue() != "a2a"))
      return module.emitError("bigc-cp-attention: ")
             << kContextParallelAttrName << " must be {size >= 2, kind ring|a2a}";
    C = size.getInt(), a2a = kind.getValue() == "a2a";
    auto mesh = module->getAttrOfType<DictionaryAttr>(kMeshAttrName);
    if (!mesh) return module.emitError("bigc-cp-attention: the module has no device mesh (run bigc-shard first)");
    const int64_t dp = meshAxisSize(module, kDpAxis);
    if (dp % C != 0)
      return module.emitError("bigc-cp-attention: the ")
             << dp << " data-parallel ranks (ranks / (tp x pp)) must be a multiple of --cp " << C
             << " (the cp ranks are data ranks that share their sequences)";
    NamedAttrList m(mesh);
    m.set(kCpAxis, Builder(module.getContext()).getI64IntegerAttr(C));
    module->setAttr(kMeshAttrName, m.getDictionary(module.getContext()));
    SmallVector<Operation *> todo;
    module.walk([&](Operation *op) {
      if (auto g = dyn_cast<GqaAttentionOp>(op); g && g.getCp())
        todo.push_back(op);
      else if (auto g = dyn_cast<GqaAttentionGradOp>(op); g && g.getCp())
        todo.push_back(op);
    });
    for (Operation *op : todo) {
      if (auto g = dyn_cast<GqaAttentionOp>(op)) {
        if (int64_t(*g.getCp()) != C)
          return g.emitError("bigc-cp-attention: cp ") << *g.getCp() << " on a mesh of cp " << C;
        lowerForward(g);
      } else if (failed(lowerGradient(cast<GqaAttentionGradOp>(op)))) {
        return failure();
      }
    }
    for (Operation *op : llvm::reverse(todo)) {
      if (!op->use_empty()) return op->emitError("bigc-cp-attention: a result still in use (internal error)");
      op->erase();
    }
    return success();
  }
};

} // namespace
