// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-test-print-memory-plan -o /dev/null 2>&1 | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-memory-plan | FileCheck %s --check-prefix=ATTR

// Offsets of bigc-memory-plan (checked through bigc-test-print-memory-plan,
// which prints one line per buffer: offset, own size, own live interval) and
// the attributes it records. Alignment 64: every size below rounds up to a
// multiple of 64 (the 4-byte loss takes 64).

// An in-place chain. Instructions: 0 embedding, 1 gelu, 2 scale, 3 matmul,
// 4 cross_entropy (get_param is not an instruction). gelu and scale reuse the
// buffer of their operand, which dies there: one group {x, g, s} [0,3].
// Buffers (aligned bytes, interval), placed largest first:
//   l      1024 [3,4] -> 0
//   @w      256 [0,4] -> 1024 (live with l)
//   x/g/s   256 [0,3] -> 1280 (live with l, @w)
//   targets  64 [0,4] -> 1536 (on top: no gap below)
//   tokens   64 [0,0] -> 0    (l is not live yet: the gap [0,1024) holds it)
//   loss     64 [4,4] -> 1280 (x/g/s is dead: best fit in [1280,1536))
// Lower bound at instruction 3: 1024 + 256 + 256 + 64 = 1600 = arena.
// CHECK-LABEL: memory-plan @train_step: instructions=5 buffers=8 arena=1600 lower_bound=1600
// CHECK-NEXT:  @w param : offset=1024 size=256 live=[0,4]
// CHECK-NEXT:  %arg0 arg : offset=0 size=64 live=[0,0]
// CHECK-NEXT:  %arg1 arg : offset=1536 size=64 live=[0,4]
// CHECK-NEXT:  %1 bigc.embedding : offset=1280 size=256 live=[0,1]
// CHECK-NEXT:  %2 bigc.gelu : offset=1280 size=256 live=[1,2]
// CHECK-NEXT:  %3 bigc.scale : offset=1280 size=256 live=[2,3]
// CHECK-NEXT:  %4 bigc.matmul : offset=0 size=1024 live=[3,4]
// CHECK-NEXT:  %5 bigc.cross_entropy : offset=1280 size=4 live=[4,4]

