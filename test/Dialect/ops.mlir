// RUN: bigc-opt %s | bigc-opt | FileCheck %s
// RUN: bigc-opt %s --mlir-print-op-generic | bigc-opt | FileCheck %s

// Round trip of every bigc op, in the textual forms the generator, the passes
// and the emitter rely on.

// CHECK: bigc.param @wte.weight : tensor<16x8xf32> {init = "normal", std = 2.000000e-02 : f64}
bigc.param @"wte.weight" : tensor<16x8xf32> {init = "normal", std = 0.02}
// CHECK: bigc.param @h.0.ln_1.weight : tensor<8xf32> {init = "ones"}
bigc.param @"h.0.ln_1.weight" : tensor<8xf32> {init = "ones"}
// CHECK: bigc.param @h.0.ln_1.weight.exp_avg : tensor<8xf32> {init = "zeros", role = "optimizer"}
bigc.param @"h.0.ln_1.weight.exp_avg" : tensor<8xf32> {init = "zeros", role = "optimizer"}
// CHECK: bigc.param @h.0.ln_1.weight.exp_avg_sq : tensor<8xf32> {init = "zeros", role = "optimizer"}
bigc.param @"h.0.ln_1.weight.exp_avg_sq" : tensor<8xf32> {init = "zeros", role = "optimizer"}
// CHECK: bigc.param @b16 : tensor<4x8xbf16> {init = "zeros"}
bigc.param @b16 : tensor<4x8xbf16> {init = "zeros", role = "param"}

// CHECK-LABEL: func.func @params
func.func @params(%g: tensor<8xf32>, %n: tensor<f32>) -> tensor<8xf32> {
  // CHECK: %[[W:.*]] = bigc.get_param @h.0.ln_1.weight : tensor<8xf32>
  %w = bigc.get_param @"h.0.ln_1.weight" : tensor<8xf32>
  // CHECK: bigc.get_param @b16 : tensor<4x8xbf16>
  %h = bigc.get_param @b16 : tensor<4x8xbf16>
  // CHECK: bigc.adamw %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, eps = 1.000000e-08 : f64, exp_avg = @h.0.ln_1.weight.exp_avg, exp_avg_sq = @h.0.ln_1.weight.exp_avg_sq, lr = 3.000000e-04 : f64, param = @h.0.ln_1.weight, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
  bigc.adamw %g {param = @"h.0.ln_1.weight", exp_avg = @"h.0.ln_1.weight.exp_avg", exp_avg_sq = @"h.0.ln_1.weight.exp_avg_sq", lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0} : tensor<8xf32>
  // CHECK: bigc.adamw %{{.*}}, %{{.*}} {{{.*}}max_norm = 1.000000e+00 : f64{{.*}}} : tensor<8xf32>, tensor<f32>
  bigc.adamw %g, %n {param = @"h.0.ln_1.weight", exp_avg = @"h.0.ln_1.weight.exp_avg", exp_avg_sq = @"h.0.ln_1.weight.exp_avg_sq", lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, max_norm = 1.0} : tensor<8xf32>, tensor<f32>
  // CHECK: return %[[W]]
  return %w : tensor<8xf32>
}

// Version 2: fp32 masters, 16-bit compute copies, dynamic loss scaling.
// CHECK: bigc.param @m.w : tensor<8xf32> {init = "ones", role = "master"}
bigc.param @"m.w" : tensor<8xf32> {init = "ones", role = "master"}
// CHECK: bigc.param @m.w.half : tensor<8xf16> {init = "copy", source = "m.w"}
bigc.param @"m.w.half" : tensor<8xf16> {init = "copy", source = "m.w"}
// CHECK: bigc.param @loss_scale : tensor<f32> {init = "fill", role = "optimizer", value = 6.553600e+04 : f64}
bigc.param @loss_scale : tensor<f32> {init = "fill", value = 65536.0, role = "optimizer"}
// CHECK: bigc.param @loss_scale_good : tensor<f32> {init = "zeros", role = "optimizer"}
bigc.param @loss_scale_good : tensor<f32> {init = "zeros", role = "optimizer"}

