// The program file: container, parsing, validation, serialization (docs/program-format.md).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>

#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/kernel_table.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/program.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
using bigc::rt::testing::parseError;
using bigc::rt::testing::ProgramBuilder;
using bigc::rt::testing::TinyModel;
using bigc::rt::testing::validateError;
using json = nlohmann::json;

namespace {

// Edit the JSON payload of a valid program and re-wrap it with a correct container line.
std::string editPayload(const std::function<void(json &)> &edit) {
  json j = json::parse(bigc::rt::testing::payloadOf(serializeProgram(TinyModel::build())));
  edit(j);
  return bigc::rt::testing::wrapPayload(j.dump());
}

#define EXPECT_ERROR_HAS(msg, ...)                                                                                     \
  do {                                                                                                                 \
    std::string m_ = (msg);                                                                                            \
    EXPECT_FALSE(m_.empty()) << "expected an error";                                                                   \
    for (const char *k_ : {__VA_ARGS__}) EXPECT_NE(m_.find(k_), std::string::npos) << "'" << k_ << "' not in: " << m_; \
  } while (0)

} // namespace

TEST(RuntimeProgram, Fnv1a64KnownValues) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

TEST(RuntimeProgram, DTypes) {
  DType d;
  for (DType x : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
    ASSERT_TRUE(parseDType(dtypeName(x), d));
    EXPECT_EQ(d, x);
  }
  EXPECT_EQ(dtypeSize(DType::F32), 4);
  EXPECT_EQ(dtypeSize(DType::BF16), 2);
  EXPECT_FALSE(parseDType("f64", d));
}

TEST(RuntimeProgram, OpRegistryCoversTheFormat) {
  EXPECT_EQ(opDefs().size(), 65u);
  for (const char *f : {"linear_ce_stats", "linear_ce_stats_grad"}) EXPECT_NE(findOp(f), nullptr) << f;
  for (const char *f :
       {"add_layernorm", "add_rmsnorm", "layernorm_grad_add", "rmsnorm_grad_add", "bias_gelu", "gelu_grad_bias"})
    EXPECT_NE(findOp(f), nullptr) << f;
  for (const char *pp : {"send", "recv"}) EXPECT_NE(findOp(pp), nullptr) << pp;
  for (const char *l : {"rmsnorm", "rmsnorm_grad", "rope", "silu", "silu_grad", "swiglu", "swiglu_grad",
                        "gqa_attention", "gqa_attention_grad"})
    EXPECT_NE(findOp(l), nullptr) << l;
  for (const char *g : {"geglu", "geglu_grad", "softcap", "softcap_grad", "moe", "moe_grad"})
    EXPECT_NE(findOp(g), nullptr) << g;
  for (const char *tp : {"tp_slice", "vocab_ce_stats", "vocab_ce_stats_grad", "vocab_ce_loss", "vocab_ce_loss_grad"})
    EXPECT_NE(findOp(tp), nullptr) << tp;
  ASSERT_NE(findOp("adamw"), nullptr);
  EXPECT_EQ(findOp("adamw")->maxIn, 7);
  for (const char *v2 : {"cast", "copy", "wait", "check_finite", "loss_scale_update"})
    EXPECT_NE(findOp(v2), nullptr) << v2;
  for (const char *v3 : {"all_reduce", "reduce_scatter", "all_gather"}) EXPECT_NE(findOp(v3), nullptr) << v3;
  for (const char *cp : {"ring_shift", "cp_all_to_all", "ring_attention", "ring_attention_grad"})
    EXPECT_NE(findOp(cp), nullptr) << cp;
  EXPECT_EQ(findOp("conv2d"), nullptr);
}

