// Token files (nanoGPT, llm.c), batches in llm.c order, synthetic data, `bigc data`.
#include "bigc/Runtime/data.h"

#include <algorithm>
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Support/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <new>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bigc::rt::data {

namespace {
[[noreturn]] void fail(const std::string &path, const std::string &msg) {
  throw UserError("data file " + path + ": " + msg);
}
uint64_t mix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
} // namespace

// ----- TokenFile

TokenFile::TokenFile(const std::string &path, std::optional<TokenWidth> raw) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  mapBytes_ = size_t(st.st_size);
  if (mapBytes_ == 0) {
    ::close(fd);
    tokens_ = empty_.data();
    count_ = 0;
    width_ = raw ? int(*raw) : 2;
    return;
  }
  map_ = ::mmap(nullptr, mapBytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path, std::string("cannot map: ") + std::strerror(e));
  }
  const auto *bytes = static_cast<const unsigned char *>(map_);
  int32_t header[4] = {0, 0, 0, 0};
  if (mapBytes_ >= 16) std::memcpy(header, bytes, sizeof header);
  if (header[0] == kLlmcMagic || header[0] == kLlmcMagic32) {
    llmc_ = true;
    const bool wide = header[0] == kLlmcMagic32;
    const int wantVersion = wide ? kLlmcVersion32 : 1;
    width_ = wide ? 4 : 2;
    const std::string what = std::string("llm.c token file (magic ") + std::to_string(header[0]) +
                             (wide ? ", uint32 tokens" : ", uint16 tokens") + ")";
    const size_t headerBytes = size_t(kLlmcHeaderInts) * 4;
    if (mapBytes_ < headerBytes)
      fail(path, what + " shorter than its 1024-byte header (" + std::to_string(mapBytes_) + " bytes)");
    if (header[1] != wantVersion)
      fail(path, what + " of version " + std::to_string(header[1]) + "; bigc reads version " +
                     std::to_string(wantVersion) + " of this magic (llm.c's: 20240520 version 1, uint16; 20240801 " +
                     "version 7, uint32)");
    if (raw && int(*raw) != width_)
      fail(path, "--data-dtype " + std::string(*raw == TokenWidth::U16 ? "u16" : "u32") + ", but the file's " + what +
                     " header says otherwise; drop --data-dtype (the header says the width)");
    if (header[2] < 0) fail(path, "llm.c header announces a negative token count");
    if (header[3] < 0) fail(path, "llm.c header announces a negative vocabulary (header[3])");
    vocab_ = header[3];
    const int64_t want = int64_t(headerBytes) + int64_t(width_) * int64_t(header[2]);
    if (int64_t(mapBytes_) < want)
      fail(path, "truncated: the llm.c header announces " + std::to_string(header[2]) + " tokens (" +
                     std::to_string(want) + " bytes), the file has " + std::to_string(mapBytes_) + " bytes");
    if (int64_t(mapBytes_) > want)
      fail(path, std::to_string(int64_t(mapBytes_) - want) + " bytes after the " + std::to_string(header[2]) +
                     " tokens its llm.c header announces");
    tokens_ = bytes + headerBytes;
    count_ = header[2];
  } else {
    width_ = raw ? int(*raw) : 2;
    if (mapBytes_ % size_t(width_) != 0)
      fail(path, (width_ == 2 ? "odd size (" : "a size that is not a multiple of 4 (") + std::to_string(mapBytes_) +
                     " bytes): not a file of raw " + (width_ == 2 ? "uint16" : "uint32") +
                     " tokens, nor of the llm.c format");
    tokens_ = bytes;
    count_ = int64_t(mapBytes_) / width_;
  }
}

const char *TokenFile::format() const {
  if (llmc_) return width_ == 2 ? "llm.c" : "llm.c uint32";
  return width_ == 2 ? "nanoGPT" : "raw uint32";
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, mapBytes_);
}

// ----- FileTokenSource

