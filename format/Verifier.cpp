// The plan verifier: see include/bigc/Format/verifier.h for what it proves.
#include "bigc/Format/verifier.h"

#include "bigc/Format/evaluation.h"
#include "bigc/Format/ops.h"
#include "bigc/Format/p2p_groups.h"
#include "bigc/Format/validator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

namespace bigc::format {

HappensBefore::HappensBefore(const Program &p) : n_(int64_t(p.instructions.size())) {
  std::map<std::string, int> ids;
  std::vector<int> last; // per stream: the last instruction seen
  sid_.resize(size_t(n_)), pos_.resize(size_t(n_)), clock_.resize(size_t(n_));
  std::vector<int> count;
  for (int64_t i = 0; i < n_; ++i) {
    const Instruction &ins = p.instructions[size_t(i)];
    auto it = ids.find(ins.stream);
    if (it == ids.end()) {
      it = ids.emplace(ins.stream, int(streams_.size())).first;
      streams_.push_back(ins.stream);
      last.push_back(-1);
      count.push_back(0);
      for (auto &c : clock_)
        if (!c.empty()) c.push_back(-1);
    }
    const int s = it->second;
    sid_[size_t(i)] = s;
    pos_[size_t(i)] = count[size_t(s)]++;
    std::vector<int> c = last[size_t(s)] >= 0 ? clock_[size_t(last[size_t(s)])] : std::vector<int>(streams_.size(), -1);
    c.resize(streams_.size(), -1);
    for (int64_t w : ins.wait) {
      const std::vector<int> &cw = clock_[size_t(w)];
      for (size_t k = 0; k < cw.size(); ++k) c[k] = std::max(c[k], cw[k]);
    }
    c[size_t(s)] = pos_[size_t(i)];
    clock_[size_t(i)] = std::move(c);
    last[size_t(s)] = int(i);
  }
}

bool HappensBefore::operator()(int64_t a, int64_t b) const {
  if (a == b) return false;
  if (a == kStart) return true;
  if (b == kStart) return false;
  if (b == n_) return true;
  if (a == n_) return false;
  const std::vector<int> &cb = clock_[size_t(b)];
  const size_t sa = size_t(sid_[size_t(a)]);
  return sa < cb.size() && cb[sa] >= pos_[size_t(a)];
}

int HappensBefore::latestOn(int64_t b, int stream) const {
  const std::vector<int> &cb = clock_[size_t(b)];
  return size_t(stream) < cb.size() ? cb[size_t(stream)] : -1;
}

namespace {

constexpr int64_t kStart = HappensBefore::kStart;

struct Access {
  int64_t ins; // instruction index, kStart, or n (the runtime's reads after the last)
  bool write;
};

class Verifier {
public:
  // `lossRead`: the runtime reads the loss after the step (not a pipeline's earlier stages').
  Verifier(const Program &p, size_t limit, bool lossRead = true)
      : p_(p), n_(int64_t(p.instructions.size())), limit_(limit), lossRead_(lossRead) {}

  std::vector<std::string> run() {
    order();
    accesses();
    aliases();
    readsAfterWrites();
    sameBufferAcrossStreams();
    inPlaceOverwrites();
    overlaps();
    return issues_;
  }

private:
  const Program &p_;
  const int64_t n_;
  const size_t limit_;
  const bool lossRead_;
  std::vector<std::string> issues_;
  HappensBefore hb_;
  std::vector<std::vector<Access>> acc_; // per buffer
  // Buffers at the same place by design: a reshape's output at its input's place is a view (same
  // value); an in-place elementwise output replaces its input's value. mem_: one group per shared
  // memory (both kinds); val_: one group per shared value (reshape views only).
  std::vector<size_t> mem_, val_;
  std::vector<std::vector<int64_t>> members_; // per memory group root
  struct Overwrite {
    int64_t ins, from, to;
  };
  std::vector<Overwrite> overwrites_;

