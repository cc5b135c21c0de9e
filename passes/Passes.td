//===- Passes.td - bigc passes -----------------------------*- tablegen -*-===//
//
// Every pass of bigc, one .cpp per pass named after it (Autodiff.cpp for
// bigc-autodiff), one lit test per flag (test/Passes/autodiff.mlir).
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_PASSES_TD
#define BIGC_PASSES_TD

include "mlir/Pass/PassBase.td"

def BigcAutodiff : Pass<"bigc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Turn @forward (loss) into @train_step: forward, backward, AdamW";
  let description = [{
    Reverse-mode differentiation of the model graph. The input module declares
    the parameters (`bigc.param`) and a function

      func.func @forward(%tokens: tensor<BxTxi32>, %targets: tensor<BxTxi32>) -> tensor<f32>

    returning the loss. The pass replaces it with `@train_step` (same
    signature, same result) holding the forward ops, then the backward ops
    in reverse order, then one `bigc.adamw` per parameter that has a
    gradient, and declares the two AdamW moments of each such parameter.

    Why at compile time: the backward becomes ordinary IR, so recomputation,
    offload, sharding, scheduling and the memory plan see, place and order
    every gradient exactly like any forward activation.

    How: each op implements `DifferentiableOpInterface::buildGradient`
    (embedding -> embedding_grad, matmul -> two matmuls, layernorm ->
    layernorm_grad, attention -> attention_grad, ...). The loss is seeded with
    `bigc.fill {value = 1.0}`; a value used several times (a residual stream,
    a tied embedding) gets the `bigc.add` of the gradients of its uses. Every
    op carries `bigc.phase` = "forward", "backward" or "optimizer"; backward
    ops keep the location of the forward op they differentiate. Weight decay
    applies to parameters of rank >= 2 only. With `grad-clip` > 0 one
    `bigc.global_norm` over all parameter gradients feeds every `bigc.adamw`.

    Before:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {init = "normal", std = 0.02 : f64}
    func.func @forward(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
      %x = ...                                          // tensor<2x3x8xf32>
      %w = bigc.get_param @w : tensor<8x4xf32>
      %logits = bigc.matmul %x, %w : (...) -> tensor<2x3x4xf32>
      %loss = bigc.cross_entropy %logits, %targets : (...) -> tensor<f32>
      return %loss : tensor<f32>
    }
    ```

    After:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {init = "normal", std = 0.02 : f64}
    bigc.param @"w.exp_avg" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
    bigc.param @"w.exp_avg_sq" : tensor<8x4xf32> {init = "zeros", role = "optimizer"}
    func.func @train_step(%tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
      ... forward, {bigc.phase = "forward"} ...
      %one = bigc.fill {bigc.phase = "backward", value = 1.0 : f64} : () -> tensor<f32>
      %dlogits = bigc.cross_entropy_grad %logits, %targets, %one ...
      %dx = bigc.matmul %dlogits, %w {transpose_b} ...
      %x2 = bigc.reshape %x ... -> tensor<6x8xf32>
      %d2 = bigc.reshape %dlogits ... -> tensor<6x4xf32>
      %dw = bigc.matmul %x2, %d2 {transpose_a} ... -> tensor<8x4xf32>
      bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq",
                      lr = 3.0e-04, ..., weight_decay = 0.1, bigc.phase = "optimizer"} : tensor<8x4xf32>
      return %loss : tensor<f32>
    }
    ```

    Errors (located, the pass fails): no `@forward`; a result that is not a
    scalar f32 loss; an op in the forward that is not differentiable.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"lr", "lr", "double", /*default=*/"3e-4", "AdamW learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.1",
           "AdamW weight decay, applied to parameters of rank >= 2 only">,
    Option<"gradClip", "grad-clip", "double", /*default=*/"0.0",
           "Clip the global gradient norm to this value (0: no clipping)">,
    Option<"optimizerStates", "optimizer-states", "std::string", /*default=*/"\"fp32\"",
           "The AdamW moments' type: fp32, or bf16 (updated in fp32 registers, stored rounded to nearest even)">,
  ];
}

