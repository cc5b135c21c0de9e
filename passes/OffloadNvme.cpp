//===- OffloadNvme.cpp - bigc-offload-nvme --------------------------------===//
//
// NVMe offload (ZeRO-Infinity; see the description in Passes.td): after
// bigc-offload, the tensors only a host bigc.adamw touches (its moments and
// its fp32 master) move to the "nvme" space, and each update reads and
// writes host staging copies of them, brought in and written back by
// bigc.param_copy ops that bigc-schedule puts on the "nvme" stream. With
// params=true the compute weights bigc-offload left on the host follow:
// written back after their update, read into a staging tensor of its own
// before each use.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCOFFLOADNVME
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// A host staging tensor (role transfer) of `type` named `name`, after `after` (entered into
/// `symbols`: a lookup without the table scans the module, once per new tensor).
FailureOr<ParamOp> addHostStaging(ParamOp after, StringRef name, Type type, SymbolTable *symbols) {
  FailureOr<ParamOp> p = addParamAfter(after, name, type, kInitZeros, kTransferRole, "", "bigc-offload-nvme", symbols);
  if (succeeded(p)) p->getOperation()->setAttr(kSpaceAttrName, StringAttr::get(after.getContext(), kHostSpace));
  return p;
}

struct BigcOffloadNvmePass : public mlir::bigc::impl::BigcOffloadNvmeBase<BigcOffloadNvmePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable table(module);
    symbols_ = &table;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      module.emitError("bigc-offload-nvme: the module needs a func.func @train_step of one block (run "
                       "bigc-autodiff and bigc-offload first)");
      return signalPassFailure();
    }
    if (chunk < 0 || chunk % kChunkQuantum != 0) {
      module.emitError("bigc-offload-nvme: chunk must be a multiple of ")
          << kChunkQuantum << " elements, got " << int64_t(chunk);
      return signalPassFailure();
    }
    Block &block = func.front();
    // How many ops touch each parameter (by bigc.get_param or by symbol).
    llvm::StringMap<int> touches;
    SmallVector<AdamWOp> updates;
    for (Operation &op : block.without_terminator()) {
      if (auto gp = dyn_cast<GetParamOp>(op)) ++touches[gp.getParam()];
      for (NamedAttribute na : op.getAttrs())
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(na.getValue())) ++touches[ref.getValue()];
      if (auto a = dyn_cast<AdamWOp>(op)) updates.push_back(a);
    }
    if (updates.empty()) return;
    for (AdamWOp a : updates)
      if (opSpace(a) != kHostSpace) {
        a.emitError("bigc-offload-nvme: the update of @")
            << a.getParam() << " runs on the device (run bigc-offload first)";
        return signalPassFailure();
      }
    MLIRContext *ctx = module.getContext();
    auto tag = [&](Operation *op, int64_t id) {
      op->setAttr(kNvmeUpdateAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), id));
    };
    for (auto [id, a] : llvm::enumerate(updates)) {
      tag(a, int64_t(id));
      if (grads) swapGradient(a, int64_t(id));
      SmallVector<std::pair<StringRef, FlatSymbolRefAttr>> tensors = {{"exp_avg", a.getExpAvgAttr()},
                                                                      {"exp_avg_sq", a.getExpAvgSqAttr()}};
      if (masters) tensors.push_back({"param", a.getParamAttr()});
      for (auto &[attr, ref] : tensors) {
        auto p = symbols_->lookup<ParamOp>(ref.getValue());
        if (!p) {
          a.emitError("bigc-offload-nvme: unknown parameter @") << ref.getValue();
          return signalPassFailure();
        }
        // Only what this update alone touches, on the host, streams from the file.
        if (paramSpace(p) != kHostSpace || touches.lookup(ref.getValue()) != 1) continue;
        std::string ioName = (ref.getValue() + ".io").str();
        if (failed(addHostStaging(p, ioName, p.getType(), symbols_))) return signalPassFailure();
        p->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
        auto ioRef = FlatSymbolRefAttr::get(ctx, ioName);
        OpBuilder b(a);
        auto in = b.create<ParamCopyOp>(a.getLoc(), ref, ioRef);
        in->setAttr(kSpaceAttrName, StringAttr::get(ctx, kHostSpace));
        copyPlacementTags(a, in);
        tag(in, int64_t(id));
        b.setInsertionPointAfter(a);
        auto out = b.create<ParamCopyOp>(a.getLoc(), ioRef, ref);
        out->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
        copyPlacementTags(a, out);
        tag(out, int64_t(id));
        if (attr == "param") a.setWeightAttr(ref); // (the tensor of record, for the gradient dump)
        a->setAttr(attr, ioRef);
      }
    }
    if (params && failed(moveWeights(module, block))) return signalPassFailure();
    if (chunk > 0) {
      // (One pass over the block and the parameters: a module's symbol lookup walks all of them.)
      for (ParamOp p : module.getOps<ParamOp>()) params_[p.getSymName()] = p;
      for (Operation &op : block.without_terminator())
        if (auto pc = dyn_cast<ParamCopyOp>(op))
          if (auto t = pc->getAttrOfType<IntegerAttr>(kNvmeUpdateAttrName)) groups_[t.getInt()].push_back(pc);
      for (AdamWOp a : updates)
        if (failed(splitUpdate(module, a, int64_t(updates.size())))) return signalPassFailure();
    }
    module->setAttr(kOffloadAttrName, StringAttr::get(ctx, "nvme"));
  }

  /// Chunks start on 4096-byte boundaries of every tensor (2-byte elements and up): O_DIRECT.
  static constexpr int64_t kChunkQuantum = kNvmeAlignment / 2;

  /// An update whose state all streams from the nvme space and is larger than `chunk` elements
  /// becomes one update per chunk (ZeRO-Infinity's sub-groups), each reading and writing its
  /// chunk of the state through one of two sets of host staging tensors of `chunk` elements
  /// (chunk k uses set k mod 2): the host holds two chunks of the state, not the whole tensor's.
  /// The copies of a chunk read and write at its offset; the update reads the gradient and
  /// writes a whole compute copy (`half`) at the offset, or a chunk-sized one written back at it.
  LogicalResult splitUpdate(ModuleOp module, AdamWOp a, int64_t firstId) {
    MLIRContext *ctx = module.getContext();
    const int64_t n = cast<RankedTensorType>(a.getGrad().getType()).getNumElements();
    if (n <= chunk) return success();
    const int64_t id = a->getAttrOfType<IntegerAttr>(kNvmeUpdateAttrName).getInt();
    // The group: the copies carrying the update's number, each from or to a staging tensor.
    SmallVector<ParamCopyOp> reads, writes;
    for (ParamCopyOp pc : groups_.lookup(id))
      (paramSpace(params_.lookup(pc.getTo())) == kNvmeSpace ? writes : reads).push_back(pc);
    // Every state tensor must stream (a host master, masters=false, is updated whole).
    llvm::StringMap<ParamCopyOp> readInto;
    for (ParamCopyOp pc : reads) readInto[pc.getTo()] = pc;
    for (FlatSymbolRefAttr ref : {a.getParamAttr(), a.getExpAvgAttr(), a.getExpAvgSqAttr()})
      if (!readInto.count(ref.getValue())) return success();
    // Staging sets: NAME.c0 and NAME.c1, 1-D, `chunk` elements of NAME's type.
    auto chunkSet = [&](StringRef name) -> FailureOr<std::array<FlatSymbolRefAttr, 2>> {
      ParamOp p = params_.lookup(name);
      auto type = RankedTensorType::get({int64_t(chunk)}, p.getTensorType().getElementType());
      std::array<FlatSymbolRefAttr, 2> out;
      ParamOp after = p;
      for (int s = 0; s < 2; ++s) {
        std::string setName = (name + ".c" + llvm::Twine(s)).str();
        FailureOr<ParamOp> q = addHostStaging(after, setName, type, symbols_);
        if (failed(q)) return failure();
        after = *q;
        out[s] = FlatSymbolRefAttr::get(ctx, setName);
      }
      return out;
    };
    llvm::StringMap<std::array<FlatSymbolRefAttr, 2>> sets; // staging tensor -> its two chunk sets
    for (ParamCopyOp pc : reads) {
      auto s = chunkSet(pc.getTo());
      if (failed(s)) return failure();
      sets[pc.getTo()] = *s;
    }
    // The half: a staging tensor written back to the nvme space (--offload-params nvme) is
    // chunked too; a host tensor copied whole to the device (.stage) is written at the offset.
    ParamCopyOp halfWrite;
    if (std::optional<StringRef> half = a.getHalf())
      for (ParamCopyOp pc : writes)
        if (pc.getFrom() == *half) halfWrite = pc;
    if (halfWrite) {
      auto s = chunkSet(halfWrite.getFrom());
      if (failed(s)) return failure();
      sets[halfWrite.getFrom()] = *s;
    }
    auto i64 = [&](int64_t v) { return IntegerAttr::get(IntegerType::get(ctx, 64), v); };
    OpBuilder b(a);
    const int64_t chunks = (n + chunk - 1) / chunk;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t off = k * chunk, count = std::min(int64_t(chunk), n - off);
      const int s = int(k % 2);
      const int64_t chunkId = k == 0 ? id : firstId + chunkCounter_++;
      b.setInsertionPoint(a);
      for (ParamCopyOp pc : reads) {
        auto c = cast<ParamCopyOp>(b.clone(*pc));
        c.setToAttr(sets[pc.getTo()][s]);
        c.setFromOffsetAttr(i64(off));
        c.setCountAttr(i64(count));
        c->setAttr(kNvmeUpdateAttrName, i64(chunkId));
      }
      auto u = cast<AdamWOp>(b.clone(*a));
      u.setParamAttr(sets[a.getParam()][s]);
      u.setExpAvgAttr(sets[a.getExpAvg()][s]);
      u.setExpAvgSqAttr(sets[a.getExpAvgSq()][s]);
      if (halfWrite) u.setHalfAttr(sets[halfWrite.getFrom()][s]);
      u.setOffsetAttr(i64(off));
      u.setCountAttr(i64(count));
      u.setWeightAttr(readInto[a.getParam()].getFromAttr());
      u->setAttr(kNvmeUpdateAttrName, i64(chunkId));
      for (ParamCopyOp pc : writes) {
        auto c = cast<ParamCopyOp>(b.clone(*pc));
        c.setFromAttr(sets[pc.getFrom()][s]);
        c.setToOffsetAttr(i64(off));
        c.setCountAttr(i64(count));
        c->setAttr(kNvmeUpdateAttrName, i64(chunkId));
      }
    }
    // The whole-tensor staging goes with the ops that used it.
    llvm::SmallVector<StringRef> unused;
    for (ParamCopyOp pc : reads) unused.push_back(pc.getTo());
    if (halfWrite) unused.push_back(halfWrite.getFrom());
    for (ParamCopyOp pc : reads) pc.erase();
    for (ParamCopyOp pc : writes) pc.erase();
    a.erase();
    for (StringRef name : unused)
      if (ParamOp p = params_.lookup(name)) {
        std::string key = name.str(); // (the name lives in the op)
        symbols_->erase(p);           // (out of the table, and erased)
        params_.erase(key);
      }
    return success();
  }

  /// grads=true: the update's gradient, the host copy bigc-offload made of a device gradient (read
  /// by the update alone), goes to the nvme space as it arrives and comes back for the update: a
  /// copy into "nvme" after the host copy, and a copy back into "host" after that (bigc-schedule
  /// moves it an update ahead, by its bigc.nvme_update), which the update (and its chunks) read.
  void swapGradient(AdamWOp a, int64_t id) {
    Value g = a.getGrad();
    auto host = g.getDefiningOp<CopyOp>();
    if (!host || opSpace(host) != kHostSpace || !g.hasOneUse()) return;
    const int64_t bytes =
        int64_t(cast<RankedTensorType>(g.getType()).getNumElements()) *
        int64_t(std::max<unsigned>(1, cast<RankedTensorType>(g.getType()).getElementTypeBitWidth() / 8));
    if (gradsLimit > 0 && swappedBytes_ + bytes > gradsLimit) return;
    swappedBytes_ += bytes;
    MLIRContext *ctx = a.getContext();
    OpBuilder b(host);
    b.setInsertionPointAfter(host);
    auto out = b.create<CopyOp>(host.getLoc(), g);
    out->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
    copyPlacementTags(host, out);
    auto in = b.create<CopyOp>(a.getLoc(), out.getY());
    in->setAttr(kSpaceAttrName, StringAttr::get(ctx, kHostSpace));
    copyPlacementTags(a, in);
    in->setAttr(kNvmeUpdateAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), id));
    a.getGradMutable().assign(in.getY());
  }

  int64_t chunkCounter_ = 0;
  int64_t swappedBytes_ = 0;        // the gradients sent to the nvme space so far (grads-limit)
  llvm::StringMap<ParamOp> params_; // by name, for splitUpdate
  SymbolTable *symbols_ = nullptr;  // the module's, while the pass runs
  llvm::DenseMap<int64_t, SmallVector<ParamCopyOp>> groups_; // update number -> its nvme copies

  /// --offload-params nvme: every compute copy on the host (role param) to the nvme space; its
  /// update writes a staging copy written back after it, each read a staging copy of its own.
  LogicalResult moveWeights(ModuleOp module, Block &block) {
    MLIRContext *ctx = module.getContext();
    SmallVector<ParamOp> weights;
    for (ParamOp p : module.getOps<ParamOp>())
      if (p.getRole() == kParamRole && paramSpace(p) == kHostSpace) weights.push_back(p);
    if (weights.empty()) {
      module.emitError("bigc-offload-nvme: params=true, but no weights live on the host (run bigc-offload with "
                       "params=host first)");
      return failure();
    }
    // Who touches each weight, in one pass: reads (bigc.get_param), updates writing it (`half`),
    // and any other op naming it.
    llvm::StringMap<SmallVector<GetParamOp>> readsOf;
    llvm::StringMap<SmallVector<AdamWOp>> writersOf;
    llvm::StringMap<Operation *> otherOf;
    for (Operation &op : block.without_terminator()) {
      if (auto gp = dyn_cast<GetParamOp>(op)) {
        readsOf[gp.getParam()].push_back(gp);
        continue;
      }
      auto a = dyn_cast<AdamWOp>(op);
      if (a && a.getHalf()) writersOf[*a.getHalf()].push_back(a);
      for (NamedAttribute na : op.getAttrs())
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(na.getValue()))
          if (!(a && na.getName() == "half") && !otherOf.count(ref.getValue())) otherOf[ref.getValue()] = &op;
    }
    for (ParamOp w : weights) {
      StringRef name = w.getSymName();
      SmallVector<AdamWOp> writers = writersOf.lookup(name);
      SmallVector<GetParamOp> reads = readsOf.lookup(name);
      if (Operation *op = otherOf.lookup(name))
        return op->emitError("bigc-offload-nvme: @")
               << name << " is touched by " << op->getName() << "; only updates and reads of a weight stream "
               << "from the nvme space";
      if (writers.size() > 1)
        return writers[1].emitError("bigc-offload-nvme: @") << name << " has more than one update";
      for (GetParamOp gp : reads)
        for (Operation *user : gp->getUsers())
          if (opSpace(user) == kHostSpace)
            return user->emitError("bigc-offload-nvme: a host op reads @") << name << " (only device uses are fetched)";
      w->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
      if (!writers.empty()) {
        AdamWOp a = writers.front();
        std::string ioName = (name + ".io").str();
        if (failed(addHostStaging(w, ioName, w.getType(), symbols_))) return failure();
        auto ioRef = FlatSymbolRefAttr::get(ctx, ioName);
        a.setHalfAttr(ioRef);
        OpBuilder b(a);
        b.setInsertionPointAfter(a);
        auto out = b.create<ParamCopyOp>(a.getLoc(), ioRef, FlatSymbolRefAttr::get(ctx, name));
        out->setAttr(kSpaceAttrName, StringAttr::get(ctx, kNvmeSpace));
        copyPlacementTags(a, out);
        out->setAttr(kNvmeUpdateAttrName, a->getAttr(kNvmeUpdateAttrName));
      }
      ParamOp after = w;
      for (auto [k, gp] : llvm::enumerate(reads)) {
        std::string fetchName = (name + ".fetch." + llvm::Twine(k)).str();
        FailureOr<ParamOp> fetch = addHostStaging(after, fetchName, w.getType(), symbols_);
        if (failed(fetch)) return failure();
        after = *fetch;
        auto fetchRef = FlatSymbolRefAttr::get(ctx, fetchName);
        OpBuilder b(gp);
        auto in = b.create<ParamCopyOp>(gp.getLoc(), FlatSymbolRefAttr::get(ctx, name), fetchRef);
        in->setAttr(kSpaceAttrName, StringAttr::get(ctx, kHostSpace));
        copyPlacementTags(gp, in);
        gp.setParamAttr(fetchRef);
      }
    }
    module->setAttr(kOffloadParamsAttrName, StringAttr::get(ctx, "nvme"));
    return success();
  }
};

} // namespace