  bool full() const { return issues_.size() >= limit_; }
  void add(const std::string &s) {
    if (!full()) issues_.push_back(s);
  }

  void order() { hb_ = HappensBefore(p_); }
  // a happens before b (a != b).
  bool hb(int64_t a, int64_t b) const { return hb_(a, b); }

  std::string where(int64_t i) const {
    if (i == kStart) return "the runtime (writing the step's inputs before the first instruction)";
    if (i == n_) return "the runtime (reading results after the last instruction)";
    const Instruction &ins = p_.instructions[size_t(i)];
    return "instruction " + std::to_string(i) + " (" + ins.op + " on stream " + ins.stream +
           (ins.loc.empty() ? std::string() : " at " + ins.loc) + ")";
  }
  std::string name(int64_t id) const {
    const Buffer &b = p_.buffers[size_t(id)];
    return "buffer " + std::to_string(id) + " '" + b.name + "' (" + b.role + ")";
  }

  bool isInput(int64_t id) const {
    for (const auto *l : {&p_.tokenInputs, &p_.targetInputs})
      if (std::find(l->begin(), l->end(), id) != l->end()) return true;
    return false;
  }
  bool readAtEnd(int64_t id) const { return (lossRead_ && id == p_.loss) || id == p_.foundInf || id == p_.lossScale; }

  void accesses() {
    acc_.assign(p_.buffers.size(), {});
    for (size_t id = 0; id < p_.buffers.size(); ++id)
      if (isInput(int64_t(id))) acc_[id].push_back({kStart, true});
    for (int64_t i = 0; i < n_; ++i) {
      const Instruction &ins = p_.instructions[size_t(i)];
      for (int64_t id : ins.in) acc_[size_t(id)].push_back({i, false});
      for (int64_t id : ins.out) acc_[size_t(id)].push_back({i, true});
    }
    for (size_t id = 0; id < p_.buffers.size(); ++id)
      if (readAtEnd(int64_t(id))) acc_[id].push_back({n_, false});
  }

  static size_t find(std::vector<size_t> &u, size_t x) {
    while (u[x] != x) x = u[x] = u[u[x]];
    return x;
  }
  void aliases() {
    const size_t nb = p_.buffers.size();
    mem_.resize(nb), val_.resize(nb);
    for (size_t i = 0; i < nb; ++i) mem_[i] = val_[i] = i;
    for (int64_t i = 0; i < n_; ++i) {
      const Instruction &ins = p_.instructions[size_t(i)];
      const OpDef *sig = findOp(ins.op);
      if (!sig || !sig->inPlace) continue;
      for (int64_t o : ins.out)
        for (int64_t x : ins.in) {
          const Buffer &bo = p_.buffers[size_t(o)], &bx = p_.buffers[size_t(x)];
          if (o == x || bo.space != bx.space || bo.offset != bx.offset || bo.bytes != bx.bytes) continue;
          mem_[find(mem_, size_t(o))] = find(mem_, size_t(x));
          if (ins.op == "reshape")
            val_[find(val_, size_t(o))] = find(val_, size_t(x));
          else
            overwrites_.push_back({i, x, o});
        }
    }
    members_.assign(nb, {});
    for (size_t i = 0; i < nb; ++i) members_[find(mem_, i)].push_back(int64_t(i));
  }

  // An in-place instruction replaces its input's value: nothing may use that value (the input or
  // a reshape view of it) after it.
  void inPlaceOverwrites() {
    for (const Overwrite &w : overwrites_) {
      if (full()) return;
      const size_t v = find(val_, size_t(w.from));
      for (int64_t z : members_[find(mem_, size_t(w.from))]) {
        if (find(val_, size_t(z)) != v) continue;
        for (const Access &a : acc_[size_t(z)])
          if (a.ins != w.ins && !hb(a.ins, w.ins)) {
            add(where(w.ins) + " overwrites " + name(w.from) + " in place with " + name(w.to) + ", but " +
                where(a.ins) + (a.write ? " writes " : " reads ") + name(z) + ", the same value, " +
                (hb(w.ins, a.ins) ? "after it" : "with nothing ordering the two"));
            return;
          }
      }
    }
  }

