// The plan verifier (format/Verifier.cpp) on hand-built programs: valid ones pass; each
// injected fault (an offset moved into a live neighbour, a dropped wait, a shrunk arena, two
// instructions swapped across a dependence, an in-place overwrite of a value still needed) is
// found and named.
#include <gtest/gtest.h>

#include "bigc/Runtime/verifier.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using namespace bigc::rt::testing;

namespace {

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v) s += x + "\n";
  return s;
}

#define EXPECT_HAS(text, needle)                                                                                       \
  EXPECT_NE((text).find(needle), std::string::npos) << "'" << (needle) << "' not in:\n" << (text)

TEST(PlanVerifier, CompiledShapesPass) {
  for (const Program &p : {TinyModel::build(), offloadTiny(0.05, 1.0, 0.1), fp16Tiny(0.05, 1024)}) {
    EXPECT_NO_THROW(validateProgram(p, "m.bigc"));
    EXPECT_EQ(joined(verifyPlan(p)), "");
  }
}

TEST(PlanVerifier, OffsetMovedIntoALiveNeighbour) {
  Program p = TinyModel::build();
  // logits (live 1..4) moved onto x (live 0..9, read again by reshape and embedding_grad).
  p.buffers[TinyModel::LOGITS].offset = p.buffers[TinyModel::X].offset;
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "buffer 4 'x'");
  EXPECT_HAS(r, "buffer 5 'logits'");
  EXPECT_HAS(r, "share bytes [");
  // And a neighbour whose uses are ordered but interleaved: x2 (written at 5, read at 7) onto
  // dlogits (written at 4, read at 6 and 9).
  Program q = TinyModel::build();
  q.buffers[TinyModel::X2].offset = q.buffers[TinyModel::DLOGITS].offset;
  std::string r2 = joined(verifyPlan(q));
  EXPECT_HAS(r2, "buffer 8 'dlogits'");
  EXPECT_HAS(r2, "buffer 9 'x2'");
  EXPECT_HAS(r2, "while both are live");
}

TEST(PlanVerifier, DroppedWaitIsARace) {
  // The d2h copy of the head weight's gradient (8) waits for the matmul that computes it (7).
  // Streams run in order and waits chain (the host update 14 waits for the copy 13, after 11 on the
  // same stream), so the fault must break every path: drop 8's wait.
  Program p = offloadTiny(0.05, 1.0, 0.1);
  p.instructions[8].wait = {};
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "instruction 8 (copy on stream d2h");
  EXPECT_HAS(r, "instruction 7 (matmul on stream compute");
  EXPECT_HAS(r, "'head.weight.grad'");
  EXPECT_HAS(r, "nothing orders");
  // The host update with no waits at all reads host copies that nothing orders after their d2h copy.
  Program q = offloadTiny(0.05, 1.0, 0.1);
  q.instructions[14].wait = {};
  std::string r2 = joined(verifyPlan(q));
  EXPECT_HAS(r2, "instruction 14 (adamw on stream host");
  EXPECT_HAS(r2, "'wte.weight.grad.host'");
  // A wait that is only implied (14 after 11 through 13 on the d2h stream) is no fault.
  Program ok = offloadTiny(0.05, 1.0, 0.1);
  ok.instructions[14].wait = {13};
  EXPECT_EQ(joined(verifyPlan(ok)), "");
}

TEST(PlanVerifier, ShrunkArenaIsRefusedByTheChecks) {
  Program p = TinyModel::build();
  p.spaces[0].arenaBytes -= 64;
  try {
    verifyProgram(p, "m.bigc");
    FAIL() << "expected an error";
  } catch (const UserError &e) {
    std::string m = e.what();
    EXPECT_HAS(m, "m.bigc");
    EXPECT_HAS(m, "arena");
  }
}

TEST(PlanVerifier, SwappedInstructionsReadBeforeWrite) {
  Program p = TinyModel::build();
  std::swap(p.instructions[0], p.instructions[1]); // the matmul now reads x before the embedding writes it
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "instruction 0 (matmul on stream compute");
  EXPECT_HAS(r, "reads buffer 4 'x' (activation) before any instruction writes it");
}

TEST(PlanVerifier, InPlaceOverwriteOfALiveValue) {
  ProgramBuilder b(1, 1, 2);
  int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32), tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
  int64_t w = b.param("w", {8}, 1.0);
  int64_t x = b.buffer("x", {8}, "activation"), y = b.buffer("y", {8}, "activation");
  int64_t z = b.buffer("z", {8}, "activation"), loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.inst("scale", {w}, {x}, {{"factor", num(2)}});
  b.inst("gelu", {x}, {y});   // in place over x ...
  b.inst("add", {x, y}, {z}); // ... but x is still read here
  b.inst("global_norm", {z}, {loss});
  Program p = b.finish({{y, x}});
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "instruction 1 (gelu on stream compute");
  EXPECT_HAS(r, "overwrites buffer 3 'x'");
  EXPECT_HAS(r, "instruction 2 (add on stream compute");
}

TEST(PlanVerifier, PersistentBuffersOverlapNothing) {
  Program p = TinyModel::build();
  p.buffers[TinyModel::DLOGITS].offset = p.buffers[TinyModel::W].offset;
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "'head.weight' (param) is persistent");
}

TEST(PlanVerifier, LossClobberedBeforeTheRuntimeReadsIt) {
  Program p = TinyModel::build();
  // The grad norm (written after the loss) placed on the loss: the runtime reads the loss last.
  p.buffers[TinyModel::NORM].offset = p.buffers[TinyModel::LOSS].offset;
  std::string r = joined(verifyPlan(p));
  EXPECT_HAS(r, "'loss'");
  EXPECT_HAS(r, "'grad_norm'");
}

} // namespace
