// The CUDA backend's engine: the program's plan on one GPU.
//
// - One cudaMalloc per memory space at its planned size ("device"), the host space in pinned
//   memory (cudaHostAlloc), every buffer at its planned offset. One more device allocation, made
//   at load and reported, holds the workspace the kernels need (cuBLASLt's, reduction partials,
//   the embedding backward's sort, fp32 staging for instructions whose operands mix dtypes) and
//   the error slots. Nothing is allocated in step().
// - The CUDA device of the one executor (stream_executor.h), which binds the program, runs every
//   stream on its issuing thread, counts, profiles and checks numerics. Program streams map to
//   CUDA streams (compute, h2d, d2h, ...) and the `host` stream to a CPU thread; a `wait` on an
//   instruction of a GPU stream becomes cudaStreamWaitEvent on the event recorded after it (or,
//   on the host stream, a wait for that event), a wait on a host instruction waits for it on the
//   CPU. Waits time out instead of hanging. The NCCL/MPI wiring of ranks is CudaRanks.cpp.
// - GEMMs go through cuBLASLt (fp32 accumulation; fp32 GEMMs without TF32, so fp32 programs match
//   the CPU backend), attention through the flash kernels of Attention.cu (grouped-query attention
//   through its generic kernels on strided rows), the rest through Kernels.cu. Host instructions
//   (the offloaded AdamW, its norms and checks) use the CPU backend's code on the pinned host arena.
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/loss_scale.h"
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/stream_executor.h"
#include "bigc/Support/format.h"
#include "cuda_engine.h"
#include "kernels.h"

#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace bigc::rt {

namespace {

#define BIGC_LT(x)                                                                                                     \
  do {                                                                                                                 \
    cublasStatus_t s_ = (x);                                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                                   \
      throw std::runtime_error(std::string("cuBLASLt error in ") + #x + ": status " + std::to_string(int(s_)));        \
  } while (0)

const auto human = humanBytes;

std::string cudaVersion(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::BF16: return CUDA_R_16BF;
  case DType::F16: return CUDA_R_16F;
  default: return CUDA_R_32F;
  }
}

// What the host stream can run (the offloaded optimizer: AdamW, norms, checks, scaling).
bool hostOp(OpKind k) {
  switch (k) {
  case OpKind::AdamW:
  case OpKind::CheckFinite:
  case OpKind::GlobalNorm:
  case OpKind::LossScaleUpdate:
  case OpKind::Cast:
  case OpKind::Copy:
  case OpKind::Reshape:
  case OpKind::Fill:
  case OpKind::Scale:
  case OpKind::Wait: return true;
  default: return false;
  }
}

uint32_t alignmentOf(const void *p, int64_t strideBytes) {
  uint64_t a = 256;
  while (a > 1 && (reinterpret_cast<uintptr_t>(p) % a != 0 || (strideBytes && strideBytes % int64_t(a) != 0))) a /= 2;
  return uint32_t(a);
}

} // namespace

bool cudaBackendCompiled() { return true; }

bool cudaDeviceVisible(std::string *why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) {
      int drv = 0, rtv = 0;
      cudaDriverGetVersion(&drv);
      cudaRuntimeGetVersion(&rtv);
      if (e == cudaErrorInsufficientDriver && drv > 0)
        *why = "the NVIDIA driver supports CUDA " + cudaVersion(drv) + " but this build needs CUDA " +
               cudaVersion(rtv) + ": update the driver, or rebuild with a CUDA toolkit the driver supports";
      else if (drv == 0)
        *why = "no CUDA GPU is usable: no NVIDIA driver is loaded (" + std::string(cudaGetErrorString(e)) + ")";
      else
        *why = "no CUDA GPU is usable (" + std::string(cudaGetErrorString(e)) + ")";
    }
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA GPU is visible";
    return false;
  }
  return true;
}

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
  struct MatmulPlan {
    std::vector<MatmulShape> shapes; // [0]: chunks of mc rows (or the whole GEMM), [1]: the last chunk
    Staging st;
  };
  struct Op : BoundOp {
    DType t = DType::F32; // storage type of the op's floating-point tensors (after staging)
    int64_t scratchBytes = 0;
    int mm = -1;
    const void *bias = nullptr; // matmul: bias of the next instruction, added by cuBLASLt's epilogue
    bool fusedAway = false;     // bias_add done by the matmul before it
    int flag = -1;              // check_finite: index of its int flag
    bool record = false;
    unsigned char *capture = nullptr; // pinned copy of the grad (grad capture)
  };
  Op &cop(size_t i) { return static_cast<Op &>(op(i)); }
  const Op &cop(size_t i) const { return static_cast<const Op &>(op(i)); }

  // The device interface (stream_executor.h).
  void *allocateArena(const Space &s, size_t bytes) override;
  void freeArena(size_t space, void *arena, size_t bytes) override;
  std::unique_ptr<BoundOp> makeOp() const override { return std::make_unique<Op>(); }
  void planOp(BoundOp &op) override;
  void launch(BoundOp &op) override;
  void loadInputs(const int32_t *tokens, const int32_t *targets) override;
  void waitDevice(const BoundOp &op, int64_t dep, std::chrono::steady_clock::time_point deadline) override;
  bool timedOnHost(const BoundOp &op) const override { return onHost_[op.stream]; }
  void enableDeviceProfiling() override;
  void onStreamThread() override { cudaSetDevice(device_); }
  void synchronize() override;
  void collectProfile() override;
  void checkDeviceErrors() override;
  void captureGrad(BoundOp &op, std::vector<float> &dst) override;
  void finishCapture() override;
  const void *hostView(const BoundOp &op, int64_t id, const void *ptr, std::vector<unsigned char> &tmp) const override;

  void prepare();
  void planMatmul(Op &op);
  MatmulShape makeShape(const Op &op, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                        const void *aPtr, const void *bPtr, const void *cPtr);
  void fuseBiases();
  Staging matmulStaging(const Op &op) const;
  int64_t matmulStagingBytes(const Op &op) const { return matmulStaging(op).bytes; }
  bool allowStaging_ = true; // off when the GPU cannot spare the workspace
  void issue(Op &op);
  void issueCollective(Op &op, cudaStream_t s);
  void runHost(Op &op);
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

