// RUN: bigc-opt %s --bigc-test-print-step-estimate="device-flops=1e9 link-bytes-per-s=16384e3" -split-input-file -o /dev/null 2>&1 | FileCheck %s

// Three 64x64x64 matmuls (2*64^3 = 524288 FLOPs each: 0.524 ms at 1 GFLOP/s) and
// an all-reduce of 64x64 f32 over 2 ranks (16384 bytes, ring factor 2(n-1)/n = 1:
// 1.000 ms at 16.384 MB/s), issued after the first matmul and waited for after the
// third: it runs during the second and third (1.049 ms of compute), so all of it
// is hidden; the step ends with the last matmul.
// CHECK:      step-estimate: step=1.573 ms compute=1.573 ms
// CHECK-NEXT: all_reduce: count=1 time=1.000 ms hidden=1.000 ms
module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @train_step(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %a = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %r = bigc.all_reduce %a {bigc.event = 0 : i64, bigc.stream = "comm", group = "dp", reduce = "mean"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %b = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %c = bigc.matmul %b, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 0>}
    return %r : tensor<64x64xf32>
  }
}

// -----

// Only one matmul to hide behind: 0.524 of the 1.000 ms are hidden, and the
// compute stream then waits for the rest (the step ends with the all-reduce).
// CHECK:      step-estimate: step=1.524 ms compute=1.049 ms
// CHECK-NEXT: all_reduce: count=1 time=1.000 ms hidden=0.524 ms
module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @train_step(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %a = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %r = bigc.all_reduce %a {bigc.event = 0 : i64, bigc.stream = "comm", group = "dp", reduce = "mean"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %b = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 0>}
    return %r : tensor<64x64xf32>
  }
}

// -----

// Two all-reduces on one stream: the second's input is ready at 1.049 ms (after the second
// matmul) but the comm stream is busy with the first until 1.524 ms: it queues 0.476 ms, and the
// matmul that reads it waits for that too (step 3.049 ms; only the first hides, behind the
// second matmul).
// CHECK:      step-estimate: step=3.049 ms compute=1.573 ms
// CHECK-NEXT: all_reduce: count=2 time=2.000 ms hidden=0.524 ms queued=0.476 ms
module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @train_step(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %a = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %r = bigc.all_reduce %a {bigc.event = 0 : i64, bigc.stream = "comm", group = "dp", reduce = "mean"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %b = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %s = bigc.all_reduce %b {bigc.event = 1 : i64, bigc.stream = "comm", group = "dp", reduce = "mean"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 1>}
    %c = bigc.matmul %s, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 0>}
    return %r : tensor<64x64xf32>
  }
}

// -----

// The same with the second a tensor-parallel all-reduce (group "tp", tp 2): it runs on its own
// stream (comm_tp), starts as soon as its input is ready (queued 0) and does not wait for the
// data-parallel one: the step ends at 2.573 ms.
// CHECK:      step-estimate: step=2.573 ms compute=1.573 ms
// CHECK-NEXT: all_reduce: count=1 time=1.000 ms hidden=0.524 ms queued=0.000 ms
// CHECK-NEXT: tp_all_reduce: count=1 time=1.000 ms hidden=0.000 ms queued=0.000 ms
module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 2 : i64}} {
  func.func @train_step(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %a = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %r = bigc.all_reduce %a {bigc.event = 0 : i64, bigc.stream = "comm", group = "dp", reduce = "mean"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %b = bigc.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %s = bigc.all_reduce %b {bigc.event = 1 : i64, bigc.stream = "comm_tp", group = "tp", reduce = "sum"} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 1>}
    %c = bigc.matmul %s, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    bigc.wait {events = array<i64: 0>}
    return %r : tensor<64x64xf32>
  }
}
