// RUN: bigc-opt %s --bigc-autodiff --bigc-offload | FileCheck %s --check-prefix=OFF
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-schedule | FileCheck %s --check-prefix=SCHED
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload=params=host --bigc-schedule | FileCheck %s --check-prefix=HOST
// RUN: bigc-opt %s --bigc-autodiff --bigc-mixed-precision=precision=fp16 --bigc-offload --bigc-schedule | FileCheck %s --check-prefix=FP16
// RUN: bigc-opt %s --bigc-autodiff --bigc-offload --bigc-schedule --bigc-test-print-memory-plan -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAN

// A two-block model: a tied embedding @wte (no layer), block 0 (@w0, GELU)
// and block 1 (@w1, GELU), the LM head. bigc-autodiff turns it into the
// train step; bigc-offload (option offload=cpu) moves the optimizer to the
// host. Every check below names where a transfer lands.

// In fp32 each weight @N becomes the master (host) and @"N.half" (f32, init
// copy of @N) the device compute copy every get_param reads; the moments
// and a staging tensor @"N.stage" (role transfer) are on the host.
// OFF:       module attributes {bigc.offload = "cpu", bigc.offload_params = "device"}
// OFF:       bigc.param @w0 : tensor<4x4xf32> {bigc.space = "host", init = "normal", role = "master"
// OFF-NEXT:  bigc.param @w0.half : tensor<4x4xf32> {init = "copy", source = "w0"}
// OFF-NEXT:  bigc.param @w0.stage : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
// OFF-NEXT:  bigc.param @w0.exp_avg : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "optimizer"}
// OFF-NEXT:  bigc.param @w0.exp_avg_sq : tensor<4x4xf32> {bigc.space = "host", init = "zeros", role = "optimizer"}
// OFF-LABEL: func.func @train_step
// OFF-NOT:   bigc.get_param @w0 :
// OFF:       bigc.get_param @w0.half
// The gradient of @w1 goes to the host right after the matmul that makes it.
// OFF:       %[[DW1:.*]] = bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward", transpose_a}
// OFF-NEXT:  %[[H1:.*]] = bigc.copy %[[DW1]] {bigc.layer = 1 : i64, bigc.phase = "optimizer", bigc.space = "host"} : tensor<4x4xf32>
// The host AdamW reads the host copy, writes the master, moments and the
// staging tensor; param_copy brings it to the device compute copy.
// OFF:       bigc.adamw %[[H1]] {{.*}}bigc.space = "host"{{.*}}half = @w1.stage{{.*}}param = @w1,
// OFF-NEXT:  bigc.param_copy {bigc.phase = "optimizer", bigc.space = "device", from = @w1.stage, to = @w1.half}

