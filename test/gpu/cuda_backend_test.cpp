// The CUDA backend against the CPU backend (ctest label `gpu`; every test skips with "skipped: no
// GPU" where none is visible). Each kernel runs inside a small hand-built program, once on the
// CPU executor and once on the CUDA engine, from the same deterministic initial values; outputs
// are compared as max |cuda - cpu| / max |cpu|:
//   - fp32: 1e-5 (GEMMs sum in another order; cuBLASLt runs fp32 without TF32);
//   - bf16: 1.6e-2 — both backends compute in fp32 and round each result once to bf16 (8
//     significant bits, half an ulp = 2^-9 relative); fp32 differences before the rounding can
//     move a value to the neighbouring bf16 value, so results may differ by one bf16 ulp of the
//     largest element (2^-8 = 3.9e-3), and operands read from bf16 results of earlier
//     instructions carry the same: 4 ulps bounds a chain of two rounded ops, 4 * 2^-8 = 1.6e-2;
//   - attention on tensor cores additionally rounds the probabilities (and dS in the backward)
//     to 16 bits before the second product, as FlashAttention does: 3e-2 for bf16.
// The LLaMA family's kernels (rmsnorm, rope, silu, swiglu, geglu, gqa_attention, exact gelu) use the same
// bounds: they read their operands in the storage type, compute in fp32 as the CPU kernels do and
// round once. In fp32 the differences are CUDA's expf/erff (at most 2 ulps, the CUDA math API's
// stated bounds, against glibc's correctly rounded-or-nearly ones), FMA contraction and the order
// of sums (row sums of C <= 1000 terms, attention's dot products and key sums over <= 300 keys),
// each a few 1e-7 relative to the largest element: 1e-5 leaves a factor of ten. rope's angles are
// the same f32 products and their cos/sin are computed in double and rounded to f32 on both (equal
// but for a rare last-bit tie), so rope differs by ~1 ulp only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/kernels.h"
#include "runtime_test_programs.h"

#include "../../runtime/backends/cuda/kernels.h"

#include <cuda_runtime_api.h>

using namespace bigc::rt;
using namespace bigc::rt::testing;

namespace {

#define REQUIRE_GPU()                                                                                                  \
  do {                                                                                                                 \
    std::string why_;                                                                                                  \
    if (!cudaDeviceVisible(&why_)) GTEST_SKIP() << "skipped: no GPU (" << why_ << ")";                                 \
  } while (0)

// The largest error relative to the reference's largest value; the absolute error where that value
// is at most absBelow (a result that is zero but for rounding, compared to inputs of order one).
double relErr(const std::vector<float> &got, const std::vector<float> &want, double absBelow = 0) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    err = std::max(err, double(std::fabs(got[i] - want[i])));
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) return INFINITY;
  }
  return scale > absBelow ? err / scale : err;
}

double tolFor(DType t) { return t == DType::F32 ? 1e-5 : 1.6e-2; }

// A program whose inputs are persistent (param) buffers, initialised identically on both
// backends; every output is compared.
struct OneOp {
  ProgramBuilder b{1, 1, 2};
  std::vector<int64_t> outputs;
  double absBelow = 0; // relErr's: outputs whose reference is at most this are compared absolutely
  int64_t tok, tgt, loss;
  OneOp() {
    tok = b.buffer("tokens", {1, 1}, "input", DType::I32);
    tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
    loss = b.buffer("loss", {}, "activation");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  }
  int64_t input(const std::string &name, std::vector<int64_t> shape, DType t = DType::F32, double std = 1.0) {
    return b.buffer(name, std::move(shape), "param", t, Init{"normal", std});
  }
  int64_t output(const std::string &name, std::vector<int64_t> shape, DType t = DType::F32) {
    int64_t id = b.buffer(name, std::move(shape), "activation", t);
    outputs.push_back(id);
    return id;
  }
  // Runs both backends (one step), compares every output.
  void check(double tol, const std::map<int64_t, int64_t> &alias = {},
             const std::function<void(Engine &)> &setup = nullptr) {
    b.inst("fill", {}, {loss}, {{"value", num(0)}});
    Program p = b.finish(alias);
    Executor cpu(p, 7);
    auto gpu = makeCudaEngine(p, 7);
    if (setup) setup(cpu), setup(*gpu);
    int32_t z = 0;
    cpu.step(&z, &z);
    gpu->step(&z, &z);
    for (int64_t id : outputs) {
      double e = relErr(gpu->readF32(id), cpu.readF32(id), absBelow);
      EXPECT_LE(e, tol) << "output '" << p.buffers[size_t(id)].name << "' " << dtypeName(p.buffers[size_t(id)].dtype);
    }
  }
};

const DType kTypes[] = {DType::F32, DType::BF16, DType::F16};

// n token (and target) ids spread over a vocabulary of V: i * 37 mod V.
std::vector<int32_t> spreadIds(size_t n, int64_t V) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = int32_t((int64_t(i) * 37) % V);
  return ids;
}

TEST(CudaKernels, Elementwise) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    int64_t a = o.input("a", {3, 5, 67}, t), c = o.input("c", {3, 5, 67}, t), bias = o.input("bias", {67}, t);
    int64_t add = o.output("add", {3, 5, 67}, t), mul = o.output("mul", {3, 5, 67}, t);
    int64_t ba = o.output("bias_add", {3, 5, 67}, t), sc = o.output("scale", {3, 5, 67}, t);
    int64_t ge = o.output("gelu", {3, 5, 67}, t), gg = o.output("gelu_grad", {3, 5, 67}, t);
    int64_t fi = o.output("fill", {7, 3}, t), rs = o.output("reduce_sum", {67}, t);
    o.b.inst("add", {a, c}, {add});
    o.b.inst("mul", {a, c}, {mul});
    o.b.inst("bias_add", {a, bias}, {ba});
    o.b.inst("scale", {a}, {sc}, {{"factor", num(-0.37)}});
    o.b.inst("gelu", {a}, {ge});
    o.b.inst("gelu_grad", {a, c}, {gg});
    o.b.inst("fill", {}, {fi}, {{"value", num(2.5)}});
    o.b.inst("reduce_sum", {a}, {rs});
    o.check(tolFor(t));
  }
}

TEST(CudaKernels, InPlaceGelu) {
  REQUIRE_GPU();
  OneOp o;
  int64_t a = o.input("a", {1000}, DType::BF16);
  int64_t y = o.b.buffer("y", {1000}, "activation", DType::BF16);
  int64_t z = o.output("z", {1000}, DType::BF16);
  o.b.inst("scale", {a}, {y}, {{"factor", num(2.0)}});
  o.b.inst("gelu", {y}, {y});
  o.b.inst("scale", {y}, {z}, {{"factor", num(1.0)}});
  o.check(tolFor(DType::BF16));
}

TEST(CudaKernels, CastsAndMixedDtypes) {
  REQUIRE_GPU();
  OneOp o;
  int64_t a = o.input("a", {4, 33}, DType::F32), h = o.input("h", {4, 33}, DType::BF16);
  int64_t f = o.input("f", {4, 33}, DType::F16);
  for (DType from : {DType::F32, DType::BF16, DType::F16})
    for (DType to : kTypes) {
      int64_t src = from == DType::F32 ? a : from == DType::BF16 ? h : f;
      int64_t y = o.output(std::string("cast_") + dtypeName(from) + "_" + dtypeName(to), {4, 33}, to);
      o.b.inst("cast", {src}, {y});
    }
  // Operands of three dtypes in one add: staged through fp32.
  int64_t mixed = o.output("mixed", {4, 33}, DType::F16);
  o.b.inst("add", {a, h}, {mixed});
  int64_t mixedMm = o.output("mixed_matmul", {4, 4}, DType::F32);
  o.b.inst("matmul", {h, f}, {mixedMm}, {{"transpose_b", num(1)}});
  o.check(4e-3); // one rounding to the output type after the same fp32 values
}

