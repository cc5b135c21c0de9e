// The MPI communicator (OpenMPI): the ranks of each process meet in shared memory (local_group.h),
// and local rank 0's thread runs the collective between the processes with nonblocking MPI calls
// polled against the timeout. Built when CMake finds MPI; runtime/comm/NoMpi.cpp otherwise.
//
//   all-reduce / reduce-scatter: the f32 sum (max) of the process's ranks, MPI_Iallreduce over the
//     processes, then each rank takes the whole (all-reduce) or its shard (reduce-scatter);
//   all-gather: the process's shards side by side (its ranks are consecutive), MPI_Iallgather of
//     those blocks, each rank copies the whole.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/half.h"

#include "local_group.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace bigc::rt {

namespace {
// MPI_THREAD_SERIALIZED: one thread in MPI at a time. Several communicators (the data-parallel
// groups of a tensor-parallel mesh) have their own leader threads; their calls take turns here.
std::mutex &mpiMutex() {
  static std::mutex m;
  return m;
}
} // namespace

bool mpiCompiled() { return true; }

std::pair<int, int> mpiWorld() {
  const char *a = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *b = std::getenv("PMI_SIZE");
  if ((!a || !*a) && (!b || !*b)) return {1, 0};
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      throw UserError("MPI: this MPI library does not support MPI_THREAD_SERIALIZED (one thread of a process at a "
                      "time calling MPI), which bigc's ranks need");
  }
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return {size, rank};
}

