// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-grad-accum=micro-batches=2 | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-mixed-precision=precision=bf16 --bigc-grad-accum=micro-batches=3 | FileCheck %s --check-prefix=BF16
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-mixed-precision=precision=fp16 --bigc-grad-accum=micro-batches=2 | FileCheck %s --check-prefix=FP16
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-grad-accum=micro-batches=1 | FileCheck %s --check-prefix=ONE
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-grad-accum=micro-batches=2 --bigc-schedule --bigc-test-print-memory-plan 2>&1 >/dev/null | FileCheck %s --check-prefix=PLAN
// RUN: not bigc-opt %s -split-input-file --bigc-autodiff --bigc-grad-accum=micro-batches=0 2>&1 | FileCheck %s --check-prefix=BADK

// K = 2, fp32: two (tokens, targets) pairs; micro-batch 0 is the original
// forward+backward, micro-batch 1 a copy reading the second pair, after it.
// CHECK-LABEL: module attributes {bigc.micro_batches = 2 : i64}
// CHECK:       func.func @train_step(%[[TOK0:.*]]: tensor<2x4xi32>, %[[TGT0:.*]]: tensor<2x4xi32>, %[[TOK1:.*]]: tensor<2x4xi32>, %[[TGT1:.*]]: tensor<2x4xi32>) -> tensor<f32>
// CHECK:       bigc.embedding %{{.*}}, %[[TOK0]] {bigc.micro_batch = 0 : i64, bigc.phase = "forward"}
// CHECK:       %[[L0:.*]] = bigc.cross_entropy %{{.*}}, %[[TGT0]] {bigc.micro_batch = 0 : i64
// Each micro-batch's loss seed is scaled by 1/K: the gradients add up to
// those of the mean loss over the global batch.
// CHECK-NEXT:  %[[ONE0:.*]] = bigc.fill {bigc.micro_batch = 0 : i64, bigc.phase = "backward", value = 1.000000e+00 : f64}
// CHECK-NEXT:  %[[SEED0:.*]] = bigc.scale %[[ONE0]] {bigc.micro_batch = 0 : i64, bigc.phase = "backward", factor = 5.000000e-01 : f64}
// CHECK-NEXT:  bigc.cross_entropy_grad %{{.*}}, %[[TGT0]], %[[SEED0]]
// CHECK:       %[[ATTN0:.*]] = bigc.matmul {{.*}} -> tensor<8x24xf32>
// CHECK:       %{{.*}}, %[[DW0:.*]], %[[DB0:.*]] = bigc.layernorm_grad {{.*}}bigc.micro_batch = 0
// CHECK:       %[[WTE0:.*]] = bigc.add {{.*}}bigc.micro_batch = 0 {{.*}} -> tensor<16x8xf32>
// Micro-batch 1 starts after micro-batch 0's backward (its activations are dead).
// CHECK-NEXT:  bigc.get_param @wte.weight {bigc.micro_batch = 1 : i64, bigc.phase = "forward"}
// CHECK-NEXT:  bigc.embedding %{{.*}}, %[[TOK1]] {bigc.micro_batch = 1 : i64, bigc.phase = "forward"}
// CHECK:       %[[L1:.*]] = bigc.cross_entropy %{{.*}}, %[[TGT1]] {bigc.micro_batch = 1 : i64
// The loss is the mean of the micro-batch losses.
// CHECK-NEXT:  %[[LS:.*]] = bigc.add %[[L0]], %[[L1]] {bigc.micro_batch = 1 : i64, bigc.phase = "forward"} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT:  %[[MEAN:.*]] = bigc.scale %[[LS]] {bigc.micro_batch = 1 : i64, bigc.phase = "forward", factor = 5.000000e-01 : f64}
// CHECK-NEXT:  %[[ONE1:.*]] = bigc.fill {bigc.micro_batch = 1 : i64
// CHECK-NEXT:  %[[SEED1:.*]] = bigc.scale %[[ONE1]] {{.*}}factor = 5.000000e-01 : f64
// CHECK-NEXT:  bigc.cross_entropy_grad %{{.*}}, %[[TGT1]], %[[SEED1]]
// Each gradient is added onto its accumulator as soon as it is complete.
// CHECK:       %[[ATTN1:.*]] = bigc.matmul {{.*}}bigc.micro_batch = 1 {{.*}} -> tensor<8x24xf32>
// CHECK-NEXT:  %[[ATTN:.*]] = bigc.add %[[ATTN0]], %[[ATTN1]] {bigc.grad_accum, bigc.micro_batch = 1 : i64, bigc.phase = "backward"} : (tensor<8x24xf32>, tensor<8x24xf32>) -> tensor<8x24xf32>
// CHECK-NEXT:  %{{.*}}, %[[DW1:.*]], %[[DB1:.*]] = bigc.layernorm_grad {{.*}}bigc.micro_batch = 1
// CHECK-DAG:   %[[DB:.*]] = bigc.add %[[DB0]], %[[DB1]]
// CHECK-DAG:   %[[DW:.*]] = bigc.add %[[DW0]], %[[DW1]]
// CHECK:       %[[WTE1:.*]] = bigc.add {{.*}}bigc.micro_batch = 1 {{.*}} -> tensor<16x8xf32>
// CHECK-NEXT:  %[[WTE:.*]] = bigc.add %[[WTE0]], %[[WTE1]]
// The optimizer runs once, on the accumulated gradients.
// CHECK-NEXT:  bigc.adamw %[[WTE]] {{{.*}}param = @wte.weight
// CHECK-NEXT:  bigc.adamw %[[DW]] {{{.*}}param = @ln.weight,
// CHECK-NEXT:  bigc.adamw %[[DB]] {{{.*}}param = @ln.bias,
// CHECK-NEXT:  bigc.adamw %[[ATTN]] {{{.*}}param = @attn.weight,
// CHECK-NEXT:  return %[[MEAN]] : tensor<f32>

