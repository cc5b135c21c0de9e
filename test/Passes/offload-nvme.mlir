// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme | FileCheck %s --check-prefix=NVME
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=masters=false | FileCheck %s --check-prefix=STATES
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme --bigc-schedule | FileCheck %s --check-prefix=SCHED
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme --bigc-schedule --bigc-test-print-memory-plan -o /dev/null 2> %t.plan
// RUN: FileCheck %s --check-prefix=PLAN < %t.plan
// RUN: awk '/space=(nvme|host)$/ { split($4, o, "="); if (o[2] % 4096) { print "unaligned: " $0; bad = 1 } } END { exit bad }' %t.plan
// RUN: not bigc-opt %s --bigc-autodiff --bigc-offload-nvme 2>&1 | FileCheck %s --check-prefix=DEVICE
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload=params=host --bigc-offload-nvme=params=true -o %t.params.mlir
// RUN: FileCheck %s --check-prefix=PARAMS < %t.params.mlir
// RUN: not grep -E "get_param @[a-z0-9]+\.half :" %t.params.mlir
// RUN: bigc-opt %t.params.mlir --bigc-schedule | FileCheck %s --check-prefix=SCHED-PARAMS
// RUN: not bigc-opt %s --bigc-autodiff --bigc-offload --bigc-offload-nvme=params=true 2>&1 | FileCheck %s --check-prefix=NO-HOST-WEIGHTS
// RUN: bigc-opt %s --bigc-autodiff --bigc-mixed-precision=precision=fp16 --bigc-offload --bigc-offload-nvme=grads=true --bigc-schedule | FileCheck %s --check-prefix=GRADS

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
// back after it, all numbered as one update (bigc.nvme_update, what bigc-schedule places them by);
// `weight` names the tensor of record the update's param stages.
// NVME:       bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "host", from = @wte.exp_avg, to = @wte.exp_avg.io}
// NVME-NEXT:  bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "host", from = @wte.exp_avg_sq, to = @wte.exp_avg_sq.io}
// NVME-NEXT:  bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "host", from = @wte, to = @wte.io}
// NVME-NEXT:  bigc.adamw {{.*}}bigc.nvme_update = 0 : i64, {{.*}}exp_avg = @wte.exp_avg.io, exp_avg_sq = @wte.exp_avg_sq.io, half = @wte.stage{{.*}}param = @wte.io, weight = @wte,
// NVME-NEXT:  bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.io, to = @wte}
// NVME-NEXT:  bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.exp_avg_sq.io, to = @wte.exp_avg_sq}
// NVME-NEXT:  bigc.param_copy {bigc.nvme_update = 0 : i64, bigc.phase = "optimizer", bigc.space = "nvme", from = @wte.exp_avg.io, to = @wte.exp_avg}
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
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.io, to = @w1}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.exp_avg_sq.io, to = @w1.exp_avg_sq}
// SCHED-NEXT:  bigc.param_copy {{.*}}bigc.space = "nvme", bigc.stream = "nvme", from = @w1.exp_avg.io, to = @w1.exp_avg}
// SCHED:       bigc.adamw {{.*}}param = @w0.io,
// SCHED:       bigc.adamw {{.*}}param = @wte.io,

// The memory plan: an nvme arena of 9 tensors of 4096 bytes (each at least 64 bytes, rounded up),
// every offset in it and in the host arena a multiple of 4096 (the awk line).
// PLAN:      memory-plan @train_step: {{.*}} host_arena={{[0-9]+}} host_lower_bound={{[0-9]+}} nvme_arena=36864 nvme_lower_bound=36864
// PLAN-DAG:  @wte master : offset=0 size=128 live=[0,{{[0-9]+}}] space=nvme
// PLAN-DAG:  @w0.io transfer : offset={{[0-9]+}} size=64 live=[{{[0-9]+}},{{[0-9]+}}] space=host
// PLAN-DAG:  @w1.exp_avg_sq optimizer : offset={{[0-9]+}} size=64 live=[0,{{[0-9]+}}] space=nvme