namespace {
// The job's rendezvous directory (every process on this machine), or "" when the processes span
// machines or the job has no id.
std::string rendezvousDir() {
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE"), *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char *job = std::getenv("PMIX_NAMESPACE");
  if (!job || !*job) job = std::getenv("OMPI_MCA_ess_base_jobid");
  if (!size || !local || !job || !*job || std::string(size) != std::string(local)) return "";
  const char *tmp = std::getenv("TMPDIR");
  std::string id = job;
  for (char &c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/bigc-mpi-" + id;
}
std::string gRendezvous; // this process's arrival file ("" none)
} // namespace

namespace {
double gTimeout = 300; // --comm-timeout, from mpiStart
// The processes' scalars and broadcasts between steps go on a communicator of their own (made in
// mpiStart, while its watchdog runs), so they never match a collective's messages.
MPI_Comm gWorldOps = MPI_COMM_NULL;
int64_t gWorldSeq = 0; // scalar sums so far (the same sequence on every process)
std::vector<std::unique_ptr<double>> gSent;
std::vector<MPI_Request> gSendReqs;

MPI_Comm worldOps() {
  if (gWorldOps == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &gWorldOps);
  return gWorldOps;
}

[[noreturn]] void worldTimeout(const std::string &what, const std::string &missing) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", gTimeout);
  throw UserError(what + ": process " + std::to_string(me) + " waited " + secs + " s (--comm-timeout) for " +
                  (missing.empty() ? std::string("the other processes") : missing) +
                  " (stuck or failed); every process stops");
}

// Polls `req` (MPI_Test under the MPI lock) until it completes or --comm-timeout passes.
bool waitFor(MPI_Request *req, std::chrono::steady_clock::time_point t0) {
  for (int k = 0;; ++k) {
    int done = 0;
    {
      std::lock_guard<std::mutex> l(mpiMutex());
      MPI_Test(req, &done, MPI_STATUS_IGNORE);
    }
    if (done) return true;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > gTimeout) return false;
    if (k > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
} // namespace

void mpiStart(double timeout) {
  const char *a = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *b = std::getenv("PMI_SIZE");
  if ((!a || !*a) && (!b || !*b)) return;
  int init = 0;
  MPI_Initialized(&init);
  if (init) return;
  const int size = a && *a ? std::atoi(a) : std::atoi(b);
  const char *r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!r || !*r) r = std::getenv("PMI_RANK");
  const int me = r && *r ? std::atoi(r) : 0;
  const std::string dir = rendezvousDir();
  if (!dir.empty()) {
    ::mkdir(dir.c_str(), 0777);
    gRendezvous = dir + "/" + std::to_string(me);
    if (FILE *f = std::fopen(gRendezvous.c_str(), "w")) std::fclose(f);
  }
  std::atomic<bool> up{false};
  std::thread watchdog([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (!up.load()) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
        std::string missing;
        int count = 0;
        if (!dir.empty())
          for (int q = 0; q < size; ++q)
            if (::access((dir + "/" + std::to_string(q)).c_str(), F_OK) != 0)
              missing += (missing.empty() ? "" : ", ") + std::to_string(q), ++count;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", timeout);
        std::string msg = "bigc run (process " + std::to_string(me) + "): waited " + secs +
                          " s (--comm-timeout) in MPI's start-up for the other processes: ";
        if (count > 0)
          msg += std::string(count > 1 ? "processes " : "process ") + missing +
                 " never arrived (stopped, or crashed before MPI's initialisation)";
        else if (!dir.empty())
          msg += "every process arrived, but MPI's initialisation did not complete";
        else
          msg += "one of the " + std::to_string(size) + " processes did not arrive (stopped or crashed)";
        msg += "; every process stops\n";
        std::fputs(msg.c_str(), stderr);
        std::fflush(stderr);
        // (this process's arrival file stays: the others, timing out too, must see it there)
        std::_Exit(1); // mpirun ends the job when a process exits before MPI_Finalize
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  gTimeout = timeout;
  (void)mpiWorld(); // MPI_Init_thread: returns once every process has arrived
  (void)worldOps(); // (collective: under the watchdog too)
  up.store(true);
  watchdog.join();
}

double mpiSum(double x, const std::string &what) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return x;
  // Each process sends its value to every other and receives theirs (no blocking collective: a
  // process stopped at this point is named after --comm-timeout instead of holding the others
  // forever); the sum in process order, so every process has the same bits.
  int procs = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const MPI_Comm c = worldOps();
  const int tag = int(gWorldSeq++ % 32768); // MPI guarantees tags up to 32767
  std::vector<double> got(size_t(procs), 0.0);
  std::vector<MPI_Request> recv(size_t(procs), MPI_REQUEST_NULL);
  got[size_t(me)] = x;
  {
    std::lock_guard<std::mutex> l(mpiMutex());
    for (size_t i = 0; i < gSendReqs.size();) { // the sends of earlier sums that have completed
      int done = 0;
      MPI_Test(&gSendReqs[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        gSendReqs[i] = gSendReqs.back(), gSendReqs.pop_back();
        gSent[i] = std::move(gSent.back()), gSent.pop_back();
      } else {
        ++i;
      }
    }
    for (int q = 0; q < procs; ++q) {
      if (q == me) continue;
      MPI_Irecv(&got[size_t(q)], 1, MPI_DOUBLE, q, tag, c, &recv[size_t(q)]);
      gSent.push_back(std::make_unique<double>(x));
      gSendReqs.push_back(MPI_REQUEST_NULL);
      MPI_Isend(gSent.back().get(), 1, MPI_DOUBLE, q, tag, c, &gSendReqs.back());
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int q = 0; q < procs; ++q) {
    if (q == me || waitFor(&recv[size_t(q)], t0)) continue;
    std::string missing;
    int n = 0;
    for (int r = q; r < procs; ++r) {
      int done = r == me;
      if (!done) {
        std::lock_guard<std::mutex> l(mpiMutex());
        MPI_Test(&recv[size_t(r)], &done, MPI_STATUS_IGNORE);
      }
      if (!done) missing += (missing.empty() ? "" : ", ") + std::to_string(r), ++n;
    }
    worldTimeout(what, (n > 1 ? "processes " : "process ") + missing + ", which never reached this point");
  }
  double sum = 0;
  for (double v : got) sum += v;
  return sum;
}

void mpiBroadcast(void *data, int64_t bytes, const std::string &what) { mpiBroadcastFrom(0, data, bytes, what); }

void mpiBroadcastFrom(int root, void *data, int64_t bytes, const std::string &what) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return;
  constexpr int64_t piece = int64_t(1) << 30;
  const MPI_Comm c = worldOps();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < bytes; at += piece) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> l(mpiMutex());
      MPI_Ibcast(static_cast<char *>(data) + at, int(std::min(piece, bytes - at)), MPI_BYTE, root, c, &req);
    }
    if (!waitFor(&req, t0)) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      worldTimeout(what, me == root ? std::string() : "process " + std::to_string(root) + "'s data");
    }
  }
}

