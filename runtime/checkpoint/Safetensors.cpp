// safetensors in the runtime: the streaming writer and weight load/save for the executor (the file
// format itself: format/Safetensors.cpp).
#include "bigc/Runtime/safetensors.h"
#include "bigc/Format/shape.h"
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h" // initConstantRange

#include "bigc/Runtime/half.h"
#include "bigc/Runtime/xxh64.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

namespace bigc::rt::safetensors {

using json = nlohmann::json;

namespace {
[[noreturn]] void fail(const std::string &path, const std::string &msg) { throw UserError(path + ": " + msg); }
} // namespace

DirectFileWriter::DirectFileWriter(const std::string &path) : path_(path) {
  // O_DIRECT: the disk reads the data from our buffers (no copy into the page cache, which costs
  // as much CPU as the training next to it can spare); where the file system refuses it, buffered.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0666);
  direct_ = fd_ >= 0;
  if (fd_ < 0) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) fail(path, std::string("cannot write: ") + std::strerror(errno));
  for (auto &b : bufs_) {
    b.data = static_cast<char *>(std::aligned_alloc(kAlign, size_t(kBuffer)));
    if (!b.data) {
      ::close(fd_);
      fail(path, "cannot allocate write buffers");
    }
  }
  io_ = std::thread([this] { ioLoop(); });
}

DirectFileWriter::~DirectFileWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_.joinable()) io_.join();
  if (fd_ >= 0) ::close(fd_);
  for (auto &b : bufs_) std::free(b.data);
}

// The I/O thread: writes the filled buffers in order while the caller fills the next.
void DirectFileWriter::ioLoop() {
  for (;;) {
    Buf *b = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || bufs_[next_ % kBuffers].full; });
      if (!bufs_[next_ % kBuffers].full) return;
      b = &bufs_[next_ % kBuffers];
    }
    int64_t n = b->bytes, at = 0;
    if (direct_ && !b->src) n = (n + kAlign - 1) / kAlign * kAlign; // the tail padded (truncated in finish)
    const char *from = b->src ? b->src : b->data;
    int err = 0;
    while (at < n) {
      const ssize_t w = ::pwrite(fd_, from + at, size_t(n - at), off_t(b->offset + at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      at += w;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !err_) err_ = err;
      b->full = false;
      ++next_;
    }
    cv_.notify_all();
  }
}

void DirectFileWriter::flushBuffer() {
  if (bufs_[filling_ % kBuffers].bytes != 0) queue();
}

void DirectFileWriter::queue() {
  Buf &b = bufs_[filling_ % kBuffers];
  std::unique_lock<std::mutex> lock(mu_);
  b.full = true;
  ++filling_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return !bufs_[filling_ % kBuffers].full; }); // the next one written
  if (err_) fail(path_, std::string("write failed: ") + std::strerror(err_));
  Buf &nb = bufs_[filling_ % kBuffers];
  nb.bytes = 0;
  nb.offset = size_;
  nb.src = nullptr;
}

void DirectFileWriter::appendInPlace(const void *data, int64_t n) {
  const char *p = static_cast<const char *>(data);
  const int64_t aligned = n / kAlign * kAlign;
  if (!direct_ || reinterpret_cast<uintptr_t>(p) % kAlign != 0 || size_ % kAlign != 0 || aligned == 0) {
    append(data, n);
    return;
  }
  flushBuffer(); // what was appended before (it ends at a 4096-byte boundary)
  for (int64_t at = 0; at < aligned; at += kBuffer) {
    const int64_t take = std::min(kBuffer, aligned - at);
    sum_.update(p + at, size_t(take));
    Buf &b = bufs_[filling_ % kBuffers];
    b.src = p + at, b.bytes = take, b.offset = size_;
    size_ += take;
    queue();
  }
  append(p + aligned, n - aligned);
}

void DirectFileWriter::append(const void *data, int64_t n) {
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    Buf &b = bufs_[filling_ % kBuffers];
    const int64_t take = std::min(n, kBuffer - b.bytes);
    std::memcpy(b.data + b.bytes, p, size_t(take));
    sum_.update(b.data + b.bytes, size_t(take));
    b.bytes += take, size_ += take, p += take, n -= take;
    if (b.bytes == kBuffer) flushBuffer();
  }
}

