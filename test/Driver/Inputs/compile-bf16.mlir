// `bigc compile` test input (compile-errors.test): bf16 tensors need --precision (later).
module {
  bigc.param @w : tensor<4x8xbf16> {init = "normal", std = 0.02 : f64}
  func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
    %w = bigc.get_param @w : tensor<4x8xbf16>
    %x = bigc.embedding %w, %tokens : (tensor<4x8xbf16>, tensor<2x3xi32>) -> tensor<2x3x8xbf16>
    %l = bigc.cross_entropy %x, %targets : (tensor<2x3x8xbf16>, tensor<2x3xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
