#!/usr/bin/env python3
"""Writes a small, valid bigc program file (docs/program-format.md) by hand, for the
`bigc inspect` tests: a 4x8 embedding tied to the LM head, one training step (forward,
backward, AdamW) with the AdamW moments in a second memory space, "host".

usage: make_toy_program.py OUT.bigc [DEVICE_CAPACITY_BYTES] [HOST_CAPACITY_BYTES] [offload]

With `offload` (format version 2 streams): the fp32 master weight lives on the host, the
gradient goes to the host on the d2h stream, AdamW runs on the host stream, the new weight comes
back on the h2d stream, and one forward instruction is marked as recomputed.
"""
import json
import sys

OFFLOAD = len(sys.argv) > 4 and sys.argv[4] == "offload"


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for x in data:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


V, C, B, T = 4, 8, 2, 3
bufs = []


def buf(name, shape, role, space="device", dtype="f32", init=None):
    n = 1
    for d in shape:
        n *= d
    b = {"id": len(bufs), "name": name, "space": space, "offset": 0, "bytes": n * 4,
         "dtype": dtype, "shape": shape, "role": role, "live": [0, 0]}
    if init:
        b["init"] = init
    bufs.append(b)
    return b["id"]


if OFFLOAD:
    Wm = buf("wte.weight", [V, C], "master", "host", init={"kind": "normal", "std": 0.02})
    W = buf("wte.weight.half", [V, C], "param", init={"kind": "copy", "source": "wte.weight"})
else:
    W = buf("wte.weight", [V, C], "param", init={"kind": "normal", "std": 0.02})
M = buf("wte.weight.exp_avg", [V, C], "optimizer", "host", init={"kind": "zeros"})
S = buf("wte.weight.exp_avg_sq", [V, C], "optimizer", "host", init={"kind": "zeros"})
tok = buf("tokens", [B, T], "input", dtype="i32")
tgt = buf("targets", [B, T], "input", dtype="i32")
y = buf("emb", [B, T, C], "activation")
lg = buf("logits", [B, T, V], "activation")
loss = buf("loss", [], "activation")
one = buf("dloss", [], "activation_grad")
dlg = buf("dlogits", [B, T, V], "activation_grad")
dlg2 = buf("dlogits2d", [B * T, V], "activation_grad")
y2 = buf("emb2d", [B * T, C], "activation")
dW1 = buf("wte.weight.grad_head", [V, C], "grad")
dy = buf("demb", [B, T, C], "activation_grad")
dW2 = buf("wte.weight.grad_emb", [V, C], "grad")
dW = buf("wte.weight.grad", [V, C], "grad")
ins = [
    {"op": "embedding", "in": [W, tok], "out": [y]},
    {"op": "matmul", "in": [y, W], "out": [lg], "attrs": {"transpose_b": True}},
    {"op": "cross_entropy", "in": [lg, tgt], "out": [loss]},
    {"op": "fill", "in": [], "out": [one], "attrs": {"value": 1.0}},
    {"op": "cross_entropy_grad", "in": [lg, tgt, one], "out": [dlg]},
    {"op": "reshape", "in": [dlg], "out": [dlg2]},
    {"op": "reshape", "in": [y], "out": [y2]},
    {"op": "matmul", "in": [dlg2, y2], "out": [dW1], "attrs": {"transpose_a": True}},
    {"op": "matmul", "in": [dlg, W], "out": [dy]},
    {"op": "embedding_grad", "in": [dy, tok], "out": [dW2]},
    {"op": "add", "in": [dW1, dW2], "out": [dW]},
    {"op": "adamw", "in": [W, dW, M, S], "out": [W, M, S],
     "attrs": {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}},
]
if OFFLOAD:
    dWh = buf("wte.weight.grad_host", [V, C], "grad", "host")
    ins[6]["recompute"] = True
    ins[-1:] = [
        {"op": "copy", "in": [dW], "out": [dWh], "stream": "d2h", "wait": [10]},
        {"op": "adamw", "in": [Wm, dWh, M, S], "out": [Wm, M, S], "stream": "host", "wait": [11],
         "attrs": {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}},
        {"op": "copy", "in": [Wm], "out": [W], "stream": "h2d", "wait": [12]},
        {"op": "wait", "in": [], "out": [], "wait": [13]},
    ]
n = len(ins)
seen = set()
for i, x in enumerate(ins):
    x.setdefault("attrs", {})
    x["loc"] = "toy.mlir:%d:5" % (i + 1)
    for b in x["in"] + x["out"]:
        if b in seen:
            bufs[b]["live"][1] = i
        else:
            seen.add(b)
            bufs[b]["live"] = [i, i]
# No reuse: every buffer at its own offset (the arena is the sum, the lower bound the peak).
arena = {"device": 0, "host": 0}
for b in bufs:
    if b["role"] in ("param", "optimizer", "master"):
        b["live"] = [0, n - 1]
    if b["role"] == "input":
        b["live"][0] = 0
    b["offset"] = arena[b["space"]]
    arena[b["space"]] += (b["bytes"] + 63) // 64 * 64


def peak(space):  # in whole 64-byte units per buffer, as the planner counts them
    return max(sum((b["bytes"] + 63) // 64 * 64 for b in bufs
                   if b["space"] == space and b["live"][0] <= i <= b["live"][1])
               for i in range(n))


dev_cap = int(sys.argv[2]) if len(sys.argv) > 2 else 0
host_cap = int(sys.argv[3]) if len(sys.argv) > 3 else 0
program = {
    "version": 2, "producer": "bigc 0.1.0", "source": "toy.mlir",
    "config": {"batch": B, "seq": T, "vocab": V, "precision": "fp32", "micro_batches": 1,
               "ranks": 1},
    "optimizer": {"kind": "adamw", "lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "weight_decay": 0.1, "grad_clip": 0.0},
    "hardware": {"name": "toy", "device_capacity_bytes": dev_cap,
                 "host_capacity_bytes": host_cap},
    "spaces": [
        {"name": "device", "arena_bytes": arena["device"], "lower_bound_bytes": peak("device"),
         "capacity_bytes": dev_cap},
        {"name": "host", "arena_bytes": arena["host"], "lower_bound_bytes": peak("host"),
         "capacity_bytes": host_cap},
    ],
    "buffers": bufs, "inputs": {"tokens": [tok], "targets": [tgt]}, "loss": loss,
    "instructions": ins,
}
payload = json.dumps(program).encode()
with open(sys.argv[1], "wb") as f:
    f.write(b"BIGC-PROGRAM 2 %d %016x\n" % (len(payload), fnv1a64(payload)) + payload)
