// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-schedule | FileCheck %s
// The pass is idempotent (waits and events are recomputed):
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-schedule --bigc-schedule | FileCheck %s

// A train step as bigc-autodiff writes it (updates at the end), for a tied
// embedding @wte, a linear layer @w/@b and the LM head. The loss seed (fill)
// is written at the top to check that it sinks to its user.
//  - get_param @w / @b sink to their first users (matmul, bias_add);
//  - adamw @b goes right after %db (its only other reader is the forward);
//  - adamw @w goes after %dx, the backward's read of @w, although %dw is
//    ready before: no parameter is updated before all its reads;
//  - adamw @wte goes after %dwte, the sum of its two gradients.

// CHECK-LABEL: func.func @train_step
// CHECK-NEXT:  %[[WTE:.*]] = bigc.get_param @wte
// CHECK-NEXT:  %[[X:.*]] = bigc.embedding %[[WTE]]
// CHECK-NEXT:  %[[W:.*]] = bigc.get_param @w
// CHECK-NEXT:  %[[H:.*]] = bigc.matmul %[[X]], %[[W]]
// CHECK-NEXT:  %[[B:.*]] = bigc.get_param @b
// CHECK-NEXT:  %[[Y:.*]] = bigc.bias_add %[[H]], %[[B]]
// CHECK-NEXT:  %[[L:.*]] = bigc.matmul %[[Y]], %[[WTE]]
// CHECK-NEXT:  %[[LOSS:.*]] = bigc.cross_entropy %[[L]]
// CHECK-NEXT:  %[[ONE:.*]] = bigc.fill
// CHECK-NEXT:  %[[DL:.*]] = bigc.cross_entropy_grad %[[L]], %{{.*}}, %[[ONE]]
// CHECK-NEXT:  %[[DY:.*]] = bigc.matmul %[[DL]], %[[WTE]]
// CHECK-NEXT:  %[[R1:.*]] = bigc.reshape %[[DL]]
// CHECK-NEXT:  %[[R2:.*]] = bigc.reshape %[[Y]]
// CHECK-NEXT:  %[[DWTE1:.*]] = bigc.matmul %[[R1]], %[[R2]]
// CHECK-NEXT:  %[[DB:.*]] = bigc.reduce_sum %[[DY]]
// CHECK-NEXT:  bigc.adamw %[[DB]] {{.*}}param = @b,
// CHECK-NEXT:  %[[R3:.*]] = bigc.reshape %[[X]]
// CHECK-NEXT:  %[[R4:.*]] = bigc.reshape %[[DY]]
// CHECK-NEXT:  %[[DW:.*]] = bigc.matmul %[[R3]], %[[R4]]
// CHECK-NEXT:  %[[DX:.*]] = bigc.matmul %[[DY]], %[[W]]
// CHECK-NEXT:  bigc.adamw %[[DW]] {{.*}}param = @w,
// CHECK-NEXT:  %[[DWTE2:.*]] = bigc.embedding_grad %[[DX]]
// CHECK-NEXT:  %[[DWTE:.*]] = bigc.add %[[DWTE1]], %[[DWTE2]]
// CHECK-NEXT:  bigc.adamw %[[DWTE]] {{.*}}param = @wte,
// CHECK-NEXT:  return %[[LOSS]]

