// The emitter (lib/emit/Emitter.cpp) through the whole pipeline on a GPT that `bigc gen gpt`
// writes: what the program says is checked against what the model text and the generator's
// configuration say independently — parameter names and shapes (the Hugging Face GPT-2 layout),
// their count (the generator's formula), the inputs and the loss, source locations pointing at the
// model's lines, AdamW's attributes (decay only on matrices), every buffer inside its arena at a
// 64-byte offset with the bytes its shape and dtype need, and micro-batches.
#include "bigc/Driver/Compile.h"
#include "bigc/Gen/GptGen.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Shape = std::vector<int64_t>;

bigc::gen::GptConfig smallGpt() {
  bigc::gen::GptConfig c = bigc::gen::gptPreset("tiny");
  c.layers = 2, c.hidden = 64, c.heads = 4, c.vocab = 96, c.seq = 16, c.batch = 3;
  return c;
}

bigc::format::Program compile(const std::string &text, bigc::CompileOptions o = {}) {
  std::string diags;
  bigc::format::Program p = bigc::compileSource(text, "model.mlir", o, &diags);
  EXPECT_EQ(diags, "");
  return p;
}

// The line (1-based) of the first occurrence of `needle` in `text`.
int lineOf(const std::string &text, const std::string &needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) return -1;
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += text[i] == '\n';
  return line;
}

} // namespace

