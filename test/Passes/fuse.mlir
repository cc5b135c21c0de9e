// RUN: bigc-opt %s -split-input-file --bigc-autodiff --bigc-fuse | FileCheck %s
// RUN: bigc-opt %s -split-input-file --bigc-autodiff --bigc-mixed-precision=precision=bf16 --bigc-fuse | FileCheck %s --check-prefix=BF16
// RUN: not bigc-opt %s -split-input-file --bigc-fuse 2>&1 | FileCheck %s --check-prefix=NOSTEP
// NOSTEP: error: bigc-fuse: no @train_step (run bigc-autodiff first)

// One pre-norm block: x -> ln -> fc (bias, GELU) -> proj -> s = x + proj -> ln -> tied head.
// Forward: the GELU takes the bias (bias_gelu keeps the biased value for the backward), the
// residual add is taken by the final layernorm (add_layernorm: s, y, mean, rstd). The first
// layernorm reads the embedding, not an add: it stays.
// CHECK-LABEL: func.func @train_step
// CHECK:       %[[Y:.*]], %{{.*}}, %{{.*}} = bigc.layernorm %[[X:[^,]*]], %{{.*}}, %{{.*}} {bigc.phase = "forward"
// CHECK:       %[[H:.*]] = bigc.matmul %[[Y]], %{{.*}} {bigc.phase = "forward"}
// CHECK-NOT:   bigc.bias_add
// CHECK:       %[[PRE:.*]], %[[G:.*]] = bigc.bias_gelu %[[H]], %{{.*}} {bigc.phase = "forward"} : (tensor<2x3x16xf32>, tensor<16xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x16xf32>)
// CHECK:       %[[P:.*]] = bigc.matmul %[[G]], %{{.*}} {bigc.phase = "forward"}
// CHECK-NOT:   bigc.add %
// CHECK:       %[[S:.*]], %[[Y2:.*]], %[[M2:.*]], %[[R2:.*]] = bigc.add_layernorm %[[X]], %[[P]], %{{.*}}, %{{.*}} {bigc.phase = "forward"} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
// Backward: the final layernorm's dx is read by the residual's two branches (no single add: it
// stays); GELU's gradient takes the bias gradient (the column sum); the first layernorm's dx is
// added to the residual gradient (layernorm_grad_add, at the layernorm_grad's place).
// CHECK:       %[[DX2:.*]], %{{.*}}, %{{.*}} = bigc.layernorm_grad %{{.*}}, %[[S]], %{{.*}}, %[[M2]], %[[R2]] {bigc.phase = "backward"}
// CHECK:       %[[DPRE:.*]], %[[DB:.*]] = bigc.gelu_grad_bias %[[PRE]], %{{.*}} {bigc.phase = "backward"} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>)
// CHECK-NOT:   bigc.reduce_sum %[[DPRE]]
// CHECK:       %[[DXR:.*]], %{{.*}}, %{{.*}} = bigc.layernorm_grad_add %{{.*}}, %[[X]], %{{.*}}, %{{.*}}, %{{.*}}, %[[DX2]] {bigc.phase = "backward"} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK:       bigc.embedding_grad %[[DXR]]
// CHECK:       bigc.adamw %[[DB]]
// bf16: the same fusions on 16-bit tensors, statistics f32.
// BF16:        bigc.bias_gelu {{.*}} : (tensor<2x3x16xbf16>, tensor<16xbf16>) -> (tensor<2x3x16xbf16>, tensor<2x3x16xbf16>)
// BF16:        bigc.add_layernorm {{.*}} -> (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>, tensor<2x3xf32>, tensor<2x3xf32>)
// BF16:        bigc.gelu_grad_bias {{.*}} -> (tensor<2x3x16xbf16>, tensor<16xbf16>)
// BF16:        bigc.layernorm_grad_add {{.*}} -> (tensor<2x3x8xbf16>, tensor<8xbf16>, tensor<8xbf16>)
module {
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  bigc.param @"ln.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"ln.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"fc.weight" : tensor<8x16xf32> {init = "normal", std = 0.02}
  bigc.param @"fc.bias" : tensor<16xf32> {init = "zeros"}
  bigc.param @"proj.weight" : tensor<16x8xf32> {init = "normal", std = 0.02}
  bigc.param @"lnf.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"lnf.bias" : tensor<8xf32> {init = "zeros"}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %lw = bigc.get_param @"ln.weight" : tensor<8xf32>
    %lb = bigc.get_param @"ln.bias" : tensor<8xf32>
    %y, %m, %r = bigc.layernorm %x, %lw, %lb : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
    %fw = bigc.get_param @"fc.weight" : tensor<8x16xf32>
    %fb = bigc.get_param @"fc.bias" : tensor<16xf32>
    %h = bigc.matmul %y, %fw : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
    %hb = bigc.bias_add %h, %fb : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
    %g = bigc.gelu %hb : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
    %pw = bigc.get_param @"proj.weight" : tensor<16x8xf32>
    %p = bigc.matmul %g, %pw : (tensor<2x3x16xf32>, tensor<16x8xf32>) -> tensor<2x3x8xf32>
    %s = bigc.add %x, %p : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %fw2 = bigc.get_param @"lnf.weight" : tensor<8xf32>
    %fb2 = bigc.get_param @"lnf.bias" : tensor<8xf32>
    %y2, %m2, %r2 = bigc.layernorm %s, %fw2, %fb2 : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
    %logits = bigc.matmul %y2, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// LLaMA's norms: s = x + a read by rmsnorm -> add_rmsnorm; rmsnorm_grad's dx added to the residual
// gradient -> rmsnorm_grad_add. exact GELU (approximate = "none") keeps its form.
// CHECK-LABEL: func.func @train_step
// CHECK:       %[[PRE:.*]], %{{.*}} = bigc.bias_gelu %{{.*}}, %{{.*}} {approximate = "none", bigc.phase = "forward"}
// CHECK:       %[[S:.*]], %{{.*}}, %[[R:.*]] = bigc.add_rmsnorm %{{.*}}, %{{.*}}, %{{.*}} {bigc.phase = "forward"} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3xf32>)
// CHECK:       bigc.gelu_grad_bias %[[PRE]], %{{.*}} {approximate = "none", bigc.phase = "backward"}
// CHECK:       bigc.rmsnorm_grad_add {{.*}} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>)
module {
  bigc.param @"wte.weight" : tensor<32x8xf32> {init = "normal", std = 0.02}
  bigc.param @"n.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"fc.weight" : tensor<8x8xf32> {init = "normal", std = 0.02}
  bigc.param @"fc.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"nf.weight" : tensor<8xf32> {init = "ones"}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<32x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
    %nw = bigc.get_param @"n.weight" : tensor<8xf32>
    %y, %r = bigc.rmsnorm %x, %nw {eps = 1.0e-06 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>)
    %fw = bigc.get_param @"fc.weight" : tensor<8x8xf32>
    %fb = bigc.get_param @"fc.bias" : tensor<8xf32>
    %h = bigc.matmul %y, %fw : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
    %hb = bigc.bias_add %h, %fb : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %g = bigc.gelu %hb {approximate = "none"} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %s = bigc.add %x, %g : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %nfw = bigc.get_param @"nf.weight" : tensor<8xf32>
    %y2, %r2 = bigc.rmsnorm %s, %nfw {eps = 1.0e-06 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3xf32>)
    %logits = bigc.matmul %y2, %wte {transpose_b} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x3x32xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