CudaEngine::CudaEngine(Program program, uint64_t seed, CudaRank rank)
    : StreamExecutor(std::move(program), rank.tpRank), device_(rank.device), rank_(rank) {
  stampWait_ = " to be issued";
  std::string why;
  if (!cudaDeviceVisible(&why)) throw UserError(why);
  if (prog_.ranks != 1 && (!rank_.nccl || (prog_.tp > 1 && !rank_.ncclTp)))
    throw UserError("this program has " + std::to_string(prog_.ranks) +
                    " ranks: run it with `bigc run`, which starts "
                    "every rank with its GPU and NCCL communicators");
  BIGC_CK(cudaSetDevice(device_));
  cudaDeviceProp props{};
  BIGC_CK(cudaGetDeviceProperties(&props, device_));
  try {
    // Spaces: "device" in GPU memory, "host" pinned.
    int64_t deviceArena = 0;
    for (const auto &s : prog_.spaces) {
      if (s.name != "device" && s.name != "host")
        throw UserError("memory space '" + s.name + "' is not supported by the CUDA backend (device and host are)");
      if (s.name == "device") deviceArena = s.arenaBytes;
    }
    checkPhysicalMemory([](const Space &s) { return s.name == "host"; });

    prepare(); // decides the workspace size
    size_t freeB = 0, totalB = 0;
    BIGC_CK(cudaFree(nullptr)); // the context exists from here
    BIGC_CK(cudaMemGetInfo(&freeB, &totalB));
    usedBeforeArenas_ = int64_t(totalB) - int64_t(freeB);
    if (deviceArena + workspaceBytes_ > int64_t(freeB)) { // without the GEMM staging (slower, smaller)
      allowStaging_ = false;
      prepare();
    }
    const int64_t need = deviceArena + workspaceBytes_;
    if (need > int64_t(freeB))
      throw UserError("the program needs " + human(need) + " of GPU memory (device arena " + human(deviceArena) +
                      " + workspace " + human(workspaceBytes_) + "); GPU " + std::to_string(device_) + " (" +
                      props.name + ") has " + human(int64_t(freeB)) + " free of " + human(int64_t(totalB)) +
                      ". Compile for this GPU (--device-mem " + std::to_string(int64_t(freeB) >> 30) +
                      "G, or its --hardware profile) so the compiler recomputes, offloads or shrinks what it must");

    allocateArenas();

    cudaError_t e = cudaMalloc(&workspace_, size_t(workspaceBytes_));
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw UserError("cannot allocate the CUDA workspace of " + human(workspaceBytes_) + ": " + cudaGetErrorString(e));
    }
    BIGC_CK(cudaMemset(workspace_, 0, size_t(workspaceBytes_)));
    if (padBytes_ > 0) {
      e = cudaMalloc(&pad_, size_t(padBytes_));
      if (e != cudaSuccess) {
        cudaGetLastError();
        throw UserError("cannot allocate the " + human(padBytes_) +
                        " of padded collective buffers: " + cudaGetErrorString(e));
      }
    }
    err_ = static_cast<int *>(workspace_);
    flags_ = err_ + 16;
    const int64_t bt = prog_.batch * prog_.seq * int64_t(prog_.tokenInputs.size());
    BIGC_CK(cudaHostAlloc(reinterpret_cast<void **>(&inputStage_), size_t(std::max<int64_t>(2 * bt, 1)) * 4,
                          cudaHostAllocPortable));

    // Final pointers: arena, or the stream's staging for operands converted to fp32.
    bindOperands([&](size_t s) { return stagingBase(s); });
    BIGC_LT(cublasLtCreate(&lt_));
    fuseBiases();
    for (size_t i = 0; i < ops_.size(); ++i)
      if (cop(i).kind == OpKind::Matmul) planMatmul(cop(i));

    cu_.assign(streamNames_.size(), nullptr);
    for (size_t s = 0; s < streamNames_.size(); ++s)
      if (!onHost_[s]) BIGC_CK(cudaStreamCreateWithFlags(&cu_[s], cudaStreamNonBlocking));
    events_.assign(ops_.size(), nullptr);
    for (size_t i = 0; i < ops_.size(); ++i)
      if (cop(i).record) BIGC_CK(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming));

    // What this process holds outside the plan: the context and libraries (in use before the
    // arenas, on a GPU nothing else uses), the workspace and padded collective buffers; the
    // compiler kept `device_reserve_bytes` of the GPU for it.
    size_t freeNow = 0, totalNow = 0;
    BIGC_CK(cudaMemGetInfo(&freeNow, &totalNow));
    const int64_t outside = int64_t(totalNow) - int64_t(freeNow) - deviceArena;
    char buf[768];
    std::snprintf(buf, sizeof buf, "GPU %d: %s (%s), in use outside the plan %s (before the arenas %s, workspace %s)",
                  device_, props.name, human(int64_t(props.totalGlobalMem)).c_str(), human(outside).c_str(),
                  human(usedBeforeArenas_).c_str(), human(workspaceBytes_ + padBytes_).c_str());
    info_ = buf;
    if (prog_.deviceReserveBytes > 0 && outside > prog_.deviceReserveBytes)
      info_ += "; note: more than the " + human(prog_.deviceReserveBytes) +
               " the plan reserved (raise device_reserve in the hardware profile)";
    if (rank_.initialize) initialize(seed);
  } catch (...) {
    release();
    throw;
  }

  // Side streams: one issuing thread each, created once.
  startStreams();
}

void *CudaEngine::allocateArena(const Space &s, size_t bytes) {
  void *p = nullptr;
  if (s.name == "device") {
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw UserError("cannot allocate the device arena of " + human(s.arenaBytes) + " on GPU " +
                      std::to_string(device_) + ": " + cudaGetErrorString(e));
    }
    BIGC_CK(cudaMemset(p, 0, bytes));
  } else {
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw UserError("cannot pin the host arena of " + human(s.arenaBytes) + ": " + cudaGetErrorString(e));
    }
    std::memset(p, 0, bytes);
  }
  return p;
}

void CudaEngine::freeArena(size_t space, void *arena, size_t) {
  if (prog_.spaces[space].name == "device")
    cudaFree(arena);
  else
    cudaFreeHost(arena);
}

std::map<std::string, int64_t> CudaEngine::measuredBytes() const {
  std::map<std::string, int64_t> out;
  size_t freeB = 0, totalB = 0;
  BIGC_CK(cudaSetDevice(device_));
  BIGC_CK(cudaMemGetInfo(&freeB, &totalB));
  for (const auto &s : prog_.spaces)
    out[s.name] = s.name == "device" ? int64_t(totalB) - int64_t(freeB) : s.arenaBytes; // host: pinned, resident
  return out;
}

CudaEngine::~CudaEngine() {
  stopStreams();
  release();
}

void CudaEngine::release() {
  cudaDeviceSynchronize();
  for (auto &plan : plans_)
    for (auto &p : plan.shapes) {
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    }
  plans_.clear();
  if (lt_) cublasLtDestroy(lt_), lt_ = nullptr;
  for (cudaEvent_t e : events_)
    if (e) cudaEventDestroy(e);
  events_.clear();
  for (auto *v : {&profStart_, &profEnd_}) {
    for (cudaEvent_t e : *v)
      if (e) cudaEventDestroy(e);
    v->clear();
  }
  for (cudaStream_t s : cu_)
    if (s) cudaStreamDestroy(s);
  cu_.clear();
  freeArenas();
  if (workspace_) cudaFree(workspace_), workspace_ = nullptr;
  if (pad_) cudaFree(pad_), pad_ = nullptr;
  if (inputStage_) cudaFreeHost(inputStage_), inputStage_ = nullptr;
  for (unsigned char *p : capturePinned_)
    if (p) cudaFreeHost(p);
  capturePinned_.clear();
  cudaGetLastError();
}

