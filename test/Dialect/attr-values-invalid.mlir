// RUN: bigc-opt %s -split-input-file -verify-diagnostics
// The discardable attributes with a closed set of values (include/bigc/Dialect/BigcAttrNames.h,
// BigcTransfer.h): an unknown value on any op is an error of the dialect's verifier, not a default
// taken later by a pass.

func.func @phase(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.phase must be "forward", "backward" or "optimizer", got "forwards"}}
  %c = bigc.add %a, %b {bigc.phase = "forwards"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @phase_type(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.phase must be "forward", "backward" or "optimizer", got 1 : i64}}
  %c = bigc.add %a, %b {bigc.phase = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @space(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.space must be "device", "host" or "nvme", got "gpu"}}
  %c = bigc.add %a, %b {bigc.space = "gpu"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @stream(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.stream must be "compute", "h2d", "d2h", "host", "nvme", "comm", "comm_tp", "comm_cp" or "p2p", got "d2d"}}
  %c = bigc.add %a, %b {bigc.stream = "d2d"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// Every known value passes.
func.func @known(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %c = bigc.add %a, %b {bigc.phase = "forward", bigc.space = "device", bigc.stream = "compute"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %d = bigc.add %c, %b {bigc.phase = "backward", bigc.space = "host", bigc.stream = "host"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %e = bigc.add %d, %b {bigc.phase = "optimizer", bigc.stream = "p2p"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %e : tensor<4xf32>
}
