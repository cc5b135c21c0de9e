#!/usr/bin/env bash
# bigc import hf of GPT2LMHeadModel (Conv1D layers, packed q/k/v as bigc.attention, gelu_new's
# tanh formula as bigc.gelu, tied LM head, learned positions sliced to the sequence) vs PyTorch
# (torch_reference.py).
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
make_config "$d/gpt2.json" gpt2 n_embd=64 n_layer=2 n_head=4 vocab_size=256 n_positions=64
"$BIN/bigc" import hf "$d/gpt2.json" --batch 4 --seq 32 -o "$d/g.mlir" 2>"$d/notes" >/dev/null
grep -q "note: dropout set to 0" "$d/notes" || { echo "FAIL: no note that dropout is set to 0"; cat "$d/notes"; exit 1; }
for op in bigc.attention bigc.gelu bigc.layernorm; do
  grep -q "$op " "$d/g.mlir" || { echo "FAIL: GPT-2 imported without $op"; exit 1; }
done
crosscheck gpt2 4 32 -- hf "$d/gpt2.json" --batch 4 --seq 32 -- --hf "$d/gpt2.json"
