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

TokenFile::TokenFile(const std::string &path) : path_(path) {
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
  int32_t header[3] = {0, 0, 0};
  if (mapBytes_ >= 12) std::memcpy(header, bytes, sizeof header);
  if (header[0] == kLlmcMagic) {
    llmc_ = true;
    const size_t headerBytes = size_t(kLlmcHeaderInts) * 4;
    if (mapBytes_ < headerBytes)
      fail(path, "llm.c token file (magic 20240520) shorter than its 1024-byte header (" + std::to_string(mapBytes_) +
                     " bytes)");
    if (header[1] != 1)
      fail(path, "llm.c token file version " + std::to_string(header[1]) + "; bigc reads version 1 (uint16 tokens)");
    if (header[2] < 0) fail(path, "llm.c header announces a negative token count");
    int64_t want = int64_t(headerBytes) + 2 * int64_t(header[2]);
    if (int64_t(mapBytes_) < want)
      fail(path, "truncated: the llm.c header announces " + std::to_string(header[2]) + " tokens (" +
                     std::to_string(want) + " bytes), the file has " + std::to_string(mapBytes_) + " bytes");
    if (int64_t(mapBytes_) > want)
      fail(path, std::to_string(int64_t(mapBytes_) - want) + " bytes after the " + std::to_string(header[2]) +
                     " tokens its llm.c header announces");
    tokens_ = reinterpret_cast<const uint16_t *>(bytes + headerBytes);
    count_ = header[2];
  } else {
    if (mapBytes_ % 2 != 0)
      fail(path, "odd size (" + std::to_string(mapBytes_) +
                     " bytes): not a token file of uint16 tokens (nanoGPT) nor of the llm.c format");
    tokens_ = reinterpret_cast<const uint16_t *>(bytes);
    count_ = int64_t(mapBytes_ / 2);
  }
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, mapBytes_);
}

// ----- FileTokenSource

FileTokenSource::FileTokenSource(const std::string &path, int64_t B, int64_t T, int64_t vocab)
    : file_(path), B_(B), T_(T), vocab_(vocab) {
  int64_t need = B * T + 1;
  if (file_.size() < need)
    throw UserError("data file " + path + " has " + std::to_string(file_.size()) + " tokens; one batch of " +
                    std::to_string(B) + "×" + std::to_string(T) + " needs B·T+1 = " + std::to_string(need));
  // Small files are checked whole up front, so a bad token fails before the first step.
  if (file_.size() <= (int64_t(64) << 20)) {
    for (int64_t i = 0; i < file_.size(); ++i)
      if (file_[i] >= vocab_)
        fail(path, "token " + std::to_string(file_[i]) + " at position " + std::to_string(i) +
                       " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")");
    checkedUpTo_ = file_.size();
  }
}

void FileTokenSource::next(int32_t *inputs, int32_t *targets) {
  const int64_t bt = B_ * T_;
  if (pos_ + bt + 1 > file_.size()) pos_ = 0;
  const uint16_t *t = file_.tokens() + pos_;
  if (pos_ + bt + 1 > checkedUpTo_) {
    for (int64_t i = 0; i <= bt; ++i)
      if (t[i] >= vocab_)
        fail(file_.path(), "token " + std::to_string(t[i]) + " at position " + std::to_string(pos_ + i) +
                               " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")");
  }
  for (int64_t i = 0; i < bt; ++i) {
    inputs[i] = t[i];
    targets[i] = t[i + 1];
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

void writeNanoGptTokens(const std::string &path, const std::vector<uint16_t> &tokens) {
  std::string bytes(tokens.size() * 2, '\0');
  if (!tokens.empty()) std::memcpy(&bytes[0], tokens.data(), bytes.size());
  writeFileAtomic(path, bytes);
}

} // namespace bigc::rt::data

// ----- bigc data

namespace bigc::rt {

namespace {
const char *kDataUsage = "usage: bigc data encode input.txt -o tokens.bin   (byte-level tokens, vocabulary 256,\n"
                         "                                                  written in the llm.c format)\n";

int dataBody(int argc, char **argv, int first) {
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
