// Pipeline parallelism: the program file of several stages (reading, writing, validation, the
// cross-stage deadlock check), point-to-point messages, and the ranks of a pipeline on the CPU
// backend (docs/program-format.md, "Pipeline stages").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "bigc/Runtime/checkpoint.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/rank_group.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Runtime/safetensors.h"
#include "bigc/Runtime/verifier.h"
#include "bigc/Format/p2p_groups.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using bigc::rt::testing::num;
using bigc::rt::testing::parseError;
using bigc::rt::testing::PipeTiny;
using bigc::rt::testing::validateError;
using json = nlohmann::json;

namespace {

#define EXPECT_ERROR_HAS(msg, ...)                                                                                     \
  do {                                                                                                                 \
    std::string m_ = (msg);                                                                                            \
    EXPECT_FALSE(m_.empty()) << "expected an error";                                                                   \
    for (const std::string &k_ : std::vector<std::string>{__VA_ARGS__})                                                \
      EXPECT_NE(m_.find(k_), std::string::npos) << "'" << k_ << "' not in: " << m_;                                    \
  } while (0)

// The index of the first instruction of `p` with op `op`.
size_t indexOf(const Program &p, const std::string &op) {
  for (size_t i = 0; i < p.instructions.size(); ++i)
    if (p.instructions[i].op == op) return i;
  ADD_FAILURE() << "no " << op;
  return 0;
}

} // namespace

// ----- the file

TEST(Pipeline, SerializeParseRoundTrip) {
  Program p = PipeTiny::build(2, 2, 0.01, 1.0);
  p.ppSchedule = "1f1b", p.stages[0].ppSchedule = "1f1b";
  const std::string bytes = serializeProgram(p);
  // One container line over the whole payload: stage 0's fields, "pipeline" and "stages".
  ASSERT_EQ(bytes.rfind("BIGC-PROGRAM 3 ", 0), 0u);
  const json j = json::parse(bigc::rt::testing::payloadOf(bytes));
  EXPECT_EQ(j["pipeline"]["stages"], 2);
  EXPECT_EQ(j["pipeline"]["stage"], 0);
  EXPECT_EQ(j["pipeline"]["schedule"], "1f1b");
  EXPECT_EQ(j["pipeline"]["virtual_stages"], 1);
  EXPECT_EQ(j["pipeline"]["micro_batches"], 1);
  ASSERT_EQ(j["stages"].size(), 1u);
  EXPECT_EQ(j["stages"][0]["pipeline"]["stage"], 1);
  EXPECT_EQ(j["stages"][0]["config"]["mesh"]["pp"], 2);
  EXPECT_FALSE(j["stages"][0].contains("stages"));

  Program q = parseProgram(bytes, "m.bigc");
  EXPECT_EQ(q.pp, 2);
  EXPECT_EQ(q.dp, 2);
  EXPECT_EQ(q.ranks, 4);
  EXPECT_EQ(q.stage, 0);
  EXPECT_EQ(q.ppSchedule, "1f1b");
  EXPECT_EQ(q.virtualStages, 1);
  ASSERT_EQ(q.stages.size(), 1u);
  for (int64_t s = 0; s < 2; ++s) {
    const Program &a = p.stageProgram(s), &b = q.stageProgram(s);
    EXPECT_EQ(b.stage, s);
    ASSERT_EQ(b.buffers.size(), a.buffers.size()) << "stage " << s;
    for (size_t i = 0; i < a.buffers.size(); ++i) {
      EXPECT_EQ(b.buffers[i].name, a.buffers[i].name);
      EXPECT_EQ(b.buffers[i].offset, a.buffers[i].offset);
      EXPECT_EQ(b.buffers[i].shape, a.buffers[i].shape);
      EXPECT_EQ(b.buffers[i].role, a.buffers[i].role);
    }
    ASSERT_EQ(b.instructions.size(), a.instructions.size()) << "stage " << s;
    for (size_t i = 0; i < a.instructions.size(); ++i) {
      EXPECT_EQ(b.instructions[i].op, a.instructions[i].op);
      EXPECT_EQ(b.instructions[i].stream, a.instructions[i].stream);
      EXPECT_EQ(b.instructions[i].wait, a.instructions[i].wait);
      EXPECT_EQ(b.instructions[i].num("peer", -1), a.instructions[i].num("peer", -1));
      EXPECT_EQ(b.instructions[i].num("tag", -1), a.instructions[i].num("tag", -1));
    }
    EXPECT_EQ(b.spaces[0].arenaBytes, a.spaces[0].arenaBytes);
  }
  EXPECT_EQ(q.stages[0].instructions[0].op, "recv");
  // Serializing again gives the same bytes; the checksum covers the stages.
  EXPECT_EQ(serializeProgram(q), bytes);
  std::string corrupt = bytes;
  const size_t at = corrupt.rfind("\"recv\"");
  ASSERT_NE(at, std::string::npos);
  corrupt[at + 1] = 'R';
  EXPECT_ERROR_HAS(parseError(corrupt), "checksum mismatch");
}

