// `bigc calibrate`: measure this machine as the CPU backend sees it and write a hardware profile
// (hardware/README.md) whose rates are the measured ones, for the cost model. No MLIR here.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/kernels.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Support/cli.h"
#include "bigc/Support/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <omp.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace bigc::rt {

namespace {
const char *kCalibrateUsage =
    "usage: bigc calibrate [-o FILE.json] [--name NAME] [--threads N] [--seconds S]\n"
    "Measures this machine as the CPU backend uses it and writes a hardware profile for\n"
    "`bigc compile --hardware FILE.json` (the cost model's rates):\n"
    "  device_flops            sgemm (the matmul kernel) at the sizes of a small GPT's layers\n"
    "  device_bytes_per_s      an elementwise kernel (add) over 3 x 32 MiB\n"
    "  host_flops              the CPU Adam over 4 Mi parameters, in the cost model's 16 FLOPs each\n"
    "  h2d/d2h_bytes_per_s     memcpy of 64 MiB (the CPU backend's transfers are copies)\n"
    "  interconnect_bytes_per_s, collective_latency_s\n"
    "                          the in-process communicator's all-reduce between 2 ranks (threads):\n"
    "                          16 MiB (bandwidth, the ring's 2(n-1)/n bytes) and one float (latency)\n"
    "  op_overhead_s           the cost of one small instruction (a kernel on 256 floats)\n"
    "  op_flops                attention, gelu, cross-entropy, layernorm and their gradients, each\n"
    "                          at a small GPT's sizes, in the cost model's FLOP counts\n"
    "Memory sizes are the machine's physical memory (the device arena and the host share it).\n"
    "  -o FILE.json   where to write it (default: standard output)\n"
    "  --name NAME    the profile's name (default: cpu-calibrated)\n"
    "  --threads N    CPU threads, as `bigc run --threads` (default: all)\n"
    "  --seconds S    time per measurement (default 0.5; the median of its repetitions)\n"
    "exit status: 0 written; 1 bad input\n";

using Clock = std::chrono::steady_clock;

// The median time of `fn` over repetitions filling about `seconds` (at least 3).
double medianSeconds(const std::function<void()> &fn, double seconds) {
  fn(); // warm up: pages, caches, thread pools
  std::vector<double> t;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (t.size() < 3 || (Clock::now() < end && t.size() < 1000)) {
    auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string rate(double v, const char *unit) {
  char b[64];
  std::snprintf(b, sizeof b, v >= 1000 ? "%.0f %s" : "%.3g %s", v, unit); // (no exponent)
  return b;
}

} // namespace

int calibrateMain(int argc, char **argv, int first) {
  try {
    cli::Args args = cli::parse(argc, argv, first, {"-o", "--name", "--threads", "--seconds"}, {"--help"}, "calibrate");
    if (args.has("--help")) {
      std::cout << kCalibrateUsage;
      return 0;
    }
    if (!args.positional.empty())
      throw UserError("calibrate: unexpected argument '" + args.positional[0] +
                      "' (usage: bigc calibrate -o FILE.json)");
    const std::string name = args.has("--name") ? args.str("--name") : "cpu-calibrated";
    if (name.empty()) throw UserError("calibrate: --name must not be empty");
    const double seconds = args.number("--seconds", 0.5);
    if (!(seconds > 0 && seconds <= 60)) throw UserError("calibrate: --seconds must be in (0, 60]");
    int64_t threads = args.integer("--threads", 0);
    if (args.has("--threads") && threads < 1) throw UserError("calibrate: --threads must be >= 1");
    if (threads > 0) {
      omp_set_num_threads(int(threads));
      openblas_set_num_threads(int(threads));
    }
    threads = omp_get_max_threads();
    const std::string out = args.has("-o") ? args.str("-o") : "";
    if (args.has("-o") && out.empty()) throw UserError("calibrate: -o needs a file name");
    auto say = [&](const std::string &s) {
      if (!out.empty()) std::fprintf(stderr, "bigc calibrate: %s\n", s.c_str());
    };
    std::vector<std::string> sources;

    // GEMM: the shapes of a 4-block GPT 256 wide with 1024 tokens (the QKV, MLP and LM-head
    // products and their backward forms); the rate of all of them together.
    struct Shape {
      int64_t M, N, K;
      bool ta, tb;
    };
    const std::vector<Shape> shapes = {{1024, 768, 256, false, false},  {1024, 1024, 256, false, false},
                                       {1024, 256, 1024, false, false}, {1024, 256, 1024, false, true},
                                       {256, 1024, 1024, true, false},  {1024, 2048, 256, false, true}};
    double flops = 0, gemmSeconds = 0;
    {
      std::vector<float> a(1024 * 1024, 0.01f), b(1024 * 2048, 0.02f), c(1024 * 2048);
      for (const Shape &s : shapes) {
        gemmSeconds +=
            medianSeconds([&] { cpu::matmul(a.data(), b.data(), c.data(), 1, s.M, s.N, s.K, s.ta, s.tb, 0, 0, 0); },
                          seconds / double(shapes.size()));
        flops += 2.0 * double(s.M) * double(s.N) * double(s.K);
      }
    }
    const double deviceFlops = flops / gemmSeconds;
    say("sgemm " + rate(deviceFlops / 1e9, "GFLOP/s"));
    sources.push_back("device_flops: sgemm (bigc's matmul kernel, OpenBLAS) over 6 products of 256..2048 x 1024, " +
                      rate(deviceFlops / 1e9, "GFLOP/s"));

    // Kernels far from the GEMM rate (transcendentals, softmax, attention's loops): each one's
    // sustained rate in the cost model's FLOP counts (lib/analysis/CostModel.cpp's table), at the
    // sizes of a 4-block GPT 256 wide, 4 heads, batch 4 x 256, vocabulary 8192.
    nlohmann::ordered_json opFlops = nlohmann::ordered_json::object();
    {
      const int64_t B = 4, T = 256, C = 256, H = 4, N = B * T, V = 8192, F = 4 * C * N;
      std::vector<float> qkv(size_t(N * 3 * C), 0.01f), att(size_t(N * C), 0.0f), lse(size_t(B * H * T), 0.0f),
          dqkv(size_t(N * 3 * C), 0.0f), dout(size_t(N * C), 0.001f);
      std::vector<float> xs(size_t(F), 0.5f), ys(size_t(F), 0.0f), dys(size_t(F), 0.1f);
      std::vector<float> logits(size_t(N * V), 0.01f), dlogits(size_t(N * V), 0.0f);
      std::vector<int32_t> targets(size_t(N), 7);
      std::vector<float> lx(size_t(N * C), 0.3f), lw(size_t(C), 1.0f), lb(size_t(C), 0.0f), ly(size_t(N * C), 0.0f),
          mean(size_t(N), 0.0f), rstd(size_t(N), 0.0f), ldx(size_t(N * C), 0.0f), ldw(size_t(C), 0.0f),
          ldb(size_t(C), 0.0f);
      const double pairs = double(B * H) * double(T * (T + 1) / 2), d = double(C / H);
      cpu::attention(qkv.data(), att.data(), lse.data(), B, T, C, H);
      int64_t bad = -1;
      struct Kind {
        const char *name;
        double flops;
        std::function<void()> run;
      };
      const std::vector<Kind> kinds = {
          {"attention", 4 * pairs * d + 6 * pairs,
           [&] { cpu::attention(qkv.data(), att.data(), lse.data(), B, T, C, H); }},
          {"attention_grad", 10 * pairs * d + 8 * pairs + 2.0 * double(N * C),
           [&] { cpu::attentionGrad(dout.data(), qkv.data(), att.data(), lse.data(), dqkv.data(), B, T, C, H); }},
          {"gelu", 12.0 * double(F), [&] { cpu::gelu(xs.data(), ys.data(), F); }},
          {"gelu_grad", 18.0 * double(F), [&] { cpu::geluGrad(xs.data(), dys.data(), ys.data(), F); }},
          {"cross_entropy", 6.0 * double(N * V),
           [&] { (void)cpu::crossEntropy(logits.data(), targets.data(), N, V, &bad); }},
          {"cross_entropy_grad", 8.0 * double(N * V),
           [&] { cpu::crossEntropyGrad(logits.data(), targets.data(), 1.0f, dlogits.data(), N, V); }},
          {"layernorm", 8.0 * double(N * C),
           [&] { cpu::layernorm(lx.data(), lw.data(), lb.data(), ly.data(), mean.data(), rstd.data(), N, C, 1e-5f); }},
          {"layernorm_grad", 14.0 * double(N * C), [&] {
             cpu::layernormGrad(ly.data(), lx.data(), lw.data(), mean.data(), rstd.data(), ldx.data(), ldw.data(),
                                ldb.data(), N, C);
           }}};
      std::string list;
      for (const Kind &k : kinds) {
        const double f = k.flops / medianSeconds(k.run, seconds / double(kinds.size()));
        opFlops[k.name] = f;
        list += std::string(list.empty() ? "" : ", ") + k.name + " " + rate(f / 1e9, "GFLOP/s");
      }
      say("kernels: " + list);
      sources.push_back("op_flops: each kernel at the sizes of a 4-block GPT 256 wide (4 heads, batch 4 x 256, "
                        "vocabulary 8192), in the cost model's FLOP counts: " +
                        list);
    }

    // Memory bandwidth: c = a + b over 8 Mi floats each (reads 2, writes 1).
    const int64_t n = int64_t(8) << 20;
    std::vector<float> x(size_t(n), 1.0f), y(size_t(n), 2.0f), z(size_t(n), 0.0f);
    const double addS = medianSeconds([&] { cpu::add(x.data(), y.data(), z.data(), n); }, seconds);
    const double deviceBw = 12.0 * double(n) / addS;
    say("add " + rate(deviceBw / 1e9, "GB/s"));
    sources.push_back("device_bytes_per_s: the add kernel over 3 x 32 MiB, " + rate(deviceBw / 1e9, "GB/s"));

    // Copies (the CPU backend's transfers between its spaces).
    const double copyS =
        medianSeconds([&] { std::memcpy(z.data(), x.data(), size_t(n) * sizeof(float)); }, seconds / 2);
    const double copyBw = double(n) * sizeof(float) / copyS;
    say("memcpy " + rate(copyBw / 1e9, "GB/s"));
    sources.push_back("h2d_bytes_per_s, d2h_bytes_per_s: memcpy of 32 MiB, " + rate(copyBw / 1e9, "GB/s"));

    // The CPU Adam: 4 Mi fp32 parameters, in the cost model's 16 FLOPs per parameter.
    double hostFlops = 0;
    {
      const int64_t p = int64_t(4) << 20;
      std::vector<float> w(size_t(p), 0.1f), g(size_t(p), 0.01f), m(size_t(p), 0.0f), v(size_t(p), 0.0f);
      CpuAdamArgs a;
      a.step = 1;
      const double s = medianSeconds(
          [&] {
            cpuAdamWStates(w.data(), g.data(), DType::F32, m.data(), v.data(), DType::F32, nullptr, DType::F32, p, a);
          },
          seconds);
      hostFlops = 16.0 * double(p) / s;
      say("cpu adam " + rate(double(p) / s / 1e6, "M params/s"));
      sources.push_back("host_flops: the CPU Adam (" + std::string(cpuAdamIsa()) + ") over 4 Mi fp32 parameters, " +
                        rate(double(p) / s / 1e6, "M params/s") + " (16 FLOPs each in the cost model)");
    }

    // The in-process communicator: 2 ranks (threads), all-reduce of 4 Mi floats and of one.
    double commBw = 0, latency = 0;
    {
      auto comm = makeInProcessCommunicator(2);
      const int64_t big = int64_t(4) << 20;
      comm->reserve(big);
      std::vector<std::vector<float>> in(2, std::vector<float>(size_t(big), 1.0f)),
          res(2, std::vector<float>(size_t(big)));
      auto allReduce = [&](int64_t count) {
        std::thread other([&] {
          comm->run(1, CollectiveKind::AllReduce, Reduce::Sum,
                    {CollectiveTensor{in[1].data(), res[1].data(), DType::F32, count, count}}, "calibrate");
        });
        comm->run(0, CollectiveKind::AllReduce, Reduce::Sum,
                  {CollectiveTensor{in[0].data(), res[0].data(), DType::F32, count, count}}, "calibrate");
        other.join();
      };
      const int saved = omp_get_max_threads();
      omp_set_num_threads(std::max(1, saved / 2)); // each rank its share of the cores, as `bigc run`
      latency = medianSeconds([&] { allReduce(1); }, seconds / 2);
      const double s = medianSeconds([&] { allReduce(big); }, seconds);
      omp_set_num_threads(saved);
      // The cost model's ring: 2 (n - 1) / n of the bytes over the bandwidth, plus the latency.
      // A latency measured in a slow spell may come out near the large message's time: then the
      // large message's time alone (an underestimate of the bandwidth, never an absurd one).
      commBw = double(big) * sizeof(float) * 1.0 / (s > 2 * latency ? s - latency : s);
    }
    say("all-reduce " + rate(commBw / 1e9, "GB/s") + ", latency " + rate(latency * 1e6, "us"));
    sources.push_back("interconnect_bytes_per_s: the in-process all-reduce of 16 MiB between 2 ranks, " +
                      rate(commBw / 1e9, "GB/s") + " of the ring's bytes (2(n-1)/n of the tensor)");
    sources.push_back("collective_latency_s: the in-process all-reduce of one float between 2 ranks, " +
                      rate(latency * 1e6, "us"));

    // One small instruction: a kernel on 256 floats (OpenMP region, dispatch).
    const double overhead = medianSeconds([&] { cpu::add(x.data(), y.data(), z.data(), 256); }, seconds / 4);
    say("small op " + rate(overhead * 1e6, "us"));
    sources.push_back("op_overhead_s: the add kernel on 256 floats, " + rate(overhead * 1e6, "us"));

    // Memory: the machine's physical memory; the CPU backend's device arena is RAM too.
    const int64_t pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
    const int64_t ram = pages > 0 && pageSize > 0 ? pages * pageSize : int64_t(16) << 30;
    const int64_t gib = int64_t(1) << 30;
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    nlohmann::ordered_json j;
    j["name"] = name;
    j["description"] = "This machine as the CPU backend uses it (" + std::to_string(threads) +
                       " threads), measured by bigc calibrate on " + date;
    j["devices"] = 1;
    j["device_memory_bytes"] = std::max(gib, ram * 2 / 3 / gib * gib); // (as the `cpu` profile: 16 of 24 GiB)
    j["host_memory_bytes"] = ram;
    j["device_reserve"] = nlohmann::ordered_json::object();
    j["host_reserve_bytes"] = std::min(int64_t(3) * gib, ram / 8);
    j["device_flops"] = deviceFlops;
    j["host_flops"] = hostFlops;
    j["h2d_bytes_per_s"] = copyBw;
    j["d2h_bytes_per_s"] = copyBw;
    j["interconnect_bytes_per_s"] = commBw;
    j["device_bytes_per_s"] = deviceBw;
    j["collective_latency_s"] = latency;
    j["op_overhead_s"] = overhead;
    j["op_flops"] = opFlops;
    j["threads"] = threads;
    j["sources"] = sources;
    j["notes"] = "Measured, not datasheet figures: rerun `bigc calibrate` after a change of machine, load or threads. "
                 "device and host share this machine's memory and cores.";
    const std::string text = j.dump(2) + "\n";
    if (out.empty()) {
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    const std::string tmp = out + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw UserError("calibrate: cannot write " + out + ": " + std::strerror(errno));
      f << text;
      if (!f.flush()) throw UserError("calibrate: cannot write " + out + ": " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw UserError("calibrate: cannot write " + out + ": " + std::strerror(errno));
    }
    std::fprintf(stderr, "bigc calibrate: wrote %s (profile %s)\n", out.c_str(), name.c_str());
    return 0;
  } catch (const UserError &e) {
    std::string m = e.what();
    std::fprintf(stderr, "%s%s\n", m.rfind("calibrate", 0) == 0 ? "bigc " : "bigc calibrate: ", m.c_str());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bigc calibrate: internal error: %s\n", e.what());
    return 2;
  }
}

} // namespace bigc::rt