def BigcContextParallel : Pass<"bigc-context-parallel", "::mlir::ModuleOp"> {
  let summary = "Context parallelism: @forward becomes one rank's part of each sequence, before autodiff";
  let description = [{
    Splits each sequence of T tokens over `cp` ranks (Megatron-LM's context
    parallelism, Colossal-AI's sequence parallelism), so that a sequence
    longer than one device holds can be trained. The sequence is cut into
    2 x cp chunks and rank c holds chunks c and 2cp-1-c: with causal
    attention every rank then does the same work (Megatron's load balancing).

    Every op but attention works on the rank's tokens alone, so the pass
    follows the tokens from @forward's token inputs through each op's rule
    (per-token ops keep the token dimension, a matmul keeps its left
    operand's, a reshape keeps it when the dimensions after it stay
    together) and divides that dimension by cp in every type:

      %x = bigc.embedding %w, %tokens : (tensor<96x64xf32>, tensor<2x64xi32>) -> tensor<2x64x64xf32>
    becomes, with cp = 2,
      %x = bigc.embedding %w, %tokens : (tensor<96x64xf32>, tensor<2x32xi32>) -> tensor<2x32x64xf32>

    bigc.rope gets `cp` (the rotation uses the token's position in the whole
    sequence) and bigc.gqa_attention `cp` (bigc-cp-attention lowers it after
    bigc-shard, when the mesh exists: `kind` ring passes key/value blocks
    around the ranks, a2a turns the sequence split into a head split with an
    all-to-all). Records `bigc.context_parallel = {size, kind, seq}`. The
    loss is the mean over the rank's tokens; the cp ranks are data ranks for
    the gradients (their mean over dp, which counts them, is the mean over
    every token).

    Errors, each naming the op: an op with no rule (one that may mix the
    tokens), a product of two activations (attention written out), a
    position table or mask spanning the sequence, GPT-2's bigc.attention, a
    sequence not divisible by 2 x cp, a model without attention, a2a with
    heads that cp does not divide.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"cp", "cp", "int64_t", /*default=*/"1", "Context-parallel ranks (the cp axis, within dp)">,
    Option<"kind", "kind", "std::string", /*default=*/"\"ring\"", "ring (key/value blocks around the ranks) or a2a (all-to-all)">,
  ];
}

def BigcCpAttention : Pass<"bigc-cp-attention", "::mlir::ModuleOp"> {
  let summary = "Context parallelism: the attention over the whole sequence as ring blocks or an all-to-all";
  let description = [{
    After bigc-shard (the mesh has its dp axis, which counts the cp ranks):
    records `cp` in `bigc.mesh` and replaces every bigc.gqa_attention and
    gqa_attention_grad marked `cp` by bigc-context-parallel.

    kind ring (Megatron-LM's context parallelism, ring attention): the
    rank's queries meet each rank's key/value block in turn; the blocks go
    around the ring with `bigc.ring_shift` (rank c receives rank c-1's), the
    next block's transfer free to overlap the current block's attention:

      %o0, %l0 = bigc.ring_attention %q, %k, %v {step = 0}
      %k1, %v1 = bigc.ring_shift %k, %v {group = "cp"}
      %o1, %l1 = bigc.ring_attention %q, %k1, %v1, %o0, %l0 {step = 1}
      ...

    each merging its partial softmax into the earlier ones' exactly (the
    partial outs in f32). The backward passes k and v around the same way;
    each block's key/value gradients (f32) are computed alone and then added
    (bigc.add) to those that arrived from the previous rank while the block
    ran, and the sum is passed on; the last shift brings each block's
    gradients home. Only the kv heads travel.

    kind a2a (DeepSpeed-Ulysses): `bigc.cp_all_to_all {to_heads}` gives each
    rank the whole sequence of a cp-th of the heads (q, k, v), attention runs
    there, and the inverse all-to-all returns the rank's tokens; the backward
    mirrors it.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
}

def BigcTensorParallel : Pass<"bigc-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Tensor (and sequence) parallelism on the tp axis of the device mesh, before autodiff";
  let description = [{
    Makes @forward the forward of one of `tp` tensor ranks, before
    bigc-autodiff, so that the backward's collectives come from
    differentiating the forward's (Megatron-LM's f and g). Records
    `bigc.mesh = {dp = ranks / tp, tp = tp, pp = 1}`.

    Values carry a layout over the tensor ranks: replicated, split along a
    dimension, or partial sums. Weights have none until an op reads them;
    each op's rule (TensorParallelOpInterface, BigcTensorParallelRules.cpp)
    says which layouts it needs its operands in and what its results are.
    The pass walks @forward in order, places each weight as its first reader
    asks (the type becomes the rank's chunk; `bigc.tp_split = [dim,
    segments]`, `bigc.tp_full_shape`), and converts every operand whose
    layout differs from the rule's:

      partial -> replicated            tp_all_reduce (g)
      replicated, read by split work   tp_copy (f: all-reduce of the gradient)
      partial -> split on tokens       tp_reduce_scatter  (sequence parallel)
      split on tokens -> replicated    tp_all_gather (gradient: reduce-scatter)
      split -> replicated              tp_all_gather (gradient: this rank's chunk)
      replicated -> split              tp_slice (gradient: all-gather)

    On a GPT this gives Megatron's layout: QKV and the first MLP matmul
    column-parallel (QKV in 3 segments, so each rank has whole heads), the
    attention projection and the second MLP matmul row-parallel, one
    all-reduce forward and one backward per pair; the token embedding
    vocabulary-parallel (ids of other ranks give zeros, then an all-reduce),
    and the tied LM head computing this rank's vocabulary columns, whose
    cross-entropy is the vocabulary-parallel loss (vocab_ce_stats per rank,
    an all-gather of 2 floats per token, vocab_ce_loss): the logits are never
    gathered. `sequence-parallel` keeps the residual stream, the layernorms
    and the biases after row-parallel matmuls split along the sequence: the
    all-reduces become a reduce-scatter and an all-gather.

    An op without a rule for its operands' layouts runs replicated; the
    module attribute `bigc.tp_replicated` lists them for bigc inspect.
    Errors: `tp` not dividing the ranks, the heads, a split dimension (the
    vocabulary: pad it, as Megatron does) or the sequence.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks (the tp axis of the mesh)">,
    Option<"ranks", "ranks", "int64_t", /*default=*/"1", "All ranks (dp = ranks / tp)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Split the per-token regions (layernorm, residual) along the sequence">,
  ];
}

def BigcPadVocab : Pass<"bigc-pad-vocab", "::mlir::ModuleOp"> {
  let summary = "The vocabulary padded to a multiple: aligned LM-head GEMMs, and --tp for any vocabulary";
  let description = [{
    Runs on @forward first (before bigc-tensor-parallel). GPT-2's 50257 rows
    leave the LM head's GEMM without the 16-byte row alignment tensor cores
    want (the CUDA backend stages such a GEMM through padded copies), and a
    tensor size that does not divide the vocabulary cannot split it. As
    Megatron-LM (`make_vocab_size_divisible_by`) and llm.c do, this pass pads
    the vocabulary to Vp, the next multiple of `multiple` x `tp`:

      - the LM head's weight (w [V,C] of `bigc.matmul %h, %w {transpose_b}`
        whose logits only a `bigc.cross_entropy` reads, possibly through a
        reshape) and every embedding table of V rows (tied or not) become
        [Vp,C], with `bigc.vocab_rows = V`: the runtime leaves rows V.. at
        zero (not initialised, not saved with the weights, not loaded);
      - the logits become [...,Vp] and the cross-entropy gets
        `bigc.classes = V`: columns from V on are outside the softmax and get
        a zero gradient, so the padding rows' gradients are zero and AdamW
        keeps them at zero. The losses are those of the unpadded model.

    Checkpoints' weights (model.safetensors, --save-weights) keep the model's
    shapes, so a padded run's weights load into an unpadded program and back.
    Vp = V leaves the module unchanged. A weight of the head read by anything
    else, logits read besides the loss, or a head that is not such a matmul
    of a [V,C] parameter is an error naming it.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"multiple", "multiple", "int64_t", /*default=*/"64", "Pad the vocabulary to a multiple of this x tp">,
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks (each holds Vp / tp rows)">,
  ];
}

def BigcTile : Pass<"bigc-tile", "::mlir::ModuleOp"> {
  let summary = "Linear layers too large for the device used one row tile of the weight at a time (memory-centric tiling)";
  let description = [{
    Runs on @forward before bigc-autodiff. ZeRO-Infinity's memory-centric
    tiling: a linear layer whose weight (at `element-bytes` bytes an element,
    as the compute copy will be) is larger than `max-bytes` reads it as k
    equal row tiles, k the fewest whose tile fits `max-bytes` (k divides the
    rows). Each read of the weight becomes

      %t0, %t1, ... = bigc.split %w {axis = 0}

    and each bigc.matmul reading it one matmul per tile:

      x @ w,   w [K,N]:  bigc.split x along its last axis; the tiles'
                         products summed (bigc.add)
      x @ w^T, w [N,K]:  (transpose_b) the tiles' products joined along the
                         last axis (bigc.concat)

    The weight gets `bigc.tiles = k`. After bigc-autodiff its gradient is
    the bigc.concat of the tiles' gradients; bigc-shard (ZeRO-3) then shards
    the weight, its fp32 master and AdamW moments tile-interleaved, gathers
    each tile on its own just before its use and reduce-scatters each tile's
    gradient as soon as it exists: the whole weight and its whole gradient
    never exist on a device (with `--prefetch` a tile's gather overlaps the
    previous tile's matmul; two tiles are alive at a time).

    A weight read by anything but such matmuls (the tied embedding's table,
    read by bigc.embedding too) is left whole; the module records what was
    done: `bigc.tiled = {weights, tiles, untiled}` (`untiled`: the names of
    the weights over the size left whole). A weight whose single row is over
    `max-bytes` is an error.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"maxBytes", "max-bytes", "int64_t", /*default=*/"0",
           "The largest tile of a weight in bytes (weights over it are tiled)">,
    Option<"elementBytes", "element-bytes", "int64_t", /*default=*/"4",
           "Bytes an element of the compute copy (2 with 16-bit precision)">,
  ];
}

def BigcFuseLoss : Pass<"bigc-fuse-loss", "::mlir::ModuleOp"> {
  let summary = "The LM head and the cross-entropy fused, the logits computed in chunks and never stored";
  let description = [{
    Runs on @forward before bigc-autodiff (after bigc-tensor-parallel). The
    logits of a language model (N positions × V vocabulary, the largest
    activation of the step: 16 × 1024 × 50257 fp32 is 3.3 GB, and with a
    128k vocabulary several times that) exist only to be reduced to a loss.
    This pass replaces

      %logits = bigc.matmul %h, %w {transpose_b}    (h [...,C], w [V,C] or [C,V])
      %loss = bigc.cross_entropy %logits, %targets

    by `bigc.linear_ce_stats` (per position: the log-sum-exp of the logits
    and the target's logit, computed `chunk` vocabulary columns at a time
    into an N × chunk workspace) and `bigc.vocab_ce_loss` over those
    statistics (one part). Its gradient, `bigc.linear_ce_stats_grad`,
    recomputes each chunk of logits from h and w in the backward (one more
    GEMM of the LM head's size: the price of never keeping N × V floats) and
    accumulates dh and dw from it. After bigc-tensor-parallel the
    vocabulary-parallel loss (`bigc.vocab_ce_stats` of this rank's columns)
    is fused the same way, so each tensor rank holds N × chunk floats of
    logits instead of N × V/T. A `bigc.reshape` that only merges the leading
    dimensions of the logits (`logits.view(-1, V)` in PyTorch) is looked
    through (h is reshaped to match).

    `chunk` = 0 picks the columns per chunk: C rounded up to a multiple of 64
    (the workspace then holds as many floats as the head's input h), at most
    V. Logits with another user (returned, or read by another op) are left
    alone: there is nothing to save. A model without such a head is an error
    naming what the pass looked for.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"chunk", "chunk", "int64_t", /*default=*/"0",
           "Vocabulary columns per chunk (0: C rounded up to 64)">,
  ];
}

def BigcShard : Pass<"bigc-shard", "::mlir::ModuleOp"> {
  let summary = "Data parallelism and ZeRO-1/2/3 over the dp axis of the device mesh: collectives as ops";
  let description = [{
    Makes @train_step the step of one rank of `ranks` data-parallel ranks
    (every rank runs the same program on its slice of the global batch).
    Records the device mesh on the module, `bigc.mesh = {dp = ranks, pp = 1,
    tp = 1}` (the tensor and pipeline axes are there for later passes), and
    `bigc.zero`. One rank: nothing else changes.

    - The gradients are averaged over the ranks: the backward's seed (dloss)
      is divided by the ranks, as bigc-grad-accum divides it by the
      micro-batches, and the collectives sum (`reduce = "sum"`). Each rank's
      gradients then have the magnitude of one rank's over the whole global
      batch, so fp16 loss scaling overflows where one rank would (a mean
      after the collective would let each rank's gradients overflow at a
      `ranks` times smaller scale).
    - zero 0 (data parallel, PyTorch DDP): each gradient is summed over the
      ranks with `bigc.all_reduce {reduce = "sum"}` right after the backward
      produced it (with micro-batches: the accumulated gradient, as DDP's
      no_sync does), every rank runs the whole update.
    - zero 1: the fp32 masters and both AdamW moments become shards (1-D,
      ceil(N / ranks) elements, `bigc.full_shape` = the whole shape); each
      gradient is reduce-scattered at the end of the backward, each rank
      updates its shard and writes its shard of the compute copy
      (`N.half.shard`), and `bigc.param_all_gather` gathers the whole
      compute copy `N.half` on every rank.
    - zero 2: as 1, but the reduce-scatter follows the backward of each
      gradient (with micro-batches: each micro-batch's gradient, accumulated
      as f32 shards), so no full gradient outlives its layer.
    - zero 3: as 2, and the compute copies are shards too: every layer
      segment (a layer's forward, its backward, per micro-batch) that reads
      weights starts with one `bigc.all_gather` of them, whose result dies
      with the segment (bigc-schedule prefetches it a segment ahead).

    With fp32 (no bigc-mixed-precision), zero >= 1 makes `N` the fp32 master
    and adds `N.half`, its f32 compute copy. The global gradient norm
    (`--grad-clip`) and the fp16 overflow flag are computed over the shards
    and then reduced over the ranks (`reduce = "norm"`, `"max"`).
    Collectives of one kind are merged into buckets of at most `bucket-mb`
    MiB when nothing reads a result before the bucket's last member (0: one
    collective per tensor).

    Why at compile time: the collectives are ops like any other, so the
    schedule overlaps them with compute on the "comm" stream and the memory
    plan of each rank holds exactly the shards and the gathered layers that
    are live, before anything runs.

    Before (2 ranks, zero 2, one weight of 8x4):

    ```mlir
    %dw = bigc.matmul %x, %dy {transpose_a} : ... -> tensor<8x4xf32>
    bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", exp_avg_sq = @"w.exp_avg_sq", ...}
    ```

    After:

    ```mlir
    bigc.param @w : tensor<16xf32> {bigc.full_shape = array<i64: 8, 4>, role = "master", ...}
    bigc.param @"w.half" : tensor<8x4xf32> {init = "copy", source = "w"}
    bigc.param @"w.half.shard" : tensor<16xf32> {bigc.full_shape = array<i64: 8, 4>, init = "copy", source = "w"}
    %dw = bigc.matmul %x, %dy {transpose_a} : ... -> tensor<8x4xf32>
    %s = bigc.reduce_scatter %dw {group = "dp", reduce = "sum"} : (tensor<8x4xf32>) -> tensor<16xf32>
    bigc.adamw %s {param = @w, half = @"w.half.shard", ...} : tensor<16xf32>
    bigc.param_all_gather {from = @"w.half.shard", to = @"w.half", group = "dp"}
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"ranks", "ranks", "int64_t", /*default=*/"1",
           "Data-parallel ranks (the dp axis of the mesh)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage: 0 data parallel, 1 optimizer states, 2 + gradients, 3 + weights">,
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25",
           "Largest bucket of merged collectives, MiB (0: one per tensor)">,
  ];
}

def BigcRecompute : Pass<"bigc-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: keep chosen activations, clone forward pieces into the backward";
  let description = [{
    The forward keeps alive, until the backward reads them, every value a
    backward op uses (the *saved* values: layernorm inputs and statistics,
    matmul inputs, GELU inputs and outputs, attention's qkv, out and lse).
    For a GPT they are most of the device memory at the peak, and they grow
    with B*T and the depth. This pass trades FLOPs for those bytes: for each
    saved value the policy does not keep, the op that defines it is cloned
    into the backward right before its first backward user (recursively
    with the forward values it needs that are not kept, each cloned once),
    the backward uses are rewired to the clone, and the forward value dies
    at its last forward use. Clones carry `bigc.recompute`, phase
    "backward", and the `bigc.layer` (and `bigc.micro_batch`) of the
    original. The values are recomputed by the same kernels from the same
    inputs, so the results are bit-identical to the run without recompute.

    Policies (option `policy`):
    - `none`: nothing changes; the module still records the forward FLOPs.
    - `full`: each transformer block (ops with `bigc.layer = i`) keeps only
      the values read by forward ops outside the block (the residual stream
      it passes on, i.e. the next block's input); everything else of the
      block is recomputed when its backward starts. Ops outside blocks
      (embeddings, final layernorm, LM head) keep their values. About one
      extra forward per step; activations of one block at a time.
    - `selective` (Megatron-LM's idea, Korthikanti et al. 2022): keep the
      outputs of matmuls, attention and embeddings (expensive to recompute)
      and drop the saved results of cheap ops (layernorm, gelu, bias_add,
      add, scale, mul, reshape, transpose, cast) whose inputs are kept anyway
      or are themselves cheaply recomputed from kept values, so no other
      value has to stay alive longer: in a GPT block the two layernorm
      outputs and the GELU output (6C of about 17C values per token) for a
      few FLOPs per element. Our attention never stores the T x T matrix (it
      keeps the log-sum-exp), which is what Megatron's selective mode
      recomputes.
    - `auto`: the candidates are the values `full` recomputes (dropping a
      value outside that set saves nothing: recomputing a block's output
      chains through every earlier block, and the clones all stay alive
      until their use, as the originals did). They are ranked by bytes saved
      per FLOP added (the cost model of lib/analysis, counting the unsaved
      forward values the clone needs: a GELU or layernorm output costs a
      few FLOPs per element, a bias_add after a matmul the matmul), and the
      first `drop` of them are recomputed (-1: all, which is `full`).
      `bigc compile --recompute auto` searches the smallest `drop` whose
      memory plan fits the budget.

    The module records `bigc.recompute = {policy, candidates, dropped,
    clones, saved_bytes, flops_added, forward_flops, backward_flops}`: the
    bytes of saved values no longer kept, the FLOPs of the clones (per step)
    and of the forward and backward without them; the emitter copies them into the program's `recompute` object
    and marks the clones' instructions `recompute: true`.

    Before (policy selective):

    ```mlir
    %y, %mean, %rstd = bigc.layernorm %x, %w, %b {bigc.phase = "forward"} ...
    %h = bigc.matmul %y, %w1 {bigc.phase = "forward"} ...
    ...
    %dy = bigc.matmul %dh, %w1 {transpose_b, bigc.phase = "backward"} ...
    %dx, %dw, %db = bigc.layernorm_grad %dy, %x, %w, %mean, %rstd {bigc.phase = "backward"} ...
    ```

    After (%y, %mean, %rstd die in the forward):

    ```mlir
    %y2, %mean2, %rstd2 = bigc.layernorm %x, %w, %b {bigc.phase = "backward", bigc.recompute} ...
    %dw1 = bigc.matmul %y2r, %dhr {transpose_a, ...}
    ...
    %dx, %dw, %db = bigc.layernorm_grad %dy, %x, %w, %mean2, %rstd2 ...
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"none\"",
           "What to keep: none | full | selective | auto">,
    Option<"drop", "drop", "int64_t", /*default=*/"-1",
           "auto: how many ranked candidates to recompute (-1: all)">,
  ];
}

def BigcMixedPrecision : Pass<"bigc-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "16-bit params and activations, fp32 masters, fp16 loss scaling";
  let description = [{
    Runs after bigc-autodiff on @train_step. With `precision` = bf16 or fp16:

    - each weight `@N` (role param, f32) becomes role "master" (f32, same
      name and init: the weight of record, what AdamW updates and
      `--save-weights` writes), and a compute copy `@"N.half"` (16-bit, role
      param, `init = "copy", source = "N"`) is declared next to it; every
      `bigc.get_param @N` of the step reads `@"N.half"`;
    - every floating-point tensor of the step becomes 16-bit, in place,
      except the statistics (layernorm mean and rstd, attention lse) and the
      f32 scalars (loss, the loss seed, global norm): the kernels read 16-bit
      and accumulate in fp32 (layernorm, softmax, attention, loss,
      reductions), the program's statistics stay fp32;
    - each `bigc.adamw` keeps `param = @N` (fp32 update of the master and of
      the fp32 moments) and gets `half = @"N.half"`: the compute copy is
      written as cast(master) after the update.

    fp16 only (dynamic loss scaling): declares `@loss_scale` (f32 scalar,
    role optimizer, `init = "fill", value = loss-scale`) and
    `@loss_scale_good` (zeros); the loss seed `bigc.fill {value = 1.0}` becomes
    `bigc.get_param @loss_scale` (the backward computes gradients of
    scale·loss); one `bigc.check_finite` over every parameter gradient;
    every `bigc.adamw` gets `unscale(%scale)` and `skip_if(%found_inf)`;
    one `bigc.loss_scale_update` ends the step (halve on overflow, double
    after growth-interval clean steps).

    Why fp32 masters: a 16-bit weight cannot represent lr·update relative to
    itself (bf16 has 8 significant bits: an update smaller than 2^-9 of the
    weight rounds away), so updates accumulate in fp32 and only the compute
    copy is rounded. Why a loss scale for fp16: its exponent range is small
    (smallest normal 6.1e-5), small gradients flush to zero unless the loss
    is scaled up; overflow (inf/nan) is detected and the step skipped. bf16
    has fp32's exponent range: no loss scaling.

    Before / after (bf16):

    ```mlir
    bigc.param @w : tensor<8x4xf32> {init = "normal", std = 0.02 : f64}
    %w = bigc.get_param @w : tensor<8x4xf32>
    %y = bigc.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    bigc.adamw %dw {param = @w, ...} : tensor<8x4xf32>

    bigc.param @w : tensor<8x4xf32> {init = "normal", role = "master", std = 0.02 : f64}
    bigc.param @w.half : tensor<8x4xbf16> {init = "copy", source = "w"}
    %w = bigc.get_param @w.half : tensor<8x4xbf16>
    %y = bigc.matmul %x, %w : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
    bigc.adamw %dw {half = @w.half, param = @w, ...} : tensor<8x4xbf16>
    ```

    Sets the module attribute `bigc.precision`. Errors: a weight that is not
    f32, a name clash with `N.half` / `loss_scale`, no loss seed.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"",
           "16-bit type of the compute copies and activations: bf16 or fp16">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"65536.0",
           "fp16: the initial loss scale">,
    Option<"growthInterval", "growth-interval", "int64_t", /*default=*/"2000",
           "fp16: clean steps before the loss scale doubles">,
  ];
}

def BigcGradAccum : Pass<"bigc-grad-accum", "::mlir::ModuleOp"> {
  let summary = "K micro-batches per update: unrolled forward+backward, fp32 accumulation";
  let description = [{
    Runs after bigc-mixed-precision. With `micro-batches` = K > 1, @train_step
    takes 2K arguments (tokens_0, targets_0, tokens_1, targets_1, ...) and
    holds K copies of the forward+backward (every op of phase forward or
    backward), copy k reading tokens_k / targets_k and carrying
    `bigc.micro_batch = k : i64`, one after the other, then the optimizer
    once:

    - the loss seed of each micro-batch is scaled by 1/K (`bigc.scale`), so
      the gradients add up to those of the mean loss over the global batch;
    - each gradient the optimizer reads (parameter gradients) is accumulated
      in f32 right after micro-batch k produces it (`bigc.cast` to f32 when
      it is 16-bit, then `bigc.add` onto the accumulator);
    - the returned loss is the mean of the K losses (adds, scale 1/K);
    - `bigc.global_norm`, `bigc.check_finite`, `bigc.adamw`,
      `bigc.loss_scale_update` read the accumulated gradients, once.

    Why: the activations of one micro-batch die in its backward, before the
    next micro-batch's forward starts, so the memory plan reuses their bytes:
    the arena holds one micro-batch's activations plus the f32 accumulators,
    and the global batch K·B trains as one batch of K·B would (same losses
    and updates, to rounding).

    Before / after (K = 2, fp32):

    ```mlir
    func.func @train_step(%tok: tensor<2x3xi32>, %tgt: tensor<2x3xi32>) -> tensor<f32> {
      ... forward, backward -> %dw ...
      bigc.adamw %dw {...}
      return %loss

    func.func @train_step(%tok0, %tgt0, %tok1, %tgt1) -> tensor<f32> {
      ... micro-batch 0 {bigc.micro_batch = 0} -> %dw0 ...
      ... micro-batch 1 {bigc.micro_batch = 1} -> %dw1 ...
      %acc = bigc.add %dw0, %dw1 {bigc.micro_batch = 1 : i64}
      %l = bigc.add %loss0, %loss1
      %mean = bigc.scale %l {factor = 5.0e-01 : f64}
      bigc.adamw %acc {...}
      return %mean
    ```

    Sets the module attribute `bigc.micro_batches`. Errors: K < 1; a step
    that is not (tokens, targets); no loss seed; a forward/backward value
    other than a gradient read by the optimizer.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches per optimizer update (K)">,
  ];
}

def BigcPipeline : Pass<"bigc-pipeline", "::mlir::ModuleOp"> {
  let summary = "pipeline parallelism: the step split into stages; this module becomes one";
  let description = [{
    Runs after bigc-grad-accum (the K micro-batches unrolled). Splits the
    training step into `stages` = P pipeline stages along the layers
    (`bigc.layer`) and keeps stage `stage` of it: its ops, the parameters
    they read (with their optimizer states), and a `bigc.send` / `bigc.recv`
    for every value that crosses to or from another stage (activations going
    forward, their gradients going back, a tied weight read by two stages,
    sent once per step, and its gradient: each stage accumulates its part
    of a tied weight's gradient over the micro-batches and the other
    stage's sum is sent once per step, at its last backward, as Megatron-LM
    reduces the embedding's gradient once per step). The driver builds one module per
    stage from the same input, so every stage computes the same split and the
    same tags.

    - The split: contiguous runs of layers, at least one per stage, balancing
      the cost model's time of each stage's forward and backward (the ops
      before the first layer count for stage 0, those after the last for
      stage P-1) by a dynamic program over the boundaries; `split` (the
      first layer of stages 1..P-1) fixes them by hand (the driver passes
      a split bounded by each stage's memory that way when the balanced
      one does not fit the device).
    - An op of layer l runs on l's stage; an op without a layer on the
      latest stage of its operands (the embedding on stage 0, the final
      norm, head and loss on stage P-1); a parameter read (and a fill) on
      the stage of its first reader; an optimizer op on its parameter's
      stage; the sum of a tied weight's two gradients on the weight's stage.
    - The order of the stage's micro-batches is the schedule's:
      `gpipe` every forward then every backward; `1f1b` (PipeDream-Flush)
      P-1-s forwards, then one forward and one backward in turn, then the
      remaining backwards (at most P-s micro-batches' activations live on
      stage s); `zero-bubble` (ZB-H1) 1F1B's order with each backward split
      into its input-gradient part (the ops a send of the stage needs) and
      its weight-gradient part (marked bigc.weight_grad), which follows its
      backward in the steady state and one backward later in the cool-down;
      `interleaved` (Megatron-LM) P x V model chunks, chunk c on stage
      c mod P, (P-s-1)*2 + (V-1)*P warm-up forwards through the stage's
      chunks in groups of P micro-batches, then one forward and one backward
      in turn (the micro-batches a multiple of P). Backwards run in
      micro-batch order, so gradients accumulate in the order of one rank.
    - With a gradient clip, each stage's norm of its gradients is combined
      over the stages by an all_reduce {group = "pp", reduce = "norm"}; with
      fp16 loss scaling, each stage's overflow flag by an all_reduce
      {group = "pp", reduce = "max"}, and the scale's update runs on the
      stage that holds the scale (the others receive it each step).
    - A stage other than the last returns a zero loss (the step's loss is
      the last stage's).

    Sets `bigc.pipeline = {stages, stage, schedule, virtual_stages, split}`
    (split: the first layer of each stage, or chunk, after the first) and
    the mesh `{dp = ranks / (tp * P), tp, pp = P}`. Errors: P does not
    divide the ranks, more stages (chunks) than layers, a bad split, an
    unknown schedule, virtual stages without the interleaved schedule.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1", "Pipeline stages (P)">,
    Option<"stage", "stage", "int64_t", /*default=*/"0", "The stage this module becomes">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe | 1f1b | interleaved | zero-bubble">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "interleaved: model chunks per stage">,
    ListOption<"split", "split", "int64_t", "First layer of stages 1..P-1 (empty: balanced)">,
    Option<"ranks", "ranks", "int64_t", /*default=*/"1", "All ranks (dp x tp x pp)">,
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks">,
  ];
}

def BigcOffload : Pass<"bigc-offload", "::mlir::ModuleOp"> {
  let summary = "CPU offload (ZeRO-Offload): optimizer on the host, transfers as ops";
  let description = [{
    Moves the optimizer to the host, as ZeRO-Offload does: a GPU holds the
    16-bit (or fp32) compute copy of each weight, its gradients and the
    activations; the host holds the fp32 master weights and the two AdamW
    moments (12 of the 16 bytes per parameter of mixed-precision Adam) and
    runs the update with a fast multithreaded CPU Adam, overlapped with the
    backward of the next layers. Runs after bigc-recompute, before
    bigc-schedule (which puts the transfers on their streams, numbers their
    events and inserts the waits) and bigc-memory-plan (one arena per
    space).

    - Every weight gets a master: when bigc-mixed-precision did not run
      (fp32), `@N` becomes role "master" and `@"N.half"` (f32, role param,
      init copy of `@N`) is the compute copy every `bigc.get_param` reads.
    - Masters, moments and every optimizer-role tensor (the fp16 loss scale)
      get `bigc.space = "host"`; every `bigc.adamw` and
      `bigc.loss_scale_update` gets `bigc.space = "host"`.
    - `bigc.check_finite` and `bigc.global_norm` (fp16's overflow flag, the
      clipping norm) stay on the device but read, instead of each gradient,
      its norm: a `bigc.global_norm {bigc.partial_norm}` of that gradient
      alone, made right after it (bigc-schedule moves one whose gradient a
      collective makes a layer later). The device keeps a scalar per
      gradient, not the gradients (all of them would stay alive to the end
      of the backward), and no host op reads every gradient. The norm of
      the norms is the norm (as PyTorch's clip_grad_norm_ combines it); a
      gradient's norm is inf or nan exactly when it holds an inf or a nan
      (the squares of 16-bit values sum in f32 far below its range), so the
      flag is the same.
    - Each device value a host op reads (its gradient, found_inf, the
      global norm) gets one `bigc.copy {bigc.space = "host"}` right after its
      definition: the gradient leaves the device as soon as it is complete.
    - params=device: the host AdamW writes `half = @"N.stage"` (role
      transfer, host, planned as a transient buffer), followed by
      `bigc.param_copy {from = @"N.stage", to = @"N.half"}` (host to device;
      bigc-schedule moves it after the last reader of `@"N.half"`).
    - params=host (ZeRO-3-Offload, chosen by `bigc compile` when the device
      cannot hold the weights): `@"N.half"` lives on the host, the AdamW
      writes it directly, and every device op reading a host parameter reads
      a `bigc.copy {bigc.space = "device"}` made just before it (each with a
      `bigc.get_param` of its own; bigc-schedule prefetches it a layer
      ahead). An AdamW that may be skipped (fp16 loss scaling: it reads
      found_inf) always works this way: a skipped update writes nothing,
      not even `half`, so a transient staging tensor would hold garbage.

    Why here: every transfer is an op, so the schedule orders it, the
    memory plan sizes both arenas with it (a buffer stays live until the
    transfer reading it is joined) and the tests see where it lands.

    Before (fp32):

    ```mlir
    bigc.param @w : tensor<64x64xf32> {init = "normal", std = 0.02 : f64}
    %w = bigc.get_param @w ...
    %dw = bigc.matmul ...
    bigc.adamw %dw {param = @w, exp_avg = @"w.exp_avg", ...}
    ```

    After (params=device):

    ```mlir
    bigc.param @w : tensor<64x64xf32> {bigc.space = "host", init = "normal", role = "master", ...}
    bigc.param @"w.half" : tensor<64x64xf32> {init = "copy", source = "w"}
    bigc.param @"w.stage" : tensor<64x64xf32> {bigc.space = "host", init = "zeros", role = "transfer"}
    %w = bigc.get_param @"w.half" ...
    %dw = bigc.matmul ...
    %dwh = bigc.copy %dw {bigc.space = "host"} : tensor<64x64xf32>
    bigc.adamw %dwh {bigc.space = "host", param = @w, half = @"w.stage", ...}
    bigc.param_copy {from = @"w.stage", to = @"w.half"}
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"offload", "offload", "std::string", /*default=*/"\"cpu\"",
           "Where the optimizer goes: cpu">,
    Option<"params", "params", "std::string", /*default=*/"\"device\"",
           "Where the compute copies of the weights live between uses: "
           "device or host">,
  ];
}

def BigcOffloadNvme : Pass<"bigc-offload-nvme", "::mlir::ModuleOp"> {
  let summary = "NVMe offload (ZeRO-Infinity): optimizer state in a file-backed space, streamed through the host";
  let description = [{
    Runs after bigc-offload (the optimizer on the host): the tensors only the
    host AdamW touches, its two moments and its fp32 master (ZeRO-Infinity's
    optimizer state, 12 or 8 bytes per parameter), move to the space "nvme"
    (one file-backed arena per rank, planned like the others). Each update
    reads them through host staging tensors:

    - for each such tensor `@X` of a `bigc.adamw`: `@X` gets
      `bigc.space = "nvme"`; `@"X.io"` (role transfer, host) is the copy
      the update reads and writes; `bigc.param_copy {from = @X, to =
      @"X.io"}` before the update brings it in and `bigc.param_copy {from =
      @"X.io", to = @X}` after it writes it back (stream "nvme", placed by
      bigc-schedule: each read a host update ahead, each write right after
      its update).
    - a tensor some other op also touches (by symbol or bigc.get_param)
      stays on the host.

    With params=true (`--offload-params nvme`, after bigc-offload with
    params=host), each compute copy on the host (role param: the 16-bit
    weights, or their ZeRO-3 shard) moves to "nvme" too, as ZeRO-Infinity's
    parameter offload: the update writes `@"W.io"`, written back after it;
    each `bigc.get_param` of `@W` (one per device use, bigc-offload made
    them) reads a staging tensor `@"W.fetch.K"` of its own, filled by a
    `bigc.param_copy {from = @W, to = @"W.fetch.K"}` that bigc-schedule
    issues a layer ahead of the host-to-device copy that reads it.

    With grads=true (`--offload-grads nvme`), each update's gradient (the
    host copy bigc-offload made of it) is written to the nvme space as it
    arrives (`bigc.copy` into "nvme") and read back into the host for its
    update (`bigc.copy` into "host", tagged `bigc.nvme_update` like the
    update's reads, so placed an update ahead): with fp16's overflow check
    or clipping every update waits for the end of the backward, and the
    gradients wait on the drive instead of the host (ZeRO-Infinity). With
    grads-limit=N, only the first updates' gradients go, at most N bytes;
    the others wait on the host (what the host cannot hold, and no more).

    The host then holds the staging of the updates in flight, not the whole
    optimizer state; bigc-memory-plan plans the "nvme" arena with 4096-byte
    alignment (O_DIRECT) and the host arena likewise.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"masters", "masters", "bool", /*default=*/"true",
           "Move the fp32 masters too (else the moments only)">,
    Option<"params", "params", "bool", /*default=*/"false",
           "Move the compute weights bigc-offload left on the host (params=host) too">,
    Option<"grads", "grads", "bool", /*default=*/"false",
           "Write each update's gradient to the nvme space as it arrives and read it back for the update">,
    Option<"gradsLimit", "grads-limit", "int64_t", /*default=*/"0",
           "With grads: at most this many bytes of gradients go to the nvme space, the first updates' "
           "(0: every gradient)">,
    Option<"chunk", "chunk", "int64_t", /*default=*/"16777216",
           "Split each update larger than this many elements into chunks (0: none; a multiple of 2048; "
           "the default is bigc compile's --nvme-chunk, 2^24)">,
  ];
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def BigcOffloadActivations : Pass<"bigc-offload-activations", "::mlir::ModuleOp"> {
  let summary = "Activation offload: the activations kept for the backward wait on the host";
  let description = [{
    Runs after bigc-recompute (which chose what the backward keeps) and the
    other offload passes, before bigc-schedule. Every device value the
    forward of a layer but the last defines and the backward reads (of at
    least `min-bytes`; the last layer's and those outside the layers, the
    embedding, head and loss, are read as soon as the backward starts) gets a
    `bigc.copy {bigc.space = "host"}` right after its definition (the d2h
    stream moves it while the forward goes on; the device buffer is freed
    once the copy is joined and the forward's last reader ran) and a
    `bigc.copy {bigc.space = "device"}` before its first backward reader,
    which every backward reader then reads; bigc-schedule moves that copy to
    the start of the layer before (the h2d transfer overlaps the previous
    layer's backward), as it prefetches offloaded weights. The memory plan
    then holds the kept activations in the host arena and one or two layers'
    worth on the device.

      %h = bigc.matmul %x, %w ...                      // forward
      %hh = bigc.copy %h {bigc.space = "host"}         // d2h, as soon as %h exists
      ...
      %hd = bigc.copy %hh {bigc.space = "device"}      // h2d, a layer ahead of its reader
      %dx = bigc.matmul %dy, %hd ...                   // backward

    With --recompute full only the blocks' inputs cross to the backward, so
    the device keeps nearly nothing of the forward (the combination that
    long sequences want). Records `bigc.offload_activations = {tensors,
    bytes}`.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"minBytes", "min-bytes", "int64_t", /*default=*/"0",
           "Offload only activations of at least this many bytes">,
  ];
}

def BigcFuse : Pass<"bigc-fuse", "::mlir::ModuleOp"> {
  let summary = "Pairs of memory-bound ops fused: residual add + norm, norm gradient + residual gradient, bias + GELU, GELU gradient + bias gradient";
  let description = [{
    Runs on @train_step after every technique (mixed precision, micro-batches,
    pipeline stages, recomputation, ZeRO, offload) and before bigc-schedule
    and bigc-memory-plan. Each pattern is a producer and the one op that
    consumes it in the transformer block, two memory-bound ops whose
    intermediate tensor is written and read back:

      %s = bigc.add %a, %r;  %y, %m, %rs = bigc.layernorm %s, %w, %b
        -> %s, %y, %m, %rs = bigc.add_layernorm %a, %r, %w, %b
      (bigc.rmsnorm likewise -> bigc.add_rmsnorm)
      %dx, %dw, %db = bigc.layernorm_grad ...;  %g = bigc.add %r, %dx
        -> %g, %dw, %db = bigc.layernorm_grad_add ..., %r
      (bigc.rmsnorm_grad likewise -> bigc.rmsnorm_grad_add)
      %p = bigc.bias_add %x, %b;  %y = bigc.gelu %p
        -> %p, %y = bigc.bias_gelu %x, %b
      %dx = bigc.gelu_grad %x, %dy;  %db = bigc.reduce_sum %dx
        -> %dx, %db = bigc.gelu_grad_bias %x, %dy

    A pair is fused only when both ops carry the same discardable attributes
    (phase, micro-batch, recompute, weight-gradient part of a zero-bubble
    pipeline; the layer may differ), when the layernorm_grad's dx has no
    other reader, and when the fused op can take the place of one of the two
    without moving a use before its definition. The fused op computes what
    the pair computes, with the intermediate rounded to the tensors' type as
    the pair stores it: the program's numbers do not change. On the CUDA
    backend a matmul followed by bias_gelu becomes one cuBLASLt GEMM with the
    GELU_AUX_BIAS epilogue.
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect"];
}

//===----------------------------------------------------------------------===//
// Scheduling and memory planning
//===----------------------------------------------------------------------===//

def BigcSchedule : Pass<"bigc-schedule", "::mlir::ModuleOp"> {
  let summary = "One order for @train_step: optimizer updates as early as possible";
  let description = [{
    Fixes the order in which the runtime executes @train_step, the order the
    memory plan's liveness is computed in. In this version:

    - the forward runs as written and the backward as bigc-autodiff wrote it
      (reverse order of the forward);
    - each `bigc.adamw` moves to just after the last of: the definition of
      its gradient, the definition of the global norm it uses (if any), and
      the last reader of any `bigc.get_param` of the parameter it updates;
    - each `bigc.get_param` and `bigc.fill` sinks to just before its first
      user;
    - the update also waits for the readers of the compute copy it writes
      (`half`, bigc-mixed-precision / bigc-offload), and each
      `bigc.param_copy` moves to just after the update that writes its
      source and the last reader of its destination.

    Streams and events (after bigc-offload; nothing changes without
    transfers). Segments are runs of compute ops with the same phase and
    `bigc.layer` (the forward of block i, the backward of block i, ...).
    - Prefetch: each device copy of a host parameter (`bigc.copy` with
      `bigc.space = "device"` of a `bigc.get_param`) moves, with its
      get_param, to the start of the segment before its user's: the weights
      of layer i arrive while layer i-1 computes.
    - Streams (`bigc.stream`): a copy to the host runs on "d2h", to the
      device on "h2d" (param_copy likewise, from the spaces of its
      parameters), an op with `bigc.space = "host"` on "host"; compute ops
      carry none. Every side-stream op gets a unique `bigc.event` (0, 1, ...
      in order).
    - Waits: `bigc.wait {events}` on the compute stream just before the
      first compute op that reads a side-stream result (or a parameter a
      side-stream op wrote earlier in the step). Every other side-stream op
      is joined where the memory it touches may be reused: a d2h copy (it
      reads device memory) at the start of the second segment after it (it
      overlaps the rest of its block's backward and the whole next block),
      host work and h2d copies one segment later still; with no such
      segment, at the end of the step. bigc-memory-plan keeps what a
      side-stream op touches live until its wait.

    Why: bigc-autodiff puts every update at the end, so every parameter
    gradient stays live until the end of the backward: the arena must hold
    all gradients at once (as many bytes as the parameters). Updating a
    parameter as soon as its gradient is complete lets the gradient die at
    once, and the memory plan reuses its bytes for the next layer's
    gradients: only about one layer's gradients are live at a time. The
    update must still come after every read of the parameter (the forward
    reads and the backward's `dx = dy @ W^T` reads), or the backward would
    see updated weights; after the norm, which needs every gradient (with
    gradient clipping all updates therefore stay at the end). Sinking
    `bigc.fill` shortens the life of its buffer (the loss seed is made
    just before `bigc.cross_entropy_grad`); `bigc.get_param` reads persistent
    memory and costs nothing, sinking it keeps the IR readable.

    Before (autodiff order):

    ```mlir
    %w = bigc.get_param @w ...            // forward
    %y = bigc.matmul %x, %w ...
    ...
    %dw = bigc.matmul %x2, %d2 {transpose_a} ...   // backward
    %dx = bigc.matmul %dy, %w {transpose_b} ...
    ... rest of the backward ...
    bigc.adamw %dw {param = @w, ...}
    ```

    After:

    ```mlir
    %dw = bigc.matmul %x2, %d2 {transpose_a} ...
    %dx = bigc.matmul %dy, %w {transpose_b} ...    // last reader of @w
    bigc.adamw %dw {param = @w, ...}               // %dw dies here
    ... rest of the backward ...
    ```

    Collectives (bigc-shard) run on the "comm" stream with an event each:
    a gradient's reduce-scatter or all-reduce is issued when the backward
    has produced it (later layers first) and overlaps the backward of the
    layers before; a ZeRO-3 all-gather of weights moves `prefetch` layer
    segments ahead of its first use; a `bigc.param_all_gather` follows the
    update (or the host-to-device copy) that wrote its shard and the last
    reader of the copy it overwrites. The memory a collective touches stays
    live until the compute stream's wait for it (the next layer boundary).
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "ZeRO-3: layer segments ahead of its first use at which each "
           "all-gather of weights starts (0: just before the use)">,
  ];
}

def BigcMemoryPlan : Pass<"bigc-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Liveness and arena offsets of every tensor of @train_step";
  let description = [{
    Decides where every tensor of @train_step lives: one offset in the
    "device" arena per buffer, so that the runtime allocates one arena of
    the planned size before the first step and never allocates again.

    - Instructions are the ops of @train_step in their (scheduled) order,
      except `bigc.get_param` (it reads a parameter in place).
    - Liveness per SSA value: from its defining instruction to its last use;
      the function arguments (tokens, targets) live from instruction 0, the
      returned loss to the last instruction, every `bigc.param` (role param
      and optimizer) over the whole step.
    - Aliasing: a `bigc.reshape` result is its operand (same offset, the
      union of both intervals). The result of an elementwise op (`add`,
      `bias_add`, `mul`, `scale`, `gelu`, `gelu_grad`) reuses the buffer of
      an operand of the same type whose last use is that op (not a
      parameter, a function argument or the returned value): the in-place
      rule of docs/program-format.md.
    - Offsets: `plan::planArena` (largest first, best fit among buffers live
      at the same time), 64-byte alignment, checked with `plan::checkPlan`.
    - Spaces (bigc-offload): one arena per space. A `bigc.param` is in its
      `bigc.space` (default "device"), a result in its op's `bigc.space`
      (a `bigc.copy`'s destination, "host" for host ops), arguments on the
      device. Everything an op with `bigc.event = e` touches (operands,
      results, parameters it names) is live until the `bigc.wait` naming e
      (or the end of the step): the side stream may still be reading or
      writing it. A parameter of role "transfer" (host staging tensor) is
      not persistent: it lives from its first to its last touch (only a few
      layers' staging tensors are live at once). With a host space the
      function also gets `bigc.host_arena_bytes` and
      `bigc.host_lower_bound_bytes` (`bigc.arena_bytes` and
      `bigc.lower_bound_bytes` are the device's).

    Why a separate, visible pass: the plan is the truth the runtime obeys,
    so it is written into the IR where tests (and bigc-test-print-memory-plan)
    can check it, and the emitter only copies it.

    Result, as attributes:

    ```mlir
    bigc.param @w : tensor<8x4xf32> {bigc.offset = 0 : i64, init = "normal"}
    func.func @train_step(...) attributes {bigc.arena_bytes = 1024 : i64,
        bigc.arg_offsets = array<i64: 128, 192>, bigc.lower_bound_bytes = 960 : i64} {
      %y = bigc.matmul %x, %w {bigc.offsets = array<i64: 256>, ...}
    ```
  }];
  let dependentDialects = ["::mlir::bigc::BigcDialect", "::mlir::func::FuncDialect"];
}

def BigcTestPrintMemoryPlan
    : Pass<"bigc-test-print-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Print the memory plan of @train_step (tests)";
  let description = [{
    Computes the memory plan of @train_step as bigc-memory-plan does and
    prints it to stderr, one line per buffer, for FileCheck:

    ```
    memory-plan @train_step: instructions=N buffers=K arena=A lower_bound=L
    @w param : offset=0 size=128 live=[0,5]
    %arg0 arg : offset=128 size=24 live=[0,1]
    %0 bigc.matmul : offset=256 size=96 live=[0,2]
    ```

    `size` is the buffer's own bytes, `live` its own interval of instruction
    indices; values that share a place (reshape, in place) show the same
    offset. The IR is not changed.
  }];
}

def BigcTestPrintStepEstimate
    : Pass<"bigc-test-print-step-estimate", "::mlir::ModuleOp"> {
  let summary = "Print the step estimate of the scheduled @train_step (tests)";
  let description = [{
    Plays the scheduled @train_step with the cost model on the given rates,
    as `bigc compile --hardware` does (lib/analysis/StepSimulation.cpp), and
    prints the step's time, the compute stream's busy time and, per
    collective kind, its time and the part hidden behind compute:

    ```
    step-estimate: step=1.573 ms compute=1.573 ms
    all_reduce: count=1 time=1.000 ms hidden=1.000 ms
    ```

    The IR is not changed.
  }];
  let options = [
    Option<"deviceFlops", "device-flops", "double", /*default=*/"1e12", "Device FLOP/s">,
    Option<"deviceBytesPerS", "device-bytes-per-s", "double", /*default=*/"0",
           "Device memory bandwidth (0: FLOPs only)">,
    Option<"linkBytesPerS", "link-bytes-per-s", "double", /*default=*/"1e10",
           "Interconnect bandwidth per device (collectives)">,
    Option<"pcieBytesPerS", "pcie-bytes-per-s", "double", /*default=*/"1e10",
           "Host <-> device bandwidth">,
    Option<"hostFlops", "host-flops", "double", /*default=*/"1e11", "Host FLOP/s">,
  ];
}

#endif // BIGC_PASSES_TD
