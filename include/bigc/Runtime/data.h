// Token data for `bigc run` (README: "Run" and `bigc data`).
// Token files, told apart by their first int32:
//   llm.c, GPT-2 layout: 256 x int32 header, magic 20240520, version 1, header[2] = token count, then
//     uint16 tokens;
//   llm.c, LLaMA-3 layout: magic 20240801, version 7, then uint32 tokens (dev/data/data_common.py);
//   in both, header[3] is the encoding tokenizer's vocabulary when bigc wrote the file (`bigc data
//     encode --tokenizer`; 0 otherwise, llm.c's reserved field);
//   anything else: raw tokens without a header (nanoGPT's .bin: uint16), whose width the user states
//     (--data-dtype u16|u32) when the model's vocabulary does not fit in 16 bits.
// No MLIR here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bigc::rt::data {

constexpr int32_t kLlmcMagic = 20240520;   // uint16 tokens (version 1)
constexpr int32_t kLlmcMagic32 = 20240801; // uint32 tokens (version 7)
constexpr int32_t kLlmcVersion32 = 7;
constexpr int64_t kLlmcHeaderInts = 256;

// The width of a raw file's tokens: 2 or 4 bytes.
enum class TokenWidth { U16 = 2, U32 = 4 };

// A token file, memory-mapped read-only.
class TokenFile {
public:
  // `raw`: the width of the tokens when the file has no llm.c header (default: 16 bits, nanoGPT's);
  // a file with a header must agree with it. Throws UserError naming the file when it cannot be
  // opened or is malformed.
  explicit TokenFile(const std::string &path, std::optional<TokenWidth> raw = std::nullopt);
  ~TokenFile();
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  const std::string &path() const { return path_; }
  // "llm.c" (uint16), "llm.c uint32", "nanoGPT" (raw uint16) or "raw uint32".
  const char *format() const;
  bool hasHeader() const { return llmc_; }
  int width() const { return width_; }
  int64_t size() const { return count_; }
  // The vocabulary of the tokenizer that encoded it, when the header says (0: not said).
  int64_t vocab() const { return vocab_; }
  uint32_t operator[](int64_t i) const {
    return width_ == 2 ? uint32_t(static_cast<const uint16_t *>(tokens_)[i])
                       : static_cast<const uint32_t *>(tokens_)[i];
  }

private:
  std::string path_;
  void *map_ = nullptr;
  size_t mapBytes_ = 0;
  const void *tokens_ = nullptr;
  int64_t count_ = 0;
  int width_ = 2;
  int64_t vocab_ = 0;
  bool llmc_ = false;
  std::vector<uint16_t> empty_;
};

// A source of [B,T] batches: inputs and the targets shifted by one.
class TokenSource {
public:
  virtual ~TokenSource() = default;
  // Fills B·T inputs and B·T targets. Throws UserError on bad data.
  virtual void next(int32_t *inputs, int32_t *targets) = 0;
  virtual std::string describe() const = 0;
  // Where the stream is, for checkpoints: kind() names the source ("file" or "synthetic"), state()
  // is everything next() depends on beyond the constructor's arguments, restore() sets it back
  // (UserError when it does not fit this source).
  virtual std::string kind() const = 0;
  virtual std::vector<int64_t> state() const = 0;
  virtual void restore(const std::vector<int64_t> &state) = 0;
};

// Batches read in order as llm.c does: at position p, inputs tokens[p, p+B·T), targets
// tokens[p+1, p+B·T+1); p advances by B·T and wraps to 0 when the next batch would not fit.
// Errors: fewer than B·T+1 tokens; a token >= vocab (naming the file and position).
class FileTokenSource : public TokenSource {
public:
  // `raw`: --data-dtype, the width of a headerless file's tokens. Without it a headerless file is
  // read as 16-bit (nanoGPT's) only where the vocabulary fits in 16 bits; else it is refused, never
  // misread. Also refused: a file whose header names a larger vocabulary than the model's, and a
  // headerless file read as 16-bit that looks like 32-bit tokens (every second value 0).
  FileTokenSource(const std::string &path, int64_t B, int64_t T, int64_t vocab,
                  std::optional<TokenWidth> raw = std::nullopt);
  void next(int32_t *inputs, int32_t *targets) override;
  std::string describe() const override;
  std::string kind() const override { return "file"; }
  std::vector<int64_t> state() const override { return {pos_, checkedUpTo_, file_.size()}; }
  void restore(const std::vector<int64_t> &state) override;
  int64_t position() const { return pos_; }
  // Back to the first batch (each evaluation reads the same held-out batches).
  void rewind() { pos_ = 0; }
  const TokenFile &file() const { return file_; }

private:
  TokenFile file_;
  int64_t B_, T_, vocab_;
  int64_t pos_ = 0;
  int64_t checkedUpTo_ = 0; // tokens [0, checkedUpTo_) are known to be < vocab
};

// Synthetic data with learnable structure, deterministic in the seed: a fixed random first-order
// Markov chain over the vocabulary in which each token has three likely successors (probabilities
// 0.6, 0.3, 0.1; entropy ≈ 0.90 nats against ln V for uniform tokens). The stream continues across
// batches as a file would (the last target of one batch is the first input of the next).
class SyntheticTokenSource : public TokenSource {
public:
  SyntheticTokenSource(int64_t B, int64_t T, int64_t vocab, uint64_t seed);
  void next(int32_t *inputs, int32_t *targets) override;
  std::string describe() const override;
  std::string kind() const override { return "synthetic"; }
  std::vector<int64_t> state() const override { return {int64_t(state_), last_, vocab_}; }
  void restore(const std::vector<int64_t> &state) override;
  // The entropy rate of the chain in nats: the loss a perfect model would reach.
  double entropy() const;

private:
  int32_t draw();
  int64_t B_, T_, vocab_;
  uint64_t state_;
  std::vector<int32_t> succ_; // [vocab, 3]
  std::vector<int32_t> buf_;  // B·T+1
  int32_t last_;
};

// Writes tokens in the llm.c format (header + uint16), atomically. Throws UserError.
void writeLlmcTokens(const std::string &path, const std::vector<uint16_t> &tokens);
// Writes tokens in llm.c's LLaMA-3 format (magic 20240801, version 7, uint32), with `vocab` in
// header[3] (0: not said), atomically. Throws UserError.
void writeLlmcTokens32(const std::string &path, const std::vector<uint32_t> &tokens, int64_t vocab = 0);
// Writes raw uint16 tokens (nanoGPT format), atomically. Throws UserError.
void writeNanoGptTokens(const std::string &path, const std::vector<uint16_t> &tokens);

} // namespace bigc::rt::data
