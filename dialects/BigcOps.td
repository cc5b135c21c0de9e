//===- BigcOps.td - bigc ops -------------------------------*- tablegen -*-===//
//
// One op per runtime instruction (docs/program-format.md), same names and
// semantics, plus the module-level parameter symbols (`bigc.param`), their
// reads (`bigc.get_param`) and the optimizer update (`bigc.adamw`).
// Every verifier implements the shape rules of the instruction table.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_OPS_TD
#define BIGC_OPS_TD

include "BigcDialect.td"
include "BigcInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// A side-effect-free compute op in the uniform assembly format
//   bigc.op %a, %b {attrs} : (type(a), type(b)) -> type(result)
class Bigc_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Bigc_Op<mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

// A forward compute op that implements DifferentiableOpInterface.
class Bigc_DiffOp<string mnemonic, list<Trait> traits = []>
    : Bigc_ComputeOp<mnemonic,
        !listconcat([DeclareOpInterfaceMethods<DifferentiableOpInterface>], traits)>;

def Bigc_AnyTensor : StaticShapeTensorOf<[F32, BF16, F16, I32]>;

//===----------------------------------------------------------------------===//
// Parameters and optimizer
//===----------------------------------------------------------------------===//

def Bigc_ParamOp : Bigc_Op<"param", [Symbol, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "declares a persistent tensor (model weight or optimizer state)";
  let description = [{
    A module-level, named, persistent tensor. `init` is how the runtime
    initialises it: "normal" (with `std`, default 0.02), "zeros", "ones",
    "fill" (with `value`: every element) or "copy" (with `source`: the cast
    of the persistent tensor `source` after that one is initialised; the
    16-bit compute copy of an fp32 master). `role` is "param" (a model weight
    the step reads, the default), "master" (the fp32 weight of record of a
    16-bit or offloaded compute copy, updated by AdamW) or "optimizer" (an
    AdamW moment, the loss scale). The type may be f32, bf16 or f16.

    ```mlir
    bigc.param @"h.0.ln_1.weight" : tensor<64xf32> {init = "ones"}
    bigc.param @"wte.weight" : tensor<256x64xf32> {init = "normal", std = 2.000000e-02 : f64}
    bigc.param @"wte.weight.exp_avg" : tensor<256x64xf32> {init = "zeros", role = "optimizer"}
    bigc.param @"wte.weight" : tensor<256x64xf32> {init = "normal", role = "master"}
    bigc.param @"wte.weight.half" : tensor<256x64xbf16> {init = "copy", source = "wte.weight"}
    bigc.param @loss_scale : tensor<f32> {init = "fill", value = 6.553600e+04 : f64, role = "optimizer"}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Bigc_FloatTensor>:$type,
                       StrAttr:$init,
                       OptionalAttr<F64Attr>:$std,
                       DefaultValuedStrAttr<StrAttr, "param">:$role,
                       OptionalAttr<StrAttr>:$source,
                       OptionalAttr<F64Attr>:$value);
  let builders = [
    // The version-1 form (no source, no value).
    OpBuilder<(ins "::mlir::StringAttr":$sym_name, "::mlir::TypeAttr":$type,
                   "::mlir::StringAttr":$init, "::mlir::FloatAttr":$std,
                   "::mlir::StringAttr":$role), [{
      build($_builder, $_state, sym_name, type, init, std, role,
            ::mlir::StringAttr(), ::mlir::FloatAttr());
    }]>
  ];
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Bigc_GetParamOp : Bigc_Op<"get_param", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, MemoryEffects<[MemRead]>]> {
  let summary = "reads a parameter";
  let description = [{
    The current value of the `bigc.param` named `param` (the types must
    match). Its gradient, in bigc-autodiff, goes to the optimizer.

    ```mlir
    %w = bigc.get_param @"h.0.ln_1.weight" : tensor<64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs Bigc_FloatTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

// A scalar f32 operand whose type the assembly format need not spell.
def Bigc_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

def Bigc_AdamWOp : Bigc_Op<"adamw", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>, AttrSizedOperandSegments]> {
  let summary = "AdamW update of a parameter and its two moments, in place";
  let description = [{
    PyTorch AdamW (see docs/program-format.md). Reads and writes the
    parameter `param` and its moments `exp_avg`, `exp_avg_sq` (all three
    `bigc.param` symbols with the shape of `grad`; the moments f32, or both
    bf16 with --optimizer-states bf16: read into fp32, updated in fp32,
    stored rounded to the nearest even).
    Optional operands (version 2; each one's presence is the flag of the
    program's instruction):

    - `norm` (the global gradient norm; instruction flag `clip`): the
      gradient is first scaled by `min(1, max_norm / (norm + 1e-6))`;
    - `unscale(%s)` (the loss scale, f32 scalar; flag `unscale`): the
      gradient (and the norm) are divided by it first;
    - `skip_if(%f)` (the found_inf flag of `bigc.check_finite`; flag
      `skip_on_overflow`): when it is nonzero the parameter and moments are
      not written (`half`, when there is one, is written as cast(param),
      which it already is: a staging copy of it stays valid).

    `half = @sym` (flag `write_half`): after the update the 16-bit (or f32)
    compute copy `@sym` is written as `cast(param)`; `param` is then the fp32
    master. The gradient may be 16-bit (read as fp32).

    `offset` and `count` (both or neither; bigc-offload-nvme's chunked
    updates): the update covers elements [offset, offset + count) of the
    (row-major) gradient; `param`, `exp_avg` and `exp_avg_sq` hold those
    elements at [0, count) (each has at least `count`); `half` has the
    gradient's element count (written at `offset`) or at least `count`
    (written at [0, count)). `weight` names the tensor of record the update
    is part of, when `param` is a staging copy of it or of a chunk of it
    (for the runtime's gradient dump).

    ```mlir
    bigc.adamw %g {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq",
                   lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64,
                   eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} : tensor<64x64xf32>
    bigc.adamw %g, %norm {..., max_norm = 1.0 : f64} : tensor<64x64xf32>, tensor<f32>
    bigc.adamw %g unscale(%scale) skip_if(%found) {..., half = @"w.half"} : tensor<64x64xf16>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$grad,
                       Optional<Bigc_ScalarF32>:$norm,
                       Optional<Bigc_F32Scalar>:$loss_scale,
                       Optional<Bigc_F32Scalar>:$found_inf,
                       FlatSymbolRefAttr:$param,
                       FlatSymbolRefAttr:$exp_avg,
                       FlatSymbolRefAttr:$exp_avg_sq,
                       F64Attr:$lr,
                       F64Attr:$beta1,
                       F64Attr:$beta2,
                       F64Attr:$eps,
                       F64Attr:$weight_decay,
                       DefaultValuedAttr<F64Attr, "0.0">:$max_norm,
                       OptionalAttr<FlatSymbolRefAttr>:$half,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$count,
                       OptionalAttr<FlatSymbolRefAttr>:$weight);
  let builders = [
    // The version-1 form: gradient and optional norm only.
    OpBuilder<(ins "::mlir::Value":$grad, "::mlir::Value":$norm,
                   "::mlir::FlatSymbolRefAttr":$param,
                   "::mlir::FlatSymbolRefAttr":$exp_avg,
                   "::mlir::FlatSymbolRefAttr":$exp_avg_sq,
                   "::mlir::FloatAttr":$lr, "::mlir::FloatAttr":$beta1,
                   "::mlir::FloatAttr":$beta2, "::mlir::FloatAttr":$eps,
                   "::mlir::FloatAttr":$weight_decay,
                   "::mlir::FloatAttr":$max_norm), [{
      build($_builder, $_state, grad, norm, ::mlir::Value(), ::mlir::Value(),
            param, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
            max_norm, ::mlir::FlatSymbolRefAttr(), ::mlir::IntegerAttr(), ::mlir::IntegerAttr(),
            ::mlir::FlatSymbolRefAttr());
    }]>
  ];
  let assemblyFormat = [{
    $grad (`,` $norm^)? (`unscale` `(` $loss_scale^ `)`)?
    (`skip_if` `(` $found_inf^ `)`)? attr-dict `:` type($grad) (`,` type($norm)^)?
  }];
  let hasVerifier = 1;
}

def Bigc_CheckFiniteOp : Bigc_Op<"check_finite", [Pure]> {
  let summary = "flag = 1 if any element of any input is inf or nan, else 0";
  let description = [{
    Inputs: any float tensors (the parameter gradients); result: the f32
    scalar `found_inf` that `bigc.adamw skip_if(...)` and
    `bigc.loss_scale_update` read (fp16 dynamic loss scaling).

    ```mlir
    %found = bigc.check_finite %g0, %g1 : (tensor<64x64xf16>, tensor<64xf16>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs);
  let results = (outs Bigc_ScalarF32:$found_inf);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_LossScaleUpdateOp : Bigc_Op<"loss_scale_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "dynamic loss scaling: back off on overflow, grow after N clean steps";
  let description = [{
    Updates, in place, the two f32 scalar `bigc.param`s `scale` and `good`
    (clean steps since the last change) from the `found_inf` flag: on
    overflow `scale *= backoff`, `good = 0`; else `good += 1` and when
    `good == growth_interval`: `scale *= growth`, `good = 0`.

    ```mlir
    bigc.loss_scale_update %found {scale = @loss_scale, good = @loss_scale_good,
        growth_interval = 2000 : i64, backoff = 5.0e-01 : f64, growth = 2.0 : f64}
    ```
  }];
  let arguments = (ins Bigc_F32Scalar:$found_inf,
                       FlatSymbolRefAttr:$scale,
                       FlatSymbolRefAttr:$good,
                       DefaultValuedAttr<I64Attr, "2000">:$growth_interval,
                       DefaultValuedAttr<F64Attr, "0.5">:$backoff,
                       DefaultValuedAttr<F64Attr, "2.0">:$growth);
  let assemblyFormat = "$found_inf attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute ops (runtime instructions)
//===----------------------------------------------------------------------===//

def Bigc_EmbeddingOp : Bigc_DiffOp<"embedding"> {
  let summary = "row gather: y[i,:] = table[ids[i],:]";
  let description = [{
    table `[V,C]`, ids `[...]` i32 → y `[...,C]`.
    ```mlir
    %y = bigc.embedding %table, %ids : (tensor<256x64xf32>, tensor<4x64xi32>) -> tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$table, Bigc_IdTensor:$ids);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_EmbeddingGradOp : Bigc_ComputeOp<"embedding_grad"> {
  let summary = "dtable = 0; dtable[ids[i],:] += dy[i,:]";
  let description = [{
    dy `[...,C]`, ids `[...]` i32 → dtable `[V,C]`.
    ```mlir
    %dt = bigc.embedding_grad %dy, %ids : (tensor<4x64x64xf32>, tensor<4x64xi32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_IdTensor:$ids);
  let results = (outs Bigc_FloatTensor:$dtable);
}

def Bigc_MatmulOp : Bigc_DiffOp<"matmul"> {
  let summary = "c = op(a) @ op(b)";
  let description = [{
    `op(x)` swaps the last two dimensions of x when its flag is set. Three
    forms: (1) a, b of rank 2; (2) a of rank > 2 without transpose_a and b of
    rank 2 (a linear layer: leading dims of a flattened); (3) a, b of the same
    rank > 2 with equal leading dims (batched).
    ```mlir
    %c = bigc.matmul %a, %b : (tensor<4x64x64xf32>, tensor<64x256xf32>) -> tensor<4x64x256xf32>
    %d = bigc.matmul %a, %b {transpose_b} : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$a, Bigc_FloatTensor:$b,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Bigc_FloatTensor:$c);
}

def Bigc_AddOp : Bigc_DiffOp<"add", [SameOperandsAndResultType]> {
  let summary = "c = a + b (same shapes)";
  let arguments = (ins Bigc_FloatTensor:$a, Bigc_FloatTensor:$b);
  let results = (outs Bigc_FloatTensor:$c);
}

def Bigc_BiasAddOp : Bigc_DiffOp<"bias_add"> {
  let summary = "y = x + b, b broadcast over the leading dims of x";
  let description = [{
    x `[...,S...]`, b `[S...]` (b's shape is a suffix of x's) → y (x's type).
    ```mlir
    %y = bigc.bias_add %x, %b : (tensor<4x64x256xf32>, tensor<256xf32>) -> tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$b);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_MulOp : Bigc_DiffOp<"mul", [SameOperandsAndResultType]> {
  let summary = "c = a * b (same shapes)";
  let arguments = (ins Bigc_FloatTensor:$a, Bigc_FloatTensor:$b);
  let results = (outs Bigc_FloatTensor:$c);
}

def Bigc_ScaleOp : Bigc_DiffOp<"scale", [SameOperandsAndResultType]> {
  let summary = "y = factor * x";
  let description = [{
    ```mlir
    %y = bigc.scale %x {factor = 5.000000e-01 : f64} : (tensor<8xf32>) -> tensor<8xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, F64Attr:$factor);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_ReduceSumOp : Bigc_DiffOp<"reduce_sum"> {
  let summary = "sum over the leading dims: x [P...,S...] -> y [S...]";
  let arguments = (ins Bigc_FloatTensor:$x);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_FillOp : Bigc_DiffOp<"fill"> {
  let summary = "every element of y = value";
  let description = [{
    ```mlir
    %one = bigc.fill {value = 1.000000e+00 : f64} : () -> tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Bigc_FloatTensor:$y);
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
}

def Bigc_LayerNormOp : Bigc_DiffOp<"layernorm"> {
  let summary = "layer normalisation over the last dim";
  let description = [{
    x `[...,C]`, w `[C]`, b `[C]` → y `[...,C]`, mean `[...]`, rstd `[...]`
    with `rstd = 1/sqrt(var + eps)` (biased variance). Only y has a gradient.
    ```mlir
    %y, %mean, %rstd = bigc.layernorm %x, %w, %b {eps = 1.0e-05 : f64}
        : (tensor<4x64x64xf32>, tensor<64xf32>, tensor<64xf32>)
       -> (tensor<4x64x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$w, Bigc_FloatTensor:$b,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs Bigc_FloatTensor:$y, Bigc_FloatTensor:$mean,
                      Bigc_FloatTensor:$rstd);
}

def Bigc_LayerNormGradOp : Bigc_ComputeOp<"layernorm_grad"> {
  let summary = "gradients of layernorm: (dy, x, w, mean, rstd) -> (dx, dw, db)";
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_FloatTensor:$x, Bigc_FloatTensor:$w,
                       Bigc_FloatTensor:$mean, Bigc_FloatTensor:$rstd);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$dw,
                      Bigc_FloatTensor:$db);
}

def Bigc_GeluOp : Bigc_DiffOp<"gelu", [SameOperandsAndResultType]> {
  let summary = "GELU: tanh approximation (default) or the exact erf form";
  let description = [{
    `approximate = "tanh"` (GPT-2's) or `"none"` (x * Phi(x), `nn.GELU()`).
  }];
  let arguments = (ins Bigc_FloatTensor:$x,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_GeluGradOp : Bigc_ComputeOp<"gelu_grad", [SameOperandsAndResultType]> {
  let summary = "dx = dy * gelu'(x)";
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$dy,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$dx);
}

def Bigc_RmsNormOp : Bigc_DiffOp<"rmsnorm"> {
  let summary = "RMS normalisation over the last dim (LLaMA)";
  let description = [{
    x `[...,C]`, w `[C]` → y `[...,C]`, rstd `[...]` (f32) with
    `rstd = 1/sqrt(mean(x^2) + eps)`, `y = x * rstd * w`. Only y has a gradient.
    ```mlir
    %y, %rstd = bigc.rmsnorm %x, %w {eps = 1.0e-06 : f64}
        : (tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$w,
                       DefaultValuedAttr<F64Attr, "1e-6">:$eps);
  let results = (outs Bigc_FloatTensor:$y, Bigc_FloatTensor:$rstd);
}

def Bigc_RmsNormGradOp : Bigc_ComputeOp<"rmsnorm_grad"> {
  let summary = "gradients of rmsnorm: (dy, x, w, rstd) -> (dx, dw)";
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_FloatTensor:$x, Bigc_FloatTensor:$w,
                       Bigc_FloatTensor:$rstd);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$dw);
}

def Bigc_RopeOp : Bigc_DiffOp<"rope", [SameOperandsAndResultType]> {
  let summary = "rotary position embedding of every head of every token";
  let description = [{
    x `[B,T,H*D]` (D = `head_dim`): token t of each head is rotated, for
    i < D/2, by `a = f32(inv_freq[i]) * f32(t)`: `y[i] = s (x[i] cos a -
    x[i+D/2] sin a)`, `y[i+D/2] = s (x[i+D/2] cos a + x[i] sin a)` with
    s = `attention_scaling` (Hugging Face's rotate_half layout).
    `interleaved`: the pairs are (x[2i], x[2i+1]) instead (Meta's llama and
    llama2.c: the complex numbers of adjacent elements).
    A partial rotary (GPT-NeoX, Pythia, Phi): `inv_freq` holds R/2 < D/2
    values; the first R elements of each head are rotated as above with R in
    D's place (pairs (x[i], x[i+R/2])), the other D - R pass through.
    `inverse`: the rotation by -a (the gradient). `cp` C > 1 (context
    parallelism, bigc-context-parallel): x holds this rank's part of each
    sequence of C x T tokens, the halves of T from chunks c and 2C-1-c of 2C
    (c: the rank's index on the mesh's cp axis); t is the token's position in
    the whole sequence.
    ```mlir
    %y = bigc.rope %x {head_dim = 16 : i64, inv_freq = array<f64: 1.0, 0.1>}
        : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, I64Attr:$head_dim,
                       DenseF64ArrayAttr:$inv_freq,
                       DefaultValuedAttr<F64Attr, "1.0">:$attention_scaling,
                       UnitAttr:$inverse, UnitAttr:$interleaved,
                       OptionalAttr<I64Attr>:$cp);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_SiluOp : Bigc_DiffOp<"silu", [SameOperandsAndResultType]> {
  let summary = "SiLU: y = x * sigmoid(x)";
  let arguments = (ins Bigc_FloatTensor:$x);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_SiluGradOp : Bigc_ComputeOp<"silu_grad", [SameOperandsAndResultType]> {
  let summary = "dx = dy * silu'(x)";
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$dy);
  let results = (outs Bigc_FloatTensor:$dx);
}

def Bigc_MoeOp : Bigc_DiffOp<"moe"> {
  let summary = "a mixture of experts: a top-k router over SwiGLU experts (Mixtral's block)";
  let description = [{
    x `[...,C]` (N tokens), router `[E,C]`, gate_up `[E,2F,C]`, down `[E,C,F]`
    → y (shape of x). Per token: p = softmax(x router^T) over the E experts
    (f32), its `top_k` largest (the lower index first on a tie), w those
    probabilities (divided by their sum with `normalize`: Mixtral's; Qwen-MoE
    without); y = sum over the chosen e of w_e down_e (silu(g) * u), with
    [g; u] = gate_up_e x (the first F rows the gate). One rank holds every
    expert (no expert parallelism yet). The router's auxiliary
    load-balancing loss is not part of it.
    ```mlir
    %y = bigc.moe %x, %r, %gu, %d {top_k = 2 : i64, normalize}
        : (tensor<2x16x64xf32>, tensor<8x64xf32>, tensor<8x256x64xf32>, tensor<8x64x128xf32>)
       -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$router, Bigc_FloatTensor:$gate_up,
                       Bigc_FloatTensor:$down, I64Attr:$top_k, UnitAttr:$normalize);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_MoeGradOp : Bigc_ComputeOp<"moe_grad"> {
  let summary = "gradients of moe: (dy, x, router, gate_up, down) -> (dx, drouter, dgate_up, ddown)";
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_FloatTensor:$x, Bigc_FloatTensor:$router,
                       Bigc_FloatTensor:$gate_up, Bigc_FloatTensor:$down, I64Attr:$top_k,
                       UnitAttr:$normalize);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$drouter, Bigc_FloatTensor:$dgate_up,
                      Bigc_FloatTensor:$ddown);
}

def Bigc_SoftcapOp : Bigc_DiffOp<"softcap", [SameOperandsAndResultType]> {
  let summary = "y = cap * tanh(x / cap) (Gemma 2's final_logit_softcapping)";
  let arguments = (ins Bigc_FloatTensor:$x, F64Attr:$cap);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_SoftcapGradOp : Bigc_ComputeOp<"softcap_grad", [SameOperandsAndResultType]> {
  let summary = "dx = dy * (1 - (y / cap)^2), from softcap's result y";
  let arguments = (ins Bigc_FloatTensor:$y, Bigc_FloatTensor:$dy, F64Attr:$cap);
  let results = (outs Bigc_FloatTensor:$dx);
}

def Bigc_SwigluOp : Bigc_DiffOp<"swiglu", [SameOperandsAndResultType]> {
  let summary = "y = silu(gate) * up (the LLaMA MLP's gated activation)";
  let arguments = (ins Bigc_FloatTensor:$gate, Bigc_FloatTensor:$up);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_SwigluGradOp : Bigc_ComputeOp<"swiglu_grad", [SameOperandsAndResultType]> {
  let summary = "(gate, up, dy) -> (dgate, dup) of y = silu(gate) * up";
  let arguments = (ins Bigc_FloatTensor:$gate, Bigc_FloatTensor:$up, Bigc_FloatTensor:$dy);
  let results = (outs Bigc_FloatTensor:$dgate, Bigc_FloatTensor:$dup);
}

def Bigc_GegluOp : Bigc_DiffOp<"geglu", [SameOperandsAndResultType]> {
  let summary = "y = gelu(gate) * up (GeGLU: Gemma's and T5 v1.1's gated MLP)";
  let description = [{
    `approximate` as for bigc.gelu: `"tanh"` (default; Gemma's
    `gelu_pytorch_tanh`) or `"none"` (the erf form).
  }];
  let arguments = (ins Bigc_FloatTensor:$gate, Bigc_FloatTensor:$up,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_GegluGradOp : Bigc_ComputeOp<"geglu_grad", [SameOperandsAndResultType]> {
  let summary = "(gate, up, dy) -> (dgate, dup) of y = gelu(gate) * up";
  let arguments = (ins Bigc_FloatTensor:$gate, Bigc_FloatTensor:$up, Bigc_FloatTensor:$dy,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$dgate, Bigc_FloatTensor:$dup);
}

def Bigc_GqaAttentionOp : Bigc_DiffOp<"gqa_attention"> {
  let summary = "causal grouped-query attention (separate q, k, v)";
  let description = [{
    q `[B,T,H*D]`, k and v `[B,T,Hkv*D]` (H = `heads`, Hkv = `kv_heads`
    dividing H; query head h reads key/value head h / (H/Hkv)) → out
    `[B,T,H*D]`, lse `[B,H,T]` (f32). Causal; `window` W > 0 limits query i
    to keys i - W < j <= i; `scale` (0: 1/sqrt(D)); `softcap` c > 0 caps
    each score s = scale q.k as c tanh(s / c) before the softmax (Gemma 2's
    attn_logit_softcapping; 0: none). With `tp_heads`
    (bigc-tensor-parallel, when the tensor ranks do not divide the key/value
    heads): q holds this tensor rank's `heads` query heads and k, v all
    `kv_heads`; query head h is global head (rank * heads + h).
    ```mlir
    %out, %lse = bigc.gqa_attention %q, %k, %v {heads = 4 : i64, kv_heads = 2 : i64}
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
       -> (tensor<2x16x64xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$q, Bigc_FloatTensor:$k, Bigc_FloatTensor:$v,
                       I64Attr:$heads, I64Attr:$kv_heads,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F64Attr, "0.0">:$scale,
                       UnitAttr:$tp_heads,
                       OptionalAttr<F64Attr>:$softcap,
                       OptionalAttr<I64Attr>:$cp);
  let results = (outs Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse);
}

def Bigc_GqaAttentionGradOp : Bigc_ComputeOp<"gqa_attention_grad"> {
  let summary = "gradients of gqa_attention with respect to q, k, v";
  let arguments = (ins Bigc_FloatTensor:$dout, Bigc_FloatTensor:$q, Bigc_FloatTensor:$k,
                       Bigc_FloatTensor:$v, Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse,
                       I64Attr:$heads, I64Attr:$kv_heads,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F64Attr, "0.0">:$scale,
                       UnitAttr:$tp_heads,
                       OptionalAttr<F64Attr>:$softcap,
                       OptionalAttr<I64Attr>:$cp);
  let results = (outs Bigc_FloatTensor:$dq, Bigc_FloatTensor:$dk, Bigc_FloatTensor:$dv);
}

def Bigc_RingAttentionOp : Bigc_ComputeOp<"ring_attention"> {
  let summary = "context parallelism: one block of keys of gqa_attention, merged into the partial result";
  let description = [{
    gqa_attention (same attributes) of this rank's queries q `[B,T,H*D]`
    over one block of keys and values k, v `[B,T,Hkv*D]`, each token at its
    position in the whole sequence of C x T tokens (C = `cp`): q holds the
    chunks c and 2C-1-c of 2C (c: this rank's index on the cp axis), k and v
    those of rank (c - `step`) mod C, which the ring passed on `step` times.
    A query sees the keys at positions p' <= p (and p - p' < `window`).
    With `acc` (the out and lse of the earlier blocks): the two partial
    softmaxes merged exactly, lse = log(e^lse_acc + e^lse_block), out = the
    weighted mean; without: the block's own (a row that sees no key: out 0,
    lse -inf). `a2a` (all-to-all attention): q, k and v hold the whole
    sequence of some heads, gathered in rank order (token i is token
    i mod T' of rank i / T', T' = T / C), and `step` is 0.
    ```mlir
    %o, %l = bigc.ring_attention %q, %k1, %v1, %o0, %l0 {heads = 4 : i64, kv_heads = 2 : i64, cp = 2 : i64, step = 1 : i64}
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16x64xf32>, tensor<2x4x16xf32>)
       -> (tensor<2x16x64xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$q, Bigc_FloatTensor:$k, Bigc_FloatTensor:$v,
                       Variadic<Bigc_FloatTensor>:$acc,
                       I64Attr:$heads, I64Attr:$kv_heads,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F64Attr, "0.0">:$scale,
                       UnitAttr:$tp_heads,
                       OptionalAttr<F64Attr>:$softcap,
                       I64Attr:$cp, I64Attr:$step, UnitAttr:$a2a);
  let results = (outs Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse);
}

def Bigc_RingAttentionGradOp : Bigc_ComputeOp<"ring_attention_grad"> {
  let summary = "context parallelism: one block's part of gqa_attention's gradients";
  let description = [{
    (dout, q, k, v, out, lse) as gqa_attention_grad, with out and lse the
    whole attention's (every block merged), k and v one block as in
    ring_attention: dq (this rank's queries) and dk, dv (of the block's keys)
    from this block's scores. With `acc` (dq, dk, dv so far, or dq alone):
    added to them (dk, dv without theirs: the block's part alone).
  }];
  let arguments = (ins Bigc_FloatTensor:$dout, Bigc_FloatTensor:$q, Bigc_FloatTensor:$k,
                       Bigc_FloatTensor:$v, Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse,
                       Variadic<Bigc_FloatTensor>:$acc,
                       I64Attr:$heads, I64Attr:$kv_heads,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F64Attr, "0.0">:$scale,
                       UnitAttr:$tp_heads,
                       OptionalAttr<F64Attr>:$softcap,
                       I64Attr:$cp, I64Attr:$step, UnitAttr:$a2a);
  let results = (outs Bigc_FloatTensor:$dq, Bigc_FloatTensor:$dk, Bigc_FloatTensor:$dv);
}

def Bigc_AttentionOp : Bigc_DiffOp<"attention"> {
  let summary = "causal multi-head attention";
  let description = [{
    qkv `[B,T,3C]` → out `[B,T,C]`, lse `[B,H,T]`; C divisible by `heads`.
    ```mlir
    %out, %lse = bigc.attention %qkv {heads = 4 : i64}
        : (tensor<4x64x192xf32>) -> (tensor<4x64x64xf32>, tensor<4x4x64xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$qkv, I64Attr:$heads);
  let results = (outs Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse);
}

def Bigc_AttentionGradOp : Bigc_ComputeOp<"attention_grad"> {
  let summary = "gradient of attention with respect to qkv";
  let description = [{
    dout `[B,T,C]`, qkv `[B,T,3C]`, out `[B,T,C]`, lse `[B,H,T]` → dqkv `[B,T,3C]`.
  }];
  let arguments = (ins Bigc_FloatTensor:$dout, Bigc_FloatTensor:$qkv,
                       Bigc_FloatTensor:$out, Bigc_FloatTensor:$lse, I64Attr:$heads);
  let results = (outs Bigc_FloatTensor:$dqkv);
}

def Bigc_TransposeOp : Bigc_DiffOp<"transpose"> {
  let summary = "y.shape[i] = x.shape[perm[i]] (numpy transpose)";
  let description = [{
    ```mlir
    %y = bigc.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    ```
  }];
  let arguments = (ins Bigc_AnyTensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs Bigc_AnyTensor:$y);
}

def Bigc_ReshapeOp : Bigc_DiffOp<"reshape"> {
  let summary = "same elements (row-major), new shape";
  let arguments = (ins Bigc_AnyTensor:$x);
  let results = (outs Bigc_AnyTensor:$y);
}

def Bigc_SplitOp : Bigc_DiffOp<"split"> {
  let summary = "n equal parts along axis";
  let description = [{
    ```mlir
    %a, %b = bigc.split %x {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, I64Attr:$axis);
  let results = (outs Variadic<Bigc_FloatTensor>:$results);
}

def Bigc_ConcatOp : Bigc_DiffOp<"concat"> {
  let summary = "join along axis";
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, I64Attr:$axis);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_CrossEntropyOp : Bigc_DiffOp<"cross_entropy"> {
  let summary = "mean over positions of -log softmax(logits)[target]";
  let description = [{
    logits `[...,V]`, targets `[...]` i32 → loss `tensor<f32>`.
    ```mlir
    %loss = bigc.cross_entropy %logits, %targets : (tensor<4x64x256xf32>, tensor<4x64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$logits, Bigc_IdTensor:$targets);
  let results = (outs Bigc_ScalarF32:$loss);
}

def Bigc_CrossEntropyGradOp : Bigc_ComputeOp<"cross_entropy_grad"> {
  let summary = "dlogits = (softmax(logits) - onehot(target)) * dloss / N";
  let arguments = (ins Bigc_FloatTensor:$logits, Bigc_IdTensor:$targets,
                       Bigc_ScalarF32:$dloss);
  let results = (outs Bigc_FloatTensor:$dlogits);
}

def Bigc_LinearCeStatsOp : Bigc_DiffOp<"linear_ce_stats"> {
  let summary = "vocab_ce_stats of the LM head's logits, computed chunk by chunk and never stored";
  let description = [{
    h `[...,C]`, w `[C,V]` (`[V,C]` with `transpose_b`), targets `[...]` i32
    → stats `[...,2]` f32 and a workspace `[N*chunk + 2*N]` f32 (N positions).
    For the logits l = h @ op(w): stats[i,0] = log Σ_j exp(l[i,j]) and
    stats[i,1] = l[i, target_i - offset] when the target is one of these V
    columns, else 0 (offset = t*V on tensor rank t with the
    `bigc.vocab_group` attribute, else 0): bigc.vocab_ce_stats of
    bigc.matmul(h, w), with the N×V logits computed `chunk` columns at a time
    into the workspace (an online log-sum-exp over the chunks). Written by
    bigc-fuse-loss.
    ```mlir
    %s, %ws = bigc.linear_ce_stats %h, %w, %t {chunk = 64 : i64, transpose_b} : (tensor<4x64x32xf32>, tensor<256x32xf32>, tensor<4x64xi32>) -> (tensor<4x64x2xf32>, tensor<16896xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$h, Bigc_FloatTensor:$w, Bigc_IdTensor:$targets, I64Attr:$chunk,
                       UnitAttr:$transpose_b);
  let results = (outs Bigc_FloatTensor:$stats, Bigc_FloatTensor:$workspace);
}

def Bigc_LinearCeStatsGradOp : Bigc_ComputeOp<"linear_ce_stats_grad"> {
  let summary = "the gradients of linear_ce_stats, the logits recomputed chunk by chunk";
  let description = [{
    dstats, h, w, targets, stats (linear_ce_stats's operands and result) →
    dh (h's type), dw (w's type) and a workspace `[N*chunk + N*C]` f32: with
    dl = dstats[...,0] · exp(l − stats[...,0]) + dstats[...,1] · onehot (the
    gradient of the logits, as bigc.vocab_ce_stats_grad), dh = dl @ op(w)ᵀ
    and dw the matmul's gradient for w, from `chunk` columns of l at a time
    (dh accumulated in f32 in the workspace).
  }];
  let arguments = (ins Bigc_FloatTensor:$dstats, Bigc_FloatTensor:$h, Bigc_FloatTensor:$w,
                       Bigc_IdTensor:$targets, Bigc_FloatTensor:$stats, I64Attr:$chunk, UnitAttr:$transpose_b);
  let results = (outs Bigc_FloatTensor:$dh, Bigc_FloatTensor:$dw, Bigc_FloatTensor:$workspace);
}

def Bigc_GlobalNormOp : Bigc_ComputeOp<"global_norm"> {
  let summary = "sqrt of the sum of squares of all elements of all inputs";
  let description = [{
    ```mlir
    %n = bigc.global_norm %g0, %g1 : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs);
  let results = (outs Bigc_ScalarF32:$norm);
}

def Bigc_CastOp : Bigc_DiffOp<"cast"> {
  let summary = "convert to another float type (round to nearest even)";
  let description = [{
    Same shape, another element type among f32, bf16, f16.
    ```mlir
    %y = bigc.cast %x : (tensor<4x64xf32>) -> tensor<4x64xbf16>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x);
  let results = (outs Bigc_FloatTensor:$y);
}

include "BigcTransferOps.td" // copy, param_copy, wait (CPU offload, streams)
include "BigcCollectiveOps.td" // all_reduce, reduce_scatter, all_gather (bigc-shard)
include "BigcTensorParallelOps.td" // tp_copy, tp_all_reduce, ..., vocab_ce_* (bigc-tensor-parallel)
include "BigcFusedOps.td" // add_layernorm, ..., gelu_grad_bias (bigc-fuse)

#endif // BIGC_OPS_TD
