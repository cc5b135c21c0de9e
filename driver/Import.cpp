// `bigc import`: runs the Python importer (python/bigc_import: torch.export, ATen ops mapped to the
// bigc dialect) as a child bigc owns (include/bigc/Driver/PythonTool.h: its own process group,
// ended with bigc on every signal and when bigc dies; both files written into staging and moved
// into place only once the import has succeeded; --timeout). The importer's command line is the
// contract; this driver finds the interpreter and says what to do when there is none.
#include "bigc/Driver/Import.h"
#include "bigc/Driver/PythonTool.h"

#include <cstdio>
#include <string>
#include <vector>

namespace bigc {

namespace {

constexpr double kDefaultTimeout = 1800.0;

std::string baseOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The files the importer will write (its -o, or FILE.mlir for `torch` without one, and the weights
// beside it), as the Python side computes them; none when the arguments do not say (the importer
// then reports why).
std::vector<std::string> outputsOf(const std::vector<std::string> &args) {
  std::string sub, spec, out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "-o" || a == "--output") {
      if (i + 1 < args.size()) out = args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      out = a.substr(9);
    } else if (a.rfind("-o", 0) == 0 && a.size() > 2) {
      out = a.substr(2);
    } else if (a.rfind("--", 0) == 0) {
      if (a.find('=') == std::string::npos && i + 1 < args.size() &&
          (a == "--batch" || a == "--seq" || a == "--weights" || a == "--seed"))
        ++i; // its value
    } else if (sub.empty()) {
      sub = a;
    } else if (spec.empty()) {
      spec = a;
    }
  }
  if (out.empty() && sub == "torch" && !spec.empty()) {
    const std::string b = baseOf(spec.substr(0, spec.rfind(':')));
    const size_t dot = b.find_last_of('.');
    out = (dot == std::string::npos ? b : b.substr(0, dot)) + ".mlir";
  }
  if (out.empty() || out == "-") return {};
  const std::string b = baseOf(out);
  const size_t dot = b.find_last_of('.');
  const std::string stem = dot == std::string::npos ? b : b.substr(0, dot);
  return {dirOf(out) + "/" + stem + ".safetensors", out};
}

} // namespace

const char *importHelp() {
  return "usage: bigc import hf CONFIG.json [--batch B] [--seq T] [--weights FILE] -o model.mlir\n"
         "       bigc import torch FILE.py:FUNCTION [-o model.mlir]\n"
         "       (both) [--timeout S]\n"
         "\n"
         "Writes a PyTorch model as bigc MLIR (docs/frontend.md): a Hugging Face causal-LM config of\n"
         "the llama, mistral, qwen2 or gpt2 families, or your own nn.Module (FUNCTION() returns the\n"
         "module and an example batch (tokens, targets)). The module is captured with torch.export\n"
         "and its loss included. A config is built on the meta device (no memory for its weights):\n"
         "`bigc run --seed S` draws its initial weights by the family's rules, or --weights names a\n"
         "checkpoint bigc run reads where it is. Your own module's weights go beside the model\n"
         "(model.safetensors, the module's parameter names), and `bigc run` starts from them.\n"
         "`bigc import hf --help` and `bigc import torch --help` list the options.\n"
         "\n"
         "  --timeout S   stop the import after S seconds (default 1800; 0: no limit): a model whose\n"
         "                code never returns is ended with one message, nothing written\n"
         "\n"
         "The files appear together once the import has succeeded, or none does (an error, a\n"
         "signal, the time limit, bigc killed): the importer runs as a child process of bigc that\n"
         "ends with it.\n"
         "\n"
         "Needs a Python environment with PyTorch 2.15 and transformers: scripts/setup-python.sh\n"
         "makes one in .venv (as `make test` does); BIGC_PYTHON names another interpreter.\n";
}

int importMain(int argc, char **argv, int first) {
  if (first >= argc || std::string(argv[first]) == "--help" || std::string(argv[first]) == "-h") {
    std::fputs(importHelp(), first >= argc ? stderr : stdout);
    return first >= argc ? 1 : 0;
  }
  PythonTool t;
  t.command = "bigc import";
  t.module = "bigc_import";
  for (int i = first; i < argc; ++i) t.args.push_back(argv[i]);
  t.timeout = takeTimeoutOption(t.args, kDefaultTimeout, "import");
  for (const auto &a : t.args) t.help |= a == "--help" || a == "-h";
  t.outputs = outputsOf(t.args);
  t.timeoutHint = "The model's code may never return (a loop that does not end?); give it longer with --timeout S "
                  "(0: no limit)";
  t.userCode = "the model's code (at import time, in its function or in forward)";
  return runPythonTool(t);
}

} // namespace bigc