// The registry: every OpKind declared once (in its own place: the table is indexed by kind), with
// the rules every op has (a dims rule where a kernel takes sizes; a cost rule except for the
// communication, which the communication model times); every op has a CPU kernel.
TEST(RuntimeProgram, OpRegistryOneDeclarationPerOp) {
  ASSERT_EQ(opDefs().size(), kOpKinds);
  std::set<std::string> names;
  for (size_t k = 0; k < kOpKinds; ++k) {
    const OpDef &d = opDefs()[k];
    EXPECT_EQ(size_t(d.kind), k) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name << " declared twice";
    EXPECT_EQ(findOp(d.name), &d) << d.name;
    const bool comm = isCollectiveOp(d.kind) || d.kind == OpKind::Send || d.kind == OpKind::Recv;
    EXPECT_EQ(d.flops == nullptr, comm) << d.name << ": a cost rule for every op but the communication";
    EXPECT_TRUE(d.minIn >= 0 && (d.maxIn < 0 || d.maxIn >= d.minIn)) << d.name;
    for (const auto &[o, i] : d.aliases) EXPECT_TRUE(d.inPlace && o >= 0 && i >= 0) << d.name;
  }
  EXPECT_TRUE(Executor::kernels().missing().empty()) << "an op without a CPU kernel";
  if (cudaBackendCompiled()) { // (the CUDA device's table is data: checked without a GPU)
    std::string missing;
    for (const std::string &n : cudaMissingKernels()) missing += n + " ";
    EXPECT_EQ(missing, "") << "ops without a CUDA kernel";
  }
  // (the old per-op switches, checked against the declarations)
  EXPECT_TRUE(mayAlias(opDef(OpKind::AddLayernorm), 0, 1));
  EXPECT_FALSE(mayAlias(opDef(OpKind::AddLayernorm), 1, 0));
  EXPECT_TRUE(mayAlias(opDef(OpKind::Gelu), 0, 0));
  EXPECT_FALSE(mayAlias(opDef(OpKind::Matmul), 0, 0));
  EXPECT_EQ(operandType(OpKind::LinearCeStatsGrad, true, 3), OperandType::I32);
  EXPECT_EQ(operandType(OpKind::LinearCeStatsGrad, false, 2), OperandType::F32);
  EXPECT_EQ(operandType(OpKind::AdamW, true, 6), OperandType::F32);
  EXPECT_EQ(operandType(OpKind::AdamW, false, 3), OperandType::Float);
  EXPECT_EQ(operandType(OpKind::Copy, true, 0), OperandType::Any);
  EXPECT_TRUE(handlesOwnDtypes(OpKind::Send) && !handlesOwnDtypes(OpKind::Matmul));
}

// A device without a kernel for an op refuses the program when it is loaded, naming the
// instruction, the op and the device.
TEST(RuntimeProgram, MissingKernelIsALoadTimeError) {
  const KernelTable<int> table("test", {{OpKind::Add, 1}, {OpKind::Matmul, 2}});
  Instruction ins;
  ins.op = "gelu";
  ins.loc = "model.mlir:3:5";
  EXPECT_EQ(table.at(OpKind::Matmul, ins, 0), 2);
  try {
    table.at(OpKind::Gelu, ins, 7);
    ADD_FAILURE() << "no error";
  } catch (const bigc::UserError &e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "instruction 7 (gelu at model.mlir:3:5)",
                     "the test device has no kernel for op 'gelu'");
  }
  EXPECT_EQ(table.missing().size(), kOpKinds - 2);
}

// Every attribute is one its op declares, with the declared type.
TEST(RuntimeProgram, AttributesAsDeclared) {
  using TM = TinyModel;
  {
    Program p = TM::build();
    p.instructions[7].attrs["transpose_c"] = ProgramBuilder::num(1);
    EXPECT_ERROR_HAS(validateError(p), "instruction 7 (matmul", "unknown attribute 'transpose_c'",
                     "matmul takes transpose_a, transpose_b");
  }
  {
    Program p = TM::build();
    p.instructions[7].attrs["transpose_a"] = ProgramBuilder::num(2);
    EXPECT_ERROR_HAS(validateError(p), "instruction 7 (matmul", "'transpose_a' is a flag");
  }
  {
    Program p = TM::build();
    p.instructions[0].attrs["classes"] = ProgramBuilder::num(2.5);
    EXPECT_ERROR_HAS(validateError(p), "instruction 0 (embedding", "'classes' must be an integer");
  }
  {
    Program p = TM::build();
    Attr list;
    list.isList = true, list.list = {1, 2};
    p.instructions[7].attrs["transpose_a"] = list;
    EXPECT_ERROR_HAS(validateError(p), "instruction 7 (matmul", "'transpose_a' must be a number, not a list");
  }
  {
    Program p = TM::build();
    p.instructions[2].attrs["eps"] = ProgramBuilder::num(1e-5); // (cross_entropy takes only classes)
    EXPECT_ERROR_HAS(validateError(p), "instruction 2", "unknown attribute 'eps'");
  }
}

