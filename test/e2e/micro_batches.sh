#!/usr/bin/env bash
# Gradient accumulation (bigc-grad-accum): K = 4 micro-batches of B sequences per update train
# exactly as one batch of 4B: same data order (micro-batch k reads the k-th slice of B*T tokens,
# which is row block k of the 4B batch), loss = mean over the global batch, gradients accumulated
# in fp32. 10 AdamW steps on the CPU backend, fp32:
#   - per-step losses equal to 4e-7 relative (only the summation order of the gradients differs:
#     4 partial sums of B*T rows instead of one of 4B*T rows; measured 1.03e-7, one ulp of a loss
#     near 5, on 2026-11-24);
#   - step-1 parameter gradients (--dump-grads: the accumulated fp32 gradients vs the one-batch
#     gradients) equal to 3e-6 of the largest element of each tensor (measured 6.7e-7);
#   - final weights: ||w_K - w_1|| / ||w_1 - w_0|| over all tensors (the difference relative to
#     what training moved them, as runlog.compare measures the equivalence tests) within 2.5e-4
#     (measured 1.3e-5 in the Release build, 6.0e-5 under ASan+UBSan, whose code rounds
#     differently). A max-element bound does not serve: an element whose exact gradient is ~0
#     (the attention key bias) moves by up to lr on rounding noise alone (AdamW divides by the
#     root of the second moment), differently in two summation orders and two builds (one element
#     of mlp.c_proj: 5.8e-6 Release, 9.9e-5 under ASan);
#   - memory: the K = 4 plan holds one micro-batch's activations: its device arena exceeds the
#     K = 1 plan of batch B by no more than the fp32 accumulators (4 bytes per parameter) plus the
#     extra token buffers, and is smaller than the K = 1 plan of batch 4B.
# With --precision bf16 the same K = 4 run must also train (finite losses that go down).
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
L=2; C=64; H=4; T=32; B=2; K=4; STEPS=10
"$BIN/bigc" gen gpt --preset tiny --layers $L --hidden $C --heads $H --seq $T --batch $B -o "$d/micro.mlir"
"$BIN/bigc" gen gpt --preset tiny --layers $L --hidden $C --heads $H --seq $T --batch $((K * B)) -o "$d/global.mlir"
"$BIN/bigc" compile "$d/micro.mlir" -o "$d/accum.bigc" --micro-batches $K --lr 1e-3 --quiet
"$BIN/bigc" compile "$d/micro.mlir" -o "$d/one.bigc" --lr 1e-3 --quiet
"$BIN/bigc" compile "$d/global.mlir" -o "$d/global.bigc" --lr 1e-3 --quiet
"$BIN/bigc" compile "$d/micro.mlir" -o "$d/accum_bf16.bigc" --micro-batches $K --precision bf16 --lr 1e-3 --quiet
/usr/bin/python3 - "$d/input.txt" <<'PY'
import random, sys
random.seed(11)
words = "gradient accumulation trains the global batch one micro batch at a time".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(4000)))
PY
"$BIN/bigc" data encode "$d/input.txt" -o "$d/tokens.bin" > /dev/null
for p in accum global accum_bf16; do
  "$BIN/bigc" run "$d/$p.bigc" --data "$d/tokens.bin" --steps $STEPS --seed 3 --log "$d/$p.jsonl" \
      --save-weights "$d/$p.safetensors" --quiet
done
"$BIN/bigc" run "$d/global.bigc" --steps 0 --seed 3 --save-weights "$d/init.safetensors" --quiet
for p in accum global; do
  "$BIN/bigc" run "$d/$p.bigc" --data "$d/tokens.bin" --steps 1 --seed 3 --dump-grads "$d/$p.grads.safetensors" --quiet
done
for p in accum one global; do "$BIN/bigc" inspect "$d/$p.bigc" --json > "$d/$p.json"; done

/usr/bin/python3 - "$d" $K <<'PY'
import json, struct, sys
import numpy as np
d, K = sys.argv[1], int(sys.argv[2])

def log(name):
    return [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]

