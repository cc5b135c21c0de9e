// CPU backend kernels (fp32 compute). Semantics: docs/program-format.md, "Instructions".
// Every kernel is multithreaded (OpenMP) where it pays; GEMMs go through OpenBLAS.
// Elementwise kernels allow their output to alias exactly one input.
#pragma once

#include <cstdint>

#include "bigc/Format/ops.h"
#include "bigc/Runtime/attention_geometry.h"

namespace bigc::rt::cpu {

// How the fused kernels (bigc-fuse) round the value the unfused pair stores between its two ops:
// not at all (f32 tensors) or to the 16-bit type of the tensors, so that the fused op's numbers are
// the pair's.
enum class Round { None, BF16, F16 };

// y[n, :] = table[ids[n], :] for n < N. Returns the index of the first id outside [0, V), or -1.
int64_t embedding(const float *table, const int32_t *ids, float *y, int64_t N, int64_t V, int64_t C);
// dtable = 0; dtable[ids[n], :] += dy[n, :].
void embeddingGrad(const float *dy, const int32_t *ids, float *dtable, int64_t N, int64_t V, int64_t C);

// c[batch][M,N] = op(a)[M,K] @ op(b)[K,N] for each of `batch` products, row-major.
// a is op(a) stored as [K,M] when transA, b stored as [N,K] when transB.
// strideA/strideB/strideC: elements between consecutive batch entries (0 = broadcast).
void matmul(const float *a, const float *b, float *c, int64_t batch, int64_t M, int64_t N, int64_t K, bool transA,
            bool transB, int64_t strideA, int64_t strideB, int64_t strideC);

void add(const float *a, const float *b, float *c, int64_t n);
// y[i, j] = x[i, j] + b[j] for i < rows, j < cols.
void biasAdd(const float *x, const float *b, float *y, int64_t rows, int64_t cols);
void mul(const float *a, const float *b, float *c, int64_t n);
void scale(const float *x, float *y, float factor, int64_t n);
// y[j] = sum_i x[i, j].
void reduceSum(const float *x, float *y, int64_t rows, int64_t cols);
void fill(float *y, float value, int64_t n);

void layernorm(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, int64_t N, int64_t C,
               float eps);
// `res` (layernorm_grad_add): dx = res + dx rounded by `t`; dx may be res.
void layernormGrad(const float *dy, const float *x, const float *w, const float *mean, const float *rstd, float *dx,
                   float *dw, float *db, int64_t N, int64_t C, const float *res = nullptr, Round t = Round::None);
// add_layernorm: s = a + r (rounded by t), then the layernorm of s; s may be a or r.
void addLayernorm(const float *a, const float *r, const float *w, const float *b, float *s, float *y, float *mean,
                  float *rstd, int64_t N, int64_t C, float eps, Round t);

// GELU, tanh approximation; `exact`: x * Phi(x) (erf).
void gelu(const float *x, float *y, int64_t n, bool exact = false);
void geluGrad(const float *x, const float *dy, float *dx, int64_t n, bool exact = false);

// SiLU y = x / (1 + exp(-x)); swiglu y = silu(g) * u (LLaMA's MLP).
void silu(const float *x, float *y, int64_t n);
void siluGrad(const float *x, const float *dy, float *dx, int64_t n);
// A mixture of experts (bigc.moe, Mixtral's block): x [N,C], router [E,C], gate_up [E,2F,C], down
// [E,C,F] -> y [N,C]: softmax(x router^T), its top k (normalised to sum 1 with `normalize`), each
// token the weighted sum of its experts' down_e (silu(g) * u), [g; u] = gate_up_e x. The gradient
// recomputes the routing and the experts' activations (dx, drouter, dgate_up, ddown overwritten).
void moe(const float *x, const float *router, const float *gateUp, const float *down, float *y, int64_t N, int64_t C,
         int64_t E, int64_t F, int64_t k, bool normalize);
void moeGrad(const float *dy, const float *x, const float *router, const float *gateUp, const float *down, float *dx,
             float *drouter, float *dgateUp, float *ddown, int64_t N, int64_t C, int64_t E, int64_t F, int64_t k,
             bool normalize);
// y = cap * tanh(x / cap) (Gemma 2's logits) and dx = dy * (1 - (y / cap)^2) from y; y may be x, dx dy.
void softcap(const float *x, float *y, int64_t n, float cap);
void softcapGrad(const float *y, const float *dy, float *dx, int64_t n, float cap);
void swiglu(const float *g, const float *u, float *y, int64_t n);
void swigluGrad(const float *g, const float *u, const float *dy, float *dg, float *du, int64_t n);
// geglu y = gelu(g) * u (Gemma's MLP), GELU's tanh form or (`exact`) its erf form; y may be g or u.
void geglu(const float *g, const float *u, float *y, int64_t n, bool exact);
void gegluGrad(const float *g, const float *u, const float *dy, float *dg, float *du, int64_t n, bool exact);

// RMSNorm over rows of C: rstd = 1/sqrt(mean(x^2) + eps), y = (x * rstd) * w.
void rmsnorm(const float *x, const float *w, float *y, float *rstd, int64_t N, int64_t C, float eps);
void rmsnormGrad(const float *dy, const float *x, const float *w, const float *rstd, float *dx, float *dw, int64_t N,
                 int64_t C, const float *res = nullptr, Round t = Round::None);
void addRmsnorm(const float *a, const float *r, const float *w, float *s, float *y, float *rstd, int64_t N, int64_t C,
                float eps, Round t);
// bias_gelu: pre = x + b (rounded by t; pre may be x), y = gelu(pre). gelu_grad_bias: dx = dy gelu'(x)
// (rounded by t; dx may be x or dy), db[j] = sum_i dx[i, j].
void biasGelu(const float *x, const float *b, float *pre, float *y, int64_t rows, int64_t cols, bool exact, Round t);
void geluGradBias(const float *x, const float *dy, float *dx, float *db, int64_t rows, int64_t cols, bool exact,
                  Round t);

// Rotary embeddings of x [B,T,C] with heads of D columns (docs/frontend.md): token t, frequency
// i < D/2 rotated by a = f32(invFreq[i]) * f32(t) (by -a when `inverse`), times `scale`. y may be x.
// `interleaved`: pair i is (x[2i], x[2i+1]) (Meta's llama), else (x[i], x[i+D/2]) (Hugging Face's).
// `rotary` R (0: D): a partial rotary, the first R elements of each head rotated as a head of R, the
// other D - R copied (GPT-NeoX's); invFreq holds R/2 values. `cp` C > 1: the T tokens are cp rank
// `cpRank`'s part of a sequence, token t at position format::cpPosition(t, T, C, cpRank).
void rope(const float *x, float *y, int64_t B, int64_t T, int64_t C, int64_t D, const float *invFreq, float scale,
          bool inverse, bool interleaved = false, int64_t rotary = 0, int64_t cp = 1, int64_t cpRank = 0);

// Context parallelism: attention of queries q (g's layout, g.T rows) over one block of keys and
// values k, v (g.T rows too), each row at its position in the sequence (qpos, kpos: g.T each); a
// query sees the keys at positions <= its own (and within g.window). out, lse: the block's
// softmax, merged exactly into accOut / accLse (the earlier blocks') when they are given (rows that
// see no key: out 0, lse -inf before merging). ringAttentionGrad: this block's part of the
// gradients, from out and lse of the whole attention, added to accDq / accDk / accDv when given
// (else to zeros).
void ringAttention(const AttentionGeometry &g, const float *q, const float *k, const float *v, const int64_t *qpos,
                   const int64_t *kpos, const float *accOut, const float *accLse, float *out, float *lse);
void ringAttentionGrad(const AttentionGeometry &g, const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const int64_t *qpos, const int64_t *kpos, const float *accDq,
                       const float *accDk, const float *accDv, float *dq, float *dk, float *dv);

// Causal attention on strided rows (attention_geometry.h).
using AttentionGeometry = rt::AttentionGeometry;
void attention(const AttentionGeometry &g, const float *q, const float *k, const float *v, float *out, float *lse);
// dq, dk, dv (same strides as q, k, v; overwritten).
void attentionGrad(const AttentionGeometry &g, const float *dout, const float *q, const float *k, const float *v,
                   const float *out, const float *lse, float *dq, float *dk, float *dv);

// qkv [B,T,3C] -> out [B,T,C], lse [B,H,T]; causal.
void attention(const float *qkv, float *out, float *lse, int64_t B, int64_t T, int64_t C, int64_t H);
void attentionGrad(const float *dout, const float *qkv, const float *out, const float *lse, float *dqkv, int64_t B,
                   int64_t T, int64_t C, int64_t H);

// y = transpose(x, perm) for a tensor of `rank` dims with shape `shape` (of x).
void transpose(const float *x, float *y, const int64_t *shape, const int64_t *perm, int rank);
// Split x viewed as [outer, parts*inner] into `parts` pieces of [outer, inner] (and back).
void split(const float *x, float *const *ys, int64_t outer, int64_t inner, int64_t parts);
void concat(const float *const *xs, float *y, int64_t outer, int64_t inner, int64_t parts);

// Mean over N rows of -log softmax(logits[n,:])[targets[n]]. Returns the index of the first
// target outside [0, V) through badIndex (or -1). `ld` (0: V): the rows' stride, for logits whose
// columns from V on are a padded vocabulary's (bigc-pad-vocab: outside the softmax; the
// gradients write zeros there). Likewise for the vocabulary-parallel forms below.
float crossEntropy(const float *logits, const int32_t *targets, int64_t N, int64_t V, int64_t *badIndex,
                   int64_t ld = 0);
// Vocabulary-parallel cross-entropy (docs/program-format.md): this rank's V columns start at id
// `offset` of a vocabulary of `vocab`. stats[i] = (log-sum-exp of row i, its target's logit or 0).
void vocabCeStats(const float *logits, const int32_t *targets, float *stats, int64_t N, int64_t V, int64_t offset,
                  int64_t vocab, int64_t *badIndex, int64_t ld = 0);
void vocabCeStatsGrad(const float *dstats, const float *logits, const int32_t *targets, const float *stats,
                      float *dlogits, int64_t N, int64_t V, int64_t offset, int64_t ld = 0);
// The LM head fused with vocabCeStats (bigc-fuse-loss): the same stats for the logits h [N,C] @
// op(w) (w [C,V], or [V,C] with tb), computed `chunk` columns at a time into the workspace ws
// (N*chunk + 2*N floats); the logits are never stored whole.
void linearCeStats(const float *h, const float *w, const int32_t *targets, float *stats, float *ws, int64_t N,
                   int64_t C, int64_t V, int64_t chunk, bool tb, int64_t offset, int64_t vocab, int64_t *badIndex);
// Its gradient: dlogits as vocabCeStatsGrad, recomputed a chunk at a time, then dh = dlogits @ op(w)ᵀ and
// dw = the matmul's gradient (ws: N*chunk + N*C floats; dh accumulated in f32 there).
void linearCeStatsGrad(const float *dstats, const float *h, const float *w, const int32_t *targets, const float *stats,
                       float *dh, float *dw, float *ws, int64_t N, int64_t C, int64_t V, int64_t chunk, bool tb,
                       int64_t offset);
// stats of P parts of N positions each: mean over positions of logsumexp_r(lse) - sum_r(target).
float vocabCeLoss(const float *stats, int64_t N, int64_t P);
void vocabCeLossGrad(const float *stats, float dloss, float *dstats, int64_t N, int64_t P);
// embeddingGrad for the rows [offset, offset + V) of the table (ids elsewhere contribute nothing).
void embeddingGradRows(const float *dy, const int32_t *ids, float *dtable, int64_t N, int64_t V, int64_t C,
                       int64_t offset);
void crossEntropyGrad(const float *logits, const int32_t *targets, float dloss, float *dlogits, int64_t N, int64_t V,
                      int64_t ld = 0);

// Sum of squares of n elements (accumulated in double).
double sumSquares(const float *x, int64_t n);

struct AdamWParams {
  float lr, beta1, beta2, eps, weightDecay;
  float gradScale; // 1, or the clipping coefficient
  int64_t step;    // t >= 1
};
void adamw(float *param, const float *grad, float *m, float *v, int64_t n, const AdamWParams &p);

} // namespace bigc::rt::cpu
