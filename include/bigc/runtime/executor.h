// Runs a validated program on the CPU backend (docs/program-format.md). One arena per memory
// space, allocated once at construction; every buffer at its planned offset; no allocation in
// step(). No MLIR here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bigc/runtime/program.h"

namespace bigc::rt {

// Deterministic initial values (format doc, `init`): a SplitMix64 stream seeded with
// `seed ^ fnv1a64(name)`; element pairs (2k, 2k+1) in row-major order come from one Box–Muller
// draw: u1 = ((next() >> 11) + 1) · 2⁻⁵³ ∈ (0,1], u2 = (next() >> 11) · 2⁻⁵³ ∈ [0,1),
// r = sqrt(-2 ln u1), x[2k] = std · r·cos(2π u2), x[2k+1] = std · r·sin(2π u2) (computed in double,
// rounded to f32); an odd last element takes the cosine of one more pair.
void initNormal(float *x, int64_t n, double std, uint64_t seed, const std::string &name);
uint64_t splitmix64(uint64_t &state);

class Executor {
public:
  // `program` must have passed validateProgram. Throws UserError when an arena does not fit in
  // this machine's memory or the program uses what this runtime cannot run yet.
  Executor(Program program, uint64_t seed);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  // (Re)initialise every persistent buffer from its `init` and reset the step counter to 0.
  void initialize(uint64_t seed);

  // One training step: copies B·T tokens and targets into the input buffers, runs every
  // instruction in order, returns the loss. Throws UserError for a bad token id (naming the step
  // and the instruction's loc). The step counter (AdamW's t) is incremented first.
  float step(const int32_t *tokens, const int32_t *targets);

  const Program &program() const { return prog_; }
  int64_t stepCount() const { return step_; }
  void setStepCount(int64_t t) { step_ = t; }

  void *data(int64_t bufferId) { return ptrs_.at(size_t(bufferId)); }
  const void *data(int64_t bufferId) const { return ptrs_.at(size_t(bufferId)); }
  float *f32(int64_t bufferId) { return static_cast<float *>(data(bufferId)); }
  // Persistent (param/optimizer) buffer by name; nullptr when there is none.
  const Buffer *findPersistent(const std::string &name) const;
  // Buffers of role "param", in program order.
  std::vector<const Buffer *> params() const;
  // Arena size per space name.
  std::map<std::string, int64_t> arenaBytes() const;

  // Grad capture: after enableGradCapture(), each step copies the grad operand of every adamw
  // instruction (as it is when adamw runs) into a host buffer keyed by the param's name.
  void enableGradCapture();
  bool gradCaptureEnabled() const { return capture_; }
  const std::map<std::string, std::vector<float>> &capturedGrads() const { return grads_; }

private:
  struct Op;
  void prepare();
  [[noreturn]] void runtimeError(const Op &op, const std::string &msg) const;

  Program prog_;
  std::vector<void *> arenas_;
  std::map<std::string, int64_t> arenaIndex_;
  std::vector<void *> ptrs_;
  std::vector<Op> ops_;
  int64_t step_ = 0;
  bool capture_ = false;
  std::map<std::string, std::vector<float>> grads_;
  std::vector<float *> captureDst_; // per op, nullptr unless an adamw with capture on
};

} // namespace bigc::rt
