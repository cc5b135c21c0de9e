#!/usr/bin/env bash
# Hugging Face checkpoints in and out, as they are (transformers in the project's environment is
# the reference):
#  out: `bigc run --save-hf DIR` and a checkpoint's directory open with
#       AutoModelForCausalLM.from_pretrained(DIR) with no missing, unexpected or newly initialised
#       weights, and give bigc's held-out loss (bigc eval) on the same batches to 1e-6 (fp32);
#       bigc's shards (--hf-shard-size) load as one; --save-weights loads into the module with
#       load_state_dict(strict=True); a tied LLaMA (the embedding once, as save_pretrained writes
#       it) and bigc gen gpt's GPT-2 (transformer. names, GPT2LMHeadModel).
#  in:  --load-weights takes what save_pretrained writes: a tied model's file (the embedding only),
#       a sharded checkpoint with its index, the directory; a file with both names of a tied weight
#       (equal) too; an untied checkpoint (lm_head differs) for a tied model is refused, so is a
#       directory without weights (a pytorch_model.bin only named).
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/python_env.shlib" # PY, or exit 77
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
cat >"$d/tied.json" <<'EOF'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 64,
 "tie_word_embeddings": true, "rms_norm_eps": 1e-5}
EOF
"$PY" - "$d" <<'PY'
import struct, sys, random
random.seed(7)
def write(path, toks, vocab):
    h = [0] * 256
    h[0], h[1], h[2], h[3] = 20240520, 1, len(toks), vocab
    open(path, "wb").write(struct.pack("<256i", *h) + struct.pack(f"<{len(toks)}H", *toks))
d = sys.argv[1]
write(f"{d}/train.bin", [random.randrange(300) for _ in range(6000)], 300)
write(f"{d}/val.bin", [random.randrange(300) for _ in range(1500)], 300)
write(f"{d}/gval.bin", [random.randrange(256) for _ in range(3000)], 256)
PY
"$BIN/bigc" import hf "$d/tied.json" --batch 2 --seq 32 -o "$d/t.mlir" >/dev/null
"$BIN/bigc" compile "$d/t.mlir" -o "$d/t.bigc" --quiet
"$BIN/bigc" run "$d/t.bigc" --data "$d/train.bin" --steps 4 --save-hf "$d/hf" --save-weights "$d/w.safetensors" \
  --checkpoint-dir "$d/ck" --quiet 2>"$d/err" || { bad "run: $(cat "$d/err")"; exit 1; }
"$BIN/bigc" run "$d/t.bigc" --data "$d/train.bin" --steps 4 --save-hf "$d/hf2" --hf-shard-size 40K --quiet
[ -f "$d/hf2/model.safetensors.index.json" ] && [ "$(ls "$d/hf2" | grep -c '^model-0000[0-9]-of-')" -ge 2 ] ||
  bad "--hf-shard-size 40K wrote no shards: $(ls "$d/hf2")"
evalof() { "$BIN/bigc" eval "$1" --data "$2" --load-weights "$3" | sed -n 's/^bigc eval: loss \([0-9.]*\) on \([0-9]*\) batches.*/\1 \2/p'; }
# fromhf DIR VAL B T "LOSS NBATCHES": from_pretrained(DIR) and its loss on the same batches.
fromhf() {
  "$PY" - "$@" <<'PY'
import io, logging, struct, sys, numpy as np, torch
import transformers
from transformers import AutoModelForCausalLM
path, val, B, T, expect = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()
log = io.StringIO()
h = logging.StreamHandler(log)
transformers.logging.set_verbosity_info()
transformers.logging.disable_progress_bar()
transformers.logging.add_handler(h)
m = AutoModelForCausalLM.from_pretrained(path)
text = log.getvalue().lower()
for w in ("missing", "unexpected", "newly initialized", "were not used", "not initialized"):
    if w in text:
        sys.exit(f"FAIL from_pretrained({path}) warned: {[l for l in text.splitlines() if w in l][:2]}")
m.eval()
d = open(val, "rb").read(); n = struct.unpack("<256i", d[:1024])[2]
t = np.frombuffer(d[1024:1024 + 2 * n], dtype="<u2").astype(np.int64)
want, nb = float(expect[0]), int(expect[1])
losses = []
with torch.no_grad():
    for j in range(nb):
        x = torch.tensor(t[j * B * T:(j + 1) * B * T]).view(B, T)
        y = torch.tensor(t[j * B * T + 1:(j + 1) * B * T + 1]).view(B, T)
        lg = m(input_ids=x).logits
        losses.append(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item())
got = sum(losses) / len(losses)
err = abs(got - want) / abs(want)
print(f"{'ok  ' if err <= 1e-6 else 'FAIL'} from_pretrained({path.split('/')[-1]}): {type(m).__name__}, no missing or "
      f"unexpected weights; loss {got:.7f} on {nb} batches, bigc eval {want:.6f} (relative difference {err:.1e})")
sys.exit(0 if err <= 1e-6 else 1)
PY
}
e=$(evalof "$d/t.bigc" "$d/val.bin" "$d/hf")
fromhf "$d/hf" "$d/val.bin" 2 32 "$e" || fail=1
fromhf "$d/hf2" "$d/val.bin" 2 32 "$e" || fail=1
fromhf "$d/ck/step-00000004" "$d/val.bin" 2 32 "$e" || fail=1
"$PY" - "$d" <<'PY' || fail=1
import json, struct, sys, torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM
d = sys.argv[1]
def names(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return sorted(k for k in json.loads(b[8:8 + n]) if k != "__metadata__")
hf, mod = names(f"{d}/hf/model.safetensors"), names(f"{d}/w.safetensors")
assert "lm_head.weight" not in hf and "model.embed_tokens.weight" in hf, hf
assert "lm_head.weight" in mod and "model.embed_tokens.weight" in mod, mod
m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(f"{d}/hf"))
m.load_state_dict(load_file(f"{d}/w.safetensors"), strict=True)
ref = AutoModelForCausalLM.from_pretrained(f"{d}/hf")
for (n, a), (_, b) in zip(m.state_dict().items(), ref.state_dict().items()):
    assert torch.equal(a, b), n
