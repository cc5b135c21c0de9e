//===- Schedule.cpp - bigc-schedule ---------------------------------------===//
//
// One order for @train_step (see the description in Passes.td): the forward
// as written, the backward as bigc-autodiff wrote it, each bigc.adamw moved
// up to just after the last op it depends on, and bigc.get_param /
// bigc.fill sunk to just before their first user.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace bigc {
#define GEN_PASS_DEF_BIGCSCHEDULE
#include "passes/Passes.h.inc"
} // namespace bigc
} // namespace mlir

using namespace mlir;
using namespace mlir::bigc;

namespace {

/// The op of `block` that holds `op` (itself, or its ancestor in `block`).
Operation *inBlock(Block &block, Operation *op) {
  return block.findAncestorOpInBlock(*op);
}

/// Sinks every bigc.get_param and bigc.fill to just before its first user in
/// the block (its value is then produced when it is needed, not earlier).
void sinkToFirstUse(Block &block) {
  SmallVector<Operation *> candidates;
  for (Operation &op : block.without_terminator())
    if (isa<GetParamOp, FillOp>(op))
      candidates.push_back(&op);
  for (Operation *op : candidates) {
    Operation *first = nullptr;
    for (Operation *user : op->getUsers()) {
      Operation *u = inBlock(block, user);
      if (u && (!first || u->isBeforeInBlock(first)))
        first = u;
    }
    if (first && first != op->getNextNode())
      op->moveBefore(first);
  }
}

/// Moves each bigc.adamw to just after the latest of: its gradient's
/// definition, its norm's definition, and every reader of a bigc.get_param
/// of the parameter it updates.
void hoistOptimizer(Block &block) {
  // Readers of each parameter, and the adamw ops in order.
  llvm::StringMap<SmallVector<Operation *>> readers;
  SmallVector<AdamWOp> updates;
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<GetParamOp>(op)) {
      auto &list = readers[gp.getParam()];
      list.push_back(&op);
      for (Operation *user : gp->getUsers())
        if (Operation *u = inBlock(block, user))
          list.push_back(u);
    } else if (auto a = dyn_cast<AdamWOp>(op)) {
      updates.push_back(a);
    }
  }
  // The target of each update, computed before anything moves. Reverse
  // order keeps updates that share a target in their original order.
  SmallVector<std::pair<AdamWOp, Operation *>> moves;
  for (AdamWOp a : updates) {
    Operation *after = nullptr;
    auto later = [&](Operation *op) {
      if (op && (!after || after->isBeforeInBlock(op)))
        after = op;
    };
    if (Operation *d = a.getGrad().getDefiningOp())
      later(inBlock(block, d));
    if (Value norm = a.getNorm())
      if (Operation *d = norm.getDefiningOp())
        later(inBlock(block, d));
    auto it = readers.find(a.getParam());
    if (it != readers.end())
      for (Operation *r : it->second)
        later(r);
    moves.push_back({a, after});
  }
  for (auto &[a, after] : llvm::reverse(moves)) {
    if (after)
      a->moveAfter(after);
    else
      a->moveBefore(&block.front());
  }
}

struct BigcSchedulePass
    : public mlir::bigc::impl::BigcScheduleBase<BigcSchedulePass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func) {
      module.emitError("bigc-schedule: the module has no func.func "
                       "@train_step (run bigc-autodiff first)");
      return signalPassFailure();
    }
    if (func.isExternal() || !func.getBody().hasOneBlock()) {
      func.emitError("bigc-schedule: @train_step must have a body of one "
                     "block");
      return signalPassFailure();
    }
    Block &block = func.front();
    sinkToFirstUse(block);
    hoistOptimizer(block);
  }
};

} // namespace
