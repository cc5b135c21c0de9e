// The in-process communicator: ranks are threads of one process; collectives are rings over shared
// memory (see comm.h). Reductions accumulate in f32 and round once into the output's dtype.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/half.h"

#include "local_group.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace bigc::rt {

namespace comm {

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
} // namespace

// The chunk c of a tensor of n elements split in `parts` shards of s = ceil(n / parts): [c*s, min(n, c*s+s)).
struct Chunk {
  int64_t begin = 0, len = 0;
};
inline Chunk chunkOf(int64_t n, int parts, int c) {
  const int64_t s = (n + parts - 1) / parts;
  const int64_t b = int64_t(c) * s;
  return Chunk{b, std::max<int64_t>(0, std::min(n, b + s) - b)};
}

// The ring reduce-scatter over the local group: on return, scratch(local, resultHalf) + offset(t)
// holds the f32 reduction (sum, max, or sum of squares for Norm; not yet averaged / rooted) of
// chunk `local` of each tensor t. Returns resultHalf.
int ringReduceScatter(LocalGroup &g, int r, Reduce red, const std::vector<CollectiveTensor> &ts,
                      const std::string &what) {
  const int n = g.size();
  auto load = [&](const CollectiveTensor &t, int64_t i) {
    float v = loadAs32(t.in, t.dtype, i);
    return red == Reduce::Norm ? v * v : v;
  };
  auto combine = [&](float a, float b) { return red == Reduce::Max ? std::max(a, b) : a + b; };
  if (n == 1) {
    int64_t off = 0;
    float *dst = g.scratch(r, 0);
    for (const auto &t : ts) {
      for (int64_t i = 0; i < t.inNumel; ++i) dst[off + i] = load(t, i);
      off += t.inNumel;
    }
    return 0;
  }
  const int prev = mod(r - 1, n);
  for (int s = 0; s + 1 < n; ++s) {
    const int c = mod(r - s - 2, n);
    float *dst = g.scratch(r, s % 2);
    const float *acc = s == 0 ? nullptr : g.scratch(prev, (s - 1) % 2);
    const std::vector<CollectiveTensor> &pts = *g.posted_[size_t(prev)];
    int64_t off = 0;
    for (size_t k = 0; k < ts.size(); ++k) {
      const CollectiveTensor &t = ts[k];
      const int64_t S = (t.inNumel + n - 1) / n;
      Chunk ch = chunkOf(t.inNumel, n, c);
      for (int64_t i = 0; i < ch.len; ++i) {
        float other = acc ? acc[off + i] : load(pts[k], ch.begin + i);
        dst[off + i] = combine(load(t, ch.begin + i), other);
      }
      off += S;
    }
    g.barrier(r, what);
  }
  return (n - 2) % 2;
}

// The ring all-gather over the local group of what each rank placed in its own chunk of every
// tensor's output (chunk r of rank r).
void ringAllGather(LocalGroup &g, int r, const std::vector<CollectiveTensor> &ts, const std::string &what) {
  const int n = g.size();
  const int prev = mod(r - 1, n);
  for (int s = 0; s + 1 < n; ++s) {
    const int c = mod(r - s - 1, n);
    const std::vector<CollectiveTensor> &pts = *g.posted_[size_t(prev)];
    for (size_t k = 0; k < ts.size(); ++k) {
      const CollectiveTensor &t = ts[k];
      Chunk ch = chunkOf(t.outNumel, n, c);
      const int64_t e = dtypeSize(t.dtype);
      if (ch.len > 0)
        std::memcpy(static_cast<char *>(t.out) + ch.begin * e, static_cast<const char *>(pts[k].out) + ch.begin * e,
                    size_t(ch.len * e));
    }
    g.barrier(r, what);
  }
}

void checkSame(LocalGroup &g, int r, CollectiveKind kind, const std::vector<CollectiveTensor> &ts,
               const std::string &what, const std::function<int(int)> &global) {
  const std::vector<CollectiveTensor> &a = *g.posted_[0];
  bool same = a.size() == ts.size();
  for (size_t k = 0; same && k < ts.size(); ++k)
    same = a[k].dtype == ts[k].dtype && a[k].inNumel == ts[k].inNumel && a[k].outNumel == ts[k].outNumel;
  if (!same) {
    std::string msg = what + ": rank " + std::to_string(global(r)) + " and rank " + std::to_string(global(0)) +
                      " called this collective with different tensors (the ranks run different programs?)";
    g.abort(msg);
    throw CommError(msg);
  }
  (void)kind;
}

