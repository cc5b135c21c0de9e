//===- BigcTensorParallelOps.td - tensor-parallel ops -----*- tablegen -*-===//
//
// The ops bigc-tensor-parallel writes into the forward graph before
// bigc-autodiff, so that the backward gets the right collectives by
// differentiation (Megatron-LM's f and g, and their sequence-parallel
// forms), and the vocabulary-parallel cross-entropy.
//
// `group` names the mesh axis ("tp"); T = its size (bigc.mesh). A tensor
// split along `dim` holds, on tensor rank t, the t-th of T equal chunks of
// that dimension. bigc-shard lowers tp_copy, tp_all_reduce, tp_all_gather and
// tp_reduce_scatter to the collectives of BigcCollectiveOps.td (plus local
// reshapes and transposes); tp_slice and the vocab_ce ops are instructions of
// their own (docs/program-format.md). Included from BigcOps.td; the C++
// (verifiers, gradients) is in BigcTensorParallelOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_TENSOR_PARALLEL_OPS_TD
#define BIGC_TENSOR_PARALLEL_OPS_TD

class Bigc_TpOp<string mnemonic, list<Trait> traits = []>
    : Bigc_Op<mnemonic, !listconcat([DeclareOpInterfaceMethods<DifferentiableOpInterface>,
                                     MemoryEffects<[MemRead, MemWrite]>], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_TpCopyOp : Bigc_TpOp<"tp_copy", [SameOperandsAndResultType]> {
  let summary = "Megatron's f: identity forward, all-reduce (sum) of the gradient over `group`";
  let description = [{
    Marks a replicated value read by work split over the tensor ranks (a
    column-parallel matmul, a split layernorm's weights): each rank's
    gradient is a partial sum, which the backward all-reduces.
  }];
  let arguments = (ins Bigc_FloatTensor:$x, StrAttr:$group);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_TpAllReduceOp : Bigc_TpOp<"tp_all_reduce", [SameOperandsAndResultType]> {
  let summary = "Megatron's g: all-reduce (sum) over `group` forward, identity gradient";
  let description = [{
    Turns the partial sums of a row-parallel matmul (or of a
    vocabulary-parallel embedding) into the replicated value.
  }];
  let arguments = (ins Bigc_FloatTensor:$x, StrAttr:$group);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_TpAllGatherOp : Bigc_TpOp<"tp_all_gather"> {
  let summary = "the whole tensor from the chunks along `dim` of every rank of `group`";
  let description = [{
    x: this rank's chunk (y's shape with dim `dim` divided by T). The
    gradient is this rank's chunk of dy when whatever reads y is replicated
    (`grad = "slice"`), or the reduce-scatter of dy when it is split over
    the tensor ranks (`grad = "reduce_scatter"`: sequence parallelism, where
    the gathered activation enters a column-parallel matmul).
  }];
  let arguments = (ins Bigc_FloatTensor:$x, StrAttr:$group, I64Attr:$dim, StrAttr:$grad);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_TpReduceScatterOp : Bigc_TpOp<"tp_reduce_scatter"> {
  let summary = "this rank's chunk along `dim` of the sum over `group` (gradient: all-gather)";
  let description = [{
    Sequence parallelism's g: the partial sums of a row-parallel matmul
    become this rank's part of the sequence.
  }];
  let arguments = (ins Bigc_FloatTensor:$x, StrAttr:$group, I64Attr:$dim);
  let results = (outs Bigc_FloatTensor:$y);
}

def Bigc_TpSliceOp : Bigc_Op<"tp_slice", [Pure,
    DeclareOpInterfaceMethods<DifferentiableOpInterface>]> {
  let summary = "this rank's chunk along `dim` of a replicated tensor (gradient: all-gather)";
  let description = [{
    No communication: tensor rank t copies chunk t of dimension `dim`.
    ```mlir
    %p = bigc.tp_slice %wpe {group = "tp", dim = 0 : i64} : (tensor<64x64xf32>) -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Bigc_FloatTensor:$x, StrAttr:$group, I64Attr:$dim);
  let results = (outs Bigc_FloatTensor:$y);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_VocabCeStatsOp : Bigc_Op<"vocab_ce_stats", [Pure,
    DeclareOpInterfaceMethods<DifferentiableOpInterface>]> {
  let summary = "per position: log-sum-exp of this rank's logits and its target logit";
  let description = [{
    logits `[...,V/T]` (this rank's columns of the vocabulary: ids
    [t*V/T, (t+1)*V/T) on tensor rank t of `group`), targets `[...]` i32 →
    stats `[...,2]` f32: stats[i,0] = log Σ_j exp(logits[i,j]) and stats[i,1]
    = logits[i, target - t*V/T] when the target is this rank's, else 0.
  }];
  let arguments = (ins Bigc_FloatTensor:$logits, Bigc_IdTensor:$targets, StrAttr:$group);
  let results = (outs Bigc_FloatTensor:$stats);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_VocabCeStatsGradOp : Bigc_ComputeOp<"vocab_ce_stats_grad"> {
  let summary = "dlogits = dstats[...,0] * softmax_local(logits) + dstats[...,1] * onehot_local";
  let arguments = (ins Bigc_FloatTensor:$dstats, Bigc_FloatTensor:$logits,
                       Bigc_IdTensor:$targets, Bigc_FloatTensor:$stats, StrAttr:$group);
  let results = (outs Bigc_FloatTensor:$dlogits);
}

def Bigc_VocabCeLossOp : Bigc_Op<"vocab_ce_loss", [Pure,
    DeclareOpInterfaceMethods<DifferentiableOpInterface>]> {
  let summary = "mean cross-entropy from the gathered stats of `parts` vocabulary chunks";
  let description = [{
    stats `[P*B,...,2]` (the vocab_ce_stats of the P = `parts` ranks, rank
    r's at [r*B, (r+1)*B)) → loss = mean over positions of
    log Σ_r exp(stats[r,i,0]) - Σ_r stats[r,i,1].
  }];
  let arguments = (ins Bigc_FloatTensor:$stats, I64Attr:$parts);
  let results = (outs Bigc_ScalarF32:$loss);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_VocabCeLossGradOp : Bigc_ComputeOp<"vocab_ce_loss_grad"> {
  let summary = "dstats[r,i] = (exp(stats[r,i,0] - lse_i), -1) * dloss / N";
  let arguments = (ins Bigc_FloatTensor:$stats, Bigc_ScalarF32:$dloss, I64Attr:$parts);
  let results = (outs Bigc_FloatTensor:$dstats);
}

#endif // BIGC_TENSOR_PARALLEL_OPS_TD
