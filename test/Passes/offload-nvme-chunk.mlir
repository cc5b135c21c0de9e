// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=chunk=2048 | FileCheck %s --check-prefix=CHUNK
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=chunk=2048 --bigc-schedule | FileCheck %s --check-prefix=SCHED
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=chunk=2048 --bigc-schedule --bigc-test-print-memory-plan -o /dev/null 2> %t.plan
// RUN: FileCheck %s --check-prefix=PLAN < %t.plan
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload=params=host --bigc-offload-nvme="params=true chunk=2048" | FileCheck %s --check-prefix=WEIGHTS
// RUN: not bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=chunk=1000 2>&1 | FileCheck %s --check-prefix=QUANTUM

// bigc-offload-nvme with chunk=2048 (--nvme-chunk): @w0's update (64 x 80 = 5120 elements) streams
// its state in three chunks (2048, 2048, 1024) through two sets of host staging tensors of 2048
// elements (@"X.io.c0", @"X.io.c1"; chunk k uses set k mod 2), each chunk's copies at its offset;
// @w1 (640 elements) is updated whole. Each chunk's update reads its elements of the gradient and
// writes @w0.stage (the whole compute copy, copied to the device after the last chunk) at the offset.
// CHUNK:      bigc.param @w0.io.c0 : tensor<2048xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// CHUNK-NEXT: bigc.param @w0.io.c1 : tensor<2048xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// CHUNK:      bigc.param @w0.exp_avg.io.c0 : tensor<2048xf32>
// CHUNK-NEXT: bigc.param @w0.exp_avg.io.c1 : tensor<2048xf32>
// CHUNK:      bigc.param @w1.io : tensor<80x8xf32> {bigc.space = "host"
// CHUNK-NOT:  @w0.io :
// CHUNK:      bigc.param_copy {bigc.nvme_update = [[C0:[0-9]+]] : i64, {{.*}}count = 2048 : i64, from = @w0.exp_avg, from_offset = 0 : i64, to = @w0.exp_avg.io.c0}
// CHUNK:      bigc.adamw {{.*}}bigc.nvme_update = [[C0]] : i64, {{.*}}count = 2048 : i64, {{.*}}exp_avg = @w0.exp_avg.io.c0, exp_avg_sq = @w0.exp_avg_sq.io.c0, half = @w0.stage, {{.*}}offset = 0 : i64, param = @w0.io.c0, weight = @w0,
// CHUNK:      bigc.param_copy {bigc.nvme_update = [[C0]] : i64, {{.*}}count = 2048 : i64, from = @w0.exp_avg.io.c0, to = @w0.exp_avg, to_offset = 0 : i64}
// CHUNK:      bigc.adamw {{.*}}count = 2048 : i64, {{.*}}exp_avg = @w0.exp_avg.io.c1, {{.*}}offset = 2048 : i64, param = @w0.io.c1, weight = @w0,
// CHUNK:      bigc.param_copy {{.*}}count = 1024 : i64, from = @w0, from_offset = 4096 : i64, to = @w0.io.c0}
// CHUNK:      bigc.adamw {{.*}}count = 1024 : i64, {{.*}}exp_avg = @w0.exp_avg.io.c0, {{.*}}offset = 4096 : i64, param = @w0.io.c0, weight = @w0,
// CHUNK:      bigc.param_copy {{.*}}count = 1024 : i64, from = @w0.exp_avg.io.c0, to = @w0.exp_avg, to_offset = 4096 : i64}
// CHUNK:      bigc.param_copy {bigc.phase = "optimizer", bigc.space = "device", from = @w0.stage, to = @w0.half}

// bigc-schedule: each chunk's reads go one update ahead; the third chunk's (set c0 again) after
// the first chunk's update and write back, before the second chunk's update (the two sets take
// turns: the emitter orders the read after the update that last used its set).
// SCHED:      bigc.param_copy {{.*}}bigc.stream = "nvme", count = 2048 : i64, from = @w0, from_offset = 0 : i64, to = @w0.io.c0}
// SCHED:      bigc.param_copy {{.*}}bigc.stream = "nvme", count = 2048 : i64, from = @w0, from_offset = 2048 : i64, to = @w0.io.c1}
// SCHED-NEXT: bigc.adamw {{.*}}bigc.stream = "host", count = 2048 : i64, {{.*}}offset = 0 : i64, param = @w0.io.c0,
// SCHED:      bigc.param_copy {{.*}}bigc.stream = "nvme", count = 2048 : i64, from = @w0.exp_avg.io.c0, to = @w0.exp_avg, to_offset = 0 : i64}
// SCHED:      bigc.param_copy {{.*}}bigc.stream = "nvme", count = 1024 : i64, from = @w0, from_offset = 4096 : i64, to = @w0.io.c0}
// SCHED-NEXT: bigc.wait
// SCHED-NEXT: bigc.adamw {{.*}}bigc.stream = "host", count = 2048 : i64, {{.*}}offset = 2048 : i64, param = @w0.io.c1,

// The memory plan: six staging tensors of 2048 f32 (8192 bytes) on the host for @w0, not three of
// 5120.
// PLAN-DAG:  @w0.io.c0 transfer : offset={{[0-9]+}} size=8192 {{.*}} space=host
// PLAN-DAG:  @w0.io.c1 transfer : offset={{[0-9]+}} size=8192 {{.*}} space=host
// PLAN-DAG:  @w0.exp_avg_sq.io.c1 transfer : offset={{[0-9]+}} size=8192 {{.*}} space=host

// With the weights in the nvme space too (params=true): the compute copy's staging is chunked as
// well, each chunk's written back at its offset.
// WEIGHTS:      bigc.param @w0.half.io.c0 : tensor<2048xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// WEIGHTS:      bigc.adamw {{.*}}count = 1024 : i64, {{.*}}half = @w0.half.io.c0, {{.*}}offset = 4096 : i64, param = @w0.io.c0, weight = @w0,
// WEIGHTS:      bigc.param_copy {{.*}}count = 1024 : i64, from = @w0.half.io.c0, to = @w0.half, to_offset = 4096 : i64}

// QUANTUM: bigc-offload-nvme: chunk must be a multiple of 2048 elements, got 1000

module {
  bigc.param @w0 : tensor<64x80xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @w1 : tensor<80x8xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @forward(%x: tensor<2x3x64xf32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %w0 = bigc.get_param @w0 {bigc.layer = 0 : i64} : tensor<64x80xf32>
    %h0 = bigc.matmul %x, %w0 {bigc.layer = 0 : i64} : (tensor<2x3x64xf32>, tensor<64x80xf32>) -> tensor<2x3x80xf32>
    %x1 = bigc.gelu %h0 {bigc.layer = 0 : i64} : (tensor<2x3x80xf32>) -> tensor<2x3x80xf32>
    %w1 = bigc.get_param @w1 {bigc.layer = 1 : i64} : tensor<80x8xf32>
    %logits = bigc.matmul %x1, %w1 {bigc.layer = 1 : i64} : (tensor<2x3x80xf32>, tensor<80x8xf32>) -> tensor<2x3x8xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
