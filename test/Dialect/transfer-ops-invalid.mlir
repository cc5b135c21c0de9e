// RUN: bigc-opt %s -split-input-file -verify-diagnostics

// Verifiers of the transfer ops.

func.func @no_space(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'bigc.copy' op needs a bigc.space attribute: "device" or "host"}}
  %y = bigc.copy %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @bad_space(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.space must be "device", "host" or "nvme", got "disk"}}
  %y = bigc.copy %x {bigc.space = "disk"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @device_value_to_nvme(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{a value goes to the nvme space from a host value only, got one in the device space}}
  %y = bigc.copy %x {bigc.space = "nvme"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @nvme_value_to_device(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = bigc.copy %x {bigc.space = "host"} : tensor<4xf32>
  %n = bigc.copy %h {bigc.space = "nvme"} : tensor<4xf32>
  // expected-error@+1 {{a value in the nvme space comes back to the host only, not to the device space}}
  %y = bigc.copy %n {bigc.space = "device"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @nvme_value_read(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = bigc.copy %x {bigc.space = "host"} : tensor<4xf32>
  // expected-error@+1 {{a value in the nvme space is read only by a bigc.copy back to the host, not by bigc.add}}
  %n = bigc.copy %h {bigc.space = "nvme"} : tensor<4xf32>
  %y = bigc.add %n, %n : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @nvme_value_round_trip(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = bigc.copy %x {bigc.space = "host"} : tensor<4xf32>
  %n = bigc.copy %h {bigc.space = "nvme"} : tensor<4xf32>
  %y = bigc.copy %n {bigc.space = "host"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

bigc.param @n : tensor<4xf32> {init = "zeros", bigc.space = "nvme"}
bigc.param @d : tensor<4xf32> {init = "zeros"}
func.func @nvme_to_device() {
  // expected-error@+1 {{an nvme tensor is copied to or from a host tensor only, got @n (nvme) to @d (device)}}
  bigc.param_copy {from = @n, to = @d}
  return
}

// -----

func.func @bad_stream(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.stream "comm", "comm_tp", "comm_cp" and "p2p" are the streams of collectives}}
  %y = bigc.copy %x {bigc.space = "host", bigc.stream = "comm"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @bad_event(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{bigc.event must be a non-negative integer, got -1 : i64}}
  %y = bigc.copy %x {bigc.space = "host", bigc.event = -1 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

bigc.param @a : tensor<4xf32> {init = "zeros"}
bigc.param @b : tensor<8xf32> {init = "zeros"}
func.func @shape_mismatch() {
  // expected-error@+1 {{from @a has type 'tensor<4xf32>' but to @b has type 'tensor<8xf32>' (a copy does not convert; use the same type)}}
  bigc.param_copy {from = @a, to = @b}
  return
}

// -----

bigc.param @a : tensor<4xf32> {init = "zeros"}
func.func @unknown() {
  // expected-error@+1 {{to @nope does not name a bigc.param}}
  bigc.param_copy {from = @a, to = @nope}
  return
}

// -----

bigc.param @a : tensor<4xf32> {init = "zeros"}
func.func @self() {
  // expected-error@+1 {{from and to must be two different parameters, got @a twice}}
  bigc.param_copy {from = @a, to = @a}
  return
}

// -----

func.func @empty_wait() {
  // expected-error@+1 {{needs at least one event}}
  bigc.wait {events = array<i64>}
  return
}

// -----

func.func @twice() {
  // expected-error@+1 {{event 2 is listed twice}}
  bigc.wait {events = array<i64: 2, 2>}
  return
}