module {
  bigc.param @wte : tensor<8x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @"wte.exp_avg" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"wte.exp_avg_sq" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @w : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @"w.exp_avg" : tensor<4x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"w.exp_avg_sq" : tensor<4x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @b : tensor<4xf32> {init = "zeros"}
  bigc.param @"b.exp_avg" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"b.exp_avg_sq" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  func.func @train_step(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %one = bigc.fill {value = 1.0 : f64, bigc.phase = "backward"} : () -> tensor<f32>
    %wte = bigc.get_param @wte {bigc.phase = "forward"} : tensor<8x4xf32>
    %w = bigc.get_param @w {bigc.phase = "forward"} : tensor<4x4xf32>
    %b = bigc.get_param @b {bigc.phase = "forward"} : tensor<4xf32>
    %x = bigc.embedding %wte, %tokens {bigc.phase = "forward"} : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
    %h = bigc.matmul %x, %w {bigc.phase = "forward"} : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
    %y = bigc.bias_add %h, %b {bigc.phase = "forward"} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
    %logits = bigc.matmul %y, %wte {transpose_b, bigc.phase = "forward"} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
    %loss = bigc.cross_entropy %logits, %targets {bigc.phase = "forward"} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
    %dlogits = bigc.cross_entropy_grad %logits, %targets, %one {bigc.phase = "backward"} : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x8xf32>
    %dy = bigc.matmul %dlogits, %wte {bigc.phase = "backward"} : (tensor<2x3x8xf32>, tensor<8x4xf32>) -> tensor<2x3x4xf32>
    %r1 = bigc.reshape %dlogits {bigc.phase = "backward"} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
    %r2 = bigc.reshape %y {bigc.phase = "backward"} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
    %dwte1 = bigc.matmul %r1, %r2 {transpose_a, bigc.phase = "backward"} : (tensor<6x8xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
    %db = bigc.reduce_sum %dy {bigc.phase = "backward"} : (tensor<2x3x4xf32>) -> tensor<4xf32>
    %r3 = bigc.reshape %x {bigc.phase = "backward"} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
    %r4 = bigc.reshape %dy {bigc.phase = "backward"} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
    %dw = bigc.matmul %r3, %r4 {transpose_a, bigc.phase = "backward"} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
    %dx = bigc.matmul %dy, %w {transpose_b, bigc.phase = "backward"} : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
    %dwte2 = bigc.embedding_grad %dx, %tokens {bigc.phase = "backward"} : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<8x4xf32>
    %dwte = bigc.add %dwte1, %dwte2 {bigc.phase = "backward"} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    bigc.adamw %dwte {param = @wte, exp_avg = @"wte.exp_avg", exp_avg_sq = @"wte.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, bigc.phase = "optimizer"} : tensor<8x4xf32>
    bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, bigc.phase = "optimizer"} : tensor<4x4xf32>
    bigc.adamw %db {param = @b, exp_avg = @"b.exp_avg", exp_avg_sq = @"b.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, bigc.phase = "optimizer"} : tensor<4xf32>
    return %loss : tensor<f32>
  }
}

// -----

// With gradient clipping every update needs the global norm, so all of them
// stay after it, in their original order.

// CHECK-LABEL: func.func @train_step
// CHECK:       %[[DB:.*]] = bigc.reduce_sum
// CHECK-NEXT:  %[[DW:.*]] = bigc.scale
// CHECK-NEXT:  %[[N:.*]] = bigc.global_norm %[[DW]], %[[DB]]
// CHECK-NEXT:  bigc.adamw %[[DW]], %[[N]] {{.*}}param = @w,
// CHECK-NEXT:  bigc.adamw %[[DB]], %[[N]] {{.*}}param = @b,
// CHECK-NEXT:  return

module {
  bigc.param @w : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @"w.exp_avg" : tensor<4x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"w.exp_avg_sq" : tensor<4x4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @b : tensor<4xf32> {init = "zeros"}
  bigc.param @"b.exp_avg" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"b.exp_avg_sq" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  func.func @train_step(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %b = bigc.get_param @b : tensor<4xf32>
    %h = bigc.bias_add %w, %b : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %h, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    %dh = bigc.cross_entropy_grad %h, %targets, %one : (tensor<4x4xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x4xf32>
    %db = bigc.reduce_sum %dh : (tensor<4x4xf32>) -> tensor<4xf32>
    %dw = bigc.scale %dh {factor = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %norm = bigc.global_norm %dw, %db : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<f32>
    bigc.adamw %dw, %norm {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, max_norm = 1.0 : f64} : tensor<4x4xf32>, tensor<f32>
    bigc.adamw %db, %norm {param = @b, exp_avg = @"b.exp_avg", exp_avg_sq = @"b.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, max_norm = 1.0 : f64} : tensor<4xf32>, tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Streams and events. A copy to "device" of a host value runs on stream
// h2d, a copy to "host" on d2h; each gets an event, in order. The compute
// stream waits (bigc.wait) just before the first compute op that reads a
// side-stream result; the d2h copy, read by nobody on the compute stream
// and with no layer boundary after it, is joined at the end of the step
// (no wait).

// CHECK-LABEL: func.func @train_step
// CHECK-NEXT:  %[[HP:.*]] = bigc.get_param @h
// CHECK-NEXT:  %[[HD:.*]] = bigc.copy %[[HP]] {bigc.event = 0 : i64, bigc.space = "device", bigc.stream = "h2d"}
// CHECK-NEXT:  %[[W:.*]] = bigc.get_param @w
// CHECK-NEXT:  bigc.wait {events = array<i64: 0>}
// CHECK-NEXT:  %[[A:.*]] = bigc.add %[[W]], %[[HD]]
// CHECK-NEXT:  bigc.copy %[[A]] {bigc.event = 1 : i64, bigc.space = "host", bigc.stream = "d2h"}
// CHECK-NEXT:  bigc.cross_entropy %[[A]]
// CHECK-NEXT:  return

module {
  bigc.param @w : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @h : tensor<4x4xf32> {init = "zeros", bigc.space = "host"}
  func.func @train_step(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %hp = bigc.get_param @h : tensor<4x4xf32>
    %hd = bigc.copy %hp {bigc.space = "device"} : tensor<4x4xf32>
    %a = bigc.add %w, %hd : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %c = bigc.copy %a {bigc.space = "host"} : tensor<4x4xf32>
    %loss = bigc.cross_entropy %a, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Layer boundaries: a d2h copy is joined at the start of the segment (same
// phase and bigc.layer) after the next one, so it overlaps the rest of its
// block and the whole next one; a host op and an h2d param_copy one segment
// later still. Segments here: A (layer 1: %d, copy), B (layer 0: %e),
// C (no layer: %f), D (layer 2: %g), E (layer 3: %k).

// CHECK-LABEL: func.func @train_step
// CHECK:       bigc.copy %{{.*}} {bigc.event = 0 : i64, bigc.layer = 1 : i64, bigc.space = "host", bigc.stream = "d2h"}
// CHECK-NEXT:  bigc.adamw {{.*}}bigc.event = 1 : i64, bigc.space = "host", bigc.stream = "host"
// CHECK-NEXT:  bigc.param_copy {bigc.event = 2 : i64, bigc.stream = "h2d", from = @v.stage, to = @v}
// CHECK-NEXT:  %[[E:.*]] = bigc.scale {{.*}}bigc.layer = 0
// CHECK-NEXT:  bigc.wait {events = array<i64: 0>}
// CHECK-NEXT:  %[[F:.*]] = bigc.scale %[[E]]
// CHECK-NEXT:  bigc.wait {events = array<i64: 1, 2>}
// CHECK-NEXT:  bigc.scale %[[F]] {bigc.layer = 2
// CHECK-NEXT:  bigc.scale {{.*}}bigc.layer = 3

module {
  bigc.param @w : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @v : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @"v.m" : tensor<4x4xf32> {init = "zeros", role = "master", bigc.space = "host"}
  bigc.param @"v.stage" : tensor<4x4xf32> {init = "zeros", role = "transfer", bigc.space = "host"}
  bigc.param @"v.a" : tensor<4x4xf32> {init = "zeros", role = "optimizer", bigc.space = "host"}
  bigc.param @"v.b" : tensor<4x4xf32> {init = "zeros", role = "optimizer", bigc.space = "host"}
  func.func @train_step(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %d = bigc.scale %w {factor = 2.0 : f64, bigc.layer = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %dh = bigc.copy %d {bigc.space = "host", bigc.layer = 1 : i64} : tensor<4x4xf32>
    bigc.adamw %dh {param = @"v.m", exp_avg = @"v.a", exp_avg_sq = @"v.b", half = @"v.stage", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, bigc.space = "host"} : tensor<4x4xf32>
    bigc.param_copy {from = @v.stage, to = @v}
    %e = bigc.scale %d {factor = 2.0 : f64, bigc.layer = 0 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %f = bigc.scale %e {factor = 2.0 : f64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %g = bigc.scale %f {factor = 2.0 : f64, bigc.layer = 2 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %k = bigc.scale %g {factor = 2.0 : f64, bigc.layer = 3 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %k, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// expected-error @below {{bigc-schedule: the module has no func.func @train_step (run bigc-autodiff first)}}
module {
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %one : tensor<f32>
  }
}
