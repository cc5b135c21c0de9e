// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme | FileCheck %s --check-prefix=NVME
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=masters=false | FileCheck %s --check-prefix=STATES
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme --bigc-schedule | FileCheck %s --check-prefix=SCHED
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme --bigc-schedule --bigc-test-print-memory-plan -o /dev/null 2> %t.plan
// RUN: FileCheck %s --check-prefix=PLAN < %t.plan
// RUN: awk '/space=(nvme|host)$/ { split($4, o, "="); if (o[2] % 4096) { print "unaligned: " $0; bad = 1 } } END { exit bad }' %t.plan
// RUN: not bigc-opt %s --bigc-autodiff --bigc-offload-nvme 2>&1 | FileCheck %s --check-prefix=DEVICE

// bigc-offload-nvme on the model of offload.mlir (a tied embedding @wte, blocks @w0 and @w1):
// after bigc-offload, each update's master and moments move to the nvme space and the update
// reads and writes host staging copies @"X.io" (role transfer).
// NVME:       module attributes {bigc.offload = "nvme", bigc.offload_params = "device"}
// NVME:       bigc.param @w0 : tensor<4x4xf32> {bigc.space = "nvme", init = "normal", role = "master"
// NVME-NEXT:  bigc.param @w0.io : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// NVME-NEXT:  bigc.param @w0.half : tensor<4x4xf32> {init = "copy", source = "w0"}
// NVME-NEXT:  bigc.param @w0.stage : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// NVME-NEXT:  bigc.param @w0.exp_avg : tensor<4x4xf32> {bigc.space = "nvme", init = "zeros", role = "optimizer"}
// NVME-NEXT:  bigc.param @w0.exp_avg.io : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// NVME-NEXT:  bigc.param @w0.exp_avg_sq : tensor<4x4xf32> {bigc.space = "nvme", init = "zeros", role = "optimizer"}
// NVME-NEXT:  bigc.param @w0.exp_avg_sq.io : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// The update of @wte (last, before bigc-schedule): its three tensors read in before it, written
// back after it.
// NVME:       bigc.param_copy {bigc.phase = "optimizer", bigc.space = "host", from = @wte.exp_avg, to = @wte.exp_avg.io}
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "host", from = @wte.exp_avg_sq, to = @wte.exp_avg_sq.io}
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "host", from = @wte, to = @wte.io}
// NVME-NEXT:  bigc.adamw {{.*}}exp_avg = @wte.exp_avg.io, exp_avg_sq = @wte.exp_avg_sq.io, half = @wte.stage{{.*}}param = @wte.io,
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.io, to = @wte}
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.exp_avg_sq.io, to = @wte.exp_avg_sq}
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.exp_avg.io, to = @wte.exp_avg}
// NVME-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "device", from = @wte.stage, to = @wte.half}

// masters=false: the moments only; the master stays on the host.
// STATES:      bigc.param @w0 : tensor<4x4xf32> {bigc.space = "host", init = "normal", role = "master"
// STATES:      bigc.param @w0.exp_avg : tensor<4x4xf32> {bigc.space = "nvme"
// STATES-NOT:  @w0.io
// STATES:      bigc.adamw {{.*}}exp_avg = @wte.exp_avg.io, exp_avg_sq = @wte.exp_avg_sq.io, half = @wte.stage{{.*}}param = @wte,

// bigc-schedule: the copies run on the nvme stream; the reads of an update go one update ahead
// (those of @w0 before the update of @w1), each write right after its update.
// SCHED-LABEL: func.func @train_step
// SCHED:       bigc.param_copy {bigc.event = [[E1:[0-9]+]] : i64, {{.*}}bigc.stream = "nvme", from = @w1.exp_avg, to = @w1.exp_avg.io}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w1.exp_avg_sq, to = @w1.exp_avg_sq.io}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w1, to = @w1.io}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w0.exp_avg, to = @w0.exp_avg.io}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w0.exp_avg_sq, to = @w0.exp_avg_sq.io}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w0, to = @w0.io}
// SCHED-NEXT:  bigc.adamw {{.*}}bigc.stream = "host"{{.*}}param = @w1.io,
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.exp_avg.io, to = @w1.exp_avg}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.exp_avg_sq.io, to = @w1.exp_avg_sq}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.io, to = @w1}
// SCHED:       bigc.adamw {{.*}}param = @w0.io,
// SCHED:       bigc.adamw {{.*}}param = @wte.io,

// The memory plan: an nvme arena of 9 tensors of 4096 bytes (each at least 64 bytes, rounded up),
// every offset in it and in the host arena a multiple of 4096 (the awk line).
// PLAN:      memory-plan @train_step: {{.*}} host_arena={{[0-9]+}} host_lower_bound={{[0-9]+}} nvme_arena=36864 nvme_lower_bound=36864
// PLAN-DAG:  @wte master : offset=0 size=128 live=[0,{{[0-9]+}}] space=nvme
// PLAN-DAG:  @w0.io transfer : offset={{[0-9]+}} size=64 live=[{{[0-9]+}},{{[0-9]+}}] space=host
// PLAN-DAG:  @w1.exp_avg_sq optimizer : offset={{[0-9]+}} size=64 live=[0,{{[0-9]+}}] space=nvme

// Without bigc-offload the updates run on the device: refused.
// DEVICE: bigc-offload-nvme: the update of @wte runs on the device (run bigc-offload first)

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
