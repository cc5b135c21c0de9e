// Checkpoints: see include/bigc/Runtime/checkpoint.h.
#include "bigc/Runtime/checkpoint.h"
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/safetensors.h"
#include "bigc/Runtime/xxh64.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace bigc::rt::checkpoint {

namespace {

using json = nlohmann::json;
constexpr const char *kFormat = "bigc-checkpoint";
// Version 2: files checked with XXH64 ("xxh64"); version 1 (FNV-1a 64, "fnv1a64") is still read.
constexpr int kVersion = 2;

[[noreturn]] void fail(const std::string &path, const std::string &what) { throw UserError(path + ": " + what); }

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void fsyncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, std::string("cannot open for fsync: ") + std::strerror(errno));
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("fsync failed: ") + std::strerror(e));
  }
  ::close(fd);
}

void mkdirs(const std::string &dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += (cur.empty() || cur.back() == '/' ? "" : "/") + part;
    if (::mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST)
      fail(cur, std::string("cannot create: ") + std::strerror(errno));
  }
}

void removeTree(const std::string &path) {
  if (DIR *d = ::opendir(path.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string p = path + "/" + n;
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        removeTree(p);
      else
        ::unlink(p.c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string stepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", (long long)step);
  return buf;
}

bool isStepName(const std::string &n, int64_t *step) {
  if (n.size() < 6 || n.compare(0, 5, "step-") != 0) return false;
  for (size_t i = 5; i < n.size(); ++i)
    if (n[i] < '0' || n[i] > '9') return false;
  *step = std::stoll(n.substr(5));
  return true;
}

// Size and checksum (XXH64, or FNV-1a 64 for version 1) of a file, read in chunks.
std::pair<int64_t, uint64_t> fileChecksum(const std::string &path, bool fnv) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<char> buf(size_t(16) << 20);
  uint64_t h = 0xcbf29ce484222325ull;
  Xxh64 x;
  int64_t size = 0;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) {
    if (fnv)
      h = fnv1a64(buf.data(), n, h);
    else
      x.update(buf.data(), n);
    size += int64_t(n);
  }
  if (!fnv) h = x.digest();
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) fail(path, "read error");
  return {size, h};
}

// Parses and checks a checkpoint directory's manifest and files; throws UserError naming what is
// wrong.
json readManifest(const std::string &path) {
  const std::string mpath = path + "/manifest.json";
  json m;
  try {
    m = json::parse(slurp(mpath));
  } catch (const json::exception &e) {
    fail(mpath, std::string("not valid JSON: ") + e.what());
  }
  if (!m.is_object() || m.value("format", "") != kFormat) fail(mpath, "not a bigc checkpoint manifest");
  const int version = m.value("version", 0);
  if (version != kVersion && version != 1)
    fail(mpath, "checkpoint version " + std::to_string(version) + " (this bigc reads versions 1 and " +
                    std::to_string(kVersion) + ")");
  const char *sumKey = version == 1 ? "fnv1a64" : "xxh64";
  for (const char *key : {"step", "updates", "program", "data", "files"})
    if (!m.contains(key)) fail(mpath, std::string("missing field '") + key + "'");
  for (auto &[name, f] : m["files"].items()) {
    const std::string fp = path + "/" + name;
    auto [size, h] = fileChecksum(fp, version == 1);
    if (size != f.value("bytes", int64_t(-1)))
      fail(fp, "has " + std::to_string(size) + " bytes, the manifest says " +
                   std::to_string(f.value("bytes", int64_t(-1))) + " (damaged)");
    if (hex(h) != f.value(sumKey, "")) fail(fp, "checksum mismatch (damaged)");
  }
  return m;
}

} // namespace

