// `bigc data encode`: byte-level tokens (the runtime's), or with --tokenizer PATH the model's own
// Hugging Face tokenizer (python/bigc_data). docs/user-guide: "Train on your own text".
#pragma once

namespace bigc {

// argv[first] is the first argument after `data`. Returns the exit status (0 written; 1 bad input,
// one message; 2 internal error).
int dataMain(int argc, char **argv, int first);

} // namespace bigc
