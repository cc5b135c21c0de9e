// The CUDA backend's ops: the device's kernel table (kernels(), one binder per op of the registry),
// which gives each instruction at bind time its workspace, the limits of its kernel, its launch on a
// GPU stream and, for what the host stream may run (the offloaded optimizer: AdamW, norms, checks,
// loss scaling, casts, copies, fills, scales), its run on the host with the CPU backend's code. A
// new op is one entry here. Also the GEMMs' cuBLASLt plans (with the padded staging of odd shapes and the bias
// epilogue) and the NCCL collectives.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/loss_scale.h"
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/ops.h"
#include "cuda_engine.h"
#include "kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace bigc::rt {

namespace {

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::BF16: return CUDA_R_16BF;
  case DType::F16: return CUDA_R_16F;
  default: return CUDA_R_32F;
  }
}

uint32_t alignmentOf(const void *p, int64_t strideBytes) {
  uint64_t a = 256;
  while (a > 1 && (reinterpret_cast<uintptr_t>(p) % a != 0 || (strideBytes && strideBytes % int64_t(a) != 0))) a /= 2;
  return uint32_t(a);
}

const int32_t *ids(const BoundOp &o, size_t k) { return static_cast<const int32_t *>(o.in[k]); }
const float *f32in(const BoundOp &o, size_t k) { return static_cast<const float *>(o.in[k]); }
float *f32out(const BoundOp &o, size_t k) { return static_cast<float *>(o.out[k]); }
// The instruction, for the errors found when a program is bound.
std::string at(const BoundOp &op) {
  return "instruction " + std::to_string(op.index) + " (" + op.ins->op +
         (op.ins->loc.empty() ? "" : " at " + op.ins->loc) + ")";
}

} // namespace

