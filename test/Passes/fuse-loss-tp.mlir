// RUN: bigc-opt %s --bigc-tensor-parallel="tp=2 ranks=2" --bigc-fuse-loss | FileCheck %s
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=2 ranks=2" --bigc-fuse-loss --bigc-autodiff | FileCheck %s --check-prefix=GRAD

// bigc-fuse-loss after bigc-tensor-parallel (test/Passes/fuse-loss.mlir has
// the rest): the vocabulary-parallel loss's per-rank statistics are fused
// (this rank's 16 of the 32 columns; the attribute marks them as a chunk of
// the vocabulary, so the targets are offset by the tensor rank's first id),
// their all-gather and vocab_ce_loss stay; the gradient's op keeps the mark.
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