// CHECK-LABEL: func.func @mixed
func.func @mixed(%x: tensor<8xf32>, %g: tensor<8xf16>, %gb: tensor<4x8xbf16>, %n: tensor<f32>) -> tensor<8xf16> {
  // CHECK: bigc.cast %{{.*}} : (tensor<8xf32>) -> tensor<8xf16>
  %h = bigc.cast %x : (tensor<8xf32>) -> tensor<8xf16>
  // CHECK: bigc.cast %{{.*}} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %up = bigc.cast %gb : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: %[[F:.*]] = bigc.check_finite %{{.*}}, %{{.*}} : (tensor<8xf16>, tensor<4x8xbf16>) -> tensor<f32>
  %found = bigc.check_finite %g, %gb : (tensor<8xf16>, tensor<4x8xbf16>) -> tensor<f32>
  %s = bigc.get_param @loss_scale : tensor<f32>
  // CHECK: bigc.adamw %{{.*}} unscale(%{{.*}}) skip_if(%[[F]]) {{{.*}}half = @m.w.half{{.*}}param = @m.w{{.*}}} : tensor<8xf16>
  bigc.adamw %g unscale(%s) skip_if(%found) {param = @"m.w", exp_avg = @"h.0.ln_1.weight.exp_avg", exp_avg_sq = @"h.0.ln_1.weight.exp_avg_sq", lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, half = @"m.w.half"} : tensor<8xf16>
  // CHECK: bigc.adamw %{{.*}}, %{{.*}} unscale(%{{.*}}) {{{.*}}max_norm = 1.000000e+00 : f64{{.*}}} : tensor<8xf16>, tensor<f32>
  bigc.adamw %g, %n unscale(%s) {param = @"m.w", exp_avg = @"h.0.ln_1.weight.exp_avg", exp_avg_sq = @"h.0.ln_1.weight.exp_avg_sq", lr = 3.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.0, max_norm = 1.0} : tensor<8xf16>, tensor<f32>
  // Defaults (growth_interval 2000, backoff 0.5, growth 2) are elided.
  // CHECK: bigc.loss_scale_update %[[F]] {backoff = 2.500000e-01 : f64, good = @loss_scale_good, growth_interval = 100 : i64, scale = @loss_scale}
  bigc.loss_scale_update %found {scale = @loss_scale, good = @loss_scale_good, growth_interval = 100 : i64, backoff = 0.25, growth = 2.0}
  // CHECK: %[[Y:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = bigc.layernorm {{.*}} : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>, tensor<4xf32>)
  %lw = bigc.fill {value = 1.0} : () -> tensor<8xbf16>
  %y, %mean, %rstd = bigc.layernorm %gb, %lw, %lw : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>, tensor<4xf32>)
  return %h : tensor<8xf16>
}

