// `bigc data encode --tokenizer PATH`: the model's own Hugging Face tokenizer (python/bigc_data). docs/user-guide:
// "Train on your own text".
#pragma once

namespace bigc {

// Whether `bigc data`'s arguments (from argv[first], the first after `data`) name --tokenizer: then
// tokenizerDataMain encodes; else the runtime's byte-level encoder (format::dataMain, also in bigc-run)
// does (tools/bigc chooses; the driver does not link the runtime).
bool dataUsesTokenizer(int argc, char **argv, int first);
// Returns the exit status (0 written; 1 bad input, one message; 2 internal error).
int tokenizerDataMain(int argc, char **argv, int first);

} // namespace bigc
