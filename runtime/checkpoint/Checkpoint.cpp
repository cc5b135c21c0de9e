// Checkpoints: see include/bigc/Runtime/checkpoint.h.
#include "bigc/Runtime/checkpoint.h"
#include "bigc/Runtime/safetensors.h"

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
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace bigc::rt::checkpoint {

namespace {

using json = nlohmann::json;
constexpr const char *kFormat = "bigc-checkpoint";
constexpr int kVersion = 1;

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

// Size and FNV-1a 64 of a file, read in chunks.
std::pair<int64_t, uint64_t> fileChecksum(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<char> buf(size_t(16) << 20);
  uint64_t h = 0xcbf29ce484222325ull;
  int64_t size = 0;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) {
    h = fnv1a64(buf.data(), n, h);
    size += int64_t(n);
  }
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
  if (m.value("version", 0) != kVersion)
    fail(mpath, "checkpoint version " + std::to_string(m.value("version", 0)) + " (this bigc reads version " +
                    std::to_string(kVersion) + ")");
  for (const char *key : {"step", "updates", "program", "data", "files"})
    if (!m.contains(key)) fail(mpath, std::string("missing field '") + key + "'");
  for (auto &[name, f] : m["files"].items()) {
    const std::string fp = path + "/" + name;
    auto [size, h] = fileChecksum(fp);
    if (size != f.value("bytes", int64_t(-1)))
      fail(fp, "has " + std::to_string(size) + " bytes, the manifest says " +
                   std::to_string(f.value("bytes", int64_t(-1))) + " (damaged)");
    if (hex(h) != f.value("fnv1a64", "")) fail(fp, "checksum mismatch (damaged)");
  }
  return m;
}

} // namespace

std::string stateSignature(const Program &p) {
  // The training state a checkpoint holds, whatever the rank count, ZeRO stage, schedule,
  // recomputation or offload of the program that wrote it: every persistent tensor that is not a
  // compute copy (weights of record, AdamW moments, loss scale), as a whole tensor, and the
  // optimizer and precision that update it.
  std::vector<std::string> items;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent() || b.init.kind == "copy") continue;
    std::string it = b.name + ":" + dtypeName(b.dtype) + ":";
    for (int64_t d : (b.shard ? b.fullShape : b.shape)) it += std::to_string(d) + ",";
    items.push_back(it);
  }
  std::sort(items.begin(), items.end());
  char opt[256];
  std::snprintf(opt, sizeof opt, "%s|%.9g|%.9g|%.9g|%.9g|%.9g|%.9g", p.precision.c_str(), p.optimizer.lr,
                p.optimizer.beta1, p.optimizer.beta2, p.optimizer.eps, p.optimizer.weightDecay, p.optimizer.gradClip);
  std::string all = opt;
  for (const auto &it : items) all += "|" + it;
  return hex(fnv1a64(all.data(), all.size()));
}

Info save(const std::string &dir, const Engine &ex, const data::TokenSource &source, uint64_t seed, double loss,
          int keep) {
  const Program &p = ex.program();
  mkdirs(dir);
  // Leftovers of a run killed while writing.
  for (const std::string &n : entries(dir))
    if (n.rfind(".step-", 0) == 0) removeTree(dir + "/" + n);
  const int64_t step = ex.stepCount();
  const std::string name = stepName(step);
  const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const std::string final = dir + "/" + name;
  if (::mkdir(tmp.c_str(), 0777) != 0) fail(tmp, std::string("cannot create: ") + std::strerror(errno));

  json files = json::object();
  auto record = [&](const std::string &file, std::pair<int64_t, uint64_t> r) {
    files[file] = {{"bytes", r.first}, {"fnv1a64", hex(r.second)}};
  };
  // model.safetensors: the weights of record as f32 (as --save-weights writes them).
  {
    record("model.safetensors", safetensors::writeWeights(tmp + "/model.safetensors", ex,
                                                          {{"content", "weights"}, {"step", std::to_string(step)}}));
  }
  // Test hook: a pause in the middle of writing, so that a test can kill the process there.
  if (const char *pause = std::getenv("BIGC_TEST_CHECKPOINT_PAUSE_MS")) ::usleep(useconds_t(std::atoll(pause)) * 1000);
  // state.safetensors: every persistent buffer as stored.
  {
    std::vector<const Buffer *> ps;
    std::vector<safetensors::OutTensor> ts;
    for (const Buffer &b : p.buffers)
      if (b.persistent()) ps.push_back(&b), ts.push_back({b.name, b.dtype, b.shape, b.bytes});
    record("state.safetensors",
           safetensors::writeStreaming(
               tmp + "/state.safetensors", {{"format", "pt"}, {"producer", "bigc"}, {"content", "training state"}}, ts,
               [&](size_t i, std::vector<uint8_t> &buf) { ex.readBytes(ps[i]->id, buf.data()); }));
  }

  json m;
  m["format"] = kFormat;
  m["version"] = kVersion;
  m["step"] = step;
  m["updates"] = ex.updateCount();
  m["program"] = {{"checksum", hex(p.checksum)},
                  {"state_signature", stateSignature(p)},
                  {"zero", p.zero},
                  {"source", p.source},
                  {"precision", p.precision},
                  {"micro_batches", p.microBatches},
                  {"ranks", p.ranks},
                  {"parameters", p.parameterCount()}};
  m["backend"] = ex.backend();
  m["seed"] = seed;
  m["data"] = {{"kind", source.kind()}, {"state", source.state()}, {"describe", source.describe()}};
  m["loss"] = loss;
  if (ex.hasLossScaling()) m["loss_scale"] = ex.lastLossScale();
  m["files"] = files;
  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m["written"] = when;
  writeFileAtomic(tmp + "/manifest.json", m.dump(2) + "\n");
  fsyncPath(tmp);
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
    int64_t s = 0;
    if (isStepName(n, &s)) all.push_back({s, n});
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + size_t(std::max(keep, 1)) < all.size(); ++i) removeTree(dir + "/" + all[i].second);
  for (const std::string &n : entries(dir))
    if (n.rfind(".old-", 0) == 0) removeTree(dir + "/" + n);
  return Info{final, step, ex.updateCount(), loss};
}

