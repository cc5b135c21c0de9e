//===- BigcDialect.td - the bigc dialect -------------------*- tablegen -*-===//
//
// The bigc dialect: a GPT training step on builtin ranked tensors. Its compute
// ops mirror the runtime instruction table of docs/program-format.md one to one
// (same names, operands, results and attributes), so the emitter is a
// straight translation.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_DIALECT_TD
#define BIGC_DIALECT_TD

include "mlir/IR/OpBase.td"

def Bigc_Dialect : Dialect {
  let name = "bigc";
  let cppNamespace = "::mlir::bigc";
  let summary = "Tensor-level ops of a GPT training step (bigc runtime instructions).";
  let description = [{
    Every compute op of this dialect is one instruction of the bigc runtime
    (docs/program-format.md), on static-shaped builtin tensors of f32, bf16 or
    f16 (token ids are i32). Parameters are module-level symbols
    (`bigc.param`), read with `bigc.get_param` and updated in place by
    `bigc.adamw`.

    Discardable attributes used by the passes:
    - `bigc.phase` : "forward" | "backward" | "optimizer" (set by
      bigc-autodiff on every op of the train step).
    - `bigc.micro_batch` : i64, the micro-batch of a forward/backward op
      (set by bigc-grad-accum).
    Module attributes: `bigc.precision` ("bf16" | "fp16", set by
    bigc-mixed-precision), `bigc.micro_batches` (K, set by bigc-grad-accum).
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  // bigc.phase, bigc.space and bigc.stream take only their known values
  // (include/bigc/Dialect/BigcAttrNames.h, BigcTransfer.h).
  let hasOperationAttrVerify = 1;
}

class Bigc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Bigc_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Bigc_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def Bigc_IdTensor : StaticShapeTensorOf<[I32]>;
def Bigc_ScalarF32 : 0DTensorOf<[F32]>;

#endif // BIGC_DIALECT_TD
