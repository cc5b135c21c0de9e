// RUN: bigc-opt %s -split-input-file -verify-diagnostics

// Shards of a 4x4 tensor over the 4 ranks of "dp" have 4 elements.
module attributes {bigc.mesh = {dp = 4 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_shard(%g: tensor<4x4xf32>) -> tensor<3xf32> {
    // expected-error@+1 {{tensor #0: a tensor of 16 elements over 4 ranks of "dp" has shards of 4 elements, got 3}}
    %s = bigc.reduce_scatter %g {group = "dp", reduce = "mean"} : (tensor<4x4xf32>) -> tensor<3xf32>
    return %s : tensor<3xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 4 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_group(%g: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{group must be a mesh axis: "dp", "tp", "pp" or "cp", got "world"}}
    %s = bigc.all_reduce %g {group = "world", reduce = "sum"} : (tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_reduce(%g: tensor<4xf32>) -> tensor<2xf32> {
    // expected-error@+1 {{reduce must be "sum" or "mean", got "max"}}
    %s = bigc.reduce_scatter %g {group = "dp", reduce = "max"} : (tensor<4xf32>) -> tensor<2xf32>
    return %s : tensor<2xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_gather(%s: tensor<2xbf16>) -> tensor<4xf32> {
    // expected-error@+1 {{tensor #0: shard and full tensor must have one element type}}
    %w = bigc.all_gather %s {group = "dp"} : (tensor<2xbf16>) -> tensor<4xf32>
    return %w : tensor<4xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_stream(%g: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{of group "dp" runs on the "comm" stream, got bigc.stream = "h2d"}}
    %s = bigc.all_reduce %g {group = "dp", reduce = "sum", bigc.stream = "h2d"} : (tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  bigc.param @w : tensor<3xf32> {init = "zeros", bigc.full_shape = array<i64: 5>}
  bigc.param @"w.half" : tensor<5xf32> {init = "zeros"}
  func.func @bad_param_gather() {
    // expected-error@+1 {{tensor #0: a tensor of 5 elements over 1 ranks of "tp" has shards of 5 elements, got 3}}
    bigc.param_all_gather {from = @w, to = @"w.half", group = "tp"}
    return
  }
}

// -----

module attributes {bigc.mesh = {dp = 1 : i64, pp = 1 : i64, tp = 2 : i64}} {
  func.func @tp_on_comm(%g: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{of group "tp" runs on the "comm_tp" stream, got bigc.stream = "comm"}}
    %s = bigc.all_reduce %g {group = "tp", reduce = "sum", bigc.stream = "comm"} : (tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

// Context parallelism: ring_shift and cp_all_to_all run on the cp axis only.
module attributes {bigc.mesh = {cp = 2 : i64, dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @shift_dp(%k: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error@+1 {{group must be the context axis "cp", got "dp"}}
    %s = bigc.ring_shift %k {group = "dp"} : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    return %s : tensor<2x8x16xf32>
  }
}

// -----

module attributes {bigc.mesh = {cp = 2 : i64, dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @shift_type(%k: tensor<2x8x16xf32>) -> tensor<2x8x8xf32> {
    // expected-error@+1 {{result #0 must have the type of its operand, 'tensor<2x8x16xf32>', got 'tensor<2x8x8xf32>'}}
    %s = bigc.ring_shift %k {group = "cp"} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    return %s : tensor<2x8x8xf32>
  }
}

// -----

// The whole sequence of half the heads: [2,8,16] -> [2,16,8] over 2 ranks, not [2,8,8].
module attributes {bigc.mesh = {cp = 2 : i64, dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @a2a_shape(%q: tensor<2x8x16xf32>) -> tensor<2x8x8xf32> {
    // expected-error@+1 {{tensor #0: 'tensor<2x8x16xf32>' -> 'tensor<2x8x8xf32>' is not [B,T,N] <-> [B,2T,N/2] over the 2 ranks of "cp"}}
    %h = bigc.cp_all_to_all %q {group = "cp", to_heads} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    return %h : tensor<2x8x8xf32>
  }
}

// -----

// A tile of 3 x 4 over 3 ranks has pieces of 4 elements: the tile-interleaved shard of a weight
// of 2 such tiles has 8.
module attributes {bigc.mesh = {dp = 3 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_tile_shard(%s: tensor<12xf32>) -> tensor<3x4xf32> {
    // expected-error@+1 {{tensor #0: a tile of 12 elements over 3 ranks has pieces of 4 elements, so a shard of 2 tiles has 8, got 12}}
    %w = bigc.all_gather %s {group = "dp", tile = array<i64: 1, 2>} : (tensor<12xf32>) -> tensor<3x4xf32>
    return %w : tensor<3x4xf32>
  }
}

// -----

module attributes {bigc.mesh = {dp = 3 : i64, pp = 1 : i64, tp = 1 : i64}} {
  func.func @bad_tile_index(%s: tensor<8xf32>) -> tensor<3x4xf32> {
    // expected-error@+1 {{tile must be [t, k] with 0 <= t < k}}
    %w = bigc.all_gather %s {group = "dp", tile = array<i64: 2, 2>} : (tensor<8xf32>) -> tensor<3x4xf32>
    return %w : tensor<3x4xf32>
  }
}
