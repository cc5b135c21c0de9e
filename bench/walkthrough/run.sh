#!/usr/bin/env bash
# The README's "Train on your own text" at a size worth a figure: a corpus -> `bigc data encode
# --tokenizer` (5% for validation) -> `bigc import hf` of a LLaMA-shaped config (4 layers, 256 wide,
# tied embeddings, the tokenizer's vocabulary) -> `bigc compile` with warmup and a cosine decay ->
# `bigc run` with validation every 100 steps and --save-hf -> `bigc eval` of the result in its own
# memory plan -> `from_pretrained` on the result and its loss on the same validation batches.
# Prints the figures docs/performance.md records: tokens, time, training and validation loss,
# the evaluation's memory against the step's.
#
#   bench/walkthrough/run.sh [TOKENIZER.json [CORPUS.txt [STEPS]]]
#       defaults: test/data/gpt2-tokenizer.json.gz (GPT-2's tokenizer.json),
#       test/data/shakespeare-64k.txt (the docs' figure: the whole tiny Shakespeare), 300 steps.
#   Environment: BIGC (default build/bin/bigc), BIGC_PYTHON (default .venv/bin/python), WORK,
#   VAL_FRACTION (0.05; the 64 KB default corpus needs 0.1 for one validation batch).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIGC=${BIGC:-$ROOT/build/bin/bigc}
PY=${BIGC_PYTHON:-$ROOT/.venv/bin/python}
TOK=${1:-}
CORPUS=${2:-$ROOT/test/data/shakespeare-64k.txt}
STEPS=${3:-300}
W=${WORK:-$(mktemp -d /tmp/bigc-walkthrough.XXXXXX)}
mkdir -p "$W"
if [ -z "$TOK" ]; then
  TOK=$W/gpt2-tokenizer.json
  gzip -dc "$ROOT/test/data/gpt2-tokenizer.json.gz" >"$TOK"
fi
for f in "$TOK" "$CORPUS" "$BIGC" "$PY"; do
  [ -e "$f" ] || { echo "bench/walkthrough: $f: not there (usage: run.sh [TOKENIZER.json [CORPUS.txt [STEPS]]])" >&2; exit 1; }
done
TOK=$(realpath "$TOK") CORPUS=$(realpath "$CORPUS") BIGC=$(realpath "$BIGC")
VOCAB=$("$PY" -c "import json, sys; t = json.load(open(sys.argv[1])); m = t['model']['vocab']; print(max(len(m), 1 + max(m.values()), *[1 + a['id'] for a in t.get('added_tokens', [])]))" "$TOK")
cat >"$W/config.json" <<JSON
{"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": $VOCAB, "max_position_embeddings": 256,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
JSON
cd "$W"
"$BIGC" data encode "$CORPUS" --tokenizer "$TOK" -o train.bin --val-fraction "${VAL_FRACTION:-0.05}"
"$BIGC" import hf config.json --batch 8 --seq 128 -o llama.mlir
"$BIGC" compile llama.mlir --lr 1e-3 --lr-schedule cosine --warmup-steps $((STEPS / 10)) --decay-steps "$STEPS" \
  --min-lr 1e-4 -o llama.bigc --quiet
"$BIGC" inspect llama.bigc | grep -E "^(evaluation|parameters|learning rate)"
# Validation batches: as many of 8 x 128 tokens as the file holds (and one more token), at most 16.
EB=$("$PY" -c "import struct; n = struct.unpack('<256i', open('train_val.bin', 'rb').read(1024))[2]; print(min(16, (n - 1) // 1024))")
[ "$EB" -ge 1 ] || { echo "bench/walkthrough: the validation file holds less than one batch of 8 x 128 tokens: a larger corpus, or VAL_FRACTION=0.1" >&2; exit 1; }
/usr/bin/time -f "bigc run: %e s wall, max RSS %M KB" "$BIGC" run llama.bigc --data train.bin --val-data train_val.bin \
  --eval-every 100 --eval-batches "$EB" --steps "$STEPS" --log train.jsonl --save-hf out 2>&1 |
  grep -E "val loss|bigc run:"
/usr/bin/time -f "bigc eval: %e s wall, max RSS %M KB" "$BIGC" eval llama.bigc --data train_val.bin \
  --eval-batches "$EB" --load-weights out
"$PY" - "$EB" <<'PY'
import json, struct, sys
import numpy as np, torch
from transformers import AutoModelForCausalLM
nb, B, T = int(sys.argv[1]), 8, 128
m = AutoModelForCausalLM.from_pretrained("out", dtype=torch.float32).eval()
raw = open("train_val.bin", "rb").read()
h = struct.unpack("<256i", raw[:1024])
toks = np.frombuffer(raw[1024:], dtype=np.uint16 if h[1] == 1 else np.uint32).astype(np.int64)
tot = 0.0
with torch.no_grad():
    for j in range(nb):
        x = torch.tensor(toks[j * B * T:(j + 1) * B * T + 1])
        lo = m(x[:-1].view(B, T)).logits
        tot += torch.nn.functional.cross_entropy(lo.view(-1, lo.size(-1)), x[1:].view(-1)).item()
rows = [json.loads(l) for l in open("train.jsonl")]
print(f"trained: {len(rows)} steps, {len(rows) * B * T:,} tokens, {rows[-1]['elapsed_s']:.0f} s; "
      f"final training loss {rows[-1]['loss']:.4f}; val_loss " +
      ", ".join(f"{r['val_loss']:.4f} (step {r['step']})" for r in rows if 'val_loss' in r))
print(f"from_pretrained on the result: loss {tot / nb:.6f} on the same {nb} validation batches")
PY
echo "bench/walkthrough: files in $W"