TEST(CudaKernels, Layout) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    int64_t x = o.input("x", {2, 3, 4, 5}, t);
    int64_t tr = o.output("transpose", {4, 2, 5, 3}, t);
    o.b.inst("transpose", {x}, {tr}, {{"perm", ProgramBuilder::list({2, 0, 3, 1})}});
    int64_t s0 = o.output("s0", {2, 1, 4, 5}, t), s1 = o.output("s1", {2, 1, 4, 5}, t),
            s2 = o.output("s2", {2, 1, 4, 5}, t);
    o.b.inst("split", {x}, {s0, s1, s2}, {{"axis", num(1)}});
    int64_t cat = o.output("concat", {2, 3, 4, 5}, t);
    o.b.inst("concat", {s2, s0, s1}, {cat}, {{"axis", num(1)}});
    int64_t rs = o.output("reshape", {6, 20}, t);
    o.b.inst("reshape", {x}, {rs});
    o.check(0.0); // data movement is exact
  }
}

TEST(CudaKernels, Matmul) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    // 2-D with every transpose combination, a linear layer, a batched product.
    int64_t a = o.input("a", {37, 53}, t), aT = o.input("aT", {53, 37}, t);
    int64_t b = o.input("b", {53, 29}, t), bT = o.input("bT", {29, 53}, t);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        int64_t c = o.output("c" + std::to_string(ta) + std::to_string(tb), {37, 29}, t);
        o.b.inst("matmul", {ta ? aT : a, tb ? bT : b}, {c}, {{"transpose_a", num(ta)}, {"transpose_b", num(tb)}});
      }
    int64_t x = o.input("x", {3, 16, 53}, t);
    int64_t lin = o.output("linear", {3, 16, 29}, t);
    o.b.inst("matmul", {x, b}, {lin});
    int64_t p = o.input("p", {2, 3, 16, 24}, t), q = o.input("q", {2, 3, 40, 24}, t);
    int64_t bat = o.output("batched", {2, 3, 16, 40}, t);
    o.b.inst("matmul", {p, q}, {bat}, {{"transpose_b", num(1)}});
    o.check(tolFor(t));
  }
}

TEST(CudaKernels, MatmulThenBiasAddInPlaceFusesIntoTheEpilogue) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    int64_t x = o.input("x", {4, 32, 64}, t), w = o.input("w", {64, 96}, t), bias = o.input("bias", {96}, t);
    int64_t y = o.b.buffer("y", {4, 32, 96}, "activation", t);
    int64_t yb = o.output("y_plus_bias", {4, 32, 96}, t);
    int64_t z = o.output("z", {4, 32, 96}, t);
    o.b.inst("matmul", {x, w}, {y});
    o.b.inst("bias_add", {y, bias}, {yb});
    o.b.inst("gelu", {yb}, {z});
    o.check(tolFor(t), {{yb, y}});
  }
}

// The fused pairs of bigc-fuse against the CPU backend's (which equal the unfused pairs bit for bit:
// test/e2e/fuse.sh), each dtype: the norms with a second input, the norm gradients with the
// residual's, bias + GELU (tanh and exact) and GELU's gradient with the bias gradient; then the
// in-place forms (sum over a, dx over r, pre over x) and a matmul whose bias_gelu becomes the
// GELU_AUX_BIAS epilogue.
TEST(CudaKernels, FusedPairs) {
  REQUIRE_GPU();
  // Rows of 200 (the kernels' 16-byte vectors) and 203 (one element at a time); 3 x 70 rows: the
  // column sums in 4 chunks.
  for (DType t : kTypes)
    for (int64_t C : {int64_t(200), int64_t(203)}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " C=" + std::to_string(C));
      OneOp o;
      const int64_t B = 3, T = 70;
      int64_t a = o.input("a", {B, T, C}, t, 2.0), r = o.input("r", {B, T, C}, t), w = o.input("w", {C}, t);
      int64_t bb = o.input("b", {C}, t), dy = o.input("dy", {B, T, C}, t);
      int64_t s = o.output("s", {B, T, C}, t), y = o.output("y", {B, T, C}, t);
      int64_t mean = o.output("mean", {B, T}), rstd = o.output("rstd", {B, T});
      int64_t s2 = o.output("s2", {B, T, C}, t), y2 = o.output("y2", {B, T, C}, t), rstd2 = o.output("rstd2", {B, T});
      int64_t g = o.output("g", {B, T, C}, t), dw = o.output("dw", {C}, t), db = o.output("db", {C}, t);
      int64_t g2 = o.output("g2", {B, T, C}, t), dw2 = o.output("dw2", {C}, t);
      o.b.inst("add_layernorm", {a, r, w, bb}, {s, y, mean, rstd}, {{"eps", num(1e-5)}});
      o.b.inst("add_rmsnorm", {a, r, w}, {s2, y2, rstd2}, {{"eps", num(1e-6)}});
      o.b.inst("layernorm_grad_add", {dy, s, w, mean, rstd, r}, {g, dw, db});
      o.b.inst("rmsnorm_grad_add", {dy, s2, w, rstd2, r}, {g2, dw2});
      for (int exact : {0, 1}) {
        const std::string k = exact ? "_exact" : "";
        int64_t pre = o.output("pre" + k, {B, T, C}, t), ge = o.output("gelu" + k, {B, T, C}, t);
        int64_t gd = o.output("dpre" + k, {B, T, C}, t), gdb = o.output("dbias" + k, {C}, t);
        o.b.inst("bias_gelu", {a, bb}, {pre, ge},
                 exact ? std::map<std::string, Attr>{{"exact", num(1)}} : std::map<std::string, Attr>{});
        o.b.inst("gelu_grad_bias", {pre, dy}, {gd, gdb},
                 exact ? std::map<std::string, Attr>{{"exact", num(1)}} : std::map<std::string, Attr>{});
      }
      o.check(tolFor(t));
    }
  for (DType t : kTypes) { // in place; the matmul + bias_gelu epilogue (N = 96: a multiple of 8)
    SCOPED_TRACE(std::string("in place, ") + dtypeName(t));
    OneOp o;
    int64_t x = o.input("x", {4, 32, 64}, t), wm = o.input("wm", {64, 96}, t), bias = o.input("bias", {96}, t);
    int64_t r = o.input("r", {4, 32, 64}, t), w = o.input("w", {64}, t), bb = o.input("b", {64}, t);
    int64_t dy = o.input("dy", {4, 32, 64}, t);
    int64_t h = o.b.buffer("h", {4, 32, 96}, "activation", t);
    int64_t pre = o.output("pre", {4, 32, 96}, t), ge = o.output("gelu", {4, 32, 96}, t);
    int64_t a = o.b.buffer("a", {4, 32, 64}, "activation", t), rr = o.b.buffer("rr", {4, 32, 64}, "activation", t);
    int64_t s = o.output("s", {4, 32, 64}, t), y = o.output("y", {4, 32, 64}, t);
    int64_t mean = o.output("mean", {4, 32}), rstd = o.output("rstd", {4, 32});
    int64_t g = o.output("g", {4, 32, 64}, t), dw = o.output("dw", {64}, t), db = o.output("db", {64}, t);
    o.b.inst("matmul", {x, wm}, {h});
    o.b.inst("bias_gelu", {h, bias}, {pre, ge});
    o.b.inst("scale", {x}, {a}, {{"factor", num(1.0)}});
    o.b.inst("scale", {r}, {rr}, {{"factor", num(0.5)}});
    o.b.inst("add_layernorm", {a, r, w, bb}, {s, y, mean, rstd}, {{"eps", num(1e-5)}});
    o.b.inst("layernorm_grad_add", {dy, s, w, mean, rstd, rr}, {g, dw, db});
    o.check(tolFor(t), {{pre, h}, {s, a}, {g, rr}});
  }
}

