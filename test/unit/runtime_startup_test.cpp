// Start-up at memory and disk speed: the initial values computed in parallel for any range (bit for
// bit the format's definition, computed here directly with the C library), XXH64 (against the
// published test values and the system's libxxhash), the O_DIRECT file writer, and loading a
// Hugging Face index of several safetensors files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <omp.h>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/safetensors.h"
#include "bigc/Runtime/xxh64.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
namespace st = bigc::rt::safetensors;

namespace {

// docs/program-format.md's definition, written out: SplitMix64 seeded with seed ^ fnv1a64(name),
// Box–Muller pairs in double through the C library, rounded once to the dtype (as stored bits).
std::vector<uint32_t> definedValues(int64_t n, double sd, uint64_t seed, const std::string &name, DType dtype) {
  uint64_t state = seed ^ fnv1a64(name.data(), name.size());
  auto next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = double((next() >> 11) + 1) * 0x1p-53, u2 = double(next() >> 11) * 0x1p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586476925286766559 * u2;
    const double v[2] = {sd * r * std::cos(a), sd * r * std::sin(a)};
    for (int k = 0; k < 2 && i + k < n; ++k) {
      if (dtype == DType::F32)
        out[size_t(i + k)] = floatBits(float(v[k]));
      else if (dtype == DType::BF16)
        out[size_t(i + k)] = f32ToBf16(f64ToF32RoundOdd(v[k]));
      else
        out[size_t(i + k)] = f32ToF16(f64ToF32RoundOdd(v[k]));
    }
  }
  return out;
}

std::vector<uint32_t> computed(int64_t begin, int64_t count, double sd, uint64_t seed, const std::string &name,
                               DType dtype) {
  std::vector<uint32_t> bits(static_cast<size_t>(count));
  if (dtype == DType::F32) {
    initNormalRange(bits.data(), dtype, begin, count, sd, seed, name);
  } else {
    std::vector<uint16_t> h(static_cast<size_t>(count));
    initNormalRange(h.data(), dtype, begin, count, sd, seed, name);
    for (int64_t i = 0; i < count; ++i) bits[size_t(i)] = h[size_t(i)];
  }
  return bits;
}

std::string tempDir() {
  char tmpl[] = "/tmp/bigc-startup-XXXXXX";
  const char *d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

} // namespace

// Pair k of the stream of (seed, name) the defined way (the draws are counter-based: SplitMix64's
// draw j is mix(s0 + (j + 1) * gamma)), rounded to `dtype`, as stored bits.
std::pair<uint32_t, uint32_t> definedPair(uint64_t k, double sd, uint64_t seed, const std::string &name, DType dtype) {
  const uint64_t s0 = seed ^ fnv1a64(name.data(), name.size());
  auto draw = [&](uint64_t j) {
    uint64_t z = s0 + (j + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const double u1 = double((draw(2 * k) >> 11) + 1) * 0x1p-53, u2 = double(draw(2 * k + 1) >> 11) * 0x1p-53;
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586476925286766559 * u2;
  const double v[2] = {sd * r * std::cos(a), sd * r * std::sin(a)};
  uint32_t out[2];
  for (int e = 0; e < 2; ++e)
    out[e] = dtype == DType::F32    ? floatBits(float(v[e]))
             : dtype == DType::BF16 ? f32ToBf16(f64ToF32RoundOdd(v[e]))
                                    : f32ToF16(f64ToF32RoundOdd(v[e]));
  return {out[0], out[1]};
}

TEST(RuntimeStartup, InitialValuesOfOddDrawsAbove2To52) {
  // Elements whose draw (x >> 11) is odd and >= 2^52 with a cosine or sine below 2^-14: where the
  // vectorised generator once converted x to a double rounded to even (off by one in the last
  // bit of u) and the error exceeded its rounding check's window. Found by searching 2^31 pairs
  // of this stream; each must be the defined value, whichever dtype and however the range starts.
  const std::string name = "h.0.mlp.c_fc.weight";
  for (int64_t e : {143142147LL, 154426270LL, 304806815LL, 437536677LL, 439061761LL})
    for (DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (int64_t begin : {e, e - 1, e - 7}) {
        const auto want = definedPair(uint64_t(e / 2), 0.02, 1337, name, dtype);
        const std::vector<uint32_t> got = computed(begin, e - begin + 1, 0.02, 1337, name, dtype);
        EXPECT_EQ(got.back(), e % 2 ? want.second : want.first)
            << "element " << e << " (" << dtypeName(dtype) << ", range from " << begin << ")";
      }
}

TEST(RuntimeStartup, InitialValuesAreTheDefinedOnesBitForBit) {
  // 3·2^20 + 3 elements of each dtype, whole and in ranges at odd places, on 1 and 2 threads:
  // every element equals the definition's (the fast path's rounding check sends the few near a
  // rounding boundary the defined way).
  const int64_t n = 3 * (int64_t(1) << 20) + 3;
  const int saved = omp_get_max_threads();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (double sd : {0.02, 1.0}) {
      const std::vector<uint32_t> want = definedValues(n, sd, 1337, "h.0.mlp.c_fc.weight", dtype);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        const std::vector<uint32_t> got = computed(0, n, sd, 1337, "h.0.mlp.c_fc.weight", dtype);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; ++i)
          if (got[size_t(i)] != want[size_t(i)]) bad += 1, first = first < 0 ? i : first;
        EXPECT_EQ(bad, 0) << "dtype " << dtypeName(dtype) << " std " << sd << " threads " << threads
                          << ": first difference at " << first;
      }
      omp_set_num_threads(saved);
      std::mt19937_64 rng(7);
      for (int k = 0; k < 20; ++k) { // a rank's shard or a thread's chunk: any begin, any length
        const int64_t begin = int64_t(rng() % uint64_t(n)),
                      count = std::min<int64_t>(n - begin, 1 + int64_t(rng() % 300000));
        const std::vector<uint32_t> got = computed(begin, count, sd, 1337, "h.0.mlp.c_fc.weight", dtype);
        ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + begin))
            << dtypeName(dtype) << " range [" << begin << ", " << begin + count << ")";
      }
    }
  }
}