namespace {
std::string withCommas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}
// A headerless file's width: stated, or 16-bit where the vocabulary fits (nanoGPT's raw files).
std::optional<TokenWidth> rawWidth(const std::string &path, int64_t vocab, std::optional<TokenWidth> raw) {
  if (raw) return raw;
  // Peek at the magic: a file with a header says its width itself.
  int32_t magic = 0;
  if (FILE *f = std::fopen(path.c_str(), "rb")) {
    if (std::fread(&magic, 4, 1, f) != 1) magic = 0;
    std::fclose(f);
  }
  if (magic == kLlmcMagic || magic == kLlmcMagic32 || vocab <= 65536) return std::nullopt;
  throw UserError("data file " + path + " has no llm.c header (raw tokens), so its token width is not known, and " +
                  "the model's vocabulary of " + withCommas(vocab) +
                  " ids does not fit in 16 bits: give --data-dtype u32 (or u16), or encode the text with `bigc data "
                  "encode --tokenizer`, which writes the header");
}
} // namespace

FileTokenSource::FileTokenSource(const std::string &path, int64_t B, int64_t T, int64_t vocab,
                                 std::optional<TokenWidth> raw)
    : file_(path, rawWidth(path, vocab, raw)), B_(B), T_(T), vocab_(vocab) {
  if (file_.vocab() > vocab)
    fail(path, "encoded with a tokenizer of " + withCommas(file_.vocab()) + " ids (its header says), larger than the " +
                   "model's vocabulary of " + withCommas(vocab) +
                   ": encode it with the model's own tokenizer, or use a model with that vocabulary");
  int64_t need = B * T + 1;
  if (file_.size() < need)
    throw UserError("data file " + path + " has " + std::to_string(file_.size()) + " tokens; one batch of " +
                    std::to_string(B) + "×" + std::to_string(T) + " needs B·T+1 = " + std::to_string(need));
  // Small files are checked whole up front, so a bad token fails before the first step.
  if (file_.size() <= (int64_t(64) << 20)) {
    bool oddZero = !file_.hasHeader() && file_.width() == 2 && !raw && file_.size() >= 64;
    bool evenNonzero = false;
    for (int64_t i = 0; i < file_.size(); ++i) {
      const uint32_t t = file_[i];
      if (t >= uint64_t(vocab_))
        fail(path, "token " + std::to_string(t) + " at position " + std::to_string(i) +
                       " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")" +
                       (file_.hasHeader() || file_.width() == 4 || raw
                            ? std::string()
                            : std::string(" (a headerless file read as uint16: if it holds uint32 tokens, give "
                                          "--data-dtype u32)")));
      if (i % 2)
        oddZero = oddZero && t == 0;
      else
        evenNonzero = evenNonzero || t != 0;
    }
    if (oddZero && evenNonzero)
      fail(path, "read as raw uint16 tokens (no header), every second one is 0: it looks like uint32 tokens; give "
                 "--data-dtype u32 (or --data-dtype u16 if they really are 16-bit)");
    checkedUpTo_ = file_.size();
  }
}

void FileTokenSource::next(int32_t *inputs, int32_t *targets) {
  const int64_t bt = B_ * T_;
  if (pos_ + bt + 1 > file_.size()) pos_ = 0;
  if (pos_ + bt + 1 > checkedUpTo_) {
    for (int64_t i = 0; i <= bt; ++i)
      if (file_[pos_ + i] >= uint64_t(vocab_))
        fail(file_.path(), "token " + std::to_string(file_[pos_ + i]) + " at position " + std::to_string(pos_ + i) +
                               " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")");
  }
  for (int64_t i = 0; i < bt; ++i) {
    inputs[i] = int32_t(file_[pos_ + i]);
    targets[i] = int32_t(file_[pos_ + i + 1]);
  }
  pos_ += bt;
}

std::string FileTokenSource::describe() const {
  return file_.path() + " (" + file_.format() + ", " + std::to_string(file_.size()) + " tokens)";
}

// ----- SyntheticTokenSource

