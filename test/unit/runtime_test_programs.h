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

// The message of the UserError that parsing `bytes` as a program file named m.bigc raises, and of
// validating `p` under that name ("" when there is none).
inline std::string parseError(const std::string &bytes) {
  try {
    parseProgram(bytes, "m.bigc");
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}
inline std::string validateError(const Program &p) {
  try {
    validateProgram(p, "m.bigc");
  } catch (const UserError &e) {
    return e.what();
  }
  return "";
}

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

// A small model in pipeline stages (pipeline parallelism, docs/program-format.md "Pipeline
// stages"): tokens -> embedding(emb.weight) -> matmul(mid.weight) -> h -> matmul(head.weight) ->
// cross_entropy, its backward and AdamW. `stages` 2: stage 0 runs the embedding and the middle
// matmul and sends h (tag 0) to stage 1, which runs the head and the loss and sends dh (tag 1)
// back; stage 0 receives it and finishes the backward. `stages` 1: the same model as one program
// (the reference). `dp` > 1: data parallelism, the gradients all-reduced (mean) over dp on each
// stage. `maxNorm` > 0: gradient clipping by the global norm (on 2 stages: each stage's norm,
// combined by an all_reduce over the pipeline axis, reduce norm). `recvFirst`: stage 0 receives
// dh before it sends h (a pipeline that deadlocks).
struct PipeTiny {
  static constexpr int64_t B = 2, T = 4, V = 8, C = 4;

  static Program build(int64_t stages, int64_t dp = 1, double lr = 0.05, double maxNorm = 0.0, bool recvFirst = false) {
    if (stages == 1) return single(dp, lr, maxNorm);
    Program p0 = stage0(dp, lr, maxNorm, recvFirst);
    p0.stages.push_back(stage1(dp, lr, maxNorm));
    return p0;
  }

private:
  static std::map<std::string, Attr> adam(double lr, double maxNorm) {
    auto a = adamAttrs(lr, maxNorm, 0.0);
    if (maxNorm > 0) a["clip"] = num(1);
    return a;
  }
  static Instruction &on(Instruction &i, const char *stream, std::vector<int64_t> wait) {
    i.stream = stream;
    i.wait = std::move(wait);
    return i;
  }
  static ProgramBuilder start(int64_t stages, int64_t stage, int64_t dp) {
    ProgramBuilder b(B, T, V);
    b.p.ranks = stages * dp, b.p.dp = dp, b.p.pp = stages, b.p.stage = stage;
    if (stages > 1) b.p.ppSchedule = "gpipe";
    return b;
  }
  // The data-parallel mean of grads `g` (a bucket on stream comm after instruction `after`) and
  // the global norm; returns the grads AdamW reads, its norm operand (-1: none) and what its first
  // instruction waits for.
  struct Reduced {
    std::vector<int64_t> grads;
    int64_t norm = -1;
    std::vector<int64_t> wait;
  };
  static Reduced reduce(ProgramBuilder &b, std::vector<int64_t> g, int64_t after, int64_t dp, double maxNorm,
                        bool pipeline) {
    Reduced r{g, -1, {}};
    if (dp > 1) {
      std::vector<int64_t> out;
      for (int64_t id : g)
        out.push_back(b.buffer(b.p.buffers[size_t(id)].name + ".mean", b.p.buffers[size_t(id)].shape, "grad"));
      on(b.inst("all_reduce", g, out, {{"axis", num(0)}, {"reduce", num(1)}}), "comm", {after});
      r.grads = out;
      r.wait = {int64_t(b.p.instructions.size()) - 1};
    }
    if (maxNorm > 0) {
      const int64_t part = b.buffer(pipeline ? "grad_norm.stage" : "grad_norm", {}, "workspace");
      on(b.inst("global_norm", r.grads, {part}), "compute", r.wait);
      r.wait.clear();
      r.norm = part;
      if (pipeline) { // the stages' norms combined over the pipeline axis
        r.norm = b.buffer("grad_norm", {}, "workspace");
        on(b.inst("all_reduce", {part}, {r.norm}, {{"axis", num(2)}, {"reduce", num(3)}}), "comm",
           {int64_t(b.p.instructions.size()) - 1});
        r.wait = {int64_t(b.p.instructions.size()) - 1};
      }
    }
    return r;
  }
  static void adamws(ProgramBuilder &b, const std::vector<int64_t> &w, const Reduced &r, double lr, double maxNorm) {
    for (size_t k = 0; k < w.size(); ++k) {
      const std::string &n = b.p.buffers[size_t(w[k])].name;
      const std::vector<int64_t> shape = b.p.buffers[size_t(w[k])].shape;
      const int64_t m = b.zeros(n + ".m", shape), v = b.zeros(n + ".v", shape);
      std::vector<int64_t> in = {w[k], r.grads[k], m, v};
      if (r.norm >= 0) in.push_back(r.norm);
      on(b.inst("adamw", in, {w[k], m, v}, adam(lr, maxNorm)), "compute", k == 0 ? r.wait : std::vector<int64_t>{});
    }
  }
  static std::map<std::string, Attr> peer(int64_t stage, int64_t tag) {
    return {{"peer", num(double(stage))}, {"tag", num(double(tag))}};
  }

  static Program stage0(int64_t dp, double lr, double maxNorm, bool recvFirst) {
    ProgramBuilder b = start(2, 0, dp);
    const int64_t W0 = b.param("emb.weight", {V, C}, 0.5), W1 = b.param("mid.weight", {C, C}, 0.5);
    const int64_t TOK = b.buffer("tokens", {B, T}, "input", DType::I32);
    const int64_t TGT = b.buffer("targets", {B, T}, "input", DType::I32);
    const int64_t LOSS = b.buffer("loss", {}, "activation"); // not this stage's: the last stage's is the step's
    const int64_t X = b.buffer("x", {B, T, C}, "activation"), H = b.buffer("h", {B, T, C}, "activation");
    const int64_t DH = b.buffer("dh", {B, T, C}, "activation_grad");
    const int64_t X2 = b.buffer("x2", {B * T, C}, "activation"), DH2 = b.buffer("dh2", {B * T, C}, "activation_grad");
    const int64_t DW1 = b.buffer("mid.weight.grad", {C, C}, "grad"), DX = b.buffer("dx", {B, T, C}, "activation_grad");
    const int64_t DW0 = b.buffer("emb.weight.grad", {V, C}, "grad");
    b.p.tokenInputs = {TOK}, b.p.targetInputs = {TGT}, b.p.loss = LOSS;
    b.inst("embedding", {W0, TOK}, {X}); // 0
    b.inst("matmul", {X, W1}, {H});      // 1
    int64_t recv;
    if (recvFirst) {
      on(b.inst("recv", {}, {DH}, peer(1, 1)), "p2p", {}); // 2
      on(b.inst("send", {H}, {}, peer(1, 0)), "p2p", {1}); // 3
      recv = 2;
    } else {
      on(b.inst("send", {H}, {}, peer(1, 0)), "p2p", {1}); // 2
      on(b.inst("recv", {}, {DH}, peer(1, 1)), "p2p", {}); // 3
      recv = 3;
    }
    b.inst("reshape", {X}, {X2});                                  // 4
    on(b.inst("reshape", {DH}, {DH2}), "compute", {recv});         // 5
    b.inst("matmul", {X2, DH2}, {DW1}, {{"transpose_a", num(1)}}); // 6
    b.inst("matmul", {DH, W1}, {DX}, {{"transpose_b", num(1)}});   // 7
    b.inst("embedding_grad", {DX, TOK}, {DW0});                    // 8
    const Reduced r = reduce(b, {DW0, DW1}, 8, dp, maxNorm, true);
    adamws(b, {W0, W1}, r, lr, maxNorm);
    return b.finish();
  }

  static Program stage1(int64_t dp, double lr, double maxNorm) {
    ProgramBuilder b = start(2, 1, dp);
    const int64_t W2 = b.param("head.weight", {C, V}, 0.5);
    const int64_t TOK = b.buffer("tokens", {B, T}, "input", DType::I32);
    const int64_t TGT = b.buffer("targets", {B, T}, "input", DType::I32);
    const int64_t H = b.buffer("h", {B, T, C}, "activation"), LOGITS = b.buffer("logits", {B, T, V}, "activation");
    const int64_t LOSS = b.buffer("loss", {}, "activation"), DLOSS = b.buffer("dloss", {}, "activation_grad");
    const int64_t DLOGITS = b.buffer("dlogits", {B, T, V}, "activation_grad");
    const int64_t H2 = b.buffer("h2", {B * T, C}, "activation"), DL2 = b.buffer("dl2", {B * T, V}, "activation_grad");
    const int64_t DW2 = b.buffer("head.weight.grad", {C, V}, "grad"), DH = b.buffer("dh", {B, T, C}, "activation_grad");
    b.p.tokenInputs = {TOK}, b.p.targetInputs = {TGT}, b.p.loss = LOSS;
    on(b.inst("recv", {}, {H}, peer(0, 0)), "p2p", {});               // 0
    on(b.inst("matmul", {H, W2}, {LOGITS}), "compute", {0});          // 1
    b.inst("cross_entropy", {LOGITS, TGT}, {LOSS});                   // 2
    b.inst("fill", {}, {DLOSS}, {{"value", num(1.0)}});               // 3
    b.inst("cross_entropy_grad", {LOGITS, TGT, DLOSS}, {DLOGITS});    // 4
    b.inst("reshape", {H}, {H2});                                     // 5
    b.inst("reshape", {DLOGITS}, {DL2});                              // 6
    b.inst("matmul", {H2, DL2}, {DW2}, {{"transpose_a", num(1)}});    // 7
    b.inst("matmul", {DLOGITS, W2}, {DH}, {{"transpose_b", num(1)}}); // 8
    on(b.inst("send", {DH}, {}, peer(0, 1)), "p2p", {8});             // 9
    (void)TOK;
    const Reduced r = reduce(b, {DW2}, 8, dp, maxNorm, true);
    adamws(b, {W2}, r, lr, maxNorm);
    return b.finish();
  }

  static Program single(int64_t dp, double lr, double maxNorm) {
    ProgramBuilder b = start(1, 0, dp);
    const int64_t W0 = b.param("emb.weight", {V, C}, 0.5), W1 = b.param("mid.weight", {C, C}, 0.5);
    const int64_t W2 = b.param("head.weight", {C, V}, 0.5);
    const int64_t TOK = b.buffer("tokens", {B, T}, "input", DType::I32);
    const int64_t TGT = b.buffer("targets", {B, T}, "input", DType::I32);
    const int64_t X = b.buffer("x", {B, T, C}, "activation"), H = b.buffer("h", {B, T, C}, "activation");
    const int64_t LOGITS = b.buffer("logits", {B, T, V}, "activation");
    const int64_t LOSS = b.buffer("loss", {}, "activation"), DLOSS = b.buffer("dloss", {}, "activation_grad");
    const int64_t DLOGITS = b.buffer("dlogits", {B, T, V}, "activation_grad");
    const int64_t H2 = b.buffer("h2", {B * T, C}, "activation"), DL2 = b.buffer("dl2", {B * T, V}, "activation_grad");
    const int64_t DW2 = b.buffer("head.weight.grad", {C, V}, "grad"), DH = b.buffer("dh", {B, T, C}, "activation_grad");
    const int64_t X2 = b.buffer("x2", {B * T, C}, "activation"), DH2 = b.buffer("dh2", {B * T, C}, "activation_grad");
    const int64_t DW1 = b.buffer("mid.weight.grad", {C, C}, "grad"), DX = b.buffer("dx", {B, T, C}, "activation_grad");
    const int64_t DW0 = b.buffer("emb.weight.grad", {V, C}, "grad");
    b.p.tokenInputs = {TOK}, b.p.targetInputs = {TGT}, b.p.loss = LOSS;
    b.inst("embedding", {W0, TOK}, {X});
    b.inst("matmul", {X, W1}, {H});
    b.inst("matmul", {H, W2}, {LOGITS});
    b.inst("cross_entropy", {LOGITS, TGT}, {LOSS});
    b.inst("fill", {}, {DLOSS}, {{"value", num(1.0)}});
    b.inst("cross_entropy_grad", {LOGITS, TGT, DLOSS}, {DLOGITS});
    b.inst("reshape", {H}, {H2});
    b.inst("reshape", {DLOGITS}, {DL2});
    b.inst("matmul", {H2, DL2}, {DW2}, {{"transpose_a", num(1)}});
    b.inst("matmul", {DLOGITS, W2}, {DH}, {{"transpose_b", num(1)}});
    b.inst("reshape", {X}, {X2});
    b.inst("reshape", {DH}, {DH2});
    b.inst("matmul", {X2, DH2}, {DW1}, {{"transpose_a", num(1)}});
    b.inst("matmul", {DH, W1}, {DX}, {{"transpose_b", num(1)}});
    b.inst("embedding_grad", {DX, TOK}, {DW0});
    const Reduced r = reduce(b, {DW0, DW1, DW2}, int64_t(b.p.instructions.size()) - 1, dp, maxNorm, false);
    adamws(b, {W0, W1, W2}, r, lr, maxNorm);
    return b.finish();
  }
};

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