TEST(Emitter, ParametersAreTheModelsByNameShapeAndCount) {
  const auto c = smallGpt();
  const int64_t C = c.hidden;
  std::map<std::string, Shape> want = {
      {"wte.weight", {c.vocab, C}}, {"wpe.weight", {c.seq, C}}, {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    want[h + "ln_1.weight"] = {C}, want[h + "ln_1.bias"] = {C};
    want[h + "ln_2.weight"] = {C}, want[h + "ln_2.bias"] = {C};
    want[h + "attn.c_attn.weight"] = {C, 3 * C}, want[h + "attn.c_attn.bias"] = {3 * C};
    want[h + "attn.c_proj.weight"] = {C, C}, want[h + "attn.c_proj.bias"] = {C};
    want[h + "mlp.c_fc.weight"] = {C, 4 * C}, want[h + "mlp.c_fc.bias"] = {4 * C};
    want[h + "mlp.c_proj.weight"] = {4 * C, C}, want[h + "mlp.c_proj.bias"] = {C};
  }
  const bigc::format::Program p = compile(bigc::gen::generateGptMlir(c));
  std::map<std::string, Shape> got;
  int64_t count = 0;
  for (const auto &b : p.buffers)
    if (b.role == "param") {
      EXPECT_TRUE(got.emplace(b.name, b.shape).second) << "parameter " << b.name << " twice";
      count += b.numel();
      EXPECT_EQ(b.liveFirst, 0) << b.name;
      EXPECT_EQ(b.liveLast, int64_t(p.instructions.size()) - 1) << b.name << " is persistent";
    }
  EXPECT_EQ(got, want);
  EXPECT_EQ(count, bigc::gen::gptParameterCount(c));
}

TEST(Emitter, InputsLossAndConfigurationAreTheModels) {
  const auto c = smallGpt();
  bigc::CompileOptions o;
  o.microBatches = 2;
  const bigc::format::Program p = compile(bigc::gen::generateGptMlir(c), o);
  EXPECT_EQ(p.batch, c.batch);
  EXPECT_EQ(p.seq, c.seq);
  EXPECT_EQ(p.vocab, c.vocab);
  EXPECT_EQ(p.microBatches, 2);
  ASSERT_EQ(p.tokenInputs.size(), 2u); // one token and one target buffer per micro-batch
  ASSERT_EQ(p.targetInputs.size(), 2u);
  for (int64_t id : p.tokenInputs) {
    EXPECT_EQ(p.buffers[size_t(id)].dtype, bigc::format::DType::I32);
    EXPECT_EQ(p.buffers[size_t(id)].shape, (Shape{c.batch, c.seq}));
  }
  ASSERT_GE(p.loss, 0);
  EXPECT_EQ(p.buffers[size_t(p.loss)].dtype, bigc::format::DType::F32);
  EXPECT_EQ(p.buffers[size_t(p.loss)].shape, Shape{});
}

TEST(Emitter, LocationsPointAtTheModelsLines) {
  const std::string text = bigc::gen::generateGptMlir(smallGpt());
  const bigc::format::Program p = compile(text);
  const int lines = lineOf(text + "\n\x01", "\x01");
  const int embedding = lineOf(text, "bigc.embedding");
  ASSERT_GT(embedding, 0);
  bool sawEmbedding = false;
  for (const auto &ins : p.instructions) {
    ASSERT_EQ(ins.loc.rfind("model.mlir:", 0), 0u) << ins.op << " at '" << ins.loc << "'";
    const int line = std::stoi(ins.loc.substr(11));
    EXPECT_GE(line, 1);
    EXPECT_LT(line, lines);
    if (ins.op == "embedding" && ins.phase == "forward" && !sawEmbedding) {
      sawEmbedding = true;
      EXPECT_EQ(line, embedding) << "the first forward embedding comes from the model's first bigc.embedding";
    }
  }
  EXPECT_TRUE(sawEmbedding);
}

TEST(Emitter, AdamWOnEveryParameterWithDecayOnlyOnMatrices) {
  bigc::CompileOptions o;
  o.adamw.lr = 1e-3, o.adamw.beta1 = 0.8, o.adamw.beta2 = 0.99, o.adamw.eps = 1e-6, o.adamw.weightDecay = 0.05;
  const bigc::format::Program p = compile(bigc::gen::generateGptMlir(smallGpt()), o);
  std::map<std::string, int> updates;
  for (const auto &ins : p.instructions) {
    if (ins.op != "adamw") continue;
    const auto &param = p.buffers[size_t(ins.in.at(0))];
    ++updates[param.name];
    EXPECT_EQ(ins.out.at(0), ins.in.at(0)) << "updated in place";
    EXPECT_DOUBLE_EQ(ins.num("lr", 0), 1e-3);
    EXPECT_DOUBLE_EQ(ins.num("beta1", 0), 0.8);
    EXPECT_DOUBLE_EQ(ins.num("beta2", 0), 0.99);
    EXPECT_DOUBLE_EQ(ins.num("eps", 0), 1e-6);
    EXPECT_DOUBLE_EQ(ins.num("weight_decay", -1), param.shape.size() >= 2 ? 0.05 : 0.0) << param.name;
  }
  int params = 0;
  for (const auto &b : p.buffers)
    if (b.role == "param") {
      ++params;
      EXPECT_EQ(updates[b.name], 1) << b.name;
    }
  EXPECT_EQ(int(updates.size()), params);
  EXPECT_DOUBLE_EQ(p.optimizer.lr, 1e-3);
}

TEST(Emitter, EveryBufferIsInsideItsArenaWithTheBytesItsShapeNeeds) {
  bigc::CompileOptions o;
  o.offload = mlir::bigc::Offload::CPU; // two spaces
  const bigc::format::Program p = compile(bigc::gen::generateGptMlir(smallGpt()), o);
  std::map<std::string, int64_t> arena;
  for (const auto &s : p.spaces) arena[s.name] = s.arenaBytes;
  ASSERT_EQ(arena.size(), 2u);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const auto &b = p.buffers[i];
    EXPECT_EQ(b.id, int64_t(i));
    ASSERT_TRUE(arena.count(b.space)) << b.name;
    EXPECT_EQ(b.offset % 64, 0) << b.name;
    EXPECT_LE(b.offset + b.bytes, arena[b.space]) << b.name;
    EXPECT_EQ(b.bytes, b.numel() * bigc::format::dtypeSize(b.dtype)) << b.name;
    EXPECT_LE(b.liveFirst, b.liveLast) << b.name;
  }
  for (const auto &ins : p.instructions) {
    for (int64_t id : ins.in) EXPECT_LT(size_t(id), p.buffers.size());
    for (int64_t id : ins.out) EXPECT_LT(size_t(id), p.buffers.size());
  }
}