// Binds the program (the one executor's bindOps, with planOp below per instruction), then lays out
// the workspace: it decides the workspace size.
void CudaEngine::prepare() {
  // The streams as bindOps names them (compute first): which run on the host, what each plans.
  std::vector<std::string> names = {"compute"};
  for (const auto &ins : prog_.instructions)
    if (std::find(names.begin(), names.end(), ins.stream) == names.end()) names.push_back(ins.stream);
  onHost_.assign(names.size(), false);
  for (size_t s = 0; s < names.size(); ++s) onHost_[s] = names[s] == "host";
  scratch_.assign(names.size(), 0), padOf_.assign(names.size(), 0);
  hasMatmul_.assign(names.size(), false);
  flagCount_ = 0;
  waitedOn_.clear();
  for (const auto &ins : prog_.instructions)
    for (int64_t w : ins.wait) waitedOn_.insert(w);

  bindOps();

  // Padded collective buffers: a part per comm stream (their collectives run at once).
  padOffset_.assign(streamNames_.size(), 0);
  padBytes_ = 0;
  for (size_t st = 0; st < streamNames_.size(); ++st) padOffset_[st] = padBytes_, padBytes_ += padOf_[st];

  // Collectives on more than one stream (the data and tensor axes): each after the previous one.
  // NCCL calls on different communicators must be issued in the same order on every rank: a
  // collective is issued after the one before it in program order (issued, not finished: the data
  // and tensor axes' collectives still overlap on the GPU).
  int64_t lastCollective = -1;
  for (size_t i = 0; i < ops_.size(); ++i) {
    Op &op = cop(i);
    if (!op.isCollective()) continue;
    if (lastCollective >= 0 && cop(size_t(lastCollective)).stream != op.stream) op.issuedAfter = lastCollective;
    lastCollective = int64_t(op.index);
  }
  // Host-side id checks: per token/target input, its first reader among the ops that index with it.
  idChecks_.clear();
  for (size_t k = 0; k < prog_.tokenInputs.size(); ++k)
    for (bool target : {false, true}) {
      const int64_t id = target ? prog_.targetInputs[k] : prog_.tokenInputs[k];
      for (const auto &p : ops_) {
        const BoundOp &op = *p;
        const bool reads =
            (op.kind == OpKind::Embedding || op.kind == OpKind::EmbeddingGrad || op.kind == OpKind::CrossEntropy ||
             op.kind == OpKind::CrossEntropyGrad || op.kind == OpKind::VocabCeStats) &&
            op.ins->in.size() > 1 && op.ins->in[1] == id;
        if (reads) {
          idChecks_.push_back({op.index, k, target, op.vocab > 0 ? op.vocab : op.V}); // the whole vocabulary
          break;
        }
      }
    }
  std::sort(idChecks_.begin(), idChecks_.end(),
            [](const IdCheck &a, const IdCheck &b) { return a.instruction < b.instruction; });

  // Workspace: error slots and check_finite flags, then per GPU stream its cuBLASLt workspace (32
  // MiB where it runs GEMMs), its scratch and its staging.
  int64_t off = int64_t(cuda::align256(size_t(16 + flagCount_) * 4));
  ltOffset_.assign(streamNames_.size(), 0), ltBytes_.assign(streamNames_.size(), 0);
  scratchOffset_.assign(streamNames_.size(), 0), stageOffset_.assign(streamNames_.size(), 0);
  for (size_t s = 0; s < streamNames_.size(); ++s) {
    if (onHost_[s]) continue;
    ltOffset_[s] = off;
    ltBytes_[s] = hasMatmul_[s] ? (int64_t(32) << 20) : 0;
    off += ltBytes_[s];
    scratchOffset_[s] = off;
    off += int64_t(cuda::align256(size_t(scratch_[s])));
    stageOffset_[s] = off;
    off += int64_t(cuda::align256(size_t(stagingBytes_[s])));
  }
  workspaceBytes_ = std::max<int64_t>(off, 256);
}

// Per instruction at bind time: what the host stream may run, the storage type and fp32 staging
// of mixed-dtype ops, the workspace each kernel needs, what the CUDA backend cannot run.
void CudaEngine::planOp(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  const Instruction &ins = *op.ins;
  op.record = waitedOn_.count(int64_t(op.index)) > 0;
  auto where = [&] {
    return "instruction " + std::to_string(op.index) + " (" + ins.op + (ins.loc.empty() ? "" : " at " + ins.loc) + ")";
  };

  if (onHost_[op.stream]) {
    if (!hostOp(op.kind))
      throw UserError(where() + ": the CUDA backend runs only the optimizer's instructions (adamw, global_norm, "
                                "check_finite, loss_scale_update, cast, copy, fill, scale) on the host stream");
    for (int64_t id : ins.in)
      if (prog_.buffers[size_t(id)].space != "host")
        throw UserError(where() + " runs on the host stream but reads buffer '" + prog_.buffers[size_t(id)].name +
                        "' of space '" + prog_.buffers[size_t(id)].space + "'");
    for (int64_t id : ins.out)
      if (prog_.buffers[size_t(id)].space != "host")
        throw UserError(where() + " runs on the host stream but writes buffer '" + prog_.buffers[size_t(id)].name +
                        "' of space '" + prog_.buffers[size_t(id)].space + "'");
  } else if (!handlesOwnDtypes(op.kind)) {
    // One storage type for the op's floating-point tensors; when they differ, every 16-bit one
    // is converted into fp32 staging and the fp32 kernel runs (the CPU backend's way).
    std::set<DType> types;
    for (size_t k = 0; k < ins.in.size(); ++k)
      if (operandType(op.kind, true, k) == OperandType::Float) types.insert(op.inType[k]);
    for (size_t k = 0; k < ins.out.size(); ++k)
      if (operandType(op.kind, false, k) == OperandType::Float) types.insert(op.outType[k]);
    if (types.size() <= 1) {
      op.t = types.empty() ? DType::F32 : *types.begin();
    } else {
      op.t = DType::F32;
      stageOperands(
          op, [&](bool input, size_t k) { return operandType(op.kind, input, k) == OperandType::Float; }, 256);
    }
  }

  switch (op.kind) { // the workspace each kernel needs
  case OpKind::EmbeddingGrad: op.scratchBytes = int64_t(cuda::embeddingGradWorkspace(op.n, op.V)); break;
  case OpKind::Matmul:
    hasMatmul_[op.stream] = true;
    op.scratchBytes = matmulStagingBytes(op);
    break;
  case OpKind::ReduceSum: op.scratchBytes = int64_t(cuda::reduceSumWorkspace(op.rows, op.cols)); break;
  case OpKind::LayernormGrad: op.scratchBytes = int64_t(cuda::layernormGradWorkspace(op.N, op.C)); break;
  case OpKind::AttentionGrad: op.scratchBytes = int64_t(cuda::attentionGradWorkspace(op.B, op.T, op.H)); break;
  case OpKind::RmsNormGrad: op.scratchBytes = int64_t(cuda::rmsnormGradWorkspace(op.N, op.C)); break;
  case OpKind::Rope:
    if (op.headDim / 2 > cuda::kRopeMaxHalf || int64_t(op.invFreq.size()) < op.headDim / 2)
      throw UserError(where() + ": rope with head_dim " + std::to_string(op.headDim) +
                      " (the CUDA backend supports up to " + std::to_string(2 * cuda::kRopeMaxHalf) + ")");
    break;
  case OpKind::GqaAttention:
  case OpKind::GqaAttentionGrad:
    if (op.headDim > cuda::kGenericAttentionMaxHead)
      throw UserError(where() + ": attention head size " + std::to_string(op.headDim) +
                      " exceeds the CUDA backend's limit of " + std::to_string(cuda::kGenericAttentionMaxHead));
    if (op.kind == OpKind::GqaAttentionGrad) op.scratchBytes = int64_t(cuda::attentionGradWorkspace(op.B, op.T, op.H));
    break;
  case OpKind::CrossEntropy: op.scratchBytes = int64_t(cuda::crossEntropyWorkspace(op.N)); break;
  case OpKind::VocabCeLoss: op.scratchBytes = int64_t(cuda::vocabCeLossWorkspace(op.N)); break;
  case OpKind::Transpose:
    if (op.shape.size() > 8)
      throw UserError(where() + ": transpose of rank " + std::to_string(op.shape.size()) +
                      " (the CUDA backend supports up to 8)");
    break;
  case OpKind::GlobalNorm: {
    int64_t slots = 0;
    for (int64_t n : op.inNumel) slots += cuda::partialSlots(n);
    op.scratchBytes = slots * 8;
    break;
  }
  case OpKind::CheckFinite:
    if (!onHost_[op.stream]) op.flag = flagCount_++;
    break;
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather: {
    if (onHost_[op.stream] || (ins.stream != "comm" && ins.stream != "comm_tp"))
      throw UserError(where() + ": collectives run on the comm or comm_tp stream");
    const int64_t D = prog_.axisSize(int64_t(ins.num("axis", 0)));
    int64_t pad = 0;
    for (size_t k = 0; k < ins.in.size() && op.kind != OpKind::AllReduce; ++k) {
      const int64_t whole = op.kind == OpKind::ReduceScatter ? op.inNumel[k] : op.outNumel[k];
      const int64_t S = op.kind == OpKind::ReduceScatter ? op.outNumel[k] : op.inNumel[k];
      if (whole != S * D) pad += int64_t(cuda::align256(size_t(S * D * dtypeSize(op.inType[k]))));
    }
    padOf_[op.stream] = std::max(padOf_[op.stream], pad);
    break;
  }
  default: break;
  }
  scratch_[op.stream] = std::max(scratch_[op.stream], op.scratchBytes);
}

