// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=none | FileCheck %s --check-prefix=NONE
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=selective | FileCheck %s --check-prefix=SEL
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=selective | FileCheck %s --check-prefix=SELN
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=full | FileCheck %s --check-prefix=FULL
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=full | FileCheck %s --check-prefix=FULLN
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute="policy=auto drop=2" | FileCheck %s --check-prefix=AUTO2
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute="policy=auto drop=-1" | FileCheck %s --check-prefix=AUTOALL
// The whole pipeline still verifies, schedules and plans after each policy.
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=full --bigc-schedule --bigc-memory-plan -o /dev/null
// RUN: bigc-opt %s --bigc-autodiff --bigc-recompute=policy=selective --bigc-schedule --bigc-memory-plan -o /dev/null
// Bad options: one located error, the pass fails.
// RUN: not bigc-opt %s --bigc-autodiff --bigc-recompute=policy=some 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not bigc-opt %s --bigc-recompute=policy=full 2>&1 | FileCheck %s --check-prefix=NOSTEP
// BAD: error: bigc-recompute: unknown policy 'some' (expected none, full, selective or auto)
// NOSTEP: error: bigc-recompute: the module has no func.func @train_step of one block (run bigc-autodiff first)

// A 2-layer GPT as `bigc gen gpt --layers 2 --hidden 8 --heads 2 --vocab 16 --seq 4 --batch 1`
// writes it (C = 8, B*T = 4 tokens; f32). Saved values per block: the two layernorms' y (128 B)
// with mean and rstd (16 B each), qkv (384 B), attention's out and lse, the residual after the
// attention (128 B), c_fc's output (512 B, gelu_grad reads it), gelu's output (512 B).

// none: nothing cloned; the module records the forward and backward FLOPs of the cost model.
// NONE: module attributes {bigc.recompute = {backward_flops = 36928 : i64, candidates = 19 : i64, clones = 0 : i64, dropped = 0 : i64, flops_added = 0 : i64, forward_flops = 19664 : i64, policy = "none", saved_bytes = 0 : i64}}
// NONE-NOT: bigc.recompute{{[},]}}

// selective: the layernorm and GELU outputs are dropped (their inputs are kept anyway); 2 x
// (160 + 160 + 512) + ln_f's 160 = 1824 bytes; 5 layernorms x 8 x 32 + 2 gelus x 12 x 128 =
// 4352 FLOPs.
// SEL: module attributes {bigc.recompute = {backward_flops = 36928 : i64, candidates = 19 : i64, clones = 7 : i64, dropped = 7 : i64, flops_added = 4352 : i64, forward_flops = 19664 : i64, policy = "selective", saved_bytes = 1824 : i64}}
// SEL-LABEL: func.func @train_step
// SEL: %[[X0:.*]] = bigc.bias_add %{{.*}}, %{{.*}} {bigc.phase = "forward"}
// SEL: bigc.layernorm %[[X0]], %{{.*}}, %{{.*}} {bigc.layer = 0 : i64, bigc.phase = "forward"}
// SEL: bigc.gelu %[[FC0:.*]] {bigc.layer = 0 : i64, bigc.phase = "forward"}
// SEL: bigc.gelu %[[FC1:.*]] {bigc.layer = 1 : i64, bigc.phase = "forward"}
// SEL: %{{.*}}, %{{.*}}, %{{.*}} = bigc.layernorm %[[RES:.*]], %{{.*}}, %{{.*}} {bigc.phase = "forward"}
// The LM head's dW is the first backward user of ln_f's output: the clone comes right before
// it, from the kept residual stream, and layernorm_grad reads the clone's mean and rstd.
// SEL: bigc.cross_entropy_grad
// SEL: %[[LNF:.*]], %[[LNFM:.*]], %[[LNFR:.*]] = bigc.layernorm %[[RES]], %{{.*}}, %{{.*}} {bigc.phase = "backward", bigc.recompute}
// SEL-NEXT: bigc.reshape %[[LNF]]
// SEL: bigc.layernorm_grad %{{.*}}, %[[RES]], %{{.*}}, %[[LNFM]], %[[LNFR]] {bigc.phase = "backward"}
// Block 1's GELU, recomputed from the kept c_fc output for c_proj's dW.
// SEL: %[[G1:.*]] = bigc.gelu %[[FC1]] {bigc.layer = 1 : i64, bigc.phase = "backward", bigc.recompute}
// SEL-NEXT: bigc.reshape %[[G1]]
// SEL: bigc.gelu_grad %[[FC1]]
// Block 0's ln_1, recomputed from the block's input before its first backward user (c_attn's
// dW); then its layernorm_grad reads the recomputed statistics.
// SEL: bigc.gelu %[[FC0]] {bigc.layer = 0 : i64, bigc.phase = "backward", bigc.recompute}
// SEL: %[[Y0:.*]], %[[M0:.*]], %[[R0:.*]] = bigc.layernorm %[[X0]], %{{.*}}, %{{.*}} {bigc.layer = 0 : i64, bigc.phase = "backward", bigc.recompute}
// SEL-NEXT: bigc.reshape %[[Y0]]
// SEL: bigc.layernorm_grad %{{.*}}, %[[X0]], %{{.*}}, %[[M0]], %[[R0]] {bigc.layer = 0 : i64, bigc.phase = "backward"}
// SEL-NEXT: bigc.add
// SEL-NEXT: bigc.reduce_sum
// SEL-NEXT: bigc.embedding_grad
// Exactly 7 clones (5 layernorms, 2 gelus); no matmul or attention is repeated.
// SELN-COUNT-7: bigc.recompute{{[},]}}
// SELN-NOT: bigc.recompute{{[},]}}
// SELN-NOT: bigc.matmul {{.*}}bigc.recompute
// SELN-NOT: bigc.attention {{.*}}bigc.recompute

