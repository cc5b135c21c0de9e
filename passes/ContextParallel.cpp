//===- ContextParallel.cpp - bigc-context-parallel -------------------------===//
//
// @forward made the forward of one of `cp` context-parallel ranks (see the
// description in Passes.td): every activation's token dimension (found by
// following the tokens through each op's rule below) divided by cp, the
// rotary embeddings and the attention marked `cp` (global positions; the
// attention lowered after bigc-shard by bigc-cp-attention), and
// `bigc.context_parallel = {size, kind}` recorded for that pass.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCCONTEXTPARALLEL
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return dyn_cast<RankedTensorType>(v.getType()); }

int64_t product(ArrayRef<int64_t> s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

struct BigcContextParallelPass : public mlir::bigc::impl::BigcContextParallelBase<BigcContextParallelPass> {
  using Base::Base;

  ModuleOp module;
  int64_t T = 0;                         // the whole sequence (the tokens' second dimension)
  llvm::DenseMap<Value, int64_t> seqDim; // a value that holds tokens -> its token dimension
  llvm::DenseMap<Value, int64_t> inner;  // -> elements after the token dimension

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  InFlightDiagnostic fail(Operation *op, const Twine &why) {
    return op->emitError("bigc-context-parallel: --cp ") << int64_t(cp) << ": " << why;
  }

  /// Records that `v` holds tokens along dimension `d`.
  void mark(Value v, int64_t d) {
    auto t = tensorOf(v);
    seqDim[v] = d;
    inner[v] = product(t.getShape(), size_t(d) + 1, t.getShape().size());
  }
  int64_t dimOf(Value v) const {
    auto it = seqDim.find(v);
    return it == seqDim.end() ? -1 : it->second;
  }

  /// Element-wise and per-token ops: the operands that hold tokens agree on the (right-aligned)
  /// token dimension; the others must not have a dimension of the sequence's length there (a
  /// position table or a mask the tokens do not carry).
  LogicalResult sameDim(Operation *op, int64_t resultRank, int64_t &d) {
    d = -1;
    for (Value x : op->getOperands()) {
      int64_t k = dimOf(x);
      if (k < 0) continue;
      int64_t aligned = k + resultRank - tensorOf(x).getRank();
      if (d >= 0 && aligned != d)
        return fail(op, "its operands hold the tokens in different dimensions (no rule for it)");
      d = aligned;
    }
    if (d < 0) return success();
    for (Value x : op->getOperands()) {
      auto t = tensorOf(x);
      if (!t || dimOf(x) >= 0) continue;
      int64_t k = d - (resultRank - t.getRank());
      if (k >= 0 && t.getDimSize(k) != 1)
        return fail(op, "an operand without the tokens (")
               << t << ") spans the sequence's dimension: a position table or mask over the whole "
               << "sequence has no part per rank (context parallelism needs rotary positions, bigc.rope)";
    }
    return success();
  }

  LogicalResult visit(Operation *op) {
    bool any = false;
    for (Value x : op->getOperands()) any |= dimOf(x) >= 0;
    if (!any) return success(); // weights and constants: nothing of the sequence
    auto all = [&](int64_t d) {
      for (Value r : op->getResults())
        if (tensorOf(r)) mark(r, d);
    };
    if (isa<func::ReturnOp>(op)) return success();
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      if (dimOf(e->getOperand(0)) >= 0) return fail(op, "the embedding table depends on the tokens");
      mark(e.getResult(), dimOf(e->getOperand(1)));
      return success();
    }
    if (auto m = dyn_cast<MatmulOp>(op)) {
      int64_t da = dimOf(m.getA()), db = dimOf(m.getB());
      if (db >= 0)
        return fail(op, da >= 0 ? "a product of two activations mixes the tokens (attention written out: "
                                  "bigc-context-parallel needs it as bigc.gqa_attention)"
                                : "the tokens are the right operand's");
      const int64_t ra = tensorOf(m.getA()).getRank(), rr = tensorOf(m.getResult()).getRank();
      if (da >= ra - (m.getTransposeA() ? 2 : 1) || (m.getTransposeA() && da == ra - 1))
        return fail(op, "the product sums over the tokens");
      mark(m.getResult(), da + rr - ra);
      return success();
    }
    if (isa<AddOp, MulOp, BiasAddOp, ScaleOp, SiluOp, GeluOp, SoftcapOp, SwigluOp, GegluOp, CastOp, MoeOp>(op)) {
      int64_t d;
      const int64_t r = tensorOf(op->getResult(0)).getRank();
      if (failed(sameDim(op, r, d))) return failure();
      if (d >= r - 1 && isa<MoeOp>(op)) return fail(op, "the experts' features are the tokens");
      all(d);
      return success();
    }
    if (isa<LayerNormOp, RmsNormOp>(op)) {
      int64_t d = dimOf(op->getOperand(0));
      for (Value w : op->getOperands().drop_front())
        if (dimOf(w) >= 0) return fail(op, "the norm's weights depend on the tokens");
      if (d < 0 || d >= tensorOf(op->getOperand(0)).getRank() - 1) return fail(op, "it normalises over the tokens");
      all(d);
      return success();
    }
    if (auto r = dyn_cast<RopeOp>(op)) {
      if (dimOf(r.getX()) != 1) return fail(op, "the tokens are not its second dimension");
      r.setCpAttr(Builder(op).getI64IntegerAttr(cp));
      mark(r.getY(), 1);
      return success();
    }
    if (auto g = dyn_cast<GqaAttentionOp>(op)) {
      for (Value x : {g.getQ(), g.getK(), g.getV()})
        if (dimOf(x) != 1) return fail(op, "q, k and v must all hold the tokens in their second dimension");
      if (kind == "a2a" && (g.getHeads() % cp != 0 || g.getKvHeads() % cp != 0))
        return fail(op, "all-to-all attention splits the heads over the ranks: ")
               << g.getKvHeads() << " key/value heads and " << g.getHeads() << " query heads, which " << int64_t(cp)
               << " does not divide (--cp-kind ring passes the key/value blocks instead)";
      g.setCpAttr(Builder(op).getI64IntegerAttr(cp));
      mark(g.getOut(), 1);
      mark(g.getLse(), 2);
      return success();
    }
    if (isa<AttentionOp>(op))
      return fail(op, "bigc.attention (GPT-2's, over qkv) has no context-parallel form; the model's attention must be "
                      "bigc.gqa_attention (q, k, v and rotary positions, as the LLaMA family's)");
    if (auto t = dyn_cast<TransposeOp>(op)) {
      int64_t d = dimOf(t.getX());
      for (auto [i, p] : llvm::enumerate(t.getPerm()))
        if (p == d) mark(t.getY(), int64_t(i));
      return success();
    }
    if (auto r = dyn_cast<ReshapeOp>(op)) {
      // The token dimension survives when the new shape keeps the elements after it together and
      // the dimension holding it is the tokens times dimensions before them.
      auto out = tensorOf(r.getResult()).getShape();
      const int64_t in = inner.lookup(r.getX());
      for (size_t j = 0; j < out.size(); ++j)
        if (product(out, j + 1, out.size()) == in && out[j] % T == 0) {
          mark(r.getResult(), int64_t(j));
          return success();
        }
      return fail(op, "the reshape from ")
             << tensorOf(r.getX()) << " to " << tensorOf(r.getResult()) << " splits or spreads the tokens";
    }
    if (isa<SplitOp, ConcatOp>(op)) {
      int64_t axis = isa<SplitOp>(op) ? cast<SplitOp>(op).getAxis() : cast<ConcatOp>(op).getAxis();
      int64_t d;
      const int64_t r = tensorOf(op->getResult(0)).getRank();
      if (failed(sameDim(op, r, d))) return failure();
      if ((axis + r) % r == d) return fail(op, "it splits or joins along the tokens");
      all(d);
      return success();
    }
    if (isa<CrossEntropyOp>(op)) return success(); // the mean over this rank's tokens
    return fail(op, "'") << op->getName() << "' has no context-parallel rule (it may mix the tokens)";
  }

  LogicalResult run() {
    module = getOperation();
    if (cp < 1) return module.emitError("bigc-context-parallel: cp must be at least 1, got ") << int64_t(cp);
    if (kind != "ring" && kind != "a2a")
      return module.emitError("bigc-context-parallel: kind must be ring or a2a, got '") << std::string(kind) << "'";
    if (cp == 1) return success();
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      return module.emitError("bigc-context-parallel: the module needs a func.func @forward of one block");
    if (module->hasAttr(kContextParallelAttrName))
      return module.emitError("bigc-context-parallel: already applied (the module has ")
             << kContextParallelAttrName << ")";
    Block &body = func.front();
    for (BlockArgument a : body.getArguments()) {
      auto t = tensorOf(a);
      if (!t || !t.getElementType().isInteger(32) || t.getRank() != 2) continue;
      if (T && t.getDimSize(1) != T)
        return func.emitError("bigc-context-parallel: the token inputs have different lengths");
      T = t.getDimSize(1);
      mark(a, 1);
    }
    if (!T) return func.emitError("bigc-context-parallel: @forward has no token input [B,T] of i32");
    if (T % (2 * cp) != 0)
      return func.emitError("bigc-context-parallel: --cp ")
             << int64_t(cp) << ": the sequence of " << T << " tokens must split into 2 x " << int64_t(cp) << " = "
             << 2 * int64_t(cp) << " equal chunks (each rank holds two, from the start and the end, so that the "
             << "causal attention's work is balanced); use a sequence that is a multiple of " << 2 * int64_t(cp);
    bool attention = false;
    for (Operation &op : body) {
      attention |= isa<GqaAttentionOp, AttentionOp>(op);
      if (failed(visit(&op))) return failure();
    }
    if (!attention)
      return func.emitError("bigc-context-parallel: --cp ")
             << int64_t(cp)
             << ": the model has no attention, so nothing needs the whole sequence; split the batch over the "
             << "ranks instead (data parallelism, without --cp)";
    // Every value of the sequence: this rank's part.
    for (auto &[v, d] : seqDim) {
      auto t = tensorOf(v);
      SmallVector<int64_t> s(t.getShape());
      s[size_t(d)] /= cp;
      v.setType(RankedTensorType::get(s, t.getElementType()));
    }
    func.setType(FunctionType::get(module.getContext(), body.getArgumentTypes(), func.getResultTypes()));
    Builder b(module.getContext());
    module->setAttr(kContextParallelAttrName,
                    b.getDictionaryAttr({b.getNamedAttr("size", b.getI64IntegerAttr(cp)),
                                         b.getNamedAttr("kind", b.getStringAttr(std::string(kind))),
                                         b.getNamedAttr("seq", b.getI64IntegerAttr(T))}));
    return success();
  }
};

} // namespace