// A bias_add right after the matmul that produces its input, in place (the program format's
// in-place rule: the matmul's output dies there), on the same stream with no waits of its own:
// cuBLASLt adds the bias in the GEMM's epilogue and the bias_add does nothing. BIGC_FUSE=0 turns
// this off.
void CudaEngine::fuseBiases() {
  const char *env = std::getenv("BIGC_FUSE");
  if (env && std::string(env) == "0") return;
  for (size_t i = 0; i + 1 < ops_.size(); ++i) {
    Op &m = cop(i), &b = cop(i + 1);
    if (m.kind != OpKind::Matmul || b.kind != OpKind::BiasAdd || m.stream != b.stream || onHost_[m.stream]) continue;
    if (!b.ins->wait.empty() || b.ins->in[0] != m.ins->out[0] || b.out[0] != m.out[0]) continue;
    if (!m.pre.empty() || !m.post.empty() || !b.pre.empty() || !b.post.empty() || m.t != b.t) continue;
    if (m.batch != 1 || b.cols != m.N || matmulStaging(m).chunked) continue;
    m.bias = b.in[1];
    b.fusedAway = true;
  }
}
CudaEngine::Staging CudaEngine::matmulStaging(const Op &op) const {
  Staging st;
  if (!allowStaging_) return st;
  const int64_t es = dtypeSize(op.t);
  const int64_t lda = op.ta ? op.M : op.K, ldb = op.tb ? op.K : op.N;
  auto misaligned = [&](int64_t ld) { return (ld * es) % 16 != 0; };
  auto pad = [](int64_t n) { return (n + 63) / 64 * 64; };
  const bool big = std::max({op.M * op.K, op.M * op.N, op.K * op.N}) * es >= (int64_t(8) << 20);
  const bool odd = op.N % 8 != 0 || op.K % 8 != 0 || misaligned(lda) || misaligned(ldb) || misaligned(op.N);
  if (op.batch != 1 || !big || !odd) return st;
  st.chunked = true;
  st.Np = op.N % 8 ? pad(op.N) : op.N;
  st.Kp = op.K % 8 ? pad(op.K) : op.K;
  st.stageA = st.Kp != op.K || misaligned(lda);
  st.stageB = st.Kp != op.K || st.Np != op.N || misaligned(ldb);
  st.stageC = st.Np != op.N || misaligned(op.N);
  const char *env = std::getenv("BIGC_GEMM_STAGING_MB"); // tests: small chunks
  const int64_t budget = (env && std::atoll(env) > 0 ? std::atoll(env) : 256) << 20;
  const int64_t perRow = ((st.stageA ? st.Kp : 0) + (st.stageC ? st.Np : 0)) * es;
  st.mc = perRow > 0 ? std::max<int64_t>(64, budget / perRow / 64 * 64) : pad(op.M);
  st.mc = std::min(st.mc, pad(op.M));
  const int64_t bBytes = st.stageB ? st.Np * st.Kp * es : 0;
  const int64_t aBytes = st.stageA ? st.mc * st.Kp * es : 0;
  st.offB = 0;
  st.offA = int64_t(cuda::align256(size_t(bBytes)));
  st.offC = st.offA + int64_t(cuda::align256(size_t(aBytes)));
  st.bytes = st.offC + (st.stageC ? st.mc * st.Np * es : 0);
  return st;
}

CudaEngine::MatmulShape CudaEngine::makeShape(const Op &op, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                              int64_t ldc, const void *aPtr, const void *bPtr, const void *cPtr) {
  MatmulShape p;
  const cudaDataType_t ty = cudaType(op.t);
  BIGC_LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Row-major c[M,N] = op(a)[M,K] op(b)[K,N] is column-major c^T[N,M] = op(b)^T op(a)^T: cuBLASLt's
  // A is our b and its B our a.
  cublasOperation_t opA = op.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = op.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
  BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
  const uint64_t aRows = op.tb ? k : n, aCols = op.tb ? n : k; // our b, column-major
  const uint64_t bRows = op.ta ? m : k, bCols = op.ta ? k : m; // our a, column-major
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.a, ty, aRows, aCols, ldb));
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.b, ty, bRows, bCols, lda));
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.c, ty, uint64_t(n), uint64_t(m), ldc));
  if (op.bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &op.bias, sizeof op.bias));
    cudaDataType_t bt = ty;
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  if (op.batch > 1) {
    int32_t count = int32_t(op.batch);
    for (auto [layout, stride] : {std::pair{p.a, op.sB}, std::pair{p.b, op.sA}, std::pair{p.c, op.sC}}) {
      BIGC_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      int64_t st = stride;
      BIGC_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  BIGC_LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = uint64_t(ltBytes_[op.stream]);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const int64_t es = dtypeSize(op.t);
  uint32_t alA = alignmentOf(bPtr, op.batch > 1 ? op.sB * es : 0);
  uint32_t alB = alignmentOf(aPtr, op.batch > 1 ? op.sA * es : 0);
  uint32_t alC = alignmentOf(cPtr, op.batch > 1 ? op.sC * es : 0);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA, sizeof alA);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB, sizeof alB);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alC, sizeof alC);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alC, sizeof alC);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    MatmulPlan keep;
    keep.shapes.push_back(p);
    plans_.push_back(keep); // destroyed with the others
    throw std::runtime_error("cuBLASLt has no algorithm for instruction " + std::to_string(op.index) + " (matmul " +
                             std::to_string(op.batch) + " x [" + std::to_string(m) + "," + std::to_string(k) + "] @ [" +
                             std::to_string(k) + "," + std::to_string(n) + "], " + dtypeName(op.t) + ", status " +
                             std::to_string(int(st)) + ")");
  }
  p.algo = res.algo;
  return p;
}