TEST(RuntimeProgram, SerializeParseRoundTrip) {
  Program p = TinyModel::build(0.01, 1.0, 0.1);
  p.instructions[3].attrs["value"] = ProgramBuilder::num(0.1);
  std::string bytes = serializeProgram(p);
  ASSERT_EQ(bytes.rfind("BIGC-PROGRAM 3 ", 0), 0u);
  Program q = parseProgram(bytes, "m.bigc");
  EXPECT_EQ(q.batch, p.batch);
  EXPECT_EQ(q.seq, p.seq);
  EXPECT_EQ(q.vocab, p.vocab);
  EXPECT_EQ(q.producer, "test");
  EXPECT_EQ(q.optimizer.lr, 0.01);
  ASSERT_EQ(q.buffers.size(), p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    EXPECT_EQ(q.buffers[i].name, p.buffers[i].name);
    EXPECT_EQ(q.buffers[i].offset, p.buffers[i].offset);
    EXPECT_EQ(q.buffers[i].bytes, p.buffers[i].bytes);
    EXPECT_EQ(q.buffers[i].shape, p.buffers[i].shape);
    EXPECT_EQ(q.buffers[i].dtype, p.buffers[i].dtype);
    EXPECT_EQ(q.buffers[i].role, p.buffers[i].role);
    EXPECT_EQ(q.buffers[i].liveFirst, p.buffers[i].liveFirst);
    EXPECT_EQ(q.buffers[i].liveLast, p.buffers[i].liveLast);
    EXPECT_EQ(q.buffers[i].init.kind, p.buffers[i].init.kind);
    EXPECT_EQ(q.buffers[i].init.std, p.buffers[i].init.std);
  }
  ASSERT_EQ(q.instructions.size(), p.instructions.size());
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    EXPECT_EQ(q.instructions[i].op, p.instructions[i].op);
    EXPECT_EQ(q.instructions[i].in, p.instructions[i].in);
    EXPECT_EQ(q.instructions[i].out, p.instructions[i].out);
    EXPECT_EQ(q.instructions[i].loc, p.instructions[i].loc);
    ASSERT_EQ(q.instructions[i].attrs.size(), p.instructions[i].attrs.size());
    for (const auto &[k, a] : p.instructions[i].attrs) {
      EXPECT_EQ(q.instructions[i].attrs.at(k).num, a.num) << k;
      EXPECT_EQ(q.instructions[i].attrs.at(k).list, a.list) << k;
    }
  }
  EXPECT_TRUE(q.instructions[7].flag("transpose_a"));
  // Serializing again gives the same bytes.
  EXPECT_EQ(serializeProgram(q), bytes);
  EXPECT_EQ(q.parameterCount(), 2 * TinyModel::V * TinyModel::C);

  // A list attribute (an op that takes one: transpose's perm).
  ProgramBuilder b(1, 2, 4);
  int64_t tok = b.buffer("tokens", {1, 2}, "input", DType::I32);
  int64_t tgt = b.buffer("targets", {1, 2}, "input", DType::I32);
  int64_t wte = b.param("wte.weight", {4, 4}, 0.02);
  int64_t x = b.buffer("x", {1, 2, 4}, "activation");
  int64_t y = b.buffer("y", {1, 2, 4}, "activation");
  int64_t loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.inst("embedding", {wte, tok}, {x});
  b.inst("transpose", {x}, {y}, {{"perm", ProgramBuilder::list({0, 1, 2})}});
  b.inst("cross_entropy", {y, tgt}, {loss});
  const std::string tbytes = serializeProgram(b.finish());
  Program t = parseProgram(tbytes, "t.bigc");
  EXPECT_EQ(t.instructions[1].ints("perm"), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(serializeProgram(t), tbytes);
}

