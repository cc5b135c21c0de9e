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

#endif // BIGC_INTERFACES_TD
