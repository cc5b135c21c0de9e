// The CUDA backend's private declarations: error checks, one rank's GPU and NCCL communicators,
// and the engine's constructor for a rank (CudaEngine.cpp) that the NCCL/MPI wiring
// (CudaRanks.cpp) starts. Not a public header.
#pragma once

#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/program.h"

#if BIGC_HAVE_NCCL
#include <nccl.h>
#else
// No NCCL in this CUDA toolkit: multi-rank programs are refused (makeCudaRankGroup).
using ncclComm_t = void *;
#endif
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace bigc::rt {

[[noreturn]] inline void cudaFail(cudaError_t e, const char *what) {
  throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
#define BIGC_CK(x)                                                                                                     \
  do {                                                                                                                 \
    cudaError_t e_ = (x);                                                                                              \
    if (e_ != cudaSuccess) cudaFail(e_, #x);                                                                           \
  } while (0)

#if BIGC_HAVE_NCCL
#define BIGC_NCCL(x)                                                                                                   \
  do {                                                                                                                 \
    ncclResult_t r_ = (x);                                                                                             \
    if (r_ != ncclSuccess) throw UserError(std::string("NCCL: ") + #x + ": " + ncclGetErrorString(r_));                \
  } while (0)
#endif

// One rank of a multi-rank program: its GPU, its NCCL communicator (the collectives of the data
// axis, stream comm), and whether the engine initialises its buffers (a RankGroup does it for every
// rank); with tensor parallelism, the communicator of its tensor-parallel group (stream comm_tp)
// and its place in that group.
struct CudaRank {
  int device = 0;
  ncclComm_t nccl = nullptr;
  bool initialize = true;
  ncclComm_t ncclTp = nullptr;
  int tpRank = 0;
};

// The engine of one rank (CudaEngine.cpp).
std::unique_ptr<Engine> makeCudaRankEngine(const Program &program, uint64_t seed, CudaRank rank);

} // namespace bigc::rt