// bf16, K = 3: 16-bit gradients are cast to f32 and accumulated in f32.
// BF16-LABEL: func.func @train_step(%{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>) -> tensor<f32>
// BF16:       bigc.scale %{{.*}} {bigc.micro_batch = 0 : i64, bigc.phase = "backward", factor = 0.33333333333333331 : f64} : (tensor<f32>) -> tensor<f32>
// BF16:       %[[G0:.*]] = bigc.matmul {{.*}}bigc.micro_batch = 0 {{.*}} -> tensor<8x24xbf16>
// BF16-NEXT:  %[[A0:.*]] = bigc.cast %[[G0]] {bigc.grad_accum, bigc.micro_batch = 0 : i64, bigc.phase = "backward"} : (tensor<8x24xbf16>) -> tensor<8x24xf32>
// BF16:       %[[G1:.*]] = bigc.matmul {{.*}}bigc.micro_batch = 1 {{.*}} -> tensor<8x24xbf16>
// BF16-NEXT:  %[[C1:.*]] = bigc.cast %[[G1]] {bigc.grad_accum, bigc.micro_batch = 1 : i64{{.*}} -> tensor<8x24xf32>
// BF16-NEXT:  %[[A1:.*]] = bigc.add %[[A0]], %[[C1]] {bigc.grad_accum, bigc.micro_batch = 1 : i64, bigc.phase = "backward"} : (tensor<8x24xf32>, tensor<8x24xf32>) -> tensor<8x24xf32>
// BF16:       %[[G2:.*]] = bigc.matmul {{.*}}bigc.micro_batch = 2 {{.*}} -> tensor<8x24xbf16>
// BF16-NEXT:  %[[C2:.*]] = bigc.cast %[[G2]] {bigc.grad_accum, bigc.micro_batch = 2 : i64{{.*}} -> tensor<8x24xf32>
// BF16-NEXT:  %[[A2:.*]] = bigc.add %[[A1]], %[[C2]] {bigc.grad_accum, bigc.micro_batch = 2 : i64
// BF16:       bigc.adamw %[[A2]] {{{.*}}half = @attn.weight.half, {{.*}}param = @attn.weight, {{.*}}} : tensor<8x24xf32>

// fp16: the seed of each micro-batch is scale/K; the inf/nan check, the
// unscaled updates and the scale update read the f32 accumulators, once.
// FP16:       %[[S0:.*]] = bigc.get_param @loss_scale {bigc.micro_batch = 0 : i64, bigc.phase = "backward"}
// FP16-NEXT:  bigc.scale %[[S0]] {{.*}}factor = 5.000000e-01
// FP16:       %[[S1:.*]] = bigc.get_param @loss_scale {bigc.micro_batch = 1 : i64, bigc.phase = "backward"}
// FP16-NEXT:  bigc.scale %[[S1]] {{.*}}factor = 5.000000e-01
// FP16:       %[[WTE:.*]] = bigc.add {{.*}} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// FP16-NEXT:  %[[F:.*]] = bigc.check_finite %[[WTE]], %{{.*}}, %{{.*}}, %{{.*}} {bigc.phase = "optimizer"} : (tensor<16x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x24xf32>) -> tensor<f32>
// FP16-NEXT:  %[[S:.*]] = bigc.get_param @loss_scale {bigc.phase = "optimizer"}
// FP16-NEXT:  bigc.adamw %[[WTE]] unscale(%[[S]]) skip_if(%[[F]])
// FP16-COUNT-3: bigc.adamw
// FP16-NEXT:  bigc.loss_scale_update %[[F]]

// K = 1: nothing to do.
// ONE-NOT:    bigc.micro_batches
// ONE:        func.func @train_step(%{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>) -> tensor<f32>
// ONE-NOT:    bigc.micro_batch

// Memory: the argument pairs are written before the step; micro-batch 1's
// buffers reuse micro-batch 0's activations.
// PLAN:       memory-plan @train_step:
// PLAN:       %arg0 arg : offset={{[0-9]+}} size=32 live=[0,
// PLAN:       %arg3 arg : offset={{[0-9]+}} size=32 live=[0,

// BADK: bigc-grad-accum: micro-batches must be at least 1, got 0

module {
  bigc.param @"wte.weight" : tensor<16x8xf32> {init = "normal", std = 0.02}
  bigc.param @"ln.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"ln.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"attn.weight" : tensor<8x24xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<16x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %lw = bigc.get_param @"ln.weight" : tensor<8xf32>
    %lb = bigc.get_param @"ln.bias" : tensor<8xf32>
    %y, %mean, %rstd = bigc.layernorm %x, %lw, %lb : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
    %aw = bigc.get_param @"attn.weight" : tensor<8x24xf32>
    %qkv = bigc.matmul %y, %aw : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %o, %lse = bigc.attention %qkv {heads = 2 : i64} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
    %r = bigc.add %o, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = bigc.matmul %r, %wte {transpose_b} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