TEST(RuntimeProgram, LoadAndWriteFileAtomic) {
  std::string dir = bigc::rt::testing::tempDir();
  std::string path = dir + "/m.bigc";
  writeFileAtomic(path, serializeProgram(TinyModel::build()));
  Program p = loadProgram(path);
  EXPECT_EQ(p.instructions.size(), 13u);
  std::ifstream tmp(path + ".tmp");
  EXPECT_FALSE(tmp.good()) << "the temporary file must be gone";
  try {
    loadProgram(dir + "/missing.bigc");
    FAIL();
  } catch (const UserError &e) {
    EXPECT_NE(std::string(e.what()).find("missing.bigc: cannot open"), std::string::npos) << e.what();
  }
  try {
    writeFileAtomic(dir + "/no/such/dir/x.bigc", "x");
    FAIL();
  } catch (const UserError &e) {
    EXPECT_NE(std::string(e.what()).find("x.bigc: cannot write"), std::string::npos) << e.what();
  }
}

TEST(RuntimeProgram, ContainerErrors) {
  std::string good = serializeProgram(TinyModel::build());
  ASSERT_EQ(parseError(good), "");

  EXPECT_ERROR_HAS(parseError(good.substr(0, good.size() - 10)), "m.bigc: ", "truncated");
  EXPECT_ERROR_HAS(parseError(good + "x"), "trailing");
  EXPECT_ERROR_HAS(parseError("hello world\n{}"), "not a bigc program");
  EXPECT_ERROR_HAS(parseError(""), "not a bigc program");
  EXPECT_ERROR_HAS(parseError("BIGC-PROGRAM 1 12\n"), "container line");

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x01;
  EXPECT_ERROR_HAS(parseError(flipped), "checksum");

  std::string v1 = good;
  v1.replace(0, 15, "BIGC-PROGRAM 1 ");
  EXPECT_ERROR_HAS(parseError(v1), "version 1", "reads versions 2 to 6");

  EXPECT_ERROR_HAS(parseError(bigc::rt::testing::wrapPayload("{\"version\": 1,")), "not valid JSON");
}

TEST(RuntimeProgram, MissingAndMistypedFields) {
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["buffers"][3].erase("offset"); })), "buffer 3 ('targets')",
                   "'offset'", "missing");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["buffers"][2]["shape"] = "2x4"; })), "buffer 2", "'shape'",
                   "must be a list");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) {
                     j["instructions"][4]["in"] = {5, "x", 7};
                   })),
                   "instruction 4 (cross_entropy_grad", "'in'", "integers");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j.erase("config"); })), "'config'", "missing");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["config"]["batch"] = 2.5; })), "config", "'batch'",
                   "integer");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["version"] = 1; })), "version 1", "reads versions 2 to 6");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["buffers"][0]["vocab_rows"] = 1; })), "buffer 0",
                   "vocab_rows", "needs program format version 4");
  // A tile-interleaved shard (bigc-tile): version 6; its tiles divide the rows (wte is 8 x 4).
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) {
                     j["buffers"][0]["shard"] = {{"axis", "dp"}, {"full_shape", {8, 4}}, {"tiles", 2}};
                   })),
                   "buffer 0", "shard tiles", "needs program format version 6");
  {
    Program p = TinyModel::build();
    p.version = 6;
    p.buffers[0].shard = true, p.buffers[0].fullShape = {8, 4}, p.buffers[0].shape = {32}, p.buffers[0].tiles = 3;
    EXPECT_ERROR_HAS(validateError(p), "buffer 0", "shard tiles 3 must divide the first dimension");
    p.buffers[0].tiles = 2, p.buffers[0].shape = {30}, p.buffers[0].bytes = 120; // (2 tiles of 16 over dp 1: 32)
    EXPECT_ERROR_HAS(validateError(p), "buffer 0", "a shard of [8,4] over dp 1 in 2 tiles is [32], the buffer is [30]");
  }
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["buffers"][0]["dtype"] = "f64"; })), "buffer 0",
                   "unknown dtype 'f64'");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["instructions"][3]["attrs"]["value"] = "one"; })),
                   "instruction 3", "attribute 'value'");
  EXPECT_ERROR_HAS(parseError(editPayload([](json &j) { j["buffers"][4]["live"] = {1}; })), "buffer 4", "'live'");
}

