//===- bigc: the driver (gen, compile, inspect, run, data) ----------------===//
//
// The command-line contract is the README's user guide. Exit status: 0 success; 1 the user's input is
// wrong or the plan does not fit (one message on stderr); 2 an internal error. Never a crash.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <cstring>
#include <string>

#include "bigc/Driver/Compile.h"
#include "bigc/Driver/Data.h"
#include "bigc/Driver/Import.h"
#include "bigc/Gen/GptGen.h"
#include "bigc/Inspect/Inspect.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Support/command.h"

#ifndef BIGC_VERSION
#define BIGC_VERSION "0.1.0"
#endif

namespace {

const char *kUsage = "usage: bigc <command> [options]\n"
                     "\n"
                     "bigc compiles a model graph (MLIR, bigc dialect) into a memory-planned training program\n"
                     "and runs it.\n"
                     "\n"
                     "commands:\n"
                     "  gen gpt      write a GPT-2-architecture model as MLIR (presets tiny, gpt2 ... 175b)\n"
                     "  gen llama    write a LLaMA-family model as MLIR (llama3-8b, llama3-70b, mistral-7b, ...)\n"
                     "  import       a PyTorch model (Hugging Face config, or your nn.Module) as MLIR\n"
                     "  compile      model.mlir -> model.bigc: backward, optimizer, schedule, memory plan\n"
                     "  inspect      show a program's memory plan (--memory, --json, --timeline FILE.svg)\n"
                     "  verify       prove a program's plan free of hazards (also done by compile and run)\n"
                     "  run          train: run a program on the CPU or CUDA backend\n"
                     "  eval         the held-out loss of weights on a token file\n"
                     "  data encode  text into a token file: with the model's tokenizer (--tokenizer), or bytes\n"
                     "  calibrate    measure this machine for the cost model: write a hardware profile\n"
                     "\n"
                     "  bigc <command> --help   options of one command\n"
                     "  bigc --version          the version\n"
                     "\n"
                     "example:\n"
                     "  bigc gen gpt --preset tiny -o model.mlir\n"
                     "  bigc compile model.mlir -o model.bigc\n"
                     "  bigc inspect model.bigc --memory --timeline plan.svg\n"
                     "  bigc run model.bigc --synthetic --steps 100\n";

const char *kCommands = "gen, import, compile, inspect, verify, run, eval, data, calibrate";

bool isHelp(const char *a) { return std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0; }

int dispatch(int argc, char **argv, const std::string &cmd) {
  if (cmd == "gen") return bigc::gen::genMain(argc, argv, 2);
  if (cmd == "compile") return bigc::compileMain(argc, argv, 2);
  if (cmd == "import") return bigc::importMain(argc, argv, 2);
  if (cmd == "inspect") return bigc::inspect::inspectMain(argc, argv, 2);
  if (cmd == "run") return bigc::rt::runMain(argc, argv, 2);
  if (cmd == "eval") return bigc::rt::evalMain(argc, argv, 2);
  if (cmd == "data")
    return bigc::dataUsesTokenizer(argc, argv, 2) ? bigc::tokenizerDataMain(argc, argv, 2)
                                                  : bigc::rt::dataMain(argc, argv, 2);
  if (cmd == "verify") return bigc::rt::verifyMain(argc, argv, 2);
  if (cmd == "calibrate") return bigc::rt::calibrateMain(argc, argv, 2);
  return -1;
}

int realMain(int argc, char **argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  std::string cmd = argv[1];
  if (isHelp(argv[1])) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("bigc %s (MLIR 19, program format version %d)\n", BIGC_VERSION, bigc::format::kProgramVersion);
    return 0;
  }
  if (cmd == "help") {
    if (argc < 3) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    // `bigc help <command>` = `bigc <command> --help`.
    static char helpFlag[] = "--help";
    char *args[] = {argv[0], argv[2], helpFlag, nullptr};
    return realMain(3, args);
  } else {
    std::string label = cmd;
    if (cmd == "gen" && argc > 2 && !isHelp(argv[2]) && argv[2][0] != '-') label = "gen " + std::string(argv[2]);
    int rc = bigc::cli::runCommand(label, [&] { return dispatch(argc, argv, cmd); });
    if (rc >= 0) return rc;
  }
  std::fprintf(stderr, "bigc: unknown command '%s'; commands: %s (see bigc --help)\n", cmd.c_str(), kCommands);
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return realMain(argc, argv);
  } catch (...) {
    std::fprintf(stderr, "bigc: internal error (please report it)\n");
    return 2;
  }
}