TEST(Pipeline, OneStageFilesReadAsBefore) {
  // A program without "pipeline" is one stage, written byte for byte as before (no new keys).
  Program p = PipeTiny::build(1);
  const std::string bytes = serializeProgram(p);
  const json j = json::parse(bigc::rt::testing::payloadOf(bytes));
  EXPECT_FALSE(j.contains("pipeline"));
  EXPECT_FALSE(j.contains("stages"));
  Program q = parseProgram(bytes, "m.bigc");
  EXPECT_EQ(q.pp, 1);
  EXPECT_EQ(q.stage, 0);
  EXPECT_TRUE(q.stages.empty());
  EXPECT_TRUE(q.ppSchedule.empty());
  EXPECT_EQ(&q.stageProgram(0), &q);
}

TEST(Pipeline, FileErrors) {
  const std::string good = bigc::rt::testing::payloadOf(serializeProgram(PipeTiny::build(2)));
  auto edited = [&](const std::function<void(json &)> &edit) {
    json j = json::parse(good);
    edit(j);
    return parseError(bigc::rt::testing::wrapPayload(j.dump(), 3));
  };
  EXPECT_EQ(edited([](json &) {}), "");
  EXPECT_ERROR_HAS(edited([](json &j) { j["pipeline"]["stages"] = 3; }),
                   "m.bigc: pipeline: stages is 3, config.mesh.pp is 2");
  EXPECT_ERROR_HAS(edited([](json &j) { j["pipeline"]["micro_batches"] = 4; }),
                   "pipeline: micro_batches is 4, config.micro_batches is 1");
  EXPECT_ERROR_HAS(edited([](json &j) { j["pipeline"].erase("schedule"); }), "pipeline: field 'schedule' is missing");
  EXPECT_ERROR_HAS(edited([](json &j) { j.erase("stages"); }), "'stages' must hold the 1 payload(s) of stages 1..1",
                   "it holds 0");
  EXPECT_ERROR_HAS(edited([](json &j) { j["stages"][0]["stages"] = json::array({j["stages"][0]}); }),
                   "m.bigc: stage 1: payload: field 'stages' belongs to stage 0's payload only");
  EXPECT_ERROR_HAS(edited([](json &j) { j["stages"][0]["buffers"][2]["dtype"] = "f64"; }),
                   "m.bigc: stage 1: buffer 2 ('targets'): unknown dtype 'f64'");
  EXPECT_ERROR_HAS(edited([](json &j) { j["stages"][0]["pipeline"]["stage"] = 0; }),
                   "m.bigc: stage 1: pipeline: stages[0] must be stage 1, says stage 0");
  EXPECT_ERROR_HAS(edited([](json &j) { j.erase("pipeline"); }), "field 'stages' needs the field 'pipeline'");
  EXPECT_ERROR_HAS(edited([](json &j) { j["pipeline"]["schedule"] = "round-robin"; }),
                   "pipeline: unknown schedule 'round-robin' (gpipe, 1f1b, interleaved or zero-bubble)");
}

// ----- validation

TEST(Pipeline, ValidPrograms) {
  for (int64_t dp : {1, 2})
    for (double clip : {0.0, 1.0}) {
      EXPECT_EQ(validateError(PipeTiny::build(2, dp, 0.05, clip)), "") << "dp " << dp << " clip " << clip;
      EXPECT_EQ(validateError(PipeTiny::build(1, dp, 0.05, clip)), "") << "dp " << dp << " clip " << clip;
      EXPECT_TRUE(verifyPlan(PipeTiny::build(2, dp, 0.05, clip)).empty());
      EXPECT_TRUE(verifyPlan(PipeTiny::build(1, dp, 0.05, clip)).empty());
    }
}