TEST(RuntimeProgram, BufferErrors) {
  {
    Program p = TinyModel::build();
    p.buffers[4].offset = p.spaces[0].arenaBytes;
    EXPECT_ERROR_HAS(validateError(p), "buffer 4 ('x')", "outside", "arena");
  }
  {
    Program p = TinyModel::build();
    p.buffers[4].offset += 32;
    EXPECT_ERROR_HAS(validateError(p), "buffer 4 ('x')", "not aligned to 64");
  }
  {
    Program p = TinyModel::build();
    p.buffers[4].bytes -= 4;
    EXPECT_ERROR_HAS(validateError(p), "buffer 4", "bytes");
  }
  {
    Program p = TinyModel::build();
    p.buffers[5].id = 7;
    EXPECT_ERROR_HAS(validateError(p), "buffer 5", "id 7", "index 5");
  }
  {
    Program p = TinyModel::build();
    p.buffers[15].name = "wte.weight";
    EXPECT_ERROR_HAS(validateError(p), "buffer 15", "'wte.weight'", "two persistent");
  }
  {
    Program p = TinyModel::build();
    p.buffers[4].space = "nvme";
    EXPECT_ERROR_HAS(validateError(p), "buffer 4", "unknown space 'nvme'");
  }
  {
    Program p = TinyModel::build();
    p.buffers[0].init = {};
    EXPECT_ERROR_HAS(validateError(p), "buffer 0", "init");
  }
  {
    Program p = TinyModel::build();
    p.buffers[5].offset = p.buffers[4].offset; // logits over x while x is still live
    EXPECT_ERROR_HAS(validateError(p), "overlap");
  }
}

TEST(RuntimeProgram, InstructionErrors) {
  using TM = TinyModel;
  {
    Program p = TM::build();
    p.instructions[0].in.push_back(TM::TARGETS);
    EXPECT_ERROR_HAS(validateError(p), "instruction 0 (embedding at test.mlir:1:3)", "expects 2 inputs, has 3");
  }
  {
    Program p = TM::build();
    p.instructions[11].out.pop_back();
    EXPECT_ERROR_HAS(validateError(p), "instruction 11 (adamw", "expects 3 outputs", "has 2");
  }
  {
    Program p = TM::build();
    p.instructions[2].op = "softmax_xent";
    EXPECT_ERROR_HAS(validateError(p), "instruction 2", "unknown op 'softmax_xent'");
  }
  {
    Program p = TM::build();
    p.instructions[1].in[1] = 99;
    EXPECT_ERROR_HAS(validateError(p), "instruction 1", "buffer id 99", "out of range");
  }
  {
    Program p = TM::build();
    p.buffers[TM::TOKENS].dtype = DType::F32; // ids must be i32
    EXPECT_ERROR_HAS(validateError(p), "must be i32");
  }
  {
    Program p = TM::build();
    p.instructions[1].in[1] = TM::TARGETS; // i32 into matmul
    EXPECT_ERROR_HAS(validateError(p), "instruction 1 (matmul", "input 1", "must be f32, bf16 or f16, is i32");
  }
  {
    Program p = TM::build();
    p.buffers[TM::W].shape = {TM::V, TM::C}; // x [B,T,C] @ [V,C]
    EXPECT_ERROR_HAS(validateError(p), "instruction 1 (matmul", "matmul shape mismatch", "inner dimensions 4 and 8");
  }
  {
    Program p = TM::build();
    p.instructions[7].attrs.erase("transpose_a"); // [8,4] @ [8,8]
    EXPECT_ERROR_HAS(validateError(p), "instruction 7 (matmul", "shape mismatch");
  }
  {
    Program p = TM::build();
    p.instructions[8].attrs["transpose_a"] = ProgramBuilder::num(1); // rank-3 a with transpose_a and rank-2 b
    EXPECT_ERROR_HAS(validateError(p), "instruction 8 (matmul", "transpose_a");
  }
  {
    Program p = TM::build();
    p.buffers[TM::LOGITS].shape = {TM::B * TM::T, TM::V}; // output of the linear form must be [B,T,V]
    EXPECT_ERROR_HAS(validateError(p), "instruction 1 (matmul", "output must be [2,4,8]");
  }
  {
    Program p = TM::build();
    // Matmul output on top of its input: forbidden overlap (matmul does not work in place).
    p.buffers[TM::DX].offset = p.buffers[TM::DLOGITS].offset;
    EXPECT_ERROR_HAS(validateError(p), "instruction 8 (matmul", "overlaps input 0", "in place");
  }
  {
    Program p = TM::build();
    p.instructions[11].out = {TM::WTE, TM::V0, TM::M0};
    EXPECT_ERROR_HAS(validateError(p), "instruction 11 (adamw", "in place");
  }
  {
    Program p = TM::build();
    p.buffers[TM::TARGETS].shape = {TM::B, TM::T + 1};
    p.buffers[TM::TARGETS].bytes += TM::B * 4;
    EXPECT_ERROR_HAS(validateError(p), "targets", "[2,4]");
  }
  {
    Program p = TM::build();
    p.loss = TM::LOGITS;
    EXPECT_ERROR_HAS(validateError(p), "loss", "scalar");
  }
  {
    Program p = TM::build();
    p.buffers[TM::X].liveLast = 0; // used by instruction 5
    EXPECT_ERROR_HAS(validateError(p), "instruction 1 (matmul", "outside its live interval");
  }
  {
    Program p = TM::build(); // a tensor-parallel slice copies bytes: one dtype in and out
    p.instructions[5].op = "tp_slice";
    p.instructions[5].out = {TM::DX};
    p.instructions[5].attrs["dim"] = ProgramBuilder::num(1);
    p.buffers[TM::DX].dtype = DType::BF16;
    p.buffers[TM::DX].bytes /= 2;
    p.buffers[TM::DX].liveFirst = 5;
    EXPECT_ERROR_HAS(validateError(p), "instruction 5 (tp_slice", "output dtype bf16 differs from the input's f32");
  }
}

