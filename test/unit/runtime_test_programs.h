// Hand-built programs for the runtime's unit tests: a small builder that places buffers one after
// another (64-byte aligned) and derives live intervals from the instructions.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "bigc/Runtime/program.h"

namespace bigc::rt::testing {

struct ProgramBuilder {
  Program p;

  ProgramBuilder(int64_t B, int64_t T, int64_t V) {
    p.producer = "test";
    p.source = "test.mlir";
    p.batch = B, p.seq = T, p.vocab = V;
  }
  int64_t buffer(const std::string &name, std::vector<int64_t> shape, const std::string &role, DType dt = DType::F32,
                 Init init = {}, const std::string &space = "device") {
    Buffer b;
    b.id = int64_t(p.buffers.size());
    b.name = name;
    b.space = space;
    b.dtype = dt;
    b.shape = std::move(shape);
    b.role = role;
    b.bytes = b.numel() * dtypeSize(dt);
    b.init = init;
    p.buffers.push_back(b);
    return b.id;
  }
  int64_t param(const std::string &name, std::vector<int64_t> shape, double std) {
    return buffer(name, std::move(shape), "param", DType::F32, Init{"normal", std});
  }
  int64_t zeros(const std::string &name, std::vector<int64_t> shape, const std::string &role = "optimizer") {
    return buffer(name, std::move(shape), role, DType::F32, Init{"zeros", 0});
  }
  Instruction &inst(const std::string &op, std::vector<int64_t> in, std::vector<int64_t> out,
                    std::map<std::string, Attr> attrs = {}) {
    Instruction i;
    i.op = op;
    i.in = std::move(in);
    i.out = std::move(out);
    i.attrs = std::move(attrs);
    i.loc = "test.mlir:" + std::to_string(p.instructions.size() + 1) + ":3";
    p.instructions.push_back(i);
    return p.instructions.back();
  }
  static Attr num(double v) {
    Attr a;
    a.num = v;
    return a;
  }
  static Attr list(std::vector<int64_t> v) {
    Attr a;
    a.isList = true;
    a.list = std::move(v);
    return a;
  }
  // Offsets (sequential unless `aliasOf[id]` >= 0: same offset as that buffer), live intervals,
  // the arena. Call last.
  Program finish(const std::map<int64_t, int64_t> &aliasOf = {}) {
    int64_t n = int64_t(p.instructions.size());
    std::map<std::string, int64_t> off; // per space, "device" first
    off["device"] = 0;
    for (auto &b : p.buffers) {
      auto it = aliasOf.find(b.id);
      if (it != aliasOf.end()) {
        b.offset = p.buffers[size_t(it->second)].offset;
        continue;
      }
      b.offset = off[b.space];
      off[b.space] += (b.bytes + 63) / 64 * 64;
    }
    auto isInput = [&](int64_t id) {
      for (const auto *l : {&p.tokenInputs, &p.targetInputs})
        if (std::find(l->begin(), l->end(), id) != l->end()) return true;
      return false;
    };
    for (auto &b : p.buffers) {
      b.liveFirst = n, b.liveLast = -1;
      if (b.persistent() || isInput(b.id)) b.liveFirst = 0;
      if (b.persistent() || b.id == p.loss) b.liveLast = n - 1;
    }
    for (int64_t i = 0; i < n; ++i)
      for (const auto *ids : {&p.instructions[size_t(i)].in, &p.instructions[size_t(i)].out})
        for (int64_t id : *ids) {
          auto &b = p.buffers[size_t(id)];
          b.liveFirst = std::min(b.liveFirst, i);
          b.liveLast = std::max(b.liveLast, i);
        }
    for (auto &b : p.buffers)
      if (b.liveLast < b.liveFirst) b.liveFirst = 0, b.liveLast = std::max<int64_t>(n - 1, 0);
    p.spaces = {Space{"device", off["device"], off["device"], 0}};
    for (const auto &[name, bytes] : off)
      if (name != "device") p.spaces.push_back(Space{name, bytes, bytes, 0});
    return p;
  }
};

// embedding -> matmul -> cross_entropy, its backward, global_norm, adamw for both parameters.
// Buffer ids are fixed (see the comments) so tests can reach in.
struct TinyModel {
  static constexpr int64_t B = 2, T = 4, V = 8, C = 4;
  enum : int64_t {
    WTE = 0,
    W = 1,
    TOKENS = 2,
    TARGETS = 3,
    X = 4,
    LOGITS = 5,
    LOSS = 6,
    DLOSS = 7,
    DLOGITS = 8,
    X2 = 9,
    DL2 = 10,
    DW = 11,
    DX = 12,
    DWTE = 13,
    NORM = 14,
    M0 = 15,
    V0 = 16,
    M1 = 17,
    V1 = 18
  };