// The local part of a collective over the ranks of one process (the whole in-process collective).
void runLocal(LocalGroup &g, int r, CollectiveKind kind, Reduce red, const std::vector<CollectiveTensor> &ts,
              const std::string &what, const std::function<int(int)> &global) {
  const int n = g.size();
  g.posted_[size_t(r)] = &ts;
  g.barrier(r, what);
  checkSame(g, r, kind, ts, what, global);
  auto finish = [&](float v) {
    if (red == Reduce::Mean) return v / float(n);
    if (red == Reduce::Norm) return std::sqrt(v);
    return v;
  };
  // The reduced chunk r of each tensor, finished and rounded: into the shard (reduce-scatter, the
  // padding zeroed) or into its place in the whole output (all-reduce, gathered after).
  auto writeReduced = [&](bool intoShard) {
    const float *acc = g.scratch(r, ringReduceScatter(g, r, red, ts, what));
    int64_t off = 0;
    for (const auto &t : ts) {
      Chunk ch = chunkOf(t.inNumel, n, r);
      const int64_t len = intoShard ? t.outNumel : ch.len, base = intoShard ? 0 : ch.begin;
      for (int64_t i = 0; i < len; ++i) storeFrom32(t.out, t.dtype, base + i, i < ch.len ? finish(acc[off + i]) : 0.0f);
      off += n == 1 ? t.inNumel : (t.inNumel + n - 1) / n;
    }
  };
  switch (kind) {
  case CollectiveKind::RingShift: { // from the rank before, read in place; the second barrier keeps its
                                    // inputs until every rank has read them
    const std::vector<CollectiveTensor> &from = *g.posted_[size_t(mod(r - 1, n))];
    for (size_t k = 0; k < ts.size(); ++k)
      std::memcpy(ts[k].out, from[k].in, size_t(ts[k].inNumel) * dtypeSize(ts[k].dtype));
    g.barrier(r, what);
    break;
  }
  case CollectiveKind::ToHeads:
  case CollectiveKind::ToSequence: {
    for (size_t k = 0; k < ts.size(); ++k) {
      const CollectiveTensor &t = ts[k];
      const int64_t e = dtypeSize(t.dtype), B = t.rows, N = t.width, w = N / n, T = t.inNumel / (B * N);
      for (int j = 0; j < n; ++j) {
        const char *src = static_cast<const char *>((*g.posted_[size_t(j)])[k].in);
        char *dst = static_cast<char *>(t.out);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < T; ++i) {
            if (kind == CollectiveKind::ToHeads) // rank j's token i, my columns -> my token j*T + i
              std::memcpy(dst + ((b * n + j) * T + i) * w * e, src + ((b * T + i) * N + int64_t(r) * w) * e,
                          size_t(w * e));
            else // rank j's token r*T + i (its columns) -> my token i, columns of rank j
              std::memcpy(dst + ((b * T + i) * N + int64_t(j) * w) * e, src + ((b * n + r) * T + i) * w * e,
                          size_t(w * e));
          }
      }
    }
    g.barrier(r, what);
    break;
  }
  case CollectiveKind::ReduceScatter: writeReduced(true); break;
  case CollectiveKind::AllReduce:
    writeReduced(false);
    g.barrier(r, what);
    ringAllGather(g, r, ts, what);
    break;
  case CollectiveKind::AllGather: {
    for (const auto &t : ts) {
      Chunk ch = chunkOf(t.outNumel, n, r);
      const int64_t e = dtypeSize(t.dtype);
      if (ch.len > 0) std::memcpy(static_cast<char *>(t.out) + ch.begin * e, t.in, size_t(ch.len * e));
    }
    g.barrier(r, what);
    ringAllGather(g, r, ts, what);
    break;
  }
  }
}

int64_t scratchFloats(CollectiveKind kind, const std::vector<CollectiveTensor> &ts, int n) {
  int64_t f = 0;
  if (kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter)
    for (const auto &t : ts) f += n == 1 ? t.inNumel : (t.inNumel + n - 1) / n;
  return f;
}

} // namespace comm

namespace {

class InProcess final : public Communicator {
public:
  explicit InProcess(int n) : g_(n, [](int r) { return r; }) {}
  explicit InProcess(std::vector<int> ids)
      : ids_(std::move(ids)), g_(int(ids_.size()), [this](int r) { return ids_[size_t(r)]; }) {}
  int size() const override { return g_.size(); }
  int localSize() const override { return g_.size(); }
  int globalRank(int local) const override { return ids_.empty() ? local : ids_[size_t(local)]; }
  void run(int local, CollectiveKind kind, Reduce reduce, const std::vector<CollectiveTensor> &tensors,
           const std::string &what) override {
    int64_t need = comm::scratchFloats(kind, tensors, g_.size());
    if (need > g_.scratchHalf(local))
      throw CommError(what + ": the collective needs " + std::to_string(need) + " floats of scratch, " +
                      std::to_string(g_.scratchHalf(local)) + " reserved (internal error)");
    comm::runLocal(g_, local, kind, reduce, tensors, what, [this](int r) { return globalRank(r); });
  }
  void reserve(int64_t floats) override { g_.reserve(floats); }
  void abort(const std::string &why) override {
    g_.abort(why);
    mail_.stop();
  }
  bool aborted() const override { return g_.aborted(); }
  void setTimeout(double seconds) override { g_.setTimeout(seconds); }
  std::string name() const override { return "in-process"; }

