// The point-to-point groups of a pipeline stage's program: how a backend whose send waits for its
// receiver (NCCL's ncclSend/ncclRecv) issues the stage's sends and recvs without deadlock.
//
// Issued one by one in program order, such sends deadlock under 1F1B: stage 0 sends micro-batch
// 1's activations while stage 1 sends micro-batch 0's gradient, and each waits for the other's
// recv. As Megatron pairs "send forward, receive backward" in one batch, the stream p2p's
// instructions are cut into groups, each issued at once (ncclGroupStart ... ncclGroupEnd): a
// group is a run of consecutive p2p instructions that grows while the next one
//   - does not depend on a member (no member happens before it through the wait lists and the
//     other streams' order: it may be issued with them), and
//   - touches no bytes a member touches where either writes (members run concurrently).
// Inside a group the members are issued in program order. Between two stages NCCL pairs the k-th
// send with the k-th recv: the compiler emits the messages of a sender -> receiver pair in the same
// order on both (bigc-pipeline). The plan verifier plays the stages with these groups under
// NCCL's rules (a group finishes once each member's partner has been issued) and refuses a
// program that would deadlock or pair the wrong messages. No MLIR here.
#pragma once

#include <cstdint>
#include <vector>

#include "bigc/Format/program.h"

namespace bigc::format {

// The groups of one stage's program, in stream order; each group's instruction indices in program
// (issue) order. Every send and recv of the program is in exactly one group.
std::vector<std::vector<int64_t>> p2pGroups(const Program &stage);

} // namespace bigc::format