void DirectFileWriter::finish() {
  flushBuffer();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      for (const Buf &b : bufs_)
        if (b.full) return false;
      return true;
    });
    if (err_) fail(path_, std::string("write failed: ") + std::strerror(err_));
  }
  if (direct_ && ::ftruncate(fd_, off_t(size_)) != 0) fail(path_, std::string("write failed: ") + std::strerror(errno));
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    fail(path_, std::string("write failed: ") + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_, std::string("write failed: ") + std::strerror(errno));
}

namespace {
// The 8-byte length and the JSON header of a file of tensors `ts` back to back in that order,
// padded with spaces so that the data begins at a multiple of `align` bytes.
std::string headerOf(const std::map<std::string, std::string> &metadata, const std::vector<OutTensor> &ts,
                     size_t align) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const OutTensor &t : ts) {
    header[t.name] = {
        {"dtype", dtypeTag(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + uint64_t(t.bytes)}}};
    off += uint64_t(t.bytes);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % align != 0) h.push_back(' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  return head + h;
}

// Writes path + ".tmp" (the header, then `body`), renames it into place; its size and XXH64.
std::pair<int64_t, uint64_t> writeFile(const std::string &path, const std::string &head,
                                       const std::function<void(DirectFileWriter &)> &body) {
  const std::string tmp = path + ".tmp";
  DirectFileWriter out(tmp);
  std::string failure;
  try {
    out.append(head.data(), int64_t(head.size()));
    body(out);
    out.finish();
  } catch (const UserError &e) {
    failure = e.what();
  }
  if (!failure.empty() || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = failure.empty() ? std::string(std::strerror(errno)) : failure;
    std::remove(tmp.c_str());
    fail(path, "write failed: " + why);
  }
  return {out.size(), out.digest()};
}
} // namespace

std::pair<int64_t, uint64_t> writeStreaming(const std::string &path, const std::map<std::string, std::string> &metadata,
                                            const std::vector<OutTensor> &ts, const FillFn &fill) {
  return writeFile(path, headerOf(metadata, ts, 8), [&](DirectFileWriter &out) {
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < ts.size(); ++i) {
      buf.clear();
      const uint8_t *p = fill(i, buf);
      out.append(p, ts[i].bytes);
    }
  });
}

std::pair<int64_t, uint64_t> writeImage(const std::string &path, const std::map<std::string, std::string> &metadata,
                                        const std::vector<OutTensor> &ts, const char *image) {
  int64_t total = 0;
  for (const OutTensor &t : ts) total += t.bytes;
  return writeFile(path, headerOf(metadata, ts, 4096), [&](DirectFileWriter &out) { out.appendInPlace(image, total); });
}