TEST(CudaKernels, MatmulWithUnalignedRowsRunsInChunks) {
  REQUIRE_GPU();
  // An LM head's shapes with an odd vocabulary (rows of 4099 elements are not 16-byte aligned):
  // logits = x W^T, dx = dlogits W, dW = dlogits^T x, through padded staging in chunks (a small
  // staging budget forces several chunks and a shorter last one).
  setenv("BIGC_GEMM_STAGING_MB", "4", 1);
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    const int64_t M = 2048, V = 4099, C = 96;
    int64_t x = o.input("x", {M, C}, t), w = o.input("w", {V, C}, t), dl = o.input("dlogits", {M, V}, t);
    int64_t logits = o.output("logits", {M, V}, t), dx = o.output("dx", {M, C}, t), dw = o.output("dw", {V, C}, t);
    o.b.inst("matmul", {x, w}, {logits}, {{"transpose_b", num(1)}});
    o.b.inst("matmul", {dl, w}, {dx});
    o.b.inst("matmul", {dl, x}, {dw}, {{"transpose_a", num(1)}});
    o.check(tolFor(t));
  }
  unsetenv("BIGC_GEMM_STAGING_MB");
}

TEST(CudaKernels, EmbeddingAndItsGradient) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    const int64_t V = 50, C = 24, B = 3, T = 40;
    o.b.p.batch = B, o.b.p.seq = T, o.b.p.vocab = V;
    // Token ids from the runtime's inputs: the one-op harness feeds token 0 only, so ids come
    // from a cast of a param instead: use tokens via setup below.
    int64_t table = o.input("table", {V, C}, t), dy = o.input("dy", {B, T, C}, t);
    int64_t ids = o.b.buffer("ids", {B, T}, "input", DType::I32);
    o.b.p.tokenInputs = {ids};
    int64_t tg = o.b.buffer("tg", {B, T}, "input", DType::I32);
    o.b.p.targetInputs = {tg};
    int64_t y = o.output("y", {B, T, C}, t), dt = o.output("dtable", {V, C}, t);
    o.b.inst("embedding", {table, ids}, {y});
    o.b.inst("embedding_grad", {dy, ids}, {dt});
    o.b.inst("fill", {}, {o.loss}, {{"value", num(0)}});
    Program p = o.b.finish();
    Executor cpu(p, 3);
    auto gpu = makeCudaEngine(p, 3);
    std::vector<int32_t> tok(size_t(B * T));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * i * 7 + 3) % 17); // repeats; rows 17.. unused
    cpu.step(tok.data(), tok.data());
    gpu->step(tok.data(), tok.data());
    EXPECT_LE(relErr(gpu->readF32(y), cpu.readF32(y)), 0.0) << "a lookup is exact";
    EXPECT_LE(relErr(gpu->readF32(dt), cpu.readF32(dt)), tolFor(t));
    // A bad id is an error naming the step, the instruction and the id.
    tok[5] = int32_t(V + 3);
    try {
      gpu->step(tok.data(), tok.data());
      ADD_FAILURE() << "expected an error for token id " << V + 3;
    } catch (const UserError &e) {
      std::string m = e.what();
      EXPECT_NE(m.find("step 2: instruction 0 (embedding"), std::string::npos) << m;
      EXPECT_NE(m.find("token id 53 at position 5"), std::string::npos) << m;
    }
    tok[5] = 1;
    EXPECT_NO_THROW(gpu->step(tok.data(), tok.data())) << "the engine stays usable after a data error";
  }
}

TEST(CudaKernels, LayernormAndItsGradient) {
  REQUIRE_GPU();
  // Rows of 200 (16-byte vectors) and 203 (scalar), 45 rows (one chunk of the column sums) and 450
  // (eight).
  for (DType t : kTypes)
    for (int64_t C : {int64_t(200), int64_t(203)})
      for (int64_t T : {int64_t(15), int64_t(150)}) {
        SCOPED_TRACE(std::string(dtypeName(t)) + " C=" + std::to_string(C) + " T=" + std::to_string(T));
        OneOp o;
        int64_t x = o.input("x", {3, T, C}, t, 2.0), w = o.input("w", {C}, t), bb = o.input("b", {C}, t);
        int64_t dy = o.input("dy", {3, T, C}, t);
        int64_t y = o.output("y", {3, T, C}, t), mean = o.output("mean", {3, T}), rstd = o.output("rstd", {3, T});
        int64_t dx = o.output("dx", {3, T, C}, t), dw = o.output("dw", {C}, t), db = o.output("db", {C}, t);
        o.b.inst("layernorm", {x, w, bb}, {y, mean, rstd}, {{"eps", num(1e-5)}});
        o.b.inst("layernorm_grad", {dy, x, w, mean, rstd}, {dx, dw, db});
        o.check(tolFor(t));
      }
}

TEST(CudaKernels, CrossEntropyAndItsGradient) {
  REQUIRE_GPU();
  // Vocabularies whose rows start at every alignment (odd: the scalar head and tail around the
  // 16-byte loads), one wider than the block.
  for (DType t : kTypes)
    for (int64_t V : {300, 301, 5003}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " V=" + std::to_string(V));
      ProgramBuilder b(2, 33, V);
      int64_t tok = b.buffer("tokens", {2, 33}, "input", DType::I32),
              tgt = b.buffer("targets", {2, 33}, "input", DType::I32);
      int64_t logits = b.buffer("logits", {2, 33, V}, "param", t, Init{"normal", 3.0});
      int64_t loss = b.buffer("loss", {}, "activation"), dloss = b.buffer("dloss", {}, "activation_grad");
      int64_t dl = b.buffer("dlogits", {2, 33, V}, "activation_grad", t);
      b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
      b.inst("cross_entropy", {logits, tgt}, {loss});
      b.inst("fill", {}, {dloss}, {{"value", num(3.0)}});
      b.inst("cross_entropy_grad", {logits, tgt, dloss}, {dl});
      Program p = b.finish();
      Executor cpu(p, 5);
      auto gpu = makeCudaEngine(p, 5);
      std::vector<int32_t> ids = spreadIds(66, V);
      float lc = cpu.step(ids.data(), ids.data()), lg = gpu->step(ids.data(), ids.data());
      EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
      EXPECT_LE(relErr(gpu->readF32(dl), cpu.readF32(dl)), tolFor(t));
      ids[64] = -2;
      EXPECT_THROW(gpu->step(ids.data(), ids.data()), UserError);
    }
}