  void readsAfterWrites() {
    for (size_t id = 0; id < p_.buffers.size() && !full(); ++id) {
      const Buffer &b = p_.buffers[id];
      if (b.persistent() || isInput(int64_t(id))) continue;
      for (const Access &r : acc_[id]) {
        if (r.write) continue;
        bool ok = false;
        int64_t unordered = -2;
        for (const Access &w : acc_[id]) {
          if (!w.write) continue;
          if (hb(w.ins, r.ins)) {
            ok = true;
            break;
          }
          if (w.ins != r.ins && !hb(r.ins, w.ins)) unordered = w.ins;
        }
        if (ok) continue;
        if (unordered != -2)
          add(where(r.ins) + " reads " + name(int64_t(id)) + ", which " + where(unordered) +
              " writes, but nothing orders that write before the read (a missing wait)");
        else
          add(where(r.ins) + " reads " + name(int64_t(id)) + " before any instruction writes it");
        break; // one report per buffer
      }
    }
  }

  // The accesses of a memory group, each with the buffer it names.
  std::vector<std::pair<Access, int64_t>> groupAccesses(size_t root) const {
    std::vector<std::pair<Access, int64_t>> out;
    for (int64_t id : members_[root])
      for (const Access &a : acc_[size_t(id)]) out.push_back({a, id});
    return out;
  }

  void sameBufferAcrossStreams() {
    for (size_t root = 0; root < p_.buffers.size() && !full(); ++root) {
      if (members_[root].empty()) continue;
      const auto ga = groupAccesses(root);
      // The pairs with a write, in the order (x, y) of a scan of all pairs: a read is checked against
      // the writes after it only (a group can have thousands of reads: the loss scale, every update's
      // overflow flag).
      std::vector<size_t> writes;
      for (size_t k = 0; k < ga.size(); ++k)
        if (ga[k].first.write) writes.push_back(k);
      bool reported = false;
      for (size_t x = 0; x < ga.size() && !reported; ++x) {
        const bool xw = ga[x].first.write;
        const size_t from = xw ? x + 1 : size_t(std::upper_bound(writes.begin(), writes.end(), x) - writes.begin());
        for (size_t k = from; k < (xw ? ga.size() : writes.size()) && !reported; ++k) {
          const size_t y = xw ? k : writes[k];
          const Access &u = ga[x].first, &v = ga[y].first;
          if (u.ins == v.ins || !(u.write || v.write)) continue;
          if (hb(u.ins, v.ins) || hb(v.ins, u.ins)) continue;
          add(where(u.ins) + (u.write ? " writes " : " reads ") + name(ga[x].second) + " and " + where(v.ins) +
              (v.write ? " writes " : " reads ") +
              (ga[x].second == ga[y].second ? std::string("it") : name(ga[y].second)) +
              (ga[x].second == ga[y].second ? "" : " at the same place") + ", and no wait orders the two");
          reported = true;
        }
      }
    }
  }

