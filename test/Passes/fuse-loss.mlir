// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-fuse-loss | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-fuse-loss=chunk=5 | FileCheck %s --check-prefix=CHUNK
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-fuse-loss --bigc-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-fuse-loss --bigc-autodiff --bigc-mixed-precision=precision=bf16 | FileCheck %s --check-prefix=BF16

// A tied LM head (w [V,C] read with transpose_b): the matmul and the
// cross-entropy become linear_ce_stats (N = 6 positions, C = 8, V = 32; the
// chunk is C rounded up to 64, at most V: 32; workspace 6*32 + 2*6 floats)
// and a one-part vocab_ce_loss. The logits are gone.
// CHECK-LABEL: func.func @forward
// CHECK-NOT:   bigc.matmul %{{.*}}, %{{.*}} {transpose_b}
// CHECK:       %[[S:.*]], %{{.*}} = bigc.linear_ce_stats %[[R:.*]], %[[WTE:.*]], %arg1 {chunk = 32 : i64, transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>, tensor<2x3xi32>) -> (tensor<2x3x2xf32>, tensor<204xf32>)
// CHECK-NEXT:  %[[L:.*]] = bigc.vocab_ce_loss %[[S]] {parts = 1 : i64} : (tensor<2x3x2xf32>) -> tensor<f32>
// CHECK-NEXT:  return %[[L]]
// CHECK-NOT:   bigc.cross_entropy
// 5 columns at a time: 6*5 + 2*6 floats.
// CHUNK:       bigc.linear_ce_stats {{.*}}{chunk = 5 : i64, transpose_b} : {{.*}} -> (tensor<2x3x2xf32>, tensor<42xf32>)
// The gradient: the loss's, then the fused head's (dh, dw and a workspace
// of 6*32 + 6*8 floats), dw added to the embedding's gradient of the tied
// weight.
// GRAD:        %[[S:.*]], %{{.*}} = bigc.linear_ce_stats %[[R:.*]], %[[WTE:.*]], %[[TGT:.*]] {bigc.phase = "forward", chunk = 32 : i64, transpose_b}
// GRAD:        %[[DS:.*]] = bigc.vocab_ce_loss_grad %[[S]], %{{.*}} {bigc.phase = "backward", parts = 1 : i64}
// GRAD-NEXT:   %[[DR:.*]], %[[DW:.*]], %{{.*}} = bigc.linear_ce_stats_grad %[[DS]], %[[R]], %[[WTE]], %[[TGT]], %[[S]] {bigc.phase = "backward", chunk = 32 : i64, transpose_b} : (tensor<2x3x2xf32>, tensor<2x3x8xf32>, tensor<32x8xf32>, tensor<2x3xi32>, tensor<2x3x2xf32>) -> (tensor<2x3x8xf32>, tensor<32x8xf32>, tensor<240xf32>)
// GRAD:        bigc.add %[[DW]], %{{.*}} -> tensor<32x8xf32>
// bf16: h, w, dh and dw in 16 bits; the statistics and the workspaces f32.
// BF16:        bigc.linear_ce_stats {{.*}} : (tensor<2x3x8xbf16>, tensor<32x8xbf16>, tensor<2x3xi32>) -> (tensor<2x3x2xf32>, tensor<204xf32>)
// BF16:        bigc.linear_ce_stats_grad {{.*}} -> (tensor<2x3x8xbf16>, tensor<32x8xbf16>, tensor<240xf32>)
module {
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %r = bigc.gelu %x : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %r, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// An untied head w [C,V] and PyTorch's logits.view(-1, V): the reshape is
// looked through, h reshaped to the targets' [6] positions.
// CHECK-LABEL: func.func @forward
// CHECK:       %[[H:.*]] = bigc.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT:  %[[S:.*]], %{{.*}} = bigc.linear_ce_stats %[[H]], %{{.*}}, %{{.*}} {chunk = 20 : i64} : (tensor<6x8xf32>, tensor<8x20xf32>, tensor<6xi32>) -> (tensor<6x2xf32>, tensor<132xf32>)
// CHECK-NOT:   bigc.matmul
module {
  bigc.param @"wte.weight" : tensor<20x8xf32> {init = "normal", std = 0.02}
  bigc.param @"head.weight" : tensor<8x20xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<20x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<20x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %w = bigc.get_param @"head.weight" : tensor<8x20xf32>
    %logits = bigc.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x20xf32>) -> tensor<2x3x20xf32>
    %flat = bigc.reshape %logits : (tensor<2x3x20xf32>) -> tensor<6x20xf32>
    %t = bigc.reshape %targets : (tensor<2x3xi32>) -> tensor<6xi32>
    %loss = bigc.cross_entropy %flat, %t : (tensor<6x20xf32>, tensor<6xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Logits read by another op: there is nothing to save, and no other head.
module {
  bigc.param @"wte.weight" : tensor<20x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<20x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<20x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %x, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<20x8xf32>) -> tensor<2x3x20xf32>
    %z = bigc.scale %logits {factor = 0.5 : f64} : (tensor<2x3x20xf32>) -> tensor<2x3x20xf32>
    // expected-error @+1 {{bigc-fuse-loss: no LM head to fuse in @forward}}
    %loss = bigc.cross_entropy %z, %targets : (tensor<2x3x20xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
