//===- PadVocab.cpp - bigc-pad-vocab ---------------------------------------===//
//
// The vocabulary padded to a multiple (see the description in Passes.td): the
// LM head's weight and the embedding tables of V rows become [Vp,C] with
// bigc.vocab_rows = V, the logits [...,Vp], the cross-entropy bigc.classes = V.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCPADVOCAB
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `v` rounded up to a multiple of `step`.
int64_t roundUp(int64_t v, int64_t step) { return (v + step - 1) / step * step; }

RankedTensorType withDim(RankedTensorType t, int64_t dim, int64_t size) {
  SmallVector<int64_t> s(t.getShape());
  s[size_t(dim)] = size;
  return RankedTensorType::get(s, t.getElementType());
}

/// One LM head: the cross-entropy, the reshape between it and the matmul (or null), the matmul and
/// the parameter of its weight.
struct Head {
  CrossEntropyOp loss;
  ReshapeOp reshape;
  MatmulOp matmul;
  ParamOp weight;
  int64_t vocab = 0;
};

struct BigcPadVocabPass : public mlir::bigc::impl::BigcPadVocabBase<BigcPadVocabPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  /// The head whose logits `ce` reads, or an error naming what is not one.
  FailureOr<Head> headOf(ModuleOp module, CrossEntropyOp ce) {
    Head h;
    h.loss = ce;
    Value logits = ce.getLogits();
    const int64_t v = tensorOf(logits).getShape().back();
    auto notHead = [&](const Twine &why) {
      return ce.emitError("--pad-vocab: ") << why
                                           << "; the pass pads the vocabulary of an LM head `bigc.matmul %h, %w "
                                              "{transpose_b}` (w a [V,C] parameter) whose logits only this "
                                              "cross-entropy reads (compile without --pad-vocab)";
    };
    if (!logits.hasOneUse()) return notHead("its logits are read by another op too");
    if (auto r = logits.getDefiningOp<ReshapeOp>()) {
      if (tensorOf(r.getX()).getShape().back() != v)
        return notHead("its logits are a reshape that moves the vocabulary");
      h.reshape = r;
      logits = r.getX();
      if (!logits.hasOneUse()) return notHead("its logits are read by another op too");
    }
    h.matmul = logits.getDefiningOp<MatmulOp>();
    if (!h.matmul) return notHead("its logits are not a bigc.matmul's");
    if (!h.matmul.getTransposeB() || h.matmul.getTransposeA() || tensorOf(h.matmul.getB()).getRank() != 2)
      return notHead("its logits' matmul is not h @ w^T with a 2-D w");
    auto gp = h.matmul.getB().getDefiningOp<GetParamOp>();
    if (!gp) return notHead("the LM head's weight is not a parameter");
    h.weight = module.lookupSymbol<ParamOp>(gp.getParam());
    if (!h.weight) return gp.emitError("--pad-vocab: no bigc.param @") << gp.getParam();
    if (h.weight.getTensorType().getShape()[0] != v) return notHead("the LM head's weight does not have V rows");
    h.vocab = v;
    return h;
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (multiple < 1) return module.emitError("bigc-pad-vocab: multiple must be >= 1, got ") << multiple;
    if (tp < 1) return module.emitError("bigc-pad-vocab: tp must be >= 1, got ") << tp;
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func || func.isExternal())
      return module.emitError("bigc-pad-vocab: the module has no func.func @forward (it runs before bigc-autodiff)");
    SmallVector<CrossEntropyOp> losses;
    func.walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
    if (losses.empty())
      return module.emitError("--pad-vocab: the model has no bigc.cross_entropy (no vocabulary to pad); compile "
                              "without --pad-vocab");
    const int64_t step = multiple * tp;
    // The parameters to pad (symbol -> the vocabulary, whose rows it has) and the heads.
    llvm::MapVector<StringAttr, int64_t> padded;
    SmallVector<Head> heads;
    for (CrossEntropyOp ce : losses) {
      FailureOr<Head> h = headOf(module, ce);
      if (failed(h)) return failure();
      const int64_t vp = roundUp(h->vocab, step);
      if (vp == h->vocab) continue; // a multiple already
      if (tp > 1 && h->vocab <= vp - vp / tp) {
        const int64_t works = padMultipleFor(h->vocab, tp, multiple);
        auto d = ce.emitError("--pad-vocab ")
                 << int64_t(multiple) << " with --tp " << int64_t(tp) << " pads the vocabulary of " << h->vocab
                 << " to " << vp << " rows, leaving the last tensor rank's " << vp / tp << " rows all padding";
        if (works > 0)
          d << "; use a smaller multiple (--pad-vocab " << works << ")";
        else
          d << "; " << h->vocab << " rows are too few to split over " << int64_t(tp)
            << " tensor ranks: use a smaller --tp";
        return d;
      }
      heads.push_back(*h);
      padded[h->weight.getSymNameAttr()] = h->vocab;
    }
    if (heads.empty()) return success(); // every vocabulary a multiple already
    // The embedding tables of a padded vocabulary's rows (tied to the head or not).
    func.walk([&](EmbeddingOp e) {
      auto gp = e.getTable().getDefiningOp<GetParamOp>();
      if (!gp) return;
      ParamOp p = module.lookupSymbol<ParamOp>(gp.getParam());
      if (!p || p.getTensorType().getRank() != 2) return;
      for (const Head &h : heads)
        if (p.getTensorType().getShape()[0] == h.vocab) padded.insert({p.getSymNameAttr(), h.vocab});
    });
    // Every read of a padded weight is a head's matmul (its w) or an embedding (its table).
    llvm::SmallPtrSet<Operation *, 4> headMatmuls;
    for (const Head &h : heads) headMatmuls.insert(h.matmul);
    SmallVector<GetParamOp> reads;
    WalkResult walk = func.walk([&](GetParamOp gp) {
      auto it = padded.find(gp.getParamAttr().getAttr());
      if (it == padded.end()) return WalkResult::advance();
      reads.push_back(gp);
      for (OpOperand &use : gp.getResult().getUses()) {
        Operation *user = use.getOwner();
        const bool ok = (headMatmuls.count(user) && use.getOperandNumber() == 1) ||
                        (isa<EmbeddingOp>(user) && use.getOperandNumber() == 0);
        if (!ok) {
          user->emitError("--pad-vocab: this ")
              << user->getName() << " reads @\"" << gp.getParam()
              << "\", whose vocabulary rows the pass pads; only the LM head's matmul and embeddings may read it "
                 "(compile without --pad-vocab)";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted()) return failure();
    // Rewrite: the parameters and their reads, the logits, the losses.
    Builder b(module.getContext());
    for (auto [sym, v] : padded) {
      auto p = module.lookupSymbol<ParamOp>(sym);
      const int64_t vp = roundUp(v, step);
      p.setTypeAttr(TypeAttr::get(withDim(p.getTensorType(), 0, vp)));
      p->setAttr(kVocabRowsAttrName, b.getI64IntegerAttr(v));
    }
    for (GetParamOp gp : reads) {
      gp.getResult().setType(module.lookupSymbol<ParamOp>(gp.getParam()).getTensorType());
      for (Operation *user : gp.getResult().getUsers()) // an id from the padding is no token
        if (isa<EmbeddingOp>(user))
          user->setAttr(kClassesAttrName, b.getI64IntegerAttr(padded.lookup(gp.getParamAttr().getAttr())));
    }
    for (Head &h : heads) {
      const int64_t vp = roundUp(h.vocab, step);
      Value y = h.matmul.getC();
      y.setType(withDim(tensorOf(y), tensorOf(y).getRank() - 1, vp));
      if (h.reshape) {
        Value r = h.reshape.getY();
        r.setType(withDim(tensorOf(r), tensorOf(r).getRank() - 1, vp));
      }
      h.loss->setAttr(kClassesAttrName, b.getI64IntegerAttr(h.vocab));
    }
    return success();
  }
};

} // namespace

int64_t mlir::bigc::padMultipleFor(int64_t vocab, int64_t tp, int64_t want) {
  int64_t works = 0;
  for (int64_t m = 1; m <= std::max<int64_t>(1, want); m *= 2) {
    const int64_t vp = roundUp(vocab, m * std::max<int64_t>(1, tp));
    if (tp <= 1 || vocab > vp - vp / tp) works = m;
  }
  return works;
}