TEST(RuntimeProgram, InPlaceAliasing) {
  // gelu in place onto an input whose last use it is: allowed. Then a later use of the input:
  // rejected.
  ProgramBuilder b(1, 2, 4);
  int64_t tok = b.buffer("tokens", {1, 2}, "input", DType::I32);
  int64_t tgt = b.buffer("targets", {1, 2}, "input", DType::I32);
  int64_t wte = b.param("wte.weight", {4, 4}, 0.02);
  int64_t x = b.buffer("x", {1, 2, 4}, "activation");
  int64_t y = b.buffer("y", {1, 2, 4}, "activation");
  int64_t loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.inst("embedding", {wte, tok}, {x});
  b.inst("gelu", {x}, {y});
  b.inst("cross_entropy", {y, tgt}, {loss});
  Program ok = b.finish({{y, x}});
  EXPECT_EQ(validateError(ok), "");

  ProgramBuilder b2 = b;
  b2.p.instructions.push_back(b.p.instructions[2]);
  b2.p.instructions.back().in[0] = x; // x used after gelu overwrote it
  Program bad = b2.finish({{y, x}});
  EXPECT_ERROR_HAS(validateError(bad), "instruction 1 (gelu", "last use");

  // Same offset for a non-elementwise op: rejected.
  ProgramBuilder b3(1, 2, 4);
  b3.p = b.p;
  b3.p.instructions[1].op = "transpose";
  b3.p.instructions[1].attrs["perm"] = ProgramBuilder::list({0, 1, 2});
  EXPECT_ERROR_HAS(validateError(b3.finish({{y, x}})), "transpose does not work in place");

  // A fused op (bigc-fuse) takes the places its kernel allows: bias_gelu's pre over x, not its y.
  auto fused = [&](int64_t out) {
    ProgramBuilder f(1, 2, 4);
    int64_t ftok = f.buffer("tokens", {1, 2}, "input", DType::I32);
    int64_t ftgt = f.buffer("targets", {1, 2}, "input", DType::I32);
    int64_t fwte = f.param("wte.weight", {4, 4}, 0.02);
    int64_t bias = f.param("b", {4}, 0.02);
    int64_t fx = f.buffer("x", {1, 2, 4}, "activation");
    int64_t pre = f.buffer("pre", {1, 2, 4}, "activation");
    int64_t fy = f.buffer("y", {1, 2, 4}, "activation");
    int64_t s = f.buffer("s", {1, 2, 4}, "activation");
    int64_t floss = f.buffer("loss", {}, "activation");
    f.p.tokenInputs = {ftok}, f.p.targetInputs = {ftgt}, f.p.loss = floss;
    f.inst("embedding", {fwte, ftok}, {fx});
    f.inst("bias_gelu", {fx, bias}, {pre, fy});
    f.inst("add", {pre, fy}, {s});
    f.inst("cross_entropy", {s, ftgt}, {floss});
    return f.finish({{out == 0 ? pre : fy, fx}});
  };
  EXPECT_EQ(validateError(fused(0)), "");
  EXPECT_ERROR_HAS(validateError(fused(1)), "instruction 1 (bias_gelu",
                   "bias_gelu's output 1 may not take the place of input 0");

  // The loss's gradient takes the place of the logits at their last use; a read of the logits
  // after it is refused.
  auto ceGrad = [&](bool readAfter) {
    ProgramBuilder f(1, 2, 4);
    int64_t ftok = f.buffer("tokens", {1, 2}, "input", DType::I32);
    int64_t ftgt = f.buffer("targets", {1, 2}, "input", DType::I32);
    int64_t fwte = f.param("wte.weight", {4, 4}, 0.02);
    int64_t fx = f.buffer("x", {1, 2, 4}, "activation");
    int64_t logits = f.buffer("logits", {1, 2, 4}, "activation");
    int64_t floss = f.buffer("loss", {}, "activation");
    int64_t seed = f.buffer("dloss", {}, "activation_grad");
    int64_t dlogits = f.buffer("dlogits", {1, 2, 4}, "activation_grad");
    int64_t after = f.buffer("after", {1, 2, 4}, "activation_grad");
    f.p.tokenInputs = {ftok}, f.p.targetInputs = {ftgt}, f.p.loss = floss;
    f.inst("embedding", {fwte, ftok}, {fx});
    f.inst("matmul", {fx, fwte}, {logits}).attrs["transpose_b"].num = 1;
    f.inst("cross_entropy", {logits, ftgt}, {floss});
    f.inst("fill", {}, {seed}).attrs["value"].num = 1;
    f.inst("cross_entropy_grad", {logits, ftgt, seed}, {dlogits});
    f.inst("add", {dlogits, readAfter ? logits : dlogits}, {after});
    return f.finish({{dlogits, logits}});
  };
  EXPECT_EQ(validateError(ceGrad(false)), "");
  EXPECT_ERROR_HAS(validateError(ceGrad(true)), "instruction 4 (cross_entropy_grad", "last use");
}

