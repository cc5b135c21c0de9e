// safetensors read/write and weight loading.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/safetensors.h"
#include "runtime_test_programs.h"

using namespace bigc::rt;
namespace st = bigc::rt::safetensors;
using TM = bigc::rt::testing::TinyModel;

namespace {
std::string parseError(const std::string &bytes) {
  try {
    st::parse(bytes, "w.safetensors");
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}
// A file from a header JSON and a data section.
std::string handMade(const std::string &header, const std::string &data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + header + data;
}
st::File sample() {
  st::File f;
  f.metadata["format"] = "pt";
  float a[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  f.tensors.push_back(st::Tensor::fromF32("b.weight", {2, 3}, a));
  float s = 42;
  f.tensors.push_back(st::Tensor::fromF32("a.scalar", {}, &s));
  st::Tensor i;
  i.name = "ids";
  i.dtype = DType::I32;
  i.shape = {3};
  int32_t ids[3] = {-1, 0, 70000};
  i.data.resize(12);
  std::memcpy(i.data.data(), ids, 12);
  f.tensors.push_back(i);
  st::Tensor h;
  h.name = "half";
  h.dtype = DType::BF16;
  h.shape = {2};
  uint16_t bf[2] = {0x3f80, 0xc000}; // 1.0, -2.0
  h.data.resize(4);
  std::memcpy(h.data.data(), bf, 4);
  f.tensors.push_back(h);
  st::Tensor f16;
  f16.name = "f16";
  f16.dtype = DType::F16;
  f16.shape = {3};
  uint16_t hv[3] = {0x3c00, 0xc000, 0x3555}; // 1, -2, ~0.333
  f16.data.resize(6);
  std::memcpy(f16.data.data(), hv, 6);
  f.tensors.push_back(f16);
  return f;
}
} // namespace

TEST(RuntimeSafetensors, RoundTrip) {
  std::string dir = bigc::rt::testing::tempDir();
  st::File f = sample();
  st::write(dir + "/s.safetensors", f);
  st::File g = st::read(dir + "/s.safetensors");
  EXPECT_EQ(g.metadata.at("format"), "pt");
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto &t : f.tensors) {
    const st::Tensor *u = g.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, t.dtype);
    EXPECT_EQ(u->shape, t.shape);
    EXPECT_EQ(u->data, t.data);
  }
  EXPECT_EQ(g.find("a.scalar")->toF32(), std::vector<float>{42});
  EXPECT_EQ(g.find("half")->toF32(), (std::vector<float>{1, -2}));
  auto h = g.find("f16")->toF32();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_NEAR(h[2], 1.0 / 3, 1e-3);
  EXPECT_EQ(g.find("ids")->toF32(), (std::vector<float>{-1, 0, 70000}));

  // The layout: 8-byte length, JSON header padded to 8, offsets relative to the data section.
  std::string bytes = st::serialize(f);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["b.weight"]["dtype"], "F32");
  EXPECT_EQ(header["b.weight"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  uint64_t begin = header["b.weight"]["data_offsets"][0];
  float first;
  std::memcpy(&first, bytes.data() + 8 + n + begin, 4);
  EXPECT_EQ(first, 1.0f);
}

TEST(RuntimeSafetensors, CorruptFilesAreRejected) {
  std::string good = st::serialize(sample());
  ASSERT_EQ(parseError(good), "");
  EXPECT_NE(parseError("abc").find("8-byte"), std::string::npos);

  std::string bigLen = good;
  bigLen[5] = 0x7f; // header length far beyond the file
  EXPECT_NE(parseError(bigLen).find("header length"), std::string::npos) << parseError(bigLen);

  std::string m = parseError(good.substr(0, good.size() - 3));
  EXPECT_NE(m.find("past"), std::string::npos) << m;

  m = parseError(
      handMade("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", std::string(8, '\0')));
  EXPECT_NE(m.find("tensor 'x'"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 8"), std::string::npos) << m;

  m = parseError(handMade("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                          " \"y\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                          std::string(12, '\0')));
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;

  m = parseError(
      handMade("{\"x\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", std::string(8, '\0')));
  EXPECT_NE(m.find("dtype 'F64'"), std::string::npos) << m;

  m = parseError(handMade("{\"x\": {\"dtype\": \"F32\", \"shape\": [1]", std::string(4, '\0')));
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;

  m = parseError(handMade("{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", std::string(4, '\0')));
  EXPECT_NE(m.find("data_offsets"), std::string::npos) << m;
}

TEST(RuntimeSafetensors, LoadWeightsChecksNamesAndShapes) {
  Executor ex(TM::build(), 1);
  st::File w = st::weightsOf(ex);
  ASSERT_EQ(w.tensors.size(), 2u);
  EXPECT_EQ(w.tensors[0].name, "wte.weight");
  EXPECT_EQ(w.tensors[1].name, "head.weight");

  Executor other(TM::build(), 2);
  ASSERT_NE(0, std::memcmp(other.f32(TM::WTE), ex.f32(TM::WTE), TM::V * TM::C * 4));
  st::loadWeights(other, w, "w.safetensors");
  EXPECT_EQ(0, std::memcmp(other.f32(TM::WTE), ex.f32(TM::WTE), TM::V * TM::C * 4));
  EXPECT_EQ(0, std::memcmp(other.f32(TM::W), ex.f32(TM::W), TM::V * TM::C * 4));

  auto err = [&](const st::File &f) {
    try {
      st::loadWeights(other, f, "w.safetensors");
    } catch (const UserError &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  st::File missing = w;
  missing.tensors.pop_back();
  std::string m = err(missing);
  EXPECT_NE(m.find("'head.weight' [4,8] is missing"), std::string::npos) << m;

  st::File wrong = w;
  wrong.tensors[0].shape = {TM::C, TM::V};
  m = err(wrong);
  EXPECT_NE(m.find("'wte.weight': expected shape [8,4], found [4,8]"), std::string::npos) << m;

  st::File extra = w;
  float z = 0;
  extra.tensors.push_back(st::Tensor::fromF32("lm_head.weight", {1}, &z));
  m = err(extra);
  EXPECT_NE(m.find("'lm_head.weight' [1] is not a parameter"), std::string::npos) << m;

  // Hugging Face extras: the `transformer.` prefix and attention mask buffers.
  st::File hf = w;
  hf.tensors[0].name = "transformer.wte.weight";
  hf.tensors.push_back(st::Tensor::fromF32("h.0.attn.bias", {1}, &z));
  EXPECT_EQ(err(hf), "");
}