// The loss's gradients in the logits' place (the memory plan puts dlogits there, at the logits'
// last use): each kernel reads its row whole before it writes it. Against the CPU backend's same
// program; odd vocabularies (rows at every alignment) and one wider than the block.
TEST(CudaKernels, LossGradientsInPlace) {
  REQUIRE_GPU();
  for (DType t : kTypes)
    for (int64_t V : {301, 5003})
      for (bool vocabParallel : {false, true}) {
        SCOPED_TRACE(std::string(dtypeName(t)) + " V=" + std::to_string(V) + (vocabParallel ? " vocab_ce" : " ce"));
        ProgramBuilder b(2, 33, V);
        int64_t tok = b.buffer("tokens", {2, 33}, "input", DType::I32),
                tgt = b.buffer("targets", {2, 33}, "input", DType::I32);
        int64_t x = b.buffer("x", {2, 33, V}, "param", t, Init{"normal", 3.0});
        int64_t dstatsIn = b.buffer("dstats_in", {2, 33, 2}, "param", DType::F32, Init{"normal", 1.0});
        int64_t logits = b.buffer("logits", {2, 33, V}, "activation", t);
        int64_t stats = b.buffer("stats", {2, 33, 2}, "activation");
        int64_t loss = b.buffer("loss", {}, "activation"), dloss = b.buffer("dloss", {}, "activation_grad");
        int64_t dl = b.buffer("dlogits", {2, 33, V}, "activation_grad", t);
        int64_t z = b.buffer("z", {2, 33, V}, "activation_grad", t);
        b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
        b.inst("scale", {x}, {logits}, {{"factor", num(1.0)}});
        b.inst("cross_entropy", {logits, tgt}, {loss});
        if (vocabParallel) {
          b.inst("vocab_ce_stats", {logits, tgt}, {stats});
          b.inst("vocab_ce_stats_grad", {dstatsIn, logits, tgt, stats}, {dl});
        } else {
          b.inst("fill", {}, {dloss}, {{"value", num(3.0)}});
          b.inst("cross_entropy_grad", {logits, tgt, dloss}, {dl});
        }
        b.inst("scale", {dl}, {z}, {{"factor", num(1.0)}});
        Program p = b.finish({{dl, logits}});
        ASSERT_EQ(p.buffers[size_t(dl)].offset, p.buffers[size_t(logits)].offset);
        Executor cpu(p, 5);
        auto gpu = makeCudaEngine(p, 5);
        std::vector<int32_t> ids = spreadIds(66, V);
        float lc = cpu.step(ids.data(), ids.data()), lg = gpu->step(ids.data(), ids.data());
        EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
        EXPECT_LE(relErr(gpu->readF32(z), cpu.readF32(z)), tolFor(t));
      }
}

// Tensor parallelism's vocabulary-parallel loss kernels (vocab_ce_*) and tp_slice, on one GPU: a
// program of one rank (tensor rank 0, the whole vocabulary; the other ranks' offsets run in
// gpu.ranks, which needs 2 GPUs).
TEST(CudaKernels, VocabularyParallelLoss) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    ProgramBuilder b(2, 33, 300);
    int64_t tok = b.buffer("tokens", {2, 33}, "input", DType::I32),
            tgt = b.buffer("targets", {2, 33}, "input", DType::I32);
    int64_t logits = b.buffer("logits", {2, 33, 300}, "param", t, Init{"normal", 3.0});
    int64_t dstatsIn = b.buffer("dstats_in", {2, 33, 2}, "param", DType::F32, Init{"normal", 1.0});
    int64_t parts = b.buffer("parts", {6, 33, 2}, "param", DType::F32, Init{"normal", 2.0}); // 3 parts of [2, 33]
    int64_t stats = b.buffer("stats", {2, 33, 2}, "activation");
    int64_t dl = b.buffer("dlogits", {2, 33, 300}, "activation_grad", t);
    int64_t loss = b.buffer("loss", {}, "activation"), dloss = b.buffer("dloss", {}, "activation_grad");
    int64_t dparts = b.buffer("dparts", {6, 33, 2}, "activation_grad");
    b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
    b.inst("vocab_ce_stats", {logits, tgt}, {stats});
    b.inst("vocab_ce_stats_grad", {dstatsIn, logits, tgt, stats}, {dl});
    b.inst("vocab_ce_loss", {parts}, {loss}, {{"parts", num(3)}});
    b.inst("fill", {}, {dloss}, {{"value", num(2.0)}});
    b.inst("vocab_ce_loss_grad", {parts, dloss}, {dparts}, {{"parts", num(3)}});
    Program p = b.finish();
    Executor cpu(p, 5);
    auto gpu = makeCudaEngine(p, 5);
    std::vector<int32_t> ids = spreadIds(66, 300);
    float lc = cpu.step(ids.data(), ids.data()), lg = gpu->step(ids.data(), ids.data());
    EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
    EXPECT_LE(relErr(gpu->readF32(stats), cpu.readF32(stats)), 1e-5);
    EXPECT_LE(relErr(gpu->readF32(dl), cpu.readF32(dl)), tolFor(t));
    EXPECT_LE(relErr(gpu->readF32(dparts), cpu.readF32(dparts)), 1e-5);
    ids[64] = 300; // outside the vocabulary
    try {
      gpu->step(ids.data(), ids.data());
      ADD_FAILURE() << "expected an error for target id 300";
    } catch (const UserError &e) {
      EXPECT_NE(std::string(e.what()).find("target id 300 at position 64"), std::string::npos) << e.what();
    }
  }
}

// The fused LM head and loss (linear_ce_stats and its gradient, bigc compile --fuse-loss): h [2,33,C]
// @ w [V,C] (transpose_b, GPT-2's tied head) or [C,V], a chunk of columns at a time (the last one
// narrower), with and without a padded vocabulary (attribute classes: the last rows of w are no
// classes; their dw rows 0). Statistics and dh, dw against the CPU executor; the GEMMs read h and w
// in their type and write f32 on both backends (products of 16-bit values are exact in f32), so the
// statistics differ by the order of sums only (1e-5); the GPU rounds the chunk's logit gradient to
// the 16-bit type before its two GEMMs (the unfused program stores it so too), within tolFor.
TEST(CudaKernels, FusedLmHeadAndLoss) {
  REQUIRE_GPU();
  const int64_t N = 66, C = 48;
  struct Case {
    int64_t V, chunk, classes;
    bool tb;
  };
  for (DType t : kTypes)
    for (Case c : {Case{300, 64, 0, true}, Case{300, 64, 0, false}, Case{301, 128, 0, true}, Case{320, 64, 301, true},
                   Case{40, 64, 0, true}}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " V=" + std::to_string(c.V) + " chunk=" + std::to_string(c.chunk) +
                   " classes=" + std::to_string(c.classes) + (c.tb ? " transpose_b" : ""));
      const int64_t cols = std::min(c.V, c.chunk), vocab = c.classes ? c.classes : c.V;
      ProgramBuilder b(2, 33, vocab);
      int64_t tok = b.buffer("tokens", {2, 33}, "input", DType::I32),
              tgt = b.buffer("targets", {2, 33}, "input", DType::I32);
      int64_t h = b.buffer("h", {2, 33, C}, "param", t, Init{"normal", 1.0});
      int64_t w = b.buffer("w", c.tb ? std::vector<int64_t>{c.V, C} : std::vector<int64_t>{C, c.V}, "param", t,
                           Init{"normal", 0.3});
      int64_t dstatsIn = b.buffer("dstats_in", {2, 33, 2}, "param", DType::F32, Init{"normal", 1.0});
      int64_t stats = b.buffer("stats", {2, 33, 2}, "activation");
      int64_t ws = b.buffer("ws", {N * cols + 2 * N}, "activation");
      int64_t dh = b.buffer("dh", {2, 33, C}, "activation_grad", t);
      int64_t dw =
          b.buffer("dw", c.tb ? std::vector<int64_t>{c.V, C} : std::vector<int64_t>{C, c.V}, "activation_grad", t);
      int64_t ws2 = b.buffer("ws2", {N * cols + N * C}, "activation_grad");
      int64_t loss = b.buffer("loss", {}, "activation");
      b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
      std::map<std::string, Attr> attrs = {{"chunk", num(double(c.chunk))}};
      if (c.tb) attrs["transpose_b"] = num(1);
      if (c.classes) attrs["classes"] = num(double(c.classes));
      b.inst("linear_ce_stats", {h, w, tgt}, {stats, ws}, attrs);
      b.inst("linear_ce_stats_grad", {dstatsIn, h, w, tgt, stats}, {dh, dw, ws2}, attrs);
      b.inst("vocab_ce_loss", {stats}, {loss}, {{"parts", num(1)}});
      Program p = b.finish();
      Executor cpu(p, 5);
      auto gpu = makeCudaEngine(p, 5);
      std::vector<int32_t> ids = spreadIds(static_cast<size_t>(N), vocab);
      // The arenas start zeroed: NaNs in dw first, so that the padding rows' zeros are the op's. Two
      // steps: nothing of the first may leak into the second (the running statistics' reset).
      gpu->writeBytes(dw, std::vector<unsigned char>(size_t(p.buffers[size_t(dw)].bytes), 0xff).data());
      for (int step = 1; step <= 2; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        float lc = cpu.step(ids.data(), ids.data()), lg = gpu->step(ids.data(), ids.data());
        EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
        EXPECT_LE(relErr(gpu->readF32(stats), cpu.readF32(stats)), 1e-5);
        EXPECT_LE(relErr(gpu->readF32(dh), cpu.readF32(dh)), tolFor(t));
        const std::vector<float> dwg = gpu->readF32(dw);
        EXPECT_LE(relErr(dwg, cpu.readF32(dw)), tolFor(t));
        if (c.classes) { // the padding rows' gradient: 0
          for (int64_t i = c.classes * C; i < c.V * C; ++i) ASSERT_EQ(dwg[size_t(i)], 0.0f) << "dw element " << i;
        }
      }
      ids[64] = int32_t(vocab); // outside the vocabulary (a padded one: a padding row's id)
      try {
        gpu->step(ids.data(), ids.data());
        ADD_FAILURE() << "expected an error for target id " << vocab;
      } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find("target id " + std::to_string(vocab) + " at position 64"),
                  std::string::npos)
            << e.what();
      }
    }
}

