#!/usr/bin/env bash
# --offload-activations on the CPU backend: a 4-layer LLaMA-shaped model (bigc gen llama) trained
# 10 steps with the activations its backward reads sent to the host as the forward makes them and
# brought back a layer ahead of the backward, alone, with --recompute full, with --cp 2 (ring) and
# with --offload cpu in bf16: the same numbers as without (bit-identical: the transfers copy bytes),
# the device arena smaller by what went to the host (from the plans), the streams' discipline and
# the plan's proof (check_streams, bigc verify), inspect's line, and --recompute auto recomputing
# only what the offload does not free.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
"$BIN/bigc" gen llama --layers 4 --hidden 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 --seq 32 --batch 16 \
  -o "$d/m.mlir"
source "$HERE/equivalence_runs.shlib" # compile NAME MODEL OPTIONS..., run NAME

compile one m
compile oa m --offload-activations
compile rc m --recompute full
compile oarc m --recompute full --offload-activations
compile cp m --ranks 2 --cp 2
compile oacp m --ranks 2 --cp 2 --offload-activations
compile off m --offload cpu --precision bf16
compile oaoff m --offload cpu --precision bf16 --offload-activations
names="one oa rc oarc cp oacp off oaoff"
for n in $names; do run $n; done
for n in oa oarc oacp oaoff; do
  $PY "$HERE/check_streams.py" "$d/$n.bigc" > /dev/null
  "$BIN/bigc" verify "$d/$n.bigc" > /dev/null
done
for n in $names; do "$BIN/bigc" inspect "$d/$n.bigc" > "$d/$n.txt"; done

$PY - "$d" "$HERE" <<'PY'
import json, re, sys
sys.path.insert(0, sys.argv[2])
import runlog
d = sys.argv[1]
check = runlog.Checks()
def arena(n, space):
    m = re.search(r"^space " + space + r" .*\n  arena\s+\S+ \S+\s+\(([\d,]+) bytes\)", open(f"{d}/{n}.txt").read(), re.M)
    return int(m.group(1).replace(",", "")) if m else 0
for n, ref in [("oa", "one"), ("oarc", "rc"), ("oacp", "cp"), ("oaoff", "off")]:
    a, _ = runlog.losses(f"{d}/{ref}.jsonl")
    b, _ = runlog.losses(f"{d}/{n}.jsonl")
    check(f"{n} losses", len(a) == 10 and list(a) == list(b), f"bit-identical to {ref}'s ({b[-1]:.6f})")
    wa, wb = runlog.weights(f"{d}/{ref}.safetensors"), runlog.weights(f"{d}/{n}.safetensors")
    check(f"{n} weights", all((wa[k][1] == wb[k][1]).all() for k in wa), f"bit-identical to {ref}'s")
    txt = open(f"{d}/{n}.txt").read()
    m = re.search(r"activations offloaded \(--offload-activations\): (\d+) tensors, ([\d.]+ \w+)", txt)
    dev, ref_dev, host = arena(n, "device"), arena(ref, "device"), arena(n, "host") - arena(ref, "host")
    check(f"{n} plan", m is not None and dev < ref_dev and host > 0,
          f"{m.group(1) if m else 0} tensors ({m.group(2) if m else '-'}) offloaded; device arena {ref_dev} -> {dev} "
          f"bytes, host arena +{host} bytes")
    print(f"MEASURED {n}: device {ref_dev} -> {dev} bytes ({100 * (1 - dev / ref_dev):.0f}% less), host +{host}")
sys.exit(0 if check.ok else 1)
PY
# --recompute auto weighs the offload: under a budget of 6 MiB it recomputes what the device cannot
# keep; with the activations on the host it recomputes nothing.
"$BIN/bigc" compile "$d/m.mlir" --recompute auto --memory-budget 6M -o "$d/ra.bigc" > "$d/ra.txt" 2>&1
"$BIN/bigc" compile "$d/m.mlir" --recompute auto --memory-budget 6M --offload-activations -o "$d/raoa.bigc" \
  > "$d/raoa.txt" 2>&1
grep -qE "recomputing the first [1-9][0-9]* ranked candidates fits" "$d/ra.txt" ||
  { echo "FAIL: recompute auto without the offload:"; cat "$d/ra.txt"; exit 1; }
grep -q "recomputing the first 0 ranked candidates fits" "$d/raoa.txt" ||
  { echo "FAIL: recompute auto with the offload:"; cat "$d/raoa.txt"; exit 1; }
echo "ok   --recompute auto: $(grep -o 'recomputing the first [0-9]*' "$d/ra.txt") without the offload, none with it"
echo "offload_activations: ok"
