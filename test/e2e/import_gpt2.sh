#!/usr/bin/env bash
# bigc import hf of GPT2LMHeadModel (Conv1D layers, packed q/k/v as bigc.attention, gelu_new's
# tanh formula as bigc.gelu, tied LM head, learned positions sliced to the sequence) vs PyTorch
# (torch_reference.py); and a vocabulary of 251 padded by `bigc compile --pad-vocab 64` against the
# same reference.
source "$(dirname "$0")/import_crosscheck.shlib" "$1"
make_config "$d/gpt2.json" gpt2 n_embd=64 n_layer=2 n_head=4 vocab_size=256 n_positions=64
"$BIN/bigc" import hf "$d/gpt2.json" --batch 4 --seq 32 -o "$d/g.mlir" 2>"$d/notes" >/dev/null
grep -q "note: dropout set to 0" "$d/notes" || { echo "FAIL: no note that dropout is set to 0"; cat "$d/notes"; exit 1; }
for op in bigc.attention bigc.gelu bigc.layernorm; do
  grep -q "$op " "$d/g.mlir" || { echo "FAIL: GPT-2 imported without $op"; exit 1; }
done
crosscheck gpt2 4 32 -- hf "$d/gpt2.json" --batch 4 --seq 32 -- --hf "$d/gpt2.json"
# The vocabulary padded by the compiler (--pad-vocab 64: 251 rows -> 256): the imported weights
# (251 rows) load into the padded tables, the gradients and final weights come out in the model's
# shapes, all against the same PyTorch reference.
make_config "$d/gpt2_pad.json" gpt2 n_embd=64 n_layer=2 n_head=4 vocab_size=251 n_positions=64
COMPILE_FLAGS="--pad-vocab 64" crosscheck gpt2_pad 4 32 -- hf "$d/gpt2_pad.json" --batch 4 --seq 32 -- \
  --hf "$d/gpt2_pad.json"
grep -q "lm_head.weight\" : tensor<251x64xf32>" "$d/gpt2_pad.mlir" && ! grep -q "bigc.vocab_rows" "$d/gpt2_pad.mlir" ||
  { echo "FAIL: the import itself padded (or named its head otherwise)"; grep "lm_head" "$d/gpt2_pad.mlir" | head -3; exit 1; }
"$BIN/bigc" inspect "$d/gpt2_pad.bigc" | grep -q "vocabulary padded (--pad-vocab): 251 -> 256 rows of" ||
  { echo "FAIL: the program is not padded"; exit 1; }
echo "ok: the imported GPT-2 with its vocabulary padded by the compiler"