TEST(CudaKernels, TpSliceOfOneRankIsACopy) {
  REQUIRE_GPU();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    int64_t x = o.input("x", {3, 10, 6}, t), y = o.output("y", {3, 10, 6}, t);
    o.b.inst("tp_slice", {x}, {y}, {{"dim", num(1)}, {"axis", num(1)}});
    o.check(0.0);
  }
}

struct AttnShape {
  int64_t B, T, C, H;
};

TEST(CudaKernels, Attention) {
  REQUIRE_GPU();
  // Tensor-core tiles (head size 16, 32, 64 and 128, T not a multiple of 64; GPT-2's head size 64
  // over 5 tiles, where most tiles are below the diagonal and unmasked), and the generic path
  // (head size 24; and every fp32 case).
  const AttnShape shapes[] = {{2, 77, 64, 4},  {1, 130, 128, 2}, {1, 64, 64, 2},
                              {2, 50, 256, 2}, {1, 33, 48, 2},   {1, 300, 768, 12}};
  for (DType t : kTypes)
    for (const AttnShape &s : shapes) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
                   std::to_string(s.C) + " H" + std::to_string(s.H));
      OneOp o;
      int64_t qkv = o.input("qkv", {s.B, s.T, 3 * s.C}, t), dout = o.input("dout", {s.B, s.T, s.C}, t);
      int64_t out = o.output("out", {s.B, s.T, s.C}, t), lse = o.output("lse", {s.B, s.H, s.T});
      int64_t dqkv = o.output("dqkv", {s.B, s.T, 3 * s.C}, t);
      o.b.inst("attention", {qkv}, {out, lse}, {{"heads", num(double(s.H))}});
      o.b.inst("attention_grad", {dout, qkv, out, lse}, {dqkv}, {{"heads", num(double(s.H))}});
      o.check(t == DType::F32 ? 1e-5 : 3e-2);
    }
}

// ---- the LLaMA family's ops ---------------------------------------------------------------------

Attr reals(std::vector<double> v) {
  Attr a;
  a.isReals = true;
  a.reals = std::move(v);
  return a;
}

// Hugging Face's default rotary frequencies: theta^(-2i/D).
std::vector<double> invFreq(int64_t D, double theta = 10000.0) {
  std::vector<double> f;
  for (int64_t i = 0; i < D / 2; ++i) f.push_back(std::pow(theta, -double(2 * i) / double(D)));
  return f;
}

TEST(CudaKernels, LlamaElementwise) {
  REQUIRE_GPU();
  // Odd sizes (the scalar kernels) and multiples of 8 (16-byte vectors); inputs of std 3 reach
  // both tails of the sigmoid and of erf.
  for (DType t : kTypes)
    for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5, 67}, std::vector<int64_t>{4, 64}}) {
      SCOPED_TRACE(std::string(dtypeName(t)) +
                   " n=" + std::to_string(shape[0] * shape[1] * (shape.size() > 2 ? shape[2] : 1)));
      OneOp o;
      int64_t x = o.input("x", shape, t, 3.0), u = o.input("u", shape, t), dy = o.input("dy", shape, t);
      int64_t si = o.output("silu", shape, t), sg = o.output("silu_grad", shape, t);
      int64_t sw = o.output("swiglu", shape, t), dg = o.output("swiglu_dgate", shape, t),
              du = o.output("swiglu_dup", shape, t);
      int64_t ge = o.output("gelu_exact", shape, t), gg = o.output("gelu_exact_grad", shape, t);
      int64_t gl = o.output("geglu", shape, t), gle = o.output("geglu_exact", shape, t),
              gdg = o.output("geglu_dgate", shape, t), gdu = o.output("geglu_dup", shape, t);
      o.b.inst("geglu", {x, u}, {gl});
      o.b.inst("geglu", {x, u}, {gle}, {{"exact", num(1)}});
      o.b.inst("geglu_grad", {x, u, dy}, {gdg, gdu});
      o.b.inst("silu", {x}, {si});
      o.b.inst("silu_grad", {x, dy}, {sg});
      o.b.inst("swiglu", {x, u}, {sw});
      o.b.inst("swiglu_grad", {x, u, dy}, {dg, du});
      o.b.inst("gelu", {x}, {ge}, {{"exact", num(1)}});
      o.b.inst("gelu_grad", {x, dy}, {gg}, {{"exact", num(1)}});
      // Gemma 2's logit cap at 2 (binding for inputs of std 3), its gradient from the capped values
      int64_t sc = o.output("softcap", shape, t), scg = o.output("softcap_grad", shape, t);
      o.b.inst("softcap", {x}, {sc}, {{"cap", num(2.0)}});
      o.b.inst("softcap_grad", {sc, dy}, {scg}, {{"cap", num(2.0)}});
      o.check(tolFor(t));
    }
}

TEST(CudaKernels, LlamaOpsInPlace) {
  REQUIRE_GPU();
  // rope, silu and swiglu writing over their input (the program format's in-place rule).
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    OneOp o;
    const int64_t B = 2, T = 19, C = 4 * 32;
    int64_t a = o.input("a", {B, T, C}, t), u = o.input("u", {B, T, C}, t);
    int64_t y = o.b.buffer("y", {B, T, C}, "activation", t), z = o.output("z", {B, T, C}, t);
    int64_t g = o.b.buffer("g", {B, T, C}, "activation", t), w = o.output("w", {B, T, C}, t);
    // Copies and doublings are exact; two rounded ops on each chain (the bound of tolFor).
    o.b.inst("scale", {a}, {y}, {{"factor", num(1.0)}});
    o.b.inst("rope", {y}, {y}, {{"head_dim", num(32)}, {"inv_freq", reals(invFreq(32))}});
    o.b.inst("rope", {y}, {y}, {{"head_dim", num(32)}, {"inv_freq", reals(invFreq(32, 500.0))}, {"inverse", num(1)}});
    o.b.inst("scale", {y}, {z}, {{"factor", num(1.0)}});
    o.b.inst("scale", {a}, {g}, {{"factor", num(2.0)}});
    o.b.inst("swiglu", {g, u}, {g});
    o.b.inst("silu", {g}, {g});
    o.b.inst("scale", {g}, {w}, {{"factor", num(1.0)}});
    o.check(tolFor(t));
  }
}

