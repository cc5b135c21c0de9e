// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff="grad-clip=1.0 lr=1e-3" | FileCheck %s --check-prefix=CLIP
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff="weight-decay=0.25" | FileCheck %s --check-prefix=WD
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff -mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// An MLP-like function: tied embedding (wte read once, used by the embedding
// and the LM head), a linear layer, GELU, a second use of fc.weight through a
// transpose, a residual add.

// CHECK-LABEL: bigc.param @fc.weight : tensor<8x16xf32> {init = "normal", std = 2.000000e-02 : f64}
// CHECK-NEXT:  bigc.param @fc.weight.exp_avg : tensor<8x16xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @fc.weight.exp_avg_sq : tensor<8x16xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @fc.bias : tensor<16xf32> {init = "zeros"}
// CHECK-NEXT:  bigc.param @fc.bias.exp_avg : tensor<16xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @fc.bias.exp_avg_sq : tensor<16xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @wte.weight : tensor<32x8xf32>
// CHECK-NEXT:  bigc.param @wte.weight.exp_avg : tensor<32x8xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @wte.weight.exp_avg_sq : tensor<32x8xf32> {init = "zeros", role = "optimizer"}
// CHECK-NOT:   func.func @forward
// CHECK:       func.func @train_step(%[[TOK:.*]]: tensor<2x3xi32>, %[[TGT:.*]]: tensor<2x3xi32>) -> tensor<f32>
// Forward, unchanged but for the phase.
// CHECK:       %[[WTE:.*]] = bigc.get_param @wte.weight {bigc.phase = "forward"}
// CHECK:       %[[X:.*]] = bigc.embedding %[[WTE]], %[[TOK]] {bigc.phase = "forward"}
// CHECK:       %[[W:.*]] = bigc.get_param @fc.weight {bigc.phase = "forward"}
// CHECK:       %[[B:.*]] = bigc.get_param @fc.bias {bigc.phase = "forward"}
// CHECK:       %[[HB:.*]] = bigc.bias_add
// CHECK:       %[[G:.*]] = bigc.gelu %[[HB]]
// CHECK:       %[[WT:.*]] = bigc.transpose %[[W]]
// CHECK:       %[[R:.*]] = bigc.add
// CHECK:       %[[LOGITS:.*]] = bigc.matmul %[[R]], %[[WTE]] {bigc.phase = "forward", transpose_b}
// CHECK:       %[[LOSS:.*]] = bigc.cross_entropy %[[LOGITS]], %[[TGT]] {bigc.phase = "forward"}
// Backward, seeded with 1.
// CHECK:       %[[ONE:.*]] = bigc.fill {bigc.phase = "backward", value = 1.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT:  %[[DLOGITS:.*]] = bigc.cross_entropy_grad %[[LOGITS]], %[[TGT]], %[[ONE]] {bigc.phase = "backward"}
// LM head (form 2, transpose_b): dr = dlogits @ wte; dwte = flat(dlogits)^T @ flat(r).
// CHECK-NEXT:  %[[DR:.*]] = bigc.matmul %[[DLOGITS]], %[[WTE]] {bigc.phase = "backward"} : (tensor<2x3x32xf32>, tensor<32x8xf32>) -> tensor<2x3x8xf32>
// CHECK-NEXT:  %[[R2:.*]] = bigc.reshape %[[R]] {{.*}} -> tensor<6x8xf32>
// CHECK-NEXT:  %[[DL2:.*]] = bigc.reshape %[[DLOGITS]] {{.*}} -> tensor<6x32xf32>
// CHECK-NEXT:  %[[DWTE1:.*]] = bigc.matmul %[[DL2]], %[[R2]] {bigc.phase = "backward", transpose_a} : (tensor<6x32xf32>, tensor<6x8xf32>) -> tensor<32x8xf32>
// Second linear (form 2): dg = dr @ wt^T; dwt = flat(g)^T @ flat(dr).
// CHECK-NEXT:  %[[DG:.*]] = bigc.matmul %[[DR]], %[[WT]] {bigc.phase = "backward", transpose_b}
// CHECK-NEXT:  %[[G2:.*]] = bigc.reshape %[[G]]
// CHECK-NEXT:  %[[DR2:.*]] = bigc.reshape %[[DR]]
// CHECK-NEXT:  %[[DWT:.*]] = bigc.matmul %[[G2]], %[[DR2]] {bigc.phase = "backward", transpose_a} : (tensor<6x16xf32>, tensor<6x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT:  %[[DW1:.*]] = bigc.transpose %[[DWT]] {bigc.phase = "backward", perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:  %[[DHB:.*]] = bigc.gelu_grad %[[HB]], %[[DG]] {bigc.phase = "backward"}
// Bias: db = reduce_sum(dy).
// CHECK-NEXT:  %[[DB:.*]] = bigc.reduce_sum %[[DHB]] {bigc.phase = "backward"} : (tensor<2x3x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:  %[[DX1:.*]] = bigc.matmul %[[DHB]], %[[W]] {bigc.phase = "backward", transpose_b}
// CHECK-NEXT:  %[[X2:.*]] = bigc.reshape %[[X]]
// CHECK-NEXT:  %[[DHB2:.*]] = bigc.reshape %[[DHB]]
// CHECK-NEXT:  %[[DW2:.*]] = bigc.matmul %[[X2]], %[[DHB2]] {bigc.phase = "backward", transpose_a} : (tensor<6x8xf32>, tensor<6x16xf32>) -> tensor<8x16xf32>
// x is used twice (residual, linear): its gradients add up.
// CHECK-NEXT:  %[[DX:.*]] = bigc.add %[[DR]], %[[DX1]] {bigc.phase = "backward"}
// fc.weight is used twice (linear, transpose): its gradients add up.
// CHECK-NEXT:  %[[DW:.*]] = bigc.add %[[DW1]], %[[DW2]] {bigc.phase = "backward"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:  %[[DWTE2:.*]] = bigc.embedding_grad %[[DX]], %[[TOK]] {bigc.phase = "backward"} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<32x8xf32>
// The tied embedding: embedding_grad + LM-head gradient.
// CHECK-NEXT:  %[[DWTE:.*]] = bigc.add %[[DWTE1]], %[[DWTE2]] {bigc.phase = "backward"} : (tensor<32x8xf32>, tensor<32x8xf32>) -> tensor<32x8xf32>
// One adamw per parameter, in declaration order; no weight decay for rank 1.
// CHECK-NEXT:  bigc.adamw %[[DW]] {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, bigc.phase = "optimizer", eps = 1.000000e-08 : f64, exp_avg = @fc.weight.exp_avg, exp_avg_sq = @fc.weight.exp_avg_sq, lr = 3.000000e-04 : f64, param = @fc.weight, weight_decay = 1.000000e-01 : f64} : tensor<8x16xf32>
// CHECK-NEXT:  bigc.adamw %[[DB]] {{{.*}}param = @fc.bias, weight_decay = 0.000000e+00 : f64} : tensor<16xf32>
// CHECK-NEXT:  bigc.adamw %[[DWTE]] {{{.*}}param = @wte.weight, weight_decay = 1.000000e-01 : f64} : tensor<32x8xf32>
// CHECK-NEXT:  return %[[LOSS]] : tensor<f32>

