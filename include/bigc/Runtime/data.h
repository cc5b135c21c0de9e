// Token data for `bigc run` (README: "Run" and `bigc data`).
// Token files: nanoGPT (raw uint16) or llm.c (256 x int32 header, magic 20240520, header[2] =
// token count, then uint16), told apart by the magic. No MLIR here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bigc::rt::data {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderInts = 256;

// A token file, memory-mapped read-only.
class TokenFile {
public:
  // Throws UserError naming the file when it cannot be opened or is malformed.
  explicit TokenFile(const std::string &path);
  ~TokenFile();
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  const std::string &path() const { return path_; }
  const char *format() const { return llmc_ ? "llm.c" : "nanoGPT"; }
  int64_t size() const { return count_; }
  const uint16_t *tokens() const { return tokens_; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }

private:
  std::string path_;
  void *map_ = nullptr;
  size_t mapBytes_ = 0;
  const uint16_t *tokens_ = nullptr;
  int64_t count_ = 0;
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
  FileTokenSource(const std::string &path, int64_t B, int64_t T, int64_t vocab);
  void next(int32_t *inputs, int32_t *targets) override;
  std::string describe() const override;
  std::string kind() const override { return "file"; }
  std::vector<int64_t> state() const override { return {pos_, checkedUpTo_, file_.size()}; }
  void restore(const std::vector<int64_t> &state) override;
  int64_t position() const { return pos_; }
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
// Writes raw uint16 tokens (nanoGPT format), atomically. Throws UserError.
void writeNanoGptTokens(const std::string &path, const std::vector<uint16_t> &tokens);

} // namespace bigc::rt::data
