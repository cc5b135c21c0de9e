// Fast CPU AdamW (ZeRO-Offload's host-side update). No MLIR here.
//
// Semantics are exactly PyTorch's torch.optim.AdamW (decoupled weight decay), per element i:
//   g    = grad[i] * gradScale                 (grad read as f32, bf16 or f16)
//   p    = p * (1 - lr * weightDecay)
//   m    = beta1 * m + (1 - beta1) * g
//   v    = beta2 * v + (1 - beta2) * g * g
//   p    = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
//   half = cast(p) in halfType                 (only when half != nullptr; round-to-nearest-even)
// param, m, v are fp32 (master weights and moments). The bias corrections are computed once per
// call (in double). The hyperparameters are floats; the constants made from them (1 - beta,
// beta^t, 1 - lr*wd, lr/(1 - beta1^t)) are formed in double from the decimal the float stands
// for (0.999f -> 0.999), as PyTorch forms them from its Python doubles: 1 - 0.999f would be
// 0.00099998713 where PyTorch uses 0.001. The update is one pass over memory: each element of param, grad, m, v is read
// once and param, m, v (and half) written once.
//
// Implementation: OpenMP across chunks (the calling thread's OpenMP team; set the thread count
// with omp_set_num_threads / OMP_NUM_THREADS), AVX-512 or AVX2+FMA+F16C vector code chosen at run
// time (__builtin_cpu_supports), scalar code otherwise. All paths give the same results as the
// scalar code to within 1 ulp. `half` may alias nothing else; param/m/v must not overlap.
#pragma once

#include "bigc/Format/ops.h"
#include "bigc/Runtime/format.h"
#include "bigc/Runtime/program.h"

#include <cstdint>

namespace bigc::rt {

// The hyperparameters of one AdamW call (the format's AdamArgs, which an instruction's dims hold).
using CpuAdamArgs = AdamArgs;

// The per-call constants every AdamW implementation of bigc uses (bias corrections formed once,
// in double, from the decimals the float hyperparameters stand for). Per element, exactly:
//   g = grad * gradScale; p' = p * decay; m' = fma(m, beta1, oneMinusBeta1 * g);
//   v' = fma(v, beta2, (oneMinusBeta2 * g) * g); p' = fma(-stepSize, m' / fma(sqrt(v'), invBc2Sqrt, eps), p')
// (the CUDA backend's fused AdamW evaluates the same expression, so both agree bit for bit).
struct AdamWConsts {
  float gradScale; // g = grad * gradScale
  float decay;     // p *= 1 - lr * wd
  float beta1, oneMinusBeta1;
  float beta2, oneMinusBeta2;
  float stepSize;   // lr / (1 - beta1^t)
  float invBc2Sqrt; // 1 / sqrt(1 - beta2^t)
  float eps;
};
AdamWConsts adamWConsts(const CpuAdamArgs &a);

// One AdamW step over n elements. gradType and halfType are F32, BF16 or F16 (anything else, or
// step < 1, or n < 0 throws UserError). half may be null (then halfType is ignored).
void cpuAdamW(float *param, const void *grad, DType gradType, float *m, float *v, void *half, DType halfType, int64_t n,
              const CpuAdamArgs &a);

// The same with the moments m, v of `stateType` F32 (cpuAdamW) or BF16 (--optimizer-states bf16):
// each thread's range in pieces of 2048 elements, the moments widened to fp32 (exactly), updated
// by the fp32 code above, and stored rounded to the nearest even bf16; the bytes moved per element
// are those of bf16 moments.
void cpuAdamWStates(float *param, const void *grad, DType gradType, void *m, void *v, DType stateType, void *half,
                    DType halfType, int64_t n, const CpuAdamArgs &a);

// Which vector code cpuAdamW uses on this machine: "avx512", "avx2" or "scalar".
const char *cpuAdamIsa();

// For tests and benchmarks: force a code path ("avx512", "avx2", "scalar"; "" = automatic).
// Returns false (and changes nothing) when this machine cannot run the requested path.
bool cpuAdamForceIsa(const char *isa);

} // namespace bigc::rt
