// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-mixed-precision | FileCheck %s
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-mixed-precision="precision=fp16 loss-scale=1024 growth-interval=10" | FileCheck %s --check-prefix=FP16
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff="grad-clip=1.0" --bigc-mixed-precision="precision=fp16" | FileCheck %s --check-prefix=CLIP
// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-autodiff --bigc-mixed-precision="precision=fp16" --bigc-schedule --bigc-test-print-memory-plan 2>&1 >/dev/null | FileCheck %s --check-prefix=PLAN
// RUN: not bigc-opt %s -split-input-file --bigc-autodiff --bigc-mixed-precision="precision=fp8" 2>&1 | FileCheck %s --check-prefix=BADP

// A tied embedding, a layernorm, an attention, a residual add, the LM head.

// Each weight: an fp32 master (same name and init) and a 16-bit compute copy
// initialised as its cast; the AdamW moments stay f32.
// CHECK-LABEL: module attributes {bigc.precision = "bf16"}
// CHECK-NEXT:  bigc.param @wte.weight : tensor<16x8xf32> {init = "normal", role = "master", std = 2.000000e-02 : f64}
// CHECK-NEXT:  bigc.param @wte.weight.half : tensor<16x8xbf16> {init = "copy", source = "wte.weight"}
// CHECK-NEXT:  bigc.param @wte.weight.exp_avg : tensor<16x8xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @wte.weight.exp_avg_sq : tensor<16x8xf32> {init = "zeros", role = "optimizer"}
// CHECK-NEXT:  bigc.param @ln.weight : tensor<8xf32> {init = "ones", role = "master"}
// CHECK-NEXT:  bigc.param @ln.weight.half : tensor<8xbf16> {init = "copy", source = "ln.weight"}
// CHECK:       bigc.param @attn.weight.half : tensor<8x24xbf16> {init = "copy", source = "attn.weight"}
// CHECK-NOT:   @loss_scale
// The step reads the compute copies; every activation is bf16 but the
// statistics (mean, rstd, lse) and the scalars (loss, seed).
// CHECK:       func.func @train_step(%[[TOK:.*]]: tensor<2x4xi32>, %[[TGT:.*]]: tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT:  %[[WTE:.*]] = bigc.get_param @wte.weight.half {bigc.phase = "forward"} : tensor<16x8xbf16>
// CHECK-NEXT:  bigc.embedding %[[WTE]], %[[TOK]] {{.*}} -> tensor<2x4x8xbf16>
// CHECK:       bigc.layernorm {{.*}} : (tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK:       bigc.matmul {{.*}} : (tensor<2x4x8xbf16>, tensor<8x24xbf16>) -> tensor<2x4x24xbf16>
// CHECK-NEXT:  bigc.attention {{.*}} : (tensor<2x4x24xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x2x4xf32>)
// CHECK:       %[[LOSS:.*]] = bigc.cross_entropy {{.*}} : (tensor<2x4x16xbf16>, tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT:  %[[SEED:.*]] = bigc.fill {bigc.phase = "backward", value = 1.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT:  bigc.cross_entropy_grad {{.*}}, %[[SEED]] {{.*}} -> tensor<2x4x16xbf16>
// CHECK:       bigc.attention_grad {{.*}} : (tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xbf16>, tensor<2x2x4xf32>) -> tensor<2x4x24xbf16>
// CHECK:       %{{.*}}, %[[DW:.*]], %[[DB:.*]] = bigc.layernorm_grad {{.*}} -> (tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>)
// CHECK:       %[[DWTE:.*]] = bigc.add {{.*}} -> tensor<16x8xbf16>
// No loss scaling in bf16 (fp32's exponent range).
// CHECK-NOT:   bigc.check_finite
// The fp32 master is updated from the bf16 gradient, then cast into the copy.
// CHECK-NEXT:  bigc.adamw %[[DWTE]] {{{.*}}half = @wte.weight.half, {{.*}}param = @wte.weight, {{.*}}} : tensor<16x8xbf16>
// CHECK-NEXT:  bigc.adamw %[[DW]] {{{.*}}half = @ln.weight.half, {{.*}}param = @ln.weight, {{.*}}} : tensor<8xbf16>
// CHECK-NEXT:  bigc.adamw %[[DB]] {{{.*}}half = @ln.bias.half, {{.*}}param = @ln.bias, {{.*}}} : tensor<8xbf16>
// CHECK-NEXT:  bigc.adamw %{{.*}} {{{.*}}half = @attn.weight.half, {{.*}}param = @attn.weight, {{.*}}} : tensor<8x24xbf16>
// CHECK-NOT:   bigc.loss_scale_update
// CHECK-NEXT:  return %[[LOSS]] : tensor<f32>