// After bigc-schedule: the d2h copy (event 0) stays right after %dW1; the
// host AdamW of @w1 (event 1) right after it, so the update overlaps the
// backward of block 0; its param_copy (h2d, event 2) right after (the last
// reader of @w1.half, dx = dy @ W1^T, came before). The compute stream
// waits for the d2h copy at the start of the segment after the next one
// (the memory of %dW1 is live until there), and joins the rest at the end.
// SCHED-LABEL: func.func @train_step
// SCHED:       %[[W1:.*]] = bigc.get_param @w1.half
// SCHED:       bigc.matmul %{{.*}}, %[[W1]] {bigc.layer = 1 : i64, bigc.phase = "backward", transpose_b}
// SCHED:       %[[DW1:.*]] = bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward", transpose_a}
// SCHED-NEXT:  %[[H1:.*]] = bigc.copy %[[DW1]] {bigc.event = 0 : i64, bigc.layer = 1 : i64, bigc.phase = "optimizer", bigc.space = "host", bigc.stream = "d2h"}
// SCHED-NEXT:  bigc.adamw %[[H1]] {{.*}}bigc.event = 1 : i64, bigc.phase = "optimizer", bigc.space = "host", bigc.stream = "host"{{.*}}half = @w1.stage{{.*}}param = @w1,
// SCHED-NEXT:  bigc.param_copy {bigc.event = 2 : i64, bigc.phase = "optimizer", bigc.space = "device", bigc.stream = "h2d", from = @w1.stage, to = @w1.half}
// SCHED-NEXT:  bigc.gelu_grad {{.*}}bigc.layer = 0 : i64
// SCHED:       %[[DW0:.*]] = bigc.matmul {{.*}}bigc.layer = 0 : i64, bigc.phase = "backward", transpose_a}
// SCHED-NEXT:  %[[H0:.*]] = bigc.copy %[[DW0]] {bigc.event = 3 : i64, {{.*}}bigc.stream = "d2h"}
// SCHED-NEXT:  bigc.adamw %[[H0]] {{.*}}bigc.event = 4 : i64{{.*}}param = @w0,
// SCHED-NEXT:  bigc.param_copy {bigc.event = 5 : i64, {{.*}}from = @w0.stage, to = @w0.half}
// SCHED-NEXT:  bigc.wait {bigc.phase = "backward", events = array<i64: 0>}
// SCHED-NEXT:  bigc.embedding_grad
// SCHED-NEXT:  %[[DWTE:.*]] = bigc.add
// SCHED-NEXT:  %[[HT:.*]] = bigc.copy %[[DWTE]] {bigc.event = 6 : i64, {{.*}}bigc.stream = "d2h"}
// After the last layer boundary each side-stream op is joined before the one
// two later on its stream is issued (at most two hold memory at once): the
// host update of @w1 before that of @wte, its copy back before @wte's.
// SCHED-NEXT:  bigc.wait {bigc.phase = "optimizer", events = array<i64: 1>}
// SCHED-NEXT:  bigc.adamw %[[HT]] {{.*}}bigc.event = 7 : i64{{.*}}param = @wte,
// SCHED-NEXT:  bigc.wait {bigc.phase = "optimizer", events = array<i64: 2>}
// SCHED-NEXT:  bigc.param_copy {bigc.event = 8 : i64, {{.*}}from = @wte.stage, to = @wte.half}
// SCHED-NEXT:  return

// params=host (ZeRO-3-Offload): @"N.half" lives on the host too; each device
// use reads a device copy (h2d) fetched one segment ahead: @w1's copy for
// the forward of block 1 is issued before block 0's forward, and the compute
// stream waits for it just before its matmul. The host AdamW writes
// @"w1.half" directly (no staging, no param_copy).
// HOST:        bigc.param @w1.half : tensor<4x4xf32> {bigc.space = "host", init = "copy", source = "w1"}
// HOST-NOT:    .stage
// HOST-LABEL:  func.func @train_step
// HOST:        %[[G0:.*]] = bigc.get_param @w0.half {bigc.layer = 0 : i64, bigc.phase = "forward"}
// HOST-NEXT:   %[[C0:.*]] = bigc.copy %[[G0]] {bigc.event = 1 : i64, bigc.layer = 0 : i64, bigc.phase = "forward", bigc.space = "device", bigc.stream = "h2d"}
// HOST-NEXT:   bigc.wait {bigc.phase = "forward", events = array<i64: 0>}
// HOST-NEXT:   bigc.embedding
// HOST-NEXT:   %[[G1:.*]] = bigc.get_param @w1.half {bigc.layer = 1 : i64, bigc.phase = "forward"}
// HOST-NEXT:   %[[C1:.*]] = bigc.copy %[[G1]] {bigc.event = 2 : i64, {{.*}}bigc.stream = "h2d"}
// HOST-NEXT:   bigc.wait {bigc.phase = "forward", events = array<i64: 1>}
// HOST-NEXT:   bigc.matmul %{{.*}}, %[[C0]] {bigc.layer = 0 : i64
// HOST-NEXT:   bigc.gelu
// HOST:        bigc.wait {bigc.phase = "forward", events = array<i64: 2>}
// HOST-NEXT:   bigc.matmul %{{.*}}, %[[C1]] {bigc.layer = 1 : i64
// The backward's copy of @w1 is fetched during the LM head's backward.
// HOST:        %[[B1:.*]] = bigc.get_param @w1.half {bigc.layer = 1 : i64, bigc.phase = "backward"}
// HOST-NEXT:   %[[CB1:.*]] = bigc.copy %[[B1]] {{.*}}bigc.stream = "h2d"}
// HOST-NEXT:   bigc.fill
// HOST-NEXT:   bigc.cross_entropy_grad
// HOST:        bigc.matmul %{{.*}}, %[[CB1]] {bigc.layer = 1 : i64, bigc.phase = "backward", transpose_b}
// HOST:        bigc.adamw {{.*}}half = @w1.half{{.*}}param = @w1,
// HOST-NOT:    bigc.param_copy