// With grad-clip: one global_norm over every parameter gradient, fed to each adamw.
// CLIP-LABEL: func.func @train_step
// CLIP-NOT:   bigc.global_norm
// CLIP:       %[[N:.*]] = bigc.global_norm %[[G0:.*]], %[[G1:.*]], %[[G2:.*]] {bigc.phase = "optimizer"} : (tensor<8x16xf32>, tensor<16xf32>, tensor<32x8xf32>) -> tensor<f32>
// CLIP-NEXT:  bigc.adamw %[[G0]], %[[N]] {{{.*}}lr = 1.000000e-03 : f64, max_norm = 1.000000e+00 : f64, param = @fc.weight, weight_decay = 1.000000e-01 : f64} : tensor<8x16xf32>, tensor<f32>
// CLIP-NEXT:  bigc.adamw %[[G1]], %[[N]] {{{.*}}max_norm = 1.000000e+00 : f64, param = @fc.bias, weight_decay = 0.000000e+00 : f64} : tensor<16xf32>, tensor<f32>
// CLIP-NEXT:  bigc.adamw %[[G2]], %[[N]] {{{.*}}max_norm = 1.000000e+00 : f64, param = @wte.weight, weight_decay = 1.000000e-01 : f64} : tensor<32x8xf32>, tensor<f32>
// CLIP-NEXT:  return