// The CUDA device's kernels, one binder per op (include/bigc/Runtime/kernel_table.h): each sets the
// op's workspace and limits and gives it its launch on a GPU stream (gpu) and, where the op may run
// on the host stream, its host code (host).
const KernelTable<CudaEngine::Binder> &CudaEngine::kernels() {
  const Binder bMoe = [](CudaEngine &, Op &op) -> void {
    throw UserError(at(op) + ": a mixture of experts (bigc.moe, " + std::to_string(op.experts) +
                    " experts) has no CUDA kernel yet; run this program on the CPU backend (--backend cpu)");
  };
  // Context parallelism: a block of ring attention at the tokens' positions (RingAttention.cu).
  // Mixed dtypes (16-bit q, k, v with the f32 partial outputs and travelling gradients) are staged
  // in fp32 by planOp; the kernels take the partial results and dk, dv in f32.
  const Binder bRingAttention = [](CudaEngine &e, Op &op) {
    if (op.softcap > 0)
      throw UserError(at(op) + ": ring attention with soft-capped scores (softcap " + std::to_string(op.softcap) +
                      ") has no CUDA kernel yet; run this program on the CPU backend (--backend cpu)");
    if (op.headDim > cuda::kGenericAttentionMaxHead)
      throw UserError(at(op) + ": attention head size " + std::to_string(op.headDim) +
                      " exceeds the CUDA backend's limit of " + std::to_string(cuda::kGenericAttentionMaxHead));
    if ((op.acc || op.kind == OpKind::RingAttentionGrad) && op.t != DType::F32)
      throw UserError(at(op) + ": ring attention's partial results and key/value gradients are f32 (internal error)");
    const int64_t C = op.cp, c = e.rank_.cpRank;
    cuda::RingPositions pos;
    pos.cp = C, pos.qRank = c, pos.kRank = ((c - op.step) % C + C) % C, pos.a2a = op.a2a;
    if (op.kind == OpKind::RingAttention) {
      op.gpu = [pos](Op &o, cudaStream_t s, void *) {
        cuda::ringAttention(o.t, o.t, attentionGeometry(o), pos, o.in[0], o.in[1], o.in[2],
                            o.acc ? f32in(o, 3) : nullptr, o.acc ? f32in(o, 4) : nullptr, o.out[0], f32out(o, 1), s);
      };
    } else {
      op.scratchBytes = int64_t(cuda::ringAttentionGradWorkspace(op.B, op.T, op.H));
      op.gpu = [pos](Op &o, cudaStream_t s, void *w) {
        cuda::ringAttentionGrad(o.t, o.t, attentionGeometry(o), pos, o.in[0], o.in[1], o.in[2], o.in[3], o.in[4],
                                f32in(o, 5), o.acc ? f32in(o, 6) : nullptr, o.accKv ? f32in(o, 7) : nullptr,
                                o.accKv ? f32in(o, 8) : nullptr, o.out[0], f32out(o, 1), f32out(o, 2), w, s);
      };
    }
  };
  // The context axis's collectives (stream comm_cp): with virtual ranks through the host (the CPU
  // backend's ring shift and all-to-all, hostCollective); over NCCL a ring shift is one group of a
  // send to the next rank and a receive from the previous per tensor, an all-to-all one group of a
  // send and a receive per peer of chunks packed in the stream's scratch (copy2d), then unpacked.
  const Binder bCpCollective = [](CudaEngine &e, Op &op) {
    if (e.onHost_[op.stream] || op.ins->stream != "comm_cp")
      throw UserError(at(op) + ": the context axis's collectives run on the comm_cp stream");
    if (e.rank_.host) {
      int64_t bytes = 0;
      for (size_t k = 0; k < op.ins->in.size(); ++k)
        bytes += int64_t(cuda::align256(size_t(op.inNumel[k] * dtypeSize(op.inType[k])))) +
                 int64_t(cuda::align256(size_t(op.outNumel[k] * dtypeSize(op.outType[k]))));
      e.hostCollOf_[op.stream] = std::max(e.hostCollOf_[op.stream], bytes);
      if (!e.rank_.host->commOf(3))
        throw UserError(at(op) + ": no communicator for the context axis (virtual ranks; internal error)");
      op.gpu = [&e = e](Op &o, cudaStream_t s, void *) { e.hostCollective(o, s); };
      return;
    }
    if (!e.rank_.ncclCp)
      throw UserError(at(op) + ": " + op.ins->op + " (context parallelism) needs every rank of its cp group: run " +
                      "the program with `bigc run` (one GPU per rank over NCCL, or --virtual-ranks on one GPU)");
    if (op.kind == OpKind::CpAllToAll) { // the send and receive chunks of the largest tensor
      int64_t most = 0;
      for (size_t k = 0; k < op.ins->in.size(); ++k) most = std::max(most, op.inNumel[k] * dtypeSize(op.inType[k]));
      op.scratchBytes = 2 * int64_t(cuda::align256(size_t(most)));
    }
    op.gpu = [&e = e](Op &o, cudaStream_t s, void *w) { e.cpCollective(o, s, w); };
  };
  const Binder bGqaAttention = [](CudaEngine &, Op &op) {
    if (op.softcap > 0)
      throw UserError(at(op) + ": attention with soft-capped scores (softcap " + std::to_string(op.softcap) +
                      ", Gemma 2's) has no CUDA kernel yet; run this program on the CPU backend (--backend cpu)");
    if (op.headDim > cuda::kGenericAttentionMaxHead)
      throw UserError(at(op) + ": attention head size " + std::to_string(op.headDim) +
                      " exceeds the CUDA backend's limit of " + std::to_string(cuda::kGenericAttentionMaxHead));
    if (op.kind == OpKind::GqaAttention) {
      op.gpu = [](Op &o, cudaStream_t s, void *) {
        cuda::gqaAttention(o.t, attentionGeometry(o), o.in[0], o.in[1], o.in[2], o.out[0], f32out(o, 1), s);
      };
    } else {
      op.scratchBytes = int64_t(cuda::attentionGradWorkspace(op.B, op.T, op.H));
      op.gpu = [](Op &o, cudaStream_t s, void *w) {
        cuda::gqaAttentionGrad(o.t, attentionGeometry(o), o.in[0], o.in[1], o.in[2], o.in[3], o.in[4], f32in(o, 5),
                               o.out[0], o.out[1], o.out[2], w, s);
      };
    }
  };
  const Binder bReshape = [](CudaEngine &e, Op &op) {
    // (a range copy: bytes at inOffset and outOffset)
    if (!e.onHost_[op.stream] && (e.isNvme(op.ins->in[0]) || e.isNvme(op.ins->out[0])))
      throw UserError(at(op) +
                      ": a copy to or from the nvme space runs on the nvme stream (a host thread), not on "
                      "stream '" +
                      op.ins->stream + "'");
    op.gpu = [](Op &o, cudaStream_t s, void *) {
      const char *from = static_cast<const char *>(o.in[0]) + o.inOffset;
      char *to = static_cast<char *>(o.out[0]) + o.outOffset;
      if (from != to) BIGC_CK(cudaMemcpyAsync(to, from, size_t(o.n), cudaMemcpyDefault, s));
    };
    op.host = [&e = e](Op &o) {
      if (e.nvmeCopy(o)) return; // the drive's reads and writes (pinned host staging)
      const char *from = static_cast<const char *>(o.rawIn[0]) + o.inOffset;
      char *to = static_cast<char *>(o.rawOut[0]) + o.outOffset;
      if (from != to) std::memmove(to, from, size_t(o.n));
    };
  };
  const Binder bSplit = [](CudaEngine &, Op &op) {
    op.gpu = [](Op &o, cudaStream_t s, void *) {
      const size_t es = size_t(dtypeSize(o.t)), w = size_t(o.cols) * es, pitch = w * size_t(o.n);
      for (int64_t p = 0; p < o.n; ++p) {
        if (o.rows == 0 || w == 0) break;
        if (o.kind == OpKind::Split)
          BIGC_CK(cudaMemcpy2DAsync(o.out[size_t(p)], w, static_cast<const char *>(o.in[0]) + size_t(p) * w, pitch, w,
                                    size_t(o.rows), cudaMemcpyDefault, s));
        else
          BIGC_CK(cudaMemcpy2DAsync(static_cast<char *>(o.out[0]) + size_t(p) * w, pitch, o.in[size_t(p)], w, w,
                                    size_t(o.rows), cudaMemcpyDefault, s));
      }
    };
  };
  const Binder bAllReduce = [](CudaEngine &e, Op &op) {
    if (e.onHost_[op.stream] || (op.ins->stream != "comm" && op.ins->stream != "comm_tp"))
      throw UserError(at(op) + ": collectives run on the comm or comm_tp stream");
    const int64_t D = e.prog_.axisSize(int64_t(op.ins->num("axis", 0)));
    if (e.rank_.host) { // virtual ranks: the bucket staged in pinned memory, in and out (hostCollective)
      int64_t bytes = 0, floats = 0;
      for (size_t k = 0; k < op.ins->in.size(); ++k) {
        bytes += int64_t(cuda::align256(size_t(op.inNumel[k] * dtypeSize(op.inType[k])))) +
                 int64_t(cuda::align256(size_t(op.outNumel[k] * dtypeSize(op.outType[k]))));
        floats += (op.inNumel[k] + D - 1) / D;
      }
      e.hostCollOf_[op.stream] = std::max(e.hostCollOf_[op.stream], bytes);
      Communicator *c = e.rank_.host->commOf(op.axis).get();
      if (!c)
        throw UserError(at(op) + ": no communicator for the collective's mesh axis (virtual ranks; internal error)");
      c->reserve(floats); // (as the CPU backend's ranks: no collective allocates during a step)
      op.gpu = [&e = e](Op &o, cudaStream_t s, void *) { e.hostCollective(o, s); };
      return;
    }
    // The padded and f32 copies issueCollective stages in pad_: a reduce-scatter or all-gather of
    // a tensor the ranks do not divide goes through a copy of S * D elements; a sum or mean of a
    // 16-bit tensor through f32 copies (in and out), so that NCCL accumulates in f32 as the CPU
    // backend's rings do.
    int64_t pad = 0, wide = 0; // the padded copies of the group, then one f32 chunk (issueCollective)
    for (size_t k = 0; k < op.ins->in.size(); ++k) {
      const int64_t whole = op.kind == OpKind::AllGather ? op.outNumel[k] : op.inNumel[k];
      const int64_t S = op.kind == OpKind::ReduceScatter ? op.outNumel[k] : op.inNumel[k];
      if (e.sumsIn32(op, k)) {
        const int64_t c = op.kind == OpKind::AllReduce ? std::min(whole, kWideChunk)
                                                       : std::min(S, std::max<int64_t>(1, kWideChunk / D));
        wide = std::max(wide, op.kind == OpKind::AllReduce ? c * 4 : (c * D + c) * 4);
      } else if (op.kind != OpKind::AllReduce && whole != S * D) {
        pad += int64_t(cuda::align256(size_t(S * D * dtypeSize(op.inType[k]))));
      }
    }
    pad += int64_t(cuda::align256(size_t(wide)));
    e.padOf_[op.stream] = std::max(e.padOf_[op.stream], pad);
    op.gpu = [&e = e](Op &o, cudaStream_t s, void *) { e.issueCollective(o, s); };
  };
  const Binder bSend = [](CudaEngine &e, Op &op) {
    if (e.onHost_[op.stream]) throw UserError(at(op) + ": send and recv run on a GPU stream");
    if (e.rank_.ncclPp) { // NCCL: issued in groups (launchGroup), not one by one
      op.gpu = [&e = e](Op &o, cudaStream_t, void *) {
        e.runtimeError(o, "a send or recv outside its group (internal error)");
      };
      return;
    }
    if (!e.rank_.host || !e.rank_.host->p2p)
      throw UserError(at(op) + ": " + op.ins->op + " (pipeline parallelism) needs the ranks of every stage: run the " +
                      "program with `bigc run` (one GPU per rank over NCCL, or --virtual-ranks on one GPU)");
    e.hostCollOf_[op.stream] = std::max(e.hostCollOf_[op.stream], int64_t(cuda::align256(size_t(op.n))));
    op.gpu = [&e = e](Op &o, cudaStream_t s, void *) { e.hostSendRecv(o, s); };
  };
  const Binder bLinearCeStats = [](CudaEngine &e, Op &op) {
    // The gradient of a chunk's logits in the type of h and w for its two GEMMs (f32: in place).
    op.scratchBytes = op.kind == OpKind::LinearCeStats || op.t == DType::F32
                          ? 0
                          : int64_t(cuda::align256(size_t(op.N * op.n * dtypeSize(op.t))));
    op.gpu = [&e = e](Op &o, cudaStream_t s, void *w) { e.launchLinearCe(o, s, w); };
  };
  static const KernelTable<Binder> table("cuda", {
      {OpKind::Embedding, [](CudaEngine &e, Op &op) {
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *) {
          cuda::embedding(o.t, o.in[0], ids(o, 1), o.out[0], o.n, o.V, o.C, e.errSlot(o), s, o.offset,
                          o.classes > 0 ? o.classes : o.vocab); // (a padded table: its padding is no token)
        };
      }},
      {OpKind::EmbeddingGrad, [](CudaEngine &e, Op &op) {
        op.scratchBytes = int64_t(cuda::embeddingGradWorkspace(op.n, op.V));
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *w) {
          cuda::embeddingGrad(o.t, o.in[0], ids(o, 1), o.out[0], o.n, o.V, o.C, w, size_t(o.scratchBytes), e.errSlot(o), s,
                              o.offset, o.classes > 0 ? o.classes : o.vocab);
        };
      }},
      {OpKind::TpSlice, [](CudaEngine &e, Op &op) {
        // tensor rank t's chunk of the split dimension: slicePre rows of bytes
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *) {
          const size_t chunk = size_t(o.rows * o.sliceRun), whole = size_t(o.cols * o.sliceRun);
          const char *src = static_cast<const char *>(o.in[0]) + size_t(e.rank_.tpRank) * chunk;
          if (o.slicePre == 1) // one run (no pitch limit)
            BIGC_CK(cudaMemcpyAsync(o.out[0], src, chunk, cudaMemcpyDeviceToDevice, s));
          else if (o.slicePre > 1 && chunk > 0)
            BIGC_CK(cudaMemcpy2DAsync(o.out[0], chunk, src, whole, chunk, size_t(o.slicePre), cudaMemcpyDeviceToDevice, s));
        };
      }},
      {OpKind::VocabCeStats, [](CudaEngine &e, Op &op) {
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *) {
          cuda::vocabCeStats(o.t, o.in[0], ids(o, 1), f32out(o, 0), o.N, o.vocabCols, o.V, o.offset,
                             o.classes > 0 ? o.classes : o.vocab, e.errSlot(o), s);
        };
      }},
      {OpKind::VocabCeStatsGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::vocabCeStatsGrad(o.t, f32in(o, 0), o.in[1], ids(o, 2), f32in(o, 3), o.out[0], o.N, o.vocabCols, o.V,
                                 o.offset, s);
        };
      }},
      {OpKind::VocabCeLoss, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::vocabCeLossWorkspace(op.N));
        op.gpu = [](Op &o, cudaStream_t s, void *w) { cuda::vocabCeLoss(f32in(o, 0), f32out(o, 0), o.N, o.n, w, s); };
      }},
      {OpKind::VocabCeLossGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::vocabCeLossGrad(f32in(o, 0), f32in(o, 1), f32out(o, 0), o.N, o.n, s);
        };
      }},
      {OpKind::Matmul, [](CudaEngine &e, Op &op) {
        e.hasMatmul_[op.stream] = true;
        op.scratchBytes = e.matmulStagingBytes(op);
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *w) { e.launchMatmul(o, s, w); };
      }},
      {OpKind::Add, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::add(o.t, o.in[0], o.in[1], o.out[0], o.n, s); };
      }},
      {OpKind::Mul, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::mul(o.t, o.in[0], o.in[1], o.out[0], o.n, s); };
      }},
      {OpKind::BiasAdd, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          if (!o.fusedAway) cuda::biasAdd(o.t, o.in[0], o.in[1], o.out[0], o.rows, o.cols, s);
        };
      }},
      {OpKind::Scale, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::scale(o.t, o.in[0], o.out[0], o.value, o.n, s); };
        op.host = [](Op &o) {
          for (int64_t i = 0; i < o.n; ++i)
            storeFrom32(o.rawOut[0], o.outType[0], i, o.value * loadAs32(o.rawIn[0], o.inType[0], i));
        };
      }},
      {OpKind::Fill, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::fill(o.t, o.out[0], o.value, o.n, s); };
        op.host = [](Op &o) {
          for (int64_t i = 0; i < o.n; ++i) storeFrom32(o.rawOut[0], o.outType[0], i, o.value);
        };
      }},
      {OpKind::Gelu, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::gelu(o.t, o.in[0], o.out[0], o.n, s, o.exact); };
      }},
      {OpKind::GeluGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::geluGrad(o.t, o.in[0], o.in[1], o.out[0], o.n, s, o.exact); };
      }},
      {OpKind::Silu, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::silu(o.t, o.in[0], o.out[0], o.n, s); };
      }},
      {OpKind::Moe, bMoe},
      {OpKind::MoeGrad, bMoe},
      {OpKind::RingShift, bCpCollective},
      {OpKind::CpAllToAll, bCpCollective},
      {OpKind::RingAttention, bRingAttention},
      {OpKind::RingAttentionGrad, bRingAttention},
      {OpKind::Softcap, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::softcap(o.t, o.in[0], o.out[0], o.n, o.value, s); };
      }},
      {OpKind::SoftcapGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::softcapGrad(o.t, o.in[0], o.in[1], o.out[0], o.n, o.value, s);
        };
      }},
      {OpKind::SiluGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::siluGrad(o.t, o.in[0], o.in[1], o.out[0], o.n, s); };
      }},
      {OpKind::Swiglu, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::swiglu(o.t, o.in[0], o.in[1], o.out[0], o.n, s); };
      }},
      {OpKind::Geglu,
       [](CudaEngine &, Op &op) {
         op.gpu = [](Op &o, cudaStream_t s, void *) {
           cuda::geglu(o.t, o.in[0], o.in[1], o.out[0], o.n, o.exact, s);
         };
       }},
      {OpKind::GegluGrad,
       [](CudaEngine &, Op &op) {
         op.gpu = [](Op &o, cudaStream_t s, void *) {
           cuda::gegluGrad(o.t, o.in[0], o.in[1], o.in[2], o.out[0], o.out[1], o.n, o.exact, s);
         };
       }},
      {OpKind::SwigluGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::swigluGrad(o.t, o.in[0], o.in[1], o.in[2], o.out[0], o.out[1], o.n, s);
        };
      }},
      {OpKind::RmsNorm, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::rmsnorm(o.t, o.in[0], o.in[1], o.out[0], f32out(o, 1), o.N, o.C, o.value, s);
        };
      }},
      {OpKind::RmsNormGrad, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::rmsnormGradWorkspace(op.N, op.C));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::rmsnormGrad(o.t, o.in[0], o.in[1], o.in[2], f32in(o, 3), o.out[0], o.out[1], o.N, o.C, w, s);
        };
      }},
      {OpKind::Rope, [](CudaEngine &e, Op &op) {
        if (op.headDim / 2 > cuda::kRopeMaxHalf || op.invFreq.empty() || int64_t(op.invFreq.size()) > op.headDim / 2)
          throw UserError(at(op) + ": rope with head_dim " + std::to_string(op.headDim) +
                          " (the CUDA backend supports up to " + std::to_string(2 * cuda::kRopeMaxHalf) + ")");
        op.gpu = [cpRank = e.rank_.cpRank](Op &o, cudaStream_t s, void *) {
          cuda::rope(o.t, o.in[0], o.out[0], o.B, o.T, o.C, o.headDim, o.invFreq.data(), o.scale, o.inverse, s,
                     o.interleaved, 2 * int64_t(o.invFreq.size()), o.cp, cpRank);
        };
      }},
      {OpKind::GqaAttention, bGqaAttention},
      {OpKind::GqaAttentionGrad, bGqaAttention},
      {OpKind::ReduceSum, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::reduceSumWorkspace(op.rows, op.cols));
        op.gpu = [](Op &o, cudaStream_t s, void *w) { cuda::reduceSum(o.t, o.in[0], o.out[0], o.rows, o.cols, w, s); };
      }},
      {OpKind::Layernorm, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::layernorm(o.t, o.in[0], o.in[1], o.in[2], o.out[0], f32out(o, 1), f32out(o, 2), o.N, o.C, o.value, s);
        };
      }},
      {OpKind::AddLayernorm, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::layernorm(o.t, o.in[0], o.in[2], o.in[3], o.out[1], f32out(o, 2), f32out(o, 3), o.N, o.C, o.value, s,
                          o.in[1], o.out[0]);
        };
      }},
      {OpKind::AddRmsNorm, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::rmsnorm(o.t, o.in[0], o.in[2], o.out[1], f32out(o, 2), o.N, o.C, o.value, s, o.in[1], o.out[0]);
        };
      }},
      {OpKind::LayernormGradAdd, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::layernormGradWorkspace(op.N, op.C));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::layernormGrad(o.t, o.in[0], o.in[1], o.in[2], f32in(o, 3), f32in(o, 4), o.out[0], o.out[1], o.out[2], o.N,
                              o.C, w, s, o.in[5]);
        };
      }},
      {OpKind::RmsNormGradAdd, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::rmsnormGradWorkspace(op.N, op.C));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::rmsnormGrad(o.t, o.in[0], o.in[1], o.in[2], f32in(o, 3), o.out[0], o.out[1], o.N, o.C, w, s, o.in[4]);
        };
      }},
      {OpKind::BiasGelu, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          if (!o.fusedAway) cuda::biasGelu(o.t, o.in[0], o.in[1], o.out[0], o.out[1], o.rows, o.cols, o.exact, s);
        };
      }},
      {OpKind::GeluGradBias, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::reduceSumWorkspace(op.rows, op.cols));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::geluGradBias(o.t, o.in[0], o.in[1], o.out[0], o.out[1], o.rows, o.cols, o.exact, w, s);
        };
      }},
      {OpKind::LayernormGrad, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::layernormGradWorkspace(op.N, op.C));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::layernormGrad(o.t, o.in[0], o.in[1], o.in[2], f32in(o, 3), f32in(o, 4), o.out[0], o.out[1], o.out[2], o.N,
                              o.C, w, s);
        };
      }},
      {OpKind::Attention, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::attention(o.t, o.in[0], o.out[0], f32out(o, 1), o.B, o.T, o.C, o.H, s);
        };
      }},
      {OpKind::AttentionGrad, [](CudaEngine &, Op &op) {
        op.scratchBytes = int64_t(cuda::attentionGradWorkspace(op.B, op.T, op.H));
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          cuda::attentionGrad(o.t, o.in[0], o.in[1], o.in[2], f32in(o, 3), o.out[0], o.B, o.T, o.C, o.H, w, s);
        };
      }},
      {OpKind::Transpose, [](CudaEngine &e, Op &op) {
        if (op.shape.size() > 8)
          throw UserError(at(op) + ": transpose of rank " + std::to_string(op.shape.size()) +
                          " (the CUDA backend supports up to 8)");
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::transpose(int(dtypeSize(o.t)), o.in[0], o.out[0], o.shape.data(), o.perm.data(), int(o.shape.size()), s);
        };
      }},
      {OpKind::Reshape, bReshape},
      {OpKind::Copy, bReshape},
      {OpKind::Split, bSplit},
      {OpKind::Concat, bSplit},
      {OpKind::CrossEntropy, [](CudaEngine &e, Op &op) {
        op.scratchBytes = int64_t(cuda::crossEntropyWorkspace(op.N));
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *w) {
          cuda::crossEntropy(o.t, o.in[0], ids(o, 1), f32out(o, 0), o.N, o.vocabCols, o.V, w, e.errSlot(o), s);
        };
      }},
      {OpKind::CrossEntropyGrad, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::crossEntropyGrad(o.t, o.in[0], ids(o, 1), f32in(o, 2), o.out[0], o.N, o.vocabCols, o.V, s);
        };
      }},
      {OpKind::GlobalNorm, [](CudaEngine &e, Op &op) {
        int64_t slots = 0;
        for (int64_t n : op.inNumel) slots += cuda::partialSlots(n);
        op.scratchBytes = slots * 8;
        op.gpu = [](Op &o, cudaStream_t s, void *w) {
          double *part = static_cast<double *>(w);
          int64_t slot = 0;
          for (size_t k = 0; k < o.in.size(); ++k)
            cuda::sumSquaresPartial(o.inType[k], o.in[k], o.inNumel[k], part, &slot, s);
          cuda::sqrtOfSum(part, slot, f32out(o, 0), s);
        };
        op.host = [&e = e](Op &o) { e.optimizerOnHost(o); };
      }},
      {OpKind::CheckFinite, [](CudaEngine &e, Op &op) {
        if (!e.onHost_[op.stream]) op.flag = e.flagCount_++;
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *) {
          int *flag = e.flags_ + o.flag;
          BIGC_CK(cudaMemsetAsync(flag, 0, sizeof(int), s));
          for (size_t k = 0; k < o.in.size(); ++k) cuda::nonFiniteAny(o.inType[k], o.in[k], o.inNumel[k], flag, s);
          cuda::flagToFloat(flag, f32out(o, 0), s);
        };
        op.host = [&e = e](Op &o) { e.optimizerOnHost(o); };
      }},
      {OpKind::Cast, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) { cuda::cast(o.inType[0], o.in[0], o.outType[0], o.out[0], o.n, s); };
        op.host = [](Op &o) { convert(o.rawIn[0], o.inType[0], o.rawOut[0], o.outType[0], o.n); };
      }},
      {OpKind::Wait, [](CudaEngine &, Op &op) {
        op.gpu = [](Op &, cudaStream_t, void *) {};
        op.host = [](Op &) {};
      }},
      {OpKind::LossScaleUpdate, [](CudaEngine &e, Op &op) {
        op.gpu = [](Op &o, cudaStream_t s, void *) {
          cuda::lossScaleUpdate(f32in(o, 0), f32out(o, 0), f32out(o, 1), o.backoff, o.growth, o.growthInterval, s);
        };
        op.host = [&e = e](Op &o) { e.optimizerOnHost(o); };
      }},
      {OpKind::AdamW, [](CudaEngine &e, Op &op) {
        if (op.outType[1] != DType::F32 && op.ins->stream != "host")
          throw UserError("adamw at " + op.ins->loc +
                          ": bf16 optimizer states (--optimizer-states bf16) are updated on the host in this version (the "
                          "CPU backend, or --offload cpu on a GPU); compile with --optimizer-states fp32 for the GPU's "
                          "AdamW");
        if (!e.onHost_[op.stream] && op.ins->attrs.count("count"))
          throw UserError("adamw at " + op.ins->loc +
                          ": an update of a chunk (--nvme-chunk) runs on the host stream in this version, not on the GPU");
        op.gpu = [&e = e](Op &o, cudaStream_t s, void *) {
          if (o.capture)
            BIGC_CK(
                cudaMemcpyAsync(o.capture, o.in[1], size_t(o.n * int64_t(dtypeSize(o.inType[1]))), cudaMemcpyDefault, s));
          CpuAdamArgs a = o.adam;
          a.lr = e.lrFor(o);
          a.step = e.updates_ + 1;
          const AdamWConsts c = adamWConsts(a);
          cuda::adamw(c, f32out(o, 0), o.in[1], o.inType[1], f32out(o, 1), f32out(o, 2), o.writeHalf ? o.out[3] : nullptr,
                      o.writeHalf ? o.outType[3] : DType::F32, o.n, o.clip ? f32in(o, size_t(o.iNorm)) : nullptr, o.maxNorm,
                      o.unscale ? f32in(o, size_t(o.iScale)) : nullptr, o.skip ? f32in(o, size_t(o.iFound)) : nullptr, s);
        };
        op.host = [&e = e](Op &o) {
          if (o.capture) // (a chunk's grad: at its offset)
            std::memcpy(o.capture, static_cast<const char *>(o.rawIn[1]) + o.gradOffset * int64_t(dtypeSize(o.inType[1])),
                        size_t(o.n * int64_t(dtypeSize(o.inType[1]))));
          e.optimizerOnHost(o);
        };
      }},
      {OpKind::AllReduce, bAllReduce},
      {OpKind::ReduceScatter, bAllReduce},
      {OpKind::AllGather, bAllReduce},
      {OpKind::Send, bSend},
      {OpKind::Recv, bSend},
      {OpKind::LinearCeStats, bLinearCeStats},
      {OpKind::LinearCeStatsGrad, bLinearCeStats},
  });
  return table;
}