// fp16 (bigc-mixed-precision ran first): the 16-bit compute copies stay on
// the device with a host staging tensor, as in fp32 (an update skipped on
// overflow writes `half` as the cast of the unchanged master, so the copy
// back stays right). The loss scale is on the host: the seed reads a device
// copy of it. The overflow check runs on the device over one norm per
// gradient, each taken as its gradient is made (beside the gradient's copy to
// the host), so the device keeps scalars, not gradients, and no host op reads
// every gradient; the updates and the loss scale update read a host copy of
// its flag.
// FP16:       bigc.param @w0.half : tensor<4x4xf16> {init = "copy", source = "w0"}
// FP16-NEXT:  bigc.param @w0.stage : tensor<4x4xf16> {bigc.space = "host", init = "zeros", role = "transfer"}
// FP16:       bigc.param @loss_scale : tensor<f32> {bigc.space = "host"
// FP16:       %[[S:.*]] = bigc.get_param @loss_scale
// FP16-NEXT:  %[[SD:.*]] = bigc.copy %[[S]] {bigc.event = 0 : i64, bigc.phase = "backward", bigc.space = "device", bigc.stream = "h2d"}
// FP16:       bigc.wait {bigc.phase = "backward", events = array<i64: 0>}
// FP16-NEXT:  bigc.cross_entropy_grad %{{.*}}, %{{.*}}, %[[SD]]
// FP16:       %[[G1:.*]] = bigc.matmul {{.*}}bigc.layer = 1 : i64, bigc.phase = "backward", transpose_a}
// FP16-NEXT:  bigc.copy %[[G1]] {{{.*}}bigc.space = "host", bigc.stream = "d2h"}
// FP16-NEXT:  %[[N1:.*]] = bigc.global_norm %[[G1]] {bigc.layer = 1 : i64, bigc.partial_norm, bigc.phase = "backward"} : (tensor<4x4xf16>) -> tensor<f32>
// FP16:       %[[HT:.*]] = bigc.copy %[[GT:.*]] {bigc.event = 3 : i64, bigc.phase = "optimizer", bigc.space = "host", bigc.stream = "d2h"}
// FP16-NEXT:  %[[NT:.*]] = bigc.global_norm %[[GT]] {bigc.partial_norm, bigc.phase = "backward"}
// FP16:       %[[FD:.*]] = bigc.check_finite %[[NT]], %{{.*}}, %[[N1]] {bigc.phase = "optimizer"} : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<f32>
// FP16-NEXT:  %[[F:.*]] = bigc.copy %[[FD]] {{{.*}}bigc.space = "host", bigc.stream = "d2h"} : tensor<f32>
// FP16:       bigc.adamw %[[HT]] unscale(%{{.*}}) skip_if(%[[F]]) {{.*}}half = @wte.stage
// FP16-NEXT:  bigc.param_copy {{{.*}}from = @wte.stage, to = @wte.half}
// FP16:       bigc.loss_scale_update %[[F]] {{{.*}}bigc.space = "host", bigc.stream = "host"

// The memory plan: one arena per space. The device gradient of @w1 (a d2h
// copy reads it, event 0) lives until the bigc.wait that names event 0
// (instruction 29), not only to its copy (18); a staging tensor lives from
// its AdamW until its copy back is joined (@w1's by the tail's wait before
// @wte's copy, 35; the last ones at the end); host copies of gradients are
// in the host arena, each live until its update is joined (@w1's: 33).
// PLAN:       memory-plan @train_step: instructions=37 buffers=45 arena={{[0-9]+}} lower_bound={{[0-9]+}} host_arena={{[0-9]+}} host_lower_bound={{[0-9]+}}
// PLAN-NEXT:  @wte master : {{.*}} live=[0,36] space=host
// PLAN-NEXT:  @wte.half param : {{.*}} live=[0,36]{{$}}
// PLAN-NEXT:  @wte.stage transfer : {{.*}} live=[34,36] space=host
// PLAN:       @w1.stage transfer : {{.*}} live=[19,35] space=host
// PLAN:       %20 bigc.matmul : {{.*}} live=[17,29]{{$}}
// PLAN-NEXT:  %21 bigc.copy : {{.*}} size=64 live=[18,33] space=host
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