print("ok   --save-weights: every state_dict name (lm_head.weight and model.embed_tokens.weight), "
      "load_state_dict(strict=True), equal to from_pretrained's; --save-hf: the embedding only")
PY

# In: what save_pretrained writes, into bigc.
"$PY" - "$d" <<'PY'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
d = sys.argv[1]
torch.manual_seed(3)
cfg = AutoConfig.from_pretrained(f"{d}/hf")
m = AutoModelForCausalLM.from_config(cfg)
m.save_pretrained(f"{d}/pt")                          # tied: the embedding only
m.save_pretrained(f"{d}/pts", max_shard_size="50KB")  # sharded, with an index
cfg.tie_word_embeddings = False
u = AutoModelForCausalLM.from_config(cfg)
u.save_pretrained(f"{d}/untied")                      # lm_head.weight of its own
PY
ls "$d/pts" | grep -q "model.safetensors.index.json" || bad "save_pretrained wrote no sharded checkpoint"
e1=$(evalof "$d/t.bigc" "$d/val.bin" "$d/pt")
fromhf "$d/pt" "$d/val.bin" 2 32 "$e1" || fail=1
e2=$(evalof "$d/t.bigc" "$d/val.bin" "$d/pts/model.safetensors.index.json")
[ "$e1" = "$e2" ] || bad "the sharded checkpoint gives $e2, the single file $e1"
e3=$(evalof "$d/t.bigc" "$d/val.bin" "$d/w.safetensors")
[ "$e3" = "$e" ] || bad "--save-weights' file (both names) gives $e3, --save-hf's $e"
echo "ok: --load-weights took save_pretrained's tied file, its shards ($(ls "$d/pts" | grep -c '^model-') files), and a file with both names"
expect() { # PATTERN -- ARGS
  local pattern=$1
  shift 2
  "$BIN/bigc" "$@" >/dev/null 2>"$d/err" && { bad "accepted: $*"; return; }
  grep -qF -- "$pattern" "$d/err" || { bad "$*: $(cat "$d/err")"; return; }
  echo "ok: refused: $(head -n 1 "$d/err" | cut -c1-160)"
}
expect "are one weight of this model (tied) but hold different values: an untied checkpoint does not load into a tied model" \
  -- eval "$d/t.bigc" --data "$d/val.bin" --load-weights "$d/untied"
mkdir "$d/noweights" && cp "$d/hf/config.json" "$d/noweights/" && echo x >"$d/noweights/pytorch_model.bin"
expect "a directory without model.safetensors.index.json or model.safetensors" \
  -- eval "$d/t.bigc" --data "$d/val.bin" --load-weights "$d/noweights"
grep -q "pytorch_model.bin" "$d/err" || bad "the pickled weights are not named: $(cat "$d/err")"
cat >"$d/mod.py" <<'EOF'
import torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(self):
        super().__init__(); self.e = nn.Embedding(16, 8); self.h = nn.Linear(8, 16)
    def forward(self, x, y):
        return F.cross_entropy(self.h(self.e(x)).view(-1, 16), y.view(-1))
def make():
    return M(), (torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
EOF
"$BIN/bigc" import torch "$d/mod.py:make" -o "$d/mod.mlir" >/dev/null && "$BIN/bigc" compile "$d/mod.mlir" -o "$d/mod.bigc" --quiet
expect "--save-hf: this program has no Hugging Face config" -- run "$d/mod.bigc" --steps 1 --save-hf "$d/x" --quiet

# bigc gen gpt: GPT-2 names with transformer., GPT2LMHeadModel.
"$BIN/bigc" gen gpt --preset tiny -o "$d/g.mlir" >/dev/null
"$BIN/bigc" compile "$d/g.mlir" -o "$d/g.bigc" --quiet
"$BIN/bigc" run "$d/g.bigc" --steps 3 --save-hf "$d/ghf" --quiet
eg=$(evalof "$d/g.bigc" "$d/gval.bin" "$d/ghf")
fromhf "$d/ghf" "$d/gval.bin" 4 64 "$eg" || fail=1
exit $fail
