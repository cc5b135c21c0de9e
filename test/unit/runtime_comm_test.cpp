// The in-process communicator (runtime/comm): ring all-reduce, reduce-scatter and all-gather
// against naive reductions, for rank counts that do and do not divide the tensors (padded shards),
// f32 and bf16 (f32 accumulation), buckets of several tensors; a rank that never arrives makes the
// others fail with a message naming it; an abort stops everyone.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/half.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

using namespace bigc::rt;

namespace {

// Runs f(rank) on `n` threads; returns the first exception message per rank ("" if none).
template <class F> std::vector<std::string> onRanks(int n, F f) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        f(r);
      } catch (const std::exception &e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto &t : ts) t.join();
  return errors;
}

std::vector<float> randomVec(int64_t n, int seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto &x : v) x = d(g);
  return v;
}

} // namespace

TEST(Comm, AllReduceReduceScatterAllGatherMatchNaive) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (int64_t N : {int64_t(1), int64_t(5), int64_t(16), int64_t(1000), int64_t(4099)}) {
      auto comm = makeInProcessCommunicator(n);
      const int64_t S = (N + n - 1) / n;
      comm->reserve(2 * S + 8);
      std::vector<std::vector<float>> in(static_cast<size_t>(n)), in2(static_cast<size_t>(n)),
          ar(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(N))),
          rs(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(S))),
          ag(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(N))),
          mx(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(N)));
      for (int r = 0; r < n; ++r)
        in[static_cast<size_t>(r)] = randomVec(N, 100 * r + int(N)), in2[static_cast<size_t>(r)] = randomVec(N, 7 + r);
      auto errors = onRanks(n, [&](int r) {
        // A bucket of two tensors: the mean of `in` and the sum of `in2`... one reduction per call.
        comm->run(
            r, CollectiveKind::AllReduce, Reduce::Mean,
            {CollectiveTensor{in[static_cast<size_t>(r)].data(), ar[static_cast<size_t>(r)].data(), DType::F32, N, N}},
            "ar");
        comm->run(
            r, CollectiveKind::ReduceScatter, Reduce::Sum,
            {CollectiveTensor{in[static_cast<size_t>(r)].data(), rs[static_cast<size_t>(r)].data(), DType::F32, N, S}},
            "rs");
        comm->run(
            r, CollectiveKind::AllGather, Reduce::Sum,
            {CollectiveTensor{in[static_cast<size_t>(r)].data(), ag[static_cast<size_t>(r)].data(), DType::F32, S, N}},
            "ag");
        comm->run(
            r, CollectiveKind::AllReduce, Reduce::Max,
            {CollectiveTensor{in2[static_cast<size_t>(r)].data(), mx[static_cast<size_t>(r)].data(), DType::F32, N, N}},
            "max");
      });
      for (int r = 0; r < n; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < N; ++i) {
          double sum = 0, mxv = -1e30;
          for (int q = 0; q < n; ++q)
            sum += in[static_cast<size_t>(q)][static_cast<size_t>(i)],
                mxv = std::max<double>(mxv, in2[static_cast<size_t>(q)][static_cast<size_t>(i)]);
          ASSERT_NEAR(ar[static_cast<size_t>(r)][static_cast<size_t>(i)], sum / n, 1e-5)
              << "all-reduce n=" << n << " N=" << N << " r=" << r;
          ASSERT_EQ(mx[static_cast<size_t>(r)][static_cast<size_t>(i)], float(mxv)) << "max n=" << n << " N=" << N;
          // all-gather: element i comes from rank i / S, its element i % S
          ASSERT_EQ(ag[static_cast<size_t>(r)][static_cast<size_t>(i)], in[static_cast<size_t>(i / S)][size_t(i % S)])
              << "all-gather n=" << n << " N=" << N;
        }
        for (int64_t i = 0; i < S; ++i) {
          const int64_t g = int64_t(r) * S + i;
          double sum = 0;
          if (g < N)
            for (int q = 0; q < n; ++q) sum += in[static_cast<size_t>(q)][static_cast<size_t>(g)];
          ASSERT_NEAR(rs[static_cast<size_t>(r)][static_cast<size_t>(i)], sum, 1e-4)
              << "reduce-scatter n=" << n << " N=" << N << " r=" << r;
          if (g >= N) {
            ASSERT_EQ(rs[static_cast<size_t>(r)][static_cast<size_t>(i)], 0.0f) << "padding is zero";
          }
        }
      }
    }
  }
}