// full: each block keeps only its input (x0 for block 0, block 0's output for block 1); the
// whole block is recomputed when its backward starts (11 ops), in forward order, from that
// input; the backward reads the clones. Outside the blocks (ln_f, the LM head) nothing changes.
// FULL: module attributes {bigc.recompute = {backward_flops = 36928 : i64, candidates = 19 : i64, clones = 22 : i64, dropped = 14 : i64, flops_added = 13744 : i64, forward_flops = 19664 : i64, policy = "full", saved_bytes = 4032 : i64}}
// FULL-LABEL: func.func @train_step
// FULL: bigc.layernorm %[[RES:.*]], %{{.*}}, %{{.*}} {bigc.layer = 1 : i64, bigc.phase = "forward"}
// FULL: bigc.cross_entropy_grad
// FULL: bigc.layernorm_grad
// FULL-NOT: bigc.recompute
// FULL: %[[Y:.*]], %{{.*}}, %{{.*}} = bigc.layernorm %[[RES]], {{.*}} {bigc.layer = 1 : i64, bigc.phase = "backward", bigc.recompute}
// FULL-NEXT: %[[MM:.*]] = bigc.matmul %[[Y]], {{.*}}bigc.recompute
// FULL-NEXT: %[[QKV:.*]] = bigc.bias_add %[[MM]], {{.*}}bigc.recompute
// FULL-NEXT: %[[OUT:.*]], %[[LSE:.*]] = bigc.attention %[[QKV]] {{.*}}bigc.recompute
// FULL-NEXT: bigc.matmul %[[OUT]], {{.*}}bigc.recompute
// FULL-NEXT: bigc.bias_add {{.*}}bigc.recompute
// FULL-NEXT: %[[R1:.*]] = bigc.add %[[RES]], {{.*}}bigc.recompute
// FULL-NEXT: bigc.layernorm %[[R1]], {{.*}}bigc.recompute
// FULL-NEXT: bigc.matmul {{.*}}bigc.recompute
// FULL-NEXT: %[[FC:.*]] = bigc.bias_add {{.*}}bigc.recompute
// FULL-NEXT: %[[G:.*]] = bigc.gelu %[[FC]] {{.*}}bigc.recompute
// FULL-NEXT: bigc.reshape %[[G]]
// FULL: bigc.gelu_grad %[[FC]]
// FULL: bigc.attention_grad %{{.*}}, %[[QKV]], %[[OUT]], %[[LSE]]
// FULLN-COUNT-22: bigc.recompute{{[},]}}
// FULLN-NOT: bigc.recompute{{[},]}}

