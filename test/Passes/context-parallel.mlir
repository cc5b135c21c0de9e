// bigc-context-parallel on a one-block LLaMA-shaped forward (rotary embeddings, grouped-query
// attention, a reshape of the logits to [B*T, V] before the loss): every value that holds tokens
// has its token dimension divided by cp (16 -> 8 with cp 2, 16 -> 4 with cp 4), weights keep
// their shapes, rope and gqa_attention are marked cp; bigc-cp-attention then lowers the attention
// after bigc-shard: ring blocks with shifts (kind ring), or an all-to-all around one block over the
// whole sequence of half the heads (kind a2a).
// RUN: bigc-opt %s --bigc-context-parallel="cp=2" | FileCheck %s
// RUN: bigc-opt %s --bigc-context-parallel="cp=4" | FileCheck %s --check-prefix=CP4
// RUN: bigc-opt %s --bigc-context-parallel="cp=2" --bigc-autodiff --bigc-recompute=policy=none --bigc-shard="ranks=2" --bigc-cp-attention | FileCheck %s --check-prefix=RING
// RUN: bigc-opt %s --bigc-context-parallel="cp=2 kind=a2a" --bigc-autodiff --bigc-recompute=policy=none --bigc-shard="ranks=4 zero=3" --bigc-cp-attention | FileCheck %s --check-prefix=A2A
// RUN: not bigc-opt %s --bigc-context-parallel="cp=4 kind=a2a" 2>&1 | FileCheck %s --check-prefix=A2A4
// RUN: not bigc-opt %s --bigc-context-parallel="cp=3" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: not bigc-opt %s --bigc-context-parallel="cp=2" --bigc-autodiff --bigc-recompute=policy=none --bigc-shard="ranks=3" --bigc-cp-attention 2>&1 | FileCheck %s --check-prefix=RANKS