TEST(RuntimeStartup, Xxh64MatchesTheSpecificationAndLibxxhash) {
  // Published values (xxHash's test suite): seed 0.
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  std::vector<unsigned char> data(size_t(1) << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  // Streaming in odd pieces equals one call.
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(100), size_t(4099), data.size()}) {
    Xxh64 x(5);
    for (size_t at = 0; at < n;) {
      const size_t take = std::min(n - at, at % 37 + 1);
      x.update(data.data() + at, take);
      at += take;
    }
    EXPECT_EQ(x.digest(), xxh64(data.data(), n, 5)) << n;
  }
  // The system's library, where it is installed (libxxhash0), as an independent implementation.
  void *lib = ::dlopen("libxxhash.so.0", RTLD_NOW);
  if (!lib) GTEST_SKIP() << "libxxhash.so.0 not installed: checked against the published values only";
  using Fn = unsigned long long (*)(const void *, size_t, unsigned long long);
  auto ref = reinterpret_cast<Fn>(::dlsym(lib, "XXH64"));
  ASSERT_NE(ref, nullptr);
  for (size_t n : {size_t(0), size_t(7), size_t(8), size_t(63), size_t(64), size_t(1000), data.size()})
    EXPECT_EQ(xxh64(data.data(), n, 5), ref(data.data(), n, 5)) << n;
  ::dlclose(lib);
}

TEST(RuntimeStartup, DirectWriterWritesExactlyTheBytes) {
  const std::string dir = tempDir();
  std::vector<char> data((size_t(40) << 20) + 12345); // over two 16 MiB buffers, an unaligned tail
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7 + (i >> 13));
  for (size_t n : {size_t(0), size_t(1), size_t(4096), size_t(16) << 20, data.size()}) {
    const std::string path = dir + "/f.bin";
    st::DirectFileWriter w(path);
    for (size_t at = 0; at < n;) { // appended in pieces of several sizes
      const size_t take = std::min(n - at, size_t(1000003));
      w.append(data.data() + at, int64_t(take));
      at += take;
    }
    w.finish();
    const std::string got = slurp(path);
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(0, std::memcmp(got.data(), data.data(), n));
    EXPECT_EQ(w.digest(), xxh64(data.data(), n));
    std::remove(path.c_str());
  }
  ::rmdir(dir.c_str());
}

