// bigc-run: the runtime alone (no MLIR). Same arguments as `bigc run`, without `run`.
#include "bigc/runtime/run_command.h"

int main(int argc, char **argv) { return bigc::rt::runMain(argc, argv, 1); }