module {
  bigc.param @emb : tensor<64x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @wq : tensor<32x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @wk : tensor<32x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @wv : tensor<32x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @g : tensor<32xf32> {init = "ones"}
  bigc.param @out : tensor<32x64xf32> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<2x16xi32>, %targets: tensor<2x16xi32>) -> tensor<f32> {
    %e = bigc.get_param @emb : tensor<64x32xf32>
    %x = bigc.embedding %e, %tokens : (tensor<64x32xf32>, tensor<2x16xi32>) -> tensor<2x16x32xf32>
    %g = bigc.get_param @g : tensor<32xf32>
    %n, %rstd = bigc.rmsnorm %x, %g {eps = 1.0e-05 : f64} : (tensor<2x16x32xf32>, tensor<32xf32>) -> (tensor<2x16x32xf32>, tensor<2x16xf32>)
    %wq = bigc.get_param @wq : tensor<32x32xf32>
    %wk = bigc.get_param @wk : tensor<32x16xf32>
    %wv = bigc.get_param @wv : tensor<32x16xf32>
    %q = bigc.matmul %n, %wq : (tensor<2x16x32xf32>, tensor<32x32xf32>) -> tensor<2x16x32xf32>
    %k = bigc.matmul %n, %wk : (tensor<2x16x32xf32>, tensor<32x16xf32>) -> tensor<2x16x16xf32>
    %v = bigc.matmul %n, %wv : (tensor<2x16x32xf32>, tensor<32x16xf32>) -> tensor<2x16x16xf32>
    %qr = bigc.rope %q {head_dim = 8 : i64, inv_freq = array<f64: 1.0, 0.1, 0.01, 0.001>} : (tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
    %kr = bigc.rope %k {head_dim = 8 : i64, inv_freq = array<f64: 1.0, 0.1, 0.01, 0.001>} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %a, %lse = bigc.gqa_attention %qr, %kr, %v {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x16x32xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>) -> (tensor<2x16x32xf32>, tensor<2x4x16xf32>)
    %r = bigc.add %x, %a : (tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
    %o = bigc.get_param @out : tensor<32x64xf32>
    %logits = bigc.matmul %r, %o : (tensor<2x16x32xf32>, tensor<32x64xf32>) -> tensor<2x16x64xf32>
    %flat = bigc.reshape %logits : (tensor<2x16x64xf32>) -> tensor<32x64xf32>
    %t = bigc.reshape %targets : (tensor<2x16xi32>) -> tensor<32xi32>
    %loss = bigc.cross_entropy %flat, %t : (tensor<32x64xf32>, tensor<32xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: module attributes {bigc.context_parallel = {kind = "ring", seq = 16 : i64, size = 2 : i64}}
// CHECK: func.func @forward(%{{.*}}: tensor<2x8xi32>, %{{.*}}: tensor<2x8xi32>) -> tensor<f32>
// CHECK: bigc.embedding {{.*}} -> tensor<2x8x32xf32>
// CHECK: bigc.rmsnorm {{.*}} -> (tensor<2x8x32xf32>, tensor<2x8xf32>)
// CHECK: bigc.get_param @wq : tensor<32x32xf32>
// CHECK: bigc.rope {{.*}}cp = 2 : i64{{.*}} -> tensor<2x8x32xf32>
// CHECK: bigc.gqa_attention {{.*}}cp = 2 : i64{{.*}} -> (tensor<2x8x32xf32>, tensor<2x4x8xf32>)
// CHECK: bigc.reshape {{.*}} : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
// CHECK: bigc.reshape {{.*}} : (tensor<2x8xi32>) -> tensor<16xi32>
// CHECK: bigc.cross_entropy {{.*}} -> tensor<f32>

// CP4: func.func @forward(%{{.*}}: tensor<2x4xi32>
// CP4: bigc.gqa_attention {{.*}}cp = 4 : i64{{.*}} -> (tensor<2x4x32xf32>, tensor<2x4x4xf32>)

// The forward: the next block passed on first (its transfer overlaps this block), this rank's block,
// then the block of the rank before it, merged. The backward passes k, v on the same way; each
// block's key/value gradients are its own, added to those that arrived from the rank before while
// it ran, and the sum goes to the next rank (after the last block: home).
// RING: bigc.mesh = {cp = 2 : i64, dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}
// RING: %[[KV:.*]]:2 = bigc.ring_shift %[[K:.*]], %[[V:[^ ]*]] {{{.*}}group = "cp"}
// RING: %[[O0:.*]], %[[L0:.*]] = bigc.ring_attention %[[Q:.*]], %[[K]], %[[V]] {{{.*}}step = 0 : i64}
// RING: %[[O1:.*]], %[[L1:.*]] = bigc.ring_attention %[[Q]], %[[KV]]#0, %[[KV]]#1, %[[O0]], %[[L0]] {{{.*}}step = 1 : i64}
// RING: %[[NEXT:.*]]:2 = bigc.ring_shift %[[K]], %[[V]] {{{.*}}group = "cp"}
// RING: %[[DQ0:[^,]*]], %[[DK0:[^,]*]], %[[DV0:[^ ]*]] = bigc.ring_attention_grad %[[DO:[^,]*]], %[[Q]], %[[K]], %[[V]], %[[O1]], %[[L1]] {{{.*}}step = 0
// RING: %[[M:.*]]:2 = bigc.ring_shift %[[DK0]], %[[DV0]] {{{.*}}group = "cp"}
// RING: %{{.*}}, %[[DK1:[^,]*]], %[[DV1:[^ ]*]] = bigc.ring_attention_grad %[[DO]], %[[Q]], %[[NEXT]]#0, %[[NEXT]]#1, %[[O1]], %[[L1]], %[[DQ0]] {{{.*}}step = 1
// RING: %[[SK:.*]] = bigc.add %[[DK1]], %[[M]]#0
// RING: %[[SV:.*]] = bigc.add %[[DV1]], %[[M]]#1
// RING: bigc.ring_shift %[[SK]], %[[SV]] {{{.*}}group = "cp"}
// RING-NOT: bigc.gqa_attention

// A2A: bigc.mesh = {cp = 2 : i64, dp = 4 : i64, pp = 1 : i64, tp = 1 : i64}
// A2A: bigc.cp_all_to_all {{.*}}to_heads{{.*}} : (tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>)
// A2A: bigc.ring_attention {{.*}}a2a, {{.*}}cp = 2 : i64, heads = 2 : i64, kv_heads = 1 : i64, step = 0 : i64} {{.*}} -> (tensor<2x16x16xf32>, tensor<2x2x16xf32>)
// A2A: bigc.cp_all_to_all {{.*}}group = "cp"} : (tensor<2x16x16xf32>) -> tensor<2x8x32xf32>
// A2A: bigc.cp_all_to_all {{.*}}to_heads{{.*}} : (tensor<2x8x32xf32>) -> tensor<2x16x16xf32>
// A2A: bigc.ring_attention_grad {{.*}}a2a
// A2A: bigc.cp_all_to_all {{.*}}group = "cp"} : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
// A2A-NOT: bigc.gqa_attention

// A2A4: error: bigc-context-parallel: --cp 4: all-to-all attention splits the heads over the ranks: 2 key/value heads and 4 query heads, which 4 does not divide (--cp-kind ring passes the key/value blocks instead)
// ODD: error: bigc-context-parallel: --cp 3: the sequence of 16 tokens must split into 2 x 3 = 6 equal chunks
// RANKS: error: bigc-cp-attention: the 3 data-parallel ranks (ranks / (tp x pp)) must be a multiple of --cp 2
