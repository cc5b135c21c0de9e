#!/usr/bin/env bash
# The memory model of ZeRO, checked against the ZeRO paper (Rajbhandari et al. 2020, section 5):
# a gradient-dominated shape (gpt2-xl, batch 1 x seq 128, 8 data-parallel ranks), every ZeRO stage
# x precision. Per rank, model states are
#   16-bit:  zero 0/1: 2P + 2P + K P/N    zero 2: 2P + (2 + K) P/N    zero 3: (2 + 2 + K) P/N
#   fp32:    the same with 4 bytes for the weight and the gradient:   4P + 4P + K P/N ...
# with K = 12 (fp32 master, Adam m and v; bigc keeps the fp32 master apart from the weight the
# step computes with in fp32 too, but for fp32 zero 0: K = 8) and zero 0 sharding nothing (K P, no
# gradient kept: each is all-reduced and consumed at once, except with fp16, whose overflow check
# reads every gradient before any update, as it reads every shard at zero >= 1). The plan must hold the states and may add only what the step needs besides: the
# activations kept for the backward plus a transient allowance (one layer's weights gathered
# ahead and its gradients in flight, the tied embedding's whole gradient and the embedding
# backward's buffer, stated below). Stages must order zero 3 < zero 2 < zero 1, and fp16 must stay
# within 3 % of bf16 at every sharded stage (its gradients reduce-scattered as the backward makes
# them). With 4 micro-batches, zero 2/3 add at most the fp32 shard accumulators (4P/N) plus one
# layer's 16-bit gradients. The inspect peak equals the planner's lower bound in every plan.
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen gpt --preset gpt2-xl --batch 1 --seq 128 -o "$d/xl.mlir" > /dev/null
for p in fp32 bf16 fp16; do
  for z in 0 1 2 3; do
    "$BIN/bigc" compile "$d/xl.mlir" -o "$d/$p-$z.bigc" --ranks 8 --zero "$z" --precision "$p" --device-mem 64T --quiet
    "$BIN/bigc" inspect "$d/$p-$z.bigc" --json > "$d/$p-$z.json"
  done
done
for p in bf16 fp16; do
  for z in 2 3; do
    "$BIN/bigc" compile "$d/xl.mlir" -o "$d/$p-$z-k4.bigc" --ranks 8 --zero "$z" --precision "$p" --device-mem 64T \
      --micro-batches 4 --quiet
    "$BIN/bigc" inspect "$d/$p-$z-k4.bigc" --json > "$d/$p-$z-k4.json"
  done
done
/usr/bin/python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(sys.argv[0])))
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m)
    ok &= bool(c)
GiB = 2**30
N, K = 8, 12
plans = {}
for p in ("fp32", "bf16", "fp16"):
    for z in range(4):
        plans[p, z] = json.load(open(f"{d}/{p}-{z}.json"))
P = plans["fp32", 0]["parameters"]
cfg = plans["fp32", 0]["config"]
C = 1600                         # gpt2-xl width; one block holds 12 C^2 + 13 C parameters
layer = 12 * C * C + 13 * C
V = 50257
def states(p, z):
    w = 4 if p == "fp32" else 2   # bytes of the weight the step computes with, and of its gradient
    grad = w * P if (z == 1 or (z == 0 and p == "fp16")) else 0  # gradients kept whole
    if z == 0: return w * P + grad + (K - 4 if p == "fp32" else K) * P  # fp32 zero 0: no separate master
    if z == 1: return w * P + grad + K * P / N
    if z == 2: return w * P + (w + K) * P / N
    return (w + w + K) * P / N
def allowance(p, z):
    w = 4 if p == "fp32" else 2
    a = 2 * V * C * w             # the tied embedding's whole gradient and the embedding backward's buffer
    if z == 3: a += 3 * layer * w # gathered weights: the layer computing, the one prefetched, one in flight
    if z >= 2: a += 2 * layer * w # whole gradients of a layer waiting for their reduce-scatter
    if p == "fp16" and z >= 1: a += w * P / N  # the gradient shards, all read by the overflow check first
    return a
print(f"gpt2-xl, batch {cfg['batch']} x seq {cfg['seq']}, {N} ranks, P = {P:,}")
print("| precision | zero | plan (GiB) | states (GiB) | activations kept (GiB) | plan - states - activations (GiB) | allowance (GiB) |")
print("|---|---|---|---|---|---|---|")
for (p, z), j in plans.items():
    arena = j["spaces"]["device"]["arena_bytes"]
    act = j["activations_kept_bytes"]
    s = states(p, z)
    extra = arena - s - act
    print(f"| {p} | {z} | {arena / GiB:.3f} | {s / GiB:.3f} | {act / GiB:.3f} | {extra / GiB:.3f} | {allowance(p, z) / GiB:.3f} |")
    check(arena >= s, f"{p} zero {z}: the plan holds the states ({arena / GiB:.3f} >= {s / GiB:.3f} GiB)")
    check(extra <= allowance(p, z), f"{p} zero {z}: beyond the states and activations only the transient allowance "
          f"({extra / GiB:.3f} <= {allowance(p, z) / GiB:.3f} GiB)")
    sp = j["spaces"]["device"]
    check(sp["peak_live_bytes"] == sp["lower_bound_bytes"],
          f"{p} zero {z}: inspect's peak {sp['peak_live_bytes']} = the planner's lower bound {sp['lower_bound_bytes']}")
for p in ("fp32", "bf16", "fp16"):
    a = [plans[p, z]["spaces"]["device"]["arena_bytes"] for z in range(4)]
    check(a[3] < a[2] < a[1], f"{p}: zero 3 < zero 2 < zero 1 ({a[3] / GiB:.2f} < {a[2] / GiB:.2f} < {a[1] / GiB:.2f} GiB)")
for z in (1, 2, 3):
    b = plans["bf16", z]["spaces"]["device"]["arena_bytes"]
    f = plans["fp16", z]["spaces"]["device"]["arena_bytes"]
    check(f <= 1.03 * b, f"zero {z}: fp16 {f / GiB:.3f} GiB within 3 % of bf16 {b / GiB:.3f} GiB ({100 * (f / b - 1):+.1f} %)")
for p in ("bf16", "fp16"):
    for z in (2, 3):
        k1 = plans[p, z]["spaces"]["device"]["arena_bytes"]
        k4 = json.load(open(f"{d}/{p}-{z}-k4.json"))["spaces"]["device"]["arena_bytes"]
        acc = 4 * P / N
        check(k4 - k1 <= acc + 2 * layer * 2, f"{p} zero {z}: 4 micro-batches add {(k4 - k1) / GiB:.3f} GiB <= the fp32 "
              f"shard accumulators {acc / GiB:.3f} GiB + one layer's 16-bit gradients")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