TEST(RuntimeStartup, DirectWriterWritesCallersBytesInPlace) {
  // appendInPlace: the aligned part of the caller's bytes written from where they lie, the tail
  // and anything unaligned copied; the file and its digest are those of the bytes, in any mix.
  const std::string dir = tempDir();
  const size_t size = (size_t(40) << 20) + 12345;
  char *data = static_cast<char *>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096));
  ASSERT_NE(data, nullptr);
  for (size_t i = 0; i < size; ++i) data[i] = char(i * 11 + (i >> 12));
  struct Piece {
    size_t at, n;
    bool inPlace;
  };
  const std::vector<std::vector<Piece>> plans = {
      {{0, size, true}},                                                  // all of it in place
      {{0, 4096, false}, {4096, size - 4096, true}},                      // a header, then in place
      {{0, 100, false}, {100, size - 100, true}},                         // misaligned: copied
      {{0, 8192, true}, {8192, 5000, true}, {13192, size - 13192, true}}, // an unaligned tail between
  };
  for (size_t k = 0; k < plans.size(); ++k) {
    const std::string path = dir + "/f.bin";
    st::DirectFileWriter w(path);
    for (const Piece &pc : plans[k])
      pc.inPlace ? w.appendInPlace(data + pc.at, int64_t(pc.n)) : w.append(data + pc.at, int64_t(pc.n));
    w.finish();
    const std::string got = slurp(path);
    ASSERT_EQ(got.size(), size) << "plan " << k;
    EXPECT_EQ(0, std::memcmp(got.data(), data, size)) << "plan " << k;
    EXPECT_EQ(w.digest(), xxh64(data, size)) << "plan " << k;
    std::remove(path.c_str());
  }
  std::free(data);
  ::rmdir(dir.c_str());
}

TEST(RuntimeStartup, ImageFileHoldsTheSameTensorsAsAStreamedOne) {
  // writeImage (a checkpoint's snapshot written in place, header padded to 4096) and writeStreaming
  // give files that read back as the same tensors; the image's data begins at a 4096 boundary.
  const std::string dir = tempDir();
  std::vector<st::OutTensor> ts = {
      {"a", DType::F32, {3, 5}, 60}, {"b", DType::BF16, {7}, 14}, {"c", DType::F32, {1000}, 4000}};
  const size_t total = 60 + 14 + 4000;
  char *image = static_cast<char *>(std::aligned_alloc(4096, 8192));
  ASSERT_NE(image, nullptr);
  for (size_t i = 0; i < total; ++i) image[i] = char(i * 13 + 1);
  const std::map<std::string, std::string> md = {{"producer", "bigc"}};
  const auto img = st::writeImage(dir + "/img.safetensors", md, ts, image);
  size_t at = 0;
  const auto str = st::writeStreaming(dir + "/str.safetensors", md, ts, [&](size_t i, std::vector<uint8_t> &) {
    const uint8_t *p = reinterpret_cast<const uint8_t *>(image + at);
    at += size_t(ts[i].bytes);
    return p;
  });
  const st::File a = st::read(dir + "/img.safetensors"), b = st::read(dir + "/str.safetensors");
  ASSERT_EQ(a.tensors.size(), 3u);
  ASSERT_EQ(b.tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].data, b.tensors[i].data);
  }
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.tensors[0].fileOffset % 4096, 0u);
  EXPECT_EQ(img.first, int64_t(slurp(dir + "/img.safetensors").size()));
  EXPECT_EQ(str.first, int64_t(slurp(dir + "/str.safetensors").size()));
  std::free(image);
  std::remove((dir + "/img.safetensors").c_str());
  std::remove((dir + "/str.safetensors").c_str());
  ::rmdir(dir.c_str());
}

TEST(RuntimeStartup, WeightsAboutToBeLoadedAreNotInitialised) {
  // Under Engine::LoadingWeights the weights of record keep their mapped zeros (the loader writes
  // them next); everything else (AdamW moments, compute copies) is initialised as without it.
  Program p = bigc::rt::testing::offloadTiny(0.05, 0.0, 0.0);
  Executor plain(p, 3);
  std::unique_ptr<Executor> skipped;
  {
    Engine::LoadingWeights loading;
    skipped = std::make_unique<Executor>(p, 3);
  }
  std::set<int64_t> weights;
  for (const Buffer *b : plain.weights()) weights.insert(b->id);
  ASSERT_FALSE(weights.empty());
  bool someNonZero = false;
  for (const Buffer &b : p.buffers) {
    if (!b.persistent()) continue;
    const std::vector<float> got = skipped->readF32(b.id), want = plain.readF32(b.id);
    if (weights.count(b.id)) {
      for (float v : got) ASSERT_EQ(v, 0.0f) << b.name;
      for (float v : want) someNonZero |= v != 0.0f;
    } else if (b.init.kind != "copy") {
      EXPECT_EQ(got, want) << b.name;
    }
  }
  EXPECT_TRUE(someNonZero); // the weights would have had values
  Executor after(p, 3);     // the scope ended: initialised again
  for (int64_t id : weights) EXPECT_EQ(after.readF32(id), plain.readF32(id));
}

