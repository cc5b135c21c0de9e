#!/usr/bin/env bash
# A vocabulary beyond 16 bits, end to end: a word-level tokenizer of 70,002 ids (trained in the test
# with `tokenizers`), text whose words are mostly ids above 65,535, `bigc data encode --tokenizer`
# (llm.c's uint32 layout: magic 20240801, version 7), a LLaMA-shaped model of that vocabulary
# (`bigc import hf`) trained on the file: step 1's loss equals PyTorch's (transformers, the same
# initial weights, the same first batch, which holds ids above 65,535) to 1e-6. The same tokens as a
# raw file without a header: refused without --data-dtype (the width is not known; never misread),
# read with --data-dtype u32 (the same loss). A model of 256 ids refuses the file (its header names
# the tokenizer's vocabulary).
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/python_env.shlib" # PY, or exit 77
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
"$PY" - "$d" <<'PY'
import json, random, sys
from tokenizers import Tokenizer, models, pre_tokenizers
d = sys.argv[1]
vocab = {"[UNK]": 0, "<|endoftext|>": 1}
for i in range(70000):
    vocab[f"w{i}"] = i + 2
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.add_special_tokens(["<|endoftext|>"])
tok.save(f"{d}/tokenizer.json")
random.seed(11)
words = [f"w{random.randrange(65000, 70000) if random.random() < 0.8 else random.randrange(70000)}" for _ in range(6000)]
open(f"{d}/text.txt", "w").write(" ".join(words) + "\n")
json.dump({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 70002, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5}, open(f"{d}/config.json", "w"))
PY
"$BIN/bigc" data encode "$d/text.txt" --tokenizer "$d/tokenizer.json" -o "$d/t.bin" --quiet >"$d/enc.txt" ||
  { bad "encode"; exit 1; }
grep -q "uint32, vocabulary 70,002" "$d/enc.txt" || bad "not a 32-bit file: $(cat "$d/enc.txt")"
"$BIN/bigc" import hf "$d/config.json" --batch 2 --seq 32 -o "$d/m.mlir" >/dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --quiet
"$BIN/bigc" run "$d/m.bigc" --steps 0 --save-weights "$d/init.safetensors" --quiet
"$BIN/bigc" run "$d/m.bigc" --data "$d/t.bin" --steps 3 --log "$d/a.jsonl" --quiet || bad "run on the uint32 file"
# The same tokens without a header.
"$PY" -c "import numpy as np, sys
a = np.fromfile(sys.argv[1], dtype='<u4'); np.asarray(a[256:], dtype='<u4').tofile(sys.argv[2])" "$d/t.bin" "$d/raw.bin"
"$BIN/bigc" run "$d/m.bigc" --data "$d/raw.bin" --steps 1 --quiet 2>"$d/err" && bad "a raw file read without --data-dtype"
grep -q "has no llm.c header (raw tokens), so its token width is not known, and the model's vocabulary of 70,002 ids does not fit in 16 bits: give --data-dtype u32" "$d/err" ||
  bad "raw without --data-dtype: $(cat "$d/err")"
"$BIN/bigc" run "$d/m.bigc" --data "$d/raw.bin" --data-dtype u32 --steps 3 --log "$d/b.jsonl" --quiet || bad "--data-dtype u32"
cmp -s <(cut -d, -f1-2 "$d/a.jsonl") <(cut -d, -f1-2 "$d/b.jsonl") || bad "the raw file with --data-dtype u32 trains otherwise"
echo "ok: a raw uint32 file: refused without --data-dtype, trained with --data-dtype u32 like the encoded file"
# A file encoded for a larger vocabulary than the model's: refused by its header, before any step.
"$BIN/bigc" gen gpt --preset tiny -o "$d/small.mlir" >/dev/null && "$BIN/bigc" compile "$d/small.mlir" -o "$d/small.bigc" --quiet
"$BIN/bigc" run "$d/small.bigc" --data "$d/t.bin" --steps 1 --quiet 2>"$d/err" && bad "a 70,002-id file trained a 256-id model"
grep -q "encoded with a tokenizer of 70,002 ids (its header says), larger than the model's vocabulary of 256" "$d/err" ||
  bad "vocabulary: $(cat "$d/err")"
echo "ok: refused: $(cut -c1-150 "$d/err")"
"$PY" - "$d" <<'PY' || fail=1
import json, sys, numpy as np, torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM
d = sys.argv[1]
raw = np.fromfile(f"{d}/t.bin", dtype="<u4")
head = raw[:256].view("<i4")
assert head[0] == 20240801 and head[1] == 7 and head[3] == 70002, head[:4]
t = raw[256:].astype(np.int64)
B, T = 2, 32
x, y = torch.tensor(t[:B * T]).view(B, T), torch.tensor(t[1:B * T + 1]).view(B, T)
m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(f"{d}/config.json"))
m.load_state_dict(load_file(f"{d}/init.safetensors"), strict=True)  # bigc run's initial weights
m.eval()
with torch.no_grad():
    lg = m(input_ids=x).logits
    ref = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()
got = json.loads(open(f"{d}/a.jsonl").readline())["loss"]
high = int((x > 65535).sum())
err = abs(got - ref) / ref
ok = err <= 1e-6 and high > 0
print(f"{'ok  ' if ok else 'FAIL'} step 1 on the encoded uint32 file ({high} of {B * T} ids above 65,535, the largest "
      f"{int(x.max())}): bigc's loss {got:.7f}, PyTorch's {ref:.7f} (relative difference {err:.1e})")
sys.exit(0 if ok else 1)
PY
exit $fail