// auto drop=2: the candidates are full's (14); layernorms save the most bytes per FLOP and
// come first, in program order: block 0's two layernorms are recomputed, nothing else.
// AUTO2: module attributes {bigc.recompute = {backward_flops = 36928 : i64, candidates = 14 : i64, clones = 2 : i64, dropped = 2 : i64, flops_added = 512 : i64, forward_flops = 19664 : i64, policy = "auto", saved_bytes = 320 : i64}}
// AUTO2: bigc.layernorm {{.*}}{bigc.layer = 0 : i64, bigc.phase = "backward", bigc.recompute}
// AUTO2: bigc.layernorm {{.*}}{bigc.layer = 0 : i64, bigc.phase = "backward", bigc.recompute}
// AUTO2-NOT: bigc.recompute{{[},]}}
// auto drop=-1: every candidate, i.e. full.
// AUTOALL: module attributes {bigc.recompute = {backward_flops = 36928 : i64, candidates = 14 : i64, clones = 22 : i64, dropped = 14 : i64, flops_added = 13744 : i64, forward_flops = 19664 : i64, policy = "auto", saved_bytes = 4032 : i64}}

module {
  bigc.param @"wte.weight" : tensor<16x8xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"wpe.weight" : tensor<4x8xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"h.0.ln_1.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"h.0.ln_1.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.0.attn.c_attn.weight" : tensor<8x24xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"h.0.attn.c_attn.bias" : tensor<24xf32> {init = "zeros"}
  bigc.param @"h.0.attn.c_proj.weight" : tensor<8x8xf32> {init = "normal", std = 0.01 : f64}
  bigc.param @"h.0.attn.c_proj.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.0.ln_2.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"h.0.ln_2.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.0.mlp.c_fc.weight" : tensor<8x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"h.0.mlp.c_fc.bias" : tensor<32xf32> {init = "zeros"}
  bigc.param @"h.0.mlp.c_proj.weight" : tensor<32x8xf32> {init = "normal", std = 0.01 : f64}
  bigc.param @"h.0.mlp.c_proj.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.1.ln_1.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"h.1.ln_1.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.1.attn.c_attn.weight" : tensor<8x24xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"h.1.attn.c_attn.bias" : tensor<24xf32> {init = "zeros"}
  bigc.param @"h.1.attn.c_proj.weight" : tensor<8x8xf32> {init = "normal", std = 0.01 : f64}
  bigc.param @"h.1.attn.c_proj.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.1.ln_2.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"h.1.ln_2.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"h.1.mlp.c_fc.weight" : tensor<8x32xf32> {init = "normal", std = 0.02 : f64}
  bigc.param @"h.1.mlp.c_fc.bias" : tensor<32xf32> {init = "zeros"}
  bigc.param @"h.1.mlp.c_proj.weight" : tensor<32x8xf32> {init = "normal", std = 0.01 : f64}
  bigc.param @"h.1.mlp.c_proj.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"ln_f.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"ln_f.bias" : tensor<8xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<1x4xi32>, %targets: tensor<1x4xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<16x8xf32>
    %wpe = bigc.get_param @"wpe.weight" : tensor<4x8xf32>
    %tok_emb = bigc.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
    %x0 = bigc.bias_add %tok_emb, %wpe : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x8xf32>
    // block 0
    %h0_ln1_w = bigc.get_param @"h.0.ln_1.weight" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_ln1_b = bigc.get_param @"h.0.ln_1.bias" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_ln1, %h0_ln1_mean, %h0_ln1_rstd = bigc.layernorm %x0, %h0_ln1_w, %h0_ln1_b {bigc.layer = 0 : i64, eps = 1.0e-05 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32>)
    %h0_qkv_w = bigc.get_param @"h.0.attn.c_attn.weight" {bigc.layer = 0 : i64} : tensor<8x24xf32>
    %h0_qkv_b = bigc.get_param @"h.0.attn.c_attn.bias" {bigc.layer = 0 : i64} : tensor<24xf32>
    %h0_qkv_mm = bigc.matmul %h0_ln1, %h0_qkv_w {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8x24xf32>) -> tensor<1x4x24xf32>
    %h0_qkv = bigc.bias_add %h0_qkv_mm, %h0_qkv_b {bigc.layer = 0 : i64} : (tensor<1x4x24xf32>, tensor<24xf32>) -> tensor<1x4x24xf32>
    %h0_attn, %h0_lse = bigc.attention %h0_qkv {bigc.layer = 0 : i64, heads = 2 : i64} : (tensor<1x4x24xf32>) -> (tensor<1x4x8xf32>, tensor<1x2x4xf32>)
    %h0_attn_proj_w = bigc.get_param @"h.0.attn.c_proj.weight" {bigc.layer = 0 : i64} : tensor<8x8xf32>
    %h0_attn_proj_b = bigc.get_param @"h.0.attn.c_proj.bias" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_attn_proj_mm = bigc.matmul %h0_attn, %h0_attn_proj_w {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %h0_attn_proj = bigc.bias_add %h0_attn_proj_mm, %h0_attn_proj_b {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %h0_res1 = bigc.add %x0, %h0_attn_proj {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %h0_ln2_w = bigc.get_param @"h.0.ln_2.weight" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_ln2_b = bigc.get_param @"h.0.ln_2.bias" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_ln2, %h0_ln2_mean, %h0_ln2_rstd = bigc.layernorm %h0_res1, %h0_ln2_w, %h0_ln2_b {bigc.layer = 0 : i64, eps = 1.0e-05 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32>)
    %h0_fc_w = bigc.get_param @"h.0.mlp.c_fc.weight" {bigc.layer = 0 : i64} : tensor<8x32xf32>
    %h0_fc_b = bigc.get_param @"h.0.mlp.c_fc.bias" {bigc.layer = 0 : i64} : tensor<32xf32>
    %h0_fc_mm = bigc.matmul %h0_ln2, %h0_fc_w {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8x32xf32>) -> tensor<1x4x32xf32>
    %h0_fc = bigc.bias_add %h0_fc_mm, %h0_fc_b {bigc.layer = 0 : i64} : (tensor<1x4x32xf32>, tensor<32xf32>) -> tensor<1x4x32xf32>
    %h0_gelu = bigc.gelu %h0_fc {bigc.layer = 0 : i64} : (tensor<1x4x32xf32>) -> tensor<1x4x32xf32>
    %h0_mlp_proj_w = bigc.get_param @"h.0.mlp.c_proj.weight" {bigc.layer = 0 : i64} : tensor<32x8xf32>
    %h0_mlp_proj_b = bigc.get_param @"h.0.mlp.c_proj.bias" {bigc.layer = 0 : i64} : tensor<8xf32>
    %h0_mlp_proj_mm = bigc.matmul %h0_gelu, %h0_mlp_proj_w {bigc.layer = 0 : i64} : (tensor<1x4x32xf32>, tensor<32x8xf32>) -> tensor<1x4x8xf32>
    %h0_mlp_proj = bigc.bias_add %h0_mlp_proj_mm, %h0_mlp_proj_b {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %h0_res2 = bigc.add %h0_res1, %h0_mlp_proj {bigc.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    // block 1
    %h1_ln1_w = bigc.get_param @"h.1.ln_1.weight" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_ln1_b = bigc.get_param @"h.1.ln_1.bias" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_ln1, %h1_ln1_mean, %h1_ln1_rstd = bigc.layernorm %h0_res2, %h1_ln1_w, %h1_ln1_b {bigc.layer = 1 : i64, eps = 1.0e-05 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32>)
    %h1_qkv_w = bigc.get_param @"h.1.attn.c_attn.weight" {bigc.layer = 1 : i64} : tensor<8x24xf32>
    %h1_qkv_b = bigc.get_param @"h.1.attn.c_attn.bias" {bigc.layer = 1 : i64} : tensor<24xf32>
    %h1_qkv_mm = bigc.matmul %h1_ln1, %h1_qkv_w {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<8x24xf32>) -> tensor<1x4x24xf32>
    %h1_qkv = bigc.bias_add %h1_qkv_mm, %h1_qkv_b {bigc.layer = 1 : i64} : (tensor<1x4x24xf32>, tensor<24xf32>) -> tensor<1x4x24xf32>
    %h1_attn, %h1_lse = bigc.attention %h1_qkv {bigc.layer = 1 : i64, heads = 2 : i64} : (tensor<1x4x24xf32>) -> (tensor<1x4x8xf32>, tensor<1x2x4xf32>)
    %h1_attn_proj_w = bigc.get_param @"h.1.attn.c_proj.weight" {bigc.layer = 1 : i64} : tensor<8x8xf32>
    %h1_attn_proj_b = bigc.get_param @"h.1.attn.c_proj.bias" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_attn_proj_mm = bigc.matmul %h1_attn, %h1_attn_proj_w {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %h1_attn_proj = bigc.bias_add %h1_attn_proj_mm, %h1_attn_proj_b {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %h1_res1 = bigc.add %h0_res2, %h1_attn_proj {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %h1_ln2_w = bigc.get_param @"h.1.ln_2.weight" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_ln2_b = bigc.get_param @"h.1.ln_2.bias" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_ln2, %h1_ln2_mean, %h1_ln2_rstd = bigc.layernorm %h1_res1, %h1_ln2_w, %h1_ln2_b {bigc.layer = 1 : i64, eps = 1.0e-05 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32>)
    %h1_fc_w = bigc.get_param @"h.1.mlp.c_fc.weight" {bigc.layer = 1 : i64} : tensor<8x32xf32>
    %h1_fc_b = bigc.get_param @"h.1.mlp.c_fc.bias" {bigc.layer = 1 : i64} : tensor<32xf32>
    %h1_fc_mm = bigc.matmul %h1_ln2, %h1_fc_w {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<8x32xf32>) -> tensor<1x4x32xf32>
    %h1_fc = bigc.bias_add %h1_fc_mm, %h1_fc_b {bigc.layer = 1 : i64} : (tensor<1x4x32xf32>, tensor<32xf32>) -> tensor<1x4x32xf32>
    %h1_gelu = bigc.gelu %h1_fc {bigc.layer = 1 : i64} : (tensor<1x4x32xf32>) -> tensor<1x4x32xf32>
    %h1_mlp_proj_w = bigc.get_param @"h.1.mlp.c_proj.weight" {bigc.layer = 1 : i64} : tensor<32x8xf32>
    %h1_mlp_proj_b = bigc.get_param @"h.1.mlp.c_proj.bias" {bigc.layer = 1 : i64} : tensor<8xf32>
    %h1_mlp_proj_mm = bigc.matmul %h1_gelu, %h1_mlp_proj_w {bigc.layer = 1 : i64} : (tensor<1x4x32xf32>, tensor<32x8xf32>) -> tensor<1x4x8xf32>
    %h1_mlp_proj = bigc.bias_add %h1_mlp_proj_mm, %h1_mlp_proj_b {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %h1_res2 = bigc.add %h1_res1, %h1_mlp_proj {bigc.layer = 1 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    // head
    %lnf_w = bigc.get_param @"ln_f.weight" : tensor<8xf32>
    %lnf_b = bigc.get_param @"ln_f.bias" : tensor<8xf32>
    %lnf, %lnf_mean, %lnf_rstd = bigc.layernorm %h1_res2, %lnf_w, %lnf_b {eps = 1.0e-05 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32>)
    %logits = bigc.matmul %lnf, %wte {transpose_b} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<1x4x16xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
