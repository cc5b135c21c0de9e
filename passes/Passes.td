//===- Passes.td - bigc passes -----------------------------*- tablegen -*-===//
//
// Every pass of bigc, one .cpp per pass named after it (Autodiff.cpp for
// bigc-autodiff), one lit test per flag (test/Passes/autodiff.mlir).
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_PASSES_TD
#define BIGC_PASSES_TD

include "mlir/Pass/PassBase.td"

def BigcAutodiff : Pass<"bigc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Turn @forward (loss) into @train_step: forward, backward, AdamW";
  let description = [{
    Reverse-mode differentiation of the model graph. The input module declares
    the parameters (`bigc.param`) and a function

      func.func @forward(%tokens: tensor<BxTxi32>, %targets: tensor<BxTxi32>) -> tensor<f32>

    returning the loss. The pass replaces it with `@train_step` (same
    signature, same result) holding the forward ops, then the backward ops
    in reverse order, then one `bigc.adamw` per parameter that has a
    gradient, and declares the two AdamW moments of each such parameter.

    Why at compile time: the backward becomes ordinary IR, so recomputation,
    offload, sharding, scheduling and the memory plan see, place and order
    every gradient exactly like any forward activation.

    How: each op implements `DifferentiableOpInterface::buildGradient`
    (embedding -> embedding_grad, matmul -> two matmuls, layernorm ->
    layernorm_grad, attention -> attention_grad, ...). The loss is seeded with
    `bigc.fill {value = 1.0}`; a value used several times (a residual stream,
    a tied embedding) gets the `bigc.add` of the gradients of its uses. Every
    op carries `bigc.phase` = "forward", "backward" or "optimizer"; backward
    ops keep the location of the forward op they differentiate. Weight decay
    applies to parameters of rank >= 2 only. With `grad-clip` > 0 one
    `bigc.global_norm` over all parameter gradients feeds every `bigc.adamw`.

    Before:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {init = "normal", std = 0.02 : f64}
    func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
      %x = ...                                          // tensor<2x3x8xf32>
      %w = bigc.get_param @w : tensor<8x4xf32>
      %logits = bigc.matmul %x, %w : (...) -> tensor<2x3x4xf32>
      %loss = bigc.cross_entropy %logits, %targets : (...) -> tensor<f32>
      return %loss : tensor<f32>
    }
    ```

    After:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {init = "normal", std = 0.02 : f64}
    bigc.param @"w.exp_avg" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
    bigc.param @"w.exp_avg_sq" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
    func.func @train_step(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
      ... forward, {bigc.phase = "forward"} ...
      %one = bigc.fill {bigc.phase = "backward", value = 1.0 : f64} : () -> tensor<f32>
      %dlogits = bigc.cross_entropy_grad %logits, %targets, %one ...
      %dx = bigc.matmul %dlogits, %w {transpose_b} ...
      %x2 = bigc.reshape %x ... -> tensor<6x8xf32>
      %d2 = bigc.reshape %dlogits ... -> tensor<6x4xf32>
      %dw = bigc.matmul %x2, %d2 {transpose_a} ... -> tensor<8x4xf32>
      bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq",
                      lr = 3.0e-04, ..., weight_decay = 0.1, bigc.phase = "optimizer"} : tensor<8x4xf32>
      return %loss : tensor<f32>
    }
    ```

    Errors (located, the pass fails): no `@forward`; a result that is not a
    scalar f32 loss; an op in the forward that is not differentiable.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"lr", "lr", "double", /*default=*/"3e-4", "AdamW learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.1",
           "AdamW weight decay, applied to parameters of rank >= 2 only">,
    Option<"gradClip", "grad-clip", "double", /*default=*/"0.0",
           "Clip the global gradient norm to this value (0: no clipping)">,
  ];
}

//===----------------------------------------------------------------------===//
// Scheduling and memory planning
//===----------------------------------------------------------------------===//

