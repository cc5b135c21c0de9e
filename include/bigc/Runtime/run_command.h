// `bigc run` / `bigc-run` (README: "Run"). No MLIR here.
#pragma once

namespace bigc::rt {

// Runs `bigc run` with the arguments argv[first..argc). Never throws: prints
// "bigc run: <message>" on stderr and returns 1 for bad input, 2 for an internal error, 0 on
// success. `bigc` calls runMain(argc, argv, 2) (after "run"), `bigc-run` runMain(argc, argv, 1).
int runMain(int argc, char **argv, int first);
// `bigc eval model.bigc --data FILE [--load-weights W]`: the held-out loss of the weights on the
// file (the program's evaluation program). Same exit statuses.
int evalMain(int argc, char **argv, int first);

// `bigc data encode input.txt -o tokens.bin`: byte-level tokens (vocabulary 256), written in the
// llm.c format. dataMain(argc, argv, first) takes the arguments from argv[first] on (the
// subcommand, e.g. "encode"); dataMain(argc, argv) skips argv[0] and a leading "data".
// Same exit statuses as runMain.
int dataMain(int argc, char **argv, int first);
int dataMain(int argc, char **argv);

// `bigc verify model.bigc [--limit N]`: validate the program and prove its plan free of hazards
// (include/bigc/Format/verifier.h). Exit 0 proven, 1 problems found (listed) or bad input.
int verifyMain(int argc, char **argv, int first);

// `bigc calibrate [-o FILE.json]`: measure this machine as the CPU backend uses it and write a
// hardware profile with the measured rates (runtime/cli/CalibrateCommand.cpp).
int calibrateMain(int argc, char **argv, int first);

} // namespace bigc::rt