TEST(CudaKernels, RmsNormAndItsGradient) {
  REQUIRE_GPU();
  for (DType t : kTypes)
    for (int64_t C : {int64_t(200), int64_t(1000), int64_t(203)}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " C=" + std::to_string(C));
      OneOp o;
      int64_t x = o.input("x", {3, 15, C}, t, 2.0), w = o.input("w", {C}, t), dy = o.input("dy", {3, 15, C}, t);
      int64_t y = o.output("y", {3, 15, C}, t), rstd = o.output("rstd", {3, 15});
      int64_t dx = o.output("dx", {3, 15, C}, t), dw = o.output("dw", {C}, t);
      o.b.inst("rmsnorm", {x, w}, {y, rstd}, {{"eps", num(1e-5)}});
      o.b.inst("rmsnorm_grad", {dy, x, w, rstd}, {dx, dw});
      o.check(tolFor(t));
    }
}

TEST(CudaKernels, Rope) {
  REQUIRE_GPU();
  // Head sizes 16 and 64 (T = 300: angles up to 300 rad), Llama 3's attention_scaling, and the
  // inverse rotation (rope's gradient).
  // A partial rotary (GPT-NeoX's: the first 16 of 64 rotated, the rest copied), in both layouts.
  struct Case {
    int64_t B, T, H, D;
    double theta, scale;
    int64_t rotary = 0; // 0: D
    bool interleaved = false;
  };
  const Case cases[] = {{2, 37, 6, 16, 10000.0, 1.0},
                        {1, 300, 3, 64, 500000.0, 0.8},
                        {2, 33, 4, 64, 10000.0, 1.0, 16},
                        {2, 33, 4, 64, 10000.0, 1.0, 16, true}};
  for (DType t : kTypes)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " D=" + std::to_string(c.D));
      OneOp o;
      const int64_t C = c.H * c.D;
      int64_t x = o.input("x", {c.B, c.T, C}, t);
      int64_t y = o.output("y", {c.B, c.T, C}, t), dx = o.output("inverse", {c.B, c.T, C}, t);
      std::map<std::string, Attr> at = {{"head_dim", num(double(c.D))},
                                        {"inv_freq", reals(invFreq(c.rotary ? c.rotary : c.D, c.theta))},
                                        {"attention_scaling", num(c.scale)}};
      if (c.interleaved) at["interleaved"] = num(1);
      o.b.inst("rope", {x}, {y}, at);
      at["inverse"] = num(1);
      o.b.inst("rope", {x}, {dx}, at);
      o.check(tolFor(t));
    }
}

struct GqaShape {
  int64_t B, T, H, Hkv, D, window;
  double scale; // 0: 1/sqrt(D)
};

TEST(CudaKernels, GqaAttention) {
  REQUIRE_GPU();
  // Groups of 2 (H 4, Hkv 2) with and without a sliding window (one shorter than T, one longer
  // than a 32-key chunk), multi-query (Hkv 1) with a given scale, one kv head per query head, a
  // window of 1 (each query sees only itself), head size 128.
  const GqaShape shapes[] = {{2, 77, 4, 2, 16, 0, 0},  {1, 70, 4, 2, 32, 20, 0}, {2, 40, 6, 1, 24, 0, 0.3},
                             {1, 65, 4, 4, 64, 33, 0}, {1, 9, 4, 2, 16, 1, 0},   {1, 50, 2, 1, 128, 0, 0}};
  for (DType t : kTypes)
    for (const GqaShape &s : shapes) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" +
                   std::to_string(s.H) + " Hkv" + std::to_string(s.Hkv) + " D" + std::to_string(s.D) + " window " +
                   std::to_string(s.window));
      OneOp o;
      const int64_t C = s.H * s.D, Ckv = s.Hkv * s.D;
      int64_t q = o.input("q", {s.B, s.T, C}, t), k = o.input("k", {s.B, s.T, Ckv}, t),
              v = o.input("v", {s.B, s.T, Ckv}, t);
      int64_t dout = o.input("dout", {s.B, s.T, C}, t);
      int64_t out = o.output("out", {s.B, s.T, C}, t), lse = o.output("lse", {s.B, s.H, s.T});
      int64_t dq = o.output("dq", {s.B, s.T, C}, t), dk = o.output("dk", {s.B, s.T, Ckv}, t),
              dv = o.output("dv", {s.B, s.T, Ckv}, t);
      std::map<std::string, Attr> at = {{"heads", num(double(s.H))}, {"kv_heads", num(double(s.Hkv))}};
      if (s.window) at["window"] = num(double(s.window));
      if (s.scale > 0) at["scale"] = num(s.scale);
      o.b.inst("gqa_attention", {q, k, v}, {out, lse}, at);
      o.b.inst("gqa_attention_grad", {dout, q, k, v, out, lse}, {dq, dk, dv}, at);
      // A window of one key: dq = dk = 0 but for rounding (dp - D of one term). The CPU backend gives
      // at most 8.5e-7 (f32), 4.4e-8 (bf16), 1.2e-6 (f16) there; relative to that, any rounding on
      // the GPU is an error of order one, so those outputs are compared absolutely (to tol).
      if (s.window == 1) o.absBelow = 1e-3;
      // 16-bit: each backend's backward reads its own rounded `out` (D_t = dout_t . out_t), and a
      // one-ulp difference there enters dq, dk through dp - D_t, a difference of nearly equal
      // terms: 3e-2 as for the packed attention above. (Same inputs on both sides: the next test,
      // to tolFor.)
      o.check(t == DType::F32 ? 1e-5 : 3e-2);
    }
}

