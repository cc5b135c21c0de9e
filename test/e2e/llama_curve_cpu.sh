#!/usr/bin/env bash
# The GPU loss-curve harness (bench/gpu/llama_curve.sh, bench/gpu/torch_llama.py) on the CPU at toy
# size, so that what a GPU session runs has run: a Llama-3 config (rope scaling llama3, tied
# embeddings, grouped-query attention) of 2 layers x 64, imported by `bigc import hf`, compiled in
# bf16, trained 60 steps by bigc and twice by PyTorch (bf16 autocast) from PyTorch's initial weights
# on the same llm.c token file in bigc's order. Checked: the written-out Llama equals transformers'
# logits (--check-own, 1e-5; measured 0); the first losses agree to 1e-4 relative (measured 2.5e-5:
# the same weights and tokens, bf16); the 10-step means of the curves to 7e-4 (measured 1.7e-4,
# 2026-11-28); the two PyTorch runs identically; the SVG is written.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$HERE/python_env.shlib" # PY: torch, transformers
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$PY" - "$ROOT/bench/gpu/configs/llama3.2-1b.json" "$d/tiny.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         vocab_size=256, head_dim=16, bos_token_id=1, eos_token_id=2)
json.dump(c, open(sys.argv[2], "w"))
PY
"$PY" "$ROOT/bench/gpu/torch_llama.py" --config "$d/tiny.json" --check-own 2> /dev/null
BIGC_PYTHON=$PY "$BIN/bigc" import hf "$d/tiny.json" --batch 2 --seq 64 -o "$d/tiny.mlir" > /dev/null
mkdir -p "$d/programs"
"$BIN/bigc" compile "$d/tiny.mlir" --precision bf16 --lr 3e-4 -o "$d/programs/tiny.bigc" --quiet
PYTHON=$PY CONFIG=$d/tiny.json SEQ=64 LLAMA_BATCH=2 STEPS=60 BACKEND=cpu PROGRAM=tiny \
  bash "$ROOT/bench/gpu/llama_curve.sh" "$BIN" "$d/programs" "$d/curve" > "$d/curve.log" 2>&1 ||
  { cat "$d/curve.log"; exit 1; }
/usr/bin/python3 - "$d/curve" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(f"{d}/llama_curve.json"))
ok = True
def check(name, cond, msg):
    global ok
    print(("ok   " if cond else "FAIL ") + name + ": " + msg)
    ok &= bool(cond)
a, g = r["first_loss"]
check("first step", abs(a - g) / a <= 1e-4, f"PyTorch {a:.6f}, bigc {g:.6f} (<= 1e-4 relative)")
m = r["max_abs_diff_smoothed"]
check("curves", m["bigc_vs_pytorch"] <= 7e-4 and r["steps"] == 60,
      f"{r['steps']} steps, 10-step means within {m['bigc_vs_pytorch']:.3g} (<= 7e-4)")
check("PyTorch twice", m["pytorch_vs_pytorch"] == 0, "identical on the CPU")
check("picture", os.path.getsize(f"{d}/llama_curve.svg") > 1000, "llama_curve.svg written")
sys.exit(0 if ok else 1)
PY