def weights(name):
    raw = open(f"{d}/{name}.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for key, v in header.items():
        if key == "__metadata__":
            continue
        assert v["dtype"] == "F32", (key, v["dtype"])
        a, b = v["data_offsets"]
        out[key] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(v["shape"])
    return out

fail = []
acc, glob = log("accum"), log("global")
assert len(acc) == len(glob) == 10, (len(acc), len(glob))
worst = 0.0
for a, g in zip(acc, glob):
    rel = abs(a["loss"] - g["loss"]) / abs(g["loss"])
    worst = max(worst, rel)
    if rel > 4e-7:
        fail.append(f"step {a['step']}: loss {a['loss']:.8f} (K={K} micro-batches) vs {g['loss']:.8f} (one batch), rel {rel:.2e}")
print(f"losses: {len(acc)} steps, worst relative difference {worst:.2e} (tolerance 4e-7); "
      f"first {glob[0]['loss']:.5f}, last {glob[-1]['loss']:.5f}")
if not glob[-1]["loss"] < glob[0]["loss"] - 0.05:
    fail.append("the reference run did not learn (loss did not go down): the comparison would prove nothing")

ga, gg = weights("accum.grads"), weights("global.grads")
if sorted(ga) != sorted(gg) or not gg:
    fail.append(f"gradient names differ: {sorted(set(ga) ^ set(gg))}")
worstg = 0.0
for k in sorted(gg):
    if k not in ga:
        continue
    scale = float(np.abs(gg[k]).max()) or 1.0
    rel = float(np.abs(ga[k] - gg[k]).max()) / scale
    worstg = max(worstg, rel)
    if rel > 3e-6:
        fail.append(f"step-1 gradient of {k}: max difference {rel:.2e} of its largest element (tolerance 3e-6)")
print(f"step-1 gradients: {len(gg)} tensors, worst max-difference / max-element {worstg:.2e} (tolerance 3e-6)")

wa, wg = weights("accum"), weights("global")
if sorted(wa) != sorted(wg):
    fail.append(f"weight names differ: {sorted(set(wa) ^ set(wg))}")
w0 = weights("init")
num = den = 0.0
worstw = 0.0
for k in sorted(wg):
    if k not in wa:
        continue
    num += float(np.sum((wa[k].astype(np.float64) - wg[k]) ** 2))
    den += float(np.sum((wg[k].astype(np.float64) - w0[k]) ** 2))
    worstw = max(worstw, float(np.abs(wa[k] - wg[k]).max()))
relw, tolw = (num ** 0.5) / (den ** 0.5), 2.5e-4
if not relw <= tolw:
    fail.append(f"final weights: ||w_K - w_1|| / ||w_1 - w_0|| = {relw:.2e} (tolerance {tolw:.0e})")
print(f"final weights: {len(wg)} tensors, difference relative to the update {relw:.2e} (tolerance {tolw:.0e}); "
      f"largest element difference {worstw:.2e}")

# Memory: one micro-batch's activations plus the fp32 accumulators.
ins = {p: json.load(open(f"{d}/{p}.json")) for p in ("accum", "one", "global")}
arena = {p: v["spaces"]["device"]["arena_bytes"] for p, v in ins.items()}
params = ins["one"]["parameters"]
if ins["accum"]["config"]["micro_batches"] != K:
    fail.append(f"config.micro_batches is {ins['accum']['config']['micro_batches']}, expected {K}")
tokens = ins["accum"]["spaces"]["device"]["by_role"].get("input", 0)
allowance = 4 * params + tokens + 64 * 1024
grow = arena["accum"] - arena["one"]
print(f"device arena: K={K} x B {arena['accum']} B, K=1 x B {arena['one']} B (+{grow} B; fp32 accumulators "
      f"{4 * params} B), K=1 x {K}B {arena['global']} B")
if grow > allowance:
    fail.append(f"the K={K} arena grows by {grow} bytes over K=1, more than the accumulators and inputs ({allowance})")
if not arena["accum"] < arena["global"]:
    fail.append(f"the K={K} arena ({arena['accum']}) is not smaller than the one-batch arena ({arena['global']})")

bf = log("accum_bf16")
if not all(np.isfinite(r["loss"]) for r in bf) or not bf[-1]["loss"] < bf[0]["loss"]:
    fail.append(f"bf16 with {K} micro-batches did not train: losses {[r['loss'] for r in bf]}")
print(f"bf16, K={K}: loss {bf[0]['loss']:.5f} -> {bf[-1]['loss']:.5f}")

if fail:
    print("FAIL:\n  " + "\n  ".join(fail))
    sys.exit(1)
print("micro_batches: OK")
PY
