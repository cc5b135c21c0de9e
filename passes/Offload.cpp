//===- Offload.cpp - bigc-offload -----------------------------------------===//
//
// CPU offload (ZeRO-Offload; see the description in Passes.td): fp32 masters
// and AdamW moments in the host space, each bigc.adamw on the host reading a
// host copy of its gradient, the new compute weights back to the device
// through a host staging tensor; with params=host the compute copies live on
// the host too and every device use reads a copy made just before it.
//
// The pass only decides spaces and inserts the transfers; bigc-schedule
// places them (prefetch, streams, events, waits) and bigc-memory-plan plans
// one arena per space.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCOFFLOAD
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

void setSpace(Operation *op, StringRef space) { op->setAttr(kSpaceAttrName, StringAttr::get(op->getContext(), space)); }

struct BigcOffloadPass : public mlir::bigc::impl::BigcOffloadBase<BigcOffloadPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (offload != "cpu") {
      module.emitError("bigc-offload: offload must be \"cpu\", got \"") << offload << "\"";
      return signalPassFailure();
    }
    if (params != "device" && params != "host") {
      module.emitError("bigc-offload: params must be \"device\" or \"host\", "
                       "got \"")
          << params << "\"";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func) {
      module.emitError("bigc-offload: the module has no func.func "
                       "@train_step (run bigc-autodiff first)");
      return signalPassFailure();
    }
    if (func.isExternal() || !func.getBody().hasOneBlock()) {
      func.emitError("bigc-offload: @train_step must have a body of one "
                     "block");
      return signalPassFailure();
    }
    if (failed(offloadOptimizer(module, func))) return signalPassFailure();
    for (ParamOp p : module.getOps<ParamOp>()) spaces_[p.getSymName()] = paramSpace(p).str();
    if (failed(placeHostOperands(func)) || failed(fetchHostParams(module, func))) return signalPassFailure();
    Builder b(module.getContext());
    module->setAttr(kOffloadAttrName, b.getStringAttr(offload));
    module->setAttr(kOffloadParamsAttrName, b.getStringAttr(params));
  }

  /// Masters, moments (and every optimizer-role tensor) to the host; every
  /// bigc.adamw and bigc.loss_scale_update to the host; staging tensors and
  /// bigc.param_copy back to the device compute copies (params=device).
  LogicalResult offloadOptimizer(ModuleOp module, func::FuncOp func) {
    Block &block = func.front();
    SymbolTable symbols(module); // (a module's lookup scans it: once per update of the largest plans)
    SmallVector<AdamWOp> updates;
    for (Operation &op : block.without_terminator())
      if (auto a = dyn_cast<AdamWOp>(op)) updates.push_back(a);
    for (AdamWOp a : updates) {
      auto master = symbols.lookup<ParamOp>(a.getParam());
      if (!master) return a.emitError("bigc-offload: unknown parameter @") << a.getParam();
      StringRef name = master.getSymName();
      // fp32 run: @N becomes the master, @"N.half" the device compute copy.
      if (!a.getHalfAttr()) {
        std::string halfName = (name + ".half").str();
        FailureOr<ParamOp> half =
            addParamAfter(master, halfName, master.getType(), kInitCopy, kParamRole, name, "bigc-offload", &symbols);
        if (failed(half)) return failure();
        master.setRole(kMasterRole);
        auto halfRef = FlatSymbolRefAttr::get(module.getContext(), halfName);
        func.walk([&](GetParamOp gp) {
          if (gp.getParam() == name) gp.setParamAttr(halfRef);
        });
        a.setHalfAttr(halfRef);
      }
      auto half = symbols.lookup<ParamOp>(*a.getHalf());
      if (!half) return a.emitError("bigc-offload: unknown parameter @") << *a.getHalf();
      setSpace(master, kHostSpace);
      for (FlatSymbolRefAttr moment : {a.getExpAvgAttr(), a.getExpAvgSqAttr()})
        if (auto m = symbols.lookup<ParamOp>(moment.getValue())) setSpace(m, kHostSpace);
      setSpace(a, kHostSpace);
      // ZeRO-3-Offload: the compute copy lives on the host; the host AdamW
      // writes it directly. (An update skipped on fp16 overflow still writes
      // its `half` as the cast of the unchanged master, so the staging
      // tensor below stays valid then too.)
      if (params == "host") {
        setSpace(half, kHostSpace);
        continue;
      }
      // The host AdamW writes a host staging tensor, copied to the device
      // compute copy after its last reader of this step.
      std::string stageName = (name + ".stage").str();
      FailureOr<ParamOp> stage =
          addParamAfter(half, stageName, half.getType(), kInitZeros, kTransferRole, "", "bigc-offload", &symbols);
      if (failed(stage)) return failure();
      setSpace(*stage, kHostSpace);
      auto stageRef = FlatSymbolRefAttr::get(module.getContext(), stageName);
      a.setHalfAttr(stageRef);
      OpBuilder b(a);
      b.setInsertionPointAfter(a);
      auto pc =
          b.create<ParamCopyOp>(a.getLoc(), stageRef, FlatSymbolRefAttr::get(module.getContext(), half.getSymName()));
      copyPlacementTags(a, pc);
      setSpace(pc, kDeviceSpace);
    }
    // Every other optimizer-role tensor (the loss scale and its counter) and
    // the op that updates them go to the host with the moments.
    for (ParamOp p : module.getOps<ParamOp>())
      if (p.getRole() == kOptimizerRole) setSpace(p, kHostSpace);
    func.walk([&](LossScaleUpdateOp op) { setSpace(op, kHostSpace); });
    reduceOnDevice(block);
    return success();
  }

  /// The reductions over every gradient (fp16's overflow check, the norm for clipping) stay on
  /// the device, each over one norm per gradient taken as the gradient is made (ZeRO-Infinity's
  /// check before the gradients leave): the device keeps a scalar per gradient, not the
  /// gradients, and the host copies need no reading before the updates. The norm of the norms
  /// is the norm; a gradient's norm is inf or nan exactly when the gradient has an inf or a nan
  /// (the squares of 16-bit values sum in f32 far below its range), so the overflow check over
  /// the norms is the check over the gradients. A gradient read by both shares its norm.
  void reduceOnDevice(Block &block) {
    llvm::DenseMap<Value, Value> normOf;
    SmallVector<Operation *> reductions;
    for (Operation &op : block.without_terminator())
      if (isa<CheckFiniteOp, GlobalNormOp>(op)) reductions.push_back(&op);
    for (Operation *op : reductions)
      for (OpOperand &use : op->getOpOperands()) {
        Value g = use.get();
        if (cast<RankedTensorType>(g.getType()).getRank() == 0) continue; // (a norm or flag already)
        Value &n = normOf[g];
        if (!n) {
          OpBuilder b(op->getContext());
          Operation *def = g.getDefiningOp();
          if (def)
            b.setInsertionPointAfter(def);
          else
            b.setInsertionPointToStart(&block);
          auto gn = b.create<GlobalNormOp>(op->getLoc(), RankedTensorType::get({}, b.getF32Type()), ValueRange{g});
          if (def) copyPlacementTags(def, gn);
          gn->setAttr(kPartialNormAttrName, b.getUnitAttr());
          n = gn.getNorm();
        }
        use.set(n);
      }
  }

  /// The space of each parameter once offloadOptimizer has placed them (valueSpace would look a
  /// bigc.get_param's symbol up: a scan of the module, once per update of the largest plans).
  llvm::StringMap<std::string> spaces_;
  StringRef spaceOf(Value v) const {
    return valueSpace(v, [&](StringRef name) {
      auto it = spaces_.find(name);
      return it == spaces_.end() ? StringRef(kDeviceSpace) : StringRef(it->second);
    });
  }

  /// Each device value a host op reads (a gradient, found_inf, the global
  /// norm) gets one d2h copy, placed right after its definition.
  LogicalResult placeHostOperands(func::FuncOp func) {
    Block &block = func.front();
    llvm::DenseMap<Value, Value> hostCopy;
    SmallVector<Operation *> hostOps;
    for (Operation &op : block.without_terminator())
      if (!isa<CopyOp>(op) && opSpace(&op) == kHostSpace) hostOps.push_back(&op);
    for (Operation *op : hostOps) {
      for (OpOperand &use : op->getOpOperands()) {
        Value v = use.get();
        if (spaceOf(v) == kHostSpace) continue;
        Value &copy = hostCopy[v];
        if (!copy) {
          OpBuilder b(func.getContext());
          Operation *def = v.getDefiningOp();
          if (def)
            b.setInsertionPointAfter(def);
          else
            b.setInsertionPointToStart(&block);
          auto c = b.create<CopyOp>(def ? def->getLoc() : func.getLoc(), v);
          setSpace(c, kHostSpace);
          if (def) copyPlacementTags(def, c);
          c->setAttr(kPhaseAttrName, b.getStringAttr(kOptimizerPhase));
          copy = c.getY();
        }
        use.set(copy);
      }
    }
    return success();
  }

  /// Every use of a host parameter by a device op reads a device copy made
  /// just before that op (params=host; also the loss scale seed in fp16).
  LogicalResult fetchHostParams(ModuleOp module, func::FuncOp func) {
    Block &block = func.front();
    SmallVector<GetParamOp> reads;
    for (Operation &op : block.without_terminator())
      if (auto gp = dyn_cast<GetParamOp>(op))
        if (spaceOf(gp.getResult()) == kHostSpace) reads.push_back(gp);
    for (GetParamOp gp : reads) {
      // Device users, each once, in order.
      SmallVector<Operation *> users;
      llvm::SmallPtrSet<Operation *, 8> seen;
      for (Operation *u : gp->getUsers())
        if (opSpace(u) != kHostSpace && seen.insert(u).second) users.push_back(u);
      // The tile gathers of a shard read (bigc-tile, bigc-shard: one read per layer segment) share
      // one copy, made before the first: each reads its piece of it.
      auto tileGather = [](Operation *u) {
        auto ag = dyn_cast<AllGatherOp>(u);
        return ag && ag.getTile().has_value();
      };
      if (!users.empty() && llvm::all_of(users, tileGather)) {
        Operation *first = users.front();
        for (Operation *u : users)
          if (u->getBlock() == &block && u->isBeforeInBlock(first)) first = u;
        users = {first};
      }
      for (Operation *u : users) {
        if (u->getBlock() != &block)
          return u->emitError("bigc-offload: a use of @") << gp.getParam() << " outside the body of @train_step";
        OpBuilder b(u);
        // A get_param of its own, so that the schedule can move the pair
        // (prefetch) without touching the other uses.
        auto own = cast<GetParamOp>(b.clone(*gp));
        copyPlacementTags(u, own);
        auto c = b.create<CopyOp>(u->getLoc(), own.getResult());
        setSpace(c, kDeviceSpace);
        copyPlacementTags(u, c);
        if (tileGather(u)) // (and the other tile gathers of the read)
          gp.getResult().replaceUsesWithIf(c.getY(), [&](OpOperand &use) { return tileGather(use.getOwner()); });
        else
          u->replaceUsesOfWith(gp.getResult(), c.getY());
      }
      if (gp->use_empty()) gp->erase();
    }
    (void)module;
    return success();
  }
};

} // namespace
