#!/usr/bin/env bash
# `python -m bigc_data encode` (the Python side of `bigc data encode --tokenizer`) against an
# independent reference: the tokenizers library's own encode() of each document in this test's
# Python, and numpy reading the llm.c token files. Tokenizers trained here: a byte-level BPE
# (GPT-2 style), a WordLevel with 70,000 words (uint32 files); a multi-MB document cut into pieces
# gives exactly the whole document's tokens; the validation split; the driver's protocol
# (BIGC_RESULT_FD, BIGC_STAGING); bad input: exit 1, one line naming the problem, nothing written.
# $1 (the build's bin dir) is not needed: only the project's Python environment.
set -euo pipefail
source "$(dirname "$0")/python_env.shlib"
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
d=$(mktemp -d /tmp/bigc-data-encode.XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
enc() { "$PY" -m bigc_data encode "$@"; }

# ---- fixtures: text, JSON lines, tokenizers -------------------------------------------------
cat > "$d/check.py" <<'EOF'
import json, math, sys
from fractions import Fraction
import numpy as np
from tokenizers import Tokenizer

def read(path):
    h = np.fromfile(path, dtype="<i4", count=256)
    dt = {(20240520, 1): "<u2", (20240801, 7): "<u4"}[(int(h[0]), int(h[1]))]
    t = np.fromfile(path, dtype=dt, offset=1024)
    assert t.size == h[2], f"{path}: header says {h[2]} tokens, file holds {t.size}"
    assert not h[4:].any(), f"{path}: header[4:] not zero"
    return h, t

def docs_of(specs):
    docs = []
    for s in specs:
        if s.startswith("jsonl:"):
            _, field, path = s.split(":", 2)
            docs += [json.loads(l)[field] for l in open(path, encoding="utf-8") if l.strip()]
        else:
            docs.append(open(s, encoding="utf-8", newline="").read())
    return docs

def reference(tok_path, sep, specs):
    tok = Tokenizer.from_file(tok_path)
    tok.no_truncation()
    stream, starts = [], []
    for doc in docs_of(specs):
        starts.append(len(stream))
        if sep != "none":
            stream.append(tok.token_to_id(sep))
        stream += tok.encode(doc, add_special_tokens=False).ids
    return tok, np.array(stream, dtype=np.int64), starts

# expect OUT TOKENIZER SEP [--val VAL F] DOC...   (DOC: a text file, or jsonl:FIELD:FILE)
cmd, out, tok_path, sep, *rest = sys.argv[1:]
val = None
if rest[0] == "--val":
    val, frac, rest = rest[1], Fraction(rest[2]), rest[3:]
tok, ref, starts = reference(tok_path, sep, rest)
vocab = tok.get_vocab_size(with_added_tokens=True)
h, t = read(out)
want_layout = (20240520, 1) if vocab <= 65536 else (20240801, 7)
assert (h[0], h[1]) == want_layout, f"magic/version {h[:2]} for vocabulary {vocab}"
assert h[3] == vocab, f"header[3] {h[3]} != vocabulary {vocab}"
got = t.astype(np.int64)
if val is not None:
    hv, tv = read(val)
    assert tuple(hv[[0, 1, 3]]) == tuple(h[[0, 1, 3]])
    n = ref.size
    cut = math.ceil(n * (1 - frac))
    s = next((p for p in starts if p >= cut), None) if len(starts) >= 2 else None
    if s is None or s >= n:
        s = cut
    assert got.size == s, f"the split is at {got.size}, expected {s} (of {n}; document starts {starts[:8]}...)"
    got = np.concatenate([got, tv.astype(np.int64)])
assert got.size == ref.size, f"{got.size} tokens, the reference has {ref.size}"
bad = np.nonzero(got != ref)[0]
assert bad.size == 0, f"token {bad[0]} differs: {got[bad[0]]} != {ref[bad[0]]}"
print(f"ok: {out}: {ref.size} tokens, {len(starts)} documents, vocabulary {vocab}, max id {ref.max()}")
EOF

"$PY" - "$d" <<'EOF'
import json, random, sys, os
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders, normalizers
d = sys.argv[1]
rng = random.Random(7)
words = ["the", "king", "queen", "said", "and", "of", "to", "a", "in", "that", "is", "was", "he", "for",
         "it", "with", "as", "his", "on", "be", "at", "by", "I", "Brutus", "Rome", "naïve", "café", "日本語",
         "don't", "we'll", "3.14", "2024", "(x)", "--", "!?", "😀"]
seps = [" ", " ", " ", " ", "  ", ", ", ". ", "\n", "\n", "\n\n", " \n", "\t", "\r\n", "\n   ", "\u00a0"]
def text(n):
    out = []
    for _ in range(n):
        out.append(rng.choice(words))
        out.append(rng.choice(seps))
    return "".join(out)
os.makedirs(f"{d}/in", exist_ok=True)
train_text = text(3000)
open(f"{d}/in/a.txt", "w", encoding="utf-8", newline="").write(text(400))
open(f"{d}/in/b.txt", "w", encoding="utf-8", newline="").write("  leading spaces\n" + text(300) + "\n\n")
with open(f"{d}/in/c.jsonl", "w", encoding="utf-8") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "body": text(rng.randint(0, 60))}) + "\n")
        if i % 7 == 0:
            f.write("\n")