std::string stateSignature(const Program &p) {
  // The training state a checkpoint holds, whatever the rank count, ZeRO stage, schedule,
  // recomputation or offload of the program that wrote it: every persistent tensor that is not a
  // compute copy (weights of record, AdamW moments, loss scale), as a whole tensor, and the
  // optimizer and precision that update it. A padded vocabulary's tensors count in the model's
  // shape (the checkpoint holds their model rows), so a run resumes with or without the padding.
  std::vector<std::string> items;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent() || b.init.kind == "copy") continue;
    std::string it = b.name + ":" + dtypeName(b.dtype) + ":";
    std::vector<int64_t> shape = b.shard ? b.fullShape : b.shape;
    if (b.vocabRows > 0 && !shape.empty()) shape[0] = b.vocabRows;
    for (int64_t d : shape) it += std::to_string(d) + ",";
    items.push_back(it);
  }
  std::sort(items.begin(), items.end());
  char opt[256];
  std::snprintf(opt, sizeof opt, "%s|%.9g|%.9g|%.9g|%.9g|%.9g|%.9g", p.precision.c_str(), p.optimizer.lr,
                p.optimizer.beta1, p.optimizer.beta2, p.optimizer.eps, p.optimizer.weightDecay, p.optimizer.gradClip);
  std::string all = opt;
  if (p.optimizer.schedule.present()) all += "|" + describeSchedule(p.optimizer); // (none: as before it existed)
  for (const auto &it : items) all += "|" + it;
  return hex(fnv1a64(all.data(), all.size()));
}