SyntheticTokenSource::SyntheticTokenSource(int64_t B, int64_t T, int64_t vocab, uint64_t seed)
    : B_(B), T_(T), vocab_(vocab), state_(seed ^ 0x243f6a8885a308d3ull) {
  if (vocab < 1) throw UserError("synthetic data needs a vocabulary of at least 1 token");
  uint64_t chain = seed ^ 0x13198a2e03707344ull;
  succ_.resize(size_t(vocab) * 3);
  for (int64_t v = 0; v < vocab; ++v) {
    int32_t *s = &succ_[size_t(v) * 3];
    for (int k = 0; k < 3; ++k) {
      // Distinct successors where the vocabulary allows it.
      for (int tries = 0;; ++tries) {
        s[k] = int32_t(mix(chain) % uint64_t(vocab));
        bool dup = false;
        for (int j = 0; j < k; ++j) dup |= s[j] == s[k];
        if (!dup || vocab < 3 || tries > 64) break;
      }
    }
  }
  buf_.resize(size_t(B * T + 1));
  last_ = int32_t(mix(state_) % uint64_t(vocab));
}

void SyntheticTokenSource::restore(const std::vector<int64_t> &st) {
  if (st.size() != 3 || st[2] != vocab_ || st[1] < 0 || st[1] >= vocab_)
    throw UserError("the checkpoint's synthetic-data state does not fit this data source (vocabulary " +
                    std::to_string(vocab_) + ")");
  state_ = uint64_t(st[0]);
  last_ = int32_t(st[1]);
}

void FileTokenSource::restore(const std::vector<int64_t> &st) {
  if (st.size() != 3 || st[2] != file_.size() || st[0] < 0 || st[0] > file_.size())
    throw UserError(file_.path() + ": the checkpoint was taken reading a token file of " +
                    (st.size() == 3 ? std::to_string(st[2]) : std::string("?")) + " tokens; this one has " +
                    std::to_string(file_.size()) + " (resume with the same --data file)");
  pos_ = st[0];
  checkedUpTo_ = std::min<int64_t>(st[1], file_.size());
}

int32_t SyntheticTokenSource::draw() {
  double u = double(mix(state_) >> 11) * (1.0 / 9007199254740992.0);
  int k = u < 0.6 ? 0 : u < 0.9 ? 1 : 2;
  last_ = succ_[size_t(last_) * 3 + size_t(k)];
  return last_;
}

void SyntheticTokenSource::next(int32_t *inputs, int32_t *targets) {
  const int64_t bt = B_ * T_;
  buf_[0] = last_;
  for (int64_t i = 1; i <= bt; ++i) buf_[size_t(i)] = draw();
  for (int64_t i = 0; i < bt; ++i) {
    inputs[i] = buf_[size_t(i)];
    targets[i] = buf_[size_t(i + 1)];
  }
}

std::string SyntheticTokenSource::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "synthetic (Markov chain over %lld tokens; best loss %.3f, uniform %.3f)",
                (long long)vocab_, entropy(), std::log(double(vocab_)));
  return buf;
}

double SyntheticTokenSource::entropy() const {
  // Average over tokens of the successor distribution's entropy (duplicates merged); exact for
  // the stationary distribution only when it is uniform, close enough for a reference.
  const double p[3] = {0.6, 0.3, 0.1};
  double total = 0.0;
  for (int64_t v = 0; v < vocab_; ++v) {
    const int32_t *s = &succ_[size_t(v) * 3];
    double q[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      int j = 0;
      while (s[j] != s[k]) ++j;
      q[j] += p[k];
    }
    for (double x : q)
      if (x > 0) total -= x * std::log(x);
  }
  return total / double(vocab_);
}

// ----- writers

void writeLlmcTokens(const std::string &path, const std::vector<uint16_t> &tokens) {
  if (tokens.size() > size_t(INT32_MAX)) throw UserError(path + ": too many tokens for the llm.c format");
  std::string bytes(size_t(kLlmcHeaderInts) * 4 + tokens.size() * 2, '\0');
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic;
  header[1] = 1;
  header[2] = int32_t(tokens.size());
  std::memcpy(&bytes[0], header, sizeof header);
  if (!tokens.empty()) std::memcpy(&bytes[sizeof header], tokens.data(), tokens.size() * 2);
  writeFileAtomic(path, bytes);
}