// WD-LABEL: func.func @train_step
// WD:       bigc.adamw {{.*}}param = @fc.weight, weight_decay = 2.500000e-01 : f64}
// WD:       bigc.adamw {{.*}}param = @fc.bias, weight_decay = 0.000000e+00 : f64}

module {
  bigc.param @"fc.weight" : tensor<8x16xf32> {init = "normal", std = 0.02}
  bigc.param @"fc.bias" : tensor<16xf32> {init = "zeros"}
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %w = bigc.get_param @"fc.weight" : tensor<8x16xf32>
    %b = bigc.get_param @"fc.bias" : tensor<16xf32>
    %h = bigc.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
    %hb = bigc.bias_add %h, %b : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
    %g = bigc.gelu %hb : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
    %wt = bigc.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %o = bigc.matmul %g, %wt : (tensor<2x3x16xf32>, tensor<16x8xf32>) -> tensor<2x3x8xf32>
    %r = bigc.add %o, %x : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %logits = bigc.matmul %r, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A tiny GPT-like block: wte + wpe, pre-LN attention and MLP with residuals,
// an LM head tied to wte read through a second get_param. Backward ops keep
// the forward op's location.

// CHECK-LABEL: bigc.param @g.wte : tensor<16x8xf32>
// CHECK:       func.func @train_step(%[[TOK:.*]]: tensor<2x4xi32>, %[[TGT:.*]]: tensor<2x4xi32>)
// CHECK:       %[[WTE:.*]] = bigc.get_param @g.wte
// CHECK:       %[[X0:.*]] = bigc.bias_add %{{.*}}, %[[WPE:.*]] {bigc.phase = "forward"} : (tensor<2x4x8xf32>, tensor<4x8xf32>)
// CHECK:       %[[LN1W:.*]] = bigc.get_param @g.ln_1.weight
// CHECK:       %[[H1:.*]], %[[M1:.*]], %[[R1:.*]] = bigc.layernorm %[[X0]], %[[LN1W]]
// CHECK:       %[[QKV:.*]] = bigc.bias_add
// CHECK:       %[[ATT:.*]], %[[LSE:.*]] = bigc.attention %[[QKV]] {bigc.phase = "forward", heads = 2 : i64}
// CHECK:       %[[F1:.*]] = bigc.bias_add {{.*}} -> tensor<2x4x32xf32>
// CHECK:       %[[GE:.*]] = bigc.gelu %[[F1]]
// CHECK:       %[[WTE2:.*]] = bigc.get_param @g.wte
// CHECK:       bigc.cross_entropy
// CHECK:       bigc.fill {bigc.phase = "backward", value = 1.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT:  bigc.cross_entropy_grad {{.*}}
// CHECK-NEXT:  %[[DX2:.*]] = bigc.matmul %{{.*}}, %[[WTE2]]
// CHECK:       %[[DWTE_HEAD:.*]] = bigc.matmul {{.*}} {bigc.phase = "backward", transpose_a} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK:       %[[DBM:.*]] = bigc.reduce_sum %[[DX2]] {bigc.phase = "backward"} : (tensor<2x4x8xf32>) -> tensor<8xf32>
// CHECK:       %[[DGE:.*]] = bigc.matmul %[[DX2]], %{{.*}} {bigc.phase = "backward", transpose_b} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
// CHECK:       %[[DF1:.*]] = bigc.gelu_grad %[[F1]], %[[DGE]] {bigc.phase = "backward"}
// CHECK:       %[[DBF:.*]] = bigc.reduce_sum %[[DF1]] {{.*}} -> tensor<32xf32>
// CHECK:       %[[DATT:.*]] = bigc.matmul %{{.*}}, %{{.*}} {bigc.phase = "backward", transpose_b} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK:       %[[DQKV:.*]] = bigc.attention_grad %[[DATT]], %[[QKV]], %[[ATT]], %[[LSE]] {bigc.phase = "backward", heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32>) -> tensor<2x4x24xf32>
// CHECK-NEXT:  %[[DBA:.*]] = bigc.reduce_sum %[[DQKV]] {{.*}} -> tensor<24xf32>
// CHECK-NEXT:  %[[DH1:.*]] = bigc.matmul %[[DQKV]]
// CHECK:       %[[DX:.*]], %[[DLNW:.*]], %[[DLNB:.*]] = bigc.layernorm_grad %[[DH1]], %[[X0]], %[[LN1W]], %[[M1]], %[[R1]] {bigc.phase = "backward"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT:  %[[DX0:.*]] = bigc.add %{{.*}}, %[[DX]] {bigc.phase = "backward"}
// Position embedding added with bias_add: its gradient sums over the batch.
// CHECK-NEXT:  %[[DWPE:.*]] = bigc.reduce_sum %[[DX0]] {bigc.phase = "backward"} : (tensor<2x4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:  %[[DWTE_EMB:.*]] = bigc.embedding_grad %[[DX0]], %[[TOK]] {bigc.phase = "backward"} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x8xf32>
// Two reads of the tied wte: the gradients add up.
// CHECK-NEXT:  %[[DWTE:.*]] = bigc.add %[[DWTE_EMB]], %[[DWTE_HEAD]] {bigc.phase = "backward"} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT:  bigc.adamw %[[DWTE]] {{{.*}}param = @g.wte, weight_decay = 1.000000e-01 : f64} : tensor<16x8xf32>
// CHECK-NEXT:  bigc.adamw %[[DWPE]] {{{.*}}param = @g.wpe, weight_decay = 1.000000e-01 : f64} : tensor<4x8xf32>
// CHECK-NEXT:  bigc.adamw %[[DLNW]] {{{.*}}param = @g.ln_1.weight, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// CHECK-NEXT:  bigc.adamw %[[DLNB]] {{{.*}}param = @g.ln_1.bias, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// CHECK-NEXT:  bigc.adamw {{.*}}param = @g.c_attn.weight, weight_decay = 1.000000e-01 : f64} : tensor<8x24xf32>
// CHECK-NEXT:  bigc.adamw %[[DBA]] {{{.*}}param = @g.c_attn.bias, weight_decay = 0.000000e+00 : f64} : tensor<24xf32>
// CHECK-NEXT:  bigc.adamw {{.*}}param = @g.c_proj.weight, weight_decay = 1.000000e-01 : f64} : tensor<8x8xf32>
// CHECK-NEXT:  bigc.adamw {{.*}}param = @g.c_proj.bias, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// CHECK-NEXT:  bigc.adamw {{.*}}param = @g.c_fc.weight, weight_decay = 1.000000e-01 : f64} : tensor<8x32xf32>
// CHECK-NEXT:  bigc.adamw %[[DBF]] {{{.*}}param = @g.c_fc.bias, weight_decay = 0.000000e+00 : f64} : tensor<32xf32>
// CHECK-NEXT:  bigc.adamw {{.*}}param = @g.mlp_proj.weight, weight_decay = 1.000000e-01 : f64} : tensor<32x8xf32>
// CHECK-NEXT:  bigc.adamw %[[DBM]] {{{.*}}param = @g.mlp_proj.bias, weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// CHECK-NEXT:  return
// Backward ops carry the location of the forward op they differentiate.
// LOC-LABEL: func.func @train_step(%{{.*}}: tensor<2x4xi32> loc({{.*}}), %{{.*}}: tensor<2x4xi32> loc({{.*}})) -> tensor<f32> {
// LOC:       bigc.fill {bigc.phase = "backward", value = 1.000000e+00 : f64} : () -> tensor<f32> loc(#[[LOC_CE:loc[0-9]*]])
// LOC-NEXT:  bigc.cross_entropy_grad {{.*}} loc(#[[LOC_CE]])
// LOC:       bigc.gelu_grad {{.*}} loc(#[[LOC_GELU:loc[0-9]*]])
// LOC:       bigc.attention_grad {{.*}} loc(#[[LOC_ATT:loc[0-9]*]])
// LOC:       bigc.layernorm_grad {{.*}} loc(#[[LOC_LN:loc[0-9]*]])
// LOC:       bigc.embedding_grad {{.*}} loc(#[[LOC_EMB:loc[0-9]*]])
// LOC-DAG:   #[[LOC_EMB]] = loc("gpt.mlir":20:5)
// LOC-DAG:   #[[LOC_LN]] = loc("gpt.mlir":24:5)
// LOC-DAG:   #[[LOC_ATT]] = loc("gpt.mlir":29:5)
// LOC-DAG:   #[[LOC_GELU]] = loc("gpt.mlir":39:5)
// LOC-DAG:   #[[LOC_CE]] = loc("gpt.mlir":47:5)

module {
  bigc.param @"g.wte" : tensor<16x8xf32> {init = "normal", std = 0.02}
  bigc.param @"g.wpe" : tensor<4x8xf32> {init = "normal", std = 0.01}
  bigc.param @"g.ln_1.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"g.ln_1.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"g.c_attn.weight" : tensor<8x24xf32> {init = "normal", std = 0.02}
  bigc.param @"g.c_attn.bias" : tensor<24xf32> {init = "zeros"}
  bigc.param @"g.c_proj.weight" : tensor<8x8xf32> {init = "normal", std = 0.02}
  bigc.param @"g.c_proj.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"g.c_fc.weight" : tensor<8x32xf32> {init = "normal", std = 0.02}
  bigc.param @"g.c_fc.bias" : tensor<32xf32> {init = "zeros"}
  bigc.param @"g.mlp_proj.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  bigc.param @"g.mlp_proj.bias" : tensor<8xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"g.wte" : tensor<16x8xf32>
    %wpe = bigc.get_param @"g.wpe" : tensor<4x8xf32>
    %tok = bigc.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32> loc("gpt.mlir":20:5)
    %x0 = bigc.bias_add %tok, %wpe : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
    %ln1w = bigc.get_param @"g.ln_1.weight" : tensor<8xf32>
    %ln1b = bigc.get_param @"g.ln_1.bias" : tensor<8xf32>
    %h1, %m1, %r1 = bigc.layernorm %x0, %ln1w, %ln1b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>) loc("gpt.mlir":24:5)
    %wa = bigc.get_param @"g.c_attn.weight" : tensor<8x24xf32>
    %ba = bigc.get_param @"g.c_attn.bias" : tensor<24xf32>
    %qkv0 = bigc.matmul %h1, %wa : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %qkv = bigc.bias_add %qkv0, %ba : (tensor<2x4x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
    %att, %lse = bigc.attention %qkv {heads = 2} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>) loc("gpt.mlir":29:5)
    %wp = bigc.get_param @"g.c_proj.weight" : tensor<8x8xf32>
    %bp = bigc.get_param @"g.c_proj.bias" : tensor<8xf32>
    %p0 = bigc.matmul %att, %wp : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %p = bigc.bias_add %p0, %bp : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %x1 = bigc.add %x0, %p : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %wf = bigc.get_param @"g.c_fc.weight" : tensor<8x32xf32>
    %bf = bigc.get_param @"g.c_fc.bias" : tensor<32xf32>
    %f0 = bigc.matmul %x1, %wf : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %f1 = bigc.bias_add %f0, %bf : (tensor<2x4x32xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
    %g = bigc.gelu %f1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32> loc("gpt.mlir":39:5)
    %wm = bigc.get_param @"g.mlp_proj.weight" : tensor<32x8xf32>
    %bm = bigc.get_param @"g.mlp_proj.bias" : tensor<8xf32>
    %m0 = bigc.matmul %g, %wm : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %m = bigc.bias_add %m0, %bm : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %x2 = bigc.add %x1, %m : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %wte2 = bigc.get_param @"g.wte" : tensor<16x8xf32>
    %logits = bigc.matmul %x2, %wte2 {transpose_b} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32> loc("gpt.mlir":47:5)
    return %loss : tensor<f32>
  }
}

