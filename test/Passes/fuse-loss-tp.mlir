// RUN: bigc-opt %s -split-input-file --bigc-tensor-parallel="tp=2 ranks=2" --bigc-fuse-loss | FileCheck %s
// RUN: bigc-opt %s -split-input-file --bigc-tensor-parallel="tp=2 ranks=2" --bigc-fuse-loss --bigc-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: bigc-opt %s -split-input-file --bigc-tensor-parallel="tp=2 ranks=2" | FileCheck %s --check-prefix=TPONLY

// bigc-fuse-loss after bigc-tensor-parallel (test/Passes/fuse-loss.mlir has
// the rest): the vocabulary-parallel loss's per-rank statistics are fused
// (this rank's 16 of the 32 columns; the attribute marks them as a chunk of
// the vocabulary, so the targets are offset by the tensor rank's first id),
// their all-gather and vocab_ce_loss stay; the gradient's op keeps the mark.
// CHECK-LABEL: func.func @forward
// CHECK:       %[[S:.*]], %{{.*}} = bigc.linear_ce_stats {{.*}} {bigc.vocab_group = "tp", chunk = 16 : i64, transpose_b} : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<2x3xi32>) -> (tensor<2x3x2xf32>, tensor<108xf32>)
// CHECK-NEXT:  %[[G:.*]] = bigc.tp_all_gather %[[S]]
// CHECK-NEXT:  bigc.vocab_ce_loss %[[G]] {parts = 2 : i64}
// CHECK-NOT:   bigc.vocab_ce_stats
// GRAD:        bigc.linear_ce_stats_grad {{.*}}bigc.vocab_group = "tp"{{.*}} -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<144xf32>)
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

// An untied head [C,V] and PyTorch's logits.view(-1, V): the reshape keeps the vocabulary split
// (its tensor-parallel rule), so the loss stays vocabulary-parallel (no gather of the logits)
// and bigc-fuse-loss fuses it through the reshape (h reshaped to the 6 positions).
// TPONLY-LABEL: func.func @forward
// TPONLY:       %[[M:.*]] = bigc.matmul {{.*}} -> tensor<2x3x10xf32>
// TPONLY-NEXT:  %[[R:.*]] = bigc.reshape %[[M]] : (tensor<2x3x10xf32>) -> tensor<6x10xf32>
// TPONLY:       bigc.vocab_ce_stats %[[R]]
// TPONLY-NOT:   bigc.tp_all_gather {{.*}}tensor<2x3x20xf32>
// CHECK-LABEL:  func.func @forward
// CHECK:        %[[H:.*]] = bigc.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT:   %[[S:.*]], %{{.*}} = bigc.linear_ce_stats %[[H]], %{{.*}}, %{{.*}} {bigc.vocab_group = "tp", chunk = 10 : i64} : (tensor<6x8xf32>, tensor<8x10xf32>, tensor<6xi32>) -> (tensor<6x2xf32>, tensor<72xf32>)
// CHECK-NEXT:   bigc.tp_all_gather %[[S]]
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