void follow(const Engine &ex, bool weightsOnly) {
  for (const Buffer *b : ex.weights()) (void)ex.readF32(b->id); // model.safetensors / --save-weights
  if (weightsOnly) return;
  std::vector<uint8_t> buf;
  for (const Buffer &b : ex.program().buffers) // state.safetensors
    if (b.persistent()) {
      buf.resize(size_t(b.bytes));
      ex.readBytes(b.id, buf.data());
    }
}

Info latest(const std::string &dir, std::vector<std::string> *skipped) {
  std::vector<std::pair<int64_t, std::string>> all;
  for (const std::string &n : entries(dir)) {
    int64_t s = 0;
    if (isStepName(n, &s))
      all.push_back({s, n});
    else if (skipped && (n.rfind(".step-", 0) == 0 || n.rfind(".old-", 0) == 0))
      skipped->push_back(dir + "/" + n + ": an incomplete checkpoint (a run stopped while writing it)");
  }
  std::sort(all.rbegin(), all.rend());
  for (const auto &[s, n] : all) {
    const std::string path = dir + "/" + n;
    try {
      json m = readManifest(path);
      return Info{path, m["step"].get<int64_t>(), m["updates"].get<int64_t>(), m.value("loss", 0.0)};
    } catch (const UserError &e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return Info{};
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
  safetensors::File state = safetensors::readHeader(spath); // tensors' places only: read one at a time
  std::set<std::string> names;
  std::ifstream in(spath, std::ios::binary);
  if (!in) fail(spath, std::string("cannot open: ") + std::strerror(errno));
  std::vector<char> buf;
  bool refresh = false;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent()) continue;
    names.insert(b.name);
    const safetensors::Tensor *t = state.find(b.name);
    if (!sameProgram && b.init.kind == "copy") { // compute copies: made again from the masters (the
      refresh = true;                            // other program's may lag them, e.g. ZeRO-1/2's
      continue;                                  // whole copies gathered at the next step's start)
    }
    if (!t) fail(spath, "has no tensor '" + b.name + "'");
    if (t->dtype != b.dtype || t->shape != b.shape)
      fail(spath, "tensor '" + b.name + "' is " + safetensors::dtypeTag(t->dtype) +
                      " of another shape or dtype than the program's " + safetensors::dtypeTag(b.dtype) + " buffer");
    buf.resize(size_t(b.bytes));
    in.seekg(std::streamoff(t->fileOffset));
    in.read(buf.data(), std::streamsize(buf.size()));
    if (!in) fail(spath, "read error at tensor '" + b.name + "'");
    ex.writeBytes(b.id, buf.data());
  }
  for (const auto &t : state.tensors)
    if (!names.count(t.name) && sameProgram)
      fail(spath, "tensor '" + t.name + "' is not a persistent buffer of this program");
  if (refresh) ex.refreshCopies();
  source.restore(m["data"]["state"].get<std::vector<int64_t>>());
  const int64_t step = m["step"].get<int64_t>(), updates = m["updates"].get<int64_t>();
  ex.setCounters(step, updates);
  return Info{path, step, updates, m.value("loss", 0.0)};
}

} // namespace bigc::rt::checkpoint