  static Program build(double lr = 0.05, double maxNorm = 0.0, double wd = 0.0) {
    ProgramBuilder b(B, T, V);
    b.param("wte.weight", {V, C}, 0.5);                // 0
    b.param("head.weight", {C, V}, 0.5);               // 1
    b.buffer("tokens", {B, T}, "input", DType::I32);   // 2
    b.buffer("targets", {B, T}, "input", DType::I32);  // 3
    b.buffer("x", {B, T, C}, "activation");            // 4
    b.buffer("logits", {B, T, V}, "activation");       // 5
    b.buffer("loss", {}, "activation");                // 6
    b.buffer("dloss", {}, "activation_grad");          // 7
    b.buffer("dlogits", {B, T, V}, "activation_grad"); // 8
    b.buffer("x2", {B * T, C}, "activation");          // 9
    b.buffer("dl2", {B * T, V}, "activation_grad");    // 10
    b.buffer("head.weight.grad", {C, V}, "grad");      // 11
    b.buffer("dx", {B, T, C}, "activation_grad");      // 12
    b.buffer("wte.weight.grad", {V, C}, "grad");       // 13
    b.buffer("grad_norm", {}, "workspace");            // 14
    b.zeros("wte.weight.m", {V, C});                   // 15
    b.zeros("wte.weight.v", {V, C});                   // 16
    b.zeros("head.weight.m", {C, V});                  // 17
    b.zeros("head.weight.v", {C, V});                  // 18
    b.p.tokenInputs = {TOKENS}, b.p.targetInputs = {TARGETS}, b.p.loss = LOSS;
    b.p.optimizer.lr = lr;
    b.inst("embedding", {WTE, TOKENS}, {X});
    b.inst("matmul", {X, W}, {LOGITS});
    b.inst("cross_entropy", {LOGITS, TARGETS}, {LOSS});
    b.inst("fill", {}, {DLOSS}, {{"value", ProgramBuilder::num(1.0)}});
    b.inst("cross_entropy_grad", {LOGITS, TARGETS, DLOSS}, {DLOGITS});
    b.inst("reshape", {X}, {X2});
    b.inst("reshape", {DLOGITS}, {DL2});
    b.inst("matmul", {X2, DL2}, {DW}, {{"transpose_a", ProgramBuilder::num(1)}});
    b.inst("matmul", {DLOGITS, W}, {DX}, {{"transpose_b", ProgramBuilder::num(1)}});
    b.inst("embedding_grad", {DX, TOKENS}, {DWTE});
    b.inst("global_norm", {DWTE, DW}, {NORM});
    std::map<std::string, Attr> adam = {
        {"lr", ProgramBuilder::num(lr)},           {"beta1", ProgramBuilder::num(0.9)},
        {"beta2", ProgramBuilder::num(0.95)},      {"eps", ProgramBuilder::num(1e-8)},
        {"weight_decay", ProgramBuilder::num(wd)}, {"max_norm", ProgramBuilder::num(maxNorm)},
        {"clip", ProgramBuilder::num(1)}};
    b.inst("adamw", {WTE, DWTE, M0, V0, NORM}, {WTE, M0, V0}, adam);
    b.inst("adamw", {W, DW, M1, V1, NORM}, {W, M1, V1}, adam);
    return b.finish();
  }
};

using TM = TinyModel;
inline Attr num(double v) { return ProgramBuilder::num(v); }

struct Batch {
  std::vector<int32_t> tokens, targets;
};
inline Batch batch(int64_t seed, int64_t n = TM::B * TM::T) {
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.tokens.push_back(int32_t((3 * i + 1 + 5 * seed) % TM::V));
    b.targets.push_back(int32_t((3 * i + 4 + seed) % TM::V));
  }
  return b;
}