TEST(RuntimeProgram, MatmulForms) {
  auto check = [](std::vector<int64_t> a, std::vector<int64_t> bshape, std::vector<int64_t> c, bool ta, bool tb) {
    ProgramBuilder b(1, 1, 2);
    int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32);
    int64_t tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
    int64_t loss = b.buffer("loss", {}, "activation");
    int64_t A = b.buffer("a", a, "activation"), Bb = b.buffer("b", bshape, "activation"),
            Cc = b.buffer("c", c, "activation");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
    b.inst("fill", {}, {A});
    b.inst("fill", {}, {Bb});
    b.inst("matmul", {A, Bb}, {Cc},
           {{"transpose_a", ProgramBuilder::num(ta)}, {"transpose_b", ProgramBuilder::num(tb)}});
    return validateError(b.finish());
  };
  EXPECT_EQ(check({3, 5}, {5, 7}, {3, 7}, false, false), "");
  EXPECT_EQ(check({5, 3}, {7, 5}, {3, 7}, true, true), "");
  EXPECT_EQ(check({2, 4, 3, 5}, {5, 7}, {2, 4, 3, 7}, false, false), "");
  EXPECT_EQ(check({2, 4, 3, 5}, {7, 5}, {2, 4, 3, 7}, false, true), "");
  EXPECT_EQ(check({2, 3, 5}, {2, 5, 7}, {2, 3, 7}, false, false), "");
  EXPECT_EQ(check({2, 5, 3}, {2, 7, 5}, {2, 3, 7}, true, true), "");
  EXPECT_ERROR_HAS(check({2, 3, 5}, {3, 5, 7}, {2, 3, 7}, false, false), "leading dimensions differ");
  EXPECT_ERROR_HAS(check({3, 5}, {2, 5, 7}, {2, 3, 7}, false, false), "unsupported ranks");
  EXPECT_ERROR_HAS(check({3, 5}, {5, 7}, {3, 8}, false, false), "output must be [3,7]");
}
