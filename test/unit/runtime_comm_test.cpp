// The in-process communicator (runtime/comm): ring all-reduce, reduce-scatter and all-gather
// against naive reductions, for rank counts that do and do not divide the tensors (padded shards),
// f32 and bf16 (f32 accumulation), buckets of several tensors; a rank that never arrives makes the
// others fail with a message naming it; an abort stops everyone. Point-to-point messages: send
// before or after recv, many tags out of order, an abort wakes a waiting recv, a recv that times
// out names the peer and the tag.
#include <atomic>
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

// Context parallelism's collectives on 3 in-process ranks: a ring shift gives rank r rank r-1's
// tensors (two of them, f32 and bf16 bytes); the all-to-all to heads gives rank r, for each token
// of each rank j in rank order, rank j's columns [r N/3, (r+1) N/3); back to the sequence, the
// inverse: every element where its definition puts it, and the round trip the identity.
TEST(Comm, RingShiftAndAllToAll) {
  const int n = 3;
  const int64_t B = 2, T = 4, N = 6, w = N / n;
  auto comm = makeInProcessCommunicator(n);
  auto value = [](int r, int64_t b, int64_t t, int64_t c) { return float(r * 1000 + b * 100 + t * 10 + c); };
  std::vector<std::vector<float>> in(n), heads(n), back(n), shifted(n);
  std::vector<std::vector<uint16_t>> in16(n), shifted16(n);
  for (int r = 0; r < n; ++r) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < N; ++c) in[r].push_back(value(r, b, t, c));
    heads[r].assign(in[r].size(), -1.0f), back[r].assign(in[r].size(), -1.0f), shifted[r].assign(in[r].size(), -1.0f);
    in16[r].assign(5, uint16_t(r + 1)), shifted16[r].assign(5, 0);
  }
  const int64_t numel = B * T * N;
  auto errors = onRanks(n, [&](int r) {
    comm->run(r, CollectiveKind::RingShift, Reduce::Sum,
              {CollectiveTensor{in[r].data(), shifted[r].data(), DType::F32, numel, numel},
               CollectiveTensor{in16[r].data(), shifted16[r].data(), DType::BF16, 5, 5}},
              "ring shift");
    CollectiveTensor h{in[r].data(), heads[r].data(), DType::F32, numel, numel};
    h.rows = B, h.width = N;
    comm->run(r, CollectiveKind::ToHeads, Reduce::Sum, {h}, "to heads");
    CollectiveTensor s{heads[r].data(), back[r].data(), DType::F32, numel, numel};
    s.rows = B, s.width = N;
    comm->run(r, CollectiveKind::ToSequence, Reduce::Sum, {s}, "to the sequence");
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[size_t(r)], "");
    const int prev = (r + n - 1) % n;
    EXPECT_EQ(shifted[r], in[prev]) << "rank " << r << " gets rank " << prev << "'s";
    EXPECT_EQ(shifted16[r], in16[prev]);
    for (int j = 0; j < n; ++j) // heads[r]: [B, n*T, w]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < w; ++c)
            ASSERT_EQ(heads[r][size_t((b * n * T + j * T + t) * w + c)], value(j, b, t, r * w + c))
                << "rank " << r << ": rank " << j << "'s token " << t << ", column " << r * w + c;
    EXPECT_EQ(back[r], in[r]) << "rank " << r << ": to heads and back";
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
  // 2 s: long enough that the three healthy ranks have all arrived on a machine whose cores are
  // busy (then only rank 2 is missing); they also start together.
  comm->setTimeout(2.0);
  comm->reserve(4);
  float x[n] = {1, 2, 3, 4}, y[n];
  std::atomic<int> started{0};
  auto t0 = std::chrono::steady_clock::now();
  auto errors = onRanks(n, [&](int r) {
    if (r == 2) return; // rank 2 never reaches the collective
    ++started;
    while (started.load() < n - 1) std::this_thread::yield();
    comm->run(r, CollectiveKind::AllReduce, Reduce::Sum, {CollectiveTensor{&x[r], &y[r], DType::F32, 1, 1}},
              "step 7: instruction 12 (all_reduce at model.mlir:3:4)");
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 60.0); // stopped by the timeout, not hung
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

// ----- point-to-point messages (pipeline stages)

TEST(Comm, SendBeforeRecv) {
  auto comm = makeInProcessCommunicator(2);
  const std::vector<float> x = {1.5f, -2.0f, 3.25f};
  comm->send(0, 1, 4, x.data(), int64_t(x.size() * 4), "send"); // returns without a receiver
  std::vector<float> y(3, 0.0f);
  comm->recv(1, 0, 4, y.data(), 12, "recv");
  EXPECT_EQ(y, x);
  // The sender's buffer may change right after send: the message is a copy.
  std::vector<float> z = {7.0f};
  comm->send(1, 0, 0, z.data(), 4, "send");
  z[0] = 8.0f;
  float got = 0;
  comm->recv(0, 1, 0, &got, 4, "recv");
  EXPECT_EQ(got, 7.0f);
}

TEST(Comm, RecvBeforeSend) {
  auto comm = makeInProcessCommunicator(2);
  int32_t got = 0;
  auto errors = onRanks(2, [&](int r) {
    if (r == 1) {
      comm->recv(1, 0, 9, &got, 4, "recv"); // waits
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int32_t v = 42;
    comm->send(0, 1, 9, &v, 4, "send");
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(got, 42);
}

// NCCL's rules on the in-process communicator (BIGC_P2P_NCCL_ORDER): a send can wait until its
// recv took it, and with pairInIssueOrder the k-th recv from a rank must be for that rank's k-th
// send to this one.
TEST(Comm, NcclRules) {
  auto comm = makeInProcessCommunicator(2);
  comm->setTimeout(30); // the half that must succeed: any scheduling delay is within it
  comm->pairInIssueOrder();
  const float a = 1.0f, b = 2.0f;
  float got = 0;
  auto errors = onRanks(2, [&](int r) {
    if (r == 0) {
      comm->send(0, 1, 7, &a, 4, "send");
      comm->waitDelivered(0, 1, 7, "send"); // until rank 1 took it
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    comm->recv(1, 0, 7, &got, 4, "recv");
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(got, 1.0f);
  // A send nobody receives: the wait times out naming the peer and the tag.
  comm->setTimeout(0.3);
  comm->send(0, 1, 8, &a, 4, "step 1: instruction 2 (send)");
  try {
    comm->waitDelivered(0, 1, 8, "step 1: instruction 2 (send)");
    ADD_FAILURE() << "expected a timeout";
  } catch (const CommError &e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 waited 0.3 s for rank 1 to receive its message with tag 8"),
              std::string::npos)
        << e.what();
  }
  // Tags 1 then 0 sent, tag 0 received first: NCCL would pair it with tag 1.
  auto fresh = makeInProcessCommunicator(2);
  fresh->pairInIssueOrder();
  fresh->send(0, 1, 1, &a, 4, "send");
  fresh->send(0, 1, 0, &b, 4, "send");
  try {
    fresh->recv(1, 0, 0, &got, 4, "step 1: instruction 4 (recv)");
    ADD_FAILURE() << "expected a mispairing";
  } catch (const CommError &e) {
    EXPECT_NE(std::string(e.what()).find("step 1: instruction 4 (recv): rank 1 receives the message with tag 0 from "
                                         "rank 0, but NCCL would give it the one with tag 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(Comm, ManyTagsOutOfOrder) {
  // Rank 0 sends tags 0..63 (each twice: messages of one tag keep their order) while rank 1
  // receives them in reverse tag order; a group of ids {3, 5} (global numbers).
  auto comm = makeInProcessCommunicator(std::vector<int>{3, 5});
  const int kTags = 64;
  std::vector<int64_t> got(2 * kTags, -1);
  auto errors = onRanks(2, [&](int r) {
    if (r == 0) {
      for (int round = 0; round < 2; ++round)
        for (int t = 0; t < kTags; ++t) {
          const int64_t v = 1000 * round + t;
          comm->send(0, 5, t, &v, 8, "send");
        }
      return;
    }
    for (int t = kTags - 1; t >= 0; --t)
      for (int round = 0; round < 2; ++round) comm->recv(1, 3, t, &got[size_t(2 * t + round)], 8, "recv");
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (int t = 0; t < kTags; ++t) {
    EXPECT_EQ(got[size_t(2 * t)], t);
    EXPECT_EQ(got[size_t(2 * t + 1)], 1000 + t);
  }
  // A rank outside the group is no peer.
  float x = 0;
  try {
    comm->send(0, 4, 0, &x, 4, "step 1: instruction 3 (send)");
    ADD_FAILURE() << "expected an error";
  } catch (const CommError &e) {
    EXPECT_NE(std::string(e.what()).find("rank 3 has no peer rank 4"), std::string::npos) << e.what();
  }
}

TEST(Comm, AbortWakesABlockedRecv) {
  auto comm = makeInProcessCommunicator(2);
  comm->setTimeout(60);
  const auto t0 = std::chrono::steady_clock::now();
  float y = 0;
  auto errors = onRanks(2, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm->abort("rank 0 failed in step 2: bad token id");
      return;
    }
    comm->recv(1, 0, 3, &y, 4, "step 2: instruction 7 (recv at m.mlir:4:1)");
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_NE(errors[1].find("rank 0 failed in step 2: bad token id [rank 1 stopped in step 2: instruction 7 (recv at "
                           "m.mlir:4:1)]"),
            std::string::npos)
      << errors[1];
  // Later sends and receives fail at once.
  EXPECT_THROW(comm->send(0, 1, 0, &y, 4, "send"), CommError);
  EXPECT_THROW(comm->recv(1, 0, 0, &y, 4, "recv"), CommError);
}

TEST(Comm, RecvTimeoutNamesThePeerAndTag) {
  auto comm = makeInProcessCommunicator(4);
  comm->setTimeout(0.2);
  float y = 0;
  std::string err;
  try {
    comm->recv(2, 0, 11, &y, 4, "step 5: instruction 3 (recv at m.mlir:9:2)");
  } catch (const CommError &e) {
    err = e.what();
  }
  EXPECT_EQ(err, "step 5: instruction 3 (recv at m.mlir:9:2): rank 2 waited 0.2 s for the message from rank 0 with "
                 "tag 11, which did not come (rank 0 stuck or failed); every rank stops");
  EXPECT_TRUE(comm->aborted()); // every rank stops
}

TEST(Comm, RecvOfAnotherSize) {
  auto comm = makeInProcessCommunicator(2);
  const float x[2] = {1, 2};
  comm->send(0, 1, 0, x, 8, "send");
  float y[4];
  try {
    comm->recv(1, 0, 0, y, 16, "step 1: instruction 0 (recv)");
    ADD_FAILURE() << "expected an error";
  } catch (const CommError &e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 receives 16 bytes from rank 0 with tag 0, which sent 8"),
              std::string::npos)
        << e.what();
  }
}