namespace {
// The module's persistent buffers (Program::initialBuffers), read from the initial weights file
// that holds them, as they are there.
std::vector<Tensor> moduleBuffers(const Program &p) {
  std::vector<Tensor> out;
  if (p.initialBuffers.empty()) return out;
  const format::safetensors::Headers h = format::safetensors::readHeaders(p.initialWeights);
  std::map<std::string, std::pair<const Tensor *, size_t>> byName;
  for (const auto &[t, f] : h.tensors()) byName[t->name] = {t, f};
  for (const std::string &name : p.initialBuffers) {
    auto it = byName.find(name);
    if (it == byName.end())
      fail(h.path, "the module's buffer '" + name + "', which --save-weights copies from it, is not there");
    const auto [found, file] = it->second;
    Tensor t = *found;
    t.data.resize(size_t(t.numel() * dtypeSize(t.dtype)));
    const int fd = ::open(h.files[file].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(h.files[file], std::string("cannot open it: ") + std::strerror(errno));
    const ssize_t got = ::pread(fd, t.data.data(), t.data.size(), off_t(t.fileOffset));
    ::close(fd);
    if (got != ssize_t(t.data.size())) fail(h.files[file], "cannot read the module's buffer '" + name + "'");
    out.push_back(std::move(t));
  }
  return out;
}

std::pair<int64_t, uint64_t> writeWeightsAnd(const std::string &path, const Engine &ex,
                                             const std::vector<NamedWeight> &ws,
                                             const std::map<std::string, std::string> &metadata,
                                             const std::vector<Tensor> &extras);
} // namespace

std::pair<int64_t, uint64_t> writeWeights(const std::string &path, const Engine &ex,
                                          const std::map<std::string, std::string> &metadata, WeightNames how) {
  // The names of the module's state_dict: its persistent buffers too.
  const std::vector<Tensor> extras = how == WeightNames::Module ? moduleBuffers(ex.program()) : std::vector<Tensor>();
  return writeWeightsAnd(path, ex, weightNames(ex, how), metadata, extras);
}

std::pair<int64_t, uint64_t> writeWeights(const std::string &path, const Engine &ex, const std::vector<NamedWeight> &ws,
                                          const std::map<std::string, std::string> &metadata) {
  return writeWeightsAnd(path, ex, ws, metadata, {});
}

namespace {
std::pair<int64_t, uint64_t> writeWeightsAnd(const std::string &path, const Engine &ex,
                                             const std::vector<NamedWeight> &ws,
                                             const std::map<std::string, std::string> &metadata,
                                             const std::vector<Tensor> &extras) {
  std::vector<OutTensor> ts; // the model's shapes: a padded vocabulary's first rows (the data's prefix)
  for (const NamedWeight &w : ws)
    ts.push_back({w.name, DType::F32, w.buffer->logicalShape(), w.buffer->logicalNumel() * 4});
  for (const Tensor &t : extras) ts.push_back({t.name, t.dtype, t.shape, int64_t(t.data.size())});
  std::map<std::string, std::string> md = {{"format", "pt"}, {"producer", "bigc"}};
  for (const auto &[k, v] : metadata) md[k] = v;
  std::vector<uint8_t> last; // the previous tensor's bytes, for a tied weight's other name
  const uint8_t *lastPtr = nullptr;
  return writeStreaming(path, md, ts, [&](size_t i, std::vector<uint8_t> &buf) -> const uint8_t * {
    if (i >= ws.size()) return extras[i - ws.size()].data.data(); // a module's buffer, as it was given
    if (ws[i].again) return lastPtr; // the same weight again (read once: under mpirun, reads are collective)
    lastPtr = [&]() -> const uint8_t * {
      const Buffer &b = *ws[i].buffer;
      // In this process's memory (in one process only: under mpirun the other processes follow the
      // reads below, which may be collectives; checkpoint::follow).
      const std::vector<Engine::HostPiece> pieces =
          mpiWorld().first == 1 ? ex.hostPieces(b.id) : std::vector<Engine::HostPiece>();
      if (pieces.size() == 1 && pieces[0].begin == 0 && pieces[0].count == b.numel()) {
        if (b.dtype == DType::F32) return static_cast<const uint8_t *>(pieces[0].data);
        buf.resize(size_t(b.logicalNumel() * 4));
        convert(pieces[0].data, b.dtype, buf.data(), DType::F32, b.logicalNumel());
        return static_cast<const uint8_t *>(buf.data());
      }
      buf.resize(size_t(b.logicalNumel() * 4));
      std::vector<float> v = ex.readF32(b.id);
      std::memcpy(buf.data(), v.data(), buf.size());
      return static_cast<const uint8_t *>(buf.data());
    }();
    if (i + 1 < ws.size() && ws[i + 1].again && lastPtr == buf.data()) { // keep it past the next fill
      last.assign(buf.begin(), buf.end());
      lastPtr = last.data();
    }
    return lastPtr;
  });
}

} // namespace

File weightsOf(const Engine &ex) {
  File f;
  f.metadata["format"] = "pt";
  f.metadata["producer"] = "bigc";
  for (const Buffer *b : ex.weights()) // masters when there are, as f32; a padded vocabulary's rows
    f.tensors.push_back(Tensor::fromF32(b->name, b->logicalShape(), ex.readF32(b->id).data()));
  return f;
}

File gradsOf(const Engine &ex) {
  File f;
  f.metadata["format"] = "pt";
  f.metadata["producer"] = "bigc";
  f.metadata["content"] = "gradients";
  const auto &grads = ex.capturedGrads();
  for (const Buffer *b : ex.weights()) {
    auto it = grads.find(b->name);
    if (it == grads.end()) continue;
    f.tensors.push_back(Tensor::fromF32(b->name, b->logicalShape(), it->second.data()));
  }
  return f;
}

std::vector<NamedWeight> weightNames(const Engine &ex, WeightNames how) {
  const Program &p = ex.program();
  std::vector<NamedWeight> out;
  for (const Buffer *b : ex.weights()) {
    auto al = p.aliases.find(b->name);
    const std::vector<std::string> none;
    const std::vector<std::string> &aliases = al == p.aliases.end() ? none : al->second;
    if (how == WeightNames::Program) {
      out.push_back({b->name, b, false});
    } else if (how == WeightNames::Module) { // every name of the module's state_dict
      out.push_back({b->name, b, false});
      for (const std::string &a : aliases) out.push_back({a, b, true});
    } else { // save_pretrained: a tied weight once, under the input embedding's name; the prefix
      std::string kept = b->name;
      if (kept.rfind("lm_head.", 0) == 0)
        for (const std::string &a : aliases)
          if (a.rfind("lm_head.", 0) != 0) {
            kept = a;
            break;
          }
      if (!p.hfPrefix.empty() && kept.rfind("lm_head.", 0) != 0 && kept.rfind(p.hfPrefix, 0) != 0)
        kept = p.hfPrefix + kept;
      out.push_back({kept, b, false});
    }
  }
  return out;
}

namespace {
// Which tensor of the file(s) is each weight of record (the rules of loadWeights); throws naming
// the first problem before anything is written. A weight may come under its own name, one of its
// aliases (a tied weight's other names), either with the program's Hugging Face prefix, or (bigc
// gen gpt's names) with `transformer.`; when the file holds it under two of them, `twins` gets the
// pair (their bytes must be equal: an untied checkpoint does not load into a tied model).
std::vector<std::pair<const Buffer *, const Tensor *>>
matchWeights(const Engine &ex, const std::vector<const Tensor *> &tensors, const std::string &path,
             std::vector<std::pair<const Tensor *, const Tensor *>> *twins = nullptr) {
  const Program &prog = ex.program();
  const std::vector<const Buffer *> weights = ex.weights(); // masters when there are
  std::map<std::string, const Buffer *> nameOf;             // every name a weight may come under
  auto add = [&](const std::string &n, const Buffer *b) {
    nameOf.emplace(n, b);
    if (!prog.hfPrefix.empty() && n.rfind("lm_head.", 0) != 0) nameOf.emplace(prog.hfPrefix + n, b);
    nameOf.emplace("transformer." + n, b); // Hugging Face GPT-2's names of bigc gen gpt's weights
  };
  for (const Buffer *b : weights) add(b->name, b);
  for (const Buffer *b : weights)
    if (auto al = prog.aliases.find(b->name); al != prog.aliases.end())
      for (const std::string &a : al->second) add(a, b);
  for (const Buffer *b : weights) // its name in the initial weights file (a checkpoint without the prefix)
    if (auto st = prog.initialNames.find(b->name); st != prog.initialNames.end()) nameOf.emplace(st->second, b);
  std::map<const Buffer *, const Tensor *> got;
  for (const Tensor *t : tensors) {
    auto it = nameOf.find(t->name);
    if (it == nameOf.end()) {
      if (format::safetensors::isSavedBuffer(t->name) ||
          std::find(prog.initialBuffers.begin(), prog.initialBuffers.end(), t->name) != prog.initialBuffers.end())
        continue;
      fail(path, "tensor '" + t->name + "' " + shapeStr(t->shape) + " is not a parameter of this model");
    }
    auto [at, fresh] = got.emplace(it->second, t);
    if (!fresh) {
      if (at->second->name == t->name) fail(path, "tensor '" + t->name + "' appears twice");
      if (!twins)
        fail(path, "tensors '" + at->second->name + "' and '" + t->name + "' are one weight of this model ('" +
                       it->second->name + "', tied) and the file holds both");
      twins->push_back({at->second, t});
    }
  }
  for (const Buffer *b : weights) {
    auto it = got.find(b);
    // A padded vocabulary (bigc-pad-vocab): the model's shape (its first rows), or the padded one.
    const std::vector<int64_t> model = b->logicalShape();
    if (it == got.end()) {
      std::string also;
      if (auto al = prog.aliases.find(b->name); al != prog.aliases.end())
        for (const std::string &a : al->second) also += (also.empty() ? " (or '" : "', '") + a;
      fail(path, "parameter '" + b->name + "'" + (also.empty() ? "" : also + "', its tied names)") + " " +
                     shapeStr(model) + " is missing from the weights file");
    }
    for (const Tensor *t : {it->second}) {
      if (t->shape != model && t->shape != b->shape)
        fail(path, "parameter '" + b->name + "'" + (t->name != b->name ? " ('" + t->name + "')" : std::string()) +
                       ": expected shape " + shapeStr(model) + ", found " + shapeStr(t->shape));
      // Only exact conversions: a 16-bit float widens to f32 exactly; integers are never weights,
      // and f32 is not rounded into a 16-bit weight of record.
      const DType from = t->dtype, to = b->dtype;
      if (from == DType::I32)
        fail(path, "parameter '" + b->name + "' is stored as I32 (integers): weights are F32, BF16 or F16 (converted " +
                       "exactly to the model's " + dtypeTag(to) + ")");
      if (from != to && !(to == DType::F32 && (from == DType::BF16 || from == DType::F16)))
        fail(path, "parameter '" + b->name + "' is stored as " + dtypeTag(from) + "; the model's weight is " +
                       dtypeTag(to) + " and converting it would round: convert the file to " + dtypeTag(to) + " first");
    }
  }
  if (twins)
    for (const auto &[a, b] : *twins)
      if (a->shape != b->shape || a->dtype != b->dtype)
        fail(path, "tensors '" + a->name + "' and '" + b->name +
                       "' are one weight of this model (tied) but differ in shape or dtype: an untied checkpoint does "
                       "not load into a tied model");
  std::vector<std::pair<const Buffer *, const Tensor *>> out;
  for (const Buffer *b : weights) out.push_back({b, got.at(b)});
  return out;
}

constexpr int64_t kIoChunk = int64_t(8) << 20; // bytes of a file read by one thread at a time

// Reads n bytes at `offset` of fd into dst (short reads continued); false on an error or the end.
bool preadAll(int fd, void *dst, int64_t n, uint64_t offset) {
  char *p = static_cast<char *>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, size_t(std::min<int64_t>(n, int64_t(1) << 30)), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= got, offset += uint64_t(got);
  }
  return true;
}

// One read: n elements of dtype `from` at file offset `offset` into dst as dtype `to`.
struct ReadJob {
  int fd;
  uint64_t offset;
  DType from;
  void *dst;
  DType to;
  int64_t n;
  const std::string *path, *name;
};

void runReads(const std::vector<ReadJob> &jobs) {
  std::string error;
#pragma omp parallel
  {
    std::vector<unsigned char> bounce; // per thread: the file's bytes when they need converting
#pragma omp for schedule(dynamic, 1)
    for (size_t j = 0; j < jobs.size(); ++j) {
      const ReadJob &r = jobs[j];
      bool ok;
      if (r.from == r.to) {
        ok = preadAll(r.fd, r.dst, r.n * dtypeSize(r.from), r.offset);
      } else {
        bounce.resize(size_t(r.n * dtypeSize(r.from)));
        ok = preadAll(r.fd, bounce.data(), int64_t(bounce.size()), r.offset);
        if (ok) convert(bounce.data(), r.from, r.dst, r.to, r.n);
      }
      if (!ok) {
        const int e = errno;
#pragma omp critical(bigc_read_error)
        if (error.empty())
          error = *r.path + ": read error at tensor '" + *r.name + "': " + (e ? std::strerror(e) : "unexpected end");
      }
    }
  }
  if (!error.empty()) throw UserError(error);
}

// Jobs reading elements [begin, begin + count) of tensor t (of the file open as fd) into dst.
void addReads(std::vector<ReadJob> &jobs, int fd, const Tensor &t, int64_t begin, int64_t count, void *dst, DType to,
              const std::string &path) {
  const int64_t fe = dtypeSize(t.dtype), te = dtypeSize(to), per = std::max<int64_t>(1, kIoChunk / fe);
  for (int64_t i = 0; i < count; i += per)
    jobs.push_back(ReadJob{fd, t.fileOffset + uint64_t((begin + i) * fe), t.dtype, static_cast<char *>(dst) + i * te,
                           to, std::min(per, count - i), &path, &t.name});
}
} // namespace

