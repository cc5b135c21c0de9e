// `bigc data encode --tokenizer`: the model's own Hugging Face tokenizer (python/bigc_data, the `tokenizers` library
// in the project's Python environment), run as a child bigc owns (include/bigc/Driver/PythonTool.h:
// its files staged and moved into place only once it succeeded; ended with bigc).
#include "bigc/Driver/Data.h"
#include "bigc/Driver/PythonTool.h"

#include <string>
#include <vector>

namespace bigc {

namespace {

// OUT.bin -> OUT_val.bin (the Python side's default for --val-output).
std::string defaultValPath(const std::string &out) {
  const size_t slash = out.find_last_of('/');
  const size_t dot = out.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1) return out + "_val";
  return out.substr(0, dot) + "_val" + out.substr(dot);
}

} // namespace

bool dataUsesTokenizer(int argc, char **argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" || a.rfind("--tokenizer=", 0) == 0) return true;
  }
  return false;
}

int tokenizerDataMain(int argc, char **argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  PythonTool t;
  t.command = "bigc data";
  t.module = "bigc_data";
  t.args = args;
  t.timeout = takeTimeoutOption(t.args, 0.0, "data");
  std::string out, val;
  bool valFraction = false;
  for (size_t i = 0; i < t.args.size(); ++i) {
    const std::string &a = t.args[i];
    auto value = [&](const char *flag, std::string &into) {
      const std::string f = flag;
      if (a == f && i + 1 < t.args.size())
        into = t.args[++i];
      else if (a.rfind(f + "=", 0) == 0)
        into = a.substr(f.size() + 1);
    };
    t.help |= a == "--help" || a == "-h";
    value("-o", out);
    value("--output", out);
    value("--val-output", val);
    valFraction |= a == "--val-fraction" || a.rfind("--val-fraction=", 0) == 0;
  }
  if (!out.empty()) t.outputs.push_back(out);
  if (!out.empty() && valFraction) t.outputs.push_back(val.empty() ? defaultValPath(out) : val);
  t.timeoutHint = "Give it longer with --timeout S (0, the default: no limit)";
  t.userCode = "the tokenizer";
  return runPythonTool(t);
}

} // namespace bigc
