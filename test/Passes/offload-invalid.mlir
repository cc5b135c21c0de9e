// RUN: bigc-opt %s -split-input-file -verify-diagnostics --bigc-offload
// RUN: not bigc-opt %s -split-input-file --bigc-offload=params=disk 2>&1 | FileCheck %s --check-prefix=PARAMS
// RUN: not bigc-opt %s -split-input-file --bigc-offload=offload=nvme 2>&1 | FileCheck %s --check-prefix=WHERE

// PARAMS: bigc-offload: params must be "device" or "host", got "disk"
// WHERE:  bigc-offload: offload must be "cpu", got "nvme"

// expected-error @below {{bigc-offload: the module has no func.func @train_step (run bigc-autodiff first)}}
module {
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %one = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %one : tensor<f32>
  }
}

// -----

// A name the pass would add is taken.
module {
  // expected-error @below {{bigc-offload: cannot add the parameter @"w.half": the name is taken}}
  bigc.param @w : tensor<4xf32> {init = "zeros"}
  bigc.param @"w.half" : tensor<4xf32> {init = "zeros"}
  bigc.param @"w.exp_avg" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  bigc.param @"w.exp_avg_sq" : tensor<4xf32> {init = "zeros", role = "optimizer"}
  func.func @train_step(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %g = bigc.fill {value = 1.0 : f64} : () -> tensor<4xf32>
    bigc.adamw %g {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq", lr = 3.0e-04 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
    %l = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %l : tensor<f32>
  }
}