TEST(RuntimeStartup, HuggingFaceIndexOfSeveralFilesLoadsAsOne) {
  // The offload-shaped tiny model: fp32 masters and their compute copies. Its weights written as a
  // Hugging Face sharded checkpoint (two files, one bf16, with the index), loaded with
  // loadWeightsFrom: the masters hold the files' values (bf16 widened exactly), the compute copies
  // follow them; the same as loading one file with loadWeights.
  const std::string dir = tempDir();
  Program p = bigc::rt::testing::offloadTiny(0.05, 0.0, 0.0);
  Executor src(p, 3);
  st::File w = st::weightsOf(src);
  ASSERT_EQ(w.tensors.size(), 2u);
  st::File a, b;
  a.tensors.push_back(w.tensors[0]);
  st::Tensor t1 = w.tensors[1]; // as bf16
  std::vector<float> v1 = t1.toF32();
  t1.dtype = DType::BF16;
  t1.data.resize(v1.size() * 2);
  for (size_t i = 0; i < v1.size(); ++i) {
    const uint16_t h = f32ToBf16(v1[i]);
    std::memcpy(t1.data.data() + 2 * i, &h, 2);
  }
  b.tensors.push_back(t1);
  st::write(dir + "/model-00001-of-00002.safetensors", a);
  st::write(dir + "/model-00002-of-00002.safetensors", b);
  {
    std::ofstream idx(dir + "/model.safetensors.index.json");
    idx << "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {\"" << w.tensors[0].name
        << "\": \"model-00001-of-00002.safetensors\", \"" << t1.name << "\": \"model-00002-of-00002.safetensors\"}}";
  }
  st::File single;
  single.tensors = {a.tensors[0], t1};
  for (const std::string &given : {dir + "/model.safetensors.index.json", dir}) {
    Executor viaIndex(p, 9), viaFile(p, 9);
    st::loadWeightsFrom(viaIndex, given);
    st::loadWeights(viaFile, single, "single");
    for (const Buffer &buf : p.buffers) {
      if (!buf.persistent()) continue;
      EXPECT_EQ(viaIndex.readF32(buf.id), viaFile.readF32(buf.id)) << buf.name << " from " << given;
    }
    const Buffer *m0 = viaIndex.findPersistent(w.tensors[0].name), *m1 = viaIndex.findPersistent(t1.name);
    ASSERT_TRUE(m0 && m1);
    EXPECT_EQ(viaIndex.readF32(m0->id), w.tensors[0].toF32());
    EXPECT_EQ(viaIndex.readF32(m1->id), t1.toF32());
    const Buffer *c1 = viaIndex.findPersistent(t1.name + ".half");
    ASSERT_TRUE(c1);
    EXPECT_EQ(viaIndex.readF32(c1->id), t1.toF32()); // the compute copy follows its master
  }
  auto error = [&](const std::string &path) {
    Executor e(p, 9);
    try {
      st::loadWeightsFrom(e, path);
    } catch (const UserError &err) {
      return std::string(err.what());
    }
    return std::string();
  };
  // An index naming a tensor its file does not hold, and a file missing.
  {
    std::ofstream idx(dir + "/bad.index.json");
    idx << "{\"weight_map\": {\"" << w.tensors[0].name << "\": \"model-00002-of-00002.safetensors\", \"" << t1.name
        << "\": \"model-00002-of-00002.safetensors\"}}";
  }
  std::string m = error(dir + "/bad.index.json");
  EXPECT_NE(m.find("has no tensor '" + w.tensors[0].name + "'"), std::string::npos) << m;
  m = error(dir + "/nothing.safetensors");
  EXPECT_NE(m.find("nothing.safetensors: cannot open"), std::string::npos) << m;
  for (const char *f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json", "bad.index.json"})
    std::remove((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}