void CudaEngine::planMatmul(Op &op) {
  MatmulPlan plan;
  const Staging st = matmulStaging(op);
  plan.st = st;
  const int64_t lda = op.ta ? op.M : op.K, ldb = op.tb ? op.K : op.N;
  char *a = static_cast<char *>(op.in[0]), *b = static_cast<char *>(op.in[1]), *c = static_cast<char *>(op.out[0]);
  if (!st.chunked) {
    plan.shapes.push_back(makeShape(op, op.M, op.N, op.K, lda, ldb, op.N, a, b, c));
  } else {
    char *scratch = static_cast<char *>(scratchBase(op.stream));
    const void *aPtr = st.stageA ? scratch + st.offA : a, *bPtr = st.stageB ? scratch + st.offB : b;
    const void *cPtr = st.stageC ? scratch + st.offC : c;
    for (int64_t m : {st.mc, op.M % st.mc}) {
      if (m == 0) continue;
      const int64_t ldA = st.stageA ? (op.ta ? m : st.Kp) : lda;
      const int64_t ldB = st.stageB ? (op.tb ? st.Kp : st.Np) : ldb;
      plan.shapes.push_back(
          makeShape(op, m, st.stageC ? st.Np : op.N, st.Kp, ldA, ldB, st.stageC ? st.Np : op.N, aPtr, bPtr, cPtr));
    }
  }
  op.mm = int(plans_.size());
  plans_.push_back(std::move(plan));
}
void CudaEngine::upload(int64_t id, const void *src) {
  BIGC_CK(cudaSetDevice(device_));
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (b.space == "device") {
    BIGC_CK(cudaMemcpy(ptrs_[size_t(id)], src, size_t(b.bytes), cudaMemcpyHostToDevice));
  } else {
    std::memcpy(ptrs_[size_t(id)], src, size_t(b.bytes));
  }
}

void CudaEngine::download(int64_t id, void *dst) const {
  BIGC_CK(cudaSetDevice(device_));
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (b.space == "device")
    BIGC_CK(cudaMemcpy(dst, ptrs_[size_t(id)], size_t(b.bytes), cudaMemcpyDeviceToHost));
  else
    std::memcpy(dst, ptrs_[size_t(id)], size_t(b.bytes));
}

void CudaEngine::captureGrad(BoundOp &bound, std::vector<float> &) {
  Op &op = static_cast<Op &>(bound);
  const Buffer &grad = prog_.buffers[size_t(op.ins->in[1])];
  unsigned char *pinned = nullptr;
  BIGC_CK(cudaHostAlloc(reinterpret_cast<void **>(&pinned), size_t(std::max<int64_t>(grad.bytes, 1)),
                        cudaHostAllocPortable));
  capturePinned_.push_back(pinned);
  op.capture = pinned;
}

void CudaEngine::finishCapture() {
  if (!capture_) return;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op &op = cop(i);
    if (op.kind != OpKind::AdamW || !op.capture) continue;
    auto &dst = grads_[prog_.buffers[size_t(op.ins->in[0])].name];
    toF32(op.capture, op.inType[1], dst.data(), op.n);
    if (op.unscale)
      for (float &x : dst) x = float(double(x) / double(lastScale_));
  }
}

