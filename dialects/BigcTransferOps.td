//===- BigcTransferOps.td - memory spaces, transfers, events -*- tablegen -*-===//
//
// The ops of CPU offload (bigc-offload) and of the streams / events of
// bigc-schedule: a copy of a value into a memory space, a copy between two
// persistent tensors, and the compute stream's wait for side-stream ops.
// Included from BigcOps.td (same dialect, same generated files); their C++
// (verifiers) is in BigcTransferOps.cpp.
//
// Discardable attributes (include/bigc/Dialect/BigcTransfer.h):
//   bigc.space  = "device" | "host"   on bigc.param (default "device"), on
//                 bigc.copy (required: the space of its result) and on ops
//                 that execute on the host (bigc.adamw after bigc-offload);
//   bigc.stream = "compute" (default) | "h2d" | "d2h" | "host";
//   bigc.event  = e : i64             on every side-stream op (bigc-schedule).
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_TRANSFER_OPS_TD
#define BIGC_TRANSFER_OPS_TD

def Bigc_CopyOp : Bigc_Op<"copy", [AllTypesMatch<["x", "y"]>]> {
  let summary = "y = x, in the memory space `bigc.space` (a transfer when it differs)";
  let description = [{
    A copy of a value into the memory space named by the (required)
    `bigc.space` attribute: "host" or "device". When the operand lives in the
    other space this is a transfer (device to host: stream "d2h"; host to
    device: stream "h2d", set by bigc-schedule). Same type in and out.
    A host value may also be copied into "nvme" (written to the drive,
    stream "nvme"), and such a value only back into "host": a gradient
    waiting for its update on the drive (bigc-offload-nvme, grads=true).

    ```mlir
    %gh = bigc.copy %g {bigc.space = "host"} : tensor<64x64xf32>
    %wd = bigc.copy %w {bigc.space = "device", bigc.stream = "h2d", bigc.event = 3 : i64} : tensor<64x64xf32>
    ```

    It is not `Pure` on purpose: two copies of one value made at two
    places of the step (a weight fetched for the forward and again for the
    backward) must stay two, each live only around its use.
  }];
  let arguments = (ins Bigc_AnyTensor:$x);
  let results = (outs Bigc_AnyTensor:$y);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Bigc_ParamCopyOp : Bigc_Op<"param_copy", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "persistent -> persistent copy: @to = @from";
  let description = [{
    Copies the `bigc.param` `from` into the `bigc.param` `to` (same type).
    bigc-offload uses it to bring the weights the host AdamW wrote into a
    host staging tensor back to the device compute copy:

    ```mlir
    bigc.param_copy {from = @"w.stage", to = @"w.half", bigc.stream = "h2d"}
    ```

    With `count` (and optional `from_offset`, `to_offset`, all in elements):
    elements [to_offset, to_offset + count) of `to` become elements
    [from_offset, from_offset + count) of `from` (row-major; the element
    types equal, the shapes may differ): bigc-offload-nvme's chunks.
  }];
  let arguments = (ins FlatSymbolRefAttr:$from, FlatSymbolRefAttr:$to,
                       OptionalAttr<I64Attr>:$from_offset,
                       OptionalAttr<I64Attr>:$to_offset,
                       OptionalAttr<I64Attr>:$count);
  let builders = [
    // The whole tensor.
    OpBuilder<(ins "::mlir::FlatSymbolRefAttr":$from, "::mlir::FlatSymbolRefAttr":$to), [{
      build($_builder, $_state, from, to, ::mlir::IntegerAttr(), ::mlir::IntegerAttr(), ::mlir::IntegerAttr());
    }]>
  ];
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Bigc_WaitOp : Bigc_Op<"wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "the compute stream waits for the side-stream ops of `events`";
  let description = [{
    Every op of the step after this one on the compute stream starts after
    the side-stream ops carrying `bigc.event = e` for each e in `events` have
    finished. bigc-schedule inserts one before the first compute op that
    reads a side-stream result, and one where the memory a side-stream op
    touches may be reused (the memory plan keeps that memory live until
    here). A side-stream op named by no wait is joined at the end of the
    step.

    ```mlir
    bigc.wait {events = array<i64: 0, 2>}
    ```
  }];
  let arguments = (ins DenseI64ArrayAttr:$events);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

#endif // BIGC_TRANSFER_OPS_TD
