// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=0 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=DP
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=1" | FileCheck %s --check-prefix=Z1
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=2 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=Z2
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=3 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=Z3
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=3 bucket-mb=0" --bigc-schedule=prefetch=0 | FileCheck %s --check-prefix=NOPF
// RUN: bigc-opt %s --bigc-autodiff=grad-clip=1.0 --bigc-mixed-precision=precision=fp16 --bigc-shard="ranks=4 zero=2" | FileCheck %s --check-prefix=FP16
// RUN: bigc-opt %s --bigc-autodiff --bigc-mixed-precision=precision=fp16 --bigc-shard="ranks=4 zero=2 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=FP16Z2
// RUN: bigc-opt %s --bigc-autodiff --bigc-grad-accum=micro-batches=2 --bigc-mixed-precision=precision=bf16 --bigc-shard="ranks=4 zero=2 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=K2
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=1 zero=3" | FileCheck %s --check-prefix=ONE
// RUN: bigc-opt %s --bigc-autodiff --bigc-shard="ranks=4 zero=3" --bigc-schedule --bigc-memory-plan -o /dev/null

// The two-block model of offload.mlir: a tied embedding @wte (no layer),
// block 0 (@w0) and block 1 (@w1), the LM head. bigc-shard makes the step
// one of 4 data-parallel ranks; each check names where a collective lands.

// zero 0: each gradient is summed over the ranks (its seed divided by them) on the comm stream right
// after the backward makes it; its update waits for it a layer later (the
// all-reduce of block 1 overlaps the backward of block 0).
// DP:       module attributes {bigc.mesh = {dp = 4 : i64, pp = 1 : i64, tp = 1 : i64}, bigc.zero = 0 : i64}
// DP:       bigc.param @w0 : tensor<4x4xf32>
// DP:       %[[DW1:.*]] = bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward", transpose_a}
// DP-NEXT:  %[[R1:.*]] = bigc.all_reduce %[[DW1]] {bigc.event = 0 : i64, {{.*}}bigc.stream = "comm", group = "dp", reduce = "sum"} : (tensor<4x4xf32>) -> tensor<4x4xf32>
// DP-NEXT:  bigc.gelu_grad {{.*}}bigc.layer = 0 : i64, bigc.phase = "backward"}
// DP:       bigc.wait {bigc.phase = "optimizer", events = array<i64: 0>}
// DP-NEXT:  bigc.adamw %[[R1]] {{.*}}param = @w1

// zero 1: masters and moments are shards of ceil(16 / 4) elements, the
// update writes the rank's shard of the compute copy and every rank
// gathers the whole copy; the gradients are reduce-scattered at the end of
// the backward (one bucket).
// Z1:       bigc.param @w0 : tensor<4xf32> {bigc.full_shape = array<i64: 4, 4>, init = "normal", role = "master"
// Z1-NEXT:  bigc.param @w0.half : tensor<4x4xf32> {init = "copy", source = "w0"}
// Z1-NEXT:  bigc.param @w0.half.shard : tensor<4xf32> {bigc.full_shape = array<i64: 4, 4>, init = "copy", source = "w0"}
// Z1-NEXT:  bigc.param @w0.exp_avg : tensor<4xf32> {bigc.full_shape = array<i64: 4, 4>, init = "zeros", role = "optimizer"}
// Z1:       bigc.embedding_grad
// Z1:       %[[RS:.*]]:3 = bigc.reduce_scatter {{.*}}group = "dp", reduce = "sum"} : (tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> (tensor<8xf32>, tensor<4xf32>, tensor<4xf32>)
// Z1:       bigc.adamw %[[RS]]#1 {{.*}}half = @w0.half.shard{{.*}}param = @w0,
// Z1-NEXT:  bigc.param_all_gather {bigc.phase = "optimizer", from = @w0.half.shard, group = "dp", to = @w0.half}

