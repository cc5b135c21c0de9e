// `bigc compile` test input (compile-errors.test): no @forward.
module {
  func.func @main() {
    return
  }
}