void writeLlmcTokens32(const std::string &path, const std::vector<uint32_t> &tokens, int64_t vocab) {
  if (tokens.size() > size_t(INT32_MAX)) throw UserError(path + ": too many tokens for the llm.c format");
  std::string bytes(size_t(kLlmcHeaderInts) * 4 + tokens.size() * 4, '\0');
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic32;
  header[1] = kLlmcVersion32;
  header[2] = int32_t(tokens.size());
  header[3] = int32_t(vocab);
  std::memcpy(&bytes[0], header, sizeof header);
  if (!tokens.empty()) std::memcpy(&bytes[sizeof header], tokens.data(), tokens.size() * 4);
  writeFileAtomic(path, bytes);
}

void writeNanoGptTokens(const std::string &path, const std::vector<uint16_t> &tokens) {
  std::string bytes(tokens.size() * 2, '\0');
  if (!tokens.empty()) std::memcpy(&bytes[0], tokens.data(), bytes.size());
  writeFileAtomic(path, bytes);
}

} // namespace bigc::rt::data

// ----- bigc data

namespace bigc::rt {

namespace {
const char *kDataUsage =
    "usage: bigc data encode INPUT... --tokenizer PATH -o OUT.bin [--val-fraction F] [--val-output VAL.bin]\n"
    "                        [--format auto|text|jsonl] [--text-field NAME] [--separator TOKEN|none|auto]\n"
    "                        [--threads N] [--timeout S] [--quiet]\n"
    "         the model's own Hugging Face tokenizer (a tokenizer.json, or a model directory holding\n"
    "         one): text files and JSON lines, each document after the tokenizer's BOS (or end-of-text)\n"
    "         token, into llm.c's token file: 16-bit ids when the vocabulary fits, else 32-bit (llm.c's\n"
    "         LLaMA-3 layout); `bigc data encode --tokenizer X --help` says more\n"
    "       bigc data encode input.txt -o tokens.bin\n"
    "         byte-level tokens (vocabulary 256), written in the llm.c format\n";

int dataBody(int argc, char **argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]).rfind("--tokenizer", 0) == 0)
      throw UserError("--tokenizer: this is bigc-run, which has no Python tokenizer; run `bigc data encode "
                      "--tokenizer ...` (the bigc driver, with the project's Python environment)");
  cli::Args args = cli::parse(argc, argv, first, {}, {"--help"}, "bigc data");
  if (args.has("--help")) {
    std::cout << kDataUsage;
    return 0;
  }
  if (args.positional.empty()) throw UserError("missing subcommand (known: encode)\n" + std::string(kDataUsage));
  const std::string &sub = args.positional[0];
  if (sub != "encode") throw UserError("unknown subcommand '" + sub + "' (known: encode)");
  if (args.positional.size() != 2)
    throw UserError("encode takes one input file, got " + std::to_string(args.positional.size() - 1) + "\n" +
                    kDataUsage);
  if (!args.has("-o")) throw UserError("encode needs an output file: -o tokens.bin");
  const std::string &in = args.positional[1];
  std::string out = args.str("-o");
  std::ifstream f(in, std::ios::binary);
  if (!f) throw UserError(in + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw UserError(in + ": read error");
  std::string text = ss.str();
  if (text.empty()) throw UserError(in + ": the file is empty; there is nothing to encode");
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  data::writeLlmcTokens(out, tokens);
  std::cerr << "bigc data: wrote " << tokens.size() << " tokens (byte-level, vocabulary 256, llm.c format) to " << out
            << "\n";
  return 0;
}
} // namespace

int dataMain(int argc, char **argv, int first) {
  try {
    return dataBody(argc, argv, first);
  } catch (const UserError &e) {
    std::string msg = e.what();
    std::cerr << (msg.rfind("bigc data", 0) == 0 ? "" : "bigc data: ") << msg << "\n";
    return 1;
  } catch (const std::bad_alloc &) {
    std::cerr << "bigc data: internal error: out of memory\n";
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "bigc data: internal error: " << e.what() << "\n";
    return 2;
  } catch (...) {
    std::cerr << "bigc data: internal error\n";
    return 2;
  }
}

int dataMain(int argc, char **argv) {
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "data") first = 2;
  return dataMain(argc, argv, first);
}

} // namespace bigc::rt
