#!/usr/bin/env bash
# The README's "Train on your own text", at toy size: a text corpus (64 KB of tiny Shakespeare)
# -> `bigc data encode --tokenizer` with a real tokenizer (GPT-2's tokenizer.json, test/data/) ->
# `bigc import hf` of a small LLaMA-shaped config with that tokenizer's vocabulary (50,257) ->
# `bigc compile` with warmup and a cosine decay -> `bigc run` with validation and --save-hf ->
# `from_pretrained` on the result, whose loss on the validation batches equals bigc's last
# val_loss (fp32, 1e-7 relative; measured 1e-8). Also: the loss falls, the rate follows the schedule, and the
# validation file is the text's last tenth.
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/../data
source "$HERE/python_env.shlib" # PY, or exit 77
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
gzip -dc "$DATA/gpt2-tokenizer.json.gz" >"$d/tokenizer.json"
cat >"$d/config.json" <<'EOF'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50257, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
EOF
set -e
"$BIN/bigc" data encode "$DATA/shakespeare-64k.txt" --tokenizer "$d/tokenizer.json" -o "$d/train.bin" \
  --val-fraction 0.1 --quiet | tee "$d/encode.txt"
"$BIN/bigc" import hf "$d/config.json" --batch 4 --seq 64 -o "$d/llama.mlir"
"$BIN/bigc" compile "$d/llama.mlir" --lr 3e-3 --lr-schedule cosine --warmup-steps 5 --decay-steps 40 --min-lr 3e-4 \
  -o "$d/llama.bigc" --quiet
"$BIN/bigc" run "$d/llama.bigc" --data "$d/train.bin" --val-data "$d/train_val.bin" --eval-every 10 --steps 40 \
  --log "$d/train.jsonl" --save-hf "$d/out" 2>&1 | grep -E "val loss|bigc run: (initial|[0-9]+ steps)"
set +e
grep -q "to $d/train.bin .*validation: [0-9,]* tokens to $d/train_val.bin" "$d/encode.txt" || bad "encode: $(cat "$d/encode.txt")"
"$PY" - "$d" <<'PY' || fail=1
import json, logging, io, math, struct, sys
import numpy as np, torch, transformers
from transformers import AutoModelForCausalLM
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/train.jsonl")]
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m)
    ok &= bool(c)
first, last = sum(r["loss"] for r in rows[:5]) / 5, sum(r["loss"] for r in rows[-5:]) / 5
check(last < first - 1.0, f"the training loss falls: {first:.3f} (steps 1-5) -> {last:.3f} (steps 36-40)")
lr = lambda i: 3e-3 * (i + 1) / 5 if i < 5 else 3e-4 + (3e-3 - 3e-4) * 0.5 * (1 + math.cos(math.pi * (i - 5) / 35))
check(all(abs(r["lr"] - lr(r["step"] - 1)) <= 1e-7 * lr(r["step"] - 1) for r in rows),
      f"the rate follows warmup and the cosine: {rows[0]['lr']:.2e}, {rows[5]['lr']:.2e}, {rows[-1]['lr']:.2e}")
val = [r for r in rows if "val_loss" in r]
check([r["step"] for r in val] == [10, 20, 30, 40], f"val_loss after steps {[r['step'] for r in val]}")
tr = np.fromfile(f"{d}/train.bin", dtype="<i4", count=256)
va = np.fromfile(f"{d}/train_val.bin", dtype="<i4", count=256)
check(tr[0] == 20240520 and tr[3] == 50257 and 0.08 < va[2] / (tr[2] + va[2]) < 0.12,
      f"llm.c uint16 files, vocabulary 50257 in the header: {tr[2]} training and {va[2]} validation tokens")
# from_pretrained on the result: no missing or unexpected weights; its loss on the same batches.
log = io.StringIO()
transformers.logging.set_verbosity_info()
transformers.logging.disable_progress_bar()
transformers.logging.add_handler(logging.StreamHandler(log))
m = AutoModelForCausalLM.from_pretrained(f"{d}/out")
m.eval()
text = log.getvalue().lower()
check(not any(w in text for w in ("missing", "unexpected", "newly initialized")), "from_pretrained: no missing or "
      "unexpected weights")
raw = open(f"{d}/train_val.bin", "rb").read()
n = struct.unpack("<256i", raw[:1024])[2]
t = np.frombuffer(raw[1024:1024 + 2 * n], dtype="<u2").astype(np.int64)
B, T = 4, 64
nb = min(20, (n - 1) // (B * T))
losses = []
with torch.no_grad():
    for j in range(nb):
        x = torch.tensor(t[j * B * T:(j + 1) * B * T]).view(B, T)
        y = torch.tensor(t[j * B * T + 1:(j + 1) * B * T + 1]).view(B, T)
        lg = m(input_ids=x).logits
        losses.append(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item())
got, want = sum(losses) / nb, val[-1]["val_loss"]
check(abs(got - want) <= 1e-7 * want, f"from_pretrained's loss on the {nb} validation batches {got:.7f}, bigc's "
      f"val_loss after step 40 {want:.7f} ({abs(got - want) / want:.1e})")
sys.exit(0 if ok else 1)
PY
exit $fail
