// RUN: bigc-opt %s -split-input-file | bigc-opt -split-input-file | FileCheck %s

// Round trip of the transfer ops (dialects/BigcTransferOps.td).

// CHECK-LABEL: func.func @transfers
// CHECK:       %[[H:.*]] = bigc.copy %arg0 {bigc.space = "host", bigc.stream = "d2h"} : tensor<4x4xf32>
// CHECK-NEXT:  %[[D:.*]] = bigc.copy %[[H]] {bigc.event = 3 : i64, bigc.space = "device"} : tensor<4x4xf32>
// CHECK-NEXT:  bigc.param_copy {bigc.stream = "h2d", from = @w.stage, to = @w}
// CHECK-NEXT:  bigc.wait {events = array<i64: 0, 3>}
// CHECK-NEXT:  return %[[D]]
module {
  bigc.param @w : tensor<4x4xf32> {init = "zeros"}
  bigc.param @"w.stage" : tensor<4x4xf32> {init = "zeros", role = "transfer", bigc.space = "host"}
  func.func @transfers(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %h = bigc.copy %x {bigc.space = "host", bigc.stream = "d2h"} : tensor<4x4xf32>
    %d = bigc.copy %h {bigc.space = "device", bigc.event = 3 : i64} : tensor<4x4xf32>
    bigc.param_copy {from = @"w.stage", to = @w, bigc.stream = "h2d"}
    bigc.wait {events = array<i64: 0, 3>}
    return %d : tensor<4x4xf32>
  }
}
