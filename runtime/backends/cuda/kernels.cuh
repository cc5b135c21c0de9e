// Device helpers shared by the CUDA kernels: loads and stores of the storage types as fp32 (round
// to nearest even on store) and the dispatch from a DType to a template instance.
#pragma once

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace bigc::rt::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float ld(const f16 *p, int64_t i) { return __half2float(p[i]); }

__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void st(f16 *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <class T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 fromFloat<bf16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ f16 fromFloat<f16>(float v) { return __float2half_rn(v); }

[[noreturn]] inline void badDType(DType t) {
  throw std::runtime_error(std::string("CUDA kernel: unsupported dtype ") + dtypeName(t));
}

// Runs `...` with `T` bound to the storage type of `t` (f32, bf16, f16).
#define BIGC_DISPATCH(t, ...)                                                                                          \
  do {                                                                                                                 \
    switch (t) {                                                                                                       \
    case ::bigc::rt::DType::F32: {                                                                                     \
      using T = float;                                                                                                 \
      __VA_ARGS__;                                                                                                     \
    } break;                                                                                                           \
    case ::bigc::rt::DType::BF16: {                                                                                    \
      using T = ::bigc::rt::cuda::bf16;                                                                                \
      __VA_ARGS__;                                                                                                     \
    } break;                                                                                                           \
    case ::bigc::rt::DType::F16: {                                                                                     \
      using T = ::bigc::rt::cuda::f16;                                                                                 \
      __VA_ARGS__;                                                                                                     \
    } break;                                                                                                           \
    default: ::bigc::rt::cuda::badDType(t);                                                                            \
    }                                                                                                                  \
  } while (0)

} // namespace bigc::rt::cuda
