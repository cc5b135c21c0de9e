//===- CostModel.cpp - FLOPs and bytes of bigc ops ------------------------===//
//
// See include/bigc/Analysis/CostModel.h. An op's FLOPs are the op registry's
// (include/bigc/Format/ops.h; each op's rule beside its declaration in format/ops/,
// with the per-element counts and where they come from), read through an OpView of
// the MLIR op: the emitter writes an op's inherent attributes and operands as its
// instruction's, so one rule serves both. Bytes: operands read and results written,
// except a gather (the embedding), an alias (reshape), and AdamW, whose parameter and
// moments are symbols here. The compiler's own ops (param, get_param, tp_copy) cost
// nothing; an op without a rule (collectives, send, recv) is "not known" to the
// model, which leaves it to the communication model.
//
//===----------------------------------------------------------------------===//

#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Format/ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::bigc;

int64_t mlir::bigc::typeBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape()) return 0;
  Type e = t.getElementType();
  int64_t size = (e.isF32() || e.isInteger(32)) ? 4 : (e.isBF16() || e.isF16()) ? 2 : 0;
  return t.getNumElements() * size;
}

static int64_t elements(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

static ArrayRef<int64_t> shape(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getShape() : ArrayRef<int64_t>();
}

/// Bytes of the bigc.param named by the symbol attribute `attr` of `op`, or
/// `fallback` when it cannot be found.
static int64_t symbolBytes(Operation *op, StringRef attr, int64_t fallback,
                           llvm::function_ref<Operation *(FlatSymbolRefAttr)> lookup) {
  auto ref = op->getAttrOfType<FlatSymbolRefAttr>(attr);
  if (!ref) return 0;
  if (Operation *sym = lookup ? lookup(ref) : SymbolTable::lookupNearestSymbolFrom(op, ref))
    if (auto t = sym->getAttrOfType<TypeAttr>("type")) return typeBytes(t.getValue());
  return fallback;
}

namespace {
/// An MLIR op as the registry's cost rules read it (bigc/Format/ops.h: OpView): its operands' and
/// results' shapes, and its inherent attributes, under the names the emitter writes them with.
class MlirOpView final : public ::bigc::format::OpView {
public:
  explicit MlirOpView(Operation *op) : op_(op) {}
  size_t numIn() const override { return op_->getNumOperands(); }
  size_t numOut() const override { return op_->getNumResults(); }
  std::vector<int64_t> inShape(size_t k) const override { return toVec(shape(op_->getOperand(unsigned(k)))); }
  std::vector<int64_t> outShape(size_t k) const override { return toVec(shape(op_->getResult(unsigned(k)))); }
  int64_t inElements(size_t k) const override { return elements(op_->getOperand(unsigned(k))); }
  int64_t outElements(size_t k) const override { return elements(op_->getResult(unsigned(k))); }
  bool has(const char *attr) const override { return bool(op_->getAttr(attr)); }
  double num(const char *attr, double dflt) const override {
    Attribute a = op_->getAttr(attr);
    if (!a) return dflt;
    if (auto i = dyn_cast<IntegerAttr>(a)) return double(i.getInt());
    if (auto f = dyn_cast<FloatAttr>(a)) return f.getValueAsDouble();
    if (auto b = dyn_cast<BoolAttr>(a)) return b.getValue() ? 1.0 : 0.0;
    if (isa<UnitAttr>(a)) return 1.0;
    return dflt;
  }

private:
  static std::vector<int64_t> toVec(ArrayRef<int64_t> s) { return std::vector<int64_t>(s.begin(), s.end()); }
  Operation *op_;
};
} // namespace

OpCost mlir::bigc::opCost(Operation *op, llvm::function_ref<Operation *(FlatSymbolRefAttr)> lookup) {
  OpCost c;
  StringRef name = op->getName().getStringRef();
  if (!name.consume_front("bigc.")) {
    c.known = false;
    return c;
  }
  // The compiler's own ops (not instructions): a parameter and its reference cost nothing.
  if (name == "get_param" || name == "param") return c;
  const ::bigc::format::OpDef *def = ::bigc::format::findOp(name.str());
  if (def && def->bytes == ::bigc::format::CostBytes::None) return c;
  for (Value v : op->getOperands()) c.bytesRead += typeBytes(v.getType());
  for (Value r : op->getResults()) c.bytesWritten += typeBytes(r.getType());
  if (!def) { // tensor parallelism's layout op before it is lowered: a copy
    if (name == "tp_copy") return c;
    c.known = false;
    return c;
  }
  if (!def->flops) {
    c.known = false;
    return c;
  }
  c.flops = def->flops(MlirOpView(op));
  if (def->bytes == ::bigc::format::CostBytes::Gather) // one table row per id, not the whole table
    c.bytesRead = typeBytes(op->getOperand(1).getType()) + c.bytesWritten;
  if (name == "adamw") {
    // Its parameter and moments are symbols here (operands in the program): read and written
    // once each; a chunk reads its part of the gradient only.
    Value g = op->getOperand(0);
    int64_t n = elements(g);
    if (auto count = op->getAttrOfType<IntegerAttr>("count")) {
      c.bytesRead -= typeBytes(g.getType()) - typeBytes(g.getType()) / std::max<int64_t>(1, n) * count.getInt();
      n = count.getInt();
    }
    int64_t fallback = n * 4;
    int64_t p = symbolBytes(op, "param", fallback, lookup), m = symbolBytes(op, "exp_avg", fallback, lookup),
            v = symbolBytes(op, "exp_avg_sq", fallback, lookup);
    c.bytesRead += p + m + v;
    c.bytesWritten += p + m + v;
  }
  return c;
}

FunctionCost mlir::bigc::functionCost(func::FuncOp func) {
  FunctionCost fc;
  if (func.isExternal()) return fc;
  // The enclosing module's symbols in one table (a lookup each would scan the module).
  std::optional<SymbolTable> table;
  if (Operation *scope = SymbolTable::getNearestSymbolTable(func->getParentOp())) table.emplace(scope);
  auto lookup = [&](FlatSymbolRefAttr r) -> Operation * { return table ? table->lookup(r.getValue()) : nullptr; };
  for (Block &block : func.getBody())
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>()) continue;
      OpCost c = opCost(&op, lookup);
      StringRef p = bigc::phaseOf(&op);
      if (bigc::isRecomputed(&op))
        fc.recompute += c;
      else if (p == bigc::kForwardPhase)
        fc.forward += c;
      else if (p == bigc::kBackwardPhase)
        fc.backward += c;
      else if (p == bigc::kOptimizerPhase)
        fc.optimizer += c;
      else
        fc.other += c;
    }
  return fc;
}

double mlir::bigc::rooflineSeconds(const OpCost &c, double flopsPerS, double bytesPerS) {
  double t = 0;
  if (flopsPerS > 0) t = std::max(t, double(c.flops) / flopsPerS);
  if (bytesPerS > 0) t = std::max(t, double(c.bytes()) / bytesPerS);
  return t;
}