  void send(int local, int peer, int64_t tag, const void *data, int64_t bytes, const std::string &what) override {
    if (g_.aborted()) throw CommError(g_.stoppedIn(local, what));
    checkPeer(local, peer, what);
    mail_.put(globalRank(local), peer, tag, data, bytes);
  }

  void recv(int local, int peer, int64_t tag, void *data, int64_t bytes, const std::string &what) override {
    checkPeer(local, peer, what);
    const int self = globalRank(local);
    int64_t got = 0;
    switch (mail_.take(
        peer, self, tag, data, bytes, g_.timeout(), [this] { return g_.aborted(); }, &got, inOrder_)) {
    case comm::Mailbox::Got::Ok: return;
    case comm::Mailbox::Got::Stopped: throw CommError(g_.stoppedIn(local, what));
    case comm::Mailbox::Got::TimedOut: {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", g_.timeout());
      const std::string msg = what + ": rank " + std::to_string(self) + " waited " + secs +
                              " s for the message from rank " + std::to_string(peer) + " with tag " +
                              std::to_string(tag) + ", which did not come (rank " + std::to_string(peer) +
                              " stuck or failed); every rank stops";
      abort(msg);
      throw CommError(msg);
    }
    case comm::Mailbox::Got::Mispaired: {
      const std::string msg = what + ": rank " + std::to_string(self) + " receives the message with tag " +
                              std::to_string(tag) + " from rank " + std::to_string(peer) +
                              ", but NCCL would give it the one with tag " + std::to_string(got) +
                              " (the messages of two ranks pair in the order they are issued); every rank stops";
      abort(msg);
      throw CommError(msg);
    }
    case comm::Mailbox::Got::WrongSize: {
      const std::string msg = what + ": rank " + std::to_string(self) + " receives " + std::to_string(bytes) +
                              " bytes from rank " + std::to_string(peer) + " with tag " + std::to_string(tag) +
                              ", which sent " + std::to_string(got) + " (the ranks run different programs?)";
      abort(msg);
      throw CommError(msg);
    }
    }
  }

  void pairInIssueOrder() override { inOrder_ = true; }

  void waitDelivered(int local, int peer, int64_t tag, const std::string &what) override {
    const int self = globalRank(local);
    switch (mail_.waitTaken(self, peer, tag, g_.timeout(), [this] { return g_.aborted(); })) {
    case comm::Mailbox::Got::Ok: return;
    case comm::Mailbox::Got::TimedOut: {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", g_.timeout());
      const std::string msg = what + ": rank " + std::to_string(self) + " waited " + secs + " s for rank " +
                              std::to_string(peer) + " to receive its message with tag " + std::to_string(tag) +
                              ", which it did not (NCCL's order: a send waits for its recv; rank " +
                              std::to_string(peer) + " stuck, failed, or waiting for this one); every rank stops";
      abort(msg);
      throw CommError(msg);
    }
    default: throw CommError(g_.stoppedIn(local, what));
    }
  }

private:
  void checkPeer(int local, int peer, const std::string &what) const {
    bool in = false;
    for (int r = 0; r < size() && !in; ++r) in = globalRank(r) == peer;
    if (!in || peer == globalRank(local))
      throw CommError(what + ": rank " + std::to_string(globalRank(local)) + " has no peer rank " +
                      std::to_string(peer) + " in this communicator");
  }

  std::vector<int> ids_; // global numbers of the group's ranks (empty: 0..n-1)
  comm::LocalGroup g_;
  comm::Mailbox mail_;
  bool inOrder_ = false; // pairInIssueOrder
};

} // namespace

void Communicator::send(int, int peer, int64_t tag, const void *, int64_t, const std::string &what) {
  throw CommError(what + ": the " + name() + " communicator has no point-to-point messages (send to rank " +
                  std::to_string(peer) + ", tag " + std::to_string(tag) + ")");
}
void Communicator::recv(int, int peer, int64_t tag, void *, int64_t, const std::string &what) {
  throw CommError(what + ": the " + name() + " communicator has no point-to-point messages (recv from rank " +
                  std::to_string(peer) + ", tag " + std::to_string(tag) + ")");
}

void Communicator::pairInIssueOrder() {
  throw CommError("the " + name() + " communicator cannot pair its messages in the order they are issued");
}

void Communicator::waitDelivered(int, int peer, int64_t tag, const std::string &what) {
  throw CommError(what + ": the " + name() + " communicator cannot wait for a message to be received (to rank " +
                  std::to_string(peer) + ", tag " + std::to_string(tag) + ")");
}

std::shared_ptr<Communicator> makeInProcessCommunicator(int ranks) { return std::make_shared<InProcess>(ranks); }
std::shared_ptr<Communicator> makeInProcessCommunicator(const std::vector<int> &globalIds) {
  return std::make_shared<InProcess>(globalIds);
}

} // namespace bigc::rt
