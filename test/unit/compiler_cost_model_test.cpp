// The cost model (lib/analysis/CostModel.cpp) against counts made independently: FLOPs of a GPT's
// forward against the transformer FLOP formula (Kaplan et al. 2020, "Scaling Laws for Neural
// Language Models", Table 1: 2N per token for the weights plus the attention's 2 n_layer n_ctx
// d_model, here with causal masking counted on the (T+1)/2 keys each query sees on average), the
// (query, key) pairs of causal and sliding-window attention by enumerating them, bytes by the
// tensor types, and the roofline's max of the two limits.
#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcDialect.h"
#include "bigc/Gen/GptGen.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>

using mlir::Operation;
namespace cm = mlir::bigc;

namespace {

struct Parsed {
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  explicit Parsed(const std::string &text) {
    ctx.getOrLoadDialect<mlir::bigc::BigcDialect>();
    ctx.getOrLoadDialect<mlir::func::FuncDialect>();
    module = mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&ctx));
  }
  mlir::func::FuncOp forward() { return module->lookupSymbol<mlir::func::FuncOp>("forward"); }
  Operation *first(llvm::StringRef name) {
    Operation *found = nullptr;
    module->walk([&](Operation *op) {
      if (!found && op->getName().getStringRef() == name) found = op;
    });
    return found;
  }
};

// Causal (query, key) pairs of one head over T positions, with an optional window: enumerated.
int64_t enumeratePairs(int64_t T, int64_t window) {
  int64_t n = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j)
      if (window == 0 || i - window < j) ++n;
  return n;
}

} // namespace

TEST(CostModel, GptForwardFlopsFollowTheTransformerFormula) {
  ::bigc::gen::GptConfig c = ::bigc::gen::gptPreset("tiny");
  c.layers = 3, c.hidden = 128, c.heads = 4, c.vocab = 512, c.seq = 64, c.batch = 2;
  Parsed p(::bigc::gen::generateGptMlir(c));
  ASSERT_TRUE(p.module);
  ASSERT_TRUE(p.forward());
  const int64_t L = c.layers, C = c.hidden, V = c.vocab, T = c.seq, B = c.batch, tokens = B * T;
  // Weights: 2 FLOPs per weight of every matmul per token (12 L C^2 in the blocks, V C in the
  // tied LM head); attention: QK^T and PV, 2 x 2 C FLOPs per (query, key) pair and layer.
  const int64_t matmuls = 2 * tokens * (12 * L * C * C + V * C);
  const int64_t attention = L * B * 4 * C * (T * (T + 1) / 2);
  const cm::OpCost total = cm::functionCost(p.forward()).total();
  EXPECT_TRUE(total.known);
  // The rest (layernorm, GELU, softmax, cross-entropy, adds) is elementwise: a few percent here.
  EXPECT_GE(total.flops, matmuls + attention);
  EXPECT_LE(double(total.flops), 1.10 * double(matmuls + attention))
      << "elementwise FLOPs: " << total.flops - matmuls - attention;
}

TEST(CostModel, MatmulIsTwoMnkAndItsBytesAreItsTypes) {
  Parsed p(R"(
func.func @f(%a: tensor<4x32x64xbf16>, %b: tensor<64x48xbf16>) -> tensor<4x32x48xbf16> {
  %c = bigc.matmul %a, %b : (tensor<4x32x64xbf16>, tensor<64x48xbf16>) -> tensor<4x32x48xbf16>
  return %c : tensor<4x32x48xbf16>
})");
  ASSERT_TRUE(p.module);
  Operation *mm = p.first("bigc.matmul");
  ASSERT_TRUE(mm);
  const cm::OpCost cost = cm::opCost(mm);
  EXPECT_EQ(cost.flops, 2 * (4 * 32) * 48 * 64);
  EXPECT_EQ(cost.bytesRead, (4 * 32 * 64 + 64 * 48) * 2); // bf16: 2 bytes
  EXPECT_EQ(cost.bytesWritten, 4 * 32 * 48 * 2);
}

TEST(CostModel, AttentionCountsTheCausalAndWindowedPairs) {
  for (int64_t window : {0, 5, 16, 40}) {
    const int64_t B = 2, T = 24, H = 4, Hkv = 2, D = 8;
    std::string w = window ? ", window = " + std::to_string(window) + " : i64" : "";
    std::string q = "tensor<2x24x32xf32>", kv = "tensor<2x24x16xf32>", lse = "tensor<2x4x24xf32>";
    Parsed p("func.func @f(%q: " + q + ", %k: " + kv + ", %v: " + kv + ") -> " + q + " {\n" +
             "  %o, %lse = bigc.gqa_attention %q, %k, %v {heads = 4 : i64, kv_heads = 2 : i64" + w + "} : (" + q +
             ", " + kv + ", " + kv + ") -> (" + q + ", " + lse + ")\n  return %o : " + q + "\n}");
    ASSERT_TRUE(p.module) << "window " << window;
    const int64_t pairs = B * H * enumeratePairs(T, window);
    const cm::OpCost cost = cm::opCost(p.first("bigc.gqa_attention"));
    EXPECT_EQ(cost.flops, 4 * pairs * D + 6 * pairs) << "window " << window;
    EXPECT_EQ(cost.bytesRead, (B * T * H * D + 2 * B * T * Hkv * D) * 4);
    EXPECT_EQ(cost.bytesWritten, (B * T * H * D + B * H * T) * 4);
  }
}

TEST(CostModel, ReshapeIsFreeAndUnknownOpsSayTheyAreUnknown) {
  Parsed p(R"(
func.func @f(%a: tensor<4x32xf32>) -> tensor<128xf32> {
  %r = bigc.reshape %a : (tensor<4x32xf32>) -> tensor<128xf32>
  return %r : tensor<128xf32>
})");
  ASSERT_TRUE(p.module);
  const cm::OpCost r = cm::opCost(p.first("bigc.reshape"));
  EXPECT_EQ(r.flops, 0);
  EXPECT_EQ(r.bytes(), 0);
  EXPECT_TRUE(r.known);
  const cm::OpCost ret = cm::opCost(p.first("func.return"));
  EXPECT_FALSE(ret.known);
}

TEST(CostModel, RooflineIsTheSlowerOfComputeAndMemory) {
  cm::OpCost c;
  c.flops = 1000, c.bytesRead = 300, c.bytesWritten = 100;
  EXPECT_DOUBLE_EQ(cm::rooflineSeconds(c, 100.0, 1000.0), 10.0); // compute-bound
  EXPECT_DOUBLE_EQ(cm::rooflineSeconds(c, 1000.0, 10.0), 40.0);  // memory-bound
  EXPECT_DOUBLE_EQ(cm::rooflineSeconds(c, 0.0, 0.0), 0.0);       // unknown rates
}
