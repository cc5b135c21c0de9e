// bigc-tensor-parallel on a model that is not a GPT: an embedding, a two-layer MLP with a residual
// and a layernorm, an untied output projection and the loss. The ops' rules give Megatron's layout
// without knowing the model: first matmul column-parallel (f before it), second row-parallel (g
// after it), the embedding and the loss vocabulary-parallel; with sequence parallelism the
// residual and the layernorm are split on the sequence. bigc-shard lowers the tp ops to
// collectives over the "tp" axis.
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=4 ranks=8" | FileCheck %s
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=4 ranks=8 sequence-parallel=1" | FileCheck %s --check-prefix=SP
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=4 ranks=8" --bigc-autodiff --bigc-shard="ranks=8 zero=1" | FileCheck %s --check-prefix=LOW
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=4 ranks=8 sequence-parallel=1" --bigc-autodiff --bigc-recompute=policy=none --bigc-shard="ranks=8 zero=1" --bigc-schedule | FileCheck %s --check-prefix=SCHED
// RUN: bigc-opt %s --bigc-tensor-parallel="tp=4 ranks=4" --bigc-autodiff --bigc-recompute=policy=none --bigc-shard="ranks=4" --bigc-schedule | FileCheck %s --check-prefix=DP1
// RUN: not bigc-opt %s --bigc-tensor-parallel="tp=3 ranks=6" 2>&1 | FileCheck %s --check-prefix=BAD

