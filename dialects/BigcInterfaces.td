//===- BigcInterfaces.td - bigc op interfaces --------------*- tablegen -*-===//

#ifndef BIGC_INTERFACES_TD
#define BIGC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::bigc";
  let description = [{
    An op that knows its own reverse-mode derivative. bigc-autodiff walks the
    forward function backwards and asks each op, given the gradients of its
    results, to build the gradients of its operands.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the ops computing the
        gradients of this op's operands from `resultGrads` (one entry per
        result; a null Value where the result has no gradient, at least one
        is non-null). Fills `operandGrads` with one entry per operand, a null
        Value where the operand has no gradient (integer ids, ...). The ops
        built carry this op's location.
      }],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def TensorParallelOpInterface : OpInterface<"TensorParallelOpInterface"> {
  let cppNamespace = "::mlir::bigc";
  let description = [{
    An op's tensor-parallel sharding rule (bigc-tensor-parallel): given the
    layouts of its operands over the tensor ranks (replicated, split along a
    dimension, partial sums; a weight not yet placed is `freeParam`), the
    layouts it needs them in and the layouts of its results. Megatron's
    column- and row-parallel matmuls, the vocabulary-parallel embedding and
    loss, attention over a share of the heads and the sequence-parallel
    layernorm are rules of matmul, embedding, cross_entropy, attention and
    layernorm; a model written with the same ops in another arrangement gets
    the same treatment. An op without the interface runs replicated (and
    bigc inspect says so). The rules are attached to the ops in
    BigcTensorParallelRules.cpp.
  }];
  let methods = [
    InterfaceMethod<[{
        The rule for operands laid out as `operands` (one per operand).
      }],
      "::mlir::bigc::TpRule", "getTpRule",
      (ins "::llvm::ArrayRef<::mlir::bigc::TpLayout>":$operands,
           "const ::mlir::bigc::TpContext &":$ctx)>
  ];
}

#endif // BIGC_INTERFACES_TD
