// Pipeline parallelism: the program file of several stages (reading, writing, validation, the
// cross-stage deadlock check), point-to-point messages, and the ranks of a pipeline on the CPU
// backend (docs/program-format.md, "Pipeline stages").
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/verifier.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using bigc::rt::testing::num;
using bigc::rt::testing::PipeTiny;
using json = nlohmann::json;

namespace {

std::string parseError(const std::string &bytes) {
  try {
    parseProgram(bytes, "m.bigc");
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}

std::string validateError(const Program &p) {
  try {
    validateProgram(p, "m.bigc");
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}

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