void mpiFinalize() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    for (MPI_Request &r : gSendReqs) // sums' sends no one took (a process that stopped)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    gSendReqs.clear(), gSent.clear();
    if (gWorldOps != MPI_COMM_NULL) MPI_Comm_free(&gWorldOps);
    MPI_Finalize();
  }
  if (!gRendezvous.empty()) {
    ::unlink(gRendezvous.c_str());
    ::rmdir(gRendezvous.substr(0, gRendezvous.find_last_of('/')).c_str()); // (the last one out)
    gRendezvous.clear();
  }
}

namespace {

class Mpi final : public Communicator {
public:
  // A group of `ranks` ranks over the processes of `comm` (ordered as the group's ranks), each
  // holding `localRanks` consecutive ones: local rank l of process q is the group's rank
  // q * localRanks + l, global rank globals[l] (in messages).
  // `world`: the communicator of every rank (group rank = global rank), which carries the
  // pipeline stages' messages too.
  Mpi(MPI_Comm comm, int ranks, int localRanks, std::vector<int> globals, bool world = false)
      : n_(ranks), local_(localRanks), comm_(comm), globals_(std::move(globals)),
        g_(localRanks, [this](int l) { return globalRank(l); }), world_(world) {
    MPI_Comm_rank(comm_, &proc_);
    MPI_Comm_size(comm_, &procs_);
    // Arrivals: each process tells the others when it starts a collective (a small message on a
    // communicator of its own), so that a time-out names the processes that never came.
    {
      std::lock_guard<std::mutex> l(mpiMutex());
      MPI_Comm_dup(comm_, &arrivals_);
      MPI_Group mine, world;
      MPI_Comm_group(comm_, &mine);
      MPI_Comm_group(MPI_COMM_WORLD, &world);
      std::vector<int> ours(static_cast<size_t>(procs_)), theirs(static_cast<size_t>(procs_));
      for (int q = 0; q < procs_; ++q) ours[size_t(q)] = q;
      MPI_Group_translate_ranks(mine, procs_, ours.data(), world, theirs.data());
      worldProc_ = theirs;
      MPI_Group_free(&mine);
      MPI_Group_free(&world);
    }
    seen_.assign(size_t(procs_), 0);
    void *ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    if (found && ub) tagUb_ = *static_cast<int *>(ub);
  }
  ~Mpi() override {
    // Messages still in flight (their receivers are ending too): completed, or given up after the
    // timeout when a peer is gone.
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return;
    const auto t0 = std::chrono::steady_clock::now();
    while (progressSends() > 0 && !g_.aborted() &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < g_.timeout())
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    drainArrivals();
    std::lock_guard<std::mutex> l(mpiMutex());
    for (auto &a : arrOut_) { // announcements no one took (a process that stopped)
      MPI_Cancel(&a->req);
      MPI_Request_free(&a->req);
    }
    arrOut_.clear();
  }
  int size() const override { return n_; }
  int localSize() const override { return local_; }
  int globalRank(int local) const override { return globals_[size_t(local)]; }
  void reserve(int64_t) override {}
  void abort(const std::string &why) override {
    g_.abort(why);
    mail_.stop();
  }
  bool aborted() const override { return g_.aborted(); }
  void setTimeout(double seconds) override { g_.setTimeout(seconds); }
  std::string name() const override { return "mpi"; }

