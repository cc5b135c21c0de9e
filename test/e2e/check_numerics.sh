#!/usr/bin/env bash
# bigc run --check-numerics: weights with one inf (ln_f.weight[3], written into a weights file)
# make the first instruction that reads them produce inf/nan; the run stops there with exit 1,
# naming the step, the instruction, its op and source location in model.mlir, the output and the
# non-finite input. Without the flag the run goes on (loss nan). An fp16 run whose gradients
# overflow by design (--loss-scale 1e30: steps skipped) is not stopped; nor is a healthy run.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
"$BIN/bigc" gen gpt --preset tiny -o "$d/m.mlir" > /dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --quiet
"$BIN/bigc" compile "$d/m.mlir" -o "$d/ov.bigc" --precision fp16 --loss-scale 1e30 --quiet
"$BIN/bigc" run "$d/m.bigc" --steps 0 --save-weights "$d/w.safetensors" --quiet
$PY - "$d/w.safetensors" "$d/bad.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
h = json.loads(raw[8:8 + n])
a, b = h["ln_f.weight"]["data_offsets"]
raw[8 + n + a + 12:8 + n + a + 16] = struct.pack("<f", float("inf"))  # element 3
open(sys.argv[2], "wb").write(raw)
PY
# Where ln_f's layernorm is in the model.
LN=$(grep -n 'ln_f.weight' "$d/m.mlir" | grep -v 'bigc.param' | head -1 | cut -d: -f1)
if "$BIN/bigc" run "$d/m.bigc" --steps 3 --load-weights "$d/bad.safetensors" --check-numerics --quiet 2> "$d/err"; then
  echo "FAIL: --check-numerics did not stop"; exit 1
fi
cat "$d/err"
grep -q "step 1: instruction [0-9]* (layernorm at $d/m.mlir:" "$d/err" || { echo "FAIL: not the layernorm of ln_f"; exit 1; }
grep -q "produced inf or nan: output 0" "$d/err" || { echo "FAIL: the output is not named"; exit 1; }
grep -q "its input 'ln_f.weight' (param) already holds inf or nan" "$d/err" || { echo "FAIL: the input is not named"; exit 1; }
loc=$(grep -o "layernorm at [^)]*" "$d/err" | head -1 | sed 's/.*m.mlir:\([0-9]*\):.*/\1/')
sed -n "${loc}p" "$d/m.mlir" | grep -q "bigc.layernorm" || { echo "FAIL: line $loc of model.mlir is not a layernorm"; exit 1; }
echo "ok   stopped at the layernorm of line $loc of model.mlir"
# Without the flag: the run continues, with a nan loss.
"$BIN/bigc" run "$d/m.bigc" --steps 2 --load-weights "$d/bad.safetensors" --log "$d/nan.jsonl" --quiet
grep -q '"loss":null\|"loss":NaN\|"loss":nan' "$d/nan.jsonl" || $PY -c "
import json,sys,math; r=[json.loads(l) for l in open(sys.argv[1])]; assert r[0]['loss'] is None or math.isnan(r[0]['loss']), r[0]" "$d/nan.jsonl"
echo "ok   without --check-numerics the loss is nan and the run goes on"
# fp16 overflow handled by loss scaling, and a healthy run: not stopped.
"$BIN/bigc" run "$d/ov.bigc" --steps 3 --check-numerics --log "$d/ov.jsonl" --quiet
grep -q '"skipped":true' "$d/ov.jsonl"
"$BIN/bigc" run "$d/m.bigc" --steps 3 --check-numerics --quiet
echo "ok   fp16 overflow (skipped steps) and a healthy run pass --check-numerics"
echo PASS