// After the executor's wait for `dep` to be issued: the GPU-side wait.
void CudaEngine::waitDevice(const BoundOp &op, int64_t dep, std::chrono::steady_clock::time_point deadline) {
  const Op &w = cop(size_t(dep));
  if (onHost_[w.stream]) return; // finished when stamped
  if (!onHost_[op.stream]) {
    BIGC_CK(cudaStreamWaitEvent(cu_[op.stream], events_[size_t(dep)], 0));
    return;
  }
  // The host waits for GPU work.
  for (;;) {
    cudaError_t e = cudaEventQuery(events_[size_t(dep)]);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cudaFail(e, "cudaEventQuery");
    if (aborted()) throw Aborted{};
    if (std::chrono::steady_clock::now() > deadline) stuck(op, dep, " to finish on the GPU");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaEngine::enableDeviceProfiling() {
  profStart_.assign(ops_.size(), nullptr);
  profEnd_.assign(ops_.size(), nullptr);
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (onHost_[cop(i).stream]) continue;
    BIGC_CK(cudaEventCreate(&profStart_[i]));
    BIGC_CK(cudaEventCreate(&profEnd_[i]));
  }
}

void CudaEngine::launch(BoundOp &op) {
  if (onHost_[op.stream])
    runHost(static_cast<Op &>(op));
  else
    issue(static_cast<Op &>(op));
}

void CudaEngine::issueCollective(Op &op, cudaStream_t s) {
#if !BIGC_HAVE_NCCL
  (void)s;
  runtimeError(op, "this build has no NCCL: collectives cannot run on the CUDA backend");
#else
  // NCCL on the comm stream (a bucket: one group). Sums of 16-bit tensors accumulate in their
  // dtype inside NCCL (the CPU backend's rings accumulate in f32); the mean is ncclAvg; the norm
  // of norms squares, sums and takes the root.
  const int64_t D = prog_.axisSize(int64_t(op.ins->num("axis", 0)));
  const Reduce red = Reduce(int(op.ins->num("reduce", 0)));
  ncclComm_t comm = op.ins->num("axis", 0) == 1 ? rank_.ncclTp : rank_.nccl; // the group of the op's mesh axis
  if (!comm) runtimeError(op, "no NCCL communicator for the collective's mesh axis (internal error)");
  auto type = [](DType t) { return t == DType::BF16 ? ncclBfloat16 : t == DType::F16 ? ncclFloat16 : ncclFloat32; };
  const ncclRedOp_t nop = red == Reduce::Mean ? ncclAvg : red == Reduce::Max ? ncclMax : ncclSum;
  if (op.kind == OpKind::AllReduce && red == Reduce::Norm) {
    for (size_t k = 0; k < op.rawIn.size(); ++k)
      cuda::squareF32(static_cast<const float *>(op.rawIn[k]), static_cast<float *>(op.rawOut[k]), op.inNumel[k], s);
    BIGC_NCCL(ncclGroupStart());
    for (size_t k = 0; k < op.rawIn.size(); ++k)
      BIGC_NCCL(ncclAllReduce(op.rawOut[k], op.rawOut[k], size_t(op.inNumel[k]), ncclFloat32, ncclSum, comm, s));
    BIGC_NCCL(ncclGroupEnd());
    for (size_t k = 0; k < op.rawIn.size(); ++k) cuda::sqrtF32(static_cast<float *>(op.rawOut[k]), op.inNumel[k], s);
    return;
  }
  struct CopyOut {
    void *dst;
    const void *src;
    size_t bytes;
  };
  std::vector<CopyOut> after;
  char *pad = static_cast<char *>(pad_) + padOffset_[op.stream];
  // The group is closed on every path (an error inside it leaves no open group on this thread).
  struct Group {
    bool open = false;
    ~Group() {
      if (open) ncclGroupEnd();
    }
  } group;
  BIGC_NCCL(ncclGroupStart());
  group.open = true;
  for (size_t k = 0; k < op.rawIn.size(); ++k) {
    const int64_t e = dtypeSize(op.inType[k]);
    if (op.kind == OpKind::AllReduce) {
      BIGC_NCCL(ncclAllReduce(op.rawIn[k], op.rawOut[k], size_t(op.inNumel[k]), type(op.inType[k]), nop, comm, s));
    } else if (op.kind == OpKind::ReduceScatter) {
      const int64_t S = op.outNumel[k];
      const void *src = op.rawIn[k];
      if (op.inNumel[k] != S * D) { // zero-padded to S*D elements
        BIGC_CK(cudaMemcpyAsync(pad, op.rawIn[k], size_t(op.inNumel[k] * e), cudaMemcpyDeviceToDevice, s));
        BIGC_CK(cudaMemsetAsync(pad + op.inNumel[k] * e, 0, size_t((S * D - op.inNumel[k]) * e), s));
        src = pad;
        pad += cuda::align256(size_t(S * D * e));
      }
      BIGC_NCCL(ncclReduceScatter(src, op.rawOut[k], size_t(S), type(op.inType[k]), nop, comm, s));
    } else {
      const int64_t S = op.inNumel[k];
      void *dst = op.rawOut[k];
      if (op.outNumel[k] != S * D) { // gathered into S*D elements, the padding dropped after
        dst = pad;
        after.push_back({op.rawOut[k], pad, size_t(op.outNumel[k] * e)});
        pad += cuda::align256(size_t(S * D * e));
      }
      BIGC_NCCL(ncclAllGather(op.rawIn[k], dst, size_t(S), type(op.inType[k]), comm, s));
    }
  }
  group.open = false;
  BIGC_NCCL(ncclGroupEnd());
  for (const CopyOut &c : after) BIGC_CK(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, s));
#endif
}
void CudaEngine::issue(Op &op) {
  cudaStream_t s = cu_[op.stream];
  if (profiling_) BIGC_CK(cudaEventRecord(profStart_[op.index], s));
  if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
    issueCollective(op, s);
    if (profiling_) BIGC_CK(cudaEventRecord(profEnd_[op.index], s));
    if (op.record) BIGC_CK(cudaEventRecord(events_[op.index], s));
    return;
  }
  for (const StagedOperand &c : op.pre) cuda::cast(c.dtype, c.arena, DType::F32, c.stage, c.n, s);
  void *scratch = scratchBase(op.stream);
  const cuda::ErrSlot es{err_, int(op.index)};
  auto ids = [&](size_t k) { return static_cast<const int32_t *>(op.in[k]); };
  auto f32in = [&](size_t k) { return static_cast<const float *>(op.in[k]); };
  switch (op.kind) {
  case OpKind::Embedding:
    cuda::embedding(op.t, op.in[0], ids(1), op.out[0], op.n, op.V, op.C, es, s, op.offset, op.vocab);
    break;
  case OpKind::EmbeddingGrad:
    cuda::embeddingGrad(op.t, op.in[0], ids(1), op.out[0], op.n, op.V, op.C, scratch, size_t(op.scratchBytes), es, s,
                        op.offset, op.vocab);
    break;
  case OpKind::TpSlice: { // tensor rank t's chunk of the split dimension: slicePre rows of bytes
    const size_t chunk = size_t(op.rows * op.sliceRun), whole = size_t(op.cols * op.sliceRun);
    const char *src = static_cast<const char *>(op.in[0]) + size_t(rank_.tpRank) * chunk;
    if (op.slicePre == 1) // one run (no pitch limit)
      BIGC_CK(cudaMemcpyAsync(op.out[0], src, chunk, cudaMemcpyDeviceToDevice, s));
    else if (op.slicePre > 1 && chunk > 0)
      BIGC_CK(cudaMemcpy2DAsync(op.out[0], chunk, src, whole, chunk, size_t(op.slicePre), cudaMemcpyDeviceToDevice, s));
    break;
  }
  case OpKind::VocabCeStats:
    cuda::vocabCeStats(op.t, op.in[0], ids(1), static_cast<float *>(op.out[0]), op.N, op.V, op.offset, op.vocab, es, s);
    break;
  case OpKind::VocabCeStatsGrad:
    cuda::vocabCeStatsGrad(op.t, f32in(0), op.in[1], ids(2), f32in(3), op.out[0], op.N, op.V, op.offset, s);
    break;
  case OpKind::VocabCeLoss: cuda::vocabCeLoss(f32in(0), static_cast<float *>(op.out[0]), op.N, op.n, scratch, s); break;
  case OpKind::VocabCeLossGrad:
    cuda::vocabCeLossGrad(f32in(0), f32in(1), static_cast<float *>(op.out[0]), op.N, op.n, s);
    break;
  case OpKind::Matmul: {
    const MatmulPlan &plan = plans_[size_t(op.mm)];
    const float alpha = 1.0f, beta = 0.0f;
    void *ltws = static_cast<char *>(workspace_) + ltOffset_[op.stream];
    if (!plan.st.chunked) {
      const MatmulShape &p = plan.shapes[0];
      BIGC_LT(cublasLtMatmul(lt_, p.desc, &alpha, op.in[1], p.a, op.in[0], p.b, &beta, op.out[0], p.c, op.out[0], p.c,
                             &p.algo, ltws, size_t(ltBytes_[op.stream]), s));
      break;
    }
    const Staging &st = plan.st;
    const int64_t es = dtypeSize(op.t);
    const char *a = static_cast<const char *>(op.in[0]);
    const char *b = static_cast<const char *>(op.in[1]);
    char *c = static_cast<char *>(op.out[0]);
    char *As = static_cast<char *>(scratch) + st.offA, *Bs = static_cast<char *>(scratch) + st.offB;
    char *Cs = static_cast<char *>(scratch) + st.offC;
    // 2-D copy of rows x cols elements, and zeros for columns [cols, padCols) of each row.
    auto copyPad = [&](char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t rows, int64_t cols,
                       int64_t padCols) {
      BIGC_CK(cudaMemcpy2DAsync(dst, size_t(dpitch * es), src, size_t(spitch * es), size_t(cols * es), size_t(rows),
                                cudaMemcpyDeviceToDevice, s));
      if (padCols > cols)
        BIGC_CK(
            cudaMemset2DAsync(dst + cols * es, size_t(dpitch * es), 0, size_t((padCols - cols) * es), size_t(rows), s));
    };
    auto zeroRows = [&](char *dst, int64_t pitch, int64_t from, int64_t to) {
      if (to > from) BIGC_CK(cudaMemsetAsync(dst + from * pitch * es, 0, size_t((to - from) * pitch * es), s));
    };
    if (st.stageB) { // b with N and K padded by zeros
      if (op.tb) {   // [N, K] -> [Np, Kp]
        copyPad(Bs, st.Kp, b, op.K, op.N, op.K, st.Kp);
        zeroRows(Bs, st.Kp, op.N, st.Np);
      } else { // [K, N] -> [Kp, Np]
        copyPad(Bs, st.Np, b, op.N, op.K, op.N, st.Np);
        zeroRows(Bs, st.Np, op.K, st.Kp);
      }
    }
    const int64_t n = st.stageC ? st.Np : op.N;
    for (int64_t m0 = 0; m0 < op.M; m0 += st.mc) {
      const int64_t m = std::min(st.mc, op.M - m0);
      const MatmulShape &p = plan.shapes[m == st.mc ? 0 : 1];
      const char *aPtr;
      if (st.stageA) {
        if (!op.ta) { // rows m0.. of a [M, K] -> [m, Kp]
          copyPad(As, st.Kp, a + m0 * op.K * es, op.K, m, op.K, st.Kp);
        } else { // columns m0.. of a [K, M] -> [Kp, m]
          copyPad(As, m, a + m0 * es, op.M, op.K, m, m);
          zeroRows(As, m, op.K, st.Kp);
        }
        aPtr = As;
      } else {
        aPtr = op.ta ? a + m0 * es : a + m0 * op.K * es;
      }
      const char *bPtr = st.stageB ? Bs : b;
      char *cPtr = st.stageC ? Cs : c + m0 * op.N * es;
      BIGC_LT(cublasLtMatmul(lt_, p.desc, &alpha, bPtr, p.a, aPtr, p.b, &beta, cPtr, p.c, cPtr, p.c, &p.algo, ltws,
                             size_t(ltBytes_[op.stream]), s));
      if (st.stageC)
        BIGC_CK(cudaMemcpy2DAsync(c + m0 * op.N * es, size_t(op.N * es), Cs, size_t(n * es), size_t(op.N * es),
                                  size_t(m), cudaMemcpyDeviceToDevice, s));
    }
    break;
  }
  case OpKind::Add: cuda::add(op.t, op.in[0], op.in[1], op.out[0], op.n, s); break;
  case OpKind::Mul: cuda::mul(op.t, op.in[0], op.in[1], op.out[0], op.n, s); break;
  case OpKind::BiasAdd:
    if (!op.fusedAway) cuda::biasAdd(op.t, op.in[0], op.in[1], op.out[0], op.rows, op.cols, s);
    break;
  case OpKind::Scale: cuda::scale(op.t, op.in[0], op.out[0], op.value, op.n, s); break;
  case OpKind::Fill: cuda::fill(op.t, op.out[0], op.value, op.n, s); break;
  case OpKind::Gelu: cuda::gelu(op.t, op.in[0], op.out[0], op.n, s, op.exact); break;
  case OpKind::GeluGrad: cuda::geluGrad(op.t, op.in[0], op.in[1], op.out[0], op.n, s, op.exact); break;
  case OpKind::Silu: cuda::silu(op.t, op.in[0], op.out[0], op.n, s); break;
  case OpKind::SiluGrad: cuda::siluGrad(op.t, op.in[0], op.in[1], op.out[0], op.n, s); break;
  case OpKind::Swiglu: cuda::swiglu(op.t, op.in[0], op.in[1], op.out[0], op.n, s); break;
  case OpKind::SwigluGrad: cuda::swigluGrad(op.t, op.in[0], op.in[1], op.in[2], op.out[0], op.out[1], op.n, s); break;
  case OpKind::RmsNorm:
    cuda::rmsnorm(op.t, op.in[0], op.in[1], op.out[0], static_cast<float *>(op.out[1]), op.N, op.C, op.value, s);
    break;
  case OpKind::RmsNormGrad:
    cuda::rmsnormGrad(op.t, op.in[0], op.in[1], op.in[2], f32in(3), op.out[0], op.out[1], op.N, op.C, scratch, s);
    break;
  case OpKind::Rope:
    cuda::rope(op.t, op.in[0], op.out[0], op.B, op.T, op.C, op.headDim, op.invFreq.data(), op.scale, op.inverse, s);
    break;
  case OpKind::GqaAttention:
  case OpKind::GqaAttentionGrad: {
    const AttentionGeometry g = attentionGeometry(op);
    if (op.kind == OpKind::GqaAttention)
      cuda::gqaAttention(op.t, g, op.in[0], op.in[1], op.in[2], op.out[0], static_cast<float *>(op.out[1]), s);
    else
      cuda::gqaAttentionGrad(op.t, g, op.in[0], op.in[1], op.in[2], op.in[3], op.in[4], f32in(5), op.out[0], op.out[1],
                             op.out[2], scratch, s);
    break;
  }
  case OpKind::ReduceSum: cuda::reduceSum(op.t, op.in[0], op.out[0], op.rows, op.cols, scratch, s); break;
  case OpKind::Layernorm:
    cuda::layernorm(op.t, op.in[0], op.in[1], op.in[2], op.out[0], static_cast<float *>(op.out[1]),
                    static_cast<float *>(op.out[2]), op.N, op.C, op.value, s);
    break;
  case OpKind::LayernormGrad:
    cuda::layernormGrad(op.t, op.in[0], op.in[1], op.in[2], f32in(3), f32in(4), op.out[0], op.out[1], op.out[2], op.N,
                        op.C, scratch, s);
    break;
  case OpKind::Attention:
    cuda::attention(op.t, op.in[0], op.out[0], static_cast<float *>(op.out[1]), op.B, op.T, op.C, op.H, s);
    break;
  case OpKind::AttentionGrad:
    cuda::attentionGrad(op.t, op.in[0], op.in[1], op.in[2], f32in(3), op.out[0], op.B, op.T, op.C, op.H, scratch, s);
    break;
  case OpKind::Transpose:
    cuda::transpose(int(dtypeSize(op.t)), op.in[0], op.out[0], op.shape.data(), op.perm.data(), int(op.shape.size()),
                    s);
    break;
  case OpKind::Reshape:
  case OpKind::Copy:
    if (op.in[0] != op.out[0]) BIGC_CK(cudaMemcpyAsync(op.out[0], op.in[0], size_t(op.n), cudaMemcpyDefault, s));
    break;
  case OpKind::Split:
  case OpKind::Concat: {
    const size_t es2 = size_t(dtypeSize(op.t)), w = size_t(op.cols) * es2, pitch = w * size_t(op.n);
    for (int64_t p = 0; p < op.n; ++p) {
      if (op.rows == 0 || w == 0) break;
      if (op.kind == OpKind::Split)
        BIGC_CK(cudaMemcpy2DAsync(op.out[size_t(p)], w, static_cast<const char *>(op.in[0]) + size_t(p) * w, pitch, w,
                                  size_t(op.rows), cudaMemcpyDefault, s));
      else
        BIGC_CK(cudaMemcpy2DAsync(static_cast<char *>(op.out[0]) + size_t(p) * w, pitch, op.in[size_t(p)], w, w,
                                  size_t(op.rows), cudaMemcpyDefault, s));
    }
    break;
  }
  case OpKind::CrossEntropy:
    cuda::crossEntropy(op.t, op.in[0], ids(1), static_cast<float *>(op.out[0]), op.N, op.V, scratch, es, s);
    break;
  case OpKind::CrossEntropyGrad:
    cuda::crossEntropyGrad(op.t, op.in[0], ids(1), f32in(2), op.out[0], op.N, op.V, s);
    break;
  case OpKind::GlobalNorm: {
    double *part = static_cast<double *>(scratch);
    int64_t slot = 0;
    for (size_t k = 0; k < op.in.size(); ++k)
      cuda::sumSquaresPartial(op.inType[k], op.in[k], op.inNumel[k], part, &slot, s);
    cuda::sqrtOfSum(part, slot, static_cast<float *>(op.out[0]), s);
    break;
  }
  case OpKind::CheckFinite: {
    int *flag = flags_ + op.flag;
    BIGC_CK(cudaMemsetAsync(flag, 0, sizeof(int), s));
    for (size_t k = 0; k < op.in.size(); ++k) cuda::nonFiniteAny(op.inType[k], op.in[k], op.inNumel[k], flag, s);
    cuda::flagToFloat(flag, static_cast<float *>(op.out[0]), s);
    break;
  }
  case OpKind::Cast: cuda::cast(op.inType[0], op.in[0], op.outType[0], op.out[0], op.n, s); break;
  case OpKind::Wait: break;
  case OpKind::LossScaleUpdate:
    cuda::lossScaleUpdate(f32in(0), static_cast<float *>(op.out[0]), static_cast<float *>(op.out[1]), op.backoff,
                          op.growth, op.growthInterval, s);
    break;
  case OpKind::AdamW: {
    if (op.capture)
      BIGC_CK(cudaMemcpyAsync(op.capture, op.in[1], size_t(prog_.buffers[size_t(op.ins->in[1])].bytes),
                              cudaMemcpyDefault, s));
    CpuAdamArgs a = op.adam;
    a.step = updates_ + 1;
    const AdamWConsts c = adamWConsts(a);
    cuda::adamw(c, static_cast<float *>(op.out[0]), op.in[1], op.inType[1], static_cast<float *>(op.out[1]),
                static_cast<float *>(op.out[2]), op.writeHalf ? op.out[3] : nullptr,
                op.writeHalf ? op.outType[3] : DType::F32, op.n, op.clip ? f32in(size_t(op.iNorm)) : nullptr,
                op.maxNorm, op.unscale ? f32in(size_t(op.iScale)) : nullptr,
                op.skip ? f32in(size_t(op.iFound)) : nullptr, s);
    break;
  }
  }
  for (const StagedOperand &c : op.post) cuda::cast(DType::F32, c.stage, c.dtype, c.arena, c.n, s);
  if (profiling_) BIGC_CK(cudaEventRecord(profEnd_[op.index], s));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error("step " + std::to_string(step_) + ": instruction " + std::to_string(op.index) + " (" +
                             op.ins->op + "): CUDA launch failed: " + cudaGetErrorString(e));
  if (op.record) BIGC_CK(cudaEventRecord(events_[op.index], s));
}

