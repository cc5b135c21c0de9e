// Causal attention on strided rows, as every backend's kernels take it: query row t of head h at
// q + (b*T + t)*sq + h*D, key/value rows of head g at k/v + (b*T + t)*skv + g*D, output rows at
// out + (b*T + t)*so + h*D; lse [B,H,T]. Query head h (of H here) reads kv head
// (headOffset + h) / group. window > 0: keys t - window < j <= t only. Plain data; no MLIR, no
// CUDA (the CUDA kernels take it too).
#pragma once

#include <cstdint>

namespace bigc::rt {

struct AttentionGeometry {
  int64_t B = 0, T = 0, H = 0, D = 0, Hkv = 0;
  int64_t sq = 0, skv = 0, so = 0;
  int64_t group = 1, headOffset = 0, window = 0;
  float scale = 1.f;
  float softcap = 0.f; // > 0: scores capped as softcap * tanh(score / softcap) (Gemma 2)
  int64_t kvHead(int64_t h) const { return (headOffset + h) / group; }
};

} // namespace bigc::rt
