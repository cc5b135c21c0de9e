// Benchmark of bigc's CPU AdamW (runtime/optim/CpuAdam.cpp) and of this machine's memory
// bandwidth (a STREAM-triad loop over the same arrays), printed as one JSON object per line.
//
//   cpu_adam_bench [--n 100000000] [--threads 2] [--steps 10] [--warmup 3]
//                  [--grad f32|bf16|f16] [--half none|f32|bf16|f16] [--isa auto|avx512|avx2|scalar]
//                  [--no-triad] [--huge-pages]
//
// Steady state: `warmup` untimed steps, then the median of `steps` timed steps. Bytes moved per
// parameter by the Adam: read param, m, v (12) + grad (4 or 2); write param, m, v (12) + half
// (0, 4 or 2); f32 grads, no half: 16 read + 12 written = 28 bytes. The triad a = b + s*c counts
// 12 bytes per element (STREAM's convention: the write-allocate read of `a` is not counted).
// Built by bench/cpu_adam/run.sh (g++ -O3 -march=native -fopenmp with the library's source).
#include "bigc/Runtime/cpu_adam.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using bigc::rt::DType;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

bool hugePages = false;

void *alloc(size_t bytes) {
  size_t align = hugePages ? (size_t(2) << 20) : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  void *p = std::aligned_alloc(align, rounded);
  if (!p) {
    std::fprintf(stderr, "cpu_adam_bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  if (hugePages) madvise(p, rounded, MADV_HUGEPAGE); // transparent huge pages (before first touch)
  return p;
}

bool parseType(const std::string &s, DType &t) {
  if (s == "f32")
    t = DType::F32;
  else if (s == "bf16")
    t = DType::BF16;
  else if (s == "f16")
    t = DType::F16;
  else
    return false;
  return true;
}

[[noreturn]] void usage(const char *msg) {
  std::fprintf(
      stderr,
      "cpu_adam_bench: %s\nusage: cpu_adam_bench [--n N] [--threads T] [--steps S] [--warmup W] "
      "[--grad f32|bf16|f16] [--half none|f32|bf16|f16] [--isa auto|avx512|avx2|scalar] [--no-triad] [--huge-pages]\n",
      msg);
  std::exit(1);
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 100000000;
  int threads = 2, steps = 10, warmup = 3;
  std::string gradName = "f32", halfName = "none", isa = "auto";
  bool triad = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    try {
      if (a == "--n")
        n = std::stoll(next());
      else if (a == "--threads")
        threads = std::stoi(next());
      else if (a == "--steps")
        steps = std::stoi(next());
      else if (a == "--warmup")
        warmup = std::stoi(next());
      else if (a == "--grad")
        gradName = next();
      else if (a == "--half")
        halfName = next();
      else if (a == "--isa")
        isa = next();
      else if (a == "--no-triad")
        triad = false;
      else if (a == "--huge-pages")
        hugePages = true;
      else
        usage(("unknown option " + a).c_str());
    } catch (const std::logic_error &) {
      usage(("bad number for " + a).c_str());
    }
  }
  if (n <= 0 || threads <= 0 || steps <= 0 || warmup < 0) usage("--n, --threads, --steps must be positive");
  DType gt, ht = DType::F32;
  if (!parseType(gradName, gt)) usage(("bad --grad " + gradName).c_str());
  bool writeHalf = halfName != "none";
  if (writeHalf && !parseType(halfName, ht)) usage(("bad --half " + halfName).c_str());
  if (!bigc::rt::cpuAdamForceIsa(isa == "auto" ? "" : isa.c_str()))
    usage(("this machine cannot run --isa " + isa).c_str());
  omp_set_num_threads(threads);

  size_t gsz = gt == DType::F32 ? 4 : 2, hsz = !writeHalf ? 0 : ht == DType::F32 ? 4 : 2;
  float *p = static_cast<float *>(alloc(n * 4));
  float *m = static_cast<float *>(alloc(n * 4));
  float *v = static_cast<float *>(alloc(n * 4));
  void *g = alloc(n * gsz);
  void *h = writeHalf ? alloc(n * hsz) : nullptr;
  // First touch by the threads that will use the memory; deterministic, varied values.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * float(int(i % 2001) - 1000) / 1000.0f;
    m[i] = 0.0f;
    v[i] = 0.0f;
    float gv = 1e-3f * float(int((i * 7919) % 1999) - 999) / 999.0f;
    if (gt == DType::F32)
      static_cast<float *>(g)[i] = gv;
    else
      static_cast<uint16_t *>(g)[i] = gt == DType::BF16 ? 0x3a83 : 0x1419; // ~1e-3
    if (writeHalf) std::memset(static_cast<char *>(h) + i * hsz, 0, hsz);
  }

  // Memory bandwidth, three ways, on separate arrays a, b, c, d of n floats:
  //  triad  a = b + s*c: STREAM's convention counts 12 bytes/element; the hardware also reads
  //         `a` before writing it (write-allocate), so 16 bytes really move: both are reported.
  //  rmw    a = a + s*b: read 8, write 4, no write-allocate traffic, 12 bytes/element.
  //  same   a += d; b += d; c += d in one loop: Adam's memory streams without its arithmetic
  //         (4 read, 3 written, 28 bytes/element): the bound for Adam's access pattern.
  // Rounds interleave one Adam step with one run of each bandwidth loop, so that all see the
  // same machine (other processes come and go); each figure is the median over the rounds.
  float *a = nullptr, *b = nullptr, *cc = nullptr, *d = nullptr;
  if (triad) {
    a = static_cast<float *>(alloc(n * 4));
    b = static_cast<float *>(alloc(n * 4));
    cc = static_cast<float *>(alloc(n * 4));
    d = static_cast<float *>(alloc(n * 4));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      a[i] = 1.0f;
      b[i] = 2.0f;
      cc[i] = 3.0f;
      d[i] = 1e-3f;
    }
  }
  bigc::rt::CpuAdamArgs args;
  args.lr = 1e-4f;
  args.weightDecay = 0.01f;
  std::vector<double> times, tt, tr, ts;
  const float sc = 0.5f;
  for (int s = 0; s < warmup + steps; ++s) {
    args.step = s + 1;
    double t0 = now();
    bigc::rt::cpuAdamW(p, g, gt, m, v, h, ht, n, args);
    double t1 = now();
    if (s >= warmup) times.push_back(t1 - t0);
    if (!triad) continue;
    t0 = now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + sc * cc[i];
    t1 = now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = b[i] + sc * cc[i];
    double t2 = now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float x = d[i];
      a[i] += x;
      b[i] += x;
      cc[i] += x;
    }
    double t3 = now();
    if (s >= warmup) {
      tt.push_back(t1 - t0);
      tr.push_back(t2 - t1);
      ts.push_back(t3 - t2);
    }
  }
  double tAdam = median(times);
  double bytesPerParam = double(12 + gsz + 12 + hsz);
  double adamGBs = bytesPerParam * double(n) / tAdam / 1e9;
  double triadGBs = 0.0, triadRealGBs = 0.0, rmwGBs = 0.0, sameGBs = 0.0;
  if (triad) {
    triadGBs = 12.0 * double(n) / median(tt) / 1e9;
    triadRealGBs = 16.0 * double(n) / median(tt) / 1e9;
    rmwGBs = 12.0 * double(n) / median(tr) / 1e9;
    sameGBs = 28.0 * double(n) / median(ts) / 1e9;
    for (int64_t i = 0; i < n; i += 4099) sameGBs += 0.0 * (a[i] + b[i] + cc[i]); // keep the loops
  }
  double bestGBs = std::max({triadRealGBs, rmwGBs, sameGBs});
  double checksum = 0;
  for (int64_t i = 0; i < n; i += 4099) checksum += p[i];

  std::printf(
      "{\"impl\": \"bigc cpuAdamW (%s)\", \"isa\": \"%s\", \"n\": %lld, \"threads\": %d, \"grad\": \"%s\", "
      "\"half\": \"%s\", \"huge_pages\": %s, \"step_ms\": %.3f, \"params_per_s\": %.4g, \"bytes_per_param\": %.0f, "
      "\"adam_GBps\": %.2f, \"triad_GBps\": %.2f, \"triad_with_write_allocate_GBps\": %.2f, \"rmw_GBps\": %.2f, "
      "\"adam_streams_GBps\": %.2f, "
      "\"fraction_of_best_bandwidth\": %.3f, \"checksum\": %.6g}\n",
      bigc::rt::cpuAdamIsa(), bigc::rt::cpuAdamIsa(), (long long)n, threads, gradName.c_str(), halfName.c_str(),
      hugePages ? "true" : "false", tAdam * 1e3, double(n) / tAdam, bytesPerParam, adamGBs, triadGBs, triadRealGBs,
      rmwGBs, sameGBs, triad ? adamGBs / bestGBs : 0.0, checksum);
  std::free(p);
  std::free(m);
  std::free(v);
  std::free(g);
  std::free(h);
  std::free(a);
  std::free(b);
  std::free(cc);
  std::free(d);
  return 0;
}
