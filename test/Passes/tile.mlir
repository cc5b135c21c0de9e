// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-tile=max-bytes=256 | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-tile="max-bytes=256 element-bytes=2" | FileCheck %s --check-prefix=HALF
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-tile=max-bytes=256 --bigc-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-tile=max-bytes=256 --bigc-autodiff --bigc-recompute=policy=full --bigc-shard="ranks=3 zero=3 bucket-mb=0" --bigc-schedule | FileCheck %s --check-prefix=Z3

// Two linears over 256 bytes (8 x 16 f32 = 512): x @ w1 (w1 [K,N]) and
// g @ w2^T (w2 [N,K]), each used as 2 row tiles of 4 x 16 (256 bytes). The
// tied embedding's table (read by bigc.embedding too) stays whole; the bias
// (32 bytes) is under the size.
// CHECK:       module attributes {bigc.tiled = {tiles = 2 : i64, untiled = ["wte.weight"], weights = 2 : i64}}
// CHECK:       bigc.param @w1 : tensor<8x16xf32> {bigc.tiles = 2 : i64
// CHECK:       bigc.param @w2 : tensor<8x16xf32> {bigc.tiles = 2 : i64
// CHECK:       bigc.param @b : tensor<8xf32> {init = "zeros"}
// CHECK:       %[[X:.*]] = bigc.embedding
// CHECK:       %[[W1:.*]] = bigc.get_param @w1
// x @ w1: the input's columns split as the weight's rows; the products summed.
// CHECK-NEXT:  %[[T:.*]]:2 = bigc.split %[[W1]] {axis = 0 : i64, bigc.layer = 0 : i64} : (tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-NEXT:  %[[XS:.*]]:2 = bigc.split %[[X]] {axis = 2 : i64, bigc.layer = 0 : i64} : (tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT:  %[[P0:.*]] = bigc.matmul %[[XS]]#0, %[[T]]#0 {bigc.layer = 0 : i64} : (tensor<2x3x4xf32>, tensor<4x16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT:  %[[P1:.*]] = bigc.matmul %[[XS]]#1, %[[T]]#1 {bigc.layer = 0 : i64} : (tensor<2x3x4xf32>, tensor<4x16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT:  %[[H:.*]] = bigc.add %[[P0]], %[[P1]]
// CHECK-NEXT:  %[[G:.*]] = bigc.gelu %[[H]]
// g @ w2^T: each tile gives its columns of the output, joined.
// CHECK-NEXT:  %[[W2:.*]] = bigc.get_param @w2
// CHECK-NEXT:  %[[U:.*]]:2 = bigc.split %[[W2]] {axis = 0 : i64, bigc.layer = 0 : i64}
// CHECK-NEXT:  %[[Q0:.*]] = bigc.matmul %[[G]], %[[U]]#0 {bigc.layer = 0 : i64, transpose_b} : (tensor<2x3x16xf32>, tensor<4x16xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT:  %[[Q1:.*]] = bigc.matmul %[[G]], %[[U]]#1 {bigc.layer = 0 : i64, transpose_b}
// CHECK-NEXT:  %[[Y:.*]] = bigc.concat %[[Q0]], %[[Q1]] {axis = 2 : i64, bigc.layer = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
// CHECK:       %[[YB:.*]] = bigc.bias_add %[[Y]]
// CHECK-NEXT:  bigc.matmul %[[YB]], %{{.*}} {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>)
// 16-bit compute copies: the weights are 256 bytes, not over: nothing tiled
// (the table, 512 bytes, is over but read by bigc.embedding).
// HALF:        module attributes {bigc.tiled = {tiles = 1 : i64, untiled = ["wte.weight"], weights = 0 : i64}}
// HALF-NOT:    bigc.split
// The gradient of a tiled weight is the concatenation of its tiles'.
// GRAD:        %[[D2:.*]] = bigc.concat %{{.*}}, %{{.*}} {axis = 0 : i64, bigc.layer = 0 : i64, bigc.phase = "backward"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// GRAD:        %[[D1:.*]] = bigc.concat %{{.*}}, %{{.*}} {axis = 0 : i64, bigc.layer = 0 : i64, bigc.phase = "backward"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// GRAD:        bigc.adamw %[[D1]] {{.*}}param = @w1
// GRAD:        bigc.adamw %[[D2]] {{.*}}param = @w2
// ZeRO-3 over 3 ranks: the weight, its master and moments in tile-interleaved
// shards (2 tiles of 64 elements, pieces of 22: 44); each tile gathered
// alone from its piece (tile = [t, k]), in the backward again for the
// recomputed forward (tiles 0, 1) and the gradients (1, 0: tile 1 is not
// gathered twice in a row); each tile's gradient reduce-scattered alone and
// the pieces joined into the shard the update reads.
// Z3:          bigc.param @wte.weight : tensor<86xf32> {bigc.full_shape = array<i64: 32, 8>, init
// Z3:          bigc.param @w1 : tensor<44xf32> {bigc.full_shape = array<i64: 8, 16>, bigc.tiles = 2 : i64, init = "normal", role = "master"
// Z3:          bigc.param @w1.half : tensor<44xf32> {bigc.full_shape = array<i64: 8, 16>, bigc.tiles = 2 : i64, init = "copy"
// Z3:          bigc.param @w1.exp_avg : tensor<44xf32> {bigc.full_shape = array<i64: 8, 16>, bigc.tiles = 2 : i64
// Z3:          bigc.param @w1.exp_avg_sq : tensor<44xf32> {bigc.full_shape = array<i64: 8, 16>, bigc.tiles = 2 : i64
// Z3:          %[[S1:.*]] = bigc.get_param @w1.half {bigc.layer = 0 : i64, bigc.phase = "forward"} : tensor<44xf32>
// Z3-NEXT:     bigc.all_gather %[[S1]] {{.*}}bigc.phase = "forward", bigc.stream = "comm", group = "dp", tile = array<i64: 0, 2>} : (tensor<44xf32>) -> tensor<4x16xf32>
// Z3:          bigc.all_gather %[[S1]] {{.*}}bigc.phase = "forward", bigc.stream = "comm", group = "dp", tile = array<i64: 1, 2>} : (tensor<44xf32>) -> tensor<4x16xf32>
// Z3:          %[[B1:.*]] = bigc.get_param @w1.half {bigc.layer = 0 : i64, bigc.phase = "backward"} : tensor<44xf32>
// Z3-NEXT:     bigc.all_gather %[[B1]] {{.*}}tile = array<i64: 0, 2>}
// Z3:          bigc.all_gather %[[B1]] {{.*}}tile = array<i64: 1, 2>}
// Z3:          bigc.all_gather %[[B1]] {{.*}}tile = array<i64: 0, 2>}
// Z3-NOT:      bigc.all_gather %[[B1]]
// Z3:          %[[R1:.*]] = bigc.reduce_scatter %{{.*}} {{{.*}}reduce = "sum"} : (tensor<4x16xf32>) -> tensor<22xf32>
// Z3:          %[[R0:.*]] = bigc.reduce_scatter %{{.*}} {{{.*}}reduce = "sum"} : (tensor<4x16xf32>) -> tensor<22xf32>
// Z3:          %[[J:.*]] = bigc.concat %[[R0]], %[[R1]] {axis = 0 : i64, {{.*}}} : (tensor<22xf32>, tensor<22xf32>) -> tensor<44xf32>
// Z3:          bigc.adamw %[[J]] {{.*}}param = @w2
// Z3-NOT:      tensor<8x16xf32>) -> tensor<44xf32>
module {
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  bigc.param @"w1" : tensor<8x16xf32> {init = "normal", std = 0.02}
  bigc.param @"w2" : tensor<8x16xf32> {init = "normal", std = 0.02}
  bigc.param @"b" : tensor<8xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %w1 = bigc.get_param @"w1" {bigc.layer = 0 : i64} : tensor<8x16xf32>
    %h = bigc.matmul %x, %w1 {bigc.layer = 0 : i64} : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
    %g = bigc.gelu %h {bigc.layer = 0 : i64} : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
    %w2 = bigc.get_param @"w2" {bigc.layer = 0 : i64} : tensor<8x16xf32>
    %y = bigc.matmul %g, %w2 {bigc.layer = 0 : i64, transpose_b} : (tensor<2x3x16xf32>, tensor<8x16xf32>) -> tensor<2x3x8xf32>
    %b = bigc.get_param @"b" {bigc.layer = 0 : i64} : tensor<8xf32>
    %yb = bigc.bias_add %y, %b {bigc.layer = 0 : i64} : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %yb, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A row over the largest tile (1024 bytes, 512 as a 16-bit copy): its tiles
// would be whole rows.
module {
  // expected-error-re @below {{bigc-tile: one row of the weight @"w" is {{1024|512}} bytes, over the largest tile (256 bytes): its tiles are whole rows; raise --tile-linear to at least {{1024|512}}}}
  bigc.param @"w" : tensor<4x256xf32> {init = "normal", std = 0.02}
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x256xf32> {
    %w = bigc.get_param @"w" : tensor<4x256xf32>
    %y = bigc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x256xf32>) -> tensor<2x256xf32>
    return %y : tensor<2x256xf32>
  }
}

// -----

// Weights split over the tensor axis already (bigc-tensor-parallel placed the mesh).
// expected-error @below {{bigc-tile: the weights are split over the tensor axis already (bigc-tensor-parallel); tile them or split them, not both}}
module attributes {bigc.mesh = {dp = 1 : i64, pp = 1 : i64, tp = 2 : i64}} {
  bigc.param @"w" : tensor<4x256xf32> {init = "normal", std = 0.02}
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x256xf32> {
    %w = bigc.get_param @"w" : tensor<4x256xf32>
    %y = bigc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x256xf32>) -> tensor<2x256xf32>
    return %y : tensor<2x256xf32>
  }
}