namespace {

// What a checkpoint writes, taken between two steps: the counters, the data position, and the
// bytes of every persistent buffer (as stored, whole tensors), through `bytes`.
struct Snap {
  std::string dir;
  int keep = 2;
  const Program *program = nullptr;
  int64_t step = 0, updates = 0;
  double loss = 0;
  bool scaling = false;
  float lossScale = 0;
  uint64_t seed = 0;
  std::string backend;
  json data;
  std::vector<const Buffer *> state;    // every persistent buffer, program order
  std::vector<size_t> weights;          // the weights of record, as indices into `state`
  std::vector<std::string> weightNames; // their names in model.safetensors (Hugging Face's layout when
                                        // the program has a Hugging Face config: from_pretrained opens
                                        // the checkpoint's directory as it is)
  // Tensor i of `state`'s bytes: a pointer to them (the engine's memory or a snapshot), or `buf`
  // filled with them.
  std::function<const uint8_t *(size_t, std::vector<uint8_t> &)> bytes;
  // A snapshot (Writer): the bytes of state[order[0]], state[order[1]], ... back to back at `image`
  // (page-aligned), the weights of record first, so that both files are written from it in place.
  const char *image = nullptr;
  std::vector<size_t> order;
  Clock::time_point origin; // the run's start (timings in the manifest are relative to it)
  double beganS = -1;       // when the writing began (Writer: when save() handed it to the thread)
};

double since(Clock::time_point origin) { return std::chrono::duration<double>(Clock::now() - origin).count(); }

// Writes the checkpoint of `s` (temporary directory, fsync, rename, pruning).
Info writeSnap(const Snap &s, WriteStats *stats) {
  const std::string &dir = s.dir;
  const double began = s.beganS >= 0 ? s.beganS : since(s.origin);
  mkdirs(dir);
  // Leftovers of a run killed while writing.
  for (const std::string &n : entries(dir))
    if (n.rfind(".step-", 0) == 0) removeTree(dir + "/" + n);
  const int64_t step = s.step;
  const std::string name = stepName(step);
  const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const std::string final = dir + "/" + name;
  if (::mkdir(tmp.c_str(), 0777) != 0) fail(tmp, std::string("cannot create: ") + std::strerror(errno));
  int64_t total = 0;
  json files = json::object();
  auto record = [&](const std::string &file, std::pair<int64_t, uint64_t> r) {
    files[file] = {{"bytes", r.first}, {"xxh64", hex(r.second)}};
    total += r.first;
  };
  try {
    // model.safetensors: the weights of record as f32 (as --save-weights writes them).
    {
      const std::map<std::string, std::string> md = {
          {"format", "pt"}, {"producer", "bigc"}, {"content", "weights"}, {"step", std::to_string(step)}};
      std::vector<safetensors::OutTensor> ts;
      bool f32 = true;
      for (size_t k = 0; k < s.weights.size(); ++k) {
        const Buffer &b = *s.state[s.weights[k]]; // the model's shape: a padded vocabulary's first rows
        ts.push_back({s.weightNames[k], DType::F32, b.logicalShape(), b.logicalNumel() * 4});
        f32 = f32 && b.dtype == DType::F32;
      }
      std::vector<uint8_t> conv;
      if (s.image && f32) // the image begins with the weights of record, in this order
        record("model.safetensors", safetensors::writeImage(tmp + "/model.safetensors", md, ts, s.image));
      else
        record("model.safetensors",
               safetensors::writeStreaming(tmp + "/model.safetensors", md, ts,
                                           [&](size_t k, std::vector<uint8_t> &buf) -> const uint8_t * {
                                             const Buffer &b = *s.state[s.weights[k]];
                                             const uint8_t *p = s.bytes(s.weights[k], conv);
                                             if (b.dtype == DType::F32) return p;
                                             buf.resize(size_t(b.logicalNumel() * 4));
                                             convert(p, b.dtype, buf.data(), DType::F32, b.logicalNumel());
                                             return buf.data();
                                           }));
    }
    // config.json beside the weights (a model with a Hugging Face config): the directory is one
    // from_pretrained opens.
    if (!s.program->hfConfig.empty()) {
      json config = json::parse(s.program->hfConfig);
      config["torch_dtype"] = "float32";
      const std::string text = config.dump(2) + "\n";
      writeFileAtomic(tmp + "/config.json", text);
      record("config.json", {int64_t(text.size()), xxh64(text.data(), text.size())});
    }
    // Test hook: a pause in the middle of writing, so that a test can kill the process there.
    if (const char *pause = std::getenv("BIGC_TEST_CHECKPOINT_PAUSE_MS"))
      ::usleep(useconds_t(std::atoll(pause)) * 1000);
    // state.safetensors: every persistent buffer as stored (a padded vocabulary's: its model rows).
    {
      const std::map<std::string, std::string> md = {
          {"format", "pt"}, {"producer", "bigc"}, {"content", "training state"}};
      std::vector<safetensors::OutTensor> ts;
      auto out = [](const Buffer &b) {
        return safetensors::OutTensor{b.name, b.dtype, b.logicalShape(), b.logicalNumel() * dtypeSize(b.dtype)};
      };
      if (s.image) {
        for (size_t i : s.order) ts.push_back(out(*s.state[i]));
        record("state.safetensors", safetensors::writeImage(tmp + "/state.safetensors", md, ts, s.image));
      } else {
        for (const Buffer *b : s.state) ts.push_back(out(*b));
        record("state.safetensors",
               safetensors::writeStreaming(tmp + "/state.safetensors", md, ts,
                                           [&](size_t i, std::vector<uint8_t> &buf) { return s.bytes(i, buf); }));
      }
    }
  } catch (...) {
    removeTree(tmp);
    throw;
  }
  const double ended = since(s.origin);
  const Program &p = *s.program;
  json m;
  m["format"] = kFormat;
  m["version"] = kVersion;
  m["step"] = step;
  m["updates"] = s.updates;
  m["program"] = {{"checksum", hex(p.checksum)},
                  {"state_signature", stateSignature(p)},
                  {"zero", p.zero},
                  {"source", p.source},
                  {"precision", p.precision},
                  {"micro_batches", p.microBatches},
                  {"ranks", p.ranks},
                  {"parameters", p.parameterCount()}};
  m["backend"] = s.backend;
  m["seed"] = s.seed;
  m["data"] = s.data;
  m["loss"] = s.loss;
  if (s.scaling) m["loss_scale"] = s.lossScale;
  m["files"] = files;
  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m["written"] = when;
  // When its files were written, in seconds since the run began (the clock of the log's elapsed_s).
  m["timing"] = {{"write_began_s", began}, {"write_ended_s", ended}};
  try {
    writeFileAtomic(tmp + "/manifest.json", m.dump(2) + "\n");
    fsyncPath(tmp);
  } catch (...) {
    removeTree(tmp);
    throw;
  }
  // A checkpoint of this step may exist (the same step saved twice, e.g. by a signal right after a
  // periodic save): replace it only now that the new one is whole.
  if (::access(final.c_str(), F_OK) == 0) {
    const std::string old = dir + "/.old-" + name + "." + std::to_string(::getpid());
    if (::rename(final.c_str(), old.c_str()) != 0) fail(final, std::string("cannot replace: ") + std::strerror(errno));
    if (::rename(tmp.c_str(), final.c_str()) != 0)
      fail(final, std::string("cannot rename into place: ") + std::strerror(errno));
    removeTree(old);
  } else if (::rename(tmp.c_str(), final.c_str()) != 0) {
    int e = errno;
    removeTree(tmp);
    fail(final, std::string("cannot rename into place: ") + std::strerror(e));
  }
  fsyncPath(dir);

  // Keep the newest `keep` complete checkpoints.
  std::vector<std::pair<int64_t, std::string>> all;
  for (const std::string &n : entries(dir)) {
    int64_t st = 0;
    if (isStepName(n, &st)) all.push_back({st, n});
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + size_t(std::max(s.keep, 1)) < all.size(); ++i) removeTree(dir + "/" + all[i].second);
  for (const std::string &n : entries(dir))
    if (n.rfind(".old-", 0) == 0) removeTree(dir + "/" + n);
  if (stats) *stats = WriteStats{total, began, since(s.origin)};
  return Info{final, step, s.updates, s.loss};
}

// The counters and data position of a checkpoint of `ex` now.
Snap describe(const std::string &dir, int keep, const Engine &ex, const data::TokenSource &source, uint64_t seed,
              double loss) {
  Snap s;
  s.dir = dir, s.keep = keep, s.program = &ex.program();
  s.step = ex.stepCount(), s.updates = ex.updateCount(), s.loss = loss;
  s.scaling = ex.hasLossScaling();
  if (s.scaling) s.lossScale = ex.lastLossScale();
  s.seed = seed, s.backend = ex.backend();
  s.data = {{"kind", source.kind()}, {"state", source.state()}, {"describe", source.describe()}};
  for (const Buffer &b : ex.program().buffers)
    if (b.persistent()) s.state.push_back(&b);
  const std::vector<safetensors::NamedWeight> names = safetensors::weightNames(
      ex, ex.program().hfConfig.empty() ? safetensors::WeightNames::Program : safetensors::WeightNames::HuggingFace);
  for (const safetensors::NamedWeight &w : names)
    for (size_t i = 0; i < s.state.size(); ++i)
      if (s.state[i] == w.buffer) s.weights.push_back(i), s.weightNames.push_back(w.name);
  return s;
}

// Whether the host pieces of a buffer hold each of its n elements once the replicas are skipped;
// then `out` lists one piece per range, in order.
bool wholeFromPieces(const std::vector<Engine::HostPiece> &pieces, int64_t n, std::vector<Engine::HostPiece> &out) {
  out.clear();
  std::vector<Engine::HostPiece> ps = pieces;
  std::stable_sort(ps.begin(), ps.end(), [](const auto &a, const auto &b) { return a.begin < b.begin; });
  int64_t at = 0;
  for (const auto &pc : ps) {
    if (pc.count == 0 || pc.begin + pc.count <= at) continue; // a replica, or empty padding
    if (pc.begin != at) return false;
    out.push_back(pc);
    at += pc.count;
  }
  return at == n;
}

} // namespace