  // A memory group's first and last access on each stream (kStart and n_ count as streams).
  struct Frontier {
    std::vector<int64_t> first, last;
  };
  std::vector<Frontier> frontiers_; // per group root, made on first use
  std::vector<bool> haveFrontier_;
  const Frontier &frontier(size_t root) {
    if (frontiers_.empty()) frontiers_.resize(p_.buffers.size()), haveFrontier_.assign(p_.buffers.size(), false);
    if (haveFrontier_[root]) return frontiers_[root];
    std::map<int64_t, std::pair<int64_t, int64_t>> byStream; // stream key -> (first, last)
    for (int64_t id : members_[root])
      for (const Access &a : acc_[size_t(id)]) {
        const int64_t key = a.ins == kStart ? -1 : a.ins == n_ ? -2 : hb_.streamOf(a.ins);
        auto [e, fresh] = byStream.try_emplace(key, a.ins, a.ins);
        if (!fresh) e->second = {std::min(e->second.first, a.ins), std::max(e->second.second, a.ins)};
      }
    Frontier f;
    for (const auto &[key, fl] : byStream) f.first.push_back(fl.first), f.last.push_back(fl.second);
    haveFrontier_[root] = true;
    return frontiers_[root] = std::move(f);
  }
  // Every access of `a`'s group happens before every access of `b`'s.
  bool before(const Frontier &a, const Frontier &b) const {
    for (int64_t x : a.last)
      for (int64_t y : b.first)
        if (!hb(x, y)) return false;
    return true;
  }

  // Two memory groups whose bytes overlap: every access of one happens before every access of
  // the other.
  void overlapPair(size_t gx, size_t gy, int64_t x, int64_t y) {
    const Buffer &bx = p_.buffers[size_t(x)], &by = p_.buffers[size_t(y)];
    const int64_t lo = std::max(bx.offset, by.offset), hi = std::min(bx.offset + bx.bytes, by.offset + by.bytes);
    // (made only for a report: this runs for every pair of groups that share bytes)
    auto shared = [&] {
      return "share bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of the '" + bx.space + "' arena";
    };
    for (int64_t id : {x, y})
      if (persistent_[size_t(id)]) {
        add(name(x) + " and " + name(y) + " " + shared() + ", but " + name(id) + " is persistent (live across steps)");
        return;
      }
    // The common case first: a group's accesses on a stream are ordered, so every access of X
    // happens before every access of Y when the last of X on each stream happens before the first
    // of Y on each (the clocks only grow along a stream).
    const Frontier &fx = frontier(gx), &fy = frontier(gy);
    if (before(fx, fy) || before(fy, fx)) return;
    const auto ax = groupAccesses(gx), ay = groupAccesses(gy);
    bool xFirst = true, yFirst = true;
    const std::pair<Access, int64_t> *ua = nullptr, *ub = nullptr;
    for (const auto &a : ax)
      for (const auto &b : ay) {
        const bool ab = hb(a.first.ins, b.first.ins), ba = hb(b.first.ins, a.first.ins);
        if (!ab && !ba && a.first.ins == b.first.ins) {
          add(name(a.second) + " and " + name(b.second) + " " + shared() + ", and " + where(a.first.ins) +
              (a.first.write ? " writes" : " reads") + " the first and " + (b.first.write ? "writes" : "reads") +
              " the second (an output may share an input's memory only as an exact in-place update)");
          return;
        }
        if (!ab && !ba) {
          add(name(a.second) + " and " + name(b.second) + " " + shared() + ", but " + where(a.first.ins) +
              (a.first.write ? " writes" : " reads") + " the first and " + where(b.first.ins) +
              (b.first.write ? " writes" : " reads") + " the second with nothing ordering them");
          return;
        }
        if (!ab) xFirst = false, ua = &a, ub = &b;
        if (!ba) yFirst = false;
      }
    if (xFirst || yFirst) return;
    // Ordered pairwise but interleaved: one buffer's memory is used while the other is live.
    add(name(ua->second) + " and " + name(ub->second) + " " + shared() + " while both are live: " +
        where(ub->first.ins) + (ub->first.write ? " writes" : " reads") + " the second before " + where(ua->first.ins) +
        (ua->first.write ? " writes" : " reads") + " the first, which is also used before that");
  }

