// RUN: bigc-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule (docs/program-format.md, instruction table).

// -----

bigc.param @p : tensor<8xf32> {init = "uniform"}
// expected-error@-1 {{init must be "normal", "zeros", "ones", "fill" or "copy", got "uniform"}}

// -----

// expected-error@+1 {{std is only allowed with init = "normal"}}
bigc.param @p : tensor<8xf32> {init = "zeros", std = 0.02}

// -----

// expected-error@+1 {{std must be positive}}
bigc.param @p : tensor<8xf32> {init = "normal", std = 0.0}

// -----

// expected-error@+1 {{role must be "param", "master", "optimizer" or "transfer", got "grad"}}
bigc.param @p : tensor<8xf32> {init = "zeros", role = "grad"}

// -----

// expected-error@+1 {{type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
bigc.param @p : tensor<?xf32> {init = "zeros"}

// -----

func.func @f() {
  // expected-error@+1 {{'bigc.get_param' op symbol @nope does not name a bigc.param}}
  %w = bigc.get_param @nope : tensor<8xf32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
func.func @f() {
  // expected-error@+1 {{result type 'tensor<4xf32>' does not match the type 'tensor<8xf32>' of @p}}
  %w = bigc.get_param @p : tensor<4xf32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
bigc.param @m : tensor<8xf32> {init = "zeros", role = "optimizer"}
func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{exp_avg_sq @v does not name a bigc.param}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @v, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xf32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
bigc.param @m : tensor<4xf32> {init = "zeros", role = "optimizer"}
func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{exp_avg @m has shape [4] but the gradient has shape [8]}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @p, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xf32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{beta2 must be in [0, 1), got 1}}
  bigc.adamw %g {param = @p, exp_avg = @p, exp_avg_sq = @p, lr = 3.0e-4, beta1 = 0.9, beta2 = 1.0, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xf32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
func.func @f(%g: tensor<8xf32>, %n: tensor<f32>) {
  // expected-error@+1 {{a norm operand requires max_norm > 0}}
  bigc.adamw %g, %n {param = @p, exp_avg = @p, exp_avg_sq = @p, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xf32>, tensor<f32>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "zeros"}
func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{max_norm > 0 requires the norm operand}}
  bigc.adamw %g {param = @p, exp_avg = @p, exp_avg_sq = @p, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, max_norm = 1.0} : tensor<8xf32>
  return
}

// -----

func.func @f(%t: tensor<16xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{table must have rank 2 [V,C], got [16]}}
  %y = bigc.embedding %t, %ids : (tensor<16xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%t: tensor<16x8xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{result must have shape [2,3,8], got [2,3,4]}}
  %y = bigc.embedding %t, %ids : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<16x8xf32>, %ids: tensor<2x3xf32>) {
  // expected-error@+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer values}}
  %y = bigc.embedding %t, %ids : (tensor<16x8xf32>, tensor<2x3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%t: tensor<16x8xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{requires the same element type for its floating-point operands and results, got 'f32' and 'bf16'}}
  %y = bigc.embedding %t, %ids : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xbf16>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{dy must have shape [2,3,4], got [2,3,8]}}
  %t = bigc.embedding_grad %dy, %ids : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<16x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{result must have rank 2 [V,C], got [16]}}
  %t = bigc.embedding_grad %dy, %ids : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<16xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<6x8xf32>) {
  // expected-error@+1 {{contraction dimensions differ: op(a) is [4,8] and op(b) is [6,8]}}
  %c = bigc.matmul %a, %b : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<6x8xf32>) {
  // expected-error@+1 {{result must have shape [4,6], got [6,4]}}
  %c = bigc.matmul %a, %b {transpose_b} : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<6x4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x8x4xf32>, %b: tensor<8x6xf32>) {
  // expected-error@+1 {{transpose_a is not allowed when a has rank > 2 and b has rank 2}}
  %c = bigc.matmul %a, %b {transpose_a} : (tensor<2x8x4xf32>, tensor<8x6xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3x8xf32>, %b: tensor<8x6xf32>) {
  // expected-error@+1 {{result must have shape [2,3,6], got [6,6]}}
  %c = bigc.matmul %a, %b : (tensor<2x3x8xf32>, tensor<8x6xf32>) -> tensor<6x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3x8xf32>, %b: tensor<4x8x6xf32>) {
  // expected-error@+1 {{batched matmul requires equal leading dimensions, got [2,3,8] and [4,8,6]}}
  %c = bigc.matmul %a, %b : (tensor<2x3x8xf32>, tensor<4x8x6xf32>) -> tensor<2x3x6xf32>
  return
}

// -----

func.func @f(%a: tensor<3x8xf32>, %b: tensor<2x8x6xf32>) {
  // expected-error@+1 {{operand ranks 2 and 3 match no matmul form}}
  %c = bigc.matmul %a, %b : (tensor<3x8xf32>, tensor<2x8x6xf32>) -> tensor<2x3x6xf32>
  return
}

// -----

func.func @f(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{operand ranks 1 and 1 match no matmul form}}
  %c = bigc.matmul %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%a: tensor<4x8xi32>, %b: tensor<8x6xi32>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %c = bigc.matmul %a, %b : (tensor<4x8xi32>, tensor<8x6xi32>) -> tensor<4x6xi32>
  return
}