// zero 2: each gradient is reduce-scattered as soon as the backward makes
// it; the update of the shard waits a layer. The gather of the updated
// weights runs in the next step, a layer segment ahead of their first use
// (it reads the shard the previous step wrote), and this step's update
// follows it.
// Z2-LABEL: func.func @train_step
// Z2:       bigc.param_all_gather {bigc.event = 0 : i64, bigc.phase = "forward", bigc.stream = "comm", from = @wte.half.shard, group = "dp", to = @wte.half}
// Z2-NEXT:  bigc.param_all_gather {bigc.event = 1 : i64, bigc.layer = 0 : i64, bigc.phase = "forward", bigc.stream = "comm", from = @w0.half.shard, group = "dp", to = @w0.half}
// Z2-NEXT:  bigc.wait {bigc.phase = "forward", events = array<i64: 0>}
// Z2-NEXT:  bigc.embedding
// Z2:       bigc.param_all_gather {bigc.event = 2 : i64, bigc.layer = 1 : i64, {{.*}}from = @w1.half.shard, group = "dp", to = @w1.half}
// Z2-NEXT:  bigc.wait {bigc.phase = "forward", events = array<i64: 1>}
// Z2-NEXT:  bigc.matmul {{.*}}bigc.layer = 0 : i64, bigc.phase = "forward"}
// Z2:       %[[DW1:.*]] = bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward", transpose_a}
// Z2-NEXT:  %[[S1:.*]] = bigc.reduce_scatter %[[DW1]] {bigc.event = 3 : i64, {{.*}}bigc.stream = "comm"{{.*}} : (tensor<4x4xf32>) -> tensor<4xf32>
// Z2-NEXT:  bigc.gelu_grad {{.*}}bigc.layer = 0 : i64, bigc.phase = "backward"}
// Z2:       bigc.wait {bigc.phase = "optimizer", events = array<i64: 3>}
// Z2-NEXT:  bigc.adamw %[[S1]] {{.*}}half = @w1.half.shard{{.*}}param = @w1,
// Z2-NOT:   param_all_gather

// zero 3: the weights themselves are shards; every layer segment that
// reads them starts with an all-gather, issued one segment ahead
// (prefetch), and waited for just before the first use.
// Z3:       bigc.param @w0.half : tensor<4xf32> {bigc.full_shape = array<i64: 4, 4>, init = "copy", source = "w0"}
// Z3-LABEL: func.func @train_step
// Z3:       %[[E:.*]] = bigc.all_gather %{{.*}} {bigc.event = 0 : i64, bigc.phase = "forward", bigc.stream = "comm", group = "dp"} : (tensor<8xf32>) -> tensor<8x4xf32>
// Z3:       %[[G0:.*]] = bigc.all_gather %{{.*}} {bigc.event = 1 : i64, bigc.layer = 0 : i64, bigc.phase = "forward", bigc.stream = "comm", group = "dp"} : (tensor<4xf32>) -> tensor<4x4xf32>
// Z3-NEXT:  bigc.wait {bigc.phase = "forward", events = array<i64: 0>}
// Z3-NEXT:  bigc.embedding %[[E]]
// Z3:       bigc.all_gather {{.*}}bigc.layer = 1 : i64, bigc.phase = "forward"
// Z3-NEXT:  bigc.wait {bigc.phase = "forward", events = array<i64: 1>}
// Z3-NEXT:  bigc.matmul %{{.*}}, %[[G0]] {bigc.layer = 0 : i64, bigc.phase = "forward"}
// The backward gathers block 1 again (the forward's copy died with its segment).
// Z3:       bigc.all_gather {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward"
// Z3:       bigc.reduce_scatter {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward"
// Z3:       bigc.adamw {{.*}}half = @w1.half,{{.*}}param = @w1,
// Z3-NOT:   param_all_gather

// Without prefetch each gather sits right before its segment's first use.
// NOPF:     bigc.all_gather {{.*}}bigc.layer = 0 : i64, bigc.phase = "forward"
// NOPF-NEXT: bigc.wait
// NOPF-NEXT: bigc.matmul {{.*}}bigc.layer = 0 : i64, bigc.phase = "forward"

