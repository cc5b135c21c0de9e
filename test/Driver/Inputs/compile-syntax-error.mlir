// `bigc compile` test input (compile-errors.test): %y is not defined.
module {
  func.func @forward(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<f32> {
    %x = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %y : tensor<f32>
  }
}
