//===- CostModel.cpp - FLOPs and bytes of bigc ops ------------------------===//
//
// See include/bigc/Analysis/CostModel.h. Ops are recognised by name (the
// instruction names of docs/program-format.md), so the model covers every op
// of the dialect without depending on its C++ classes, and an op added later
// falls back to "0 FLOPs, operand + result bytes" until it is taught here.
//
// Per-element FLOP counts (n = elements of the op's main tensor):
//   add, mul, bias_add, scale, reduce_sum     1
//   layernorm                                  8  (mean 1, variance 2, normalise + affine 4, rsqrt per row)
//   layernorm_grad                            14  (x-hat 2, dy*w 1, two row sums 4, dx 4, dw/db 3)
//   gelu (tanh approximation)                 12  (x^3 2, polynomial 3, tanh 4, 1+t and 0.5x(..) 3)
//   gelu_grad                                 18
//   rmsnorm                                    4  (square-sum 2, scale by rstd and w 2, rsqrt per row)
//   rmsnorm_grad                               9  (dy*w 1, row dot 2, dx 3, dw 3)
//   rope                                       6  per element (sin/cos per position and frequency counted apart)
//   silu                                       5  (exp 3, 1+e and the division 2); silu_grad 8
//   swiglu                                     6  per output; swiglu_grad 10
//   cross_entropy                              6  per logit (max 1, exp 4, sum 1)
//   cross_entropy_grad                         8  per logit (softmax 6, minus one-hot and scale 2)
//   linear_ce_stats                           2NCV + 6 per logit; its grad 6NCV + 4 per logit (the
//                                              logits recomputed, then dh and dw)
//   add_layernorm, add_rmsnorm, layernorm_grad_add, rmsnorm_grad_add, bias_gelu, gelu_grad_bias
//                                             the pair's (bigc-fuse): 1 + the norm's or GELU's
//   global_norm                                2  per input element
//   check_finite                               1  per input element
//   adamw                                     16  per parameter element
//   embedding_grad                             1  per dy element (scatter-add)
// matmul: 2 * elements(result) * K. attention over P = B*H*T(T+1)/2 causal
// (query, key) pairs with head size d: 4*P*d (Q K^T and P V) + 6*P (softmax);
// attention_grad: 10*P*d (scores again, dV, dP, dQ, dK) + 8*P + 2*B*T*C. gqa_attention likewise,
// with P = B*H*(the pairs its causal window allows) and d = the head size; its grad adds 2*B*T*H*d.
//
//===----------------------------------------------------------------------===//

#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcAttrNames.h"

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
static int64_t symbolBytes(Operation *op, StringRef attr, int64_t fallback) {
  auto ref = op->getAttrOfType<FlatSymbolRefAttr>(attr);
  if (!ref) return 0;
  if (Operation *sym = SymbolTable::lookupNearestSymbolFrom(op, ref))
    if (auto t = sym->getAttrOfType<TypeAttr>("type")) return typeBytes(t.getValue());
  return fallback;
}

/// Causal (query, key) pairs and head size of an attention over qkv [B,T,3C].
static void attentionShape(Value qkv, int64_t heads, int64_t &pairs, int64_t &headDim, int64_t &btc) {
  ArrayRef<int64_t> s = shape(qkv);
  pairs = headDim = btc = 0;
  if (s.size() != 3 || heads <= 0) return;
  int64_t b = s[0], t = s[1], c = s[2] / 3;
  pairs = b * heads * (t * (t + 1) / 2);
  headDim = c / heads;
  btc = b * t * c;
}