  void run(int l, CollectiveKind kind, Reduce red, const std::vector<CollectiveTensor> &ts,
           const std::string &what) override {
    if (kind != CollectiveKind::AllReduce && kind != CollectiveKind::ReduceScatter && kind != CollectiveKind::AllGather)
      throw CommError(what + ": context parallelism's ring and all-to-all run in one process (bigc run without "
                             "mpirun); not over MPI");
    g_.posted_[size_t(l)] = &ts;
    g_.barrier(l, what);
    const int64_t total = [&] {
      int64_t f = 0;
      for (const auto &t : ts) f += kind == CollectiveKind::AllGather ? t.outNumel : t.inNumel;
      return f;
    }();
    if (kind == CollectiveKind::AllGather) {
      // Block of the process: its ranks' shards side by side, in bytes.
      int64_t blockBytes = 0;
      for (const auto &t : ts) blockBytes += ((t.outNumel + n_ - 1) / n_) * local_ * dtypeSize(t.dtype);
      if (l == 0) {
        block_.resize(size_t(blockBytes));
        whole_.resize(size_t(blockBytes) * size_t(procs_));
      }
      g_.barrier(l, what);
      int64_t off = 0;
      for (const auto &t : ts) {
        const int64_t e = dtypeSize(t.dtype), S = (t.outNumel + n_ - 1) / n_;
        std::memcpy(block_.data() + off + int64_t(l) * S * e, t.in, size_t(S * e));
        off += S * local_ * e;
      }
      g_.barrier(l, what);
      if (blockBytes > int64_t(INT32_MAX)) tooLarge(what, blockBytes);
      if (l == 0)
        leader(what, [&](MPI_Request *req) {
          return MPI_Iallgather(block_.data(), int(blockBytes), MPI_BYTE, whole_.data(), int(blockBytes), MPI_BYTE,
                                comm_, req);
        });
      g_.barrier(l, what, 2.0);
      // whole_ = [proc 0: tensor 0 shards of its ranks, tensor 1 ...][proc 1: ...]
      int64_t toff = 0;
      for (const auto &t : ts) {
        const int64_t e = dtypeSize(t.dtype), S = (t.outNumel + n_ - 1) / n_;
        for (int r = 0; r < n_; ++r) {
          const int p = r / local_, lr = r % local_;
          const int64_t begin = int64_t(r) * S, len = std::max<int64_t>(0, std::min(t.outNumel, begin + S) - begin);
          if (len > 0)
            std::memcpy(static_cast<char *>(t.out) + begin * e,
                        whole_.data() + int64_t(p) * blockBytes + toff + int64_t(lr) * S * e, size_t(len * e));
        }
        toff += S * local_ * e;
      }
      g_.barrier(l, what);
      return;
    }
    // All-reduce / reduce-scatter: the process's f32 reduction, then over the processes.
    if (total > int64_t(INT32_MAX)) tooLarge(what, total);
    if (l == 0) acc_.assign(size_t(total), red == Reduce::Max ? -INFINITY : 0.0f);
    g_.barrier(l, what);
    if (l == 0) {
      int64_t off = 0;
      for (size_t k = 0; k < ts.size(); ++k) {
        for (int r = 0; r < local_; ++r) {
          const CollectiveTensor &t = (*g_.posted_[size_t(r)])[k];
          for (int64_t i = 0; i < t.inNumel; ++i) {
            float v = loadAs32(t.in, t.dtype, i);
            if (red == Reduce::Norm) v *= v;
            float &a = acc_[size_t(off + i)];
            a = red == Reduce::Max ? std::max(a, v) : a + v;
          }
        }
        off += ts[k].inNumel;
      }
      leader(what, [&](MPI_Request *req) {
        return MPI_Iallreduce(MPI_IN_PLACE, acc_.data(), int(total), MPI_FLOAT, red == Reduce::Max ? MPI_MAX : MPI_SUM,
                              comm_, req);
      });
    }
    g_.barrier(l, what, 2.0);
    auto finish = [&](float v) {
      if (red == Reduce::Mean) return v / float(n_);
      if (red == Reduce::Norm) return std::sqrt(v);
      return v;
    };
    const int r = proc_ * local_ + l; // this rank's place in the group
    int64_t off = 0;
    for (const auto &t : ts) {
      if (kind == CollectiveKind::AllReduce) {
        for (int64_t i = 0; i < t.inNumel; ++i) storeFrom32(t.out, t.dtype, i, finish(acc_[size_t(off + i)]));
      } else {
        const int64_t S = (t.inNumel + n_ - 1) / n_, begin = int64_t(r) * S;
        for (int64_t i = 0; i < t.outNumel; ++i)
          storeFrom32(t.out, t.dtype, i, begin + i < t.inNumel ? finish(acc_[size_t(off + begin + i)]) : 0.0f);
      }
      off += t.inNumel;
    }
    g_.barrier(l, what);
  }

