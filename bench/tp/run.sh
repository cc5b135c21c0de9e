#!/usr/bin/env bash
# The cost model on tensor parallelism: for MODELS (gpt2-xl, 13b) on HARDWARE (a100-80g-x8,
# v100-16g-x8), every mesh of 8 ranks tp 1/2/4/8 x dp 8/4/2/1 under --zero 0..3, the predicted step
# time (bigc's step simulation: roofline compute, ring collectives on the profile's interconnect,
# overlap on the comm streams) and the device memory per rank of the plan, the time of the tensor
# axis's collectives and the part of it hidden behind compute, the same with --sequence-parallel
# (tp > 1), and the configuration bigc would pick: the fastest that fits. Vocabulary padded to 50304 (a multiple of 128 x 8, as
# Megatron pads); a mesh whose tensor size does not divide the heads is reported as such.
# Usage: bench/tp/run.sh [build/bin]   (MODELS="gpt2-xl 13b" HARDWARE="a100-80g-x8 v100-16g-x8")
set -euo pipefail
BIN=${1:-build/bin}
MODELS=${MODELS:-"gpt2-xl 13b"}
HARDWARE=${HARDWARE:-"a100-80g-x8 v100-16g-x8"}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
out=${OUT:-bench/tp/results.md}
{
echo "| model | hardware | tp x dp | zero | step (ms) | device per rank (GiB) | fits | tensor-axis comm (ms, % hidden) | with --sequence-parallel: step (ms) | GiB | fits |"
echo "|---|---|---|---|---:|---:|---|---:|---:|---:|---|"
} > "$d/table.md"
for m in $MODELS; do
  "$BIN/bigc" gen gpt --preset "$m" --vocab 50304 --batch 1 -o "$d/$m.mlir" > /dev/null
  for hw in $HARDWARE; do
    prec=bf16; [[ $hw == v100* ]] && prec=fp16
    cap=$(/usr/bin/python3 -c "import json,sys; h=json.load(open('hardware/$hw.json')); print(h.get('device_memory_bytes') or h['device_memory'])" 2>/dev/null || echo 0)
    for tp in 1 2 4 8; do
      for z in 0 1 2 3; do
        echo "[$m $hw] tp $tp zero $z ..." >&2
        if ! "$BIN/bigc" compile "$d/$m.mlir" -o "$d/p.bigc" --hardware "$hw" --device-mem 64T --host-mem 64T \
             --ranks 8 --tp $tp --zero $z --precision $prec --quiet 2> "$d/err"; then
          why=$(grep -m1 -oE "(has [0-9]+ heads[^;(]*|does not divide[^;(]*)" "$d/err" || head -c 120 "$d/err")
          echo "| $m | $hw | $tp x $((8 / tp)) | $z | - | - | no: $why | - | - | - | - |" >> "$d/table.md"
          continue
        fi
        "$BIN/bigc" inspect "$d/p.bigc" --json > "$d/p.json"
        echo '{}' > "$d/sp.json"
        if [ "$tp" -gt 1 ]; then
          "$BIN/bigc" compile "$d/$m.mlir" -o "$d/sp.bigc" --hardware "$hw" --device-mem 64T --host-mem 64T \
            --ranks 8 --tp $tp --zero $z --precision $prec --sequence-parallel --quiet
          "$BIN/bigc" inspect "$d/sp.bigc" --json > "$d/sp.json"
        fi
        /usr/bin/python3 - "$d/p.json" "$d/sp.json" "$m" "$hw" "$tp" "$z" "$cap" >> "$d/table.md" <<'PY'
import json, sys
j, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m, hw, tp, z, cap = sys.argv[3:8]
units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
cap = float(cap[:-1]) * units[cap[-1]] if cap and cap[-1] in units else float(cap)
def cols(j):
    if not j:
        return ["-", "-", "-"]
    dev = j["spaces"]["device"]["arena_bytes"]
    step = j.get("estimate", {}).get("step_seconds", 0) * 1e3
    return [f"{step:.0f}", f"{dev / 2**30:.1f}", "yes" if cap <= 0 or dev <= cap else "no"]
tpc = [c for c in j.get("estimate", {}).get("collectives", []) if c["op"].startswith("tp_")]
sec = sum(c["seconds"] for c in tpc)
hid = sum(c["hidden_seconds"] for c in tpc)
comm = f"{sec * 1e3:.0f} ({100 * hid / sec:.0f}%)" if sec > 0 else "-"
print("| " + " | ".join([m, hw, f"{tp} x {8 // int(tp)}", z] + cols(j) + [comm] + cols(s)) + " |")
PY
      done
    done
  done
done
/usr/bin/python3 - "$d/table.md" >> "$d/table.md" <<'PY'
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ") and not l.startswith("| model")]
print()
for key in sorted({(r[0].strip(), r[1].strip()) for r in rows}):
    # Each configuration with and without sequence parallelism: (step, GiB, description).
    ok = []
    for r in rows:
        if (r[0].strip(), r[1].strip()) != key:
            continue
        if r[6].strip() == "yes":
            ok.append((float(r[4]), r[5].strip(), f"tp x dp {r[2].strip()}, zero {r[3].strip()}"))
        if r[10].strip() == "yes":
            ok.append((float(r[8]), r[9].strip(), f"tp x dp {r[2].strip()}, zero {r[3].strip()}, sequence parallel"))
    if not ok:
        print(f"- {key[0]} on {key[1]}: no mesh of 8 ranks fits without offload")
        continue
    best = min(ok, key=lambda r: r[0])
    print(f"- {key[0]} on {key[1]}: bigc picks {best[2]} ({best[0]:.0f} ms per step, {best[1]} GiB per rank)")
PY
cp "$d/table.md" "$out"
cat "$out"
