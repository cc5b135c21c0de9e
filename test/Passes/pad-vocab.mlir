// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-pad-vocab=multiple=8 | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-pad-vocab="multiple=8 tp=2" | FileCheck %s --check-prefix=TP
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-pad-vocab=multiple=8 --bigc-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-pad-vocab="multiple=8 tp=2" --bigc-tensor-parallel="tp=2 ranks=2" --bigc-fuse-loss --bigc-autodiff | FileCheck %s --check-prefix=FUSED

// A tied LM head, V = 30: padded to 32 (multiple 8), to 32 with tp 2 (16),
// the parameter [32,8] with bigc.vocab_rows = 30, the logits [2,3,32], the
// cross-entropy's classes 30; the embedding reads the padded table.
// CHECK:       bigc.param @wte.weight : tensor<32x8xf32> {bigc.vocab_rows = 30 : i64, init = "normal", std = 2.000000e-02 : f64}
// CHECK-LABEL: func.func @forward
// CHECK:       %[[WTE:.*]] = bigc.get_param @wte.weight : tensor<32x8xf32>
// CHECK:       bigc.embedding %[[WTE]], %{{.*}} {bigc.classes = 30 : i64} : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
// CHECK:       %[[L:.*]] = bigc.matmul %{{.*}}, %[[WTE]] {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
// CHECK:       bigc.cross_entropy %[[L]], %{{.*}} {bigc.classes = 30 : i64} : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
// TP:          bigc.param @wte.weight : tensor<32x8xf32> {bigc.vocab_rows = 30 : i64
// TP:          bigc.cross_entropy {{.*}} {bigc.classes = 30 : i64} : (tensor<2x3x32xf32>
// The gradient of the loss keeps the classes; the AdamW moments the padding.
// GRAD:        bigc.param @wte.weight : tensor<32x8xf32> {bigc.vocab_rows = 30 : i64
// GRAD-NEXT:   bigc.param @wte.weight.exp_avg : tensor<32x8xf32> {bigc.vocab_rows = 30 : i64
// GRAD-NEXT:   bigc.param @wte.weight.exp_avg_sq : tensor<32x8xf32> {bigc.vocab_rows = 30 : i64
// GRAD:        bigc.cross_entropy_grad {{.*}} {bigc.classes = 30 : i64{{.*}}} : (tensor<2x3x32xf32>
// Tensor-parallel and fused: each rank's 16 rows, the fused head and its
// gradient with the classes.
// FUSED:       bigc.param @wte.weight : tensor<16x8xf32> {bigc.tp_full_shape = array<i64: 32, 8>, bigc.tp_split = array<i64: 0, 1>, bigc.vocab_rows = 30 : i64
// FUSED:       bigc.linear_ce_stats {{.*}}bigc.classes = 30 : i64{{.*}} : (tensor<2x3x8xf32>, tensor<16x8xf32>
// FUSED:       bigc.linear_ce_stats_grad {{.*}}bigc.classes = 30 : i64
module {
  bigc.param @"wte.weight" : tensor<30x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<30x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %r = bigc.gelu %x : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %r, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<30x8xf32>) -> tensor<2x3x30xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x30xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// An untied head and its embedding (LLaMA), logits.view(-1, V) looked
// through: both [20,8] tables become [24,8]; V = 24 already a multiple of 8
// would be left alone.
// CHECK-LABEL: bigc.param @embed.weight : tensor<24x8xf32> {bigc.vocab_rows = 20 : i64
// CHECK:       bigc.param @head.weight : tensor<24x8xf32> {bigc.vocab_rows = 20 : i64
// CHECK:       %[[L:.*]] = bigc.matmul {{.*}} -> tensor<2x3x24xf32>
// CHECK:       %[[F:.*]] = bigc.reshape %[[L]] : (tensor<2x3x24xf32>) -> tensor<6x24xf32>
// CHECK:       bigc.cross_entropy %[[F]], %{{.*}} {bigc.classes = 20 : i64} : (tensor<6x24xf32>
// With tp 2 the multiple is 16: 32 rows (each tensor rank 16; the second holds 4 of the 20).
// TP-LABEL:    bigc.param @embed.weight : tensor<32x8xf32> {bigc.vocab_rows = 20 : i64
// TP:          bigc.param @head.weight : tensor<32x8xf32> {bigc.vocab_rows = 20 : i64
// TP:          bigc.cross_entropy {{.*}} {bigc.classes = 20 : i64} : (tensor<6x32xf32>
module {
  bigc.param @"embed.weight" : tensor<20x8xf32> {init = "normal", std = 0.02}
  bigc.param @"head.weight" : tensor<20x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %e = bigc.get_param @"embed.weight" : tensor<20x8xf32>
    %x = bigc.embedding %e, %tokens : (tensor<20x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %w = bigc.get_param @"head.weight" : tensor<20x8xf32>
    %logits = bigc.matmul %x, %w {transpose_b} : (tensor<2x3x8xf32>, tensor<20x8xf32>) -> tensor<2x3x20xf32>
    %flat = bigc.reshape %logits : (tensor<2x3x20xf32>) -> tensor<6x20xf32>
    %t = bigc.reshape %targets : (tensor<2x3xi32>) -> tensor<6xi32>
    %loss = bigc.cross_entropy %flat, %t : (tensor<6x20xf32>, tensor<6xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A vocabulary that is a multiple already: nothing changes.
// CHECK-LABEL: bigc.param @wte.weight : tensor<32x8xf32> {init
// CHECK-NOT:   bigc.classes
module {
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %x, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Logits read besides the loss: padding would change what the other reader sees.
module {
  bigc.param @"wte.weight" : tensor<30x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<30x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %x, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<30x8xf32>) -> tensor<2x3x30xf32>
    %z = bigc.scale %logits {factor = 0.5 : f64} : (tensor<2x3x30xf32>) -> tensor<2x3x30xf32>
    // expected-error @+1 {{--pad-vocab: its logits are read by another op too}}
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x30xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The head's weight read by another op than the head and the embedding.
module {
  bigc.param @"wte.weight" : tensor<30x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<30x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    // expected-error @+1 {{--pad-vocab: this bigc.gelu reads @"wte.weight", whose vocabulary rows the pass pads}}
    %g = bigc.gelu %wte : (tensor<30x8xf32>) -> tensor<30x8xf32>
    %logits = bigc.matmul %x, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<30x8xf32>) -> tensor<2x3x30xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x30xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A head without transpose_b (w [C,V]): its vocabulary is w's columns, which
// the pass does not pad.
module {
  bigc.param @"head.weight" : tensor<8x30xf32> {init = "normal", std = 0.02}
  func.func @forward(%x: tensor<2x3x8xf32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %w = bigc.get_param @"head.weight" : tensor<8x30xf32>
    %logits = bigc.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x30xf32>) -> tensor<2x3x30xf32>
    // expected-error @+1 {{--pad-vocab: its logits' matmul is not h @ w^T with a 2-D w}}
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x30xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
