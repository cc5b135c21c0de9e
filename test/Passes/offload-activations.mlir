// bigc-offload-activations on a step of two layers (a matmul and a GELU, then a matmul and the
// head): the activations of layer 0 the backward reads (the embedding x, x's product h and the
// GELU's output a) each get a copy to the host right after their definition and one back to the
// device before their first backward reader, which reads it; the forward's own readers keep the
// device value. Those of the last layer (y, the logits) stay: the backward reads them at once. bigc-schedule puts the copies on the d2h and h2d
// streams, and moves the way back to the start of the segment before its reader.
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=none --bigc-offload-activations | FileCheck %s
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=none --bigc-offload-activations="min-bytes=2048" | FileCheck %s --check-prefix=MIN
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=none --bigc-offload-activations --bigc-schedule | FileCheck %s --check-prefix=SCHED

module {
  bigc.param @w1 : tensor<16x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @w2 : tensor<32x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @emb : tensor<64x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @out : tensor<16x64xf32> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %e = bigc.get_param @emb : tensor<64x16xf32>
    %x = bigc.embedding %e, %tokens {bigc.layer = 0 : i64} : (tensor<64x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %w1 = bigc.get_param @w1 : tensor<16x32xf32>
    %h = bigc.matmul %x, %w1 {bigc.layer = 0 : i64} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
    %a = bigc.gelu %h {bigc.layer = 0 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %w2 = bigc.get_param @w2 : tensor<32x16xf32>
    %y = bigc.matmul %a, %w2 {bigc.layer = 1 : i64} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    %o = bigc.get_param @out : tensor<16x64xf32>
    %logits = bigc.matmul %y, %o {bigc.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: module attributes {bigc.offload_activations = {bytes = 5120 : i64, tensors = 3 : i64}
// CHECK: %[[X:.*]] = bigc.embedding
// CHECK-NEXT: %[[XH:.*]] = bigc.copy %[[X]] {{{.*}}bigc.phase = "forward", bigc.space = "host"}
// CHECK: %[[H:.*]] = bigc.matmul %[[X]], %{{.*}}
// CHECK-NEXT: %[[HH:.*]] = bigc.copy %[[H]] {{{.*}}bigc.space = "host"}
// CHECK-NEXT: %[[A:.*]] = bigc.gelu %[[H]]
// CHECK-NEXT: %[[AH:.*]] = bigc.copy %[[A]] {{{.*}}bigc.space = "host"}
// CHECK: %[[Y:.*]] = bigc.matmul %[[A]], %{{.*}}
// CHECK-NOT: bigc.copy %[[Y]]
// CHECK: %[[AD:.*]] = bigc.copy %[[AH]] {{{.*}}bigc.phase = "backward", bigc.space = "device"}
// CHECK: bigc.reshape %[[AD]]
// CHECK: %[[HD:.*]] = bigc.copy %[[HH]] {{{.*}}bigc.space = "device"}
// CHECK-NEXT: bigc.gelu_grad %[[HD]], %{{.*}}
// CHECK: %[[XD:.*]] = bigc.copy %[[XH]] {{{.*}}bigc.space = "device"}
// CHECK: bigc.reshape %[[XD]]

// Only the activations of 2 KiB or more: h and a (2 x 8 x 32 floats), not x (2 x 8 x 16).
// MIN: bigc.offload_activations = {bytes = 4096 : i64, tensors = 2 : i64}

// SCHED: bigc.copy %{{.*}} {{{.*}}bigc.space = "host", bigc.stream = "d2h"}
// SCHED: bigc.copy %{{.*}} {{{.*}}bigc.space = "device", bigc.stream = "h2d"}