inline std::map<std::string, Attr> adamAttrs(double lr, double maxNorm, double wd) {
  return {{"lr", num(lr)},    {"beta1", num(0.9)},       {"beta2", num(0.95)},
          {"eps", num(1e-8)}, {"weight_decay", num(wd)}, {"max_norm", num(maxNorm)}};
}

// TinyModel with ZeRO-Offload's shape: fp32 masters and moments in the host space, compute copies
// `N.half` (f32 here) on the device, grads and the norm copied to the host on the d2h stream, the
// update on the host stream, the new weights copied back on the h2d stream, joined by a wait.
inline Program offloadTiny(double lr, double maxNorm, double wd) {
  ProgramBuilder b(TM::B, TM::T, TM::V);
  enum : int64_t {
    WTE_M,
    W_M,
    WTE_H,
    W_H,
    TOK,
    TGT,
    X,
    LOGITS,
    LOSS,
    DLOSS,
    DLOGITS,
    X2,
    DL2,
    DW,
    DX,
    DWTE,
    NORM,
    M0,
    V0,
    M1,
    V1,
    DW_h,
    DWTE_h,
    NORM_h,
    WTE_T,
    W_T
  };
  b.buffer("wte.weight", {TM::V, TM::C}, "master", DType::F32, Init{"normal", 0.5}, "host");
  b.buffer("head.weight", {TM::C, TM::V}, "master", DType::F32, Init{"normal", 0.5}, "host");
  b.buffer("wte.weight.half", {TM::V, TM::C}, "param", DType::F32, Init{"copy", 0, "wte.weight"});
  b.buffer("head.weight.half", {TM::C, TM::V}, "param", DType::F32, Init{"copy", 0, "head.weight"});
  b.buffer("tokens", {TM::B, TM::T}, "input", DType::I32);
  b.buffer("targets", {TM::B, TM::T}, "input", DType::I32);
  b.buffer("x", {TM::B, TM::T, TM::C}, "activation");
  b.buffer("logits", {TM::B, TM::T, TM::V}, "activation");
  b.buffer("loss", {}, "activation");
  b.buffer("dloss", {}, "activation_grad");
  b.buffer("dlogits", {TM::B, TM::T, TM::V}, "activation_grad");
  b.buffer("x2", {TM::B * TM::T, TM::C}, "activation");
  b.buffer("dl2", {TM::B * TM::T, TM::V}, "activation_grad");
  b.buffer("head.weight.grad", {TM::C, TM::V}, "grad");
  b.buffer("dx", {TM::B, TM::T, TM::C}, "activation_grad");
  b.buffer("wte.weight.grad", {TM::V, TM::C}, "grad");
  b.buffer("grad_norm", {}, "workspace");
  b.buffer("wte.weight.m", {TM::V, TM::C}, "optimizer", DType::F32, Init{"zeros"}, "host");
  b.buffer("wte.weight.v", {TM::V, TM::C}, "optimizer", DType::F32, Init{"zeros"}, "host");
  b.buffer("head.weight.m", {TM::C, TM::V}, "optimizer", DType::F32, Init{"zeros"}, "host");
  b.buffer("head.weight.v", {TM::C, TM::V}, "optimizer", DType::F32, Init{"zeros"}, "host");
  b.buffer("head.weight.grad.host", {TM::C, TM::V}, "transfer", DType::F32, {}, "host");
  b.buffer("wte.weight.grad.host", {TM::V, TM::C}, "transfer", DType::F32, {}, "host");
  b.buffer("grad_norm.host", {}, "transfer", DType::F32, {}, "host");
  b.buffer("wte.weight.new", {TM::V, TM::C}, "transfer", DType::F32, {}, "host");
  b.buffer("head.weight.new", {TM::C, TM::V}, "transfer", DType::F32, {}, "host");
  b.p.tokenInputs = {TOK}, b.p.targetInputs = {TGT}, b.p.loss = LOSS;
  auto side = [&](Instruction &i, const char *stream, std::vector<int64_t> wait) -> Instruction & {
    i.stream = stream;
    i.wait = std::move(wait);
    return i;
  };
  b.inst("embedding", {WTE_H, TOK}, {X});                            // 0
  b.inst("matmul", {X, W_H}, {LOGITS});                              // 1
  b.inst("cross_entropy", {LOGITS, TGT}, {LOSS});                    // 2
  b.inst("fill", {}, {DLOSS}, {{"value", num(1.0)}});                // 3
  b.inst("cross_entropy_grad", {LOGITS, TGT, DLOSS}, {DLOGITS});     // 4
  b.inst("reshape", {X}, {X2});                                      // 5
  b.inst("reshape", {DLOGITS}, {DL2});                               // 6
  b.inst("matmul", {X2, DL2}, {DW}, {{"transpose_a", num(1)}});      // 7
  side(b.inst("copy", {DW}, {DW_h}), "d2h", {7});                    // 8
  b.inst("matmul", {DLOGITS, W_H}, {DX}, {{"transpose_b", num(1)}}); // 9
  b.inst("embedding_grad", {DX, TOK}, {DWTE});                       // 10
  side(b.inst("copy", {DWTE}, {DWTE_h}), "d2h", {10});               // 11
  b.inst("global_norm", {DWTE, DW}, {NORM});                         // 12
  side(b.inst("copy", {NORM}, {NORM_h}), "d2h", {12});               // 13
  auto adam = adamAttrs(lr, maxNorm, wd);
  adam["clip"] = num(1);
  adam["write_half"] = num(1);
  side(b.inst("adamw", {WTE_M, DWTE_h, M0, V0, NORM_h}, {WTE_M, M0, V0, WTE_T}, adam), "host", {11, 13}); // 14
  side(b.inst("adamw", {W_M, DW_h, M1, V1, NORM_h}, {W_M, M1, V1, W_T}, adam), "host", {8, 13});          // 15
  side(b.inst("copy", {WTE_T}, {WTE_H}), "h2d", {14, 0});                                                 // 16
  side(b.inst("copy", {W_T}, {W_H}), "h2d", {15, 9});                                                     // 17
  side(b.inst("wait", {}, {}), "compute", {16, 17});                                                      // 18
  return b.finish();
}

