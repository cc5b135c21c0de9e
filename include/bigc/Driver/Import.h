// `bigc import hf|torch ...`: a PyTorch model as bigc MLIR (python/bigc_import, docs/frontend.md).
#pragma once

namespace bigc {

// argv[first] is the first argument after `import`. Returns the importer's exit status (0 written;
// 1 bad input, one message on stderr; 2 internal error). Throws format::UserError when there is no
// Python environment to run it.
int importMain(int argc, char **argv, int first);
const char *importHelp();

} // namespace bigc
