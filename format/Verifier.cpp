// The plan verifier: see include/bigc/Format/verifier.h for what it proves.
#include "bigc/Format/verifier.h"
#include "bigc/Format/ops.h"
#include "bigc/Format/validator.h"

#include <algorithm>
#include <map>
#include <set>

namespace bigc::rt {

namespace {

constexpr int64_t kStart = -1; // the runtime writes the step's inputs before the first instruction

struct Access {
  int64_t ins; // instruction index, kStart, or n (the runtime's reads after the last)
  bool write;
};

class Verifier {
public:
  Verifier(const Program &p, size_t limit) : p_(p), n_(int64_t(p.instructions.size())), limit_(limit) {}

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
  std::vector<std::string> issues_;
  std::vector<int> sid_, pos_;           // stream id and position in it, per instruction
  std::vector<std::vector<int>> clock_;  // per instruction: per stream, the last position ordered before or at it
  std::vector<std::vector<Access>> acc_; // per buffer
  std::vector<std::string> streams_;
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

  void order() {
    std::map<std::string, int> ids;
    std::vector<int> last; // per stream: the last instruction seen
    sid_.resize(size_t(n_)), pos_.resize(size_t(n_)), clock_.resize(size_t(n_));
    std::vector<int> count;
    for (int64_t i = 0; i < n_; ++i) {
      const Instruction &ins = p_.instructions[size_t(i)];
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
      std::vector<int> c =
          last[size_t(s)] >= 0 ? clock_[size_t(last[size_t(s)])] : std::vector<int>(streams_.size(), -1);
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

  // a happens before b (a != b).
  bool hb(int64_t a, int64_t b) const {
    if (a == b) return false;
    if (a == kStart) return true;
    if (b == kStart) return false;
    if (b == n_) return true;
    if (a == n_) return false;
    const std::vector<int> &cb = clock_[size_t(b)];
    const size_t sa = size_t(sid_[size_t(a)]);
    return sa < cb.size() && cb[sa] >= pos_[size_t(a)];
  }

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
  bool readAtEnd(int64_t id) const { return id == p_.loss || id == p_.foundInf || id == p_.lossScale; }

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
      const OpSignature *sig = findOpSignature(ins.op);
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
      bool reported = false;
      for (size_t x = 0; x < ga.size() && !reported; ++x)
        for (size_t y = x + 1; y < ga.size() && !reported; ++y) {
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

  // Two memory groups whose bytes overlap: every access of one happens before every access of
  // the other.
  void overlapPair(size_t gx, size_t gy, int64_t x, int64_t y) {
    const Buffer &bx = p_.buffers[size_t(x)], &by = p_.buffers[size_t(y)];
    const int64_t lo = std::max(bx.offset, by.offset), hi = std::min(bx.offset + bx.bytes, by.offset + by.bytes);
    const std::string shared =
        "share bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of the '" + bx.space + "' arena";
    for (int64_t id : {x, y})
      if (p_.buffers[size_t(id)].persistent()) {
        add(name(x) + " and " + name(y) + " " + shared + ", but " + name(id) + " is persistent (live across steps)");
        return;
      }
    const auto ax = groupAccesses(gx), ay = groupAccesses(gy);
    bool xFirst = true, yFirst = true;
    const std::pair<Access, int64_t> *ua = nullptr, *ub = nullptr;
    for (const auto &a : ax)
      for (const auto &b : ay) {
        const bool ab = hb(a.first.ins, b.first.ins), ba = hb(b.first.ins, a.first.ins);
        if (!ab && !ba && a.first.ins == b.first.ins) {
          add(name(a.second) + " and " + name(b.second) + " " + shared + ", and " + where(a.first.ins) +
              (a.first.write ? " writes" : " reads") + " the first and " + (b.first.write ? "writes" : "reads") +
              " the second (an output may share an input's memory only as an exact in-place update)");
          return;
        }
        if (!ab && !ba) {
          add(name(a.second) + " and " + name(b.second) + " " + shared + ", but " + where(a.first.ins) +
              (a.first.write ? " writes" : " reads") + " the first and " + where(b.first.ins) +
              (b.first.write ? " writes" : " reads") + " the second with nothing ordering them");
          return;
        }
        if (!ab) xFirst = false, ua = &a, ub = &b;
        if (!ba) yFirst = false;
      }
    if (xFirst || yFirst) return;
    // Ordered pairwise but interleaved: one buffer's memory is used while the other is live.
    add(name(ua->second) + " and " + name(ub->second) + " " + shared + " while both are live: " + where(ub->first.ins) +
        (ub->first.write ? " writes" : " reads") + " the second before " + where(ua->first.ins) +
        (ua->first.write ? " writes" : " reads") + " the first, which is also used before that");
  }

  void overlaps() {
    std::map<std::string, std::vector<int64_t>> bySpace;
    for (const Buffer &b : p_.buffers)
      if (b.bytes > 0) bySpace[b.space].push_back(b.id);
    std::set<uint64_t> checked; // group pairs
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
          const uint64_t key = (uint64_t(std::min(gi, gj)) << 32) | uint64_t(std::max(gi, gj));
          if (!checked.insert(key).second) continue;
          overlapPair(gi, gj, ids[i], ids[j]);
        }
      }
    }
  }
};

} // namespace

std::vector<std::string> verifyPlan(const Program &p, size_t limit) { return Verifier(p, limit).run(); }

void verifyProgram(const Program &p, const std::string &path, bool validated) {
  if (!validated) validateProgram(p, path);
  std::vector<std::string> issues = verifyPlan(p, 5);
  if (issues.empty()) return;
  std::string msg = path + ": the plan is unsafe: " + issues[0];
  for (size_t i = 1; i < issues.size(); ++i) msg += "\n  and: " + issues[i];
  if (issues.size() >= 5) msg += "\n  (further problems not listed)";
  throw UserError(msg + "\n  (`bigc verify` lists them; a program bigc compile wrote never has these: was it edited?)");
}

} // namespace bigc::rt