// TinyModel in fp16 with dynamic loss scaling: f16 compute copies of fp32 masters, f16
// activations and grads, dloss = the loss scale, check_finite, AdamW unscaling, clipping,
// skipping on overflow and writing the f16 copies, loss_scale_update at the end.
namespace f16ids {
enum F16Ids : int64_t {
  F_WTE_M,
  F_W_M,
  F_WTE_H,
  F_W_H,
  F_TOK,
  F_TGT,
  F_X,
  F_LOGITS,
  F_LOSS,
  F_SCALE,
  F_GOOD,
  F_DLOGITS,
  F_X2,
  F_DL2,
  F_DW,
  F_DX,
  F_DWTE,
  F_FOUND,
  F_NORM,
  F_M0,
  F_V0,
  F_M1,
  F_V1
};
} // namespace f16ids
using namespace f16ids;
inline Program fp16Tiny(double lr, double scale0, double growthInterval = 2, DType half = DType::F16) {
  ProgramBuilder b(TM::B, TM::T, TM::V);
  b.p.precision = half == DType::F16 ? "fp16" : "bf16";
  b.buffer("wte.weight", {TM::V, TM::C}, "master", DType::F32, Init{"normal", 0.5});
  b.buffer("head.weight", {TM::C, TM::V}, "master", DType::F32, Init{"normal", 0.5});
  b.buffer("wte.weight.half", {TM::V, TM::C}, "param", half, Init{"copy", 0, "wte.weight"});
  b.buffer("head.weight.half", {TM::C, TM::V}, "param", half, Init{"copy", 0, "head.weight"});
  b.buffer("tokens", {TM::B, TM::T}, "input", DType::I32);
  b.buffer("targets", {TM::B, TM::T}, "input", DType::I32);
  b.buffer("x", {TM::B, TM::T, TM::C}, "activation", half);
  b.buffer("logits", {TM::B, TM::T, TM::V}, "activation", half);
  b.buffer("loss", {}, "activation");
  b.buffer("loss_scale", {}, "optimizer", DType::F32, Init{"fill", 0, "", scale0});
  b.buffer("loss_scale.good_steps", {}, "optimizer", DType::F32, Init{"zeros"});
  b.buffer("dlogits", {TM::B, TM::T, TM::V}, "activation_grad", half);
  b.buffer("x2", {TM::B * TM::T, TM::C}, "activation", half);
  b.buffer("dl2", {TM::B * TM::T, TM::V}, "activation_grad", half);
  b.buffer("head.weight.grad", {TM::C, TM::V}, "grad", half);
  b.buffer("dx", {TM::B, TM::T, TM::C}, "activation_grad", half);
  b.buffer("wte.weight.grad", {TM::V, TM::C}, "grad", half);
  b.buffer("found_inf", {}, "workspace");
  b.buffer("grad_norm", {}, "workspace");
  b.buffer("wte.weight.m", {TM::V, TM::C}, "optimizer", DType::F32, Init{"zeros"});
  b.buffer("wte.weight.v", {TM::V, TM::C}, "optimizer", DType::F32, Init{"zeros"});
  b.buffer("head.weight.m", {TM::C, TM::V}, "optimizer", DType::F32, Init{"zeros"});
  b.buffer("head.weight.v", {TM::C, TM::V}, "optimizer", DType::F32, Init{"zeros"});
  b.p.tokenInputs = {F_TOK}, b.p.targetInputs = {F_TGT}, b.p.loss = F_LOSS;
  b.p.lossScale = F_SCALE, b.p.foundInf = F_FOUND;
  b.inst("embedding", {F_WTE_H, F_TOK}, {F_X});
  b.inst("matmul", {F_X, F_W_H}, {F_LOGITS});
  b.inst("cross_entropy", {F_LOGITS, F_TGT}, {F_LOSS});
  b.inst("cross_entropy_grad", {F_LOGITS, F_TGT, F_SCALE}, {F_DLOGITS});
  b.inst("reshape", {F_X}, {F_X2});
  b.inst("reshape", {F_DLOGITS}, {F_DL2});
  b.inst("matmul", {F_X2, F_DL2}, {F_DW}, {{"transpose_a", num(1)}});
  b.inst("matmul", {F_DLOGITS, F_W_H}, {F_DX}, {{"transpose_b", num(1)}});
  b.inst("embedding_grad", {F_DX, F_TOK}, {F_DWTE});
  b.inst("check_finite", {F_DWTE, F_DW}, {F_FOUND});
  b.inst("global_norm", {F_DWTE, F_DW}, {F_NORM});
  auto adam = adamAttrs(lr, 1.0, 0.0);
  for (const char *f : {"clip", "unscale", "skip_on_overflow", "write_half"}) adam[f] = num(1);
  b.inst("adamw", {F_WTE_M, F_DWTE, F_M0, F_V0, F_NORM, F_SCALE, F_FOUND}, {F_WTE_M, F_M0, F_V0, F_WTE_H}, adam);
  b.inst("adamw", {F_W_M, F_DW, F_M1, F_V1, F_NORM, F_SCALE, F_FOUND}, {F_W_M, F_M1, F_V1, F_W_H}, adam);
  b.inst("loss_scale_update", {F_FOUND, F_SCALE, F_GOOD}, {F_SCALE, F_GOOD},
         {{"growth_interval", num(growthInterval)}, {"backoff", num(0.5)}, {"growth", num(2)}});
  return b.finish();
}

// A fresh empty directory under the test temp dir.
inline std::string tempDir() {
  std::string base = ::testing::TempDir();
  if (base.empty() || base.back() != '/') base += "/";
  std::string tmpl = base + "bigc-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) std::abort();
  return std::string(buf.data());
}

inline std::string wrapPayload(const std::string &payload, int version = 2) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64(payload.data(), payload.size()));
  return "BIGC-PROGRAM " + std::to_string(version) + " " + std::to_string(payload.size()) + " " + hash + "\n" + payload;
}

inline std::string payloadOf(const std::string &file) { return file.substr(file.find('\n') + 1); }

} // namespace bigc::rt::testing