  // Point-to-point (world communicator only): inside this process through the mailbox, between
  // processes MPI_Isend from a copy (send never waits for the receiver) and MPI_Improbe polled
  // against the timeout, then MPI_Mrecv. The MPI tag carries the program's tag and the sending and
  // receiving local ranks (several ranks of one process talk to several of another).
  void send(int l, int peer, int64_t tag, const void *data, int64_t bytes, const std::string &what) override {
    if (!world_) return Communicator::send(l, peer, tag, data, bytes, what);
    if (g_.aborted()) throw CommError(g_.stoppedIn(l, what));
    checkPeer(l, peer, what);
    const int q = peer / local_;
    if (q == proc_) {
      mail_.put(globalRank(l), peer, tag, data, bytes);
      return;
    }
    if (bytes > int64_t(INT32_MAX)) tooLarge(what, bytes);
    const int mt = mpiTag(l, peer % local_, tag, what);
    auto m = std::make_unique<Outgoing>();
    m->bytes.assign(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
    std::lock_guard<std::mutex> s(sendMu_);
    {
      std::lock_guard<std::mutex> k(mpiMutex());
      if (MPI_Isend(m->bytes.data(), int(bytes), MPI_BYTE, q, mt, comm_, &m->req) != MPI_SUCCESS) {
        std::string msg = what + ": MPI failed to send to rank " + std::to_string(peer);
        g_.abort(msg);
        throw CommError(msg);
      }
    }
    out_.push_back(std::move(m));
  }

  void recv(int l, int peer, int64_t tag, void *data, int64_t bytes, const std::string &what) override {
    if (!world_) return Communicator::recv(l, peer, tag, data, bytes, what);
    checkPeer(l, peer, what);
    const int self = globalRank(l), q = peer / local_;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", g_.timeout());
    auto fail = [&](const std::string &msg) {
      abort(msg);
      throw CommError(msg);
    };
    auto wrongSize = [&](int64_t got) {
      fail(what + ": rank " + std::to_string(self) + " receives " + std::to_string(bytes) + " bytes from rank " +
           std::to_string(peer) + " with tag " + std::to_string(tag) + ", which sent " + std::to_string(got) +
           " (the ranks run different programs?)");
    };
    const std::string late = what + ": rank " + std::to_string(self) + " waited " + secs +
                             " s for the message from rank " + std::to_string(peer) + " with tag " +
                             std::to_string(tag) + ", which did not come (rank " + std::to_string(peer) +
                             " stuck or failed); every rank stops";
    if (q == proc_) {
      int64_t got = 0;
      switch (mail_.take(
          peer, self, tag, data, bytes, g_.timeout(), [this] { return g_.aborted(); }, &got)) {
      case comm::Mailbox::Got::Ok: return;
      case comm::Mailbox::Got::Stopped: throw CommError(g_.stoppedIn(l, what));
      case comm::Mailbox::Got::TimedOut: fail(late);
      case comm::Mailbox::Got::WrongSize: wrongSize(got);
      }
      return;
    }
    const int mt = mpiTag(peer % local_, l, tag, what);
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0;; ++k) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      {
        std::lock_guard<std::mutex> m(mpiMutex());
        MPI_Improbe(q, mt, comm_, &flag, &msg, &st);
      }
      if (flag) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (int64_t(count) != bytes) wrongSize(count);
        std::lock_guard<std::mutex> m(mpiMutex());
        MPI_Mrecv(data, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        return;
      }
      progressSends();
      if (g_.aborted()) throw CommError(g_.stoppedIn(l, what));
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > g_.timeout()) fail(late);
      if (k > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

private:
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  // Frees the sends that completed; returns how many are still in flight.
  size_t progressSends() {
    std::lock_guard<std::mutex> s(sendMu_);
    for (size_t i = 0; i < out_.size();) {
      int done = 0;
      {
        std::lock_guard<std::mutex> k(mpiMutex());
        MPI_Test(&out_[i]->req, &done, MPI_STATUS_IGNORE);
      }
      if (done) {
        out_[i] = std::move(out_.back());
        out_.pop_back();
      } else {
        ++i;
      }
    }
    return out_.size();
  }
  int mpiTag(int fromLocal, int toLocal, int64_t tag, const std::string &what) {
    const int64_t t = (tag * local_ + fromLocal) * local_ + toLocal;
    if (tag < 0 || t > int64_t(tagUb_)) {
      std::string msg = what + ": message tag " + std::to_string(tag) + " with " + std::to_string(local_) +
                        " ranks per process is beyond this MPI's largest tag (" + std::to_string(tagUb_) +
                        "); run fewer ranks per process (more mpirun processes)";
      g_.abort(msg);
      throw CommError(msg);
    }
    return int(t);
  }
  void checkPeer(int l, int peer, const std::string &what) const {
    if (peer < 0 || peer >= n_ || peer == globalRank(l))
      throw CommError(what + ": rank " + std::to_string(globalRank(l)) + " has no peer rank " + std::to_string(peer) +
                      " in this communicator");
  }

  [[noreturn]] void tooLarge(const std::string &what, int64_t n) {
    std::string msg = what + ": " + std::to_string(n) +
                      " elements in one MPI collective (more than 2^31): use a "
                      "smaller --bucket-mb";
    g_.abort(msg);
    throw CommError(msg);
  }
  // Tells the other processes that this one has reached collective seq_ (numbered per
  // communicator, in program order on every process).
  void announce() {
    ++seq_;
    for (int q = 0; q < procs_; ++q) {
      if (q == proc_) continue;
      auto a = std::make_unique<Arrival>();
      a->seq = seq_;
      std::lock_guard<std::mutex> l(mpiMutex());
      if (MPI_Isend(&a->seq, 1, MPI_INT64_T, q, 1, arrivals_, &a->req) == MPI_SUCCESS) arrOut_.push_back(std::move(a));
    }
  }
  // Records the other processes' arrivals; frees the announcements delivered.
  void drainArrivals() {
    std::lock_guard<std::mutex> l(mpiMutex());
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, 1, arrivals_, &flag, &st);
      if (!flag) break;
      int64_t k = 0;
      MPI_Recv(&k, 1, MPI_INT64_T, st.MPI_SOURCE, 1, arrivals_, MPI_STATUS_IGNORE);
      if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < procs_)
        seen_[size_t(st.MPI_SOURCE)] = std::max(seen_[size_t(st.MPI_SOURCE)], k);
    }
    for (size_t i = 0; i < arrOut_.size();) {
      int done = 0;
      MPI_Test(&arrOut_[i]->req, &done, MPI_STATUS_IGNORE);
      if (done) {
        arrOut_[i] = std::move(arrOut_.back());
        arrOut_.pop_back();
      } else {
        ++i;
      }
    }
  }
  // The processes (mpirun's numbers) that have not reached collective seq_ (`all`: every other one).
  std::string missingProcesses(bool all = false) {
    std::string out;
    int n = 0;
    for (int q = 0; q < procs_; ++q)
      if (q != proc_ && (all || seen_[size_t(q)] < seq_))
        out += (out.empty() ? "" : ", ") + std::to_string(worldProc_[size_t(q)]), ++n;
    if (n == 0) return "";
    return (n > 1 ? "processes " : "process ") + out;
  }

  template <class Start> void leader(const std::string &what, Start start) {
    announce();
    MPI_Request req;
    int started;
    {
      std::lock_guard<std::mutex> l(mpiMutex());
      started = start(&req);
    }
    if (started != MPI_SUCCESS) {
      std::string msg = what + ": MPI failed to start the collective on process " + std::to_string(proc_);
      g_.abort(msg);
      throw CommError(msg);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0;; ++k) {
      int done = 0;
      {
        std::lock_guard<std::mutex> l(mpiMutex());
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (done) return;
      if ((k & 63) == 0) drainArrivals();
      if (g_.aborted()) {
        // A local rank failed: this process cannot complete the collective; the job must stop.
        g_.check();
      }
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > g_.timeout()) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", g_.timeout());
        drainArrivals();
        const std::string missing = missingProcesses();
        std::string msg =
            what + ": process " + std::to_string(worldProc_[size_t(proc_)]) + " (ranks " +
            std::to_string(globalRank(0)) + "-" + std::to_string(globalRank(local_ - 1)) + ") waited " + secs +
            " s for " +
            (missing.empty() ? missingProcesses(true) + ", which reached this collective but did not complete it"
                             : missing + ", which never reached this collective") +
            " (stuck or failed); every rank stops";
        g_.abort(msg);
        throw CommError(msg);
      }
      if (k > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  struct Arrival {
    int64_t seq = 0;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  MPI_Comm arrivals_ = MPI_COMM_NULL;
  int64_t seq_ = 0;                              // collectives this process has started
  std::vector<int64_t> seen_;                    // per process: the last collective it announced
  std::vector<int> worldProc_;                   // per process of comm_: its rank in the world (mpirun's)
  std::vector<std::unique_ptr<Arrival>> arrOut_; // announcements in flight
  int n_, local_;
  MPI_Comm comm_;
  std::vector<int> globals_;
  int proc_ = 0, procs_ = 1;
  comm::LocalGroup g_;
  std::vector<float> acc_;
  std::vector<char> block_, whole_;
  bool world_ = false;
  int tagUb_ = 32767; // MPI guarantees at least this
  comm::Mailbox mail_;
  std::mutex sendMu_;
  std::vector<std::unique_ptr<Outgoing>> out_;
};

} // namespace

std::shared_ptr<Communicator> makeMpiCommunicator(int ranks, int localRanks) {
  int proc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  std::vector<int> globals;
  for (int l = 0; l < localRanks; ++l) globals.push_back(proc * localRanks + l);
  return std::make_shared<Mpi>(MPI_COMM_WORLD, ranks, localRanks, std::move(globals), /*world=*/true);
}

std::vector<MeshRank> makeMpiMesh(int dp, int tp, int localRanks, double timeout,
                                  std::vector<std::shared_ptr<Communicator>> *all, int pp) {
  const int L = localRanks, G = dp * tp; // G: the ranks of one stage
  if (tp % L != 0 && L % tp != 0)
    throw UserError("the tensor size " + std::to_string(tp) + " and the " + std::to_string(L) +
                    " ranks of each process: one must divide the other (tensor groups inside a process, or spanning "
                    "whole processes); start " +
                    std::to_string(dp * tp / std::max(1, std::min(L, tp))) +
                    " processes (mpirun -np) or compile for another --tp");
  if (pp > 1 && G % L != 0 && L % G != 0)
    throw UserError("the " + std::to_string(G) + " ranks of each pipeline stage and the " + std::to_string(L) +
                    " ranks of each process: one must divide the other (stages inside a process, or spanning whole "
                    "processes); start " +
                    std::to_string(pp) + " processes (mpirun -np " + std::to_string(pp) + ": a stage per process) or " +
                    std::to_string(pp * G) + " (a rank per process)");
  int proc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  std::vector<MeshRank> out(static_cast<size_t>(L));
  // Every group, in one order on every process: the data-parallel ones (by s, t), then the tensor-
  // parallel ones (by s, d), then the pipeline ones (by d, t). A group across processes is split from the world by
  // every process (those outside it get MPI_COMM_NULL), its processes ordered as its ranks.
  enum Axis { kData, kTensor, kPipe };
  auto make = [&](const std::vector<int> &members, Axis axis) {
    std::vector<int> here; // the members in this process, in group order
    std::set<int> procs;
    for (int g : members) {
      procs.insert(g / L);
      if (g / L == proc) here.push_back(g);
    }
    std::shared_ptr<Communicator> c;
    if (procs.size() == 1) {
      if (!here.empty()) c = makeInProcessCommunicator(members);
    } else {
      MPI_Comm sub = MPI_COMM_NULL;
      {
        std::lock_guard<std::mutex> l(mpiMutex());
        MPI_Comm_split(MPI_COMM_WORLD, here.empty() ? MPI_UNDEFINED : 0, proc, &sub);
      }
      if (!here.empty()) c = std::make_shared<Mpi>(sub, int(members.size()), int(here.size()), here);
    }
    if (!c) return;
    c->setTimeout(timeout);
    all->push_back(c);
    for (size_t j = 0; j < here.size(); ++j) {
      MeshRank &m = out[size_t(here[j] - proc * L)];
      (axis == kTensor ? m.tp : axis == kPipe ? m.pp : m.dp) = c;
      (axis == kTensor ? m.tpLocal : axis == kPipe ? m.ppLocal : m.dpLocal) = int(j);
    }
  };
  auto rank = [&](int s, int d, int t) { return (s * dp + d) * tp + t; };
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> members;
      for (int d = 0; d < dp; ++d) members.push_back(rank(s, d, t));
      make(members, kData);
    }
  for (int s = 0; s < pp; ++s)
    for (int d = 0; d < dp; ++d) {
      std::vector<int> members;
      for (int t = 0; t < tp; ++t) members.push_back(rank(s, d, t));
      make(members, kTensor);
    }
  if (pp > 1)
    for (int d = 0; d < dp; ++d)
      for (int t = 0; t < tp; ++t) {
        std::vector<int> members;
        for (int s = 0; s < pp; ++s) members.push_back(rank(s, d, t));
        make(members, kPipe);
      }
  return out;
}

} // namespace bigc::rt