// --check-numerics on the GPU: the instruction's stream is waited for, device bytes copied to the
// host (the executor checks them there).
const void *CudaEngine::hostView(const BoundOp &op, int64_t id, const void *ptr,
                                 std::vector<unsigned char> &tmp) const {
  if (!onHost_[op.stream]) BIGC_CK(cudaStreamSynchronize(cu_[op.stream]));
  const Buffer &b = prog_.buffers[size_t(id)];
  if (b.space != "device") return ptr; // pinned host memory
  tmp.resize(size_t(b.bytes));
  BIGC_CK(cudaMemcpy(tmp.data(), ptr, tmp.size(), cudaMemcpyDefault));
  return tmp.data();
}

void CudaEngine::runHost(Op &op) {
  if (op.kind == OpKind::AdamW && op.capture)
    std::memcpy(op.capture, op.rawIn[1], size_t(prog_.buffers[size_t(op.ins->in[1])].bytes));
  if (runOptimizerOpOnHost(op.kind, op, op.rawIn, op.rawOut, op.inType, op.outType, op.inNumel, updates_)) return;
  switch (op.kind) {
  case OpKind::Cast: convert(op.rawIn[0], op.inType[0], op.rawOut[0], op.outType[0], op.n); break;
  case OpKind::Copy:
  case OpKind::Reshape:
    if (op.rawIn[0] != op.rawOut[0]) std::memmove(op.rawOut[0], op.rawIn[0], size_t(op.n));
    break;
  case OpKind::Fill:
    for (int64_t i = 0; i < op.n; ++i) storeFrom32(op.rawOut[0], op.outType[0], i, op.value);
    break;
  case OpKind::Scale:
    for (int64_t i = 0; i < op.n; ++i)
      storeFrom32(op.rawOut[0], op.outType[0], i, op.value * loadAs32(op.rawIn[0], op.inType[0], i));
    break;
  default: break; // wait
  }
}

