//===- BigcCollectiveOps.td - collectives over the device mesh -*- tablegen -*-===//
//
// The collectives of bigc-shard: all-reduce, reduce-scatter and all-gather
// of values over one axis ("group") of the device mesh, and the all-gather
// of a sharded persistent tensor into its full copy. The mesh is the module
// attribute `bigc.mesh = {dp = D, tp = T, pp = P}` (every axis size; ranks =
// their product). A collective runs on the "comm" stream (bigc-schedule);
// every rank of the group executes the same collectives in the same order.
//
// Shards: a tensor of N elements is split along its flattened elements into
// `size(group)` shards of S = ceil(N / size) elements; rank r holds elements
// [r*S, r*S+S) (the last shard is padded with zeros). Included from
// BigcOps.td; the C++ (verifiers, mesh queries) is in BigcCollectiveOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_COLLECTIVE_OPS_TD
#define BIGC_COLLECTIVE_OPS_TD

def Bigc_AllReduceOp : Bigc_Op<"all_reduce", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "every rank of `group` gets the reduction of the inputs of all its ranks";
  let description = [{
    One or more tensors (a bucket), each reduced element-wise over the ranks
    of the mesh axis `group`: `reduce` is "sum", "mean" (the data-parallel
    average of gradients), "max" (the fp16 overflow flag) or "norm" (the
    inputs are L2 norms of parts: the result is sqrt(sum of squares), the
    global gradient norm). Results have the operands' types. Sums accumulate
    in f32.

    Not `Pure`: every rank must run every collective, in the same order.

    ```mlir
    %g0r, %g1r = bigc.all_reduce %g0, %g1 {group = "dp", reduce = "mean"}
        : (tensor<64x64xf32>, tensor<64xf32>) -> (tensor<64x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, StrAttr:$group,
                       StrAttr:$reduce);
  let results = (outs Variadic<Bigc_FloatTensor>:$outputs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_ReduceScatterOp : Bigc_Op<"reduce_scatter", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "rank r of `group` gets shard r of the reduction of the inputs";
  let description = [{
    For each input (a bucket of gradients): the element-wise reduction
    ("sum" or "mean") over the ranks of `group`, of which this rank keeps
    its shard: a 1-D tensor of ceil(N / size) elements (see the file
    comment), same element type. Sums accumulate in f32. ZeRO-1/2: the
    gradient shard the rank's optimizer updates.

    ```mlir
    %s = bigc.reduce_scatter %g {group = "dp", reduce = "mean"}
        : (tensor<64x64xbf16>) -> tensor<512xbf16>      // 8 ranks
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, StrAttr:$group,
                       StrAttr:$reduce);
  let results = (outs Variadic<Bigc_FloatTensor>:$outputs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_AllGatherOp : Bigc_Op<"all_gather", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "the full tensor from the shards of every rank of `group`";
  let description = [{
    For each input shard (1-D, S elements): the tensor of the result's shape
    made of the shards of ranks 0, 1, ... in order, the padding dropped
    (size * S >= N > (size - 1) * S). ZeRO-3: a layer's weights, gathered
    just before their use (and prefetched a layer ahead by bigc-schedule),
    freed after it.

    ```mlir
    %w = bigc.all_gather %ws {group = "dp"} : (tensor<512xbf16>) -> tensor<64x64xbf16>
    ```

    `tile = [t, k]` (bigc-tile, with a weight's shards tile-interleaved: the
    whole tensor is k equal tiles, each rank's shard is its piece of tile 0,
    then of tile 1, ...; `bigc.tiles` on the bigc.param): each input holds k
    pieces of P elements, and the result is tile t, gathered from piece t of
    every rank (size * P >= the tile's elements > (size - 1) * P).

    ```mlir
    %w1 = bigc.all_gather %ws {group = "dp", tile = array<i64: 1, 4>}
        : (tensor<512xbf16>) -> tensor<16x64xbf16>      // 8 ranks
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, StrAttr:$group,
                       OptionalAttr<DenseI64ArrayAttr>:$tile);
  let results = (outs Variadic<Bigc_FloatTensor>:$outputs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_ParamAllGatherOp : Bigc_Op<"param_all_gather", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "persistent all-gather: @to = the shards @from of every rank";
  let description = [{
    ZeRO-1/2: after each rank updated its shard of a weight (bigc.adamw
    writes the new compute copy of its shard into `from`), every rank
    gathers the full compute copy `to` (same element type; `to` has
    size(group) * S >= N > (size - 1) * S elements for the S of `from`).

    ```mlir
    bigc.param_all_gather {from = @"w.half.shard", to = @"w.half", group = "dp"}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$from, FlatSymbolRefAttr:$to,
                       StrAttr:$group);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Bigc_SendOp : Bigc_Op<"send", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "pipeline parallelism: sends a tensor to stage `peer`";
  let description = [{
    A value computed on this pipeline stage and used on stage `peer` (an
    activation going forward, its gradient going back, a tied weight or its
    gradient): its bytes go to the rank of stage `peer` with the same data-
    and tensor-parallel indices, where the `bigc.recv` of the same `tag`
    takes them. Runs on the "p2p" stream (bigc-schedule); it does not wait for
    the receiver. Written by bigc-pipeline; tags are unique per pair of
    stages in a step.

    ```mlir
    bigc.send %h {peer = 1 : i64, tag = 0 : i64} : tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$peer, I64Attr:$tag);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Bigc_RecvOp : Bigc_Op<"recv", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "pipeline parallelism: the tensor stage `peer` sent with `tag`";
  let description = [{
    The other end of `bigc.send`: waits (on the "p2p" stream) until the
    send of stage `peer` with the same `tag` arrived and returns its bytes
    as a tensor of the result's type.

    ```mlir
    %h = bigc.recv {peer = 0 : i64, tag = 0 : i64} : tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer, I64Attr:$tag);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Bigc_RingShiftOp : Bigc_Op<"ring_shift", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "context parallelism: each rank's tensors to the next rank of the cp ring";
  let description = [{
    Rank c of the cp axis gets the inputs of rank (c - 1) mod C (and sends
    its own to rank (c + 1) mod C): one step of ring attention's key/value
    blocks (and, in the backward, their gradients). Every rank of the axis
    runs every shift, in the same order, so the sends and receives pair by
    construction (NCCL: one group of a send and a receive per rank).

    ```mlir
    %k1, %v1 = bigc.ring_shift %k, %v {group = "cp"}
        : (tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> (tensor<2x16x32xf32>, tensor<2x16x32xf32>)
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, StrAttr:$group);
  let results = (outs Variadic<Bigc_FloatTensor>:$outputs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Bigc_CpAllToAllOp : Bigc_Op<"cp_all_to_all", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "context parallelism (DeepSpeed-Ulysses): a sequence split turned into a head split, or back";
  let description = [{
    `to_heads`: each input `[B,T,N]` (this rank's T tokens of every head,
    N = heads x D) becomes `[B,C*T,N/C]`: the whole sequence, in rank order
    (token i is token i mod T of rank i / T of the cp axis), of this rank's
    C-th of the heads (rank c: heads [c H/C, (c+1) H/C)). Without: the
    inverse, `[B,C*T,N/C]` to `[B,T,N]`.

    ```mlir
    %qh = bigc.cp_all_to_all %q {group = "cp", to_heads} : (tensor<2x16x64xf32>) -> tensor<2x32x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Bigc_FloatTensor>:$inputs, StrAttr:$group, UnitAttr:$to_heads);
  let results = (outs Variadic<Bigc_FloatTensor>:$outputs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // BIGC_COLLECTIVE_OPS_TD