// fp16 with clipping: the overflow flag and the norm are computed over the
// rank's shards, then reduced over the ranks (max, and the norm of norms).
// FP16:     %[[F:.*]] = bigc.check_finite
// FP16-NEXT: %[[FR:.*]] = bigc.all_reduce %[[F]] {bigc.phase = "optimizer", group = "dp", reduce = "max"} : (tensor<f32>) -> tensor<f32>
// FP16:     %[[N:.*]] = bigc.global_norm
// FP16-NEXT: %[[NR:.*]] = bigc.all_reduce %[[N]] {bigc.phase = "optimizer", group = "dp", reduce = "norm"} : (tensor<f32>) -> tensor<f32>
// FP16:     bigc.adamw {{.*}}, %[[NR]] unscale({{.*}}) skip_if(%[[FR]])
// FP16:     bigc.loss_scale_update %[[FR]]

// fp16 zero 2: the overflow check reads every shard at the end of the
// backward, but each reduce-scatter is joined at the next layer boundary,
// where the whole gradient it read is free (not kept until the check).
// FP16Z2:      %[[S1:.*]] = bigc.reduce_scatter %{{.*}} {bigc.event = 3 : i64, bigc.layer = 1 : i64, bigc.phase = "backward"
// FP16Z2:      bigc.reduce_scatter %{{.*}} {bigc.event = 4 : i64, bigc.layer = 0 : i64, bigc.phase = "backward"
// FP16Z2-NEXT: bigc.wait {bigc.phase = "backward", events = array<i64: 3>}
// FP16Z2-NEXT: bigc.embedding_grad
// FP16Z2:      bigc.wait {bigc.phase = "optimizer", events = array<i64: 4, 5>}
// FP16Z2-NEXT: bigc.check_finite %{{.*}}, %{{.*}}, %[[S1]]

// Micro-batches with zero 2: each micro-batch's shard is cast and added into
// its fp32 accumulator a layer after its reduce-scatter (as an update would
// read it), not at the start of the next micro-batch.
// K2:      %[[R0:.*]] = bigc.reduce_scatter %{{.*}} {bigc.event = 3 : i64, bigc.layer = 1 : i64, bigc.micro_batch = 0 : i64
// K2-NEXT: bigc.gelu_grad {{.*}}bigc.layer = 0 : i64, bigc.micro_batch = 0 : i64
// K2:      bigc.wait {bigc.phase = "backward", events = array<i64: 3>}
// K2-NEXT: %[[A0:.*]] = bigc.cast %[[R0]] {bigc.grad_accum, bigc.layer = 1 : i64, bigc.micro_batch = 0 : i64
// K2:      %[[R1:.*]] = bigc.reduce_scatter %{{.*}} {bigc.event = 6 : i64, bigc.layer = 1 : i64, bigc.micro_batch = 1 : i64
// K2:      bigc.wait {bigc.phase = "backward", events = array<i64: 6>}
// K2-NEXT: %[[C1:.*]] = bigc.cast %[[R1]] {bigc.grad_accum, bigc.layer = 1 : i64, bigc.micro_batch = 1 : i64
// K2-NEXT: %[[A1:.*]] = bigc.add %[[A0]], %[[C1]] {bigc.grad_accum, bigc.layer = 1 : i64, bigc.micro_batch = 1 : i64
// K2:      bigc.adamw %[[A1]] {{.*}}param = @w1,

// One rank: the mesh is recorded, nothing else changes (zero 3 is a no-op).
// ONE:      module attributes {bigc.mesh = {dp = 1 : i64, pp = 1 : i64, tp = 1 : i64}, bigc.zero = 0 : i64}
// ONE-NOT:  all_
// ONE-NOT:  reduce_scatter
// ONE-NOT:  bigc.full_shape

module {
  bigc.param @wte : tensor<8x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @w0 : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @w1 : tensor<4x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @wte : tensor<8x4xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
    %w0 = bigc.get_param @w0 {bigc.layer = 0 : i64} : tensor<4x4xf32>
    %h0 = bigc.matmul %x, %w0 {bigc.layer = 0 : i64} : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
    %x1 = bigc.gelu %h0 {bigc.layer = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %w1 = bigc.get_param @w1 {bigc.layer = 1 : i64} : tensor<4x4xf32>
    %h1 = bigc.matmul %x1, %w1 {bigc.layer = 1 : i64} : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
    %x2 = bigc.gelu %h1 {bigc.layer = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %logits = bigc.matmul %x2, %wte {transpose_b} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