# A multi-MB document: many lines, cut points, and lines that must not be cut at.
with open(f"{d}/in/big.txt", "w", encoding="utf-8", newline="") as f:
    while f.tell() < 3_000_000:
        f.write(text(200))

# Byte-level BPE, GPT-2 style: ByteLevel pre-tokenizer without prefix space, no normalizer.
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([train_text], trainers.BpeTrainer(
    vocab_size=600, special_tokens=["<|endoftext|>", "<|doc|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
tok.enable_truncation(max_length=8)  # saved in the file: the encoder must ignore it
tok.save(f"{d}/bpe.json")
# The same as a model directory whose tokenizer_config.json names a BOS token.
os.makedirs(f"{d}/model", exist_ok=True)
tok.save(f"{d}/model/tokenizer.json")
json.dump({"bos_token": {"content": "<|doc|>", "__type": "AddedToken"}, "eos_token": "<|endoftext|>"},
          open(f"{d}/model/tokenizer_config.json", "w"))
# ByteLevel with a prefix space: documents are never cut.
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
tok.save(f"{d}/bpe_prefix.json")

# WordLevel with 70,000 words: ids above 65,535, so uint32 files.
vocab = {f"w{i}": i for i in range(70000)}
vocab["[UNK]"] = 70000
wl = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
wl.add_special_tokens(["</s>"])
wl.save(f"{d}/wordlevel.json")
with open(f"{d}/in/w.txt", "w") as f:
    f.write(" ".join(f"w{rng.choice([rng.randrange(70000), rng.randrange(65536, 70000)])}" for _ in range(5000)))
    f.write(" unknown-word w69999\n")
with open(f"{d}/in/w2.txt", "w") as f:
    f.write("w0 w65535 w65536 w69999")
open(f"{d}/in/bad_utf8.txt", "wb").write("fine text\n".encode() * 10 + b"caf\xe9\n")
with open(f"{d}/in/surrogate.jsonl", "w") as f:
    f.write('{"text": "an emoji \\ud83d\\ude00 escaped as a pair is fine"}\n{"text": "a lone \\udc00 is not"}\n')
with open(f"{d}/in/bad.jsonl", "w") as f:
    f.write('{"text": "one"}\n{"text": "two"}\n{"text": "three",}\n')
open(f"{d}/not_a_tokenizer.json", "w").write('{"version": "1.0", "model": {"type": "BPE", "vocab": 3}}')
EOF
check() { "$PY" "$d/check.py" expect "$@"; }

# ---- 1. byte-level BPE: two text files, the header, [sep] + encode(doc) per document ---------
mkdir "$d/out"
enc "$d/in/a.txt" "$d/in/b.txt" --tokenizer "$d/bpe.json" -o "$d/out/ab.bin" --quiet > "$d/summary"
grep -q "^bigc data: wrote [0-9,]* tokens (uint16, vocabulary [0-9,]*) to $d/out/ab.bin in .*2 documents, each after <|endoftext|> (0)$" "$d/summary" ||
  fail "summary line: $(cat "$d/summary")"
check "$d/out/ab.bin" "$d/bpe.json" "<|endoftext|>" "$d/in/a.txt" "$d/in/b.txt"
# The model directory: tokenizer_config.json's bos_token is the separator.
enc "$d/in/a.txt" "$d/in/b.txt" --tokenizer "$d/model" -o "$d/out/ab_dir.bin" --quiet | grep -q "each after <|doc|> (1)$" ||
  fail "the model directory's bos_token was not the separator"
check "$d/out/ab_dir.bin" "$d/model/tokenizer.json" "<|doc|>" "$d/in/a.txt" "$d/in/b.txt"
enc "$d/in/a.txt" "$d/in/b.txt" --tokenizer "$d/bpe.json" -o "$d/out/none.bin" --separator none --quiet > /dev/null
check "$d/out/none.bin" "$d/bpe.json" none "$d/in/a.txt" "$d/in/b.txt"

# ---- 2. JSON lines with --text-field (blank lines skipped), mixed with text ------------------
enc "$d/in/c.jsonl" "$d/in/a.txt" --text-field body --tokenizer "$d/bpe.json" -o "$d/out/c.bin" --quiet > /dev/null
check "$d/out/c.bin" "$d/bpe.json" "<|endoftext|>" "jsonl:body:$d/in/c.jsonl" "$d/in/a.txt"

# ---- 3. the validation split: at a document start, or the exact position for one document -----
for f in 0.1 0.37 0.5; do
  enc "$d/in/c.jsonl" --text-field body --tokenizer "$d/bpe.json" -o "$d/out/s.bin" --val-fraction $f --quiet > "$d/summary"
  grep -q "validation: [0-9,]* tokens to $d/out/s_val.bin" "$d/summary" || fail "no validation in: $(cat "$d/summary")"
  check "$d/out/s.bin" "$d/bpe.json" "<|endoftext|>" --val "$d/out/s_val.bin" $f "jsonl:body:$d/in/c.jsonl"
done
enc "$d/in/a.txt" --tokenizer "$d/bpe.json" -o "$d/out/one.bin" --val-fraction 0.25 --val-output "$d/out/v.bin" --quiet > /dev/null
check "$d/out/one.bin" "$d/bpe.json" "<|endoftext|>" --val "$d/out/v.bin" 0.25 "$d/in/a.txt"
# Two documents, no document start in the last 1%: the exact position.
enc "$d/in/a.txt" "$d/in/b.txt" --tokenizer "$d/bpe.json" -o "$d/out/two.bin" --val-fraction 0.01 --quiet > /dev/null
check "$d/out/two.bin" "$d/bpe.json" "<|endoftext|>" --val "$d/out/two_val.bin" 0.01 "$d/in/a.txt" "$d/in/b.txt"

# ---- 4. a vocabulary of 70,000: uint32 (magic 20240801, version 7), ids above 65,535 ----------
enc "$d/in/w.txt" "$d/in/w2.txt" --tokenizer "$d/wordlevel.json" -o "$d/out/w.bin" --quiet > "$d/summary"
grep -q "(uint32, vocabulary 70,002)" "$d/summary" && grep -q "each after </s> (70001)" "$d/summary" ||
  fail "uint32 summary: $(cat "$d/summary")"
check "$d/out/w.bin" "$d/wordlevel.json" "</s>" "$d/in/w.txt" "$d/in/w2.txt" | tee "$d/w.log"
grep -q "max id 70001" "$d/w.log" || fail "no id above 65,535 in the uint32 file"

# ---- 5. a 3 MB byte-level document cut into pieces == the whole document's tokens --------------
for piece in 8192 300; do
  BIGC_DATA_PIECE_BYTES=$piece enc "$d/in/big.txt" "$d/in/a.txt" --tokenizer "$d/bpe.json" -o "$d/out/big.bin" \
    --threads 2 --quiet > /dev/null 2> "$d/err"
  n=$(sed -n 's/^bigc data: debug: \([0-9]*\) pieces$/\1/p' "$d/err")
  [ "${n:-0}" -gt 100 ] || fail "the 3 MB document was not cut into pieces of $piece bytes ($(cat "$d/err"))"
  check "$d/out/big.bin" "$d/bpe.json" "<|endoftext|>" "$d/in/big.txt" "$d/in/a.txt"
done
# Tokenizers for which cutting is not provably exact encode each document whole.
for t in bpe_prefix wordlevel; do
  in=$d/in/a.txt; [ $t = wordlevel ] && in=$d/in/w.txt
  BIGC_DATA_PIECE_BYTES=300 enc "$in" --tokenizer "$d/$t.json" -o "$d/out/whole.bin" --separator none --quiet > /dev/null 2> "$d/err"
  grep -q "^bigc data: debug: 1 pieces$" "$d/err" || fail "$t: a document was cut: $(cat "$d/err")"
  check "$d/out/whole.bin" "$d/$t.json" none "$in"
done

# ---- 6. under the bigc driver: staged files, one JSON object on BIGC_RESULT_FD ----------------
mkdir "$d/final" "$d/stage"
BIGC_STAGING="{\"$d/final\": \"$d/stage\"}" BIGC_RESULT_FD=3 enc "$d/in/c.jsonl" --text-field body \
  --tokenizer "$d/bpe.json" -o "$d/final/t.bin" --val-fraction 0.3 --quiet 3> "$d/result.json" > "$d/stdout"
[ ! -s "$d/stdout" ] || fail "a summary on stdout under the driver: $(cat "$d/stdout")"
[ -z "$(ls -A "$d/final")" ] || fail "files written in place under the driver: $(ls -A "$d/final")"
"$PY" - "$d" <<'EOF' || fail "driver result: $(cat "$d/result.json")"
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/result.json"))
assert r["files"] == [f"{d}/final/t.bin", f"{d}/final/t_val.bin"], r
assert r["message"].startswith("bigc data: wrote ") and "validation:" in r["message"], r
EOF
check "$d/stage/t.bin" "$d/bpe.json" "<|endoftext|>" --val "$d/stage/t_val.bin" 0.3 "jsonl:body:$d/in/c.jsonl"
rm -f "$d/stage/"*
set +e
BIGC_STAGING="{\"$d/final\": \"$d/stage\"}" BIGC_RESULT_FD=3 enc "$d/in/a.txt" --tokenizer "$d/bpe.json" \
  -o "$d/final/t.bin" --separator "<nope>" 3> "$d/result.json" 2> "$d/err"
rc=$?
BIGC_STAGING="{\"$d/elsewhere\": \"$d/stage\"}" BIGC_RESULT_FD=3 enc "$d/in/a.txt" --tokenizer "$d/bpe.json" \
  -o "$d/final/t.bin" 3> "$d/result2.json" 2> "$d/err2"
rc2=$?
set -e
[ $rc = 1 ] && grep -q '^{"error": "bigc data: --separator' "$d/result.json" || fail "driver, user error: rc $rc, $(cat "$d/result.json")"
[ $rc2 = 2 ] && grep -q '^{"error": "bigc data: internal error' "$d/result2.json" ||
  fail "driver, output directory missing from BIGC_STAGING: rc $rc2, $(cat "$d/result2.json") $(cat "$d/err2")"
[ -z "$(ls -A "$d/final" "$d/stage" | grep -v ':$' | grep .)" ] || fail "files left after driver errors: $(ls -A "$d/final" "$d/stage")"

# ---- 7. bad input: exit 1, one line naming the problem, no output file -----------------------
mkdir "$d/bad"
bad() { # EXPECTED-SUBSTRING ARGS...
  local want=$1; shift
  set +e
  enc "$@" -o "$d/bad/out.bin" > "$d/bad.out" 2> "$d/bad.err"
  local rc=$?
  set -e
  [ $rc = 1 ] || fail "exit $rc (not 1) for: $* ($(cat "$d/bad.err"))"
  [ "$(wc -l < "$d/bad.err")" = 1 ] || fail "not one line for: $*: $(cat "$d/bad.err")"
  grep -qF -- "$want" "$d/bad.err" && grep -q "^bigc data: " "$d/bad.err" ||
    fail "for: $*: expected '$want' in: $(cat "$d/bad.err")"
  [ -z "$(ls -A "$d/bad")" ] || fail "files left for: $*: $(ls -A "$d/bad")"
  echo "ok (exit 1): $(cat "$d/bad.err")"
}
bad "$d/in/a.txt: not a tokenizer.json (not a JSON object" "$d/in/a.txt" --tokenizer "$d/in/a.txt"
bad "$d/not_a_tokenizer.json: the tokenizers library cannot load it" "$d/in/a.txt" --tokenizer "$d/not_a_tokenizer.json"
bad "$d/in: a directory without tokenizer.json" "$d/in/a.txt" --tokenizer "$d/in"
bad "--separator '<|nope|>': not a token of the tokenizer" "$d/in/a.txt" --tokenizer "$d/bpe.json" --separator "<|nope|>"
bad "--val-output needs --val-fraction" "$d/in/a.txt" --tokenizer "$d/bpe.json" --val-output "$d/bad/v.bin"
bad "$d/in/bad.jsonl:3: not valid JSON" "$d/in/bad.jsonl" --tokenizer "$d/bpe.json"
bad "$d/in/c.jsonl:1: no 'text' field (it has: id, body)" "$d/in/c.jsonl" --tokenizer "$d/bpe.json"
bad "$d/in/surrogate.jsonl:2: the document holds an unpaired surrogate U+DC00" "$d/in/surrogate.jsonl" --tokenizer "$d/bpe.json"
bad "$d/in/missing.txt: no such file" "$d/in/a.txt" "$d/in/missing.txt" --tokenizer "$d/bpe.json"
bad "$d/in/bad_utf8.txt: not valid UTF-8 text (byte offset 103" "$d/in/bad_utf8.txt" --tokenizer "$d/bpe.json"
bad "--val-fraction 1.5: must be between 0 and 1" "$d/in/a.txt" --tokenizer "$d/bpe.json" --val-fraction 1.5
bad "leaves the validation file with" "$d/in/w2.txt" --tokenizer "$d/wordlevel.json" --val-fraction 0.01
# A bad line after many good ones: found mid-stream, still nothing written.
"$PY" -c "
import json
with open('$d/in/late.jsonl', 'w') as f:
    for i in range(20000): f.write(json.dumps({'text': 'line %d of the file' % i}) + '\n')
    f.write('{\"text\": 7}\n')"
bad "$d/in/late.jsonl:20001: the 'text' field is a JSON number, not a string" "$d/in/late.jsonl" --tokenizer "$d/bpe.json"
set +e
enc "$d/in/a.txt" --tokenizer "$d/bpe.json" -o "$d/nodir/out.bin" 2> "$d/bad.err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "the directory $d/nodir does not exist" "$d/bad.err" || fail "missing output directory: $(cat "$d/bad.err")"
echo "ok: bigc data encode --tokenizer (python -m bigc_data)"