Info save(const std::string &dir, const Engine &ex, const data::TokenSource &source, uint64_t seed, double loss,
          int keep, Clock::time_point origin) {
  // Between steps, from the engine's memory (no snapshot): training waits for it.
  Snap s = describe(dir, keep, ex, source, seed, loss);
  s.origin = origin;
  s.bytes = [&](size_t i, std::vector<uint8_t> &buf) -> const uint8_t * {
    const Buffer &b = *s.state[i];
    std::vector<Engine::HostPiece> whole;
    if (mpiWorld().first == 1 && wholeFromPieces(ex.hostPieces(b.id), b.numel(), whole) && whole.size() == 1)
      return static_cast<const uint8_t *>(whole[0].data);
    buf.resize(size_t(b.bytes));
    ex.readBytes(b.id, buf.data());
    return buf.data();
  };
  return writeSnap(s, nullptr);
}

Writer::Writer(std::string dir, int keep, Clock::time_point origin)
    : dir_(std::move(dir)), keep_(keep), origin_(origin) {}

Writer::~Writer() {
  try {
    wait();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bigc run: the checkpoint being written failed: %s\n", e.what());
  }
  if (arena_) ::munmap(arena_, size_t(arenaBytes_));
}

void Writer::save(const Engine &ex, const data::TokenSource &source, uint64_t seed, double loss) {
  wait(); // one checkpoint in flight at a time: one snapshot of memory
  const auto t0 = Clock::now();
  Snap s = describe(dir_, keep_, ex, source, seed, loss);
  s.origin = origin_;
  // The snapshot: every persistent buffer's bytes, copied in parallel (read through the engine
  // where they are not in this process's memory: a GPU, or other processes' shards).
  // Laid out as the files' data (the weights of record first, then the rest in program order,
  // back to back), so that the writer sends it to disk from where it lies.
  std::vector<size_t> order = s.weights;
  {
    std::vector<char> isWeight(s.state.size(), 0);
    for (size_t i : s.weights) isWeight[i] = 1;
    for (size_t i = 0; i < s.state.size(); ++i)
      if (!isWeight[i]) order.push_back(i);
  }
  std::vector<int64_t> offset(s.state.size(), 0);
  int64_t total = 0; // (a padded vocabulary's tensor: its model rows, the first elements)
  for (size_t i : order) offset[i] = total, total += s.state[i]->logicalNumel() * dtypeSize(s.state[i]->dtype);
  total = (total + 4095) / 4096 * 4096;
  if (!arena_ || arenaBytes_ < total) {
    if (arena_) ::munmap(arena_, size_t(arenaBytes_));
    arena_ = nullptr;
    void *p = ::mmap(nullptr, size_t(std::max<int64_t>(total, 1)), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      throw UserError("--checkpoint-dir " + dir_ + ": cannot allocate the checkpoint snapshot of " +
                      std::to_string(total) + " bytes");
    arena_ = static_cast<char *>(p), arenaBytes_ = std::max<int64_t>(total, 1);
    populated_ = false;
  }
  if (!populated_) { // map the snapshot's pages in bulk once (MADV_POPULATE_WRITE), then reuse them
    zeroFill(arena_, total, true);
    populated_ = true;
  }
  struct Copy {
    const char *from;
    char *to;
    int64_t bytes;
  };
  std::vector<Copy> copies;
  const bool oneProcess = mpiWorld().first == 1;
  std::vector<Engine::HostPiece> whole;
  std::vector<char> padded; // a padded tensor read whole, its model rows kept
  for (size_t i = 0; i < s.state.size(); ++i) {
    const Buffer &b = *s.state[i];
    char *dst = arena_ + offset[i];
    const int64_t e = dtypeSize(b.dtype), keep = b.logicalNumel() * e;
    if (oneProcess && wholeFromPieces(ex.hostPieces(b.id), b.numel(), whole)) {
      for (const auto &pc : whole) {
        const int64_t end = std::min(pc.count * e, keep - pc.begin * e);
        for (int64_t at = 0; at < end; at += int64_t(16) << 20)
          copies.push_back(Copy{static_cast<const char *>(pc.data) + at, dst + pc.begin * e + at,
                                std::min<int64_t>(int64_t(16) << 20, end - at)});
      }
    } else if (keep < b.bytes) {
      padded.resize(size_t(b.bytes));
      ex.readBytes(b.id, padded.data()); // (under mpirun every process reads in this order: follow())
      std::memcpy(dst, padded.data(), size_t(keep));
    } else {
      ex.readBytes(b.id, dst); // (under mpirun every process reads in this order: follow())
    }
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t k = 0; k < copies.size(); ++k) std::memcpy(copies[k].to, copies[k].from, size_t(copies[k].bytes));
  const char *arena = arena_;
  s.bytes = [arena, offset](size_t i, std::vector<uint8_t> &) {
    return reinterpret_cast<const uint8_t *>(arena + offset[i]);
  };
  s.image = arena, s.order = std::move(order);
  lastSnapshotSeconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  s.beganS = since(origin_);
  error_ = nullptr;
  done_ = false;
  thread_ = std::thread([this, s = std::move(s)] {
    // Signals are the main thread's (SIGINT/SIGTERM end the run there).
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    try {
      WriteStats st;
      Info info = writeSnap(s, &st);
      std::lock_guard<std::mutex> lock(mu_);
      info_ = info, stats_ = st;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    done_ = true;
  });
}

bool Writer::finished() const { return thread_.joinable() && done_.load(); }

Info Writer::wait(WriteStats *stats) {
  if (!thread_.joinable()) return Info{};
  thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  if (stats) *stats = stats_;
  return info_;
}

void follow(const Engine &ex, Follow what) {
  if (what != Follow::Snapshot) // --save-weights, or save()'s model.safetensors
    for (const Buffer *b : ex.weights()) (void)ex.readF32(b->id);
  if (what == Follow::Weights) return;
  std::vector<uint8_t> buf; // a checkpoint: its state, in save()'s order (model.safetensors is made from it)
  for (const Buffer &b : ex.program().buffers)
    if (b.persistent()) {
      buf.resize(size_t(b.bytes));
      ex.readBytes(b.id, buf.data());
    }
}

Info latest(const std::string &dir, std::vector<std::string> *skipped, bool quarantine,
            std::vector<std::string> *incomplete) {
  std::vector<std::string> *leftovers = incomplete ? incomplete : skipped;
  std::vector<std::pair<int64_t, std::string>> all;
  const std::vector<std::string> names = entries(dir);
  for (const std::string &n : names) {
    int64_t s = 0;
    if (isStepName(n, &s)) {
      all.push_back({s, n});
      continue;
    }
    // A whole checkpoint a same-step replacement renamed aside (.old-step-N.PID) before its
    // replacement arrived is step N's checkpoint where there is no step-N: read where it is (every
    // process of a run sees the same; the next write removes it once a newer one exists).
    const size_t dot = n.rfind('.');
    if (n.rfind(".old-", 0) == 0 && dot > 5 && isStepName(n.substr(5, dot - 5), &s) &&
        std::find(names.begin(), names.end(), n.substr(5, dot - 5)) == names.end()) {
      all.push_back({s, n});
      continue;
    }
    if (leftovers && (n.rfind(".step-", 0) == 0 || n.rfind(".old-", 0) == 0))
      leftovers->push_back(dir + "/" + n + ": an incomplete checkpoint (a run stopped while writing it)");
  }
  std::sort(all.rbegin(), all.rend());
  for (const auto &[s, n] : all) {
    const std::string path = dir + "/" + n;
    try {
      json m = readManifest(path);
      return Info{path, m["step"].get<int64_t>(), m["updates"].get<int64_t>(), m.value("loss", 0.0)};
    } catch (const UserError &e) {
      std::string why = e.what();
      if (quarantine) {
        // Moved aside under a name that says so: no longer a checkpoint (not resumed, not counted
        // among those kept, not pruned), kept for whoever wants to look at it.
        std::string aside = path + ".damaged";
        for (int k = 2; ::access(aside.c_str(), F_OK) == 0; ++k) aside = path + ".damaged." + std::to_string(k);
        if (::rename(path.c_str(), aside.c_str()) == 0) {
          fsyncPath(dir);
          why += "; moved aside to " + aside;
        } else {
          why += std::string("; cannot move it aside: ") + std::strerror(errno);
        }
      }
      if (skipped) skipped->push_back(why);
    }
  }
  return Info{};
}

DirLock::DirLock(const std::string &dir) {
  mkdirs(dir);
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) fail(path, std::string("cannot open the checkpoint directory's lock: ") + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (e == EWOULDBLOCK)
      throw UserError("--checkpoint-dir " + dir + " is in use by another run" +
                      (pid.empty() ? std::string() : " (pid " + pid + ")") +
                      ": two runs must not write one checkpoint directory; wait for it to end, or give this run "
                      "another --checkpoint-dir");
    fail(path, std::string("cannot lock the checkpoint directory: ") + std::strerror(e));
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    // (the lock holds without the pid; only the message of a second run would lack it)
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_); // releases the flock
}

Info load(const std::string &path, Engine &ex, data::TokenSource &source) {
  json m = readManifest(path);
  const Program &p = ex.program();
  const std::string want = hex(p.checksum), got = m["program"].value("checksum", "");
  // Another program with the same training state (another rank count, ZeRO stage, recomputation,
  // offload, schedule) resumes it too: the state is stored whole, each rank takes its shards.
  const bool sameProgram = got == want;
  if (!sameProgram && m["program"].value("state_signature", "") != stateSignature(p))
    fail(path,
         "written by another program (checksum " + got + ", this program's is " + want + ", compiled from " +
             m["program"].value("source", std::string("?")) +
             ") whose training state differs (other tensors, precision or optimizer settings); resume with a "
             "program of the same model, precision and optimizer, or start from its weights with --load-weights " +
             path + "/model.safetensors");
  if (m["data"].value("kind", "") != source.kind())
    fail(path, "taken reading " + m["data"].value("kind", std::string("?")) + " data; this run reads " + source.kind() +
                   " data (resume with the same --data or --synthetic)");
  const std::string spath = path + "/state.safetensors";
  safetensors::File state = safetensors::readHeader(spath); // tensors' places only
  std::set<std::string> names;
  bool refresh = false;
  std::vector<safetensors::TensorRead> reads;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent()) continue;
    names.insert(b.name);
    const safetensors::Tensor *t = state.find(b.name);
    if (!sameProgram && b.init.kind == "copy") { // compute copies: made again from the masters (the
      refresh = true;                            // other program's may lag them, e.g. ZeRO-1/2's
      continue;                                  // whole copies gathered at the next step's start)
    }
    if (!t) fail(spath, "has no tensor '" + b.name + "'");
    if (t->dtype != b.dtype || (t->shape != b.shape && t->shape != b.logicalShape())) // (padded: its model rows)
      fail(spath, "tensor '" + b.name + "' is " + safetensors::dtypeTag(t->dtype) +
                      " of another shape or dtype than the program's " + safetensors::dtypeTag(b.dtype) + " buffer");
    reads.push_back({&b, t, -1, &spath});
  }
  for (const auto &t : state.tensors)
    if (!names.count(t.name) && sameProgram)
      fail(spath, "tensor '" + t.name + "' is not a persistent buffer of this program");
  // Every tensor checked: read them, in parallel, straight into the buffers (each rank its shards).
  const int fd = ::open(spath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(spath, std::string("cannot open: ") + std::strerror(errno));
  for (auto &r : reads) r.fd = fd;
  try {
    safetensors::readTensors(ex, reads);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (refresh) ex.refreshCopies();
  source.restore(m["data"]["state"].get<std::vector<int64_t>>());
  const int64_t step = m["step"].get<int64_t>(), updates = m["updates"].get<int64_t>();
  ex.setCounters(step, updates);
  return Info{path, step, updates, m.value("loss", 0.0)};
}

} // namespace bigc::rt::checkpoint