// The kernels themselves on device memory, against the CPU kernels with the same geometry: the
// query heads of tensor rank r under tp_heads (headOffset r*H, the kv heads replicated), which a
// one-GPU program cannot reach (its tensor rank is 0). dk and dv of kv heads this rank's heads do
// not read are zeros.
template <class T> struct DevBuf {
  T *p = nullptr;
  explicit DevBuf(size_t n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;
};

std::vector<float> randomVec(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float &x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = float(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

TEST(CudaKernels, GqaAttentionTensorParallelHeads) {
  REQUIRE_GPU();
  struct Case {
    int64_t H, Hkv, tp, rank, window;
  };
  // 2 query heads per rank; kv heads 2 over tp 2 (group 2: rank 1 reads kv head 1 only), 1 kv
  // head (group 4), and tp 4 with 2 kv heads (rank 3: heads 6, 7 read kv head 1), windowed.
  const Case cases[] = {{2, 2, 2, 1, 0}, {2, 2, 2, 0, 0}, {2, 1, 2, 1, 0}, {2, 2, 4, 3, 12}};
  const int64_t B = 2, T = 45, D = 16;
  for (DType dt : {DType::F32, DType::BF16})
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + " H" + std::to_string(c.H) + " Hkv" + std::to_string(c.Hkv) + " tp" +
                   std::to_string(c.tp) + " rank " + std::to_string(c.rank));
      cuda::AttentionGeometry g;
      g.B = B, g.T = T, g.H = c.H, g.D = D, g.Hkv = c.Hkv;
      g.sq = g.so = c.H * D, g.skv = c.Hkv * D;
      g.group = c.H * c.tp / c.Hkv, g.headOffset = c.rank * c.H, g.window = c.window;
      g.scale = 1.0f / std::sqrt(float(D));
      cpu::AttentionGeometry cg;
      cg.B = g.B, cg.T = g.T, cg.H = g.H, cg.D = g.D, cg.Hkv = g.Hkv, cg.sq = g.sq, cg.skv = g.skv, cg.so = g.so;
      cg.group = g.group, cg.headOffset = g.headOffset, cg.window = g.window, cg.scale = g.scale;
      const size_t nq = size_t(B * T * g.sq), nkv = size_t(B * T * g.skv), nl = size_t(B * c.H * T);
      const size_t es = size_t(dtypeSize(dt));
      // Inputs rounded to the storage type first, so both sides read the same values.
      auto rounded = [&](std::vector<float> v) {
        std::vector<unsigned char> raw(v.size() * es);
        fromF32(v.data(), raw.data(), dt, int64_t(v.size()));
        toF32(raw.data(), dt, v.data(), int64_t(v.size()));
        return v;
      };
      std::vector<float> q = rounded(randomVec(nq, 1)), k = rounded(randomVec(nkv, 2)), v = rounded(randomVec(nkv, 3));
      std::vector<float> dout = rounded(randomVec(nq, 4));
      std::vector<float> out(nq), lse(nl), dq(nq), dk(nkv), dv(nkv);
      cpu::attention(cg, q.data(), k.data(), v.data(), out.data(), lse.data());
      std::vector<float> outR = rounded(out); // the GPU's backward reads out in the storage type
      cpu::attentionGrad(cg, dout.data(), q.data(), k.data(), v.data(), outR.data(), lse.data(), dq.data(), dk.data(),
                         dv.data());

      DevBuf<unsigned char> dQ(nq * es), dK(nkv * es), dV(nkv * es), dO(nq * es), dOut(nq * es), dDq(nq * es),
          dDk(nkv * es), dDv(nkv * es), ws(cuda::attentionGradWorkspace(B, T, c.H));
      DevBuf<float> dLse(nl);
      auto up = [&](const std::vector<float> &h, void *d) {
        std::vector<unsigned char> raw(h.size() * es);
        fromF32(h.data(), raw.data(), dt, int64_t(h.size()));
        ASSERT_EQ(cudaMemcpy(d, raw.data(), raw.size(), cudaMemcpyHostToDevice), cudaSuccess);
      };
      auto down = [&](const void *d, size_t n) {
        std::vector<unsigned char> raw(n * es);
        EXPECT_EQ(cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        std::vector<float> h(n);
        toF32(raw.data(), dt, h.data(), int64_t(n));
        return h;
      };
      up(q, dQ.p), up(k, dK.p), up(v, dV.p), up(dout, dO.p);
      cuda::gqaAttention(dt, g, dQ.p, dK.p, dV.p, dOut.p, dLse.p, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> gLse(nl);
      ASSERT_EQ(cudaMemcpy(gLse.data(), dLse.p, nl * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const double tol = tolFor(dt);
      EXPECT_LE(relErr(down(dOut.p, nq), out), tol) << "out";
      EXPECT_LE(relErr(gLse, lse), 1e-5) << "lse (f32, from the same rounded inputs)";
      // The backward from the CPU's out (rounded to the storage type) and lse: both sides read the
      // same values.
      up(outR, dOut.p);
      ASSERT_EQ(cudaMemcpy(dLse.p, lse.data(), nl * 4, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::gqaAttentionGrad(dt, g, dO.p, dQ.p, dK.p, dV.p, dOut.p, dLse.p, dDq.p, dDk.p, dDv.p, ws.p, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(relErr(down(dDq.p, nq), dq), tol) << "dq";
      std::vector<float> gDk = down(dDk.p, nkv), gDv = down(dDv.p, nkv);
      EXPECT_LE(relErr(gDk, dk), tol) << "dk";
      EXPECT_LE(relErr(gDv, dv), tol) << "dv";
      // kv heads outside this rank's group: exactly zero on both.
      for (int64_t kh = 0; kh < c.Hkv; ++kh) {
        const bool read = (g.headOffset) / g.group <= kh && kh <= (g.headOffset + c.H - 1) / g.group;
        if (read) continue;
        for (int64_t r = 0; r < B * T; ++r)
          for (int64_t d = 0; d < D; ++d) {
            const size_t i = size_t(r * g.skv + kh * D + d);
            ASSERT_EQ(gDk[i], 0.0f) << "kv head " << kh;
            ASSERT_EQ(gDv[i], 0.0f) << "kv head " << kh;
          }
      }
    }
}

// Context parallelism's kernels against the CPU's: one block of ring attention (step 1 of cp 2, so
// the keys are the other rank's chunks; merged into an earlier block's out and lse), the same as
// all-to-all attention (a2a: the whole sequence in rank order), their gradients (added to those so
// far), and rope at a cp rank's positions. fp32, as the engine runs them (16-bit operands staged in
// fp32 with the f32 partial results); the fp32 bound.
TEST(CudaKernels, RingAttention) {
  REQUIRE_GPU();
  const int64_t B = 2, T = 40, H = 4, Hkv = 2, D = 16, C = 2;
  for (bool a2a : {false, true})
    for (int64_t window : {int64_t(0), int64_t(13)}) {
      SCOPED_TRACE(std::string(a2a ? "a2a" : "ring") + " window " + std::to_string(window));
      cuda::AttentionGeometry g;
      g.B = B, g.T = T, g.H = H, g.D = D, g.Hkv = Hkv, g.sq = g.so = H * D, g.skv = Hkv * D;
      g.group = H / Hkv, g.window = window, g.scale = 1.0f / std::sqrt(float(D));
      cuda::RingPositions pos;
      pos.cp = C, pos.qRank = a2a ? 0 : 1, pos.kRank = 0, pos.a2a = a2a; // rank 1, step 1: rank 0's keys
      std::vector<int64_t> qpos(static_cast<size_t>(T)), kpos(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        if (a2a) {
          qpos[size_t(t)] = kpos[size_t(t)] = bigc::format::cpPosition(t % (T / C), T / C, C, t / (T / C));
        } else {
          qpos[size_t(t)] = bigc::format::cpPosition(t, T, C, 1);
          kpos[size_t(t)] = bigc::format::cpPosition(t, T, C, 0);
        }
      }
      const size_t nq = size_t(B * T * H * D), nkv = size_t(B * T * Hkv * D), nl = size_t(B * H * T);
      std::vector<float> q = randomVec(nq, 11), k = randomVec(nkv, 12), v = randomVec(nkv, 13),
                         dout = randomVec(nq, 14);
      std::vector<float> accOut = randomVec(nq, 15), accLse = randomVec(nl, 16), accDq = randomVec(nq, 17),
                         accDk = randomVec(nkv, 18), accDv = randomVec(nkv, 19);
      const bool acc = !a2a; // (a2a: one block, nothing before it)
      std::vector<float> out(nq), lse(nl), dq(nq), dk(nkv), dv(nkv);
      cpu::ringAttention(g, q.data(), k.data(), v.data(), qpos.data(), kpos.data(), acc ? accOut.data() : nullptr,
                         acc ? accLse.data() : nullptr, out.data(), lse.data());
      cpu::ringAttentionGrad(g, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), qpos.data(),
                             kpos.data(), acc ? accDq.data() : nullptr, acc ? accDk.data() : nullptr,
                             acc ? accDv.data() : nullptr, dq.data(), dk.data(), dv.data());
      DevBuf<float> dQ(nq), dK(nkv), dV(nkv), dO(nq), dOut(nq), dLse(nl), dAo(nq), dAl(nl), dAq(nq), dAk(nkv), dAv(nkv),
          dDq(nq), dDk(nkv), dDv(nkv);
      DevBuf<unsigned char> ws(cuda::ringAttentionGradWorkspace(B, T, H));
      auto up = [](const std::vector<float> &h, float *d) {
        ASSERT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      };
      auto down = [](const float *d, size_t n) {
        std::vector<float> h(n);
        EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
      };
      up(q, dQ.p), up(k, dK.p), up(v, dV.p), up(dout, dO.p), up(accOut, dAo.p), up(accLse, dAl.p), up(accDq, dAq.p),
          up(accDk, dAk.p), up(accDv, dAv.p);
      cuda::ringAttention(DType::F32, DType::F32, g, pos, dQ.p, dK.p, dV.p, acc ? dAo.p : nullptr,
                          acc ? dAl.p : nullptr, dOut.p, dLse.p, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(relErr(down(dOut.p, nq), out), 1e-5) << "out";
      EXPECT_LE(relErr(down(dLse.p, nl), lse), 1e-5) << "lse";
      up(out, dOut.p), up(lse, dLse.p); // the backward from the same out and lse on both
      cuda::ringAttentionGrad(DType::F32, DType::F32, g, pos, dO.p, dQ.p, dK.p, dV.p, dOut.p, dLse.p,
                              acc ? dAq.p : nullptr, acc ? dAk.p : nullptr, acc ? dAv.p : nullptr, dDq.p, dDk.p, dDv.p,
                              ws.p, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(relErr(down(dDq.p, nq), dq), 1e-5) << "dq";
      EXPECT_LE(relErr(down(dDk.p, nkv), dk), 1e-5) << "dk";
      EXPECT_LE(relErr(down(dDv.p, nkv), dv), 1e-5) << "dv";
    }
  // rope at rank 1's positions of cp 2.
  const int64_t rB = 2, rT = 16, Crow = 64, rD = 16;
  std::vector<float> invFreq = {1.0f, 0.3f, 0.1f, 0.03f, 0.01f, 0.003f, 0.001f, 0.0003f};
  std::vector<float> x = randomVec(size_t(rB * rT * Crow), 21), y(x.size());
  cpu::rope(x.data(), y.data(), rB, rT, Crow, rD, invFreq.data(), 1.0f, false, false, 0, 2, 1);
  DevBuf<float> dx(x.size()), dy(x.size());
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::rope(DType::F32, dx.p, dy.p, rB, rT, Crow, rD, invFreq.data(), 1.0f, false, nullptr, false, 0, 2, 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> gy(x.size());
  ASSERT_EQ(cudaMemcpy(gy.data(), dy.p, gy.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_LE(relErr(gy, y), 1e-5) << "rope at rank 1's positions of cp 2";
}

TEST(CudaKernels, OptimizerOps) {
  REQUIRE_GPU();
  // fp16 TinyModel: check_finite, global_norm, AdamW with unscale/clip/skip/write_half, loss
  // scale updates; then a forced overflow (scale 1e30): skipped steps and halving, as on the CPU.
  for (double scale0 : {1024.0, 1e30}) {
    SCOPED_TRACE(scale0);
    Program p = fp16Tiny(0.05, scale0);
    Executor cpu(p, 9);
    auto gpu = makeCudaEngine(p, 9);
    for (int s = 0; s < 6; ++s) {
      Batch bt = batch(s);
      float a = cpu.step(bt.tokens.data(), bt.targets.data());
      float c = gpu->step(bt.tokens.data(), bt.targets.data());
      EXPECT_NEAR(c, a, 2e-3 * std::fabs(a)) << "step " << s;
      EXPECT_EQ(gpu->lastSkipped(), cpu.lastSkipped()) << "step " << s;
      EXPECT_EQ(gpu->lastLossScale(), cpu.lastLossScale()) << "step " << s;
    }
    EXPECT_EQ(gpu->updateCount(), cpu.updateCount());
    if (scale0 > 1e20) { // every step skipped: the weights are the initial ones, exactly
      for (int64_t id : {int64_t(F_WTE_M), int64_t(F_W_M), int64_t(F_WTE_H)})
        EXPECT_EQ(relErr(gpu->readF32(id), cpu.readF32(id)), 0.0) << p.buffers[size_t(id)].name;
    }
  }
}

TEST(CudaKernels, AdamWMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  // fp32 TinyModel with clipping and weight decay: the fused AdamW evaluates the CPU's expression.
  // Run the update alone on identical grads: one adamw on params and given grads; 1000 elements
  // (4 a thread, wide accesses) and 1002 (one a thread).
  for (int64_t N : {int64_t(1000), int64_t(1002)}) {
    SCOPED_TRACE("n=" + std::to_string(N));
    OneOp o;
    int64_t p = o.input("p", {N}), g = o.input("g", {N}, DType::BF16, 0.1), n = o.input("n", {}, DType::F32, 3.0);
    int64_t m = o.b.buffer("m", {N}, "optimizer", DType::F32, Init{"normal", 0.01});
    int64_t v = o.b.buffer("v", {N}, "optimizer", DType::F32, Init{"zeros"});
    int64_t h = o.output("half", {N}, DType::BF16);
    auto adam = adamAttrs(1e-2, 0.5, 0.1);
    adam["clip"] = num(1);
    adam["write_half"] = num(1);
    o.b.inst("adamw", {p, g, m, v, n}, {p, m, v, h}, adam);
    o.outputs.push_back(p);
    o.outputs.push_back(m);
    o.outputs.push_back(v);
    o.check(0.0);
  }
}

TEST(CudaTraining, TinyModelMatchesTheCpu) {
  REQUIRE_GPU();
  // The whole step (fp32): 20 steps, losses to 1e-4 relative. (Not the weights element by
  // element: AdamW moves an element whose gradient is ~0 by up to lr on rounding noise alone.)
  Program p = TinyModel::build(0.05, 1.0, 0.1);
  Executor cpu(p, 42);
  auto gpu = makeCudaEngine(p, 42);
  for (int s = 0; s < 20; ++s) {
    Batch bt = batch(s);
    float a = cpu.step(bt.tokens.data(), bt.targets.data());
    float c = gpu->step(bt.tokens.data(), bt.targets.data());
    EXPECT_NEAR(c, a, 1e-4 * std::fabs(a)) << "step " << s;
    if (s == 0) { // one step from the same weights: the updated weights agree closely
      EXPECT_LE(relErr(gpu->readF32(TinyModel::W), cpu.readF32(TinyModel::W)), 1e-5);
    }
  }
}

TEST(CudaTraining, OffloadStreamsMatchTheCpu) {
  REQUIRE_GPU();
  // ZeRO-Offload's shape: d2h copies of the grads, AdamW on the host stream on pinned memory,
  // h2d copies back, events between the streams. Equal to the CPU backend's run.
  Program p = offloadTiny(0.05, 1.0, 0.1);
  Executor cpu(p, 42);
  auto gpu = makeCudaEngine(p, 42);
  EXPECT_EQ(gpu->streams(), (std::vector<std::string>{"compute", "d2h", "host", "h2d"}));
  for (int s = 0; s < 20; ++s) {
    Batch bt = batch(s);
    float a = cpu.step(bt.tokens.data(), bt.targets.data());
    float c = gpu->step(bt.tokens.data(), bt.targets.data());
    EXPECT_NEAR(c, a, 1e-4 * std::fabs(a)) << "step " << s;
    if (s == 0) {
      for (int64_t id : {0, 1, 2, 3}) EXPECT_LE(relErr(gpu->readF32(id), cpu.readF32(id)), 1e-5) << id;
    }
  }
}

TEST(CudaEngineErrors, ArenaLargerThanTheGpuIsAClearError) {
  REQUIRE_GPU();
  ProgramBuilder b(1, 1, 2);
  int64_t tok = b.buffer("tokens", {1, 1}, "input", DType::I32), tgt = b.buffer("targets", {1, 1}, "input", DType::I32);
  int64_t loss = b.buffer("loss", {}, "activation");
  b.p.tokenInputs = {tok}, b.p.targetInputs = {tgt}, b.p.loss = loss;
  b.inst("fill", {}, {loss}, {{"value", num(0)}});
  Program p = b.finish();
  p.spaces[0].arenaBytes = int64_t(1) << 50; // 1 PiB
  try {
    makeCudaEngine(p, 1);
    FAIL() << "expected an error";
  } catch (const UserError &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("of GPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find("--device-mem"), std::string::npos) << m;
  }
}

} // namespace
