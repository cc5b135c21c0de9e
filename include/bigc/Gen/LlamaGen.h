// `bigc gen llama`: a LLaMA-family forward graph as MLIR text (the bigc dialect). No MLIR libraries
// here: the output is text that `bigc compile` / `bigc-opt` parse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigc::gen {

struct LlamaConfig {
  std::string preset; // the preset the values came from ("" when none)
  int64_t layers = 0, hidden = 0, heads = 0, kvHeads = 0, ffn = 0, vocab = 0, seq = 0, batch = 0;
  double ropeTheta = 10000.0, eps = 1e-5;
  bool llama3Scaling = false; // Llama 3's rope_scaling (factor 8, low 1, high 4, original 8192)
  bool qkvBias = false;       // Qwen2: biases on q, k and v
  bool tied = false;          // LM head tied to the embedding
  int64_t window = 0;         // Mistral's sliding window (0: none)
};

// Throws UserError listing the presets when the name is unknown.
LlamaConfig llamaPreset(const std::string &name);
void validateLlamaConfig(const LlamaConfig &c);
int64_t llamaParameterCount(const LlamaConfig &c);
// The rotary frequencies of a head (head size / 2 values), Llama 3's scaling applied.
std::vector<double> llamaInvFreq(const LlamaConfig &c);
std::string generateLlamaMlir(const LlamaConfig &c);

// `bigc gen llama ...`; argv[first] is the first option after `llama`.
int genLlamaMain(int argc, char **argv, int first);
const char *genLlamaHelp();

} // namespace bigc::gen