void readTensors(Engine &ex, const std::vector<TensorRead> &items) {
  std::vector<ReadJob> jobs;
  std::vector<unsigned char> whole;
  // A padded vocabulary's tensor read from a file of the model's shape: its elements are the
  // buffer's first ones; the rest (the padding rows) are zeros.
  std::vector<std::tuple<char *, DType, int64_t>> zeros;
  for (const TensorRead &it : items) {
    const Buffer &b = *it.buffer;
    int64_t inFile = 1;
    for (int64_t d : it.tensor->shape) inFile *= d;
    const std::vector<Engine::HostPiece> pieces = ex.hostPieces(b.id);
    const int64_t e = dtypeSize(b.dtype);
    if (pieces.empty()) { // not in host memory: the whole tensor, then writeBytes
      whole.assign(size_t(b.bytes), 0);
      std::vector<ReadJob> one;
      addReads(one, it.fd, *it.tensor, 0, std::min(b.numel(), inFile), whole.data(), b.dtype, *it.path);
      runReads(one);
      ex.writeBytes(b.id, whole.data());
      continue;
    }
    for (const Engine::HostPiece &pc : pieces) { // each rank's own shard (or replica)
      const int64_t n = std::clamp<int64_t>(inFile - pc.begin, 0, pc.count);
      if (n > 0) addReads(jobs, it.fd, *it.tensor, pc.begin, n, pc.data, b.dtype, *it.path);
      if (n < pc.count) zeros.emplace_back(static_cast<char *>(pc.data) + n * e, b.dtype, pc.count - n);
    }
  }
  runReads(jobs);
  for (const auto &[at, dtype, count] : zeros) initConstantRange(at, dtype, count, 0.0f);
}