// -----

// The other differentiable ops: split -> concat (zeros for an unused part),
// concat -> split, scale, mul, reshape, reduce_sum -> bias_add of zeros,
// form 1 and form 3 matmuls.

// CHECK-LABEL: bigc.param @o.w : tensor<4x6xf32>
// CHECK:       func.func @train_step
// CHECK:       %[[W:.*]] = bigc.get_param @o.w
// CHECK:       %[[A:.*]]:3 = bigc.split %[[W]] {axis = 1 : i64, bigc.phase = "forward"}
// CHECK:       %[[C:.*]] = bigc.concat %[[A]]#1, %[[A]]#0 {axis = 1 : i64, bigc.phase = "forward"}
// CHECK:       %[[S:.*]] = bigc.scale %[[C]] {bigc.phase = "forward", factor = 5.000000e-01 : f64}
// CHECK:       %[[MU:.*]] = bigc.mul %[[S]], %[[C]]
// CHECK:       %[[MM:.*]] = bigc.matmul %[[MU]], %[[MU]] {bigc.phase = "forward", transpose_a}
// CHECK:       %[[BA:.*]] = bigc.reshape %[[MM]] {{.*}} -> tensor<1x4x4xf32>
// CHECK:       %[[BM:.*]] = bigc.matmul %[[BA]], %[[BA]] {{.*}} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// CHECK:       %[[RS:.*]] = bigc.reduce_sum %[[BM]]
// CHECK:       bigc.fill {bigc.phase = "backward", value = 1.000000e+00 : f64}
// CHECK:       %[[Z:.*]] = bigc.fill {bigc.phase = "backward", value = 0.000000e+00 : f64} : () -> tensor<1x4x4xf32>
// CHECK-NEXT:  %[[DBM:.*]] = bigc.bias_add %[[Z]], %{{.*}} {bigc.phase = "backward"} : (tensor<1x4x4xf32>, tensor<4x4xf32>) -> tensor<1x4x4xf32>
// Form 3 (batched, no transposes): da = dc b^T, db = a^T dc.
// CHECK-NEXT:  %[[DBA1:.*]] = bigc.matmul %[[DBM]], %[[BA]] {bigc.phase = "backward", transpose_b}
// CHECK-NEXT:  %[[DBA2:.*]] = bigc.matmul %[[BA]], %[[DBM]] {bigc.phase = "backward", transpose_a}
// CHECK-NEXT:  %[[DBA:.*]] = bigc.add %[[DBA1]], %[[DBA2]]
// CHECK-NEXT:  %[[DMM:.*]] = bigc.reshape %[[DBA]] {bigc.phase = "backward"} : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
// Form 1 with transpose_a (c = a^T b): da = b dc^T, db = a dc.
// CHECK-NEXT:  %[[DMU1:.*]] = bigc.matmul %[[MU]], %[[DMM]] {bigc.phase = "backward", transpose_b}
// CHECK-NEXT:  %[[DMU2:.*]] = bigc.matmul %[[MU]], %[[DMM]] {bigc.phase = "backward"}
// CHECK-NEXT:  %[[DMU:.*]] = bigc.add %[[DMU1]], %[[DMU2]]
// CHECK-NEXT:  %[[DS:.*]] = bigc.mul %[[DMU]], %[[C]]
// CHECK-NEXT:  %[[DC1:.*]] = bigc.mul %[[DMU]], %[[S]]
// CHECK-NEXT:  %[[DC2:.*]] = bigc.scale %[[DS]] {bigc.phase = "backward", factor = 5.000000e-01 : f64}
// CHECK-NEXT:  %[[DC:.*]] = bigc.add %[[DC1]], %[[DC2]]
// CHECK-NEXT:  %[[DP:.*]]:2 = bigc.split %[[DC]] {axis = 1 : i64, bigc.phase = "backward"} : (tensor<4x4xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>)
// CHECK-NEXT:  %[[Z2:.*]] = bigc.fill {bigc.phase = "backward", value = 0.000000e+00 : f64} : () -> tensor<4x2xf32>
// CHECK-NEXT:  %[[DW:.*]] = bigc.concat %[[DP]]#1, %[[DP]]#0, %[[Z2]] {axis = 1 : i64, bigc.phase = "backward"} : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:  bigc.adamw %[[DW]] {{.*}} : tensor<4x6xf32>

