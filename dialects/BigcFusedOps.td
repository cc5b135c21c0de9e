//===- BigcFusedOps.td - fused elementwise ops (bigc-fuse) -*- tablegen -*-===//
//
// The ops bigc-fuse makes of a pair of ops of the training step (after
// autodiff, mixed precision and recomputation): the residual add with the
// norm that reads it, a norm's input gradient with the residual gradient
// added to it, the bias with the GELU after it, and the GELU's gradient with
// the bias gradient (the column sum) of it. Each computes exactly what the
// pair computes, intermediate values rounded to the tensors' type as the
// pair stores them, so a fused program's numbers are the unfused program's;
// what goes is a tensor written and read back, and a launch. Included from
// BigcOps.td (same dialect, same generated files); verifiers in BigcOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_FUSED_OPS_TD
#define BIGC_FUSED_OPS_TD

def Bigc_AddLayerNormOp : Bigc_ComputeOp<"add_layernorm"> {
  let summary = "s = a + r, then layernorm(s): (a, r, w, b) -> (s, y, mean, rstd)";
  let description = [{
    The residual stream's add and the layernorm that reads its sum. s is
    stored in the type of a (as `bigc.add` stores it) and normalised as
    stored.
    ```mlir
    %s, %y, %mean, %rstd = bigc.add_layernorm %a, %r, %w, %b {eps = 1.0e-05 : f64}
        : (tensor<4x64x64xf32>, tensor<4x64x64xf32>, tensor<64xf32>, tensor<64xf32>)
       -> (tensor<4x64x64xf32>, tensor<4x64x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$a, Bigc_FloatTensor:$r, Bigc_FloatTensor:$w, Bigc_FloatTensor:$b,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs Bigc_FloatTensor:$s, Bigc_FloatTensor:$y, Bigc_FloatTensor:$mean,
                      Bigc_FloatTensor:$rstd);
}

def Bigc_AddRmsNormOp : Bigc_ComputeOp<"add_rmsnorm"> {
  let summary = "s = a + r, then rmsnorm(s): (a, r, w) -> (s, y, rstd)";
  let arguments = (ins Bigc_FloatTensor:$a, Bigc_FloatTensor:$r, Bigc_FloatTensor:$w,
                       DefaultValuedAttr<F64Attr, "1e-6">:$eps);
  let results = (outs Bigc_FloatTensor:$s, Bigc_FloatTensor:$y, Bigc_FloatTensor:$rstd);
}

def Bigc_LayerNormGradAddOp : Bigc_ComputeOp<"layernorm_grad_add"> {
  let summary = "layernorm_grad with the residual gradient added: (dy, x, w, mean, rstd, r) -> (r + dx, dw, db)";
  let description = [{
    dx (stored in dy's type, as `bigc.layernorm_grad` stores it) plus r.
  }];
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_FloatTensor:$x, Bigc_FloatTensor:$w,
                       Bigc_FloatTensor:$mean, Bigc_FloatTensor:$rstd, Bigc_FloatTensor:$r);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$dw, Bigc_FloatTensor:$db);
}

def Bigc_RmsNormGradAddOp : Bigc_ComputeOp<"rmsnorm_grad_add"> {
  let summary = "rmsnorm_grad with the residual gradient added: (dy, x, w, rstd, r) -> (r + dx, dw)";
  let arguments = (ins Bigc_FloatTensor:$dy, Bigc_FloatTensor:$x, Bigc_FloatTensor:$w,
                       Bigc_FloatTensor:$rstd, Bigc_FloatTensor:$r);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$dw);
}

def Bigc_BiasGeluOp : Bigc_ComputeOp<"bias_gelu"> {
  let summary = "pre = x + b (b broadcast over the leading dims), y = gelu(pre): (x, b) -> (pre, y)";
  let description = [{
    pre is kept: gelu_grad reads it in the backward.
    ```mlir
    %pre, %y = bigc.bias_gelu %x, %b : (tensor<4x64x256xf32>, tensor<256xf32>)
        -> (tensor<4x64x256xf32>, tensor<4x64x256xf32>)
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$b,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$pre, Bigc_FloatTensor:$y);
}

def Bigc_GeluGradBiasOp : Bigc_ComputeOp<"gelu_grad_bias"> {
  let summary = "dx = dy * gelu'(x), db = dx summed over the leading dims: (x, dy) -> (dx, db)";
  let arguments = (ins Bigc_FloatTensor:$x, Bigc_FloatTensor:$dy,
                       DefaultValuedStrAttr<StrAttr, "tanh">:$approximate);
  let results = (outs Bigc_FloatTensor:$dx, Bigc_FloatTensor:$db);
}

#endif // BIGC_FUSED_OPS_TD
