// `bigc compile` test input (compile-errors.test): bigc.add of different shapes.
module {
  func.func @forward(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<f32> {
    %x = bigc.fill {value = 1.0 : f64} : () -> tensor<4xf32>
    %y = bigc.fill {value = 1.0 : f64} : () -> tensor<5xf32>
    %z = bigc.add %x, %y : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
    %l = bigc.fill {value = 1.0 : f64} : () -> tensor<f32>
    return %l : tensor<f32>
  }
}
