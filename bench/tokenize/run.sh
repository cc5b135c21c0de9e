#!/usr/bin/env bash
# Speed of `bigc data encode --tokenizer` against the tokenizers library's own encode_batch
# (bench.py): MB/s of text for (a) `python -m bigc_data encode` end to end and (b) one
# encode_batch call over the same documents on the same threads (file reading excluded), and
# the ratio (target: (a) >= 0.80 of (b)). The corpus is repeated to about TARGET_MB (32) MB and run
# twice: as one plain text document, and as JSON lines with one document per paragraph.
#
#   bench/tokenize/run.sh [TOKENIZER.json [CORPUS.txt [THREADS]]]
#       defaults: test/data/gpt2-tokenizer.json.gz (GPT-2's tokenizer.json) and
#       test/data/shakespeare-64k.txt (64 KB of char-rnn's tiny Shakespeare; any text file, the
#       whole tiny Shakespeare for the docs' figures), all cores.
#   Environment: BIGC_PYTHON (default .venv/bin/python), TARGET_MB, REPS (3), WORK (a temp dir).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${BIGC_PYTHON:-$ROOT/.venv/bin/python}
TOK=${1:-}
CORPUS=${2:-$ROOT/test/data/shakespeare-64k.txt}
THREADS=${3:-$(nproc)}
W=${WORK:-$(mktemp -d /tmp/bigc-tokenize-bench.XXXXXX)}
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
if [ -z "$TOK" ]; then
  TOK=$W/gpt2-tokenizer.json
  gzip -dc "$ROOT/test/data/gpt2-tokenizer.json.gz" >"$TOK"
fi
for f in "$TOK" "$CORPUS"; do
  [ -f "$f" ] || { echo "bench/tokenize: $f: no such file (usage: run.sh [TOKENIZER.json [CORPUS.txt [THREADS]]])" >&2; exit 1; }
done
"$PY" "$ROOT/bench/tokenize/bench.py" --tokenizer "$TOK" --corpus "$CORPUS" --work "$W" \
  --threads "$THREADS" --target-mb "${TARGET_MB:-32}" --reps "${REPS:-3}" --python "$PY"