std::vector<std::string> cudaMissingKernels() {
  std::vector<std::string> out;
  for (OpKind k : CudaEngine::missingKernels()) out.push_back(opDef(k).name);
  return out;
}

void CudaEngine::optimizerOnHost(Op &o) {
  runOptimizerOpOnHost(o.kind, o, o.rawIn, o.rawOut, o.inType, o.outType, o.inNumel, updates_, lrFor(o));
}

void CudaEngine::bindKernel(Op &op) {
  kernels().at(op.kind, *op.ins, op.index)(*this, op); // (none: the program is refused here)
  if (!op.gpu) throw UserError(at(op) + ": no GPU launch bound (internal error)");
}

// A bias_add right after the matmul that produces its input, in place (the program format's
// in-place rule: the matmul's output dies there), on the same stream with no waits of its own:
// cuBLASLt adds the bias in the GEMM's epilogue and the bias_add does nothing. Likewise a bias_gelu
// (bigc-fuse) whose pre takes the matmul's output's place, tanh GELU, N a multiple of 8 and 16-byte
// aligned outputs: the GELU_AUX_BIAS epilogue writes pre and y. BIGC_FUSE=0 turns this off.
void CudaEngine::fuseBiases() {
  const char *env = std::getenv("BIGC_FUSE");
  if (env && std::string(env) == "0") return;
  for (size_t i = 0; i + 1 < ops_.size(); ++i) {
    Op &m = cop(i), &b = cop(i + 1);
    const bool gelu = b.kind == OpKind::BiasGelu;
    if (m.kind != OpKind::Matmul || (b.kind != OpKind::BiasAdd && !gelu) || m.stream != b.stream || onHost_[m.stream])
      continue;
    if (!b.ins->wait.empty() || b.ins->in[0] != m.ins->out[0] || b.out[0] != m.out[0]) continue;
    if (!m.pre.empty() || !m.post.empty() || !b.pre.empty() || !b.post.empty() || m.t != b.t) continue;
    if (m.batch != 1 || b.cols != m.N || matmulStaging(m).chunked) continue;
    if (gelu && (b.exact || m.N % 8 != 0 || alignmentOf(b.out[0], 0) < 16 || alignmentOf(b.out[1], 0) < 16)) continue;
    m.bias = b.in[1];
    if (gelu) m.epiOut = b.out[1], m.epiOp = int(i + 1);
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
                                              int64_t ldc, const void *aPtr, const void *bPtr, const void *cPtr,
                                              int64_t stepA, int64_t stepC) {
  LtGemm g;
  g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.ta = op.ta, g.tb = op.tb;
  g.ab = g.c = op.t;
  g.bias = op.bias;
  g.aux = op.epiOut ? op.out[0] : nullptr;
  g.batch = op.batch, g.sA = op.sA, g.sB = op.sB, g.sC = op.sC;
  g.aPtr = aPtr, g.bPtr = bPtr, g.cPtr = cPtr, g.stepA = stepA, g.stepC = stepC;
  return ltShape(op, g);
}

CudaEngine::MatmulShape CudaEngine::ltShape(const Op &op, const LtGemm &g) {
  MatmulShape p;
  const cudaDataType_t ty = cudaType(g.ab), cty = cudaType(g.c);
  BIGC_LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Row-major c[M,N] = op(a)[M,K] op(b)[K,N] is column-major c^T[N,M] = op(b)^T op(a)^T: cuBLASLt's
  // A is our b and its B our a.
  cublasOperation_t opA = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
  BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
  const uint64_t aRows = g.tb ? g.k : g.n, aCols = g.tb ? g.n : g.k; // our b, column-major
  const uint64_t bRows = g.ta ? g.m : g.k, bCols = g.ta ? g.k : g.m; // our a, column-major
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.a, ty, aRows, aCols, g.ldb));
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.b, ty, bRows, bCols, g.lda));
  BIGC_LT(cublasLtMatrixLayoutCreate(&p.c, cty, uint64_t(g.n), uint64_t(g.m), g.ldc));
  if (g.bias) {
    cublasLtEpilogue_t epi = g.aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    cudaDataType_t bt = cty;
    BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    if (g.aux) { // the pre-GELU values, in D's type and layout
      BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
      const int64_t ld = g.ldc;
      BIGC_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
  }
  if (g.batch > 1) {
    int32_t count = int32_t(g.batch);
    for (auto [layout, stride] : {std::pair{p.a, g.sB}, std::pair{p.b, g.sA}, std::pair{p.c, g.sC}}) {
      BIGC_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      int64_t st = stride;
      BIGC_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  BIGC_LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = uint64_t(ltBytes_[op.stream]);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  // The alignment every call of this shape has: of the pointer, of the batch's stride and of the step
  // between the calls' pointers (the chunks of a chunked GEMM).
  const int64_t es = dtypeSize(g.ab), ces = dtypeSize(g.c);
  auto aligned = [&](const void *ptr, int64_t batchStride, int64_t step) {
    return std::min(alignmentOf(ptr, g.batch > 1 ? batchStride : 0), alignmentOf(ptr, step));
  };
  uint32_t alA = aligned(g.bPtr, g.sB * es, g.stepB);
  uint32_t alB = aligned(g.aPtr, g.sA * es, g.stepA);
  uint32_t alC = aligned(g.cPtr, g.sC * ces, g.stepC);
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
    throw std::runtime_error("cuBLASLt has no algorithm for instruction " + std::to_string(op.index) + " (" +
                             op.ins->op + ": " + std::to_string(g.batch) + " x [" + std::to_string(g.m) + "," +
                             std::to_string(g.k) + "] @ [" + std::to_string(g.k) + "," + std::to_string(g.n) + "], " +
                             dtypeName(g.ab) + " -> " + dtypeName(g.c) + ", status " + std::to_string(int(st)) + ")");
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
  if (op.epiOut) { // the GELU epilogue (fuseBiases): D is bias_gelu's y; without an algorithm, unfused
    try {
      plan.shapes.push_back(makeShape(op, op.M, op.N, op.K, lda, ldb, op.N, a, b, op.epiOut));
    } catch (const std::runtime_error &) {
      op.bias = nullptr, op.epiOut = nullptr;
      cop(size_t(op.epiOp)).fusedAway = false;
      planMatmul(op);
      return;
    }
  } else if (!st.chunked) {
    plan.shapes.push_back(makeShape(op, op.M, op.N, op.K, lda, ldb, op.N, a, b, c));
  } else {
    char *scratch = static_cast<char *>(scratchBase(op.stream));
    const void *aPtr = st.stageA ? scratch + st.offA : a, *bPtr = st.stageB ? scratch + st.offB : b;
    const void *cPtr = st.stageC ? scratch + st.offC : c;
    // The chunks' pointers into a and c where they are not staged (launchMatmul): the algorithm must
    // suit every chunk's alignment, not only the first's.
    const int64_t es = dtypeSize(op.t);
    const int64_t stepA = st.stageA ? 0 : (op.ta ? st.mc : st.mc * op.K) * es,
                  stepC = st.stageC ? 0 : st.mc * op.N * es;
    for (int64_t m : {st.mc, op.M % st.mc}) {
      if (m == 0) continue;
      const int64_t ldA = st.stageA ? (op.ta ? m : st.Kp) : lda;
      const int64_t ldB = st.stageB ? (op.tb ? st.Kp : st.Np) : ldb;
      plan.shapes.push_back(makeShape(op, m, st.stageC ? st.Np : op.N, st.Kp, ldA, ldB, st.stageC ? st.Np : op.N, aPtr,
                                      bPtr, cPtr, stepA, stepC));
    }
  }
  op.mm = int(plans_.size());
  plans_.push_back(std::move(plan));
}

void CudaEngine::launchMatmul(Op &op, cudaStream_t s, void *scratch) {
  const MatmulPlan &plan = plans_[size_t(op.mm)];
  const float alpha = 1.0f, beta = 0.0f;
  void *ltws = static_cast<char *>(workspace_) + ltOffset_[op.stream];
  if (!plan.st.chunked) {
    const MatmulShape &p = plan.shapes[0];
    void *d = op.epiOut ? op.epiOut : op.out[0];
    BIGC_LT(cublasLtMatmul(lt_, p.desc, &alpha, op.in[1], p.a, op.in[0], p.b, &beta, d, p.c, d, p.c, &p.algo, ltws,
                           size_t(ltBytes_[op.stream]), s));
    return;
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
      BIGC_CK(cudaMemcpy2DAsync(c + m0 * op.N * es, size_t(op.N * es), Cs, size_t(n * es), size_t(op.N * es), size_t(m),
                                cudaMemcpyDeviceToDevice, s));
  }
}

// The fused LM head and loss (linear_ce_stats and its gradient, bigc-fuse-loss), as the CPU
// backend computes it: the logits a chunk of `chunk` (op.n) vocabulary columns at a time into the
// f32 workspace, L [N, cw] = h @ op(w)'s columns (cuBLASLt, h and w in their type, the output f32),
// then the chunk's statistics merged into the running ones; the gradient recomputes each chunk's
// logits, turns them into their gradient dL (in h's type), and takes dw's chunk = dL^T h (or h^T dL)
// and dh += dL op(w)'s chunk accumulated in f32 in the workspace, cast to dh at the end. Shapes:
// per chunk width (the full one, the last one) the logits' GEMM, then for the gradient dw's and dh's.
void CudaEngine::planLinearCe(Op &op) {
  const bool fwd = op.kind == OpKind::LinearCeStats;
  const int64_t N = op.N, C = op.C, Vw = op.V, V = op.vocabCols, chunk = std::max<int64_t>(1, op.n);
  const int64_t es = dtypeSize(op.t);
  const void *h = op.in[fwd ? 0 : 1], *w = op.in[fwd ? 1 : 2];
  float *ws = static_cast<float *>(op.out[fwd ? 1 : 2]);
  void *dL = op.t == DType::F32 ? static_cast<void *>(ws) : scratchBase(op.stream);
  const int64_t stepW = op.tb ? chunk * C * es : chunk * es; // between the chunks' columns of w
  MatmulPlan plan;
  if (V <= 0) // (bigc-pad-vocab refuses a multiple that leaves a tensor rank no classes)
    throw UserError("instruction " + std::to_string(op.index) + " (" + op.ins->op +
                    "): this rank's part of the vocabulary holds no classes (internal error)");
  std::vector<int64_t> widths; // the full chunk's width, and a narrower last one's
  widths.push_back(std::min(chunk, V));
  if (V > chunk && V % chunk != 0) widths.push_back(V % chunk);
  struct Keep { // shapes made before a failing one: destroyed with the others
    std::vector<MatmulPlan> &plans;
    MatmulPlan &plan;
    bool done = false;
    ~Keep() {
      if (!done) plans.push_back(std::move(plan));
    }
  } keep{plans_, plan};
  for (int64_t cw : widths) {
    LtGemm l; // L [N, cw] = h [N, C] @ op(w)[C, cw]
    l.m = N, l.n = cw, l.k = C, l.lda = C, l.ldb = op.tb ? C : Vw, l.ldc = cw, l.tb = op.tb;
    l.ab = op.t, l.c = DType::F32, l.aPtr = h, l.bPtr = w, l.cPtr = ws, l.stepB = stepW;
    plan.shapes.push_back(ltShape(op, l));
    if (fwd) continue;
    LtGemm d;  // dw's chunk, in w's type
    if (op.tb) // [cw, C] = dL^T h
      d.m = cw, d.n = C, d.k = N, d.lda = cw, d.ldb = C, d.ldc = C, d.ta = true, d.aPtr = dL, d.bPtr = h,
      d.stepC = chunk * C * es;
    else // [C, cw] = h^T dL, columns of dw [C, V]
      d.m = C, d.n = cw, d.k = N, d.lda = C, d.ldb = cw, d.ldc = Vw, d.ta = true, d.aPtr = h, d.bPtr = dL,
      d.stepC = chunk * es;
    d.ab = d.c = op.t, d.cPtr = op.out[1];
    plan.shapes.push_back(ltShape(op, d));
    LtGemm a; // acc [N, C] (f32, after L in the workspace) += dL [N, cw] @ op(w)'s chunk^T
    a.m = N, a.n = C, a.k = cw, a.lda = cw, a.ldb = op.tb ? C : Vw, a.ldc = C, a.tb = !op.tb;
    a.ab = op.t, a.c = DType::F32, a.aPtr = dL, a.bPtr = w, a.cPtr = ws + N * chunk, a.stepB = stepW;
    plan.shapes.push_back(ltShape(op, a));
  }
  keep.done = true;
  op.mm = int(plans_.size());
  plans_.push_back(std::move(plan));
}

void CudaEngine::launchLinearCe(Op &op, cudaStream_t s, void *scratch) {
  const bool fwd = op.kind == OpKind::LinearCeStats;
  const int64_t N = op.N, C = op.C, Vw = op.V, V = op.vocabCols, chunk = std::max<int64_t>(1, op.n);
  if (N <= 0) return;
  const MatmulPlan &plan = plans_[size_t(op.mm)];
  const int64_t es = dtypeSize(op.t), per = fwd ? 1 : 3;
  const char *h = static_cast<const char *>(op.in[fwd ? 0 : 1]), *w = static_cast<const char *>(op.in[fwd ? 1 : 2]);
  const int32_t *targets = static_cast<const int32_t *>(op.in[fwd ? 2 : 3]);
  float *ws = static_cast<float *>(op.out[fwd ? 1 : 2]), *acc = ws + N * chunk;
  void *dL = op.t == DType::F32 ? static_cast<void *>(ws) : scratch;
  void *ltws = static_cast<char *>(workspace_) + ltOffset_[op.stream];
  const size_t ltBytes = size_t(ltBytes_[op.stream]);
  const float one = 1.0f, zero = 0.0f;
  const int64_t vocab = op.classes > 0 ? op.classes : op.vocab;
  if (!fwd) BIGC_CK(cudaMemsetAsync(acc, 0, size_t(N * C) * 4, s));
  for (int64_t c0 = 0; c0 < V; c0 += chunk) {
    const int64_t cw = std::min(chunk, V - c0);
    const MatmulShape *sh = &plan.shapes[size_t(cw == std::min(chunk, V) ? 0 : per)];
    const char *wc = w + (op.tb ? c0 * C : c0) * es; // the chunk's rows (columns) of w
    BIGC_LT(cublasLtMatmul(lt_, sh[0].desc, &one, wc, sh[0].a, h, sh[0].b, &zero, ws, sh[0].c, ws, sh[0].c, &sh[0].algo,
                           ltws, ltBytes, s));
    if (fwd) {
      cuda::linearCeChunkStats(ws, targets, static_cast<float *>(op.out[0]), ws + N * chunk, N, cw, c0, op.offset,
                               vocab, c0 == 0, errSlot(op), s);
      continue;
    }
    const float *dstats = static_cast<const float *>(op.in[0]), *stats = static_cast<const float *>(op.in[4]);
    cuda::linearCeChunkGrad(op.t, dstats, ws, targets, stats, dL, N, cw, op.offset + c0, s);
    char *dwc = static_cast<char *>(op.out[1]) + (op.tb ? c0 * C : c0) * es;
    const void *dA = op.tb ? dL : static_cast<const void *>(h), *dB = op.tb ? static_cast<const void *>(h) : dL;
    BIGC_LT(cublasLtMatmul(lt_, sh[1].desc, &one, dB, sh[1].a, dA, sh[1].b, &zero, dwc, sh[1].c, dwc, sh[1].c,
                           &sh[1].algo, ltws, ltBytes, s));
    BIGC_LT(cublasLtMatmul(lt_, sh[2].desc, &one, wc, sh[2].a, dL, sh[2].b, &one, acc, sh[2].c, acc, sh[2].c,
                           &sh[2].algo, ltws, ltBytes, s));
  }
  if (fwd) {
    cuda::linearCeFinish(static_cast<float *>(op.out[0]), ws + N * chunk, N, s);
    return;
  }
  cuda::cast(DType::F32, acc, op.t, op.out[0], N * C, s);
  if (V < Vw) // a padded vocabulary's rows of dw (transpose_b): zero
    BIGC_CK(cudaMemsetAsync(static_cast<char *>(op.out[1]) + V * C * es, 0, size_t((Vw - V) * C * es), s));
}

// Virtual ranks: the bucket's inputs copied to pinned memory, the CPU backend's collective among the
// ranks' threads (its host communicator: the CPU backend's order and f32 sums, 16-bit tensors too),
// the outputs copied back. The stream's thread waits for the stream, then for the other ranks.
void CudaEngine::hostCollective(Op &op, cudaStream_t s) {
  const RankContext &h = *rank_.host;
  char *at = static_cast<char *>(hostColl_[op.stream]);
  std::vector<CollectiveTensor> ts;
  for (size_t k = 0; k < op.rawIn.size(); ++k) {
    const size_t inB = size_t(op.inNumel[k] * dtypeSize(op.inType[k]));
    const size_t outB = size_t(op.outNumel[k] * dtypeSize(op.outType[k]));
    char *in = at, *out = at + cuda::align256(inB);
    at = out + cuda::align256(outB);
    BIGC_CK(cudaMemcpyAsync(in, op.rawIn[k], inB, cudaMemcpyDefault, s)); // (device or pinned host)
    ts.push_back(CollectiveTensor{in, out, op.inType[k], op.inNumel[k], op.outNumel[k]});
    if (op.kind == OpKind::CpAllToAll) { // [B,T,N] of the sequence side
      const auto &seq = prog_.buffers[size_t(op.toHeads ? op.ins->in[k] : op.ins->out[k])].shape;
      ts.back().rows = seq[0], ts.back().width = seq[2];
    }
  }
  BIGC_CK(cudaStreamSynchronize(s));
  h.commOf(op.axis)->run(h.localOf(op.axis), op.collectiveKind(), op.reduce, ts, where(op));
  for (size_t k = 0; k < op.rawIn.size(); ++k)
    BIGC_CK(cudaMemcpyAsync(op.rawOut[k], ts[k].out, size_t(op.outNumel[k] * dtypeSize(op.outType[k])),
                            cudaMemcpyDefault, s));
}

// Virtual ranks' pipeline messages: the CPU backend's (its world communicator's send and recv
// between the stages' ranks) through the stream's pinned staging.
void CudaEngine::hostSendRecv(Op &op, cudaStream_t s) {
  const RankContext &h = *rank_.host;
  const int peer = peerRank(op, h.globalRank);
  void *stage = hostColl_[op.stream];
  if (op.kind == OpKind::Send) { // (after the stream's earlier copies out of the staging: stream order)
    BIGC_CK(cudaMemcpyAsync(stage, op.rawIn[0], size_t(op.n), cudaMemcpyDefault, s));
    BIGC_CK(cudaStreamSynchronize(s));
    h.p2p->send(h.p2pLocal, peer, op.tag, stage, op.n, where(op)); // (copies the bytes: the staging is free)
  } else {
    BIGC_CK(cudaStreamSynchronize(s)); // the staging's last copy to the GPU done before the host writes it
    h.p2p->recv(h.p2pLocal, peer, op.tag, stage, op.n, where(op));
    BIGC_CK(cudaMemcpyAsync(op.rawOut[0], stage, size_t(op.n), cudaMemcpyDefault, s));
  }
}

// The context axis's collectives over NCCL (the rank's cp group, stream comm_cp): a ring shift is
// one group of a send to rank c+1 and a receive from rank c-1 per tensor; an all-to-all packs each
// peer's chunk of a tensor into the scratch (send half), exchanges them in one group (receive half;
// its own chunk copied), and unpacks them into the output (kernels.h's copy2d: strided rows).
void CudaEngine::cpCollective(Op &op, cudaStream_t s, void *ws) {
#if !BIGC_HAVE_NCCL
  (void)s, (void)ws;
  runtimeError(op, "this build has no NCCL: context parallelism runs on the CPU backend or with --virtual-ranks");
#else
  const int C = int(prog_.cp), c = rank_.cpRank, next = (c + 1) % C, prev = (c + C - 1) % C;
  if (op.kind == OpKind::RingShift) {
    NcclGroup group;
    for (size_t k = 0; k < op.rawIn.size(); ++k) {
      const size_t bytes = size_t(op.inNumel[k] * dtypeSize(op.inType[k]));
      BIGC_NCCL(ncclSend(op.rawIn[k], bytes, ncclInt8, next, rank_.ncclCp, s));
      BIGC_NCCL(ncclRecv(op.rawOut[k], bytes, ncclInt8, prev, rank_.ncclCp, s));
    }
    group.end();
    return;
  }
  for (size_t k = 0; k < op.rawIn.size(); ++k) {
    const auto &seq = prog_.buffers[size_t(op.toHeads ? op.ins->in[k] : op.ins->out[k])].shape; // [B,T,N]
    const int64_t B = seq[0], T = seq[1], N = seq[2], w = N / C, chunk = B * T * w, e = dtypeSize(op.inType[k]);
    char *send = static_cast<char *>(ws), *recv = send + cuda::align256(size_t(op.inNumel[k] * e));
    const char *in = static_cast<const char *>(op.rawIn[k]);
    char *out = static_cast<char *>(op.rawOut[k]);
    for (int j = 0; j < C; ++j) // peer j's chunk, contiguous
      if (op.toHeads)           // its columns of every token of mine: [B*T, w] of [B*T, N]
        cuda::copy2d(int(e), in + j * w * e, N, send + j * chunk * e, w, B * T, w, s);
      else // its tokens of my columns: [B, T*w] of [B, C*T*w]
        cuda::copy2d(int(e), in + j * T * w * e, C * T * w, send + j * chunk * e, T * w, B, T * w, s);
    {
      NcclGroup group;
      for (int j = 0; j < C; ++j) {
        if (j == c) continue;
        BIGC_NCCL(ncclSend(send + j * chunk * e, size_t(chunk * e), ncclInt8, j, rank_.ncclCp, s));
        BIGC_NCCL(ncclRecv(recv + j * chunk * e, size_t(chunk * e), ncclInt8, j, rank_.ncclCp, s));
      }
      group.end();
    }
    BIGC_CK(cudaMemcpyAsync(recv + c * chunk * e, send + c * chunk * e, size_t(chunk * e), cudaMemcpyDefault, s));
    for (int j = 0; j < C; ++j) // rank j's chunk into its place
      if (op.toHeads)           // rank j's tokens of my columns: out[b, j*T + t, :]
        cuda::copy2d(int(e), recv + j * chunk * e, T * w, out + j * T * w * e, C * T * w, B, T * w, s);
      else // my tokens of rank j's columns: out[b, t, j*w : (j+1)*w]
        cuda::copy2d(int(e), recv + j * chunk * e, w, out + j * w * e, N, B * T, w, s);
  }
#endif
}

// A pipeline stage's sends and recvs over NCCL: one group (p2pGroups; the plan verifier's NCCL play
// proved the stages' groups pair in order and cannot deadlock, checked again by makeCudaRankGroup)
// on the p2p stream, the peer the rank of stage `peer` in the pipeline group; every member's event
// after the group.
void CudaEngine::launchGroup(const std::vector<BoundOp *> &members) {
#if !BIGC_HAVE_NCCL
  runtimeError(*members.front(),
               "this build has no NCCL: sends and recvs run on the CPU backend or with --virtual-ranks");
#else
  Op &head = static_cast<Op &>(*members.front());
  cudaStream_t s = cu_[head.stream];
  if (profiling_) BIGC_CK(cudaEventRecord(profStart_[head.index], s)); // (the group's time is the first member's)
  NcclGroup group;
  for (BoundOp *m : members) {
    const int peer = int(m->peer);
    if (m->kind == OpKind::Send)
      BIGC_NCCL(ncclSend(m->rawIn[0], size_t(m->n), ncclInt8, peer, rank_.ncclPp, s));
    else
      BIGC_NCCL(ncclRecv(m->rawOut[0], size_t(m->n), ncclInt8, peer, rank_.ncclPp, s));
  }
  group.end();
  for (BoundOp *m : members) {
    const Op &o = static_cast<const Op &>(*m);
    if (profiling_ && m != &head) BIGC_CK(cudaEventRecord(profStart_[o.index], s));
    if (profiling_) BIGC_CK(cudaEventRecord(profEnd_[o.index], s));
    if (o.record) BIGC_CK(cudaEventRecord(events_[o.index], s));
  }
#endif
}

void CudaEngine::issueCollective(Op &op, cudaStream_t s) {
#if !BIGC_HAVE_NCCL
  (void)s;
  runtimeError(op, "this build has no NCCL: collectives cannot run on the CUDA backend");
#else
  // NCCL on the comm stream (a bucket: one group). Sums and means of 16-bit tensors go through f32
  // copies (sumsIn32), so NCCL accumulates in f32 as the CPU backend's rings do (inside NCCL a bf16
  // sum accumulates in bf16, drifting from the CPU backend as the ranks grow); the mean is ncclAvg;
  // the norm of norms squares, sums and takes the root.
  const int64_t D = prog_.axisSize(int64_t(op.ins->num("axis", 0)));
  const Reduce red = Reduce(int(op.ins->num("reduce", 0)));
  const int axis = int(op.ins->num("axis", 0)); // the group of the op's mesh axis
  ncclComm_t comm = axis == 1 ? rank_.ncclTp : axis == 2 ? rank_.ncclPpColl : rank_.nccl;
  if (!comm) runtimeError(op, "no NCCL communicator for the collective's mesh axis (internal error)");
  auto type = [](DType t) { return t == DType::BF16 ? ncclBfloat16 : t == DType::F16 ? ncclFloat16 : ncclFloat32; };
  const ncclRedOp_t nop = red == Reduce::Mean ? ncclAvg : red == Reduce::Max ? ncclMax : ncclSum;
  if (op.kind == OpKind::AllReduce && red == Reduce::Norm) {
    for (size_t k = 0; k < op.rawIn.size(); ++k)
      cuda::squareF32(static_cast<const float *>(op.rawIn[k]), static_cast<float *>(op.rawOut[k]), op.inNumel[k], s);
    NcclGroup group;
    for (size_t k = 0; k < op.rawIn.size(); ++k)
      BIGC_NCCL(ncclAllReduce(op.rawOut[k], op.rawOut[k], size_t(op.inNumel[k]), ncclFloat32, ncclSum, comm, s));
    group.end();
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
  NcclGroup group;
  for (size_t k = 0; k < op.rawIn.size(); ++k) {
    const int64_t e = dtypeSize(op.inType[k]);
    if (sumsIn32(op, k)) continue; // (after the group)
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
  group.end();
  for (const CopyOut &c : after) BIGC_CK(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, s));
  // 16-bit sums and means through f32, in chunks of at most kWideChunk elements (the pad holds one
  // chunk: its input cast to f32, zero-padded to S * D for a reduce-scatter, and its f32 output),
  // each chunk reduced by NCCL on its own, in the same order on every rank.
  float *wide = reinterpret_cast<float *>(pad);
  for (size_t k = 0; k < op.rawIn.size(); ++k) {
    if (!sumsIn32(op, k)) continue;
    const char *in = static_cast<const char *>(op.rawIn[k]);
    char *out = static_cast<char *>(op.rawOut[k]);
    const int64_t e = dtypeSize(op.inType[k]), eo = dtypeSize(op.outType[k]);
    if (op.kind == OpKind::AllReduce) {
      for (int64_t o = 0; o < op.inNumel[k]; o += kWideChunk) {
        const int64_t c = std::min(kWideChunk, op.inNumel[k] - o);
        cuda::cast(op.inType[k], in + o * e, DType::F32, wide, c, s);
        BIGC_NCCL(ncclAllReduce(wide, wide, size_t(c), ncclFloat32, nop, comm, s));
        cuda::cast(DType::F32, wide, op.outType[k], out + o * eo, c, s);
      }
      continue;
    }
    // Reduce-scatter: rank r's shard is elements [r*S, r*S + S) of the input (zeros past its end);
    // a chunk takes columns [o, o + c) of every rank's shard.
    const int64_t S = op.outNumel[k], per = std::max<int64_t>(1, kWideChunk / D);
    for (int64_t o = 0; o < S; o += per) {
      const int64_t c = std::min(per, S - o);
      float *shard = wide + c * D; // (f32, after the chunk's input)
      for (int64_t r = 0; r < D; ++r) {
        const int64_t from = r * S + o, valid = std::clamp<int64_t>(op.inNumel[k] - from, 0, c);
        if (valid > 0) cuda::cast(op.inType[k], in + from * e, DType::F32, wide + r * c, valid, s);
        if (valid < c) BIGC_CK(cudaMemsetAsync(wide + r * c + valid, 0, size_t((c - valid) * 4), s));
      }
      BIGC_NCCL(ncclReduceScatter(wide, shard, size_t(c), ncclFloat32, nop, comm, s));
      cuda::cast(DType::F32, shard, op.outType[k], out + o * eo, c, s);
    }
  }
#endif
}

// Whether tensor k of collective `op` is a sum or mean of a 16-bit tensor (reduced through f32).
bool CudaEngine::sumsIn32(const Op &op, size_t k) const {
  const Reduce red = Reduce(int(op.ins->num("reduce", 0)));
  return (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter) &&
         (red == Reduce::Sum || red == Reduce::Mean) && (op.inType[k] == DType::BF16 || op.inType[k] == DType::F16);
}

} // namespace bigc::rt
