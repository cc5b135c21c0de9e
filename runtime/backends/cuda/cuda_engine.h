// The CUDA backend's private declarations: error checks, one rank's GPU and NCCL communicators,
// the engine (the CUDA device of the one executor: CudaEngine.cpp, its ops in CudaOps.cpp) and its
// constructor for a rank that the NCCL/MPI wiring (CudaRanks.cpp) starts. Not a public header.
#pragma once

#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/kernel_table.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/stream_executor.h"
#include "kernels.h"

#if BIGC_HAVE_NCCL
#include <nccl.h>
#else
// No NCCL in this CUDA toolkit: multi-rank programs are refused (makeCudaRankGroup).
using ncclComm_t = void *;
#endif
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

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

// One ncclGroupStart ... ncclGroupEnd: end() closes it (and throws on an error); a group left open
// by an error inside it is closed on the way out, so none stays open on the thread.
struct NcclGroup {
  bool open = false;
  NcclGroup() {
    BIGC_NCCL(ncclGroupStart());
    open = true;
  }
  void end() {
    open = false;
    BIGC_NCCL(ncclGroupEnd());
  }
  ~NcclGroup() {
    if (open) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup &) = delete;
  NcclGroup &operator=(const NcclGroup &) = delete;
};
#endif

#define BIGC_LT(x)                                                                                                     \
  do {                                                                                                                 \
    cublasStatus_t s_ = (x);                                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                                   \
      throw std::runtime_error(std::string("cuBLASLt error in ") + #x + ": status " + std::to_string(int(s_)));        \
  } while (0)

// One rank of a multi-rank program: its GPU, its NCCL communicator (the collectives of the data
// axis, stream comm), and whether the engine initialises its buffers (a RankGroup does it for every
// rank); with tensor parallelism, the communicator of its tensor-parallel group (stream comm_tp)
// and its place in that group.
// Virtual ranks (bigc run --virtual-ranks): every rank on one GPU, `host` its communicators as the
// CPU backend's ranks get them (the collectives go through them, staged in pinned host memory), and
// `globalRank` its rank (its nvme file).
struct CudaRank {
  int device = 0;
  ncclComm_t nccl = nullptr;
  bool initialize = true;
  ncclComm_t ncclTp = nullptr;
  int tpRank = 0;
  std::shared_ptr<RankContext> host;
  int globalRank = 0;
  // Pipeline stages over NCCL: communicators of the rank's pipeline group (the ranks of its d and t,
  // one per stage, each at its stage's index): `ncclPp` the stages' sends and recvs (in p2pGroups'
  // groups, stream p2p), `ncclPpColl` the collectives over the pipeline axis (stream comm).
  ncclComm_t ncclPp = nullptr, ncclPpColl = nullptr;
  // Context parallelism over NCCL: the communicator of the rank's cp group (its ring's shifts and
  // all-to-alls, stream comm_cp) and its index c there (its chunks of each sequence).
  ncclComm_t ncclCp = nullptr;
  int cpRank = 0;
};

class CudaEngine final : public StreamExecutor {
public:
  CudaEngine(Program program, uint64_t seed, CudaRank rank = {});
  ~CudaEngine() override;

  const char *backend() const override { return "cuda"; }
  void readBytes(int64_t id, void *dst) const override { download(id, dst); }
  void writeBytes(int64_t id, const void *src) override {
    upload(id, src);
    BIGC_CK(cudaDeviceSynchronize());
  }
  std::string deviceInfo() const override { return info_; }
  std::map<std::string, int64_t> measuredBytes() const override;
  // The registry's ops this device has no kernel for (none: the GPU tests check it).
  static std::vector<OpKind> missingKernels() { return kernels().missing(); }

private:
  // One cuBLASLt call shape.
  struct MatmulShape {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // cuBLASLt's tensor-core kernels want every dimension a multiple of 8 and 16-byte aligned rows:
  // with a vocabulary of 50257 the LM head's three GEMMs run 6-8x slower. Such GEMMs (one product,
  // at least 8 MiB) run on a padded problem: N and K rounded up to multiples of 64 with zeros in the
  // workspace (b once per call, a per chunk, c per chunk and copied out), in chunks of mc rows of c
  // (a multiple of 64) so the staging stays within 256 MiB. The result is the same product.
  struct Staging {
    bool chunked = false, stageA = false, stageB = false, stageC = false;
    int64_t Np = 0, Kp = 0, mc = 0;
    int64_t offA = 0, offB = 0, offC = 0, bytes = 0; // into the op's scratch
  };
  // One GEMM for cuBLASLt: row-major c[m,n] = op(a)[m,k] op(b)[k,n], a and b of type `ab`, c of
  // type `c`; the alignment of the pointers, of a batch's strides (elements) and of the step (bytes)
  // between the pointers of successive calls with this shape.
  struct LtGemm {
    int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
    bool ta = false, tb = false;
    DType ab = DType::F32, c = DType::F32;
    const void *bias = nullptr;
    const void *aux = nullptr; // with bias: the GELU_AUX_BIAS epilogue, the pre-GELU values here (ld ldc)
    int64_t batch = 1, sA = 0, sB = 0, sC = 0;
    const void *aPtr = nullptr, *bPtr = nullptr, *cPtr = nullptr;
    int64_t stepA = 0, stepB = 0, stepC = 0;
  };
  struct MatmulPlan {
    std::vector<MatmulShape> shapes; // [0]: chunks of mc rows (or the whole GEMM), [1]: the last chunk
    Staging st;
  };
  struct Op : BoundOp {
    DType t = DType::F32; // storage type of the op's floating-point tensors (after staging)
    int64_t scratchBytes = 0;
    int mm = -1;
    const void *bias = nullptr; // matmul: bias of the next instruction, added by cuBLASLt's epilogue
    bool fusedAway = false;     // bias_add (bias_gelu) done by the matmul before it
    // matmul followed by bias_gelu (bigc-fuse): cuBLASLt's GELU_AUX_BIAS epilogue writes the
    // pre-GELU values to out[0] (bias_gelu's pre, in place of the matmul's output) and the GELU to
    // epiOut (bias_gelu's y); epiOp is that bias_gelu's index.
    void *epiOut = nullptr;
    int epiOp = -1;
    int flag = -1; // check_finite: index of its int flag
    bool record = false;
    unsigned char *capture = nullptr; // pinned copy of the grad (grad capture)
    float *captureDst = nullptr;      // where it goes in fp32 (the chunk's place in the whole grad)
    // The op's kernel, chosen once at bind time (bindKernel): its launch on a GPU stream (with the
    // stream's scratch), and its run on the host stream where the host can run it (else empty).
    std::function<void(Op &, cudaStream_t, void *scratch)> gpu;
    std::function<void(Op &)> host;
  };
  Op &cop(size_t i) { return static_cast<Op &>(op(i)); }
  const Op &cop(size_t i) const { return static_cast<const Op &>(op(i)); }

  // The device interface (stream_executor.h).
  void *allocateArena(const Space &s, size_t bytes) override;
  void freeArena(size_t space, void *arena, size_t bytes) override;
  std::unique_ptr<BoundOp> makeOp() const override { return std::make_unique<Op>(); }
  void planOp(BoundOp &op) override;
  void launch(BoundOp &op) override;
  // Pipeline stages over NCCL: the sends and recvs in p2pGroups' groups (launchGroup).
  bool groupsMessages() const override { return rank_.ncclPp != nullptr; }
  void launchGroup(const std::vector<BoundOp *> &members) override;
  void loadInputs(const int32_t *tokens, const int32_t *targets) override;
  void waitDevice(const BoundOp &op, int64_t dep, std::chrono::steady_clock::time_point deadline) override;
  void skip(BoundOp &op) override;
  bool timedOnHost(const BoundOp &op) const override { return onHost_[op.stream]; }
  void enableDeviceProfiling() override;
  void onStreamThread() override { BIGC_CK(cudaSetDevice(device_)); }
  void synchronize() override;
  void collectProfile() override;
  void checkDeviceErrors() override;
  void captureGrad(BoundOp &op, std::vector<float> &dst) override;
  void finishCapture() override;
  const void *hostView(const BoundOp &op, int64_t id, const void *ptr, std::vector<unsigned char> &tmp) const override;

  void prepare();
  // The CUDA device's kernel table (CudaOps.cpp; kernel_table.h): per op, a binder that sets its
  // workspace, the limits of its kernel, its GPU launch and its host run; bindKernel applies it.
  using Binder = void (*)(CudaEngine &, Op &);
  static const KernelTable<Binder> &kernels();
  void bindKernel(Op &op);
  void optimizerOnHost(Op &o); // the offloaded optimizer's ops on the host stream (op_dims.h)
  cuda::ErrSlot errSlot(const Op &op) const { return {err_, int(op.index)}; }
  void planMatmul(Op &op);
  void launchMatmul(Op &op, cudaStream_t s, void *scratch);
  // (stepA, stepC: bytes between the a and c pointers of successive calls: the chunks of rows)
  MatmulShape makeShape(const Op &op, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                        const void *aPtr, const void *bPtr, const void *cPtr, int64_t stepA = 0, int64_t stepC = 0);
  MatmulShape ltShape(const Op &op, const LtGemm &g);
  void planLinearCe(Op &op);
  void launchLinearCe(Op &op, cudaStream_t s, void *scratch);
  void fuseBiases();
  Staging matmulStaging(const Op &op) const;
  int64_t matmulStagingBytes(const Op &op) const { return matmulStaging(op).bytes; }
  bool allowStaging_ = true; // off when the GPU cannot spare the workspace
  void issue(Op &op);
  void issueCollective(Op &op, cudaStream_t s);
  void hostCollective(Op &op, cudaStream_t s); // virtual ranks
  void hostSendRecv(Op &op, cudaStream_t s);
  void cpCollective(Op &op, cudaStream_t s, void *ws); // the context axis over NCCL
  bool sumsIn32(const Op &op, size_t k) const;
  // The f32 elements of one chunk of a 16-bit sum over NCCL (64 MiB; issueCollective).
  static constexpr int64_t kWideChunk = int64_t(16) << 20;
  std::vector<int64_t> hostCollOf_; // per stream: pinned bytes its collectives stage (virtual ranks)
  std::vector<void *> hostColl_;
  void upload(int64_t id, const void *src);
  void download(int64_t id, void *dst) const;
  void release();
  void *stagingBase(size_t stream) const { return static_cast<char *>(workspace_) + stageOffset_[stream]; }
  void *scratchBase(size_t stream) const { return static_cast<char *>(workspace_) + scratchOffset_[stream]; }

  int device_ = 0;
  CudaRank rank_;
  void *pad_ = nullptr; // collectives over tensors whose size the ranks do not divide: padded copies
  int64_t padBytes_ = 0;
  std::vector<int64_t> padOffset_; // per stream: its part of pad_ (comm and comm_tp run at once)
  std::string info_;
  std::vector<bool> onHost_;
  std::vector<cudaStream_t> cu_;
  std::vector<cudaEvent_t> events_;
  std::vector<MatmulPlan> plans_;
  cublasLtHandle_t lt_ = nullptr;
  void *workspace_ = nullptr;
  int64_t workspaceBytes_ = 0;
  int64_t usedBeforeArenas_ = 0; // GPU memory in use once the context exists, before the arenas
  std::vector<int64_t> ltOffset_, ltBytes_, scratchOffset_, stageOffset_;
  // Planned per stream while binding (prepare): scratch, padded collective bytes, GEMMs.
  std::vector<int64_t> scratch_, padOf_;
  std::vector<bool> hasMatmul_;
  std::set<int64_t> waitedOn_;
  int flagCount_ = 0;
  int *err_ = nullptr;            // device: [0] instruction + 1, [1] position, [2] id
  int *flags_ = nullptr;          // device: one int per check_finite
  int32_t *inputStage_ = nullptr; // pinned: K*B*T tokens then targets
  struct IdCheck {
    size_t instruction; // the first instruction reading this input
    size_t micro;       // which micro-batch's tokens or targets
    bool target;
    int64_t V;
  };
  std::vector<IdCheck> idChecks_;
  std::vector<unsigned char *> capturePinned_;
  std::vector<cudaEvent_t> profStart_, profEnd_;
};

// The engine of one rank (CudaEngine.cpp).
std::unique_ptr<Engine> makeCudaRankEngine(const Program &program, uint64_t seed, CudaRank rank);

} // namespace bigc::rt