  std::vector<bool> persistent_; // per buffer (its role, compared once)
  void overlaps() {
    persistent_.resize(p_.buffers.size());
    for (size_t i = 0; i < p_.buffers.size(); ++i) persistent_[i] = p_.buffers[i].persistent();
    std::map<std::string, std::vector<int64_t>> bySpace;
    for (const Buffer &b : p_.buffers)
      if (b.bytes > 0) bySpace[b.space].push_back(b.id);
    std::unordered_set<uint64_t> checked; // group pairs (a hash: millions in the largest plans)
    for (auto &[space, ids] : bySpace) {
      std::sort(ids.begin(), ids.end(),
                [&](int64_t a, int64_t b) { return p_.buffers[size_t(a)].offset < p_.buffers[size_t(b)].offset; });
      for (size_t i = 0; i < ids.size() && !full(); ++i) {
        const Buffer &bi = p_.buffers[size_t(ids[i])];
        for (size_t j = i + 1; j < ids.size() && !full(); ++j) {
          const Buffer &bj = p_.buffers[size_t(ids[j])];
          if (bj.offset >= bi.offset + bi.bytes) break;
          const size_t gi = find(mem_, size_t(ids[i])), gj = find(mem_, size_t(ids[j]));
          if (gi == gj) continue; // one place by design (a view, or an in-place update)
          // (a pair of groups of one buffer each comes once in this sweep: only larger groups can
          // come again, through another pair of their members)
          const uint64_t key = (uint64_t(std::min(gi, gj)) << 32) | uint64_t(std::max(gi, gj));
          if ((members_[gi].size() > 1 || members_[gj].size() > 1) && !checked.insert(key).second) continue;
          overlapPair(gi, gj, ids[i], ids[j]);
        }
      }
    }
  }
};

// Pipeline stages: every stage's streams played together until each is done or none can go on.
// A stream runs its instructions in program order; an instruction starts when the instructions of
// its `wait` list have finished; the k-th collective over the pipeline axis of every stage finishes
// once every stage has reached its k-th. Sends and recvs, with `rendezvous` false (the CPU
// backend's communicators): a send never blocks, a recv finishes once its send (from its peer
// stage, same tag) has run. With `rendezvous` (NCCL's rules): the stream p2p issues its groups
// (p2pGroups) whole, once every member's wait list has finished; between two stages the k-th send
// issued meets the k-th recv issued (their tags must agree), and a group finishes once every
// member has met its partner. Returns "" when every stream finishes, else the stuck state: each
// stuck stream's next instruction and what it waits for (or the first wrongly paired messages).
std::string pipelineDeadlock(const Program &p, bool rendezvous) {
  const int64_t P = p.pp;
  struct Stage {
    const Program *prog;
    std::vector<std::string> streams;
    std::vector<std::vector<int64_t>> queue;  // per stream: instruction indices in program order
    std::vector<size_t> head;                 // per stream: the next one's position in queue
    std::vector<char> done;                   // per instruction
    std::vector<int64_t> collective;          // per instruction: its ordinal among the axis-2 collectives, or -1
    std::vector<std::vector<int64_t>> groups; // rendezvous: the p2p groups in stream order
    std::vector<int64_t> groupOf;             // rendezvous: per instruction, its group or -1
    std::vector<int64_t> slot;                // rendezvous: per issued send/recv, its place in its pair's queue
    std::vector<char> issued;                 // rendezvous: per group, whether it was issued
  };
  std::vector<Stage> st(static_cast<size_t>(P));
  using Key = std::tuple<int64_t, int64_t, int64_t>; // from, to, tag
  std::map<Key, std::pair<int64_t, int64_t>> sendOf; // -> (stage, instruction)
  std::set<Key> sent;
  size_t nColl = 0;
  for (int64_t s = 0; s < P; ++s) {
    Stage &g = st[size_t(s)];
    g.prog = &p.stageProgram(s);
    g.streams = {"compute"};
    const auto &insts = g.prog->instructions;
    for (const Instruction &ins : insts)
      if (std::find(g.streams.begin(), g.streams.end(), ins.stream) == g.streams.end()) g.streams.push_back(ins.stream);
    g.queue.assign(g.streams.size(), {});
    g.head.assign(g.streams.size(), 0);
    g.done.assign(insts.size(), 0);
    g.collective.assign(insts.size(), -1);
    int64_t k = 0;
    for (size_t i = 0; i < insts.size(); ++i) {
      const Instruction &ins = insts[i];
      g.queue[size_t(std::find(g.streams.begin(), g.streams.end(), ins.stream) - g.streams.begin())].push_back(
          int64_t(i));
      const OpDef *sig = findOp(ins.op);
      const bool coll = sig && (sig->kind == OpKind::AllReduce || sig->kind == OpKind::ReduceScatter ||
                                sig->kind == OpKind::AllGather);
      if (coll && ins.num("axis", 0) == 2) g.collective[i] = k++;
      if (ins.op == "send") sendOf[Key{s, int64_t(ins.num("peer", -1)), int64_t(ins.num("tag", -1))}] = {s, int64_t(i)};
    }
    nColl = std::max(nColl, size_t(k));
    if (rendezvous) {
      g.groups = p2pGroups(*g.prog);

      g.issued.assign(g.groups.size(), 0);
      g.groupOf.assign(insts.size(), -1);
      g.slot.assign(insts.size(), -1);
      for (size_t j = 0; j < g.groups.size(); ++j)
        for (int64_t i : g.groups[j]) g.groupOf[size_t(i)] = int64_t(j);
    }
  }
  // rendezvous: per (from, to) stage pair, the sends and the recvs issued, in order: (stage, instruction).
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> sendsIssued, recvsIssued;
  std::string mispaired;
  int64_t groupsIssued = 0; // (issuing a group is progress, even when none of it finishes yet)
  // rendezvous: the queue instruction `mi` of stage s was (or is) issued into, or its partner's.
  auto queueOf = [&](int64_t s, const Instruction &mi, bool partner) -> std::vector<std::pair<int64_t, int64_t>> & {
    const int64_t peer = int64_t(mi.num("peer", -1));
    const bool snd = mi.op == "send";
    return ((snd != partner) ? sendsIssued : recvsIssued)[snd ? std::pair{s, peer} : std::pair{peer, s}];
  };
  // rendezvous: whether issued instruction m of stage s has met its partner.
  auto partnerIssued = [&](int64_t s, int64_t m) {
    const Stage &g = st[size_t(s)];
    return int64_t(queueOf(s, g.prog->instructions[size_t(m)], true).size()) > g.slot[size_t(m)];
  };
  std::vector<std::vector<char>> arrived(nColl, std::vector<char>(size_t(P), 0));
  std::vector<char> met(nColl, 0);
  auto recvKey = [](int64_t s, const Instruction &ins) {
    return Key{int64_t(ins.num("peer", -1)), s, int64_t(ins.num("tag", -1))};
  };
  // Whether instruction i of stage s can finish now (its wait list done, its message sent, its
  // collective met); marks its arrival at a collective.
  auto ready = [&](int64_t s, int64_t i) {
    Stage &g = st[size_t(s)];
    const Instruction &ins = g.prog->instructions[size_t(i)];
    if (rendezvous && g.groupOf[size_t(i)] >= 0) {
      // Issue the group when its turn has come and every member's wait list has finished.
      const int64_t gi = g.groupOf[size_t(i)];
      if (!g.issued[size_t(gi)]) {
        for (int64_t m : g.groups[size_t(gi)])
          for (int64_t w : g.prog->instructions[size_t(m)].wait)
            if (!g.done[size_t(w)]) return false;
        for (int64_t m : g.groups[size_t(gi)]) {
          const Instruction &mi = g.prog->instructions[size_t(m)];
          const bool snd = mi.op == "send";
          auto &mine = queueOf(s, mi, false);
          g.slot[size_t(m)] = int64_t(mine.size());
          mine.push_back({s, m});
          const auto &other = queueOf(s, mi, true);
          if (other.size() >= mine.size() && mispaired.empty()) {
            const auto [os, oi] = other[mine.size() - 1];
            const int64_t otag = int64_t(st[size_t(os)].prog->instructions[size_t(oi)].num("tag", -1));
            if (otag != int64_t(mi.num("tag", -1)))
              mispaired = "stage " + std::to_string(s) + "'s " + mi.op + " of tag " +
                          std::to_string(int64_t(mi.num("tag", -1))) + " (instruction " + std::to_string(m) +
                          ") would meet stage " + std::to_string(os) + "'s " + (snd ? "recv" : "send") + " of tag " +
                          std::to_string(otag) + " (instruction " + std::to_string(oi) +
                          "): NCCL pairs the messages between two ranks in the order they are issued";
          }
        }
        g.issued[size_t(gi)] = 1;
        ++groupsIssued;
      }
      // Every member of the group finishes together (the group is one launch).
      const auto &members = g.groups[size_t(gi)];
      return std::all_of(members.begin(), members.end(), [&](int64_t m) { return partnerIssued(s, m); });
    }
    for (int64_t w : ins.wait)
      if (!g.done[size_t(w)]) return false;
    if (ins.op == "recv" && !sent.count(recvKey(s, ins))) return false;
    if (const int64_t k = g.collective[size_t(i)]; k >= 0) {
      arrived[size_t(k)][size_t(s)] = 1;
      if (std::all_of(arrived[size_t(k)].begin(), arrived[size_t(k)].end(), [](char c) { return c != 0; }))
        met[size_t(k)] = 1;
      return met[size_t(k)] != 0;
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    const int64_t issuedBefore = groupsIssued;
    for (int64_t s = 0; s < P; ++s) {
      Stage &g = st[size_t(s)];
      for (size_t q = 0; q < g.queue.size(); ++q)
        while (g.head[q] < g.queue[q].size() && ready(s, g.queue[q][g.head[q]])) {
          const int64_t i = g.queue[q][g.head[q]++];
          g.done[size_t(i)] = 1;
          const Instruction &ins = g.prog->instructions[size_t(i)];
          if (ins.op == "send") sent.insert(Key{s, int64_t(ins.num("peer", -1)), int64_t(ins.num("tag", -1))});
          progress = true;
        }
    }
    progress = progress || groupsIssued != issuedBefore;
  }
  if (!mispaired.empty()) return "under NCCL's send and recv: " + mispaired;
  std::string msg;
  int shown = 0;
  auto describe = [](const Program &q, int64_t i) {
    const Instruction &ins = q.instructions[size_t(i)];
    return "instruction " + std::to_string(i) + " (" + ins.op + " on stream " + ins.stream +
           (ins.loc.empty() ? std::string() : " at " + ins.loc) + ")";
  };
  for (int64_t s = 0; s < P; ++s) {
    const Stage &g = st[size_t(s)];
    for (size_t q = 0; q < g.queue.size(); ++q) {
      if (g.head[q] >= g.queue[q].size()) continue;
      if (++shown > 6) {
        msg += "; ...";
        s = P;
        break;
      }
      const int64_t i = g.queue[q][g.head[q]];
      const Instruction &ins = g.prog->instructions[size_t(i)];
      std::string why;
      const bool grouped = rendezvous && g.groupOf[size_t(i)] >= 0;
      for (int64_t m : grouped ? g.groups[size_t(g.groupOf[size_t(i)])] : std::vector<int64_t>{i})
        for (int64_t w : g.prog->instructions[size_t(m)].wait)
          if (why.empty() && !g.done[size_t(w)])
            why = describe(*g.prog, w) + (m == i ? "" : " (for its group's " + describe(*g.prog, m) + ")");
      if (why.empty() && grouped) {
        // Issued: a member whose partner was not issued.
        for (int64_t m : g.groups[size_t(g.groupOf[size_t(i)])]) {
          if (partnerIssued(s, m)) continue;
          const Instruction &mi = g.prog->instructions[size_t(m)];
          const int64_t mp = int64_t(mi.num("peer", -1));
          const bool ms = mi.op == "send";
          why = "stage " + std::to_string(mp) + " to issue its " + (ms ? "recv" : "send") + " of tag " +
                std::to_string(int64_t(mi.num("tag", -1))) +
                " (NCCL: " + (ms ? "a send waits for its recv" : "a recv waits for its send") + ")";
          break;
        }
      }
      if (why.empty() && ins.op == "recv") {
        const Key k = recvKey(s, ins);
        const auto &[from, to, tag] = k;
        (void)to;
        auto it = sendOf.find(k);
        why = "stage " + std::to_string(from) + "'s send of tag " + std::to_string(tag) +
              (it == sendOf.end() ? std::string()
                                  : " (its " + describe(p.stageProgram(from), it->second.second) + ", never run)");
      }
      if (why.empty() && g.collective[size_t(i)] >= 0) {
        const int64_t k = g.collective[size_t(i)];
        std::string missing;
        for (int64_t t = 0; t < P; ++t)
          if (!arrived[size_t(k)][size_t(t)]) missing += (missing.empty() ? "" : ", ") + std::to_string(t);
        why = "the other stages' collective " + std::to_string(k) + " over the pipeline axis (stage(s) " + missing +
              " never reach it)";
      }
      msg += std::string(msg.empty() ? "" : "; ") + "stage " + std::to_string(s) + " stream " + g.streams[q] +
             " is stuck at " + describe(*g.prog, i) + ", waiting for " + why;
    }
  }
  return msg.empty() ? msg
                     : std::string(rendezvous ? "under NCCL's send and recv (each waits for its partner; the p2p "
                                                "stream issues its groups whole), "
                                              : "") +
                           "the pipeline deadlocks: " + msg;
}

} // namespace

std::vector<std::string> verifyPlan(const Program &p, size_t limit) {
  if (p.pp <= 1 || p.stages.empty()) return Verifier(p, limit).run();
  // Pipeline stages: each stage's plan, then the stages together.
  std::vector<std::string> out;
  for (int64_t s = 0; s < p.pp && out.size() < limit; ++s)
    for (const std::string &issue : Verifier(p.stageProgram(s), limit - out.size(), s == p.pp - 1).run())
      out.push_back("stage " + std::to_string(s) + ": " + issue);
  if (out.size() < limit)
    if (std::string d = pipelineDeadlock(p, false); !d.empty()) out.push_back(d);
  return out;
}

std::string ncclPipelineProblem(const Program &p) {
  if (p.pp <= 1 || p.stages.empty()) return "";
  return pipelineDeadlock(p, true);
}

void verifyProgram(const Program &p, const std::string &path, bool validated) {
  if (!validated) validateProgram(p, path);
  std::vector<std::string> issues = verifyPlan(p, 5);
  std::string what = "the plan";
  if (issues.empty() && hasEvaluationPlan(p)) {
    // The evaluation's own plan (bigc eval): its program on its own, valid and safe.
    const Program view = evaluationProgram(p);
    validateProgram(view, path + " (the evaluation program of eval.plan)");
    issues = verifyPlan(view, 5);
    what = "the evaluation's plan (eval.plan)";
  }
  if (issues.empty()) return;
  std::string msg = path + ": " + what + " is unsafe: " + issues[0];
  for (size_t i = 1; i < issues.size(); ++i) msg += "\n  and: " + issues[i];
  if (issues.size() >= 5) msg += "\n  (further problems not listed)";
  throw UserError(msg + "\n  (`bigc verify` lists them; a program bigc compile wrote never has these: was it edited?)");
}

} // namespace bigc::format
