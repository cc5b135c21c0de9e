// CUDA backend kernels (Kernels.cu, Attention.cu): launchers callable from plain C++. Semantics:
// docs/program-format.md, "Instructions" — the same as the CPU backend's kernels, computed in
// fp32 from tensors stored in f32, bf16 or f16 (`DType t`: the storage type of the op's
// floating-point tensors; statistics, scalars and AdamW states are f32). Every launcher enqueues
// on `s` and returns; nothing allocates: scratch comes from the caller's workspace, sized by the
// matching *Workspace function at load time. Results are deterministic (no floating-point
// atomics): reductions use fixed partitions and a fixed order.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "bigc/Runtime/attention_geometry.h"
#include "bigc/Runtime/cpu_adam.h"
#include "bigc/Runtime/program.h"

namespace bigc::rt::cuda {

// Device-side error report for bad ids: err[0] = instruction index + 1 of the first offender,
// err[1] its position, err[2] the id. The first report wins; the engine reads it after the step.
struct ErrSlot {
  int *err;
  int instruction;
};

size_t align256(size_t n);

// The table holds rows [offset, offset + V) of a vocabulary of `vocab` ids (vocab < 0: V, the
// whole table): ids outside the vocabulary are reported; ids of other rows (tensor parallelism's
// vocabulary-parallel embedding) give zero rows and no gradient.
void embedding(DType t, const void *table, const int32_t *ids, void *y, int64_t N, int64_t V, int64_t C, ErrSlot e,
               cudaStream_t s, int64_t offset = 0, int64_t vocab = -1);
size_t embeddingGradWorkspace(int64_t N, int64_t V);
void embeddingGrad(DType t, const void *dy, const int32_t *ids, void *dtable, int64_t N, int64_t V, int64_t C, void *ws,
                   size_t wsBytes, ErrSlot e, cudaStream_t s, int64_t offset = 0, int64_t vocab = -1);

void add(DType t, const void *a, const void *b, void *c, int64_t n, cudaStream_t s);
void mul(DType t, const void *a, const void *b, void *c, int64_t n, cudaStream_t s);
void biasAdd(DType t, const void *x, const void *b, void *y, int64_t rows, int64_t cols, cudaStream_t s);
void scale(DType t, const void *x, void *y, float factor, int64_t n, cudaStream_t s);
void fill(DType t, void *y, float value, int64_t n, cudaStream_t s);
// y = x * x and x = sqrt(x) on f32 (the norm all-reduce: the norm of norms).
void squareF32(const float *x, float *y, int64_t n, cudaStream_t s);
void sqrtF32(float *x, int64_t n, cudaStream_t s);
// GELU: the tanh approximation, or (`exact`) x * Phi(x) with erf.
void gelu(DType t, const void *x, void *y, int64_t n, cudaStream_t s, bool exact = false);
void geluGrad(DType t, const void *x, const void *dy, void *dx, int64_t n, cudaStream_t s, bool exact = false);
// SiLU y = x / (1 + exp(-x)) and SwiGLU y = silu(g) * u (the LLaMA family's MLP), the CPU's
// expressions; outputs may alias one input (swiglu_grad's may not).
void silu(DType t, const void *x, void *y, int64_t n, cudaStream_t s);
void siluGrad(DType t, const void *x, const void *dy, void *dx, int64_t n, cudaStream_t s);
// y = cap * tanh(x / cap); dx = dy * (1 - (y / cap)^2) from y (Gemma 2's logits).
void softcap(DType t, const void *x, void *y, int64_t n, float cap, cudaStream_t s);
void softcapGrad(DType t, const void *y, const void *dy, void *dx, int64_t n, float cap, cudaStream_t s);
void swiglu(DType t, const void *g, const void *u, void *y, int64_t n, cudaStream_t s);
void swigluGrad(DType t, const void *g, const void *u, const void *dy, void *dg, void *du, int64_t n, cudaStream_t s);
// geglu y = gelu(g) * u (`exact`: the erf GELU) and its gradient.
void geglu(DType t, const void *g, const void *u, void *y, int64_t n, bool exact, cudaStream_t s);
void gegluGrad(DType t, const void *g, const void *u, const void *dy, void *dg, void *du, int64_t n, bool exact,
               cudaStream_t s);
void cast(DType from, const void *x, DType to, void *y, int64_t n, cudaStream_t s);

// y[c] = sum_r x[r, c].
size_t reduceSumWorkspace(int64_t rows, int64_t cols);
void reduceSum(DType t, const void *x, void *y, int64_t rows, int64_t cols, void *ws, cudaStream_t s);

// x2 (add_layernorm): the rows normalised are x + x2, stored in `sum` first (sum may be x or x2).
void layernorm(DType t, const void *x, const void *w, const void *b, void *y, float *mean, float *rstd, int64_t N,
               int64_t C, float eps, cudaStream_t s, const void *x2 = nullptr, void *sum = nullptr);
size_t layernormGradWorkspace(int64_t N, int64_t C);
// res (layernorm_grad_add): dx = res + dx as stored in t (dx may be res).
void layernormGrad(DType t, const void *dy, const void *x, const void *w, const float *mean, const float *rstd,
                   void *dx, void *dw, void *db, int64_t N, int64_t C, void *ws, cudaStream_t s,
                   const void *res = nullptr);

// RMSNorm over N rows of C: rstd = 1/sqrt(mean(x^2) + eps) (f32), y = w * (x * rstd). The
// backward's dw is a column sum over the rows in fixed chunks (as layernorm's: deterministic).
void rmsnorm(DType t, const void *x, const void *w, void *y, float *rstd, int64_t N, int64_t C, float eps,
             cudaStream_t s, const void *x2 = nullptr, void *sum = nullptr);
size_t rmsnormGradWorkspace(int64_t N, int64_t C);
void rmsnormGrad(DType t, const void *dy, const void *x, const void *w, const float *rstd, void *dx, void *dw,
                 int64_t N, int64_t C, void *ws, cudaStream_t s, const void *res = nullptr);

// bias_gelu: pre = x + b[col] (as stored in t; pre may be x), y = gelu(pre). gelu_grad_bias:
// dx = dy gelu'(x) (as stored; dx may be x or dy) and db = its column sums in reduce_sum's order
// (workspace: reduceSumWorkspace(rows, cols)); one pass over x, dy and dx.
void biasGelu(DType t, const void *x, const void *b, void *pre, void *y, int64_t rows, int64_t cols, bool exact,
              cudaStream_t s);
void geluGradBias(DType t, const void *x, const void *dy, void *dx, void *db, int64_t rows, int64_t cols, bool exact,
                  void *ws, cudaStream_t s);

// Rotary embeddings of x [B,T,C] in heads of D columns (docs/frontend.md): token t, frequency
// i < D/2 rotated by a = f32(invFreq[i]) * f32(t) (by -a when `inverse`), cos and sin of a in
// double rounded to f32 (the CPU's), times `scale`. `invFreq` is host memory (D/2 <= 512 values,
// passed by value to the kernel); y may be x.
constexpr int64_t kRopeMaxHalf = 512;
// `interleaved`: pair i is (x[2i], x[2i+1]) (Meta's llama), else (x[i], x[i+D/2]).
// `rotary` R (0: D): the first R elements of each head rotate (invFreq holds R/2), the rest are copied.
// `cp` C > 1: the T tokens are context-parallel rank `cpRank`'s part of a sequence of C x T, token t
// at its position there (format::cpPosition).
void rope(DType t, const void *x, void *y, int64_t B, int64_t T, int64_t C, int64_t D, const float *invFreq,
          float scale, bool inverse, cudaStream_t s, bool interleaved = false, int64_t rotary = 0, int64_t cp = 1,
          int64_t cpRank = 0);

// Context parallelism (ring_attention, ring_attention_grad; the CPU's cpu::ringAttention): the
// queries of `a` (a.T rows) against one block of keys (a.T rows), query t at position
// qpos(t) and key j at kpos(j) of the whole sequence: the positions of cp rank `qRank`'s and
// `kRank`'s tokens (format::cpPosition), or with `a2a` both the whole sequence of cp parts in rank
// order. A query sees the keys at positions <= its own (and within a.window). `out` has dtype
// `outT` (the step's: f32 between blocks), accOut and the lse's are f32; merged exactly into
// accOut / accLse when they are given. No soft cap (refused by the engine).
struct RingPositions {
  int64_t cp = 1, qRank = 0, kRank = 0;
  bool a2a = false;
};
void ringAttention(DType t, DType outT, const AttentionGeometry &a, const RingPositions &pos, const void *q,
                   const void *k, const void *v, const float *accOut, const float *accLse, void *out, float *lse,
                   cudaStream_t s);
// The block's part of the gradients from the whole attention's out and lse (dtype t, as q): dq
// (dtype dqT) = accDq + this block's, dk and dv (f32) = accDk / accDv + this block's (zeros when
// the acc pointers are null). ws: ringAttentionGradWorkspace bytes.
size_t ringAttentionGradWorkspace(int64_t B, int64_t T, int64_t H);
void ringAttentionGrad(DType t, DType dqT, const AttentionGeometry &a, const RingPositions &pos, const void *dout,
                       const void *q, const void *k, const void *v, const void *out, const float *lse,
                       const float *accDq, const float *accDk, const float *accDv, void *dq, float *dk, float *dv,
                       void *ws, cudaStream_t s);

// dst[r, c] = src[r, c] for r < rows, c < cols; pitches in elements of `elemBytes` (2 or 4).
void copy2d(int elemBytes, const void *src, int64_t srcPitch, void *dst, int64_t dstPitch, int64_t rows, int64_t cols,
            cudaStream_t s);

// y = transpose(x, perm), elements of `elemBytes` (2 or 4); rank <= 8.
void transpose(int elemBytes, const void *x, void *y, const int64_t *shape, const int64_t *perm, int rank,
               cudaStream_t s);

// Rows of `ldr` logits of which the first V are the classes (ldr > V: a padded vocabulary,
// bigc-pad-vocab: the rest outside the softmax, their gradients 0); likewise below.
size_t crossEntropyWorkspace(int64_t N);
void crossEntropy(DType t, const void *logits, const int32_t *targets, float *loss, int64_t N, int64_t V, int64_t ldr,
                  void *ws, ErrSlot e, cudaStream_t s);
void crossEntropyGrad(DType t, const void *logits, const int32_t *targets, const float *dloss, void *dlogits, int64_t N,
                      int64_t V, int64_t ldr, cudaStream_t s);

// Vocabulary-parallel cross-entropy (program format: vocab_ce_*). logits [N, V] are ids
// [offset, offset + V) of `vocab`; stats [N, 2] f32: per position the log-sum-exp of its V logits
// and its target's logit (0 when the target is another rank's). vocab_ce_loss: stats of P parts
// [P, N, 2] -> the mean over positions of log Σ_parts exp(lse) - Σ_parts target logit.
void vocabCeStats(DType t, const void *logits, const int32_t *targets, float *stats, int64_t N, int64_t V, int64_t ldr,
                  int64_t offset, int64_t vocab, ErrSlot e, cudaStream_t s);
void vocabCeStatsGrad(DType t, const float *dstats, const void *logits, const int32_t *targets, const float *stats,
                      void *dlogits, int64_t N, int64_t V, int64_t ldr, int64_t offset, cudaStream_t s);
size_t vocabCeLossWorkspace(int64_t N);
// The fused LM head and loss (linear_ce_stats, bigc-fuse-loss), a chunk of cw vocabulary columns
// [c0, c0 + cw) at a time; L [N, cw] f32 the chunk's logits (a GEMM's output). Chunk statistics:
// per position the running max in stats[2n], the running sum of exp in run[n], the target's logit
// in stats[2n + 1] (ids [offset, offset + V) of `vocab`; `first` resets them and checks the
// targets); finish: stats[2n] = log run[n] + max. Gradient: dL [N, cw] (type t; in place over L
// when t is f32) = dstats[2n] exp(L - stats[2n]) + dstats[2n + 1] at the target's column.
void linearCeChunkStats(const float *L, const int32_t *targets, float *stats, float *run, int64_t N, int64_t cw,
                        int64_t c0, int64_t offset, int64_t vocab, bool first, ErrSlot e, cudaStream_t s);
void linearCeFinish(float *stats, const float *run, int64_t N, cudaStream_t s);
void linearCeChunkGrad(DType t, const float *dstats, const float *L, const int32_t *targets, const float *stats,
                       void *dL, int64_t N, int64_t cw, int64_t offset, cudaStream_t s);
void vocabCeLoss(const float *stats, float *loss, int64_t N, int64_t P, void *ws, cudaStream_t s);
void vocabCeLossGrad(const float *stats, const float *dloss, float *dstats, int64_t N, int64_t P, cudaStream_t s);

// Multi-tensor reductions: for each input, one launch writing `slots` partial results from
// `*slot` on (the caller passes the same running counter to every input of one instruction),
// then the final launch over all slots.
int64_t partialSlots(int64_t n);
void sumSquaresPartial(DType t, const void *x, int64_t n, double *partials, int64_t *slot, cudaStream_t s);
void sqrtOfSum(const double *partials, int64_t slots, float *out, cudaStream_t s);
void nonFiniteAny(DType t, const void *x, int64_t n, int *flag, cudaStream_t s);
void flagToFloat(const int *flag, float *out, cudaStream_t s);

// Fused AdamW (the expression of AdamWConsts, bit for bit the CPU's): optional device scalars
// norm (clipping), lossScale (unscaling) and foundInf (skip on overflow); half may be null.
void adamw(const AdamWConsts &c, float *param, const void *grad, DType gradType, float *m, float *v, void *half,
           DType halfType, int64_t n, const float *norm, double maxNorm, const float *lossScale, const float *foundInf,
           cudaStream_t s);
void lossScaleUpdate(const float *foundInf, float *scale, float *good, double backoff, double growth,
                     double growthInterval, cudaStream_t s);

// Causal attention (Attention.cu): qkv [B,T,3C] -> out [B,T,C], lse [B,H,T] (natural log); the
// backward writes every element of dqkv. bf16/f16 with head size 16, 32, 64 or 128 (and C a
// multiple of 8) run on tensor cores (flash-attention tiles of 64 x 64, the T x T matrix never
// stored); anything else runs a warp-per-row kernel with fp32 math.
bool attentionUsesTensorCores(DType t, int64_t C, int64_t H);
size_t attentionGradWorkspace(int64_t B, int64_t T, int64_t H);
void attention(DType t, const void *qkv, void *out, float *lse, int64_t B, int64_t T, int64_t C, int64_t H,
               cudaStream_t s);
void attentionGrad(DType t, const void *dout, const void *qkv, const void *out, const float *lse, void *dqkv, int64_t B,
                   int64_t T, int64_t C, int64_t H, void *ws, cudaStream_t s);

// Attention on strided rows (the CPU backend's cpu::AttentionGeometry): query row t of head h at
// q + (b*T + t)*sq + h*D, key/value rows of kv head g at k/v + (b*T + t)*skv + g*D, output rows at
// out + (b*T + t)*so + h*D; dq, dk, dv have the strides of q, k, v; lse [B,H,T]. Query head h
// reads kv head (headOffset + h) / group; causal, and window > 0 keeps keys t - window < j <= t.
// Grouped-query attention (gqa_attention) runs here in every dtype, on the generic kernels (a
// warp per row, fp32 math; head size up to kGenericAttentionMaxHead); so does the packed form
// above when it does not run on tensor cores (q = qkv, k = qkv + C, v = qkv + 2C, strides 3C).
// The backward writes every element of dq, dk and dv: dk/dv of a kv head are summed over the
// query heads of its group by one warp per key row (in head order, then query order: no atomics),
// and are zero for a kv head none of this rank's query heads reads (tp_heads).
using AttentionGeometry = rt::AttentionGeometry; // attention_geometry.h
constexpr int64_t kGenericAttentionMaxHead = 256;
void gqaAttention(DType t, const AttentionGeometry &g, const void *q, const void *k, const void *v, void *out,
                  float *lse, cudaStream_t s);
// Workspace: attentionGradWorkspace(B, T, H) (D_t = dout_t . out_t per query row).
void gqaAttentionGrad(DType t, const AttentionGeometry &g, const void *dout, const void *q, const void *k,
                      const void *v, const void *out, const float *lse, void *dq, void *dk, void *dv, void *ws,
                      cudaStream_t s);

} // namespace bigc::rt::cuda