// fp16: the same types with f16, plus dynamic loss scaling.
// FP16-LABEL: module attributes {bigc.precision = "fp16"}
// FP16:       bigc.param @wte.weight.half : tensor<16x8xf16> {init = "copy", source = "wte.weight"}
// FP16:       bigc.param @loss_scale : tensor<f32> {init = "fill", role = "optimizer", value = 1.024000e+03 : f64}
// FP16-NEXT:  bigc.param @loss_scale_good : tensor<f32> {init = "zeros", role = "optimizer"}
// FP16:       bigc.layernorm {{.*}} -> (tensor<2x4x8xf16>, tensor<2x4xf32>, tensor<2x4xf32>)
// The backward differentiates scale * loss: the seed is the loss scale.
// FP16:       %[[LOSS:.*]] = bigc.cross_entropy {{.*}} -> tensor<f32>
// FP16-NEXT:  %[[SEED:.*]] = bigc.get_param @loss_scale {bigc.phase = "backward"} : tensor<f32>
// FP16-NEXT:  bigc.cross_entropy_grad {{.*}}, %[[SEED]] {{.*}} -> tensor<2x4x16xf16>
// FP16:       %{{.*}}, %[[DW:.*]], %[[DB:.*]] = bigc.layernorm_grad
// FP16:       %[[DWTE:.*]] = bigc.add {{.*}} -> tensor<16x8xf16>
// One inf/nan check over every parameter gradient, then unscaled updates
// that are skipped on overflow, then the scale update.
// FP16-NEXT:  %[[FOUND:.*]] = bigc.check_finite %[[DWTE]], %[[DW]], %[[DB]], %{{.*}} {bigc.phase = "optimizer"} : (tensor<16x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8x24xf16>) -> tensor<f32>
// FP16-NEXT:  %[[SCALE:.*]] = bigc.get_param @loss_scale {bigc.phase = "optimizer"} : tensor<f32>
// FP16-NEXT:  bigc.adamw %[[DWTE]] unscale(%[[SCALE]]) skip_if(%[[FOUND]]) {{{.*}}half = @wte.weight.half, {{.*}}param = @wte.weight, {{.*}}} : tensor<16x8xf16>
// FP16-NEXT:  bigc.adamw %[[DW]] unscale(%[[SCALE]]) skip_if(%[[FOUND]])
// FP16-NEXT:  bigc.adamw %[[DB]] unscale(%[[SCALE]]) skip_if(%[[FOUND]])
// FP16-NEXT:  bigc.adamw %{{.*}} unscale(%[[SCALE]]) skip_if(%[[FOUND]]) {{{.*}}param = @attn.weight, {{.*}}} : tensor<8x24xf16>
// FP16-NEXT:  bigc.loss_scale_update %[[FOUND]] {bigc.phase = "optimizer", good = @loss_scale_good, growth_interval = 10 : i64, scale = @loss_scale}
// FP16-NEXT:  return %[[LOSS]] : tensor<f32>

// With clipping, the norm of the scaled gradients is unscaled by the update too.
// CLIP:       %[[FOUND:.*]] = bigc.check_finite
// CLIP-NEXT:  %[[SCALE:.*]] = bigc.get_param @loss_scale
// CLIP-NEXT:  %[[N:.*]] = bigc.global_norm {{.*}} -> tensor<f32>
// CLIP-NEXT:  bigc.adamw %{{.*}}, %[[N]] unscale(%[[SCALE]]) skip_if(%[[FOUND]]) {{{.*}}max_norm = 1.000000e+00 : f64{{.*}}} : tensor<16x8xf16>, tensor<f32>

// The found_inf flag is read by the runtime after the step: live to the end.
// PLAN:       memory-plan @train_step: instructions=[[#N:]]
// PLAN:       @wte.weight master : offset={{[0-9]+}} size=512
// PLAN:       @wte.weight.half param : offset={{[0-9]+}} size=256
// PLAN:       bigc.check_finite : offset={{[0-9]+}} size=4 live=[{{[0-9]+}},[[#N-1]]]

// BADP: bigc-mixed-precision: precision must be bf16 or fp16, got 'fp8'

module {
  bigc.param @"wte.weight" : tensor<16x8xf32> {init = "normal", std = 0.02}
  bigc.param @"ln.weight" : tensor<8xf32> {init = "ones"}
  bigc.param @"ln.bias" : tensor<8xf32> {init = "zeros"}
  bigc.param @"attn.weight" : tensor<8x24xf32> {init = "normal", std = 0.02}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = bigc.get_param @"wte.weight" : tensor<16x8xf32>
    %x = bigc.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %lw = bigc.get_param @"ln.weight" : tensor<8xf32>
    %lb = bigc.get_param @"ln.bias" : tensor<8xf32>
    %y, %mean, %rstd = bigc.layernorm %x, %lw, %lb : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
    %aw = bigc.get_param @"attn.weight" : tensor<8x24xf32>
    %qkv = bigc.matmul %y, %aw : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %o, %lse = bigc.attention %qkv {heads = 2 : i64} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
    %r = bigc.add %o, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = bigc.matmul %r, %wte {transpose_b} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = bigc.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A name that the compute copy would take is refused.
module {
  bigc.param @w : tensor<4x4xf32> {init = "normal", std = 0.02}
  // expected-error@+1 {{bigc-mixed-precision: the symbol @"w.half" (compute copy of @w) already exists}}
  bigc.param @"w.half" : tensor<4x4xf32> {init = "zeros", role = "optimizer"}
  func.func @forward(%tokens: tensor<1x4xi32>, %targets: tensor<1x4xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x4xf32>
    %x = bigc.embedding %w, %tokens : (tensor<4x4xf32>, tensor<1x4xi32>) -> tensor<1x4x4xf32>
    %loss = bigc.cross_entropy %x, %targets : (tensor<1x4x4xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
