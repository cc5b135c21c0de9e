// The plan verifier (`bigc verify`; also run at the end of `bigc compile` and by the runtime's
// loader unless --no-verify). validateProgram checks each buffer and instruction on its own
// (bounds, sizes, dtypes, shapes, operand counts, waits naming earlier instructions of other
// streams); verifyPlan proves what needs the whole step:
//
//  1. order: instructions of one stream run in program order; an instruction's `wait` list orders
//     the instructions it names before it; nothing else orders two streams. "a happens before b"
//     is the transitive closure (computed with one vector clock per instruction).
//  2. every read of a buffer that is not persistent (param, master, optimizer) or a step input
//     is preceded, in that order, by a write of it;
//  3. two accesses of one buffer on different streams, at least one a write, are ordered;
//  4. two buffers whose bytes overlap in an arena are never live at once: every access of one
//     happens before every access of the other (the exact in-place aliasing that the format allows
//     inside one instruction excepted); persistent buffers overlap nothing; the step's inputs are
//     written before the first instruction and the loss (and fp16's found_inf) read after the last.
//
// A program of pipeline stages (pp > 1): each stage's plan is verified as above (a stage other than
// the last has no loss the runtime reads), and then the stages together cannot deadlock: every
// stage's streams are played (each stream in program order; an instruction starts once its `wait`
// list has finished; a send never blocks; a recv finishes after its send, from its peer stage with
// its tag, has run; the k-th collective over the pipeline axis of every stage finishes once every
// stage has reached its k-th) until all finish, else the stuck state is reported: each stuck
// stream (stage, stream, instruction) and what it waits for.
//
// A pipelined program on NCCL (ncclPipelineProblem; the CUDA backend's ranks on several GPUs check
// it before running): a send waits for its recv there, and NCCL pairs the messages of two ranks in
// the order they are issued. The stages are played again with each stage's p2p groups
// (p2p_groups.h) issued whole, in stream order, once every member's wait list has finished; the
// k-th send issued from stage a to stage b meets the k-th recv issued on b from a, and must carry
// the same tag; a group finishes once each member has met its partner. The collectives over the
// pipeline axis are played as before, apart from the messages (they run on a communicator of their
// own), and so are the other streams. The 1F1B, GPipe and
// zero-bubble orders bigc-pipeline writes hold; the interleaved one does not (its stages send to
// each other at once: stage 0's last chunk's gradient to stage P-1 while P-1 sends its first
// chunk's activations to stage 0), and runs on the CPU backend or one GPU's virtual ranks.
//
// Each problem is one line naming the buffers, instructions (index, op, stream, source location)
// and what orders are missing. No MLIR here.
#pragma once

#include <string>
#include <vector>

#include "bigc/Format/program.h"

namespace bigc::format {

// "a happens before b" over a program's instructions (1. above): one vector clock per
// instruction. kStart: the runtime writing the step's inputs, before every instruction; n (the
// number of instructions): its reads after the last.
class HappensBefore {
public:
  static constexpr int64_t kStart = -1;
  HappensBefore() = default;
  explicit HappensBefore(const Program &p);
  bool operator()(int64_t a, int64_t b) const; // a happens before b (a != b)
  int streamOf(int64_t i) const { return sid_[size_t(i)]; }
  int positionOf(int64_t i) const { return pos_[size_t(i)]; }
  // The position on `stream` of the last instruction of that stream ordered before or at b (-1:
  // none).
  int latestOn(int64_t b, int stream) const;
  const std::vector<std::string> &streams() const { return streams_; }

private:
  int64_t n_ = 0;
  std::vector<int> sid_, pos_;          // stream id and position in it, per instruction
  std::vector<std::vector<int>> clock_; // per instruction: per stream, the last position ordered before or at it
  std::vector<std::string> streams_;
};

// Every problem found, at most `limit` (empty: the plan is proven free of these hazards). The
// program must have passed validateProgram.
std::vector<std::string> verifyPlan(const Program &p, size_t limit = 20);

// "" when the pipelined program `p` runs under NCCL's send and recv (or is not pipelined), else
// why not: the stuck state or the first wrongly paired messages. `p` must have passed verifyPlan.
std::string ncclPipelineProblem(const Program &p);

// validateProgram (skipped when `validated`: loadProgram has done it), then verifyPlan; throws
// UserError("<path>: the plan is unsafe: ...") listing the first problems.
void verifyProgram(const Program &p, const std::string &path, bool validated = false);

} // namespace bigc::format