module {
  bigc.param @emb : tensor<64x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @w1 : tensor<16x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @w2 : tensor<32x16xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @g : tensor<16xf32> {init = "ones"}
  bigc.param @b : tensor<16xf32> {init = "zeros"}
  bigc.param @out : tensor<16x64xf32> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %e = bigc.get_param @emb : tensor<64x16xf32>
    %x = bigc.embedding %e, %tokens : (tensor<64x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %w1 = bigc.get_param @w1 : tensor<16x32xf32>
    %h = bigc.matmul %x, %w1 : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
    %a = bigc.gelu %h : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %w2 = bigc.get_param @w2 : tensor<32x16xf32>
    %y = bigc.matmul %a, %w2 : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    %r = bigc.add %x, %y : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %g = bigc.get_param @g : tensor<16xf32>
    %b = bigc.get_param @b : tensor<16xf32>
    %n, %m, %s = bigc.layernorm %r, %g, %b {eps = 1.0e-05 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
    %o = bigc.get_param @out : tensor<16x64xf32>
    %logits = bigc.matmul %n, %o : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 4 : i64}}
// CHECK: bigc.param @emb : tensor<16x16xf32> {bigc.tp_full_shape = array<i64: 64, 16>, bigc.tp_split = array<i64: 0, 1>
// CHECK: bigc.param @w1 : tensor<16x8xf32> {bigc.tp_full_shape = array<i64: 16, 32>, bigc.tp_split = array<i64: 1, 1>
// CHECK: bigc.param @w2 : tensor<8x16xf32> {bigc.tp_full_shape = array<i64: 32, 16>, bigc.tp_split = array<i64: 0, 1>
// CHECK: bigc.param @g : tensor<16xf32> {init = "ones"}
// CHECK: bigc.param @out : tensor<16x16xf32> {bigc.tp_full_shape = array<i64: 16, 64>, bigc.tp_split = array<i64: 1, 1>
// CHECK: %[[X:.*]] = bigc.embedding %{{.*}}, %{{.*}} {bigc.vocab_group = "tp"} : (tensor<16x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
// CHECK: %[[XR:.*]] = bigc.tp_all_reduce %[[X]] {group = "tp"}
// CHECK: %[[F:.*]] = bigc.tp_copy %[[XR]] {group = "tp"}
// CHECK: bigc.matmul %[[F]], %{{.*}} : (tensor<2x8x16xf32>, tensor<16x8xf32>) -> tensor<2x8x8xf32>
// CHECK: bigc.gelu %{{.*}} : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK: %[[Y:.*]] = bigc.matmul %{{.*}}, %{{.*}} : (tensor<2x8x8xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
// Partial sums add up before one all-reduce (the residual of the partial embedding and the
// row-parallel output), which the layernorm needs whole.
// CHECK: %[[R:.*]] = bigc.add %[[X]], %[[Y]]
// CHECK: %[[RR:.*]] = bigc.tp_all_reduce %[[R]] {group = "tp"}
// CHECK: bigc.layernorm %[[RR]]
// CHECK: bigc.tp_copy
// CHECK: %[[L:.*]] = bigc.matmul %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
// CHECK: %[[ST:.*]] = bigc.vocab_ce_stats %[[L]], %{{.*}} {group = "tp"} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<2x8x2xf32>
// CHECK: %[[G:.*]] = bigc.tp_all_gather %[[ST]] {dim = 0 : i64, grad = "slice", group = "tp"} : (tensor<2x8x2xf32>) -> tensor<8x8x2xf32>
// CHECK: bigc.vocab_ce_loss %[[G]] {parts = 4 : i64}

// SP: %[[R:.*]] = bigc.add %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// SP: %[[RS:.*]] = bigc.tp_reduce_scatter %[[R]] {dim = 1 : i64, group = "tp"} : (tensor<2x8x16xf32>) -> tensor<2x2x16xf32>
// SP: bigc.tp_copy %{{.*}} {group = "tp"} : (tensor<16xf32>) -> tensor<16xf32>
// SP: %[[N:.*]], %{{.*}}, %{{.*}} = bigc.layernorm %[[RS]], %{{.*}} : (tensor<2x2x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x2x16xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
// SP: bigc.tp_all_gather %[[N]] {dim = 1 : i64, grad = "reduce_scatter", group = "tp"} : (tensor<2x2x16xf32>) -> tensor<2x8x16xf32>

// The forward's g and the backward's f are all-reduces over "tp"; no tp op is left.
// LOW-NOT: bigc.tp_copy
// LOW-NOT: bigc.tp_all_reduce
// LOW: bigc.all_reduce %{{.*}}group = "tp", reduce = "sum"
// LOW: bigc.all_reduce %{{.*}}group = "tp", reduce = "sum"
// LOW: bigc.reduce_scatter %{{.*}}group = "dp", reduce = "sum"

// Sequence parallelism, scheduled: the tensor-axis collectives run on their own stream (comm_tp),
// never behind a data-parallel one. The backward does not keep the whole-sequence input of the
// output projection: bigc-recompute (policy none) re-gathers it from this rank's part %y, issued
// one matmul ahead of the weight gradient that reads it (so it overlaps the input gradient's
// matmul), and that matmul's reduce-scatter is issued before the weight gradient it overlaps.
// SCHED: module attributes {{{.*}}bigc.recompute = {{{.*}}policy = "none", regathered = 1
// SCHED: bigc.param_all_gather {{{.*}}bigc.stream = "comm", {{.*}}group = "dp"
// SCHED: %[[Y:.*]], %{{.*}}, %{{.*}} = bigc.layernorm {{.*}}(tensor<2x2x16xf32>
// SCHED: %[[P:.*]] = bigc.reshape %[[Y]] {bigc.phase = "forward"}
// SCHED: bigc.all_gather %[[P]] {{{.*}}bigc.phase = "forward", bigc.stream = "comm_tp", group = "tp"}
// SCHED: bigc.vocab_ce_stats_grad
// SCHED-NEXT: %[[P2:.*]] = bigc.reshape %[[Y]] {bigc.phase = "backward"}
// SCHED-NEXT: %[[RG:.*]] = bigc.all_gather %[[P2]] {bigc.event = [[E:[0-9]+]] : i64, bigc.phase = "backward", bigc.stream = "comm_tp", group = "tp"}
// SCHED-NEXT: bigc.matmul %{{.*}} {bigc.phase = "backward", transpose_b}
// SCHED: bigc.reduce_scatter %{{.*}} {bigc.event = [[E2:[0-9]+]] : i64, bigc.phase = "backward", bigc.stream = "comm_tp", group = "tp", reduce = "sum"}
// SCHED-NEXT: bigc.wait {bigc.phase = "backward", events = array<i64: [[E]]>}
// SCHED-NEXT: bigc.transpose %[[RG]]
// SCHED: bigc.matmul %{{.*}} {bigc.phase = "backward", transpose_a}
// SCHED-NEXT: bigc.wait {bigc.phase = "backward", events = array<i64: [[E2]]>}
// SCHED: bigc.reduce_scatter {{.*}}bigc.stream = "comm", group = "dp", reduce = "sum"

// One data-parallel rank (each update right after its gradient): the all-reduce of a
// column-parallel matmul's input gradient is issued right after the matmul that makes it, so that
// it overlaps the weight gradient's matmul and update; the wait comes only before its reader.
// DP1: %[[DX:.*]] = bigc.matmul %{{.*}} {bigc.phase = "backward", transpose_b} : (tensor<2x8x8xf32>, tensor<16x8xf32>) -> tensor<2x8x16xf32>
// DP1-NEXT: %[[AR:.*]] = bigc.all_reduce %[[DX]] {bigc.event = [[E:[0-9]+]] : i64, bigc.phase = "backward", bigc.stream = "comm_tp", group = "tp", reduce = "sum"}
// DP1: bigc.matmul %{{.*}} {bigc.phase = "backward", transpose_a} : (tensor<16x16xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// DP1-NEXT: bigc.adamw
// DP1-NEXT: bigc.wait {bigc.phase = "backward", events = array<i64: [[E]]>}
// DP1-NEXT: bigc.add %{{.*}}, %[[AR]]

// BAD: error: --tp 3 does not divide the vocabulary (64 rows of @"emb")