void loadWeights(Engine &ex, const File &file, const std::string &path) {
  std::vector<const Tensor *> tensors;
  for (const auto &t : file.tensors) tensors.push_back(&t);
  std::vector<unsigned char> whole;
  std::vector<std::pair<const Tensor *, const Tensor *>> twins;
  const auto matched = matchWeights(ex, tensors, path, &twins);
  for (const auto &[a, b] : twins)
    if (a->data != b->data)
      fail(path, "tensors '" + a->name + "' and '" + b->name +
                     "' are one weight of this model (tied) but hold different values: an untied checkpoint does not "
                     "load into a tied model");
  for (const auto &[b, t] : matched) {
    const std::vector<Engine::HostPiece> pieces = ex.hostPieces(b->id);
    const int64_t fe = dtypeSize(t->dtype), be = dtypeSize(b->dtype);
    const int64_t inFile = int64_t(t->data.size()) / fe; // a padded vocabulary's: its first elements
    if (pieces.empty()) {
      whole.assign(size_t(b->bytes), 0);
      convert(t->data.data(), t->dtype, whole.data(), b->dtype, std::min(b->numel(), inFile));
      ex.writeBytes(b->id, whole.data());
      continue;
    }
    for (const Engine::HostPiece &pc : pieces) {
      const int64_t n = std::clamp<int64_t>(inFile - pc.begin, 0, pc.count);
      if (n > 0) convert(t->data.data() + pc.begin * fe, t->dtype, pc.data, b->dtype, n);
      if (n < pc.count) initConstantRange(static_cast<char *>(pc.data) + n * be, b->dtype, pc.count - n, 0.0f);
    }
  }
  ex.refreshCopies(); // compute copies (init kind copy) follow the loaded masters
}