TEST(Comm, Bf16BucketAndNorm) {
  const int n = 4;
  auto comm = makeInProcessCommunicator(n);
  const int64_t A = 37, B = 8;
  comm->reserve(64);
  std::vector<std::vector<uint16_t>> a(n, std::vector<uint16_t>(A)), b(n, std::vector<uint16_t>(B)),
      sa(n, std::vector<uint16_t>((A + n - 1) / n)), sb(n, std::vector<uint16_t>(B / n));
  std::vector<float> norms(n), total(n);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < A; ++i) a[r][static_cast<size_t>(i)] = f32ToBf16(0.01f * float(i + r));
    for (int64_t i = 0; i < B; ++i) b[r][static_cast<size_t>(i)] = f32ToBf16(float(r));
    norms[static_cast<size_t>(r)] = float(r + 1);
  }
  auto errors = onRanks(n, [&](int r) {
    comm->run(r, CollectiveKind::ReduceScatter, Reduce::Mean,
              {CollectiveTensor{a[r].data(), sa[r].data(), DType::BF16, A, (A + n - 1) / n},
               CollectiveTensor{b[r].data(), sb[r].data(), DType::BF16, B, B / n}},
              "bucket");
    comm->run(r, CollectiveKind::AllReduce, Reduce::Norm,
              {CollectiveTensor{&norms[static_cast<size_t>(r)], &total[static_cast<size_t>(r)], DType::F32, 1, 1}},
              "norm");
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "");
  const int64_t S = (A + n - 1) / n;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < S; ++i) {
      const int64_t g = r * S + i;
      float want = 0;
      if (g < A)
        for (int q = 0; q < n; ++q) want += bf16ToF32(f32ToBf16(0.01f * float(g + q))) / n;
      EXPECT_EQ(sa[r][static_cast<size_t>(i)], f32ToBf16(want))
          << "rank " << r << " element " << i; // f32 sums, one rounding
    }
    for (int64_t i = 0; i < B / n; ++i) EXPECT_EQ(bf16ToF32(sb[r][static_cast<size_t>(i)]), 1.5f); // mean of 0..3
    EXPECT_NEAR(total[static_cast<size_t>(r)], std::sqrt(1.0 + 4 + 9 + 16), 1e-5); // the norm of the norms
  }
}

TEST(Comm, MissingRankTimesOutNamingIt) {
  const int n = 4;
  auto comm = makeInProcessCommunicator(n);
  comm->setTimeout(0.3);
  comm->reserve(4);
  float x[n] = {1, 2, 3, 4}, y[n];
  auto t0 = std::chrono::steady_clock::now();
  auto errors = onRanks(n, [&](int r) {
    if (r == 2) return; // rank 2 never reaches the collective
    comm->run(r, CollectiveKind::AllReduce, Reduce::Sum, {CollectiveTensor{&x[r], &y[r], DType::F32, 1, 1}},
              "step 7: instruction 12 (all_reduce at model.mlir:3:4)");
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
  EXPECT_EQ(errors[2], "");
  int named = 0;
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("step 7: instruction 12 (all_reduce at model.mlir:3:4)"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
    named +=
        errors[static_cast<size_t>(r)].find("for rank 2, which did not reach this collective") != std::string::npos;
  }
  EXPECT_GE(named, 1); // the rank that timed out names rank 2; the others were stopped by it
  EXPECT_TRUE(comm->aborted());
}

TEST(Comm, AbortStopsWaitingRanks) {
  const int n = 3;
  auto comm = makeInProcessCommunicator(n);
  comm->reserve(4);
  float x[n] = {1, 2, 3}, y[n];
  auto errors = onRanks(n, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm->abort("rank 0 failed in step 3: out of memory");
      return;
    }
    comm->run(r, CollectiveKind::AllGather, Reduce::Sum, {CollectiveTensor{&x[r], &y[0], DType::F32, 1, 3}},
              "step 3: instruction 5 (all_gather)");
  });
  for (int r : {1, 2}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 0 failed in step 3"), std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("stopped in step 3: instruction 5 (all_gather)"), std::string::npos);
  }
}
