//===- Autodiff.cpp - bigc-autodiff ---------------------------------------===//
//
// forward (loss) -> train_step (forward, backward, AdamW). The pass is thin:
// the per-op derivatives live in DifferentiableOpInterface (dialects/
// BigcOps.cpp); buildBackward and buildTrainStep are reusable helpers
// (declared in bigc/Passes/Passes.h).
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcInterfaces.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h" // kLayerAttrName
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCAUTODIFF
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

/// Adds `g` to the gradient accumulated for `v` (a bigc.add where `v` already
/// has one).
static void accumulate(OpBuilder &b, Location loc, llvm::DenseMap<Value, Value> &grads, Value v, Value g) {
  Value &slot = grads[v];
  if (!slot)
    slot = g;
  else
    slot = b.create<AddOp>(loc, v.getType(), slot, g);
}

LogicalResult mlir::bigc::buildBackward(OpBuilder &b, Block &block, llvm::DenseMap<Value, Value> &grads) {
  // Snapshot the ops first: the backward is appended to the same block.
  SmallVector<Operation *> forward;
  for (Operation &op : block.without_terminator()) forward.push_back(&op);

  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any) continue;                // does not contribute to the loss
    if (isa<GetParamOp>(op)) continue; // a leaf: its gradient goes to the optimizer
    auto diff = dyn_cast<DifferentiableOpInterface>(op);
    if (!diff)
      return op->emitOpError("is not differentiable: bigc-autodiff cannot compute the gradient "
                             "of the loss through it");
    // The ops built for `op` (its gradient, the accumulation of its operands'
    // gradients) are those between `before` and the insertion point.
    Block *insBlock = b.getInsertionBlock();
    Block::iterator ip = b.getInsertionPoint();
    Operation *before = ip == insBlock->begin() ? nullptr : &*std::prev(ip);
    SmallVector<Value> operandGrads;
    if (failed(diff.buildGradient(b, resultGrads, operandGrads))) return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError("buildGradient returned ")
             << operandGrads.size() << " gradients for " << op->getNumOperands() << " operands";
    for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
      if (g) accumulate(b, op->getLoc(), grads, operand, g);
    // Backward ops of transformer block i carry `bigc.layer = i` like the
    // forward op they differentiate (recompute, offload and the schedule
    // work by layer).
    if (Attribute layer = op->getAttr(kLayerAttrName))
      for (auto it = before ? std::next(before->getIterator()) : insBlock->begin(); it != b.getInsertionPoint(); ++it)
        if (!it->hasAttr(kLayerAttrName)) it->setAttr(kLayerAttrName, layer);
  }
  return success();
}

/// Sets the phase of every op in (after, before) that has none.
static void markPhase(Operation *after, Operation *before, StringRef phase) {
  Block *block = before->getBlock();
  auto it = after ? std::next(after->getIterator()) : block->begin();
  for (; it != before->getIterator(); ++it)
    if (!it->hasAttr(kPhaseAttrName)) it->setAttr(kPhaseAttrName, StringAttr::get(it->getContext(), phase));
}

