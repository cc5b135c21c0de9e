//===- Shard.cpp - bigc-shard ---------------------------------------------===//
//
// Data parallelism and ZeRO over the "dp" axis of the device mesh (see the
// description in Passes.td): the mesh on the module, the gradient
// collectives (bucketed all-reduce for zero 0; reduce-scatter into shards
// for zero >= 1, per micro-batch for zero >= 2), optimizer states and fp32
// masters as shards, the all-gather of the updated weights (zero 1/2) or of
// each layer's weights before its use (zero 3), and the global gradient norm
// and fp16 overflow flag reduced over the ranks.
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
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"

#include <map>

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCSHARD
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

RankedTensorType tensorOf(Type t) { return cast<RankedTensorType>(t); }

int64_t bytesOf(Type t) {
  auto rt = tensorOf(t);
  int64_t e = rt.getElementType().isF32() ? 4 : 2;
  return rt.getNumElements() * e;
}

Operation *inBlock(Block &block, Operation *op) { return block.findAncestorOpInBlock(*op); }

struct BigcShardPass : public mlir::bigc::impl::BigcShardBase<BigcShardPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run())) signalPassFailure();
  }

  ModuleOp module;
  SymbolTable *symbols = nullptr; // the module's, built once (a lookup by the module walks it)
  ParamOp paramOf(FlatSymbolRefAttr ref) const { return ref ? symbols->lookup<ParamOp>(ref.getValue()) : ParamOp(); }
  Block *block = nullptr;
  int64_t R = 1;

  /// The shard of a tensor of type `full` ([S]); of one used as `tiles` row tiles (bigc-tile),
  /// tile-interleaved: a piece of each tile (tiles x ceil(tile / R) elements).
  RankedTensorType shardType(Type full, int64_t tiles = 1) {
    auto t = tensorOf(full);
    return RankedTensorType::get({tiles * shardElements(t.getNumElements() / tiles, R)}, t.getElementType());
  }

  /// The row tiles of a weight (bigc-tile's bigc.tiles), 1 when it is not tiled.
  static int64_t tilesOf(ParamOp p) {
    auto a = p ? p->getAttrOfType<IntegerAttr>(kTilesAttrName) : IntegerAttr();
    return a ? a.getInt() : 1;
  }

  /// Makes `p` a shard of itself: type [S], bigc.full_shape = its shape; the shards of a weight
  /// used as `tiles` row tiles tile-interleaved (bigc.tiles on it).
  void shardParam(ParamOp p, int64_t tiles = 1) {
    auto t = p.getTensorType();
    OpBuilder b(p);
    p->setAttr(kFullShapeAttrName, b.getDenseI64ArrayAttr(t.getShape()));
    if (tiles > 1) p->setAttr(kTilesAttrName, b.getI64IntegerAttr(tiles));
    p.setTypeAttr(TypeAttr::get(shardType(t, tiles)));
  }

  /// Where the gradient collectives of zero 1 go: the end of the backward
  /// (before the first optimizer-side op).
  Operation *endOfBackward() {
    for (Operation &op : block->without_terminator())
      if (isa<AdamWOp, GlobalNormOp, CheckFiniteOp, LossScaleUpdateOp>(op)) return &op;
    return block->getTerminator();
  }

  /// The first op of micro-batch `k` (k > last: the end of the backward).
  Operation *startOfMicroBatch(int64_t k) {
    for (Operation &op : block->without_terminator()) {
      std::optional<int64_t> m = microBatchOf(&op);
      if (m && *m == k && !isa<GetParamOp>(op)) return &op;
    }
    return endOfBackward();
  }

  /// Where micro-batch `k`'s backward ends: the first op after its last backward op that is not
  /// a parameter read (the next micro-batch's first op, or under a pipeline schedule whatever the
  /// schedule runs next); the end of the backward when nothing follows.
  Operation *endOfMicroBatchBackward(int64_t k) {
    Operation *last = nullptr;
    for (Operation &op : block->without_terminator()) {
      std::optional<int64_t> m = microBatchOf(&op);
      if (m && *m == k && phaseOf(&op) == kBackwardPhase) last = &op;
    }
    if (!last) return startOfMicroBatch(k + 1);
    Operation *next = last->getNextNode();
    while (next && isa<GetParamOp>(next)) next = next->getNextNode();
    Operation *end = endOfBackward();
    return next && next->isBeforeInBlock(end) ? next : end;
  }

  int64_t microOf(Value v) {
    if (Operation *d = v.getDefiningOp())
      if (std::optional<int64_t> m = microBatchOf(d)) return *m;
    return 0;
  }

  /// The accumulation chain of bigc-grad-accum ending at `g`: the per
  /// micro-batch terms in order, and the ops of the chain (adds, casts).
  SmallVector<Value> accumulationTerms(Value g, SmallVector<Operation *> &chain) {
    SmallVector<Value> terms;
    Value cur = g;
    while (true) {
      auto add = cur.getDefiningOp<AddOp>();
      if (!add || !add->hasAttr(kGradAccumAttrName)) break;
      chain.push_back(add);
      terms.push_back(add.getB());
      cur = add.getA();
    }
    terms.push_back(cur);
    std::reverse(terms.begin(), terms.end());
    // Unwrap the f32 casts of the accumulation: the collective moves the
    // 16-bit gradient, the shard is cast.
    for (Value &t : terms)
      if (auto c = t.getDefiningOp<CastOp>(); c && c->hasAttr(kGradAccumAttrName)) {
        chain.push_back(c);
        t = c.getX();
      }
    return terms;
  }

  /// The reduce-scatter of gradient `t` (at the builder's point), into `made`; the op whose result
  /// is the shard. A weight used as `tiles` row tiles: `t` is the bigc.concat of the tiles'
  /// gradients (bigc-autodiff's for bigc-tile's split); each is reduce-scattered right after it is
  /// made, and the pieces joined into the tile-interleaved shard after the last.
  FailureOr<Operation *> scatter(OpBuilder &b, Value t, int64_t tiles, llvm::SmallPtrSet<Operation *, 4> &made) {
    if (tiles == 1) {
      auto rs = createCollective<ReduceScatterOp>(b, t.getLoc(), t, shardType(t.getType()), kReduceSum);
      if (Operation *d = t.getDefiningOp()) copyPlacementTags(d, rs);
      made.insert(rs);
      return rs.getOperation();
    }
    auto cat = t.getDefiningOp<ConcatOp>();
    if (!cat || cat.getAxis() != 0 || int64_t(cat.getInputs().size()) != tiles) return failure();
    OpBuilder::InsertionGuard guard(b);
    SmallVector<Value> pieces;
    Operation *last = nullptr;
    for (Value g : cat.getInputs()) {
      b.setInsertionPointAfterValue(g);
      auto rs = createCollective<ReduceScatterOp>(b, g.getLoc(), g, shardType(g.getType()), kReduceSum);
      if (Operation *d = g.getDefiningOp()) copyPlacementTags(d, rs);
      made.insert(rs);
      pieces.push_back(rs.getResult(0));
      if (!last || last->isBeforeInBlock(rs)) last = rs;
    }
    b.setInsertionPointAfter(last);
    auto joined = b.create<ConcatOp>(t.getLoc(), shardType(t.getType(), tiles), pieces, b.getI64IntegerAttr(0));
    copyPlacementTags(last, joined);
    made.insert(joined);
    return joined.getOperation();
  }

  template <typename OpT> OpT createCollective(OpBuilder &b, Location loc, Value x, Type resultType, StringRef reduce) {
    if constexpr (std::is_same_v<OpT, AllGatherOp>)
      return b.create<AllGatherOp>(loc, TypeRange{resultType}, ValueRange{x}, b.getStringAttr(kDpAxis),
                                   DenseI64ArrayAttr());
    else
      return b.create<OpT>(loc, TypeRange{resultType}, ValueRange{x}, b.getStringAttr(kDpAxis),
                           b.getStringAttr(reduce));
  }

  /// Merges consecutive collectives of one kind (and reduction) into buckets
  /// of at most `bucketMb` MiB: a bucket closes before a collective when a
  /// result of the bucket is used before it. The merged op sits where the
  /// bucket's last member was.
  template <typename OpT> void bucketize() {
    const double cap = bucketMb * 1024.0 * 1024.0;
    SmallVector<OpT> all;
    for (Operation &op : block->without_terminator())
      if (auto c = dyn_cast<OpT>(op)) all.push_back(c);
    auto attrsOf = [](OpT c) {
      std::string r;
      if constexpr (!std::is_same_v<OpT, AllGatherOp>)
        r = c.getReduce().str();
      else if (std::optional<ArrayRef<int64_t>> t = c.getTile()) // (a tile of k: with tiles t of k only)
        r = std::to_string((*t)[0]) + "/" + std::to_string((*t)[1]);
      return c.getGroup().str() + "/" + r;
    };
    auto flush = [&](SmallVector<OpT> &bucket) {
      if (bucket.size() > 1) {
        OpT last = bucket.back();
        OpBuilder b(last);
        SmallVector<Value> ins;
        SmallVector<Type> outs;
        for (OpT c : bucket) {
          ins.append(c.getInputs().begin(), c.getInputs().end());
          outs.append(c.getOutputs().getTypes().begin(), c.getOutputs().getTypes().end());
        }
        OperationState st(last.getLoc(), last->getName());
        st.addOperands(ins);
        st.addTypes(outs);
        st.addAttributes(last->getAttrs());
        Operation *m = b.create(st);
        unsigned k = 0;
        for (OpT c : bucket) {
          for (Value r : c.getOutputs()) r.replaceAllUsesWith(m->getResult(k++));
          c->erase();
        }
      }
      bucket.clear();
    };
    SmallVector<OpT> bucket;
    double bytes = 0;
    for (OpT c : all) {
      double cb = 0;
      for (Value v : c.getInputs()) cb += double(bytesOf(v.getType()));
      bool fits = !bucket.empty() && cap > 0 && bytes + cb <= cap && attrsOf(bucket.front()) == attrsOf(c);
      if (fits)
        for (OpT m : bucket)
          for (Value r : m.getOutputs())
            for (Operation *u : r.getUsers())
              if (Operation *ub = inBlock(*block, u); ub && !c->isBeforeInBlock(ub)) fits = false;
      if (!fits) {
        flush(bucket);
        bytes = 0;
      }
      bucket.push_back(c);
      bytes += cb;
    }
    flush(bucket);
  }

  LogicalResult run() {
    module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (ranks < 1) return module.emitError("bigc-shard: ranks must be at least 1, got ") << ranks;
    if (zero < 0 || zero > 3) return module.emitError("bigc-shard: zero must be 0, 1, 2 or 3, got ") << zero;
    if (module->hasAttr(kZeroAttrName))
      return module.emitError("bigc-shard: already applied (the module has bigc.zero)");
    SymbolTable table(module);
    symbols = &table;
    auto func = table.lookup<func::FuncOp>("train_step");
    if (!func) return module.emitError("bigc-shard: the module has no func.func @train_step (run bigc-autodiff first)");
    if (func.isExternal() || !func.getBody().hasOneBlock())
      return func.emitError("bigc-shard: @train_step must have a body of one block");
    block = &func.front();
    Builder attrs(ctx);
    if (module->hasAttr(kMeshAttrName)) { // bigc-tensor-parallel placed the tp axis
      if (meshRanks(module) != ranks)
        return module.emitError("bigc-shard: the mesh has ") << meshRanks(module) << " ranks, not " << ranks;
      R = meshAxisSize(module, kDpAxis);
    } else {
      R = ranks;
      module->setAttr(kMeshAttrName, attrs.getDictionaryAttr({
                                         attrs.getNamedAttr(kDpAxis, attrs.getI64IntegerAttr(R)),
                                         attrs.getNamedAttr(kPpAxis, attrs.getI64IntegerAttr(1)),
                                         attrs.getNamedAttr(kTpAxis, attrs.getI64IntegerAttr(1)),
                                     }));
    }
    module->setAttr(kZeroAttrName, attrs.getI64IntegerAttr(R == 1 ? 0 : zero));
    if (meshAxisSize(module, kTpAxis) > 1 && failed(lowerTensorParallel())) return failure();
    if (R == 1) {
      reduceOverflowOverTp();
      return reduceNormOverTp(); // one data-parallel rank: nothing to reduce or to shard
    }

    prescaleLossSeeds();

    SmallVector<AdamWOp> updates;
    for (Operation &op : block->without_terminator())
      if (auto a = dyn_cast<AdamWOp>(op)) updates.push_back(a);

    // ZeRO >= 1 in fp32: @N becomes the fp32 master (a shard), @"N.half"
    // the f32 compute copy every rank reads.
    if (zero >= 1)
      for (AdamWOp a : updates) {
        if (a.getHalfAttr()) continue;
        auto p = paramOf(a.getParamAttr());
        if (!p) return a.emitError("bigc-shard: unknown parameter @") << a.getParam();
        std::string halfName = (p.getSymName() + ".half").str();
        FailureOr<ParamOp> half =
            addParamAfter(p, halfName, p.getType(), kInitCopy, kParamRole, p.getSymName(), "bigc-shard", symbols);
        if (failed(half)) return failure();
        StringRef name = p.getSymName();
        p.setRole(kMasterRole);
        auto ref = FlatSymbolRefAttr::get(ctx, halfName);
        func.walk([&](GetParamOp gp) {
          if (gp.getParam() == name) gp.setParamAttr(ref);
        });
        a.setHalfAttr(ref);
      }

    // Gradients.
    for (AdamWOp a : updates) {
      Value g = a.getGrad();
      OpBuilder b(ctx);
      const int64_t tiles = tilesOf(paramOf(a.getParamAttr()));
      if (tiles > 1 && zero != 3)
        return a.emitError("bigc-shard: the weight @")
               << a.getParam() << " is used as " << tiles
               << " row tiles (bigc-tile), which only ZeRO-3 gathers and reduce-scatters one by one; got zero " << zero;
      if (zero == 0) {
        b.setInsertionPointAfterValue(g);
        auto ar = createCollective<AllReduceOp>(b, g.getLoc(), g, g.getType(), kReduceSum);
        if (Operation *d = g.getDefiningOp()) copyPlacementTags(d, ar);
        g.replaceAllUsesExcept(ar.getResult(0), ar);
        continue;
      }
      SmallVector<Operation *> chain;
      SmallVector<Value> terms;
      if (zero >= 2)
        terms = accumulationTerms(g, chain);
      else
        terms = {g};
      Value acc;
      llvm::SmallPtrSet<Operation *, 4> made;
      const int64_t nTerms = int64_t(terms.size());
      for (int64_t i = 0; i < nTerms; ++i) {
        Value t = terms[size_t(i)];
        if (zero == 1)
          b.setInsertionPoint(endOfBackward());
        else
          b.setInsertionPointAfterValue(t);
        FailureOr<Operation *> scattered = scatter(b, t, tiles, made);
        if (failed(scattered))
          return a.emitError("bigc-shard: the gradient of the weight @")
                 << a.getParam() << ", used as " << tiles
                 << " row tiles (bigc-tile), is not the bigc.concat of its tiles' gradients";
        Operation *rs = *scattered;
        Value s = rs->getResult(0);
        if (nTerms == 1) {
          acc = s;
          break;
        }
        // Accumulate the f32 shards at the end of the micro-batch's backward.
        int64_t micro = microOf(t);
        b.setInsertionPoint(endOfMicroBatchBackward(micro));
        auto f32 = RankedTensorType::get(tensorOf(s.getType()).getShape(), Float32Type::get(ctx));
        if (!tensorOf(s.getType()).getElementType().isF32()) {
          auto c = b.create<CastOp>(t.getLoc(), f32, s);
          copyPlacementTags(rs, c);
          c->setAttr(kGradAccumAttrName, b.getUnitAttr());
          s = c;
        }
        if (!acc) {
          acc = s;
        } else {
          auto add = b.create<AddOp>(t.getLoc(), f32, acc, s);
          copyPlacementTags(rs, add);
          add->setAttr(kGradAccumAttrName, b.getUnitAttr());
          acc = add;
        }
      }
      g.replaceUsesWithIf(acc, [&](OpOperand &use) { return !made.count(use.getOwner()); });
      for (Operation *op : chain)
        if (op->use_empty()) op->erase();
      if (tiles > 1) // the whole gradient, made of the tiles' (their pieces are reduced instead)
        for (Value t : terms)
          if (Operation *cat = t.getDefiningOp(); cat && cat->use_empty()) cat->erase();
    }

    if (zero >= 1) {
      // The norm and the overflow flag: over the shards, then over the ranks.
      for (Operation &op : llvm::make_early_inc_range(block->without_terminator())) {
        if (!isa<GlobalNormOp, CheckFiniteOp>(op)) continue;
        Operation *latest = nullptr;
        for (Value v : op.getOperands())
          if (Operation *d = v.getDefiningOp())
            if (!latest || latest->isBeforeInBlock(d)) latest = d;
        if (latest && op.isBeforeInBlock(latest)) op.moveAfter(latest);
        OpBuilder b(ctx);
        b.setInsertionPointAfter(&op);
        Value r = op.getResult(0);
        auto ar = createCollective<AllReduceOp>(b, op.getLoc(), r, r.getType(),
                                                isa<GlobalNormOp>(op) ? kReduceNorm : kReduceMax);
        copyPlacementTags(&op, ar);
        r.replaceAllUsesExcept(ar.getResult(0), ar);
      }
      // Optimizer states and masters as shards.
      for (AdamWOp a : updates) {
        const int64_t tiles = tilesOf(paramOf(a.getParamAttr())); // (its state and copy tiled alike)
        for (FlatSymbolRefAttr ref : {a.getParamAttr(), a.getExpAvgAttr(), a.getExpAvgSqAttr()}) {
          auto p = paramOf(ref);
          if (!p) return a.emitError("bigc-shard: unknown parameter ") << ref;
          if (!p->hasAttr(kFullShapeAttrName)) shardParam(p, tiles);
        }
        auto half = paramOf(a.getHalfAttr());
        if (!half) return a.emitError("bigc-shard: unknown compute copy ") << a.getHalfAttr();
        if (zero == 3) {
          shardParam(half, tiles); // the weight itself is a shard; gathered before each use below
          continue;
        }
        // ZeRO-1/2: the update writes the rank's shard of the compute copy,
        // then every rank gathers the whole copy.
        std::string shardName = (half.getSymName() + ".shard").str();
        FailureOr<ParamOp> sh = addParamAfter(half, shardName, shardType(half.getType()), kInitCopy, kParamRole,
                                              a.getParam(), "bigc-shard", symbols);
        if (failed(sh)) return failure();
        (*sh)->setAttr(kFullShapeAttrName, OpBuilder(ctx).getDenseI64ArrayAttr(half.getTensorType().getShape()));
        a.setHalfAttr(FlatSymbolRefAttr::get(ctx, shardName));
        OpBuilder b(a);
        b.setInsertionPointAfter(a);
        auto pag = b.create<ParamAllGatherOp>(a.getLoc(), FlatSymbolRefAttr::get(ctx, shardName),
                                              FlatSymbolRefAttr::get(ctx, half.getSymName()), b.getStringAttr(kDpAxis));
        copyPlacementTags(a, pag);
      }
    }

    if (zero == 3 && failed(gatherWeights())) return failure();

    bucketize<AllReduceOp>();
    bucketize<ReduceScatterOp>();
    reduceOverflowOverTp();
    if (failed(reduceNormOverTp())) return failure();
    return success();
  }

  /// The gradients are averaged over the ranks by dividing the backward's
  /// seed (dloss of each loss gradient) by R and summing the ranks'
  /// gradients, as bigc-grad-accum divides by K: every rank's 16-bit
  /// gradients then have the magnitude one rank's gradients of the whole
  /// global batch have, so fp16 loss scaling overflows (and skips a step)
  /// where one rank would, instead of at an R times smaller scale.
  void prescaleLossSeeds() {
    SmallVector<Operation *> grads;
    for (Operation &op : block->without_terminator())
      if (isa<CrossEntropyGradOp, VocabCeLossGradOp>(op)) grads.push_back(&op);
    for (Operation *op : grads) {
      OpOperand &seed = isa<CrossEntropyGradOp>(op) ? op->getOpOperand(2) : op->getOpOperand(1);
      OpBuilder b(op);
      auto sc = b.create<ScaleOp>(op->getLoc(), seed.get().getType(), seed.get(), b.getF64FloatAttr(1.0 / double(R)));
      copyPlacementTags(op, sc);
      seed.set(sc.getResult());
    }
  }

  /// The tensor-parallel ops of bigc-tensor-parallel (forward and, by
  /// differentiation, backward) as collectives over "tp": f vanishes, g is an
  /// all-reduce; a gather or reduce-scatter along a dimension other than the
  /// first moves the data in rank-major order, with a local transpose between
  /// it and the tensor's layout. The fp16 overflow flag is reduced over the
  /// tensor ranks too (each sees its chunks of the gradients).
  LogicalResult lowerTensorParallel() {
    const int64_t T = meshAxisSize(module, kTpAxis);
    SmallVector<Operation *> ops;
    for (Operation &op : block->without_terminator())
      if (isa<TpCopyOp, TpAllReduceOp, TpAllGatherOp, TpReduceScatterOp>(op)) ops.push_back(&op);
    auto tp = StringAttr::get(module.getContext(), kTpAxis);
    for (Operation *op : ops) {
      OpBuilder b(op);
      Location loc = op->getLoc();
      auto tag = [&](Operation *made) {
        copyPlacementTags(op, made);
        return made->getResult(0);
      };
      auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
        auto t = RankedTensorType::get(shape, tensorOf(v.getType()).getElementType());
        return t == v.getType() ? v : tag(b.create<ReshapeOp>(loc, t, v));
      };
      auto swap01 = [&](Value v) -> Value { // [a, b, c] -> [b, a, c]
        auto s = tensorOf(v.getType()).getShape();
        auto t = RankedTensorType::get({s[1], s[0], s[2]}, tensorOf(v.getType()).getElementType());
        return tag(b.create<TransposeOp>(loc, t, v, b.getDenseI64ArrayAttr({1, 0, 2})));
      };
      // [pre, d, post] of a tensor split along `dim`.
      auto around = [](RankedTensorType t, int64_t dim) {
        int64_t pre = 1, post = 1;
        for (int64_t i = 0; i < t.getRank(); ++i) (i < dim ? pre : post) *= i == dim ? 1 : t.getShape()[size_t(i)];
        return std::make_tuple(pre, t.getShape()[size_t(dim)], post);
      };
      if (auto c = dyn_cast<TpCopyOp>(op)) {
        c.getY().replaceAllUsesWith(c.getX());
      } else if (auto ar = dyn_cast<TpAllReduceOp>(op)) {
        auto m = b.create<AllReduceOp>(loc, TypeRange{ar.getY().getType()}, ValueRange{ar.getX()}, tp,
                                       b.getStringAttr(kReduceSum));
        ar.getY().replaceAllUsesWith(tag(m));
      } else if (auto ag = dyn_cast<TpAllGatherOp>(op)) {
        auto xt = tensorOf(ag.getX().getType()), yt = tensorOf(ag.getY().getType());
        auto [pre, dl, post] = around(xt, ag.getDim());
        Value flat = reshape(ag.getX(), {xt.getNumElements()});
        Value y;
        if (pre == 1) {
          y = tag(b.create<AllGatherOp>(loc, TypeRange{yt}, ValueRange{flat}, tp, DenseI64ArrayAttr()));
        } else {
          auto gt = RankedTensorType::get({T, pre, dl * post}, yt.getElementType());
          Value g = tag(b.create<AllGatherOp>(loc, TypeRange{gt}, ValueRange{flat}, tp, DenseI64ArrayAttr()));
          y = reshape(swap01(g), yt.getShape());
        }
        ag.getY().replaceAllUsesWith(y);
      } else if (auto rs = dyn_cast<TpReduceScatterOp>(op)) {
        auto xt = tensorOf(rs.getX().getType()), yt = tensorOf(rs.getY().getType());
        auto [pre, d, post] = around(xt, rs.getDim());
        Value in = rs.getX();
        if (pre != 1) in = swap01(reshape(in, {pre, T, d / T * post}));
        in = reshape(in, {xt.getNumElements()});
        auto st = RankedTensorType::get({yt.getNumElements()}, yt.getElementType());
        Value s = tag(b.create<ReduceScatterOp>(loc, TypeRange{st}, ValueRange{in}, tp, b.getStringAttr(kReduceSum)));
        rs.getY().replaceAllUsesWith(reshape(s, yt.getShape()));
      }
      op->erase();
    }
    return success();
  }

  /// The fp16 overflow flag (after its reduction over "dp", if any) reduced
  /// over the tensor ranks too: each sees only its chunks of the gradients,
  /// and every rank must skip the same steps.
  void reduceOverflowOverTp() {
    if (meshAxisSize(module, kTpAxis) <= 1) return;
    SmallVector<CheckFiniteOp> flags;
    for (Operation &op : block->without_terminator())
      if (auto cf = dyn_cast<CheckFiniteOp>(op)) flags.push_back(cf);
    for (CheckFiniteOp cf : flags) {
      Value r = cf.getResult();
      if (r.hasOneUse())
        if (auto ar = dyn_cast<AllReduceOp>(*r.getUsers().begin())) r = ar.getResult(0);
      OpBuilder b(cf);
      b.setInsertionPointAfterValue(r);
      auto m = b.create<AllReduceOp>(cf.getLoc(), TypeRange{r.getType()}, ValueRange{r}, b.getStringAttr(kTpAxis),
                                     b.getStringAttr(kReduceMax));
      copyPlacementTags(cf, m);
      r.replaceAllUsesExcept(m.getResult(0), m);
    }
  }

  /// Gradient clipping over a tensor-parallel mesh: each tensor rank holds
  /// its chunk of a split weight's gradient, and the whole gradient of a
  /// replicated one (the same on every tensor rank). The global norm is
  /// sqrt(N_split^2 + n_rep^2): the norm of the split gradients' chunks,
  /// reduced (norm) over the tensor ranks, combined with the replicated ones'
  /// counted once. Over ZeRO shards, the data-parallel norm reduction that
  /// already follows then combines the shards.
  LogicalResult reduceNormOverTp() {
    if (meshAxisSize(module, kTpAxis) <= 1) return success();
    SmallVector<GlobalNormOp> norms;
    for (Operation &op : block->without_terminator())
      if (auto gn = dyn_cast<GlobalNormOp>(op)) norms.push_back(gn);
    for (GlobalNormOp gn : norms) {
      SmallVector<Value> split, replicated;
      for (Value g : gn.getInputs()) {
        AdamWOp update;
        for (Operation *u : g.getUsers())
          if (auto a = dyn_cast<AdamWOp>(u); a && a.getGrad() == g) update = a;
        auto p = update ? paramOf(update.getParamAttr()) : ParamOp();
        if (!p)
          return gn.emitError("bigc-shard: a gradient of the global norm updates no parameter; cannot tell "
                              "whether it is split over the tensor ranks");
        (p->hasAttr(kTpSplitAttrName) ? split : replicated).push_back(g);
      }
      if (split.empty()) continue; // every gradient whole on every tensor rank: the local norm is the norm
      OpBuilder b(gn);
      Type scalar = gn.getResult().getType();
      auto tag = [&](Operation *made) {
        copyPlacementTags(gn, made);
        return made->getResult(0);
      };
      Value n = tag(b.create<GlobalNormOp>(gn.getLoc(), scalar, split));
      n = tag(b.create<AllReduceOp>(gn.getLoc(), TypeRange{scalar}, ValueRange{n}, b.getStringAttr(kTpAxis),
                                    b.getStringAttr(kReduceNorm)));
      if (!replicated.empty()) {
        Value r = tag(b.create<GlobalNormOp>(gn.getLoc(), scalar, replicated));
        n = tag(b.create<GlobalNormOp>(gn.getLoc(), scalar, ValueRange{n, r}));
      }
      gn.getResult().replaceAllUsesWith(n);
      gn.erase();
    }
    return success();
  }

  /// ZeRO-3: every read of a sharded weight gets the full tensor from an
  /// all-gather at the start of the layer segment that reads it (one bucket
  /// per segment: a layer's forward, its backward, per micro-batch).
  LogicalResult gatherWeights() {
    MLIRContext *ctx = module.getContext();
    // Segments: runs of ops with one (forward or not, micro-batch, layer).
    llvm::DenseMap<Operation *, unsigned> segment;
    std::tuple<bool, int64_t, int64_t> key{};
    unsigned n = 0;
    bool first = true;
    for (Operation &op : block->without_terminator()) {
      if (isa<GetParamOp>(op)) continue;
      bool fwd = phaseOf(&op) == kForwardPhase && !isRecomputed(&op);
      std::tuple<bool, int64_t, int64_t> k{fwd, microBatchOf(&op).value_or(0), opLayer(&op)};
      if (first || k != key) ++n;
      first = false;
      key = k;
      segment[&op] = n;
    }
    // Per segment: the sharded reads (get_param) used in it, and its first user.
    struct Need {
      Operation *firstUser = nullptr;
      llvm::MapVector<Operation *, SmallVector<OpOperand *>> uses; // get_param -> uses in this segment
    };
    std::map<unsigned, Need> needs;
    // A weight read as row tiles (bigc-tile: the read's users are bigc.split along rows): per
    // segment, each read of a tile in the order of the block, and the tile it reads.
    struct TileUse {
      Operation *user;
      int64_t tile;
      OpOperand *use;
    };
    std::map<unsigned, llvm::MapVector<Operation *, SmallVector<TileUse>>> tileNeeds;
    SmallVector<Operation *> splits;
    SmallVector<GetParamOp> reads;
    for (Operation &op : block->without_terminator()) {
      auto gp = dyn_cast<GetParamOp>(op);
      if (!gp) continue;
      auto p = paramOf(gp.getParamAttr());
      if (!p || !p->hasAttr(kFullShapeAttrName) || p.getType() == gp.getType())
        continue; // not a sharded weight (or already a shard read)
      reads.push_back(gp);
      if (const int64_t k = tilesOf(p); k > 1) {
        for (Operation *user : gp->getUsers()) {
          auto split = dyn_cast<SplitOp>(user);
          if (!split || split.getAxis() != 0 || int64_t(split.getNumResults()) != k)
            return user->emitError("bigc-shard: the weight @")
                   << gp.getParam() << " is used as " << k << " row tiles (bigc-tile); its reads must be a "
                   << "bigc.split into them, this one is read by " << user->getName();
          splits.push_back(split);
          for (int64_t t = 0; t < k; ++t)
            for (OpOperand &use : split.getResult(unsigned(t)).getUses()) {
              Operation *u = inBlock(*block, use.getOwner());
              auto it = segment.find(u);
              if (it == segment.end())
                return u->emitError("bigc-shard: a read of a tile of the sharded weight @")
                       << gp.getParam() << " outside the step's ops";
              tileNeeds[it->second][gp].push_back(TileUse{u, t, &use});
            }
        }
        continue;
      }
      for (OpOperand &use : gp->getUses()) {
        Operation *u = inBlock(*block, use.getOwner());
        auto it = segment.find(u);
        if (it == segment.end())
          return u->emitError("bigc-shard: a read of the sharded weight @")
                 << gp.getParam() << " outside the step's ops";
        Need &nd = needs[it->second];
        if (!nd.firstUser || u->isBeforeInBlock(nd.firstUser)) nd.firstUser = u;
        nd.uses[gp].push_back(&use);
      }
    }
    for (auto &[seg, nd] : needs) {
      OpBuilder b(nd.firstUser);
      for (auto &[gpOp, uses] : nd.uses) {
        auto gp = cast<GetParamOp>(gpOp);
        auto p = paramOf(gp.getParamAttr());
        auto shardRead = b.create<GetParamOp>(gp.getLoc(), p.getType(), gp.getParamAttr());
        copyPlacementTags(nd.firstUser, shardRead);
        auto ag = createCollective<AllGatherOp>(b, gp.getLoc(), shardRead, gp.getType(), "");
        copyPlacementTags(nd.firstUser, ag);
        for (OpOperand *use : uses) use->set(ag.getResult(0));
      }
    }
    // Tiles: in each segment, a tile is gathered just before a read of it unless the weight's
    // read before was of the same tile (the recomputed forward reads tiles 0, 1, ..., the backward
    // then k-1, ..., 0: a tile is not kept alive while the others are used).
    const llvm::DenseMap<Operation *, unsigned> order = [&] {
      llvm::DenseMap<Operation *, unsigned> m;
      unsigned i = 0;
      for (Operation &op : block->without_terminator()) m[&op] = i++;
      return m;
    }();
    for (auto &[seg, byRead] : tileNeeds) {
      for (auto &[gpOp, uses] : byRead) {
        auto gp = cast<GetParamOp>(gpOp);
        auto p = paramOf(gp.getParamAttr());
        const int64_t k = tilesOf(p);
        std::stable_sort(uses.begin(), uses.end(), [&](const TileUse &a, const TileUse &b) {
          return order.lookup(a.user) < order.lookup(b.user);
        });
        OpBuilder b(uses.front().user);
        auto shardRead = b.create<GetParamOp>(gp.getLoc(), p.getType(), gp.getParamAttr());
        copyPlacementTags(uses.front().user, shardRead);
        int64_t current = -1;
        Value gathered;
        for (const TileUse &tu : uses) {
          if (tu.tile != current) {
            b.setInsertionPoint(tu.user);
            Type tileType = tu.use->get().getType(); // (the split's result, still)
            auto ag = b.create<AllGatherOp>(gp.getLoc(), TypeRange{tileType}, ValueRange{shardRead.getResult()},
                                            b.getStringAttr(kDpAxis), b.getDenseI64ArrayAttr({tu.tile, k}));
            copyPlacementTags(tu.user, ag);
            gathered = ag.getResult(0);
            current = tu.tile;
          }
          tu.use->set(gathered);
        }
      }
    }
    for (Operation *s : splits)
      if (s->use_empty()) s->erase();
    for (GetParamOp gp : reads)
      if (gp->use_empty()) gp->erase();
    (void)ctx;
    bucketize<AllGatherOp>();
    return success();
  }
};

} // namespace