// CHECK-LABEL: func.func @compute
func.func @compute(%ids: tensor<2x3xi32>, %table: tensor<16x8xf32>,
                   %x: tensor<2x3x8xf32>, %w: tensor<8x24xf32>, %b: tensor<24xf32>,
                   %m1: tensor<4x8xf32>, %m2: tensor<8x6xf32>, %m3: tensor<6x8xf32>,
                   %ba: tensor<2x4x3x5xf32>, %bb: tensor<2x4x5x7xf32>,
                   %lnw: tensor<8xf32>, %qkv: tensor<2x3x24xf32>,
                   %logits: tensor<2x3x16xf32>, %bf: tensor<2x8xbf16>) {
  // CHECK: bigc.embedding %{{.*}}, %{{.*}} : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  %e = bigc.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.embedding_grad %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<16x8xf32>
  %de = bigc.embedding_grad %e, %ids : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<16x8xf32>
  // Form 1, with each transpose flag.
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %c1 = bigc.matmul %m1, %m2 : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} {transpose_b} : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x6xf32>
  %c2 = bigc.matmul %m1, %m3 {transpose_b} : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x6xf32>
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} {transpose_a} : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<6x6xf32>
  %c3 = bigc.matmul %m2, %m2 {transpose_a} : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<6x6xf32>
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} {transpose_a, transpose_b} : (tensor<8x6xf32>, tensor<4x8xf32>) -> tensor<6x4xf32>
  %c4 = bigc.matmul %m2, %m1 {transpose_a, transpose_b} : (tensor<8x6xf32>, tensor<4x8xf32>) -> tensor<6x4xf32>
  // Form 2 (linear layer).
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<8x24xf32>) -> tensor<2x3x24xf32>
  %h = bigc.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x24xf32>) -> tensor<2x3x24xf32>
  // Form 3 (batched).
  // CHECK: bigc.matmul %{{.*}}, %{{.*}} : (tensor<2x4x3x5xf32>, tensor<2x4x5x7xf32>) -> tensor<2x4x3x7xf32>
  %bm = bigc.matmul %ba, %bb : (tensor<2x4x3x5xf32>, tensor<2x4x5x7xf32>) -> tensor<2x4x3x7xf32>
  // CHECK: bigc.add %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %a = bigc.add %x, %e : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.bias_add %{{.*}}, %{{.*}} : (tensor<2x3x24xf32>, tensor<24xf32>) -> tensor<2x3x24xf32>
  %hb = bigc.bias_add %h, %b : (tensor<2x3x24xf32>, tensor<24xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.bias_add %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<3x8xf32>) -> tensor<2x3x8xf32>
  %s3 = bigc.reduce_sum %x : (tensor<2x3x8xf32>) -> tensor<3x8xf32>
  %hb2 = bigc.bias_add %x, %s3 : (tensor<2x3x8xf32>, tensor<3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.mul %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %mu = bigc.mul %x, %a : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.scale %{{.*}} {factor = 5.000000e-01 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %sc = bigc.scale %x {factor = 0.5} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.reduce_sum %{{.*}} : (tensor<2x3x24xf32>) -> tensor<24xf32>
  %rs = bigc.reduce_sum %hb : (tensor<2x3x24xf32>) -> tensor<24xf32>
  // CHECK: bigc.fill {value = 1.000000e+00 : f64} : () -> tensor<f32>
  %one = bigc.fill {value = 1.0} : () -> tensor<f32>
  // CHECK: bigc.fill {value = 0.000000e+00 : f64} : () -> tensor<2x8xbf16>
  %zb = bigc.fill {value = 0.0} : () -> tensor<2x8xbf16>
  // CHECK: %[[Y:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = bigc.layernorm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  %y, %mean, %rstd = bigc.layernorm %x, %lnw, %lnw : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  // CHECK: bigc.layernorm %{{.*}}, %{{.*}}, %{{.*}} {eps = {{.*}} : f64}
  %y2:3 = bigc.layernorm %x, %lnw, %lnw {eps = 1.0e-6 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  // CHECK: bigc.layernorm_grad %[[Y]], %{{.*}}, %{{.*}}, %[[MEAN]], %[[RSTD]] : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dx:3 = bigc.layernorm_grad %y, %x, %lnw, %mean, %rstd : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: bigc.gelu %{{.*}} : (tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  %g = bigc.gelu %hb : (tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.gelu_grad %{{.*}}, %{{.*}} : (tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  %dg = bigc.gelu_grad %hb, %g : (tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.geglu %{{.*}}, %{{.*}} : (tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  %gg = bigc.geglu %hb, %g : (tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.geglu_grad %{{.*}}, %{{.*}}, %{{.*}} {approximate = "none"} : (tensor<2x3x24xf32>, tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> (tensor<2x3x24xf32>, tensor<2x3x24xf32>)
  %dgg:2 = bigc.geglu_grad %hb, %g, %gg {approximate = "none"} : (tensor<2x3x24xf32>, tensor<2x3x24xf32>, tensor<2x3x24xf32>) -> (tensor<2x3x24xf32>, tensor<2x3x24xf32>)
  // CHECK: %[[OUT:.*]], %[[LSE:.*]] = bigc.attention %{{.*}} {heads = 2 : i64} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  %out, %lse = bigc.attention %qkv {heads = 2} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  // CHECK: bigc.attention_grad %{{.*}}, %{{.*}}, %[[OUT]], %[[LSE]] {heads = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x24xf32>, tensor<2x3x8xf32>, tensor<2x2x3xf32>) -> tensor<2x3x24xf32>
  %dqkv = bigc.attention_grad %out, %qkv, %out, %lse {heads = 2} : (tensor<2x3x8xf32>, tensor<2x3x24xf32>, tensor<2x3x8xf32>, tensor<2x2x3xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.transpose %{{.*}} {perm = array<i64: 0, 2, 1>} : (tensor<2x3x8xf32>) -> tensor<2x8x3xf32>
  %t = bigc.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x3x8xf32>) -> tensor<2x8x3xf32>
  // CHECK: bigc.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
  %r = bigc.reshape %x : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
  // CHECK: bigc.reshape %{{.*}} : (tensor<2x3xi32>) -> tensor<6xi32>
  %ri = bigc.reshape %ids : (tensor<2x3xi32>) -> tensor<6xi32>
  // CHECK: %{{.*}}:3 = bigc.split %{{.*}} {axis = 2 : i64} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  %q, %k, %v = bigc.split %qkv {axis = 2} : (tensor<2x3x24xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  // CHECK: bigc.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x24xf32>
  %cat = bigc.concat %q, %k, %v {axis = 2} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x24xf32>
  // CHECK: bigc.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<10x8xf32>
  %cat2 = bigc.concat %m1, %m3 {axis = 0} : (tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<10x8xf32>
  // CHECK: %[[LOSS:.*]] = bigc.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x3x16xf32>, tensor<2x3xi32>) -> tensor<f32>
  %loss = bigc.cross_entropy %logits, %ids : (tensor<2x3x16xf32>, tensor<2x3xi32>) -> tensor<f32>
  // CHECK: bigc.cross_entropy_grad %{{.*}}, %{{.*}}, %[[LOSS]] : (tensor<2x3x16xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x16xf32>
  %dl = bigc.cross_entropy_grad %logits, %ids, %loss : (tensor<2x3x16xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x16xf32>
  // CHECK: bigc.global_norm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<16x8xf32>, tensor<8xf32>, tensor<2x8xbf16>) -> tensor<f32>
  %n = bigc.global_norm %de, %lnw, %bf : (tensor<16x8xf32>, tensor<8xf32>, tensor<2x8xbf16>) -> tensor<f32>
  // Discardable attributes (bigc.phase) ride along in the attribute dictionary.
  // CHECK: bigc.gelu %{{.*}} {bigc.phase = "forward"}
  %gp = bigc.gelu %x {bigc.phase = "forward"} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return
}

// The LLaMA family's rotary embeddings: Hugging Face's halves (default) and interleaved pairs.
// CHECK-LABEL: func.func @rotary
func.func @rotary(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  // CHECK: bigc.rope %{{.*}} {head_dim = 4 : i64, inv_freq = array<f64: 1.000000e+00, 1.000000e-02>} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %a = bigc.rope %x {head_dim = 4 : i64, inv_freq = array<f64: 1.0, 0.01>} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.rope %{{.*}} {head_dim = 4 : i64, interleaved, inv_freq = array<f64: 1.000000e+00, 1.000000e-02>, inverse} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %b = bigc.rope %a {head_dim = 4 : i64, inv_freq = array<f64: 1.0, 0.01>, interleaved, inverse} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // A partial rotary (GPT-NeoX): one frequency, the first 2 of each head of 4 rotated.
  // CHECK: bigc.rope %{{.*}} {head_dim = 4 : i64, inv_freq = array<f64: 1.000000e+00>} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %c = bigc.rope %b {head_dim = 4 : i64, inv_freq = array<f64: 1.0>} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %c : tensor<2x3x8xf32>
}

// Gemma 2's soft caps: the attention's scores and the logits.
// CHECK-LABEL: func.func @softcaps
func.func @softcaps(%q: tensor<2x3x8xf32>, %kv: tensor<2x3x4xf32>) -> tensor<2x3x8xf32> {
  // CHECK: bigc.gqa_attention %{{.*}}, %{{.*}}, %{{.*}} {heads = 2 : i64, kv_heads = 1 : i64, softcap = 5.000000e+01 : f64, window = 2 : i64}
  %o, %l = bigc.gqa_attention %q, %kv, %kv {heads = 2 : i64, kv_heads = 1 : i64, window = 2 : i64, softcap = 50.0 : f64} : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x8xf32>, tensor<2x2x3xf32>)
  // CHECK: bigc.softcap %{{.*}} {cap = 3.000000e+01 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %y = bigc.softcap %o {cap = 30.0 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.softcap_grad %{{.*}}, %{{.*}} {cap = 3.000000e+01 : f64}
  %d = bigc.softcap_grad %y, %o {cap = 30.0 : f64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %d : tensor<2x3x8xf32>
}

// A mixture of experts (Mixtral's block) and its gradient.
// CHECK-LABEL: func.func @experts
func.func @experts(%x: tensor<2x3x8xf32>, %r: tensor<4x8xf32>, %gu: tensor<4x10x8xf32>, %d: tensor<4x8x5xf32>) -> tensor<2x3x8xf32> {
  // CHECK: bigc.moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {normalize, top_k = 2 : i64}
  %y = bigc.moe %x, %r, %gu, %d {top_k = 2 : i64, normalize} : (tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4x10x8xf32>, tensor<4x8x5xf32>) -> tensor<2x3x8xf32>
  // CHECK: bigc.moe_grad
  %dx, %dr, %dgu, %dd = bigc.moe_grad %y, %x, %r, %gu, %d {top_k = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4x10x8xf32>, tensor<4x8x5xf32>) -> (tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4x10x8xf32>, tensor<4x8x5xf32>)
  return %dx : tensor<2x3x8xf32>
}