def BigcSchedule : Pass<"bigc-schedule", "::mlir::ModuleOp"> {
  let summary = "One order for @train_step: optimizer updates as early as possible";
  let description = [{
    Fixes the order in which the runtime executes @train_step, the order the
    memory plan's liveness is computed in. In this version:

    - the forward runs as written and the backward as bigc-autodiff wrote it
      (reverse order of the forward);
    - each `bigc.adamw` moves to just after the last of: the definition of
      its gradient, the definition of the global norm it uses (if any), and
      the last reader of any `bigc.get_param` of the parameter it updates;
    - each `bigc.get_param` and `bigc.fill` sinks to just before its first
      user.

    Why: bigc-autodiff puts every update at the end, so every parameter
    gradient stays live until the end of the backward: the arena must hold
    all gradients at once (as many bytes as the parameters). Updating a
    parameter as soon as its gradient is complete lets the gradient die at
    once, and the memory plan reuses its bytes for the next layer's
    gradients: only about one layer's gradients are live at a time. The
    update must still come after every read of the parameter (the forward
    reads and the backward's `dx = dy @ W^T` reads), or the backward would
    see updated weights; after the norm, which needs every gradient (with
    gradient clipping all updates therefore stay at the end). Sinking
    `bigc.fill` shortens the life of its buffer (the loss seed is made
    just before `bigc.cross_entropy_grad`); `bigc.get_param` reads persistent
    memory and costs nothing, sinking it keeps the IR readable.

    Before (autodiff order):

    ```mlir
    %w = bigc.get_param @w ...            // forward
    %y = bigc.matmul %x, %w ...
    ...
    %dw = bigc.matmul %x2, %d2 {transpose_a} ...   // backward
    %dx = bigc.matmul %dy, %w {transpose_b} ...
    ... rest of the backward ...
    bigc.adamw %dw {param = @w, ...}
    ```

    After:

    ```mlir
    %dw = bigc.matmul %x2, %d2 {transpose_a} ...
    %dx = bigc.matmul %dy, %w {transpose_b} ...    // last reader of @w
    bigc.adamw %dw {param = @w, ...}               // %dw dies here
    ... rest of the backward ...
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
}

def BigcMemoryPlan : Pass<"bigc-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Liveness and arena offsets of every tensor of @train_step";
  let description = [{
    Decides where every tensor of @train_step lives: one offset in the
    "device" arena per buffer, so that the runtime allocates one arena of
    the planned size before the first step and never allocates again.

    - Instructions are the ops of @train_step in their (scheduled) order,
      except `bigc.get_param` (it reads a parameter in place).
    - Liveness per SSA value: from its defining instruction to its last use;
      the function arguments (tokens, targets) live from instruction 0, the
      returned loss to the last instruction, every `bigc.param` (role param
      and optimizer) over the whole step.
    - Aliasing: a `bigc.reshape` result is its operand (same offset, the
      union of both intervals). The result of an elementwise op (`add`,
      `bias_add`, `mul`, `scale`, `gelu`, `gelu_grad`) reuses the buffer of
      an operand of the same type whose last use is that op (not a
      parameter, a function argument or the returned value): the in-place
      rule of docs/program-format.md.
    - Offsets: `plan::planArena` (largest first, best fit among buffers live
      at the same time), 64-byte alignment, checked with `plan::checkPlan`.

    Why a separate, visible pass: the plan is the truth the runtime obeys,
    so it is written into the IR where tests (and bigc-test-print-memory-plan)
    can check it, and the emitter only copies it.

    Result, as attributes:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {bigc.offset = 0 : i64, init = "normal"}
    func.func @train_step(...) attributes {bigc.arena_bytes = 1024 : i64,
        bigc.arg_offsets = array<i64: 128, 192>, bigc.lower_bound_bytes = 960 : i64} {
      %y = bigc.matmul %x, %w {bigc.offsets = array<i64: 256>, ...}
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
}

def BigcTestPrintMemoryPlan
    : Pass<"bigc-test-print-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Print the memory plan of @train_step (tests)";
  let description = [{
    Computes the memory plan of @train_step as bigc-memory-plan does and
    prints it to stderr, one line per buffer, for FileCheck:

    ```
    memory-plan @train_step: instructions=N buffers=K arena=A lower_bound=L
    @w param : offset=0 size=128 live=[0,5]
    %arg0 arg : offset=128 size=24 live=[0,1]
    %0 bigc.matmul : offset=256 size=96 live=[0,2]
    ```

    `size` is the buffer's own bytes, `live` its own interval of instruction
    indices; values that share a place (reshape, in place) show the same
    offset. The IR is not changed.
  }];
}

#endif // BIGC_PASSES_TD