void CudaEngine::loadInputs(const int32_t *tokens, const int32_t *targets) {
  BIGC_CK(cudaSetDevice(device_));
  const int64_t bt = prog_.batch * prog_.seq;
  const size_t K = prog_.tokenInputs.size();
  // Ids outside the table are refused before anything runs, as on the CPU backend (the kernels
  // also check, as a backstop, but by then the step would have run on a zero row).
  for (const IdCheck &c : idChecks_) {
    const int32_t *ids = (c.target ? targets : tokens) + int64_t(c.micro) * bt;
    for (int64_t i = 0; i < bt; ++i)
      if (ids[i] < 0 || ids[i] >= c.V) badId(op(c.instruction), c.target, ids[i], i, c.V);
  }
  std::memcpy(inputStage_, tokens, size_t(bt) * K * 4);
  std::memcpy(inputStage_ + int64_t(K) * bt, targets, size_t(bt) * K * 4);
  for (size_t k = 0; k < K; ++k) {
    BIGC_CK(cudaMemcpyAsync(ptrs_[size_t(prog_.tokenInputs[k])], inputStage_ + int64_t(k) * bt, size_t(bt) * 4,
                            cudaMemcpyDefault, cu_[0]));
    BIGC_CK(cudaMemcpyAsync(ptrs_[size_t(prog_.targetInputs[k])], inputStage_ + int64_t(K + k) * bt, size_t(bt) * 4,
                            cudaMemcpyDefault, cu_[0]));
  }
}

void CudaEngine::synchronize() {
  for (cudaStream_t s : cu_)
    if (s) {
      cudaError_t e = cudaStreamSynchronize(s);
      if (e != cudaSuccess)
        fail(std::make_exception_ptr(
            std::runtime_error("step " + std::to_string(step_) + ": a CUDA kernel failed: " + cudaGetErrorString(e))));
    }
}

void CudaEngine::collectProfile() {
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (onHost_[cop(i).stream]) continue;
    float ms = 0.0f;
    BIGC_CK(cudaEventElapsedTime(&ms, profStart_[i], profEnd_[i]));
    opSeconds_[i] += double(ms) * 1e-3;
  }
}

void CudaEngine::checkDeviceErrors() {
  int err[3] = {0, 0, 0};
  BIGC_CK(cudaMemcpy(err, err_, sizeof err, cudaMemcpyDeviceToHost));
  if (err[0] != 0) {
    BIGC_CK(cudaMemset(err_, 0, sizeof err));
    const BoundOp &op = this->op(size_t(err[0] - 1));
    const bool target = op.kind == OpKind::CrossEntropy || op.kind == OpKind::VocabCeStats;
    badId(op, target, err[2], err[1], op.vocab > 0 ? op.vocab : op.V);
  }
}

std::unique_ptr<Engine> makeCudaEngine(Program program, uint64_t seed) {
  return std::make_unique<CudaEngine>(std::move(program), seed);
}

std::unique_ptr<Engine> makeCudaRankEngine(const Program &program, uint64_t seed, CudaRank rank) {
  return std::make_unique<CudaEngine>(program, seed, rank);
}

} // namespace bigc::rt