// params=true (--offload-params nvme, after bigc-offload params=host): the compute copies move to
// the nvme space too; each use reads a staging tensor of its own (@"X.fetch.K", filled by a
// param_copy just before its get_param; no get_param reads a weight in the nvme space, the grep),
// the update writes @"X.half.io", written back after it.
// PARAMS:       module attributes {bigc.offload = "nvme", bigc.offload_params = "nvme"}
// PARAMS:       bigc.param @w1.half : tensor<4x4xf32> {bigc.space = "nvme", init = "copy", source = "w1"}
// PARAMS-NEXT:  bigc.param @w1.half.fetch.0 : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// PARAMS-NEXT:  bigc.param @w1.half.fetch.1 : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// PARAMS-NEXT:  bigc.param @w1.half.io : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// PARAMS:       bigc.param_copy {bigc.layer = 1 : i64, bigc.phase = "forward", bigc.space = "host", from = @w1.half, to = @w1.half.fetch.0}
// PARAMS-NEXT:  bigc.get_param @w1.half.fetch.0 {bigc.layer = 1 : i64, bigc.phase = "forward"}
// PARAMS:       bigc.param_copy {bigc.layer = 1 : i64, bigc.phase = "backward", bigc.space = "host", from = @w1.half, to = @w1.half.fetch.1}
// PARAMS-NEXT:  bigc.get_param @w1.half.fetch.1 {bigc.layer = 1 : i64, bigc.phase = "backward"}
// PARAMS:       bigc.adamw {{.*}}bigc.nvme_update = [[W1:[0-9]+]] : i64, {{.*}}half = @w1.half.io{{.*}}param = @w1.io, weight = @w1,
// PARAMS-NEXT:  bigc.param_copy {bigc.nvme_update = [[W1]] : i64, bigc.phase = "optimizer", bigc.space = "nvme", from = @w1.half.io, to = @w1.half}

// bigc-schedule: each read from the nvme space goes on the nvme stream ahead of the host-to-device
// copy of its staging (by a layer segment where there is one before the copy's: here the copies
// of both blocks are prefetched into the first segment, the embedding, and the reads stay just
// before them); the write back of an update's weights after it, with its state's.
// SCHED-PARAMS:       bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w0.half, to = @w0.half.fetch.0}
// SCHED-PARAMS-NEXT:  bigc.get_param @w0.half.fetch.0
// SCHED-PARAMS-NEXT:  bigc.copy {{.*}}bigc.layer = 0 : i64, bigc.phase = "forward", bigc.space = "device", bigc.stream = "h2d"
// SCHED-PARAMS-NEXT:  bigc.param_copy {{.*}}bigc.layer = 1 : i64, bigc.phase = "forward", {{.*}}bigc.stream = "nvme", from = @w1.half, to = @w1.half.fetch.0}
// SCHED-PARAMS:       bigc.embedding
// SCHED-PARAMS-NEXT:  bigc.get_param @w1.half.fetch.0
// SCHED-PARAMS-NEXT:  bigc.copy {{.*}}bigc.layer = 1 : i64, bigc.phase = "forward", bigc.space = "device", bigc.stream = "h2d"
// SCHED-PARAMS:       bigc.matmul {{.*}}bigc.layer = 0 : i64, bigc.phase = "forward"
// SCHED-PARAMS:       bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "forward"
// SCHED-PARAMS:       bigc.adamw {{.*}}bigc.stream = "host"{{.*}}half = @w1.half.io
// SCHED-PARAMS:       bigc.param_copy {{.*}}bigc.stream = "nvme", from = @w1.half.io, to = @w1.half}

// grads=true, fp16: each gradient's host copy goes on to the nvme space (stream nvme) as it
// arrives, and the device keeps only its norm for the overflow check; after the check, each
// gradient comes back to the host an update ahead (bigc.nvme_update of its update, with the
// state's reads), and the update reads that copy.
// GRADS:       %[[G1:.*]] = bigc.copy %{{.*}} {{{.*}}bigc.layer = 1 : i64, bigc.phase = "optimizer", bigc.space = "host", bigc.stream = "d2h"} : tensor<4x4xf16>
// GRADS-NEXT:  %[[N1:.*]] = bigc.copy %[[G1]] {{{.*}}bigc.layer = 1 : i64, bigc.phase = "optimizer", bigc.space = "nvme", bigc.stream = "nvme"} : tensor<4x4xf16>
// GRADS-NEXT:  bigc.global_norm {{.*}}bigc.partial_norm
// GRADS:       bigc.check_finite
// GRADS:       bigc.param_copy {{{.*}}bigc.nvme_update = 1 : i64{{.*}}from = @w0, to = @w0.io}
// GRADS:       bigc.param_copy {{{.*}}bigc.nvme_update = 2 : i64{{.*}}from = @w1, to = @w1.io}
// GRADS:       %[[B1:.*]] = bigc.copy %[[N1]] {{{.*}}bigc.nvme_update = 2 : i64, bigc.phase = "optimizer", bigc.space = "host", bigc.stream = "nvme"} : tensor<4x4xf16>
// GRADS:       bigc.adamw {{.*}}bigc.nvme_update = 1 : i64
// GRADS:       bigc.adamw %[[B1]] {{.*}}bigc.nvme_update = 2 : i64

// params=true needs weights on the host (bigc-offload params=host).
// NO-HOST-WEIGHTS: bigc-offload-nvme: params=true, but no weights live on the host (run bigc-offload with params=host first)

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