module {
  bigc.param @"o.w" : tensor<4x6xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x2xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @"o.w" : tensor<4x6xf32>
    %a:3 = bigc.split %w {axis = 1} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
    %c = bigc.concat %a#1, %a#0 {axis = 1} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x4xf32>
    %s = bigc.scale %c {factor = 0.5} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %mu = bigc.mul %s, %c : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %mm = bigc.matmul %mu, %mu {transpose_a} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %ba = bigc.reshape %mm : (tensor<4x4xf32>) -> tensor<1x4x4xf32>
    %bm = bigc.matmul %ba, %ba : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
    %rs = bigc.reduce_sum %bm : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %rs, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A parameter that does not reach the loss gets no optimizer update.

// CHECK-LABEL: bigc.param @u.used
// CHECK:       bigc.param @u.unused : tensor<4xf32> {init = "zeros"}
// CHECK-NOT:   @u.unused.exp_avg
// CHECK:       bigc.adamw {{.*}}param = @u.used
// CHECK-NOT:   bigc.adamw
// CHECK:       return
module {
  bigc.param @"u.used" : tensor<4x4xf32> {init = "normal", std = 0.02}
  // expected-warning@+1 {{parameter does not contribute to the loss}}
  bigc.param @"u.unused" : tensor<4xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @"u.used" : tensor<4x4xf32>
    %loss = bigc.cross_entropy %w, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// expected-error@+1 {{bigc-autodiff: the module has no func.func @forward}}
module {
  func.func @main(%tokens: tensor<4xi32>) {
    return
  }
}

// -----

module {
  // expected-error@+1 {{bigc-autodiff: @forward must return one scalar loss of type tensor<f32>, got 'tensor<4xf32>'}}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<4xf32> {
    %x = bigc.fill {value = 1.0} : () -> tensor<4xf32>
    return %x : tensor<4xf32>
  }
}

// -----

module {
  bigc.param @w : tensor<4x4xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    // expected-error@+1 {{'bigc.gelu_grad' op is not differentiable}}
    %g = bigc.gelu_grad %w, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %g, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module {
  bigc.param @w : tensor<4x4xf32> {init = "zeros"}
  bigc.param @b : tensor<4xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %b = bigc.get_param @b : tensor<4xf32>
    // expected-error@+1 {{the mean and rstd results of layernorm have no gradient}}
    %y, %m, %r = bigc.layernorm %w, %b, %b : (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>)
    %x = bigc.bias_add %y, %m : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %x, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module {
  bigc.param @w : tensor<4x4xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %v = bigc.get_param @w : tensor<4x4xf32>
    %a:2 = bigc.split %w {axis = 1} : (tensor<4x4xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>)
    // expected-error@+1 {{has no gradient: its inputs are of unequal sizes}}
    %c = bigc.concat %a#0, %v {axis = 1} : (tensor<4x2xf32>, tensor<4x4xf32>) -> tensor<4x6xf32>
    %l = bigc.matmul %c, %c {transpose_b} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %l, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module {
  bigc.param @w : tensor<4x4xf32> {init = "zeros"}
  // expected-error@+1 {{the optimizer state symbol @"w.exp_avg" already exists}}
  bigc.param @"w.exp_avg" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %loss = bigc.cross_entropy %w, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// GeGLU (Gemma's MLP): its gradient is one geglu_grad with the same GELU form, giving the gate's and
// the up projection's gradients.
// CHECK:       bigc.geglu %[[GATE:[0-9]+]], %[[UP:[0-9]+]] {approximate = "none", bigc.phase = "forward"}
// CHECK:       %[[DG:.*]], %[[DU:.*]] = bigc.geglu_grad %[[GATE]], %[[UP]], %{{.*}} {approximate = "none", bigc.phase = "backward"}
// CHECK-DAG:   bigc.matmul %[[DU]], %{{.*}} {bigc.phase = "backward", transpose_a}
// CHECK-DAG:   bigc.matmul %[[DG]], %{{.*}} {bigc.phase = "backward", transpose_a}
module {
  bigc.param @g : tensor<4x8xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @u : tensor<4x8xf32> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %x = bigc.get_param @g : tensor<4x8xf32>
    %g = bigc.get_param @g : tensor<4x8xf32>
    %u = bigc.get_param @u : tensor<4x8xf32>
    %a = bigc.matmul %x, %g {transpose_b} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
    %b = bigc.matmul %x, %u {transpose_b} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
    %y = bigc.geglu %a, %b {approximate = "none"} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %loss = bigc.cross_entropy %y, %targets : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Rotary embeddings: the gradient is the inverse rotation in the same layout (interleaved pairs).
// CHECK:       bigc.rope %{{.*}} {bigc.phase = "forward", head_dim = 4 : i64, interleaved, inv_freq = array<f64: 1.000000e+00, 1.000000e-02>}
// CHECK:       bigc.rope %{{.*}} {bigc.phase = "backward", head_dim = 4 : i64, interleaved, inv_freq = array<f64: 1.000000e+00, 1.000000e-02>, inverse}
module {
  bigc.param @w : tensor<4x2x8xf32> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<4x2xi32>, %targets: tensor<4x2xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x2x8xf32>
    %r = bigc.rope %w {head_dim = 4 : i64, inv_freq = array<f64: 1.0, 0.01>, interleaved} : (tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
    %loss = bigc.cross_entropy %r, %targets : (tensor<4x2x8xf32>, tensor<4x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