// ATTR-LABEL: bigc.param @w : tensor<16x4xf32> {bigc.offset = 1024 : i64
// ATTR:       func.func @train_step({{.*}}) -> tensor<f32> attributes {bigc.arena_bytes = 1600 : i64, bigc.arg_offsets = array<i64: 0, 1536>, bigc.lower_bound_bytes = 1600 : i64}
// ATTR-NEXT:  bigc.get_param @w {bigc.offsets = array<i64: 1024>}
// ATTR-NEXT:  bigc.embedding {{.*}}{bigc.offsets = array<i64: 1280>}
// ATTR-NEXT:  bigc.gelu {{.*}}{bigc.offsets = array<i64: 1280>}
// ATTR-NEXT:  bigc.scale {{.*}}{bigc.offsets = array<i64: 1280>, factor
// ATTR-NEXT:  bigc.matmul {{.*}}{bigc.offsets = array<i64: 0>, transpose_b}
// ATTR-NEXT:  bigc.cross_entropy {{.*}}{bigc.offsets = array<i64: 1280>}
module {
  bigc.param @w : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<16x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %g = bigc.gelu %x : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %s = bigc.scale %g {factor = 2.0 : f64} : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %l = bigc.matmul %s, %w {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// No in-place on a parameter or on a value still live: add reads @p (a
// parameter) and x (read again by mul), so its result gets a new buffer; mul
// reuses a, which dies there (the first eligible operand), although x dies
// there too.
// CHECK-LABEL: memory-plan @train_step: instructions=5 buffers=9 arena=1856 lower_bound=1856
// CHECK:       @p param : offset=[[P:[0-9]+]] size=256 live=[0,4]
// CHECK:       %2 bigc.embedding : offset=[[X:[0-9]+]] size=256 live=[0,2]
// CHECK-NEXT:  %3 bigc.add : offset=[[A:[0-9]+]] size=256 live=[1,2]
// CHECK-NOT:   offset=[[P]] size=256
// CHECK-NEXT:  %4 bigc.mul : offset=[[A]] size=256 live=[2,3]
// CHECK-NEXT:  %5 bigc.matmul : offset={{[0-9]+}} size=1024 live=[3,4]

// ATTR-LABEL: bigc.param @e
// ATTR:       bigc.add {{.*}}{bigc.offsets = array<i64: [[A2:[0-9]+]]>}
// ATTR-NEXT:  bigc.mul {{.*}}{bigc.offsets = array<i64: [[A2]]>}
module {
  bigc.param @e : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @p : tensor<2x8x4xf32> {init = "zeros"}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %e = bigc.get_param @e : tensor<16x4xf32>
    %p = bigc.get_param @p : tensor<2x8x4xf32>
    %x = bigc.embedding %e, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %a = bigc.add %p, %x : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %b = bigc.mul %a, %x : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %l = bigc.matmul %b, %e {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Reshape aliasing. r = reshape(x) is x (same offset); x and r together live
// until r's last use (instruction 3), so gelu(x) at 2 cannot reuse them.
// m3 = reshape(m) is m; gelu(m3) at 5 is their last use: it reuses m's
// buffer. add(l, h) reuses l.
// CHECK-LABEL: memory-plan @train_step: instructions=9 buffers=12 arena=2624 lower_bound=2624
// CHECK:       %1 bigc.embedding : offset=[[X:[0-9]+]] size=256 live=[0,2]
// CHECK-NEXT:  %2 bigc.reshape : offset=[[X]] size=256 live=[1,3]
// CHECK-NOT:   offset=[[X]]
// CHECK-NEXT:  %3 bigc.gelu : offset={{[0-9]+}} size=256 live=[2,6]
// CHECK-NEXT:  %4 bigc.matmul : offset=[[M:[0-9]+]] size=1024 live=[3,4]
// CHECK-NEXT:  %5 bigc.reshape : offset=[[M]] size=1024 live=[4,5]
// CHECK-NEXT:  %6 bigc.gelu : offset=[[M]] size=1024 live=[5,7]
// CHECK-NEXT:  %7 bigc.matmul : offset=[[L:[0-9]+]] size=1024 live=[6,7]
// CHECK-NEXT:  %8 bigc.add : offset=[[L]] size=1024 live=[7,8]
module {
  bigc.param @e : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %e = bigc.get_param @e : tensor<16x4xf32>
    %x = bigc.embedding %e, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %r = bigc.reshape %x : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
    %g = bigc.gelu %x : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %m = bigc.matmul %r, %e {transpose_b} : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x16xf32>
    %m3 = bigc.reshape %m : (tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %h = bigc.gelu %m3 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %l = bigc.matmul %g, %e {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %s = bigc.add %l, %h : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %s, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Multi-result ops get one offset per result; parameters and optimizer
// states live over the whole step; adamw (no results) gets no offsets.
// CHECK-LABEL: memory-plan @train_step: instructions=7 buffers=16
// CHECK:       @w.exp_avg optimizer : offset={{[0-9]+}} size=16 live=[0,6]
// CHECK:       %y bigc.layernorm : offset={{[0-9]+}} size=256 live=[1,4]
// CHECK-NEXT:  %mean bigc.layernorm : offset={{[0-9]+}} size=64 live=[1,5]
// CHECK-NEXT:  %rstd bigc.layernorm : offset={{[0-9]+}} size=64 live=[1,5]
// CHECK:       %dw bigc.layernorm_grad : offset={{[0-9]+}} size=16 live=[5,6]

// ATTR-LABEL: bigc.param @w.exp_avg : tensor<4xf32> {bigc.offset =
// ATTR:       bigc.layernorm {{.*}}{bigc.offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>}
// ATTR:       bigc.layernorm_grad {{.*}}{bigc.offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>}
// ATTR-NEXT:  bigc.adamw %dw {beta1
module {
  bigc.param @w : tensor<4xf32> {init = "ones"}
  bigc.param @"w.exp_avg" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"w.exp_avg_sq" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @b : tensor<4xf32> {init = "zeros"}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4xf32>
    %b = bigc.get_param @b : tensor<4xf32>
    %x = bigc.fill {value = 0.5 : f64} : () -> tensor<2x8x4xf32>
    %y, %mean, %rstd = bigc.layernorm %x, %w, %b {eps = 1.0e-05 : f64} : (tensor<2x8x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
    %loss = bigc.cross_entropy %y, %targets : (tensor<2x8x4xf32>, tensor<2x8xi32>) -> tensor<f32>
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    %dy = bigc.cross_entropy_grad %y, %targets, %one : (tensor<2x8x4xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x4xf32>
    %dx, %dw, %db = bigc.layernorm_grad %dy, %x, %w, %mean, %rstd : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<4xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8x4xf32>, tensor<4xf32>, tensor<4xf32>)
    bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
    return %loss : tensor<f32>
  }
}

// -----

// expected-error @below {{the module has no func.func @train_step}}
module {
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %one : tensor<f32>
  }
}

// -----

// Two spaces (bigc-offload): @m and the staging tensor @s are on the host,
// %h (a bigc.copy to "host") too; each space has its own arena. Side-stream
// ops keep what they touch live until the bigc.wait that names their event:
// %g, read by the d2h copy (event 0), lives until the wait (instruction 5),
// not only until the copy (2), so the scale at 4 cannot take its place; %h
// likewise. The host param_copy (event 1) is never waited for: @s (role
// transfer, not persistent) lives from it (3) to the end of the step (7).
// Instructions: 0 embedding, 1 gelu, 2 copy, 3 param_copy, 4 scale, 5 wait,
// 6 matmul, 7 cross_entropy.
// Host arena: @m, @s and %h (256 each) are live together at 3: 768.
// CHECK-LABEL: memory-plan @train_step: instructions=8 buffers=11 arena={{[0-9]+}} lower_bound={{[0-9]+}} host_arena=768 host_lower_bound=768
// CHECK-NEXT:  @w param : offset={{[0-9]+}} size=256 live=[0,7]{{$}}
// CHECK-NEXT:  @m optimizer : offset={{[0-9]+}} size=256 live=[0,7] space=host
// CHECK-NEXT:  @s transfer : offset={{[0-9]+}} size=256 live=[3,7] space=host
// CHECK:       %1 bigc.embedding : offset=[[X:[0-9]+]] size=256 live=[0,4]{{$}}
// CHECK-NEXT:  %2 bigc.gelu : offset=[[G:[0-9]+]] size=256 live=[1,5]{{$}}
// CHECK-NEXT:  %3 bigc.copy : offset={{[0-9]+}} size=256 live=[2,5] space=host
// CHECK-NEXT:  %4 bigc.scale : offset=[[X]] size=256 live=[4,6]{{$}}

// ATTR-LABEL: bigc.param @m : tensor<2x8x4xf32> {bigc.offset =
// ATTR:       func.func @train_step({{.*}}) -> tensor<f32> attributes {bigc.arena_bytes = {{[0-9]+}} : i64, bigc.arg_offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}>, bigc.host_arena_bytes = 768 : i64, bigc.host_lower_bound_bytes = 768 : i64, bigc.lower_bound_bytes = {{[0-9]+}} : i64}
module {
  bigc.param @w : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  bigc.param @m : tensor<2x8x4xf32> {init = "zeros", role = "optimizer", bigc.space = "host"}
  bigc.param @s : tensor<2x8x4xf32> {init = "zeros", role = "transfer", bigc.space = "host"}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<16x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %g = bigc.gelu %x : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %h = bigc.copy %g {bigc.space = "host", bigc.stream = "d2h", bigc.event = 0 : i64} : tensor<2x8x4xf32>
    bigc.param_copy {from = @m, to = @s, bigc.stream = "host", bigc.event = 1 : i64}
    %y = bigc.scale %x {factor = 2.0 : f64} : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    bigc.wait {events = array<i64: 0>}
    %l = bigc.matmul %y, %w {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A stream runs its ops in order: the wait for event 1 (the second copy on
// "d2h") joins event 0 (the first copy) too, so %g, read by the first copy,
// is free after that wait (instruction 5), although no wait names event 0.
// Instructions: 0 embedding, 1 gelu, 2 copy (event 0), 3 scale, 4 copy
// (event 1), 5 wait {1}, 6 scale, 7 matmul, 8 cross_entropy.
// CHECK-LABEL: memory-plan @train_step: instructions=9
// CHECK:       %2 bigc.gelu : offset={{[0-9]+}} size=256 live=[1,5]{{$}}
// CHECK-NEXT:  %3 bigc.copy : offset={{[0-9]+}} size=256 live=[2,5] space=host
// CHECK-NEXT:  %4 bigc.scale : offset={{[0-9]+}} size=256 live=[3,6]{{$}}
// CHECK-NEXT:  %5 bigc.copy : offset={{[0-9]+}} size=256 live=[4,5] space=host
module {
  bigc.param @w : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<16x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %g = bigc.gelu %x : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %h = bigc.copy %g {bigc.space = "host", bigc.stream = "d2h", bigc.event = 0 : i64} : tensor<2x8x4xf32>
    %y = bigc.scale %x {factor = 2.0 : f64} : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %h2 = bigc.copy %y {bigc.space = "host", bigc.stream = "d2h", bigc.event = 1 : i64} : tensor<2x8x4xf32>
    bigc.wait {events = array<i64: 1>}
    %z = bigc.scale %y {factor = 2.0 : f64} : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %l = bigc.matmul %z, %w {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The loss's gradient takes the place of the logits, whose last use it is
// (the largest activation of a big vocabulary): dlogits %4 at the offset of
// logits %2. In the second function a scale reads the logits after the
// gradient, so the gradient gets its own buffer (and the scale takes the
// logits' place).
// Instructions: 0 embedding, 1 matmul, 2 cross_entropy, 3 fill (the seed),
// 4 cross_entropy_grad, 5 matmul (dx).
// CHECK-LABEL: memory-plan @train_step: instructions=6
// CHECK:       %2 bigc.matmul : offset=[[L:[0-9]+]] size=1024 live=[1,4]{{$}}
// CHECK:       %5 bigc.cross_entropy_grad : offset=[[L]] size=1024 live=[4,5]{{$}}
module {
  bigc.param @w : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<16x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %l = bigc.matmul %x, %w {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    %dl = bigc.cross_entropy_grad %l, %targets, %one : (tensor<2x8x16xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x16xf32>
    %dx = bigc.matmul %dl, %w : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> tensor<2x8x4xf32>
    return %loss : tensor<f32>
  }
}

// -----

// CHECK-LABEL: memory-plan @train_step: instructions=7
// CHECK:       %2 bigc.matmul : offset=[[L2:[0-9]+]] size=1024 live=[1,5]{{$}}
// CHECK-NOT:   cross_entropy_grad : offset=[[L2]] size
// CHECK:       %5 bigc.cross_entropy_grad : offset={{[0-9]+}} size=1024 live=[4,6]{{$}}
// CHECK-NEXT:  %6 bigc.scale : offset=[[L2]] size=1024 live=[5,6]{{$}}
module {
  bigc.param @w : tensor<16x4xf32> {init = "normal", std = 2.0e-02 : f64}
  func.func @train_step(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<16x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<2x8x4xf32>
    %l = bigc.matmul %x, %w {transpose_b} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    %dl = bigc.cross_entropy_grad %l, %targets, %one : (tensor<2x8x16xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x16xf32>
    %s = bigc.scale %l {factor = 2.0 : f64} : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %t = bigc.add %dl, %s : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    return %loss : tensor<f32>
  }
}