TEST(Pipeline, StageErrors) {
  auto two = [] { return PipeTiny::build(2); };
  {
    Program p = two();
    p.stages.clear();
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: pipeline: config.mesh.pp is 2, so 'stages' must hold the 1 payload(s)");
  }
  {
    Program p = PipeTiny::build(1);
    p.stages.push_back(PipeTiny::build(1));
    EXPECT_ERROR_HAS(validateError(p), "pipeline: 'stages' holds 1 payload(s), but config.mesh.pp is 1");
  }
  {
    Program p = two();
    p.stages[0].stage = 0;
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: pipeline: stages[0] must be stage 1, says stage 0");
  }
  {
    Program p = two();
    p.stages[0].virtualStages = 2;
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: pipeline: schedule 'gpipe' with virtual_stages 2 differs");
  }
  // The stages share the config.
  {
    Program p = two();
    p.stages[0].batch = 4;
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: config: batch 4 differs from stage 0's 2");
  }
  {
    Program p = two();
    p.stages[0].microBatches = 2;
    EXPECT_ERROR_HAS(validateError(p), "stage 1: config: micro_batches 2 differs from stage 0's 1");
  }
  {
    Program p = two();
    p.stages[0].dp = 2, p.stages[0].ranks = 4;
    EXPECT_ERROR_HAS(validateError(p), "stage 1: config: ranks 4 differs from stage 0's 2");
  }
  {
    Program p = two();
    p.stages[0].precision = "bf16";
    EXPECT_ERROR_HAS(validateError(p), "stage 1: config: precision bf16 differs from stage 0's fp32");
  }
  {
    Program p = two();
    p.stages[0].optimizer.lr = 0.5;
    EXPECT_ERROR_HAS(validateError(p), "stage 1: config: optimizer adamw (lr 0.5,",
                     "differs from stage 0's adamw (lr 0.0003,");
  }
  // Each stage is a program: its errors name the stage.
  {
    Program p = two();
    p.stages[0].instructions[1].in[1] = 99;
    EXPECT_ERROR_HAS(validateError(p),
                     "m.bigc: stage 1: instruction 1 (matmul at test.mlir:2:3): input 1: buffer id 99");
  }
  {
    Program p = two();
    p.instructions[0].in[1] = 1; // the embedding's ids: a weight
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 0: instruction 0 (embedding", "must be i32");
  }
  {
    Program p = two();
    p.stages[0].buffers[0].name = "emb.weight"; // stage 0's
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: buffer 0 ('emb.weight'): the name 'emb.weight' is used by a "
                                       "persistent buffer of stage 0 too");
  }
  {
    Program p = two();
    p.ranks = 3, p.stages[0].ranks = 3;
    EXPECT_ERROR_HAS(validateError(p), "stage 0: config: the mesh dp 1 x tp 1 x pp 2 must multiply to ranks 3");
  }
}

TEST(Pipeline, SendRecvErrors) {
  auto two = [] { return PipeTiny::build(2); };
  const size_t send0 = indexOf(two(), "send"), recv0 = indexOf(two(), "recv");
  const size_t send1 = indexOf(two().stages[0], "send");
  {
    Program p = two();
    p.instructions[send0].stream = "compute";
    p.instructions[send0].wait.clear();
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 0: instruction " + std::to_string(send0) +
                                           " (send at test.mlir:" + std::to_string(send0 + 1) +
                                           ":3): send runs on the p2p stream, not 'compute'");
  }
  {
    Program p = two();
    p.instructions[4].stream = "p2p"; // a reshape
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction 4 (reshape", "only send and recv run on the p2p stream");
  }
  {
    Program p = two();
    p.stages[0].instructions[0].attrs.erase("peer");
    EXPECT_ERROR_HAS(validateError(p), "stage 1: instruction 0 (recv", "attribute 'peer' (an integer) is required");
  }
  {
    Program p = two();
    p.stages[0].instructions[send1].attrs["peer"] = num(1);
    EXPECT_ERROR_HAS(validateError(p), "stage 1: instruction " + std::to_string(send1) + " (send",
                     "attribute 'peer' 1 must be another stage in [0, 2) (this is stage 1)");
  }
  {
    Program p = two();
    p.instructions[recv0].attrs["peer"] = num(2);
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction " + std::to_string(recv0) + " (recv",
                     "attribute 'peer' 2 must be another stage in [0, 2)");
  }
  {
    Program p = two();
    p.instructions[send0].attrs["tag"] = num(-1);
    EXPECT_ERROR_HAS(validateError(p), "attribute 'tag' -1 must be >= 0");
  }
  {
    Program p = two();
    p.instructions[send0].attrs["tag"] = num(0.5);
    EXPECT_ERROR_HAS(validateError(p), "attribute 'tag' (an integer) is required");
  }
  {
    // A send without its recv: stage 0 sends tag 7, stage 1 receives tag 0.
    Program p = two();
    p.instructions[send0].attrs["tag"] = num(7);
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 0: instruction " + std::to_string(send0) + " (send",
                     "sends tag 7 to stage 1, which has no recv from stage 0 with that tag");
  }
  {
    // A recv without its send (into stage 0's loss, a scalar it does not otherwise use).
    Program p = two();
    Instruction r;
    r.op = "recv", r.out = {p.loss}, r.stream = "p2p", r.attrs = {{"peer", num(1)}, {"tag", num(9)}};
    p.instructions.push_back(r);
    p.buffers[size_t(p.loss)].liveLast = int64_t(p.instructions.size()) - 1;
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 0: instruction " + std::to_string(p.instructions.size() - 1) +
                                           " (recv): receives tag 9 from stage 1, which has no send to stage 0 with "
                                           "that tag");
  }
  {
    // Two sends with one tag to one stage.
    Program p = two();
    p.instructions[send0].attrs["tag"] = num(1);
    Instruction extra = p.instructions[send0];
    p.instructions.push_back(extra);
    for (Buffer &b : p.buffers)
      if (b.name == "h") b.liveLast = int64_t(p.instructions.size()) - 1;
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction " + std::to_string(p.instructions.size() - 1) + " (send",
                     "tag 1 to stage 1 is used by instruction " + std::to_string(send0) + " too");
  }
  {
    // A recv of another dtype than its send.
    Program p = two();
    for (Buffer &b : p.stages[0].buffers)
      if (b.name == "h" || b.name == "h2") b.dtype = DType::BF16, b.bytes /= 2;
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: instruction 0 (recv",
                     "receives bf16 [2,4,4] (64 bytes) with tag 0 from stage 0, whose instruction " +
                         std::to_string(send0) + " (send at test.mlir:3:3) sends f32 [2,4,4] (128 bytes)");
  }
  {
    // A program of one stage has no send.
    Program p = PipeTiny::build(1);
    Instruction s;
    s.op = "send", s.in = {p.instructions[0].out[0]}, s.stream = "p2p";
    s.attrs = {{"peer", num(1)}, {"tag", num(0)}};
    p.instructions.insert(p.instructions.begin() + 1, s);
    EXPECT_ERROR_HAS(validateError(p), "instruction 1 (send): send moves a value between pipeline stages; this "
                                       "program has pp 1");
  }
}

