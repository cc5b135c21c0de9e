// bigc-run: the runtime alone (no MLIR), for machines without the compiler (GPU machines).
//   bigc-run model.bigc [options]    = bigc run model.bigc [options]
//   bigc-run inspect model.bigc ...  = bigc inspect model.bigc ...
//   bigc-run verify model.bigc ...   = bigc verify model.bigc ...
// (a program file named "inspect" or "verify": bigc-run ./inspect).
#include <cstdio>
#include <cstring>

#include "bigc/Inspect/Inspect.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Support/command.h"

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "inspect") == 0)
    return bigc::cli::runCommand("inspect", [&] { return bigc::inspect::inspectMain(argc, argv, 2); });
  if (argc > 1 && std::strcmp(argv[1], "verify") == 0) return bigc::rt::verifyMain(argc, argv, 2);
  int rc = bigc::rt::runMain(argc, argv, 1);
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0))
    std::printf("bigc-run model.bigc [options] is bigc run; also:\n"
                "  bigc-run inspect model.bigc [--memory] [--json] [--timeline FILE.svg] [--rank R]\n"
                "  bigc-run verify model.bigc [--limit N]\n"
                "as bigc inspect and bigc verify (bigc-run inspect --help, bigc-run verify --help).\n");
  return rc;
}