LogicalResult mlir::bigc::buildTrainStep(ModuleOp module, const AdamWConfig &config) {
  MLIRContext *ctx = module.getContext();
  auto fwd = module.lookupSymbol<func::FuncOp>("forward");
  if (!fwd)
    return module.emitError("bigc-autodiff: the module has no func.func @forward (the forward "
                            "function returning the loss)");
  if (Operation *clash = module.lookupSymbol("train_step"))
    return clash->emitError("bigc-autodiff: the module already has a "
                            "symbol @train_step");
  auto scalarF32 = RankedTensorType::get({}, Float32Type::get(ctx));
  FunctionType ft = fwd.getFunctionType();
  if (ft.getNumResults() != 1 || ft.getResult(0) != scalarF32)
    return fwd.emitError("bigc-autodiff: @forward must return one scalar "
                         "loss of type tensor<f32>, got ")
           << ft.getResults();
  if (fwd.isExternal() || !fwd.getBody().hasOneBlock())
    return fwd.emitError("bigc-autodiff: @forward must have a body of one "
                         "block");
  Block &block = fwd.front();
  auto ret = dyn_cast<func::ReturnOp>(block.getTerminator());
  if (!ret) return fwd.emitError("bigc-autodiff: @forward must end with func.return");
  Value loss = ret.getOperand(0);

  SmallVector<GetParamOp> reads;
  for (Operation &op : block.without_terminator()) {
    if (!op.hasAttr(kPhaseAttrName)) op.setAttr(kPhaseAttrName, StringAttr::get(ctx, kForwardPhase));
    if (auto gp = dyn_cast<GetParamOp>(op)) reads.push_back(gp);
  }
  Operation *lastForward = ret->getPrevNode();

  // Backward: seed dloss = 1, then every op in reverse order.
  OpBuilder b(ret);
  llvm::DenseMap<Value, Value> grads;
  grads[loss] = b.create<FillOp>(loss.getLoc(), scalarF32, b.getF64FloatAttr(1.0));
  if (failed(buildBackward(b, block, grads))) return failure();

  // Total gradient per parameter (several reads of one parameter add up).
  llvm::MapVector<StringAttr, Value> paramGrads;
  for (GetParamOp gp : reads)
    if (Value g = grads.lookup(gp.getResult())) {
      Value &slot = paramGrads[gp.getParamAttr().getAttr()];
      slot = slot ? b.create<AddOp>(gp.getLoc(), g.getType(), slot, g).getResult() : g;
    }
  markPhase(lastForward, ret, kBackwardPhase);
  Operation *lastBackward = ret->getPrevNode();

  // Optimizer: moments declared next to each parameter, one adamw each, in
  // the order of the parameter declarations.
  SmallVector<std::pair<ParamOp, Value>> updates;
  for (ParamOp p : llvm::to_vector(module.getOps<ParamOp>())) {
    if (p.getRole() != kParamRole) continue;
    Value g = paramGrads.lookup(p.getSymNameAttr());
    if (!g) {
      p.emitWarning("parameter does not contribute to the loss; it gets no "
                    "gradient and no optimizer update");
      continue;
    }
    updates.push_back({p, g});
  }

  Value norm;
  if (config.gradClip > 0.0 && !updates.empty()) {
    SmallVector<Value> all;
    for (auto &u : updates) all.push_back(u.second);
    norm = b.create<GlobalNormOp>(ret.getLoc(), scalarF32, all);
  }

  OpBuilder mb(ctx);
  // The symbols before the states are added (each state's name derives from its own parameter's,
  // so two new names never meet; one lookup table instead of a scan of the module per name).
  SymbolTable existing(module);
  for (auto [p, g] : updates) {
    std::string m = (p.getSymName() + ".exp_avg").str();
    std::string v = (p.getSymName() + ".exp_avg_sq").str();
    for (const std::string &name : {m, v})
      if (Operation *clash = existing.lookup(name))
        return clash->emitError("bigc-autodiff: the optimizer state symbol @\"") << name << "\" already exists";
    RankedTensorType pt = p.getTensorType();
    auto stateType = RankedTensorType::get(pt.getShape(), config.bf16States() ? Type(BFloat16Type::get(ctx))
                                                                              : Type(Float32Type::get(ctx)));
    mb.setInsertionPointAfter(p);
    const Location ploc = p.getLoc(); // (a structured binding cannot be captured before C++20)
    ParamOp param = p;
    auto declare = [&](StringRef name) {
      auto state = mb.create<ParamOp>(ploc, mb.getStringAttr(name), TypeAttr::get(stateType),
                                      mb.getStringAttr(kInitZeros), FloatAttr(), mb.getStringAttr(kOptimizerRole));
      copyTpSplit(param, state);
      return state;
    };
    ParamOp mOp = declare(m);
    mb.setInsertionPointAfter(mOp);
    declare(v);

    double wd = pt.getRank() >= 2 ? config.weightDecay : 0.0;
    b.create<AdamWOp>(p.getLoc(), g, norm, FlatSymbolRefAttr::get(p.getSymNameAttr()), FlatSymbolRefAttr::get(ctx, m),
                      FlatSymbolRefAttr::get(ctx, v), b.getF64FloatAttr(config.lr), b.getF64FloatAttr(config.beta1),
                      b.getF64FloatAttr(config.beta2), b.getF64FloatAttr(config.eps), b.getF64FloatAttr(wd),
                      b.getF64FloatAttr(norm ? config.gradClip : 0.0));
  }
  markPhase(lastBackward, ret, kOptimizerPhase);

  fwd.setSymName("train_step");
  return success();
}

namespace {
struct BigcAutodiffPass : public mlir::bigc::impl::BigcAutodiffBase<BigcAutodiffPass> {
  using Base::Base;
  void runOnOperation() override {
    AdamWConfig config;
    config.lr = lr;
    config.beta1 = beta1;
    config.beta2 = beta2;
    config.eps = eps;
    config.weightDecay = weightDecay;
    config.gradClip = gradClip;
    if (optimizerStates != "fp32" && optimizerStates != "bf16") {
      getOperation().emitError("--optimizer-states ") << std::string(optimizerStates) << ": use fp32 or bf16";
      return signalPassFailure();
    }
    config.states = optimizerStates == "bf16" ? OptimizerStates::BF16 : OptimizerStates::FP32;
    if (failed(buildTrainStep(getOperation(), config))) signalPassFailure();
  }
};
} // namespace
