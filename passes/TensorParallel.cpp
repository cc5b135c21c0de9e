//===- TensorParallel.cpp - bigc-tensor-parallel --------------------------===//
//
// Tensor and sequence parallelism over the "tp" axis of the device mesh, on
// the forward graph before bigc-autodiff (see the description in Passes.td):
// layouts propagated through the ops' rules (TensorParallelOpInterface),
// weights placed by their first reader, conversions (Megatron's f and g and
// their sequence-parallel forms) where a layout must change.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <tuple>

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

std::string shapeStr(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

std::string locStr(Location loc) {
  if (auto f = dyn_cast<FileLineColLoc>(loc))
    return (f.getFilename().str() + ":" + std::to_string(f.getLine()) + ":" + std::to_string(f.getColumn()));
  return "";
}

struct Conversion {
  Operation *op;
  unsigned operand;
  TpLayout want;
};

struct Analysis {
  llvm::DenseMap<Value, TpLayout> layout;
  llvm::StringMap<TpLayout> params; // placed weights
  SmallVector<Conversion> conversions;
  llvm::DenseMap<Operation *, TpRule> rules;
  SmallVector<std::string> replicated;
  SmallVector<std::pair<Value, int64_t>> demands; // operand values a consumer wants in segments
};

struct BigcTensorParallelPass : public mlir::bigc::impl::BigcTensorParallelBase<BigcTensorParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  ModuleOp module;
  func::FuncOp func;
  int64_t T = 1;

  TpLayout layoutOf(const Analysis &a, Value v) const {
    if (auto gp = v.getDefiningOp<GetParamOp>()) {
      auto it = a.params.find(gp.getParam());
      if (it != a.params.end()) return it->second;
      TpLayout free;
      free.freeParam = true;
      return free;
    }
    auto it = a.layout.find(v);
    return it == a.layout.end() ? TpLayout::rep() : it->second;
  }

  /// Places weight @name as `want` asks (first reader), checking that T
  /// divides the split.
  LogicalResult place(Analysis &a, GetParamOp gp, const TpLayout &want, Operation *reader) {
    TpLayout l = want.kind == TpLayout::Split ? TpLayout::split(want.dim, want.segments) : TpLayout::rep();
    if (l.kind == TpLayout::Split) {
      auto shape = tensorOf(gp.getResult()).getShape();
      const int64_t n = shape[size_t(l.dim)];
      if (n % (T * l.segments) != 0) {
        std::string name = gp.getParam().str();
        if (isa<EmbeddingOp>(reader) ||
            (isa<MatmulOp>(reader) && cast<MatmulOp>(reader).getTransposeB() && l.dim == 0)) {
          const int64_t padded = (n + T - 1) / T * T, mega = (n + 128 * T - 1) / (128 * T) * (128 * T);
          return reader->emitError("--tp ")
                 << T << " does not divide the vocabulary (" << n << " rows of @\"" << name
                 << "\"), which the vocabulary-parallel embedding and loss split over the tensor ranks; compile "
                    "with --pad-vocab 64 (the compiler pads the vocabulary to a multiple of 64 x tp, the padding "
                    "outside the loss and kept zero; the model's tensors keep their shape), or pad the vocabulary "
                    "of the model to a multiple of "
                 << T << " (`bigc gen gpt --vocab " << padded << "`; Megatron pads to a multiple of 128 x tp: " << mega
                 << ")";
        }
        return reader->emitError("--tp ")
               << T << " does not divide dimension " << l.dim << " (" << n << (l.segments > 1 ? " in " : "")
               << (l.segments > 1 ? std::to_string(l.segments) + " segments" : std::string()) << ") of @\"" << name
               << "\" " << shapeStr(shape) << ", which this " << reader->getName().getStringRef()
               << " splits over the tensor ranks (the hidden size and the MLP width must be multiples of the "
                  "tensor size"
               << (sequenceParallel ? "; with --sequence-parallel, the sequence length must be a multiple of it too"
                                    : "")
               << "); choose a --tp that divides it";
      }
    }
    a.params[gp.getParam()] = l;
    return success();
  }

  FailureOr<Analysis> analyze(const llvm::DenseMap<Value, int64_t> &demands) {
    Analysis a;
    TpContext ctx;
    ctx.tp = T;
    ctx.sequenceParallel = sequenceParallel;
    for (Operation &op : func.front()) {
      if (isa<GetParamOp>(op)) continue;
      if (isa<TpCopyOp, TpAllReduceOp, TpAllGatherOp, TpReduceScatterOp, TpSliceOp, VocabCeStatsOp, VocabCeLossOp>(op))
        return op.emitError("bigc-tensor-parallel: the model is tensor-parallel already");
      SmallVector<TpLayout> in;
      for (Value v : op.getOperands()) in.push_back(layoutOf(a, v));
      TpRule rule;
      if (isa<func::ReturnOp>(op)) {
        rule.operands.assign(op.getNumOperands(), TpLayout::rep());
      } else if (auto iface = dyn_cast<TensorParallelOpInterface>(op)) {
        ctx.resultSegments = op.getNumResults() ? demands.lookup(op.getResult(0)) : 0;
        if (ctx.resultSegments < 1) ctx.resultSegments = 1;
        rule = iface.getTpRule(in, ctx);
        if (StringRef(rule.note).starts_with("error: ")) return op.emitError(StringRef(rule.note).drop_front(7));
      } else {
        rule.operands.assign(op.getNumOperands(), TpLayout::rep());
        rule.results.assign(op.getNumResults(), TpLayout::rep());
        rule.note = "no tensor-parallel rule";
      }
      if (rule.demandOperand >= 0)
        a.demands.push_back({op.getOperand(unsigned(rule.demandOperand)), rule.demandSegments});
      for (unsigned i = 0; i < op.getNumOperands(); ++i) {
        TpLayout want = rule.operands[i], cur = in[i];
        if (cur.freeParam) {
          if (failed(place(a, op.getOperand(i).getDefiningOp<GetParamOp>(), want, &op))) return failure();
          cur = layoutOf(a, op.getOperand(i));
        }
        if (!cur.sameAs(want) || want.gradPartial) a.conversions.push_back({&op, i, want});
      }
      for (unsigned j = 0; j < op.getNumResults(); ++j) {
        TpLayout r = rule.results[j];
        r.gradPartial = r.freeParam = false;
        a.layout[op.getResult(j)] = r;
      }
      if (!rule.note.empty()) {
        std::string where = locStr(op.getLoc());
        a.replicated.push_back(op.getName().getStringRef().str() + (where.empty() ? "" : " at " + where) + ": " +
                               rule.note);
      }
      a.rules[&op] = rule;
    }
    return a;
  }

  /// Asks the producers of `v` (through ops that keep a layout) for `s` segments.
  void demand(llvm::DenseMap<Value, int64_t> &d, Value v, int64_t s, int depth = 0) {
    if (depth > 64) return;
    d[v] = s;
    Operation *p = v.getDefiningOp();
    if (!p || isa<MatmulOp>(p)) return;
    if (isa<BiasAddOp, GeluOp, ScaleOp, CastOp, SiluOp, RopeOp>(p))
      demand(d, p->getOperand(0), s, depth + 1);
    else if (isa<AddOp, MulOp, SwigluOp, GegluOp>(p))
      for (Value o : p->getOperands()) demand(d, o, s, depth + 1);
  }

  RankedTensorType chunkType(RankedTensorType t, int64_t dim) {
    SmallVector<int64_t> s(t.getShape());
    s[size_t(dim)] /= T;
    return RankedTensorType::get(s, t.getElementType());
  }
  RankedTensorType wholeType(RankedTensorType t, int64_t dim) {
    SmallVector<int64_t> s(t.getShape());
    s[size_t(dim)] *= T;
    return RankedTensorType::get(s, t.getElementType());
  }

  LogicalResult checkDivides(Operation *at, Value v, int64_t dim) {
    auto t = tensorOf(v);
    if (t.getShape()[size_t(dim)] % T == 0) return success();
    return at->emitError("--tp ") << T << " does not divide dimension " << dim << " (" << t.getShape()[size_t(dim)]
                                  << ") of " << shapeStr(t.getShape())
                                  << (sequenceParallel ? ", which --sequence-parallel splits over the tensor ranks "
                                                         "(the sequence length must be a multiple of the tensor size)"
                                                       : ", which the tensor ranks split");
  }

  /// `v` (laid out as `cur`) as `want`, built before `at`.
  FailureOr<Value> convert(OpBuilder &b, Operation *at, Value v, TpLayout cur, const TpLayout &want) {
    Location loc = at->getLoc();
    auto group = b.getStringAttr(kTpAxis);
    auto tag = [&](Operation *made) {
      copyPlacementTags(at, made);
      return made->getResult(0);
    };
    auto t = tensorOf(v);
    if (cur.isPartial()) {
      if (want.isRep()) {
        Value y = tag(b.create<TpAllReduceOp>(loc, t, v, group));
        return want.gradPartial ? tag(b.create<TpCopyOp>(loc, t, y, group)) : y;
      }
      if (want.kind == TpLayout::Split && want.segments == 1) {
        if (failed(checkDivides(at, v, want.dim))) return failure();
        return tag(b.create<TpReduceScatterOp>(loc, chunkType(t, want.dim), v, group, b.getI64IntegerAttr(want.dim)));
      }
    }
    if (cur.kind == TpLayout::Split) {
      if (cur.segments != 1)
        return at->emitError("bigc-tensor-parallel: cannot gather a value split in ")
               << cur.segments << " segments for this " << at->getName().getStringRef();
      Value whole = tag(b.create<TpAllGatherOp>(loc, wholeType(t, cur.dim), v, group, b.getI64IntegerAttr(cur.dim),
                                                b.getStringAttr(want.gradPartial ? "reduce_scatter" : "slice")));
      if (want.isRep()) return whole;
      cur = TpLayout::rep(), v = whole, t = tensorOf(v);
    }
    if (cur.isRep()) {
      if (want.isRep()) return tag(b.create<TpCopyOp>(loc, t, v, group)); // gradPartial
      if (want.kind == TpLayout::Split && want.segments == 1) {
        if (failed(checkDivides(at, v, want.dim))) return failure();
        Value y = tag(b.create<TpSliceOp>(loc, chunkType(t, want.dim), v, group, b.getI64IntegerAttr(want.dim)));
        return want.gradPartial ? tag(b.create<TpCopyOp>(loc, tensorOf(y), y, group)) : y;
      }
    }
    return at->emitError("bigc-tensor-parallel: no conversion from ")
           << cur.str() << " to " << want.str() << " (internal error)";
  }

  LogicalResult apply(Analysis &a) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    // Weights: the rank's chunk.
    for (auto &entry : a.params) {
      const TpLayout &l = entry.second;
      if (l.kind != TpLayout::Split) continue;
      auto p = module.lookupSymbol<ParamOp>(entry.first());
      if (!p) return module.emitError("bigc-tensor-parallel: unknown parameter @") << entry.first();
      auto full = p.getTensorType();
      p->setAttr(kTpSplitAttrName, b.getDenseI64ArrayAttr({l.dim, l.segments}));
      p->setAttr(kTpFullShapeAttrName, b.getDenseI64ArrayAttr(full.getShape()));
      p.setTypeAttr(TypeAttr::get(chunkType(full, l.dim)));
    }
    func.walk([&](GetParamOp gp) {
      auto it = a.params.find(gp.getParam());
      if (it != a.params.end() && it->second.kind == TpLayout::Split)
        gp.getResult().setType(chunkType(tensorOf(gp.getResult()), it->second.dim));
    });
    llvm::DenseMap<Operation *, SmallVector<Conversion>> byOp;
    for (const Conversion &c : a.conversions) byOp[c.op].push_back(c);
    std::map<std::tuple<void *, int, int64_t, int64_t, bool>, Value> made;
    SmallVector<Operation *> ops;
    for (Operation &op : func.front())
      if (!isa<GetParamOp>(op)) ops.push_back(&op);
    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      for (const Conversion &c : byOp.lookup(op)) {
        Value v = op->getOperand(c.operand);
        auto key =
            std::make_tuple(v.getAsOpaquePointer(), int(c.want.kind), c.want.dim, c.want.segments, c.want.gradPartial);
        auto it = made.find(key);
        if (it == made.end()) {
          FailureOr<Value> y = convert(b, op, v, layoutOf(a, v), c.want);
          if (failed(y)) return failure();
          it = made.emplace(key, *y).first;
        }
        op->setOperand(c.operand, it->second);
      }
      const TpRule &rule = a.rules[op];
      for (unsigned j = 0; j < op->getNumResults(); ++j) {
        const TpLayout &l = rule.results[j];
        if (l.kind == TpLayout::Split) op->getResult(j).setType(chunkType(tensorOf(op->getResult(j)), l.dim));
      }
      if (rule.divideHeads) {
        if (auto att = dyn_cast<AttentionOp>(op)) att.setHeads(att.getHeads() / T);
        if (auto g = dyn_cast<GqaAttentionOp>(op)) {
          g.setHeads(g.getHeads() / T);
          if (rule.operands[1].kind == TpLayout::Split)
            g.setKvHeads(g.getKvHeads() / T);
          else
            g.setTpHeads(true); // q: this rank's heads; k, v: all of them
        }
      }
      if (rule.vocabParallel) op->setAttr(kVocabGroupAttrName, b.getStringAttr(kTpAxis));
      if (rule.vocabParallelLoss) {
        auto ce = cast<CrossEntropyOp>(op);
        SmallVector<int64_t> s(tensorOf(ce.getTargets()).getShape());
        s.push_back(2);
        auto statsT = RankedTensorType::get(s, Float32Type::get(ctx));
        auto stats =
            b.create<VocabCeStatsOp>(ce.getLoc(), statsT, ce.getLogits(), ce.getTargets(), b.getStringAttr(kTpAxis));
        copyPlacementTags(op, stats);
        if (Attribute c = op->getAttr(kClassesAttrName)) stats->setAttr(kClassesAttrName, c); // a padded vocabulary
        auto all = b.create<TpAllGatherOp>(ce.getLoc(), wholeType(statsT, 0), stats.getResult(),
                                           b.getStringAttr(kTpAxis), b.getI64IntegerAttr(0), b.getStringAttr("slice"));
        copyPlacementTags(op, all);
        auto loss =
            b.create<VocabCeLossOp>(ce.getLoc(), ce.getLoss().getType(), all.getResult(), b.getI64IntegerAttr(T));
        copyPlacementTags(op, loss);
        ce.getLoss().replaceAllUsesWith(loss.getResult());
        ce->erase();
      }
    }
    if (!a.replicated.empty()) {
      SmallVector<Attribute> notes;
      for (const std::string &n : a.replicated) notes.push_back(b.getStringAttr(n));
      module->setAttr(kTpReplicatedAttrName, b.getArrayAttr(notes));
    }
    return success();
  }

  LogicalResult run() {
    module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (tp < 1) return module.emitError("--tp must be at least 1, got ") << tp;
    if (ranks < 1 || ranks % tp != 0)
      return module.emitError("--tp ") << tp << " does not divide --ranks " << ranks
                                       << ": the mesh is dp x tp x pp = ranks, so the ranks must be a multiple of "
                                          "the tensor size (e.g. --ranks "
                                       << tp * std::max<int64_t>(1, ranks / tp) << ")";
    if (module->hasAttr(kMeshAttrName))
      return module.emitError("bigc-tensor-parallel: the module has a device mesh already");
    func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      return module.emitError("bigc-tensor-parallel: the module needs a func.func @forward of one block");
    T = tp;
    Builder attrs(ctx);
    module->setAttr(kMeshAttrName, attrs.getDictionaryAttr({
                                       attrs.getNamedAttr(kDpAxis, attrs.getI64IntegerAttr(ranks / tp)),
                                       attrs.getNamedAttr(kPpAxis, attrs.getI64IntegerAttr(1)),
                                       attrs.getNamedAttr(kTpAxis, attrs.getI64IntegerAttr(tp)),
                                   }));
    if (sequenceParallel) module->setAttr(kSequenceParallelAttrName, attrs.getUnitAttr());
    if (T == 1) return success();
    llvm::DenseMap<Value, int64_t> demands;
    for (int round = 0; round < 4; ++round) {
      FailureOr<Analysis> a = analyze(demands);
      if (failed(a)) return failure();
      bool more = false;
      for (auto &[v, s] : a->demands)
        if (demands.lookup(v) != s) {
          demand(demands, v, s);
          more = true;
        }
      if (!more || round == 3) return apply(*a);
    }
    return success();
  }
};

} // namespace