OpCost mlir::bigc::opCost(Operation *op) {
  OpCost c;
  StringRef name = op->getName().getStringRef();
  if (!name.consume_front("bigc.")) {
    c.known = false;
    return c;
  }
  if (name == "get_param" || name == "param" || name == "wait") return c;
  for (Value v : op->getOperands()) c.bytesRead += typeBytes(v.getType());
  for (Value r : op->getResults()) c.bytesWritten += typeBytes(r.getType());
  auto operandElements = [&] {
    int64_t n = 0;
    for (Value v : op->getOperands()) n += elements(v);
    return n;
  };
  int64_t n0 = op->getNumResults() ? elements(op->getResult(0)) : 0;
  int64_t heads = 0;
  if (auto h = op->getAttrOfType<IntegerAttr>("heads")) heads = h.getInt();

  if (name == "matmul") {
    Value a = op->getOperand(0);
    ArrayRef<int64_t> as = shape(a);
    bool ta = op->hasAttr("transpose_a");
    int64_t k = as.size() >= 2 ? (ta ? as[as.size() - 2] : as.back()) : 0;
    c.flops = 2 * n0 * k;
  } else if (name == "add" || name == "mul" || name == "bias_add" || name == "scale") {
    c.flops = n0;
  } else if (name == "reduce_sum") {
    c.flops = elements(op->getOperand(0));
  } else if (name == "fill") {
    c.flops = 0;
  } else if (name == "layernorm") {
    c.flops = 8 * elements(op->getOperand(0));
  } else if (name == "layernorm_grad") {
    c.flops = 14 * elements(op->getOperand(1));
  } else if (name == "gelu") {
    c.flops = 12 * n0;
  } else if (name == "add_layernorm") {
    c.flops = 9 * elements(op->getOperand(0));
  } else if (name == "add_rmsnorm") {
    c.flops = 5 * elements(op->getOperand(0));
  } else if (name == "layernorm_grad_add") {
    c.flops = 15 * elements(op->getOperand(1));
  } else if (name == "rmsnorm_grad_add") {
    c.flops = 10 * elements(op->getOperand(1));
  } else if (name == "bias_gelu") {
    c.flops = 13 * n0;
  } else if (name == "gelu_grad_bias") {
    c.flops = 19 * n0;
  } else if (name == "gelu_grad") {
    c.flops = 18 * n0;
  } else if (name == "attention") {
    int64_t pairs, d, btc;
    attentionShape(op->getOperand(0), heads, pairs, d, btc);
    c.flops = 4 * pairs * d + 6 * pairs;
  } else if (name == "attention_grad") {
    int64_t pairs, d, btc;
    attentionShape(op->getOperand(1), heads, pairs, d, btc);
    c.flops = 10 * pairs * d + 8 * pairs + 2 * btc;
  } else if (name == "rmsnorm") {
    c.flops = 4 * elements(op->getOperand(0));
  } else if (name == "rmsnorm_grad") {
    c.flops = 9 * elements(op->getOperand(1));
  } else if (name == "rope") {
    c.flops = 6 * n0;
  } else if (name == "silu") {
    c.flops = 5 * n0;
  } else if (name == "silu_grad") {
    c.flops = 8 * n0;
  } else if (name == "swiglu") {
    c.flops = 6 * n0;
  } else if (name == "swiglu_grad") {
    c.flops = 10 * n0;
  } else if (name == "gqa_attention" || name == "gqa_attention_grad") {
    const bool grad = name == "gqa_attention_grad";
    ArrayRef<int64_t> q = shape(op->getOperand(grad ? 1 : 0));
    int64_t window = 0;
    if (auto w = op->getAttrOfType<IntegerAttr>("window")) window = w.getInt();
    if (q.size() == 3 && heads > 0) {
      const int64_t b = q[0], t = q[1], d = q[2] / heads;
      int64_t perRow = t * (t + 1) / 2; // causal pairs of one head
      if (window > 0 && window < t) perRow = window * (window + 1) / 2 + (t - window) * window;
      const int64_t pairs = b * heads * perRow;
      c.flops = grad ? 10 * pairs * d + 8 * pairs + 2 * b * t * heads * d : 4 * pairs * d + 6 * pairs;
    }
  } else if (name == "embedding") {
    // A gather: reads one table row per id, not the whole table.
    c.bytesRead = typeBytes(op->getOperand(1).getType()) + c.bytesWritten;
  } else if (name == "embedding_grad") {
    c.flops = elements(op->getOperand(0));
  } else if (name == "reshape") {
    c.bytesRead = c.bytesWritten = 0; // an alias of its operand
  } else if (name == "transpose" || name == "split" || name == "concat" || name == "cast" || name == "copy") {
    c.flops = 0;
  } else if (name == "cross_entropy") {
    c.flops = 6 * elements(op->getOperand(0));
  } else if (name == "cross_entropy_grad") {
    c.flops = 8 * elements(op->getOperand(0));
  } else if (name == "vocab_ce_stats") { // the vocabulary-parallel loss: this rank's columns
    c.flops = 6 * elements(op->getOperand(0));
  } else if (name == "vocab_ce_stats_grad") {
    c.flops = 4 * elements(op->getOperand(1));
  } else if (name == "vocab_ce_loss" || name == "vocab_ce_loss_grad") {
    c.flops = 4 * elements(op->getOperand(0));
  } else if (name == "linear_ce_stats" || name == "linear_ce_stats_grad") {
    // The fused LM head (bigc-fuse-loss): h [N,C] @ op(w) -> N x V logits a chunk at a time, then
    // the statistics (6 per logit); the gradient recomputes them (2NCV), forms dlogits (4 per
    // logit) and multiplies twice more (dh, dw: 4NCV).
    const bool grad = name == "linear_ce_stats_grad";
    Value h = op->getOperand(grad ? 1 : 0), w = op->getOperand(grad ? 2 : 1);
    const int64_t cdim = shape(h).empty() ? 0 : shape(h).back(), n = cdim ? elements(h) / cdim : 0;
    const int64_t v = cdim ? elements(w) / cdim : 0;
    c.flops = grad ? 6 * n * cdim * v + 4 * n * v : 2 * n * cdim * v + 6 * n * v;
  } else if (name == "tp_slice" || name == "tp_copy") {
    c.flops = 0;
  } else if (name == "global_norm") {
    c.flops = 2 * operandElements();
  } else if (name == "check_finite") {
    c.flops = operandElements();
  } else if (name == "loss_scale_update") {
    c.flops = 4;
  } else if (name == "adamw") {
    Value g = op->getOperand(0);
    int64_t n = elements(g);
    if (auto count = op->getAttrOfType<IntegerAttr>("count")) { // a chunk: its elements only
      c.bytesRead -= typeBytes(g.getType()) - typeBytes(g.getType()) / std::max<int64_t>(1, n) * count.getInt();
      n = count.getInt();
    }
    int64_t fallback = n * 4;
    int64_t p = symbolBytes(op, "param", fallback), m = symbolBytes(op, "exp_avg", fallback),
            v = symbolBytes(op, "exp_avg_sq", fallback);
    c.flops = 16 * n;
    c.bytesRead += p + m + v;
    c.bytesWritten += p + m + v;
  } else {
    c.known = false;
  }
  return c;
}

FunctionCost mlir::bigc::functionCost(func::FuncOp func) {
  FunctionCost fc;
  if (func.isExternal()) return fc;
  for (Block &block : func.getBody())
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>()) continue;
      OpCost c = opCost(&op);
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
