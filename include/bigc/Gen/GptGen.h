// `bigc gen gpt`: writes a GPT-2-architecture forward graph as MLIR text (the bigc dialect).
// No MLIR libraries here: the output is text that `bigc compile` / `bigc-opt` parse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigc::gen {

struct GptConfig {
  std::string preset; // name of the preset the values came from ("" when none)
  int64_t layers = 0; // L
  int64_t hidden = 0; // C
  int64_t heads = 0;  // H
  int64_t vocab = 0;  // V
  int64_t seq = 0;    // T (also the size of the position table)
  int64_t batch = 0;  // B (one micro-batch)
};

// Preset names in the order `--help` lists them.
std::vector<std::string> gptPresetNames();
// Throws UserError listing the presets when the name is unknown.
GptConfig gptPreset(const std::string &name);
// All positive, heads divide hidden. Throws UserError naming the option.
void validateGptConfig(const GptConfig &c);
// Parameter count (elements) of the model: 12LC^2 + 13LC + VC + TC + 2C.
int64_t gptParameterCount(const GptConfig &c);
// The model as MLIR text: module-level `bigc.param`s and `func.func @forward`.
std::string generateGptMlir(const GptConfig &c);

// `bigc gen <what> ...`; argv[first] is the model kind ("gpt"). Returns the exit status;
// throws UserError on bad input.
int genMain(int argc, char **argv, int first);
const char *genHelp();

} // namespace bigc::gen
