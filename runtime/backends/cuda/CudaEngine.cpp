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
// - What each op launches (the one switch over the op kinds), the GEMMs' cuBLASLt plans and the
//   NCCL collectives are CudaOps.cpp.
// - GEMMs go through cuBLASLt (fp32 accumulation; fp32 GEMMs without TF32, so fp32 programs match
//   the CPU backend), attention through the flash kernels of Attention.cu (grouped-query attention
//   through its generic kernels on strided rows), the rest through Kernels.cu. Host instructions
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/stream_executor.h"
#include "bigc/Support/format.h"
#include "cuda_engine.h"
#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>

namespace bigc::rt {

namespace {

const auto human = humanBytes;

std::string cudaVersion(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

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

CudaEngine::CudaEngine(Program program, uint64_t seed, CudaRank rank)
    : StreamExecutor(std::move(program), rank.tpRank), device_(rank.device), rank_(rank) {
  stampWait_ = " to be issued";
  if (prog_.pp > 1 && !rank_.host && !rank_.ncclPp) throw UserError(pipelineStageAlone(prog_.pp));
  std::string why;
  if (!cudaDeviceVisible(&why)) throw UserError(why);
  if (prog_.ranks != 1 && !rank_.host && (!rank_.nccl || (prog_.tp > 1 && !rank_.ncclTp)))
    throw UserError("this program has " + std::to_string(prog_.ranks) +
                    " ranks: run it with `bigc run`, which starts "
                    "every rank with its GPU and NCCL communicators");
  BIGC_CK(cudaSetDevice(device_));
  cudaDeviceProp props{};
  BIGC_CK(cudaGetDeviceProperties(&props, device_));
  try {
    // Spaces: "device" in GPU memory, "host" pinned, "nvme" a file (the executor's).
    int64_t deviceArena = 0;
    for (const auto &s : prog_.spaces) {
      if (s.name != "device" && s.name != "host" && s.name != "nvme")
        throw UserError("memory space '" + s.name +
                        "' is not supported by the CUDA backend (device, host and nvme are)");
      if (s.name == "device") deviceArena = s.arenaBytes;
    }
    checkPhysicalMemory([](const Space &s) { return s.name == "host"; });

    prepare(); // decides the workspace size
    size_t freeB = 0, totalB = 0;
    BIGC_CK(cudaFree(nullptr)); // the context exists from here
    BIGC_CK(cudaMemGetInfo(&freeB, &totalB));
    usedBeforeArenas_ = int64_t(totalB) - int64_t(freeB);
    int64_t droppedStaging = 0; // the GEMM staging given up to fit (said on the device line)
    if (deviceArena + workspaceBytes_ + padBytes_ > int64_t(freeB)) { // without the GEMM staging (slower, smaller)
      droppedStaging = workspaceBytes_;
      allowStaging_ = false;
      prepare();
      droppedStaging -= workspaceBytes_;
    }
    // (padBytes_: the collectives' padded and f32 copies)
    const int64_t need = deviceArena + workspaceBytes_ + padBytes_;
    if (need > int64_t(freeB))
      throw UserError("the program needs " + human(need) + " of GPU memory (device arena " + human(deviceArena) +
                      " + workspace " + human(workspaceBytes_ + padBytes_) + "); GPU " + std::to_string(device_) +
                      " (" + props.name + ") has " + human(int64_t(freeB)) + " free of " + human(int64_t(totalB)) +
                      ". Compile for this GPU (--device-mem " + std::to_string(int64_t(freeB) >> 30) +
                      "G, or its --hardware profile) so the compiler recomputes, offloads or shrinks what it must");

    nvmeRank_ = rank_.host ? rank_.globalRank : device_; // (virtual ranks share the GPU)
    allocateArenas();
    arenasZeroed_ = true; // set to zeros (and the nvme file just created: it reads as zeros)

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
    hostColl_.assign(streamNames_.size(), nullptr); // virtual ranks: each comm stream's pinned staging
    for (size_t st = 0; st < streamNames_.size(); ++st)
      if (hostCollOf_[st] > 0) {
        e = cudaHostAlloc(&hostColl_[st], size_t(hostCollOf_[st]), cudaHostAllocPortable);
        if (e != cudaSuccess) {
          cudaGetLastError();
          hostColl_[st] = nullptr;
          throw UserError("cannot allocate " + human(hostCollOf_[st]) + " of pinned host memory for the '" +
                          streamNames_[st] + "' stream's collectives (virtual ranks): " + cudaGetErrorString(e));
        }
      }

    // Final pointers: arena, or the stream's staging for operands converted to fp32.
    bindOperands([&](size_t s) { return stagingBase(s); });
    BIGC_LT(cublasLtCreate(&lt_));
    fuseBiases();
    for (size_t i = 0; i < ops_.size(); ++i)
      if (cop(i).kind == OpKind::Matmul)
        planMatmul(cop(i));
      else if (cop(i).kind == OpKind::LinearCeStats || cop(i).kind == OpKind::LinearCeStatsGrad)
        planLinearCe(cop(i));

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
    if (rank_.host) // (the other ranks' arenas share the GPU)
      info_ +=
          "; virtual rank " + std::to_string(rank_.globalRank) + " of " + std::to_string(prog_.ranks) + " on this GPU";
    else if (prog_.deviceReserveBytes > 0 && outside > prog_.deviceReserveBytes)
      info_ += "; note: more than the " + human(prog_.deviceReserveBytes) +
               " the plan reserved (raise device_reserve in the hardware profile)";
    if (droppedStaging > 0) // (an LM head of 50257 columns runs several times slower unstaged)
      info_ += "; warning: the " + human(droppedStaging) +
               " of GEMM staging did not fit beside the arena: GEMMs of odd shapes run unstaged, several times "
               "slower (compile with --pad-vocab 64, or for less memory with --device-mem)";
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
  for (const auto &s : prog_.spaces) // host: pinned, resident; nvme: the preallocated file
    out[s.name] = s.name == "device" ? int64_t(totalB) - int64_t(freeB)
                  : s.name == "nvme" ? (nvme_ ? nvme_->size() : 0)
                                     : s.arenaBytes;
  return out;
}

CudaEngine::~CudaEngine() {
  stopStreams();
  release();
}

void CudaEngine::release() {
  // This engine's device: the destructor may run on a thread whose current device is another
  // rank's (one engine per GPU in a process).
  cudaSetDevice(device_);
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
  for (void *&p : hostColl_)
    if (p) cudaFreeHost(p), p = nullptr;
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
  // The host stream (the offloaded optimizer) and the nvme stream (the drive's reads and writes
  // into pinned host staging) run on host threads.
  for (size_t s = 0; s < names.size(); ++s) onHost_[s] = names[s] == "host" || names[s] == "nvme";
  scratch_.assign(names.size(), 0), padOf_.assign(names.size(), 0), hostCollOf_.assign(names.size(), 0);
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
  // (Virtual ranks: the host communicators' collectives, ordered as on the CPU backend.)
  int64_t lastCollective = -1;
  for (size_t i = 0; i < ops_.size() && !rank_.host; ++i) {
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
        // (the fused LM head and loss reads the targets as its third operand)
        const bool reads =
            ((op.kind == OpKind::Embedding || op.kind == OpKind::EmbeddingGrad || op.kind == OpKind::CrossEntropy ||
              op.kind == OpKind::CrossEntropyGrad || op.kind == OpKind::VocabCeStats) &&
             op.ins->in.size() > 1 && op.ins->in[1] == id) ||
            (op.kind == OpKind::LinearCeStats && op.ins->in.size() > 2 && op.ins->in[2] == id);
        if (reads) {
          idChecks_.push_back({op.index, k, target,
                               op.classes > 0 ? op.classes
                               : op.vocab > 0 ? op.vocab
                                              : op.V}); // the whole vocabulary
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

// Per instruction at bind time: the storage type and fp32 staging of mixed-dtype ops, then its
// kernel (bindKernel: workspace, limits, launch), what the host stream may run.
void CudaEngine::planOp(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  const Instruction &ins = *op.ins;
  op.record = waitedOn_.count(int64_t(op.index)) > 0;
  auto where = [&] {
    return "instruction " + std::to_string(op.index) + " (" + ins.op + (ins.loc.empty() ? "" : " at " + ins.loc) + ")";
  };
  const bool fusedLoss = op.kind == OpKind::LinearCeStats || op.kind == OpKind::LinearCeStatsGrad;
  if (!onHost_[op.stream] && fusedLoss) {
    // h and w in their own type (the GEMMs take it), the statistics and the workspace f32.
    const size_t h = op.kind == OpKind::LinearCeStats ? 0 : 1;
    op.t = op.inType[h];
    if (op.inType[h + 1] != op.t)
      throw UserError(where() + ": h and w of the fused LM head differ in dtype (" + dtypeName(op.t) + ", " +
                      dtypeName(op.inType[h + 1]) + "; internal error)");
    hasMatmul_[op.stream] = true;
  } else if (!onHost_[op.stream] && !handlesOwnDtypes(op.kind)) {
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

  bindKernel(op);
  if (onHost_[op.stream]) {
    if (!op.host)
      throw UserError(where() + ": the CUDA backend runs only the optimizer's instructions (adamw, global_norm, "
                                "check_finite, loss_scale_update, cast, copy, fill, scale) on the host stream");
    // Host memory only (and the nvme file, for a copy to or from it).
    auto hostSide = [&](int64_t id) {
      const std::string &sp = prog_.buffers[size_t(id)].space;
      return sp == "host" || (sp == "nvme" && op.kind == OpKind::Copy);
    };
    for (int64_t id : ins.in)
      if (!hostSide(id))
        throw UserError(where() + " runs on the " + ins.stream + " stream but reads buffer '" +
                        prog_.buffers[size_t(id)].name + "' of space '" + prog_.buffers[size_t(id)].space + "'");
    for (int64_t id : ins.out)
      if (!hostSide(id))
        throw UserError(where() + " runs on the " + ins.stream + " stream but writes buffer '" +
                        prog_.buffers[size_t(id)].name + "' of space '" + prog_.buffers[size_t(id)].space + "'");
  }
  scratch_[op.stream] = std::max(scratch_[op.stream], op.scratchBytes);
}

void CudaEngine::upload(int64_t id, const void *src) {
  BIGC_CK(cudaSetDevice(device_));
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (b.space == "device") {
    BIGC_CK(cudaMemcpy(ptrs_[size_t(id)], src, size_t(b.bytes), cudaMemcpyHostToDevice));
  } else if (isNvme(id)) {
    nvme_->write(b.offset, src, b.bytes);
  } else {
    std::memcpy(ptrs_[size_t(id)], src, size_t(b.bytes));
  }
}

void CudaEngine::download(int64_t id, void *dst) const {
  BIGC_CK(cudaSetDevice(device_));
  const Buffer &b = prog_.buffers.at(size_t(id));
  if (b.space == "device")
    BIGC_CK(cudaMemcpy(dst, ptrs_[size_t(id)], size_t(b.bytes), cudaMemcpyDeviceToHost));
  else if (isNvme(id))
    nvme_->read(b.offset, dst, b.bytes);
  else
    std::memcpy(dst, ptrs_[size_t(id)], size_t(b.bytes));
}

// The grad an adamw reads (a chunk's: op.n elements at its offset) into pinned memory during the
// step, converted to fp32 into `dst` after it.
void CudaEngine::captureGrad(BoundOp &bound, std::vector<float> &dst) {
  Op &op = static_cast<Op &>(bound);
  unsigned char *pinned = nullptr;
  BIGC_CK(cudaHostAlloc(reinterpret_cast<void **>(&pinned),
                        size_t(std::max<int64_t>(op.n * int64_t(dtypeSize(op.inType[1])), 1)), cudaHostAllocPortable));
  capturePinned_.push_back(pinned);
  op.capture = pinned;
  op.captureDst = dst.data() + op.gradOffset;
}

void CudaEngine::finishCapture() {
  if (!capture_) return;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op &op = cop(i);
    if (op.kind != OpKind::AdamW || !op.capture) continue;
    toF32(op.capture, op.inType[1], op.captureDst, op.n);
    if (op.unscale)
      for (int64_t k = 0; k < op.n; ++k) op.captureDst[k] = float(double(op.captureDst[k]) / double(lastScale_));
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

// An instruction an evaluation leaves out: its event marks the point of its stream after what it
// waited for (the waits above were enqueued there), for whatever waits on it.
void CudaEngine::skip(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  if (!onHost_[op.stream] && op.record) BIGC_CK(cudaEventRecord(events_[op.index], cu_[op.stream]));
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

void CudaEngine::launch(BoundOp &bound) {
  Op &op = static_cast<Op &>(bound);
  if (onHost_[op.stream])
    op.host(op);
  else
    issue(op);
}

// One instruction on its GPU stream: profiling events around it, its 16-bit operands staged in
// fp32 around the kernel (not for collectives, which take every dtype), the event others wait on.
void CudaEngine::issue(Op &op) {
  cudaStream_t s = cu_[op.stream];
  if (profiling_) BIGC_CK(cudaEventRecord(profStart_[op.index], s));
  if (op.isCollective()) {
    op.gpu(op, s, nullptr);
    if (profiling_) BIGC_CK(cudaEventRecord(profEnd_[op.index], s));
    if (op.record) BIGC_CK(cudaEventRecord(events_[op.index], s));
    return;
  }
  for (const StagedOperand &c : op.pre) cuda::cast(c.dtype, c.arena, DType::F32, c.stage, c.n, s);
  op.gpu(op, s, scratchBase(op.stream));
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
  // (from ptr to the buffer's end: a tile's gather reads its piece of a shard from within it)
  tmp.resize(size_t(b.bytes - (static_cast<const char *>(ptr) - static_cast<const char *>(ptrs_[size_t(id)]))));
  BIGC_CK(cudaMemcpy(tmp.data(), ptr, tmp.size(), cudaMemcpyDefault));
  return tmp.data();
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
    const bool target =
        op.kind == OpKind::CrossEntropy || op.kind == OpKind::VocabCeStats || op.kind == OpKind::LinearCeStats;
    badId(op, target, err[2], err[1], op.classes > 0 ? op.classes : op.vocab > 0 ? op.vocab : op.V);
  }
}

std::unique_ptr<Engine> makeCudaEngine(Program program, uint64_t seed) {
  return std::make_unique<CudaEngine>(std::move(program), seed);
}

std::unique_ptr<Engine> makeCudaRankEngine(const Program &program, uint64_t seed, CudaRank rank) {
  return std::make_unique<CudaEngine>(program, seed, rank);
}

} // namespace bigc::rt
