// The ranks of one process meeting in shared memory: a barrier that names the ranks that did not
// arrive, an abort flag, per-rank postings and scratch; a mailbox for point-to-point messages. Used by the in-process
// communicator (all ranks) and by the MPI communicator (the ranks of each process). Internal to runtime/comm.
#pragma once

#include "bigc/Runtime/comm.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace bigc::rt::comm {

class LocalGroup {
public:
  // `n` local ranks; `global(l)` their global numbers (for messages).
  LocalGroup(int n, std::function<int(int)> global) : n_(n), global_(std::move(global)), arrived_(size_t(n), 0) {
    posted_.assign(size_t(n), nullptr);
    scratch_.resize(size_t(n));
  }
  int size() const { return n_; }

  // Every local rank arrives before any leaves; throws CommError on timeout (naming the ranks that
  // did not arrive, and aborting the group) or when the group was aborted.
  // `scale`: this barrier waits scale x the timeout (the barriers behind the process's MPI call
  // wait longer than that call may, so that its own timeout, naming the other processes, fires
  // first).
  void barrier(int local, const std::string &what, double scale = 1.0) {
    std::unique_lock<std::mutex> l(mu_);
    if (aborted_) throw CommError(stoppedIn(local, what));
    const int64_t g = gen_;
    arrived_[size_t(local)] = g + 1;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(timeout_ * scale));
    bool ok = cv_.wait_until(l, deadline, [&] { return gen_ != g || aborted_; });
    if (aborted_ && gen_ == g) {
      --count_;
      throw CommError(stoppedIn(local, what));
    }
    if (!ok) {
      std::string missing;
      int count = 0;
      for (int r = 0; r < n_; ++r)
        if (arrived_[size_t(r)] < g + 1) missing += (count++ ? ", " : "") + std::to_string(global_(r));
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_ * scale);
      why_ = what + ": rank " + std::to_string(global_(local)) + " waited " + secs + " s for rank" +
             (count > 1 ? "s " : " ") + missing +
             ", which did not reach this collective (stuck or failed); "
             "every rank stops";
      aborted_ = true;
      cv_.notify_all();
      throw CommError(why_);
    }
  }

  void abort(const std::string &why) {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_) why_ = why;
    aborted_ = true;
    cv_.notify_all();
  }
  bool aborted() const {
    std::lock_guard<std::mutex> l(mu_);
    return aborted_;
  }
  void check() const {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_) throw CommError(why_);
  }
  // The message of a rank stopped by an abort: the reason, and where this rank was.
  std::string stoppedIn(int local, const std::string &what) const {
    return why_ + " [rank " + std::to_string(global_(local)) + " stopped in " + what + "]";
  }
  void setTimeout(double s) { timeout_ = s; }
  double timeout() const { return timeout_; }

  // Per-rank scratch of at least `floats` floats, two halves (double buffering).
  void reserve(int64_t floats) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto &s : scratch_)
      if (int64_t(s.size()) < 2 * floats) s.resize(size_t(2 * floats));
  }
  float *scratch(int local, int half) {
    auto &s = scratch_[size_t(local)];
    return s.data() + (half ? s.size() / 2 : 0);
  }
  int64_t scratchHalf(int local) const { return int64_t(scratch_[size_t(local)].size() / 2); }

  std::vector<const std::vector<CollectiveTensor> *> posted_;

private:
  int n_;
  std::function<int(int)> global_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  int64_t gen_ = 0;
  std::vector<int64_t> arrived_;
  bool aborted_ = false;
  std::string why_;
  double timeout_ = 300.0;
  std::vector<std::vector<float>> scratch_;
};

// Point-to-point messages between the ranks of one process: a mailbox per (sender, receiver, tag),
// each a queue of messages (copies of the sent bytes). A send never waits; a receive waits for its
// message. The buffers of taken messages are kept for the next sends (no allocation once every
// message size has been seen).
class Mailbox {
public:
  enum class Got { Ok, Stopped, TimedOut, WrongSize, Mispaired };

  void put(int from, int to, int64_t tag, const void *data, int64_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<char> m;
    for (size_t i = 0; i < spare_.size(); ++i)
      if (spare_[i].capacity() >= size_t(bytes)) {
        m = std::move(spare_[i]);
        spare_.erase(spare_.begin() + long(i));
        break;
      }
    m.assign(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
    box_[Key{from, to, tag}].push_back(std::move(m));
    ++sent_[Key{from, to, tag}];
    order_[{from, to}].push_back(tag);
    cv_.notify_all();
  }

  // Waits up to `timeout` seconds until every message put from `from` to `to` with `tag` has been
  // taken (a send that waits for its recv, as NCCL's does).
  Got waitTaken(int from, int to, int64_t tag, double timeout, const std::function<bool()> &stopped) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout));
    std::unique_lock<std::mutex> l(mu_);
    const Key key{from, to, tag};
    for (;;) {
      if (taken_[key] >= sent_[key]) return Got::Ok;
      if (woken_ || stopped()) return Got::Stopped;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return Got::TimedOut;
      cv_.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(20)));
    }
  }

  // Waits up to `timeout` seconds for the message (checking `stopped` every few milliseconds);
  // copies it to `data` when it has `bytes` bytes (else leaves it, and `*got` is its size). With
  // `inOrder` (NCCL's rule: the k-th recv from a rank meets that rank's k-th send to this one, whatever
  // the tags): Mispaired, and `*got` the tag of that send, when the k-th message sent is not this one.
  Got take(int from, int to, int64_t tag, void *data, int64_t bytes, double timeout,
           const std::function<bool()> &stopped, int64_t *got, bool inOrder = false) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout));
    std::unique_lock<std::mutex> l(mu_);
    const Key key{from, to, tag};
    const int64_t k = inOrder ? taken_in_order_[{from, to}]++ : -1;
    for (;;) {
      if (inOrder) {
        const std::vector<int64_t> &sent = order_[{from, to}];
        if (int64_t(sent.size()) > k && sent[size_t(k)] != tag) {
          *got = sent[size_t(k)];
          return Got::Mispaired;
        }
      }
      auto it = box_.find(key);
      if (it != box_.end() && !it->second.empty()) {
        std::vector<char> &m = it->second.front();
        *got = int64_t(m.size());
        if (*got != bytes) return Got::WrongSize;
        std::memcpy(data, m.data(), m.size());
        spare_.push_back(std::move(m));
        it->second.pop_front();
        ++taken_[key];
        cv_.notify_all();
        return Got::Ok;
      }
      if (woken_ || stopped()) return Got::Stopped;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return Got::TimedOut;
      cv_.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(20)));
    }
  }

  // Every waiting and later receive returns Stopped (the run was aborted).
  void stop() {
    std::lock_guard<std::mutex> l(mu_);
    woken_ = true;
    cv_.notify_all();
  }

private:
  using Key = std::tuple<int, int, int64_t>;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<std::vector<char>>> box_;
  std::map<Key, int64_t> sent_, taken_;                       // messages put and taken per key
  std::map<std::pair<int, int>, std::vector<int64_t>> order_; // per (from, to): the tags put, in order
  std::map<std::pair<int, int>, int64_t> taken_in_order_;     // per (from, to): recvs issued in order
  std::vector<std::vector<char>> spare_;
  bool woken_ = false;
};

} // namespace bigc::rt::comm