namespace {
struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};
} // namespace

void loadWeightsFrom(Engine &ex, const std::string &given) {
  // The files: one safetensors file, or those of a Hugging Face index (or a directory of either).
  const format::safetensors::Headers h = format::safetensors::readHeaders(given);
  const std::string &path = h.path;
  const std::vector<std::string> &files = h.files;
  const bool isIndex = h.isIndex;
  std::vector<const Tensor *> tensors;
  std::map<const Tensor *, size_t> fileOf;
  for (const auto &[t, i] : h.tensors()) tensors.push_back(t), fileOf[t] = i;
  std::vector<std::pair<const Tensor *, const Tensor *>> twins;
  const auto matched = matchWeights(ex, tensors, isIndex ? path : files[0], &twins);
  std::vector<OpenFile> fds(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    fds[i].fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fds[i].fd < 0) fail(files[i], std::string("cannot open: ") + std::strerror(errno));
    ::posix_fadvise(fds[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  // A tied weight the file holds under two names: the same bytes (else an untied checkpoint).
  for (const auto &[a, b] : twins) {
    const int64_t n = a->numel() * dtypeSize(a->dtype);
    std::vector<char> x(size_t(std::min<int64_t>(n, kIoChunk))), y(x.size());
    for (int64_t at = 0; at < n; at += int64_t(x.size())) {
      const int64_t k = std::min<int64_t>(int64_t(x.size()), n - at);
      if (!preadAll(fds[fileOf.at(a)].fd, x.data(), k, a->fileOffset + uint64_t(at)) ||
          !preadAll(fds[fileOf.at(b)].fd, y.data(), k, b->fileOffset + uint64_t(at)))
        fail(path, "cannot read '" + a->name + "' and '" + b->name + "'");
      if (std::memcmp(x.data(), y.data(), size_t(k)) != 0)
        fail(path, "tensors '" + a->name + "' and '" + b->name +
                       "' are one weight of this model (tied) but hold different values: an untied checkpoint does "
                       "not load into a tied model");
    }
  }
  std::vector<TensorRead> items;
  for (const auto &[b, t] : matched) items.push_back({b, t, fds[fileOf.at(t)].fd, &files[fileOf.at(t)]});
  readTensors(ex, items);
  ex.refreshCopies(); // compute copies (init kind copy) follow the loaded masters
}

} // namespace bigc::rt::safetensors

namespace bigc::rt::safetensors {

void writeHfDirectory(const std::string &dir, const Engine &ex, int64_t maxShardBytes) {
  const Program &p = ex.program();
  if (p.hfConfig.empty())
    throw UserError("--save-hf: this program has no Hugging Face config (a model from `bigc import torch` is your "
                    "own module): --save-weights FILE writes its weights under the module's names, which "
                    "load_state_dict(strict=True) takes");
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    fail(dir, std::string("cannot create: ") + std::strerror(errno));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(dir, "not a directory");
  const std::vector<NamedWeight> ws = weightNames(ex, WeightNames::HuggingFace);
  // Shards in order, each at most maxShardBytes (a larger tensor alone in its shard), as
  // save_pretrained cuts them.
  std::vector<std::vector<NamedWeight>> shards(1);
  int64_t in = 0, total = 0;
  for (const NamedWeight &w : ws) {
    const int64_t b = w.buffer->logicalNumel() * 4;
    if (!shards.back().empty() && in + b > maxShardBytes) shards.emplace_back(), in = 0;
    shards.back().push_back(w);
    in += b, total += b;
  }
  const std::map<std::string, std::string> md = {{"format", "pt"}};
  json config = json::parse(p.hfConfig);
  config["torch_dtype"] = "float32"; // the weights' dtype as written
  if (shards.size() == 1) {
    writeWeights(dir + "/model.safetensors", ex, shards[0], md);
  } else {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
    const size_t n = shards.size();
    for (size_t k = 0; k < n; ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
      writeWeights(dir + "/" + name, ex, shards[k], md);
      for (const NamedWeight &w : shards[k]) index["weight_map"][w.name] = name;
    }
    writeFileAtomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
    ::unlink((dir + "/model.safetensors").c_str()); // (a single file of an earlier save would shadow the index)
  }
  writeFileAtomic(dir + "/config.json", config.dump(2) + "\n");
}

} // namespace bigc::rt::safetensors
