#!/usr/bin/env bash
# make demo: generate a small GPT, compile it, show its memory plan, train it on the CPU backend.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
OUT=demo
mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "bigc gen gpt --preset tiny -o $OUT/model.mlir"
"$BIN/bigc" gen gpt --preset tiny -o "$OUT/model.mlir"
head -n 12 "$OUT/model.mlir"

step "bigc compile $OUT/model.mlir -o $OUT/model.bigc --lr 3e-3"
"$BIN/bigc" compile "$OUT/model.mlir" -o "$OUT/model.bigc" --lr 3e-3

step "bigc inspect $OUT/model.bigc --memory --timeline $OUT/plan.svg"
"$BIN/bigc" inspect "$OUT/model.bigc" --memory --timeline "$OUT/plan.svg"

step "bigc run $OUT/model.bigc --synthetic --steps 200 --log $OUT/train.jsonl"
"$BIN/bigc" run "$OUT/model.bigc" --synthetic --steps 200 --log "$OUT/train.jsonl"

/usr/bin/python3 - "$OUT/train.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\nloss: step 1 {rows[0]['loss']:.3f} -> step {rows[-1]['step']} {rows[-1]['loss']:.3f}"
      f"  ({sum(r['tokens_per_s'] for r in rows[-20:]) / 20:.0f} tokens/s)")
PY

step "The same model on 8 ranks, ZeRO-3 (bigc compile --ranks 8 --zero 3; bigc run runs every rank)"
"$BIN/bigc" compile "$OUT/model.mlir" -o "$OUT/model8.bigc" --lr 3e-3 --ranks 8 --zero 3 --hardware a100-80g-x8
"$BIN/bigc" inspect "$OUT/model8.bigc" --rank 3 | sed -n 2,6p
"$BIN/bigc" run "$OUT/model8.bigc" --synthetic --steps 20
echo "memory plan over the step: $OUT/plan.svg (open it in a browser)"
