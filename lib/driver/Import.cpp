// `bigc import`: runs the Python importer (python/bigc_import: torch.export, ATen ops mapped to the
// bigc dialect) with the project's Python environment. The importer's command line is the
// contract; this driver finds the interpreter and says what to do when there is none.
//
//   Interpreter: $BIGC_PYTHON, else the project's environment <source>/.venv/bin/python
//   (scripts/setup-python.sh makes it: PyTorch and transformers from PyPI).
#include "bigc/Driver/Import.h"

#include "bigc/Runtime/program.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#ifndef BIGC_SOURCE_DIR
#define BIGC_SOURCE_DIR "."
#endif

namespace bigc {

using rt::UserError;

namespace {

bool executable(const std::string &p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

} // namespace

const char *importHelp() {
  return "usage: bigc import hf CONFIG.json [--batch B] [--seq T] [--weights FILE] [--seed S] -o model.mlir\n"
         "       bigc import torch FILE.py:FUNCTION [-o model.mlir]\n"
         "\n"
         "Writes a PyTorch model as bigc MLIR (docs/frontend.md): a Hugging Face causal-LM config of\n"
         "the llama, mistral, qwen2 or gpt2 families, or your own nn.Module (FUNCTION() returns the\n"
         "module and an example batch (tokens, targets)). The module is captured with torch.export\n"
         "and its loss included; its initial weights go beside the model (model.safetensors, the\n"
         "module's parameter names), and `bigc run` starts from them. `bigc import hf --help` and\n"
         "`bigc import torch --help` list the options.\n"
         "\n"
         "Needs a Python environment with PyTorch 2.15 and transformers: scripts/setup-python.sh\n"
         "makes one in .venv (as `make test` does); BIGC_PYTHON names another interpreter.\n";
}

int importMain(int argc, char **argv, int first) {
  if (first >= argc || std::string(argv[first]) == "--help" || std::string(argv[first]) == "-h") {
    std::fputs(importHelp(), first >= argc ? stderr : stdout);
    return first >= argc ? 1 : 0;
  }
  std::string python;
  if (const char *env = std::getenv("BIGC_PYTHON"); env && *env) {
    python = env;
    if (!executable(python)) throw UserError("BIGC_PYTHON=" + python + " is not an executable Python interpreter");
  } else {
    python = std::string(BIGC_SOURCE_DIR) + "/.venv/bin/python";
    if (!executable(python))
      throw UserError("PyTorch (2.15) and transformers are needed, in a Python environment, and there is none "
                      "at " +
                      std::string(BIGC_SOURCE_DIR) +
                      "/.venv: run scripts/setup-python.sh (about 2 minutes, "
                      "from PyPI), or set BIGC_PYTHON to an interpreter that has them");
  }
  std::string pythonPath = std::string(BIGC_SOURCE_DIR) + "/python";
  if (const char *pp = std::getenv("PYTHONPATH"); pp && *pp) pythonPath += std::string(":") + pp;
  std::vector<std::string> args = {python, "-m", "bigc_import"};
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) throw UserError("cannot start " + python);
  if (pid == 0) {
    ::setenv("PYTHONPATH", pythonPath.c_str(), 1);
    std::vector<char *> cargs;
    for (auto &a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::execv(python.c_str(), cargs.data());
    std::fprintf(stderr, "bigc import: cannot run %s\n", python.c_str());
    std::_Exit(2);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {}
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "bigc import: the importer (%s) was killed by signal %d\n", python.c_str(),
               WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 2;
}

} // namespace bigc
