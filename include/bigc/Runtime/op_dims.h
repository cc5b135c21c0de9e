// What the executors add to an instruction's dims (include/bigc/Format/ops.h: OpDims, decodeOp):
// the attention geometry the kernels take, and the optimizer's instructions on host memory.
// No MLIR here.
#pragma once

#include <cstdint>
#include <vector>

#include "bigc/Runtime/attention_geometry.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/program.h"

namespace bigc::rt {

// OpDims, decodeOp and handlesOwnDtypes: the op registry's (include/bigc/Format/ops.h).

// gqa_attention(_grad): the strided rows of q [B,T,H*D] and k/v [B,T,Hkv*D] the kernels take.
inline AttentionGeometry attentionGeometry(const OpDims &d) {
  AttentionGeometry g;
  g.B = d.B, g.T = d.T, g.H = d.H, g.D = d.headDim, g.Hkv = d.Hkv;
  g.sq = g.so = d.H * d.headDim, g.skv = d.Hkv * d.headDim;
  g.group = d.group, g.headOffset = d.headOffset, g.window = d.window, g.scale = d.scale;
  g.softcap = d.softcap;
  return g;
}

// The offloaded optimizer's instructions on host memory (the CPU backend runs every instruction
// this way; the CUDA backend its host stream): adamw, check_finite, global_norm,
// loss_scale_update. `updates` is the number of updates done before this step (AdamW's t - 1) and
// `lr` the step's learning rate (the schedule's; d.adam.lr without one). Returns false for any
// other op.
bool runOptimizerOpOnHost(OpKind kind, const OpDims &d, const std::vector<void *> &in, const std::vector<void *> &out,
                          const std::vector<DType> &inT, const std::vector<DType> &outT,
                          const std::vector<int64_t> &inN, int64_t updates, float lr);

} // namespace bigc::rt