TEST(Pipeline, PipelineAxisCollectives) {
  {
    // Axis 2 only with pp > 1.
    Program p = PipeTiny::build(1, 2);
    const size_t ar = indexOf(p, "all_reduce");
    p.instructions[ar].attrs["axis"] = num(2);
    EXPECT_ERROR_HAS(validateError(p), "instruction " + std::to_string(ar) + " (all_reduce",
                     "attribute 'axis' 2 (pp) names the pipeline axis, but this program has pp 1");
  }
  {
    Program p = PipeTiny::build(2, 1, 0.05, 1.0);
    const size_t ar = indexOf(p, "all_reduce");
    p.instructions[ar].attrs["axis"] = num(3);
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction " + std::to_string(ar) + " (all_reduce",
                     "attribute 'axis' must be 0 (dp), 1 (tp) or 2 (pp)");
  }
  {
    // On stream comm, like the data-parallel ones.
    Program p = PipeTiny::build(2, 1, 0.05, 1.0);
    const size_t ar = indexOf(p, "all_reduce");
    p.instructions[ar].stream = "comm_tp";
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction " + std::to_string(ar) + " (all_reduce",
                     "the comm_tp stream runs collectives over the tensor axis (axis 1) only");
  }
  {
    // comm_cp runs the context axis's ring shifts and all-to-alls, nothing else.
    Program p = PipeTiny::build(2, 1, 0.05, 1.0);
    const size_t ar = indexOf(p, "all_reduce");
    p.instructions[ar].stream = "comm_cp";
    EXPECT_ERROR_HAS(validateError(p), "stage 0: instruction " + std::to_string(ar) + " (all_reduce",
                     "the comm_cp stream runs the context axis's ring shifts and all-to-alls only");
  }
  {
    // Every stage runs the same ones in the same order.
    Program p = PipeTiny::build(2, 1, 0.05, 1.0);
    const size_t ar = indexOf(p.stages[0], "all_reduce");
    p.stages[0].instructions[ar].attrs["reduce"] = num(2);
    EXPECT_ERROR_HAS(validateError(p), "m.bigc: stage 1: instruction " + std::to_string(ar) + " (all_reduce)",
                     "collective 0 over the pipeline axis (axis 2) differs from stage 0's");
  }
  {
    Program p = PipeTiny::build(2, 1, 0.05, 1.0);
    const size_t ar = indexOf(p.stages[0], "all_reduce");
    p.stages[0].instructions[ar].attrs["axis"] = num(0); // now over dp (of size 1)
    EXPECT_ERROR_HAS(validateError(p),
                     "m.bigc: stage 1: 0 collective(s) over the pipeline axis (axis 2), stage 0 has 1");
  }
}

// ----- the deadlock check

