//===- bigc-opt: run any bigc pass alone (lit tests) ----------------------===//
//
//   bigc-opt model.mlir --bigc-autodiff="grad-clip=1.0"
//   bigc-opt model.mlir --bigc-train-pipeline="zero=3 ranks=2 offload=cpu"
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Passes/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses(); // canonicalize, cse, ...
  mlir::bigc::registerBigcPasses();
  mlir::bigc::registerBigcTrainPipeline(); // what `bigc compile` runs

  mlir::DialectRegistry registry;
  registry.insert<mlir::bigc::BigcDialect, mlir::func::FuncDialect>();

  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "bigc optimizer driver\n", registry));
}