// -----

func.func @f(%a: tensor<?x8xf32>, %b: tensor<8x6xf32>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor}}
  %c = bigc.matmul %a, %b : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %c = bigc.add %a, %b : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xbf16>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %c = bigc.mul %a, %b : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %b: tensor<3xf32>) {
  // expected-error@+1 {{bias shape [3] must be a non-empty suffix of the input shape [2,3,8]}}
  %y = bigc.bias_add %x, %b : (tensor<2x3x8xf32>, tensor<3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{result must have shape [2,3,8], got [6,8]}}
  %y = bigc.bias_add %x, %b : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %y = bigc.scale %x {factor = 2.0} : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{requires attribute 'factor'}}
  %y = bigc.scale %x : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{result shape [2,8] must be a suffix of the input shape [2,3,8]}}
  %y = bigc.reduce_sum %x : (tensor<2x3x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f() {
  // expected-error@+1 {{result #0 must be statically shaped tensor}}
  %y = bigc.fill {value = 0.0} : () -> tensor<?xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{weight must have shape [8], got [4]}}
  %y:3 = bigc.layernorm %x, %w, %w : (tensor<2x3x8xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %b: tensor<3x8xf32>) {
  // expected-error@+1 {{bias must have shape [8], got [3,8]}}
  %y:3 = bigc.layernorm %x, %w, %b : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<3x8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{result mean must have shape [2,3], got [2,3,1]}}
  %y:3 = bigc.layernorm %x, %w, %w : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{eps must be positive}}
  %y:3 = bigc.layernorm %x, %w, %w {eps = 0.0} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %s: tensor<2x3xf32>) {
  // expected-error@+1 {{result dw must have shape [8], got [4]}}
  %d:3 = bigc.layernorm_grad %x, %x, %w, %s, %s : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3x8xf32>, tensor<4xf32>, tensor<8xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %dy: tensor<6x8xf32>, %w: tensor<8xf32>, %s: tensor<2x3xf32>) {
  // expected-error@+1 {{dy must have shape [2,3,8], got [6,8]}}
  %d:3 = bigc.layernorm_grad %dy, %x, %w, %s, %s : (tensor<6x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @f(%x: tensor<4xf32>, %dy: tensor<8xf32>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %d = bigc.gelu_grad %x, %dy : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %y = bigc.gelu %x : (tensor<4xf32>) -> tensor<4xbf16>
  return
}

// -----

func.func @f(%g: tensor<4xf32>, %u: tensor<4xf32>) {
  // expected-error@+1 {{approximate must be "tanh" or "none", got "sigmoid"}}
  %y = bigc.geglu %g, %u {approximate = "sigmoid"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>, %u: tensor<8xf32>) {
  // expected-error@+1 {{requires the same type for all operands and results}}
  %y = bigc.geglu %g, %u : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%qkv: tensor<2x3x24xf32>) {
  // expected-error@+1 {{C = 8 must be divisible by heads = 3}}
  %o, %l = bigc.attention %qkv {heads = 3} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x3xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<2x3x20xf32>) {
  // expected-error@+1 {{the last dimension of qkv (20) must be 3C, a multiple of 3}}
  %o, %l = bigc.attention %qkv {heads = 2} : (tensor<2x3x20xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<6x24xf32>) {
  // expected-error@+1 {{qkv must have rank 3 [B,T,3C], got [6,24]}}
  %o, %l = bigc.attention %qkv {heads = 2} : (tensor<6x24xf32>) -> (tensor<6x8xf32>, tensor<2x6xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<2x3x24xf32>) {
  // expected-error@+1 {{heads must be positive, got 0}}
  %o, %l = bigc.attention %qkv {heads = 0} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<2x3x24xf32>) {
  // expected-error@+1 {{result out must have shape [2,3,8], got [2,3,24]}}
  %o, %l = bigc.attention %qkv {heads = 2} : (tensor<2x3x24xf32>) -> (tensor<2x3x24xf32>, tensor<2x2x3xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<2x3x24xf32>) {
  // expected-error@+1 {{result lse must have shape [2,2,3], got [2,3,2]}}
  %o, %l = bigc.attention %qkv {heads = 2} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x2xf32>)
  return
}

// -----

func.func @f(%d: tensor<2x3x8xf32>, %qkv: tensor<2x3x24xf32>, %l: tensor<2x2x3xf32>) {
  // expected-error@+1 {{result dqkv must have shape [2,3,24], got [2,3,8]}}
  %dq = bigc.attention_grad %d, %qkv, %d, %l {heads = 2} : (tensor<2x3x8xf32>, tensor<2x3x24xf32>, tensor<2x3x8xf32>, tensor<2x2x3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%d: tensor<2x3x8xf32>, %qkv: tensor<2x3x24xf32>, %l: tensor<2x4x3xf32>) {
  // expected-error@+1 {{lse must have shape [2,2,3], got [2,4,3]}}
  %dq = bigc.attention_grad %d, %qkv, %d, %l {heads = 2} : (tensor<2x3x8xf32>, tensor<2x3x24xf32>, tensor<2x3x8xf32>, tensor<2x4x3xf32>) -> tensor<2x3x24xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{perm [0,0,1] is not a permutation of [0, 3)}}
  %y = bigc.transpose %x {perm = array<i64: 0, 0, 1>} : (tensor<2x3x8xf32>) -> tensor<2x2x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{perm has 2 entries but the input has rank 3}}
  %y = bigc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3x8xf32>) -> tensor<3x2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{result must have shape [2,8,3], got [3,8,2]}}
  %y = bigc.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x3x8xf32>) -> tensor<3x8x2xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{cannot reshape [2,3,8] (48 elements) to [6,7] (42 elements)}}
  %y = bigc.reshape %x : (tensor<2x3x8xf32>) -> tensor<6x7xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{result element type must equal the input's}}
  %y = bigc.reshape %x : (tensor<2x3x8xf32>) -> tensor<6x8xf16>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{dimension 1 of size 3 cannot be split into 2 equal parts}}
  %a, %b = bigc.split %x {axis = 1} : (tensor<2x3x8xf32>) -> (tensor<2x1x8xf32>, tensor<2x2x8xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{every result must have shape [2,3,4], got [2,3,8]}}
  %a, %b = bigc.split %x {axis = 2} : (tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{axis 3 is out of range for rank 3}}
  %a, %b = bigc.split %x {axis = 3} : (tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error@+1 {{inputs [2,3] and [3,3] differ outside the concatenation axis 1}}
  %y = bigc.concat %a, %b {axis = 1} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>) {
  // expected-error@+1 {{result must have shape [2,8], got [2,6]}}
  %y = bigc.concat %a, %b {axis = 1} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3x1xf32>) {
  // expected-error@+1 {{all inputs must have the same rank}}
  %y = bigc.concat %a, %b {axis = 0} : (tensor<2x3xf32>, tensor<2x3x1xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x16xf32>, %t: tensor<6xi32>) {
  // expected-error@+1 {{targets must have shape [2,3], got [6]}}
  %loss = bigc.cross_entropy %l, %t : (tensor<2x3x16xf32>, tensor<6xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x3x16xf32>, %t: tensor<2x3xi32>) {
  // expected-error@+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %loss = bigc.cross_entropy %l, %t : (tensor<2x3x16xf32>, tensor<2x3xi32>) -> tensor<1xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x16xf32>, %t: tensor<2x3xi32>, %d: tensor<f32>) {
  // expected-error@+1 {{result type 'tensor<2x3x16xbf16>' must equal the logits type 'tensor<2x3x16xf32>'}}
  %g = bigc.cross_entropy_grad %l, %t, %d : (tensor<2x3x16xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x16xbf16>
  return
}

// -----

func.func @f(%l: tensor<2x3x16xf32>, %t: tensor<2x4xi32>, %d: tensor<f32>) {
  // expected-error@+1 {{targets must have shape [2,3], got [2,4]}}
  %g = bigc.cross_entropy_grad %l, %t, %d : (tensor<2x3x16xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f() {
  // expected-error@+1 {{requires at least one input}}
  %n = bigc.global_norm : () -> tensor<f32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>) {
  // expected-error@+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %n = bigc.global_norm %g : (tensor<4xf32>) -> tensor<1xf32>
  return
}

// -----
// Version 2: mixed precision, loss scaling.

// expected-error@+1 {{init = "fill" requires a value attribute}}
bigc.param @s : tensor<f32> {init = "fill", role = "optimizer"}

// -----

// expected-error@+1 {{init = "copy" requires a source attribute}}
bigc.param @h : tensor<8xbf16> {init = "copy"}

// -----

// expected-error@+1 {{source "nope" does not name a bigc.param}}
bigc.param @h : tensor<8xbf16> {init = "copy", source = "nope"}

// -----

bigc.param @w : tensor<8xf32> {init = "ones", role = "master"}
// expected-error@+1 {{source "w" has shape [8], this copy has shape [4]}}
bigc.param @h : tensor<4xbf16> {init = "copy", source = "w"}

// -----

// expected-error@+1 {{a parameter of role "master" must be f32 (fp32 master weights and optimizer states; AdamW moments may be bf16), got 'bf16'}}
bigc.param @w : tensor<8xbf16> {init = "ones", role = "master"}

// -----

func.func @f(%x: tensor<2x3x8xbf16>, %w: tensor<8xbf16>) {
  // expected-error@+1 {{result mean must be f32 (statistics are kept in fp32 in every precision), got 'bf16'}}
  %y:3 = bigc.layernorm %x, %w, %w : (tensor<2x3x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<2x3x8xbf16>, tensor<2x3xbf16>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf16>, %w: tensor<8xf32>) {
  // expected-error@+1 {{requires the same element type for its floating-point operands and results, got 'f16' and 'f32'}}
  %y:3 = bigc.layernorm %x, %w, %w : (tensor<2x3x8xf16>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf16>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%qkv: tensor<2x3x24xbf16>) {
  // expected-error@+1 {{result lse must be f32 (statistics are kept in fp32 in every precision), got 'bf16'}}
  %o, %l = bigc.attention %qkv {heads = 2 : i64} : (tensor<2x3x24xbf16>) -> (tensor<2x3x8xbf16>, tensor<2x2x3xbf16>)
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{result shape [8,4] must equal the input shape [4,8]}}
  %y = bigc.cast %x : (tensor<4x8xf32>) -> tensor<8x4xbf16>
  return
}

// -----

func.func @f(%x: tensor<4x8xi32>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %y = bigc.cast %x : (tensor<4x8xi32>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @f() {
  // expected-error@+1 {{requires at least one input}}
  %f = bigc.check_finite : () -> tensor<f32>
  return
}

// -----

func.func @f(%g: tensor<4xf16>) {
  // expected-error@+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %f = bigc.check_finite %g : (tensor<4xf16>) -> tensor<f16>
  return
}

// -----

bigc.param @s : tensor<f32> {init = "fill", value = 65536.0, role = "optimizer"}
bigc.param @g : tensor<2xf32> {init = "zeros", role = "optimizer"}
func.func @f(%found: tensor<f32>) {
  // expected-error@+1 {{good @g must be an f32 scalar (tensor<f32>), got 'tensor<2xf32>'}}
  bigc.loss_scale_update %found {scale = @s, good = @g, growth_interval = 10 : i64}
  return
}

// -----

bigc.param @s : tensor<f32> {init = "fill", value = 65536.0, role = "optimizer"}
bigc.param @g : tensor<f32> {init = "zeros", role = "optimizer"}
func.func @f(%found: tensor<f32>) {
  // expected-error@+1 {{backoff must be in (0, 1), got 2.0}}
  bigc.loss_scale_update %found {scale = @s, good = @g, backoff = 2.0}
  return
}

// -----

bigc.param @s : tensor<f32> {init = "fill", value = 65536.0, role = "optimizer"}
bigc.param @g : tensor<f32> {init = "zeros", role = "optimizer"}
func.func @f(%found: tensor<f32>) {
  // expected-error@+1 {{growth_interval must be >= 1, got 0}}
  bigc.loss_scale_update %found {scale = @s, good = @g, growth_interval = 0 : i64}
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "ones", role = "master"}
bigc.param @m : tensor<8xf16> {init = "zeros", role = "param"}
func.func @f(%g: tensor<8xbf16>) {
  // expected-error@+1 {{exp_avg @m must be f32 or bf16 (--optimizer-states), got 'f16'}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @m, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xbf16>
  return
}

// -----

// --optimizer-states bf16 keeps both moments bf16; one of each is refused.
bigc.param @p : tensor<8xf32> {init = "ones", role = "master"}
bigc.param @m : tensor<8xbf16> {init = "zeros", role = "optimizer"}
bigc.param @v : tensor<8xf32> {init = "zeros", role = "optimizer"}
func.func @f(%g: tensor<8xbf16>) {
  // expected-error@+1 {{exp_avg and exp_avg_sq must have one type, got 'bf16' and 'f32'}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @v, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xbf16>
  return
}

// -----

// expected-error@+1 {{a parameter of role "optimizer" must be f32 (fp32 master weights and optimizer states; AdamW moments may be bf16), got 'f16'}}
bigc.param @o : tensor<8xf16> {init = "zeros", role = "optimizer"}

// -----

bigc.param @p : tensor<8xbf16> {init = "ones"}
bigc.param @h : tensor<8xbf16> {init = "copy", source = "p"}
bigc.param @m : tensor<8xf32> {init = "zeros", role = "optimizer"}
func.func @f(%g: tensor<8xbf16>) {
  // expected-error@+1 {{with half = @h, param @p must be the f32 master, got 'bf16'}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @m, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, half = @h} : tensor<8xbf16>
  return
}

// -----

bigc.param @p : tensor<8xf32> {init = "ones", role = "master"}
bigc.param @h : tensor<4xbf16> {init = "zeros"}
bigc.param @m : tensor<8xf32> {init = "zeros", role = "optimizer"}
func.func @f(%g: tensor<8xbf16>) {
  // expected-error@+1 {{half @h has shape [4] but the gradient has shape [8]}}
  bigc.adamw %g {param = @p, exp_avg = @m, exp_avg_sq = @m, lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, half = @h} : tensor<8xbf16>
  return
}

// -----

// bigc-fuse's fused norms follow the rules of the ops they replace (one shared verifier).
func.func @f(%x: tensor<2x3x8xf32>, %r: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{r must have shape [2,3,8], got [2,8]}}
  %s:4 = bigc.add_layernorm %x, %r, %w, %w : (tensor<2x3x8xf32>, tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{eps must be positive}}
  %s:3 = bigc.add_rmsnorm %x, %x, %w {eps = 0.0} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xbf16>, %w: tensor<8xbf16>, %s: tensor<2x3xbf16>) {
  // expected-error@+1 {{rstd must be f32}}
  %d:2 = bigc.rmsnorm_grad_add %x, %x, %w, %s, %x : (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>, tensor<8xbf16>, tensor<2x3xbf16>, tensor<2x3x8xbf16>) -> (tensor<2x3x8xbf16>, tensor<8xbf16>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %s: tensor<2x3xf32>) {
  // expected-error@+1 {{result db must have shape [8], got [4]}}
  %d:3 = bigc.layernorm_grad_add %x, %x, %w, %s, %s, %x : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<4xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{inv_freq must have 1 to head_dim / 2 = 2 values (the rotated pairs), got 3}}
  %y = bigc.rope %x {head_dim = 4 : i64, inv_freq = array<f64: 1.0, 0.1, 0.01>} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>) {
  // expected-error@+1 {{cap must be a finite number > 0, got 0.000000e+00}}
  %y = bigc.softcap %x {cap = 0.0 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x8xf32>, %kv: tensor<2x3x4xf32>) {
  // expected-error@+1 {{softcap must be >= 0 (0: none), got -1.000000e+00}}
  %o, %l = bigc.gqa_attention %q, %kv, %kv {heads = 2 : i64, kv_heads = 1 : i64, softcap = -1.0 : f64} : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %r: tensor<4x8xf32>, %gu: tensor<4x10x8xf32>, %d: tensor<4x8x5xf32>) {
  // expected-error@+1 {{top_k must be in [1, 4] (the experts), got 5}}
  %y = bigc.moe %x, %r, %gu, %d {top_k = 5 : i64} : (tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4x10x8xf32>, tensor<4x8x5xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x8xf32>, %r: tensor<4x8xf32>, %gu: tensor<4x10x8xf32>, %d: tensor<4x8x4xf32>) {
  // expected-error@+1 {{down must have shape [4,8,5], got [4,8,4]}}
  %y = bigc.moe %x, %r, %gu, %d {top_k = 2 : i64} : (tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4x10x8xf32>, tensor<4x8x4xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @ring_step(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  // expected-error@+1 {{step must be in [0, cp) (0 with a2a), got 2}}
  %o, %l = bigc.ring_attention %q, %k, %v {heads = 4 : i64, kv_heads = 2 : i64, cp = 2 : i64, step = 2 : i64}
      : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x4x8xf32>)
  return %o : tensor<2x8x64xf32>
}

// -----

func.func @ring_acc(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  // expected-error@+1 {{acc must be (out, lse) of the earlier blocks, or nothing}}
  %o, %l = bigc.ring_attention %q, %k, %v, %q {heads = 4 : i64, kv_heads = 2 : i64, cp = 2 : i64, step = 1 : i64}
      : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x4x8xf32>)
  return %o : tensor<2x8x64xf32>
}

// -----

func.func @rope_cp_odd(%x: tensor<2x7x64xf32>) -> tensor<2x7x64xf32> {
  // expected-error@+1 {{cp must be >= 1 over an even number of tokens (two chunks), got cp = 2 over 7}}
  %y = bigc.rope %x {head_dim = 16 : i64, inv_freq = array<f64: 1.0, 0.1>, cp = 2 : i64} : (tensor<2x7x64xf32>) -> tensor<2x7x64xf32>
  return %y : tensor<2x7x64xf32>
}