TEST(Pipeline, VerifierFindsADeadlock) {
  // Stage 0 receives dh before it sends h; stage 1 receives h before it sends dh: both wait.
  Program p = PipeTiny::build(2, 1, 0.05, 0.0, /*recvFirst=*/true);
  EXPECT_EQ(validateError(p), ""); // each stage is fine on its own
  std::vector<std::string> issues = verifyPlan(p);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_ERROR_HAS(issues[0], "the pipeline deadlocks: ",
                   "stage 0 stream p2p is stuck at instruction 2 (recv on stream p2p at test.mlir:3:3), waiting for "
                   "stage 1's send of tag 1 (its instruction 9 (send on stream p2p at test.mlir:10:3), never run)",
                   "stage 0 stream compute is stuck at instruction 5 (reshape on stream compute at test.mlir:6:3), "
                   "waiting for instruction 2 (recv on stream p2p",
                   "stage 1 stream compute is stuck at instruction 1 (matmul on stream compute at test.mlir:2:3), "
                   "waiting for instruction 0 (recv on stream p2p",
                   "stage 1 stream p2p is stuck at instruction 0 (recv on stream p2p at test.mlir:1:3), waiting for "
                   "stage 0's send of tag 0 (its instruction 3 (send on stream p2p at test.mlir:4:3), never run)");
  EXPECT_ERROR_HAS(
      [&] {
        try {
          verifyProgram(p, "m.bigc");
        } catch (const UserError &e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "m.bigc: the plan is unsafe: the pipeline deadlocks");
}

// NCCL's rules (a send waits for its recv; the p2p stream issues its groups whole): stage 0's send
// of h and its recv of dh are one group (the recv depends on nothing the send does), stage 1's recv
// of h and send of dh are two (the send's dh is computed from h); the groups meet in order.
TEST(Pipeline, NcclRules) {
  Program p = PipeTiny::build(2);
  EXPECT_EQ(p2pGroups(p.stageProgram(0)), (std::vector<std::vector<int64_t>>{{2, 3}}));
  EXPECT_EQ(p2pGroups(p.stageProgram(1)), (std::vector<std::vector<int64_t>>{{0}, {9}}));
  EXPECT_EQ(ncclPipelineProblem(p), "");
  // A recv whose bytes overlap a member's is issued after it, in a group of its own: here dh placed
  // over h (h is dead once sent), so the recv must not run beside the send.
  Program q = PipeTiny::build(2);
  Program &s0 = q.stageProgram(0);
  const int64_t h = s0.instructions[2].in[0], dh = s0.instructions[3].out[0];
  s0.buffers[size_t(dh)].offset = s0.buffers[size_t(h)].offset;
  EXPECT_EQ(p2pGroups(s0), (std::vector<std::vector<int64_t>>{{2}, {3}}));
  EXPECT_EQ(verifyPlan(q), std::vector<std::string>{}); // (the stream orders the two)
  EXPECT_EQ(ncclPipelineProblem(q), "");
  // No pipeline: nothing to prove.
  EXPECT_EQ(ncclPipelineProblem(PipeTiny::build(1)), "");
}

TEST(Pipeline, VerifierMatchesPipelineCollectivesInOrder) {
  // Stage 1 sends dh only after its collective over the pipeline axis, which stage 0 reaches only
  // after receiving dh: a deadlock through the collective.
  Program p = PipeTiny::build(2, 1, 0.05, 1.0);
  Program &s1 = p.stages[0];
  const int64_t send = int64_t(indexOf(s1, "send")), ar = int64_t(indexOf(s1, "all_reduce"));
  ASSERT_LT(send, ar);
  Instruction moved = s1.instructions[size_t(send)];
  s1.instructions.erase(s1.instructions.begin() + send);
  for (Instruction &ins : s1.instructions) // the instructions after the send moved up by one
    for (int64_t &w : ins.wait)
      if (w > send) --w;
  moved.wait = {ar - 1};                                       // after the all_reduce
  s1.instructions.insert(s1.instructions.begin() + ar, moved); // right after it
  for (Instruction &ins : s1.instructions)
    for (int64_t &w : ins.wait)
      if (w >= ar && &ins != &s1.instructions[size_t(ar)]) ++w;
  for (Buffer &b : s1.buffers) b.liveFirst = 0, b.liveLast = int64_t(s1.instructions.size()) - 1;
  ASSERT_EQ(validateError(p), "") << "the edited stage must stay valid";
  std::vector<std::string> issues = verifyPlan(p);
  ASSERT_FALSE(issues.empty());
  EXPECT_ERROR_HAS(issues.back(), "the pipeline deadlocks",
                   "waiting for the other stages' collective 0 over the pipeline axis (stage(s) 0 never reach it)");
}

// ----- the ranks of a pipeline on the CPU backend

namespace {

// Losses of `steps` steps on `e` (global batches of `dp` slices), then every persistent buffer by
// name as f32.
struct Trained {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> state;
};
Trained train(Engine &e, int64_t dp, int steps, int firstBatch = 0) {
  Trained r;
  for (int s = 0; s < steps; ++s) {
    const auto b = bigc::rt::testing::batch(firstBatch + s, dp * PipeTiny::B * PipeTiny::T);
    r.losses.push_back(e.step(b.tokens.data(), b.targets.data()));
  }
  for (const auto &[name, buf] : e.persistentByName()) r.state[name] = e.readF32(buf->id);
  return r;
}

// The largest |a - b| over the largest |b|, over every element of every buffer of `b`.
double maxRelative(const Trained &a, const Trained &b) {
  double diff = 0, scale = 0;
  for (const auto &[name, vb] : b.state) {
    auto it = a.state.find(name);
    if (it == a.state.end() || it->second.size() != vb.size()) {
      ADD_FAILURE() << "buffer " << name << " missing or of another size";
      return 1e30;
    }
    for (size_t i = 0; i < vb.size(); ++i)
      diff = std::max(diff, double(std::fabs(it->second[i] - vb[i]))),
      scale = std::max(scale, double(std::fabs(vb[i])));
  }
  return scale > 0 ? diff / scale : diff;
}
double maxLossRelative(const Trained &a, const Trained &b) {
  double d = 0;
  for (size_t i = 0; i < b.losses.size(); ++i)
    d = std::max(d, std::fabs(double(a.losses[i]) - b.losses[i]) / std::fabs(double(b.losses[i])));
  return d;
}

} // namespace

// Two stages (2 ranks) train exactly as the one-stage program of the same model: the same kernels
// on the same values in the same order, the stages passing h and dh through messages. Measured:
// losses and every weight and moment bit-equal over 6 steps (max relative difference 0), with and
// without clipping (whose global norm combines the stages' norms in f32 over the pipeline axis, so
// that clipping may differ by rounding: asserted within 1e-6; see BigcRunTrainsAPipelinedProgram).
TEST(Pipeline, TwoStagesTrainLikeOneProgram) {
  std::map<double, Trained> byClip;
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    auto group = makeCpuRankGroup(PipeTiny::build(2, 1, 0.05, clip), 7, 60);
    ASSERT_EQ(group->localRanks(), 2);
    EXPECT_EQ(group->rank(0).program().stage, 0);
    EXPECT_EQ(group->rank(1).program().stage, 1);
    EXPECT_EQ(group->rank(1).findPersistent("emb.weight"), nullptr); // stage 0's
    Executor one(PipeTiny::build(1, 1, 0.05, clip), 7);
    const Trained init = train(one, 1, 0);
    const Trained a = train(*group, 1, 6), b = train(one, 1, 6);
    EXPECT_EQ(a.state.size(), 9u); // 3 weights and their moments, from both stages
    if (clip == 0) {
      EXPECT_EQ(a.losses, b.losses);
      EXPECT_EQ(maxRelative(a, b), 0.0);
    } else { // the global norm: the stages' norms combined in f32 (measured: 0 here too)
      EXPECT_LT(maxLossRelative(a, b), 1e-6);
      EXPECT_LT(maxRelative(a, b), 1e-6);
    }
    EXPECT_LT(b.losses.back(), b.losses.front());
    EXPECT_GT(maxRelative(b, init), 1e-2); // it trained
    byClip[clip] = a;
  }
  EXPECT_GT(maxRelative(byClip[0.05], byClip[0.0]), 1e-4); // clipping acted
}

// Two stages x two data-parallel ranks (4 ranks: the gradients all-reduced over dp on each stage)
// train exactly as the one-stage program of the same model on 2 data-parallel ranks. Measured:
// losses, weights and moments bit-equal over 6 steps (max relative difference 0), with and without
// clipping (asserted within 1e-6 with it).
TEST(Pipeline, PipelineTimesDataParallelTrainsLikeOneStage) {
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    auto group = makeCpuRankGroup(PipeTiny::build(2, 2, 0.05, clip), 7, 60);
    ASSERT_EQ(group->localRanks(), 4);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(group->rank(r).program().stage, r / 2);
    auto ref = makeCpuRankGroup(PipeTiny::build(1, 2, 0.05, clip), 7, 60);
    const Trained a = train(*group, 2, 6), b = train(*ref, 2, 6);
    if (clip == 0) {
      EXPECT_EQ(a.losses, b.losses);
      EXPECT_EQ(maxRelative(a, b), 0.0);
    } else { // measured: 0 here too
      EXPECT_LT(maxLossRelative(a, b), 1e-6);
      EXPECT_LT(maxRelative(a, b), 1e-6);
    }
    EXPECT_LT(b.losses.back(), b.losses.front());
    // The data-parallel ranks of a stage hold the same weights.
    const Buffer *head = group->rank(2).findPersistent("head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(group->rank(2).readF32(head->id), group->rank(3).readF32(head->id));
  }
}

// The group's logical program: every stage's persistent buffers as whole tensors, each read from
// and written to the ranks of its stage.
TEST(Pipeline, LogicalProgramHoldsEveryStagesWeights) {
  auto group = makeCpuRankGroup(PipeTiny::build(2, 2), 3, 60);
  const Program &l = group->program();
  EXPECT_EQ(l.pp, 1);
  EXPECT_TRUE(l.stages.empty());
  std::vector<std::string> names;
  for (const Buffer *w : group->weights()) names.push_back(w->name);
  EXPECT_EQ(names, (std::vector<std::string>{"emb.weight", "mid.weight", "head.weight"}));
  EXPECT_EQ(group->persistentByName().size(), 9u);
  // The initial values are those of one program (each tensor's stream by its name).
  Executor one(PipeTiny::build(1), 3);
  for (const char *n : {"emb.weight", "mid.weight", "head.weight", "head.weight.m"})
    EXPECT_EQ(group->readF32(group->findPersistent(n)->id), one.readF32(one.findPersistent(n)->id)) << n;
  // A stage-1 weight written through the group lands on both ranks of stage 1.
  const Buffer *head = group->findPersistent("head.weight");
  std::vector<float> v(size_t(head->numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f;
  group->writeF32(head->id, v.data());
  EXPECT_EQ(group->readF32(head->id), v);
  for (int r : {2, 3}) EXPECT_EQ(group->rank(r).readF32(group->rank(r).findPersistent("head.weight")->id), v);
  EXPECT_EQ(group->rank(0).findPersistent("head.weight"), nullptr);
}

// A checkpoint of a pipelined run holds whole tensors: it resumes on one stage (and the other way
// round), continuing bit for bit as the uninterrupted one-stage run (measured: 0 difference).
TEST(Pipeline, CheckpointResumesOnAnotherLayout) {
  const std::string dir = bigc::rt::testing::tempDir();
  data::SyntheticTokenSource source(PipeTiny::B, PipeTiny::T, PipeTiny::V, 1);
  Executor whole(PipeTiny::build(1), 11);
  const Trained uninterrupted = train(whole, 1, 6);

  auto piped = makeCpuRankGroup(PipeTiny::build(2), 11, 60);
  const Trained first = train(*piped, 1, 3);
  EXPECT_EQ(first.losses, std::vector<float>(uninterrupted.losses.begin(), uninterrupted.losses.begin() + 3));
  const checkpoint::Info saved = checkpoint::save(dir, *piped, source, 11, first.losses.back(), 2);
  // Whole tensors under the buffers' names, from both stages.
  auto state = bigc::rt::safetensors::read(saved.path + "/state.safetensors");
  ASSERT_NE(state.find("head.weight.v"), nullptr);
  ASSERT_NE(state.find("emb.weight"), nullptr);
  EXPECT_EQ(state.find("emb.weight")->shape, (std::vector<int64_t>{PipeTiny::V, PipeTiny::C}));

  Executor resumed(PipeTiny::build(1), 99); // another seed: everything comes from the checkpoint
  checkpoint::load(saved.path, resumed, source);
  EXPECT_EQ(resumed.stepCount(), 3);
  const Trained rest = train(resumed, 1, 3, 3);
  EXPECT_EQ(rest.losses, std::vector<float>(uninterrupted.losses.begin() + 3, uninterrupted.losses.end()));
  EXPECT_EQ(maxRelative(rest, uninterrupted), 0.0);

  // And a one-stage checkpoint into two stages.
  Executor three(PipeTiny::build(1), 11);
  train(three, 1, 3);
  const checkpoint::Info oneStage = checkpoint::save(dir + "/one", three, source, 11, 0.0, 2);
  auto piped2 = makeCpuRankGroup(PipeTiny::build(2), 5, 60);
  checkpoint::load(oneStage.path, *piped2, source);
  const Trained rest2 = train(*piped2, 1, 3, 3);
  EXPECT_EQ(rest2.losses, rest.losses);
  EXPECT_EQ(maxRelative(rest2, uninterrupted), 0.0);
}

// An error on one rank stops every rank; the message names the stage and the rank.
TEST(Pipeline, AnErrorInOneStageStopsEveryRank) {
  auto group = makeCpuRankGroup(PipeTiny::build(2, 2), 3, 60);
  auto b = bigc::rt::testing::batch(0, 2 * PipeTiny::B * PipeTiny::T);
  b.targets[size_t(PipeTiny::B * PipeTiny::T)] = 99; // dp rank 1's first target: read by rank 3 (stage 1)
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  try {
    group->step(b.tokens.data(), b.targets.data());
  } catch (const UserError &e) {
    err = e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_ERROR_HAS(err, "stage 1 (rank 3): step 1: instruction 2 (cross_entropy at test.mlir:3:3): target id 99 at "
                        "position 0 is outside the vocabulary [0, 8)");
}

// A pipeline whose stages wait for each other (the deadlock the verifier reports) stops at the
// communicator's timeout with a message naming the message it waited for.
TEST(Pipeline, ADeadlockedPipelineTimesOut) {
  auto group = makeCpuRankGroup(PipeTiny::build(2, 1, 0.05, 0.0, /*recvFirst=*/true), 3, 0.3);
  auto b = bigc::rt::testing::batch(0);
  std::string err;
  try {
    group->step(b.tokens.data(), b.targets.data());
  } catch (const UserError &e) {
    err = e.what();
  }
  EXPECT_ERROR_HAS(err, "step 1: instruction ", "(recv at test.mlir:", "waited 0.3 s for the message from rank ",
                   " with tag ", "which did not come");
}

// A stage's engine alone is refused with one message. A rank group on the CUDA backend first proves
// the program runs over NCCL (ncclPipelineProblem: Pipeline.NcclRules), then needs a GPU per rank.
TEST(Pipeline, AStageAloneIsRefusedOnTheCudaBackend) {
  EXPECT_EQ(pipelineStageAlone(2),
            "pipeline parallelism (pp 2): a stage runs with the ranks of the other stages, started by `bigc run` (the "
            "CPU backend, in one process or under mpirun; one GPU per rank over NCCL; or every rank on one GPU with "
            "--virtual-ranks)");
  if (!cudaBackendCompiled()) GTEST_SKIP() << "this build has no CUDA backend";
  std::string err;
  try {
    makeCudaEngine(PipeTiny::build(2), 1);
  } catch (const UserError &e) {
    err = e.what();
  }
  EXPECT_EQ(err, pipelineStageAlone(2));
}

// One rank of a pipeline alone has no communicator for its messages.
TEST(Pipeline, AnExecutorAloneRefusesAStage) {
  Program s1 = PipeTiny::build(2).stages[0];
  EXPECT_THROW(Executor(s1, 1), UserError);
}

namespace {
int runBigc(std::vector<std::string> args) {
  std::vector<char *> argv;
  static std::string name = "bigc-run";
  argv.push_back(name.data());
  for (auto &a : args) argv.push_back(a.data());
  return runMain(int(argv.size()), argv.data(), 1);
}
std::vector<double> logLosses(const std::string &path) {
  std::ifstream f(path);
  std::string line;
  std::vector<double> out;
  while (std::getline(f, line)) out.push_back(json::parse(line)["loss"].get<double>());
  return out;
}
} // namespace

// bigc run on a pipelined program file (pp 2 x dp 2): the losses and saved weights of the
// one-stage program (dp 2). Measured: bit-equal without clipping; with clipping 6.6e-8 (losses) and
// 7.0e-8 (weights) relative, from the global norm: the stages' norms combined in f32 over the
// pipeline axis, where one program sums every square in double.
TEST(Pipeline, BigcRunTrainsAPipelinedProgram) {
  const std::string dir = bigc::rt::testing::tempDir();
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    writeFileAtomic(dir + "/pp.bigc", serializeProgram(PipeTiny::build(2, 2, 0.05, clip)));
    writeFileAtomic(dir + "/one.bigc", serializeProgram(PipeTiny::build(1, 2, 0.05, clip)));
    for (const char *m : {"pp", "one"})
      ASSERT_EQ(runBigc({dir + "/" + m + ".bigc", "--steps", "4", "--synthetic", "--quiet", "--log",
                         dir + "/" + m + ".jsonl", "--save-weights", dir + "/" + m + ".safetensors"}),
                0)
          << m;
    const std::vector<double> a = logLosses(dir + "/pp.jsonl"), b = logLosses(dir + "/one.jsonl");
    ASSERT_EQ(a.size(), 4u);
    double lossDiff = 0, wDiff = 0, wScale = 0;
    for (size_t i = 0; i < a.size(); ++i) lossDiff = std::max(lossDiff, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
    auto wa = bigc::rt::safetensors::read(dir + "/pp.safetensors"),
         wb = bigc::rt::safetensors::read(dir + "/one.safetensors");
    ASSERT_EQ(wa.tensors.size(), 3u);
    for (const char *n : {"emb.weight", "mid.weight", "head.weight"}) {
      ASSERT_NE(wa.find(n), nullptr) << n;
      const std::vector<float> x = wa.find(n)->toF32(), y = wb.find(n)->toF32();
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i)
        wDiff = std::max(wDiff, double(std::fabs(x[i] - y[i]))), wScale = std::max(wScale, double(std::fabs(y[i])));
    }
    if (clip == 0) {
      EXPECT_EQ(lossDiff, 0.0);
      EXPECT_EQ(wDiff, 0.0);
    } else {
      EXPECT_LT(lossDiff, 1e-6);
      EXPECT_LT(wDiff / wScale, 1e-6);
    }
  }
  // The CUDA backend is refused (here by the pipeline, or first by the missing GPU), nothing written.
  EXPECT_EQ(runBigc({dir + "/pp.bigc", "--backend", "cuda", "--log", dir + "/cuda.jsonl"}), 1);
  EXPECT_FALSE(std::ifstream(dir + "/cuda.jsonl").good());
}

// The groups of the mesh pp x dp x tp in one process (rank r = (s * dp + d) * tp + t): data-parallel
// groups of one (s, t), tensor-parallel groups of one (s, d), pipeline groups of one (d, t).
TEST(Pipeline, MeshGroups) {
  const int dp = 2, tp = 3, pp = 2;
  InProcessMesh mesh(dp, tp, 10, pp);
  auto members = [](const std::shared_ptr<Communicator> &c) {
    std::vector<int> ids;
    for (int l = 0; l < c->size(); ++l) ids.push_back(c->globalRank(l));
    return ids;
  };
  ASSERT_EQ(mesh.dp.size(), size_t(pp * tp));
  ASSERT_EQ(mesh.tp.size(), size_t(pp * dp));
  ASSERT_EQ(mesh.pp.size(), size_t(dp * tp));
  EXPECT_EQ(members(mesh.dp[0]), (std::vector<int>{0, 3}));           // s 0, t 0
  EXPECT_EQ(members(mesh.dp[1 * tp + 2]), (std::vector<int>{8, 11})); // s 1, t 2
  EXPECT_EQ(members(mesh.tp[1 * dp + 1]), (std::vector<int>{9, 10, 11}));
  EXPECT_EQ(members(mesh.pp[1 * tp + 1]), (std::vector<int>{4, 10})); // d 1, t 1
  // One stage: the groups of dp x tp as before.
  InProcessMesh flat(dp, tp, 10);
  EXPECT_TRUE(flat.pp.empty());
  EXPECT_EQ(members(flat.dp[2]), (std::vector<int>{2, 5}));
  EXPECT_EQ(members(flat.tp[1]), (std::vector<int>{3, 4, 5}));
}
