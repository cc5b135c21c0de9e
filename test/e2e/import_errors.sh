#!/usr/bin/env bash
# bigc import's bad inputs: one line on stderr naming the place, exit status 1, nothing written (an
# existing output is left as it was): an unsupported op with its Python source line, a model
# torch.export cannot capture, dropout in training mode, non-causal attention, a module without a
# loss, a config of another family, weights whose names or shapes do not match the model's, unknown
# flags. Also: --weights (a file, a sharded index, a bf16 checkpoint) gives exactly those weights,
# and a bf16 module is imported in fp32 with a note. (A missing Python environment is the C++
# driver's error, tested with it.)
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/python_env.shlib" # PY, or exit 77
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir "$d/out"
fail=0
M="$HERE/import_bad_models.py"
line_of() { grep -n "MARK: $1\$" "$M" | cut -d: -f1; }

# expect_error PATTERN -- bigc import ARGS... (output $d/out/m.mlir, which holds "old" before)
expect_error() {
  local pattern=$1; shift 2
  echo old > "$d/out/m.mlir"
  "$BIN/bigc" import "$@" -o "$d/out/m.mlir" >"$d/stdout" 2>"$d/err"
  local rc=$?
  if [ $rc -ne 1 ]; then
    echo "FAIL: 'bigc import $*' exited $rc, expected 1"; cat "$d/err"; fail=1; return
  fi
  if [ "$(grep -c . "$d/err")" -ne 1 ]; then
    echo "FAIL: 'bigc import $*' printed $(grep -c . "$d/err") lines, not one:"; cat "$d/err"; fail=1; return
  fi
  if ! grep -qE "^bigc import: .*$pattern" "$d/err"; then
    echo "FAIL: 'bigc import $*' stderr lacks /$pattern/:"; cat "$d/err"; fail=1; return
  fi
  if [ "$(cat "$d/out/m.mlir")" != old ] || [ "$(ls -A "$d/out")" != m.mlir ]; then
    echo "FAIL: 'bigc import $*' wrote something: $(ls -A "$d/out")"; fail=1; return
  fi
  echo "ok: $(head -n1 "$d/err")"
}

# Unsupported ops: the op and the line of the module that made it.
expect_error "import_bad_models.py:$(line_of relu): unsupported operation aten.relu \(ReLU activation\)" -- torch "$M:relu"
expect_error "import_bad_models.py:$(line_of cumsum): unsupported operation aten.cumsum \(cumulative sum\)" -- torch "$M:cumsum"
# An op made in a function the forward calls (Meta's llama's complex pairs, squared: no rotation):
# its own line, and the call chain from the forward.
expect_error "import_bad_models.py:$(line_of complex): unsupported operation aten.view_as_complex \(.*\); called as .*import_bad_models.py:$(line_of 'calls complex') forward -> .*import_bad_models.py:$(line_of complex) apply_rotary_emb;" -- torch "$M:complex"
expect_error "import_bad_models.py:$(line_of oldcache): a read of \[2, 8, 32\] from a tensor this step wrote \[2, 8, 32\] of \(a KV cache\?\): bigc keeps no state between steps" -- torch "$M:oldcache"
expect_error "import_bad_models.py:$(line_of dropout): unsupported operation aten.dropout \(dropout with p=0.1 in training mode\)" -- torch "$M:dropout"
expect_error "import_bad_models.py:$(line_of noncausal): non-causal attention" -- torch "$M:noncausal"
# torch.export's failure: its first line, where, and the fix.
expect_error "import_bad_models.py:[0-9]+: torch.export cannot capture the model: .*data-dependent.*torch.cond" -- torch "$M:branchy"
# The module and the function.
expect_error "with no loss: return the loss" -- torch "$M:noloss"
expect_error "import_bad_models.py:[0-9]+: raises\(\) raised RuntimeError: the user's function failed" -- torch "$M:raises"
expect_error "must return \(module, \(tokens, targets\)\)" -- torch "$M:notamodule"
expect_error "has no function 'nope'" -- torch "$M:nope"
expect_error "nope.py: no such file" -- torch "$d/nope.py:make"
expect_error "expected FILE.py:FUNCTION" -- torch "$M"

# Hugging Face configs.
"$PY" - "$d" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
json.dump({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
           "max_position_embeddings": 16}, open(f"{d}/llama.json", "w"))
json.dump({"model_type": "bloom", "architectures": ["BloomForCausalLM"], "hidden_size": 32}, open(f"{d}/bloom.json", "w"))
json.dump({"model_type": "phi3", "hidden_size": 32, "num_attention_heads": 4, "partial_rotary_factor": 0.1},
          open(f"{d}/phi4mini.json", "w"))
json.dump({"model_type": "gpt_neox", "hidden_size": 32, "num_attention_heads": 4, "rotary_pct": 1.5},
          open(f"{d}/neox.json", "w"))
json.dump({"model_type": "mixtral", "hidden_size": 32, "num_attention_heads": 4, "router_jitter_noise": 0.1},
          open(f"{d}/jitter.json", "w"))
json.dump({"model_type": "mixtral", "hidden_size": 32, "num_attention_heads": 4, "output_router_logits": True},
          open(f"{d}/auxloss.json", "w"))
json.dump({"model_type": "qwen2_moe", "hidden_size": 32, "num_attention_heads": 4, "num_experts": 4,
           "num_experts_per_tok": 6}, open(f"{d}/topk.json", "w"))
open(f"{d}/broken.json", "w").write("{ not json")
PY
expect_error "model_type 'bloom' \(BloomForCausalLM\) is not supported; supported families: llama, mistral, qwen2, gpt2, gemma, olmo, olmo2, phi3, gpt_neox, gemma2, mixtral, qwen2_moe" -- hf "$d/bloom.json"
expect_error "phi4mini.json: \"partial_rotary_factor\" 0.1 of a head of 8 rotates 0 elements; rotary embeddings rotate pairs, so that must be even and at least 2" -- hf "$d/phi4mini.json"
expect_error "neox.json: \"rotary_pct\" is 1.5; it must be a number in \(0, 1\]" -- hf "$d/neox.json"
expect_error "jitter.json: \"router_jitter_noise\" is 0.1: the router's random jitter in training is not supported" -- hf "$d/jitter.json"
expect_error "auxloss.json: \"output_router_logits\" is true: the router's auxiliary load-balancing loss is not supported yet" -- hf "$d/auxloss.json"
expect_error "topk.json: \"num_experts_per_tok\" 6 exceeds \"num_experts\" 4" -- hf "$d/topk.json"
expect_error "broken.json: not a JSON config" -- hf "$d/broken.json"
expect_error "nope.json: no such file" -- hf "$d/nope.json"
expect_error "--seq 32 exceeds the model's 16 positions" -- hf "$d/llama.json" --seq 32
expect_error "unrecognized arguments: --frobnicate" -- hf "$d/llama.json" --frobnicate
expect_error "invalid int value" -- hf "$d/llama.json" --batch x

# Weights: names, shapes and dtypes must match the model's (from the headers: nothing is read).
"$BIN/bigc" import hf "$d/llama.json" --seq 16 -o "$d/ref.mlir" >/dev/null 2>&1 || { echo "FAIL: import"; exit 1; }
"$BIN/bigc" compile "$d/ref.mlir" -o "$d/ref.bigc" --quiet
"$BIN/bigc" run "$d/ref.bigc" --steps 0 --seed 5 --save-weights "$d/ref.safetensors" --quiet
"$PY" - "$d" <<'PY' || exit 1
import json, os, sys
import torch
from safetensors.torch import load_file, save_file
d = sys.argv[1]
w = load_file(f"{d}/ref.safetensors")
bad = dict(w); bad["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(32, 31)
save_file(bad, f"{d}/shape.safetensors")
bad = dict(w); del bad["lm_head.weight"]
save_file(bad, f"{d}/missing.safetensors")
bad = dict(w); bad["model.layers.7.mlp.gate_proj.weight"] = torch.zeros(64, 32)
save_file(bad, f"{d}/extra.safetensors")
bad = dict(w); bad["model.norm.weight"] = torch.ones(32, dtype=torch.int32)
save_file(bad, f"{d}/int.safetensors")
# A sharded checkpoint and a bf16 one; a sharded one with a shard missing.
names = sorted(w)
for sub in ("sharded", "gone"):
    os.makedirs(f"{d}/{sub}")
    save_file({k: w[k] for k in names[:5]}, f"{d}/{sub}/model-00001-of-00002.safetensors")
    save_file({k: w[k] for k in names[5:]}, f"{d}/{sub}/model-00002-of-00002.safetensors")
    json.dump({"metadata": {}, "weight_map": {k: ("model-00001-of-00002.safetensors" if i < 5 else
               "model-00002-of-00002.safetensors") for i, k in enumerate(names)}},
              open(f"{d}/{sub}/model.safetensors.index.json", "w"))
os.unlink(f"{d}/gone/model-00002-of-00002.safetensors")
save_file({k: v.to(torch.bfloat16) for k, v in w.items()}, f"{d}/bf16.safetensors")
open(f"{d}/garbage.safetensors", "wb").write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}xx")
PY
expect_error "shape.safetensors: 'model.layers.0.self_attn.q_proj.weight' has shape \[32, 31\], the model's is \[32, 32\]" -- hf "$d/llama.json" --seq 16 --weights "$d/shape.safetensors"
expect_error "missing.safetensors: lacks the model's parameter 'lm_head.weight' \[64, 32\]" -- hf "$d/llama.json" --seq 16 --weights "$d/missing.safetensors"
expect_error "extra.safetensors: holds 'model.layers.7.mlp.gate_proj.weight' \[64, 32\], which is not a parameter of the model" -- hf "$d/llama.json" --seq 16 --weights "$d/extra.safetensors"
expect_error "int.safetensors: 'model.norm.weight' is stored as I32, not floating point" -- hf "$d/llama.json" --seq 16 --weights "$d/int.safetensors"
expect_error "garbage.safetensors: not a readable safetensors file" -- hf "$d/llama.json" --seq 16 --weights "$d/garbage.safetensors"
expect_error "nope.safetensors: no such file" -- hf "$d/llama.json" --seq 16 --weights "$d/nope.safetensors"
expect_error "model.safetensors.index.json: the shard .*model-00002-of-00002.safetensors is missing" -- hf "$d/llama.json" --seq 16 --weights "$d/gone/model.safetensors.index.json"
expect_error "--seed 5: the initial weights of an imported config are drawn by bigc run, by the family's rules: give --seed 5 to .bigc run." -- hf "$d/llama.json" --seq 16 --seed 5

# Good weights: a file, a sharded index and a bf16 checkpoint are named where they are (nothing
# copied), and bigc run starts from exactly those weights (bf16 widened exactly).
for w in ref.safetensors sharded/model.safetensors.index.json bf16.safetensors; do
  rm -f "$d/w.mlir" "$d/w0.safetensors"
  if ! "$BIN/bigc" import hf "$d/llama.json" --seq 16 --weights "$d/$w" -o "$d/w.mlir" >/dev/null 2>"$d/err" ||
     ! grep -q "bigc.weights = \"$d/$w\"" "$d/w.mlir" || [ -e "$d/w.safetensors" ] ||
     ! "$BIN/bigc" compile "$d/w.mlir" -o "$d/w.bigc" --quiet 2>>"$d/err" ||
     ! "$BIN/bigc" run "$d/w.bigc" --steps 0 --save-weights "$d/w0.safetensors" --quiet 2>>"$d/err"; then
    echo "FAIL: --weights $w:"; cat "$d/err"; grep "bigc.weights" "$d/w.mlir"; fail=1; continue
  fi
  if "$PY" - "$d/ref.safetensors" "$d/w0.safetensors" "$w" <<'PY'
import sys
import torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert set(a) == set(b), sorted(set(a) ^ set(b))
for k in a:
    want = a[k].to(torch.bfloat16).float() if sys.argv[3].startswith("bf16") else a[k]
    assert b[k].dtype == torch.float32 and torch.equal(b[k], want), k
PY
  then echo "ok: --weights $w: named as it is; bigc run starts from the checkpoint's weights"; else echo "FAIL: --weights $w"; fail=1; fi
done
# A checkpoint changed after the import: bigc compile checks it again.
cp -r "$d/sharded" "$d/later"
"$BIN/bigc" import hf "$d/llama.json" --seq 16 --weights "$d/later/model.safetensors.index.json" -o "$d/later.mlir" >/dev/null 2>&1
rm "$d/later/model-00001-of-00002.safetensors"
if "$BIN/bigc" compile "$d/later.mlir" -o "$d/later.bigc" --quiet 2>"$d/err"; then
  echo "FAIL: a checkpoint with a shard removed after the import compiled"; fail=1
elif grep -q "model.safetensors.index.json: lists tensors in model-00001-of-00002.safetensors, which is missing" "$d/err"; then
  echo "ok: a shard removed after the import: $(head -c 160 "$d/err")"
else
  echo "FAIL: a shard removed after the import:"; cat "$d/err"; fail=1
fi
# Named otherwise (GPT-2's own checkpoint, without the "transformer." prefix): referred to where it
# is, the file's names in bigc.weights_names; bigc run starts from it, bf16 widened exactly. The same
# checkpoint in f64 (which bigc run does not read) is copied beside the model, converted to f32.
"$PY" - "$d" <<'PY' || exit 1
import json, sys
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM
d = sys.argv[1]
cfg = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 64, "n_positions": 16}
json.dump(cfg, open(f"{d}/gpt2.json", "w"))
torch.manual_seed(0)
m = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
sd = {k[len("transformer."):]: v.to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()
      if k.startswith("transformer.")}
save_file(sd, f"{d}/gpt2_hub.safetensors")
save_file({k: v.double() for k, v in sd.items()}, f"{d}/gpt2_hub64.safetensors")
PY
"$BIN/bigc" import hf "$d/gpt2.json" --seq 16 --weights "$d/gpt2_hub.safetensors" -o "$d/g.mlir" >/dev/null 2>"$d/err" &&
  grep -q "bigc.weights = \"$d/gpt2_hub.safetensors\"" "$d/g.mlir" &&
  grep -q 'bigc.weights_names = {.*"lm_head.weight" = "wte.weight".*"transformer.h.0.attn.c_attn.weight" = "h.0.attn.c_attn.weight"' "$d/g.mlir" &&
  [ ! -e "$d/g.safetensors" ] && "$BIN/bigc" compile "$d/g.mlir" -o "$d/g.bigc" --quiet &&
  "$BIN/bigc" run "$d/g.bigc" --steps 0 --save-weights "$d/g0.safetensors" --quiet &&
  "$BIN/bigc" import hf "$d/gpt2.json" --seq 16 --weights "$d/gpt2_hub64.safetensors" -o "$d/g64.mlir" >/dev/null 2>>"$d/err" &&
  grep -q 'bigc.weights = "g64.safetensors"' "$d/g64.mlir" && ! grep -q "bigc.weights_names" "$d/g64.mlir" &&
  "$BIN/bigc" compile "$d/g64.mlir" -o "$d/g64.bigc" --quiet &&
  "$BIN/bigc" run "$d/g64.bigc" --steps 0 --save-weights "$d/g64run.safetensors" --quiet &&
"$PY" - "$d" <<'PY' && echo "ok: GPT-2's own checkpoint (no prefix, bf16) read where it is under its names, bigc run starts from it; in f64, copied beside the model in f32" || { echo "FAIL: GPT-2's checkpoint"; cat "$d/err"; fail=1; }
import sys
import torch
from safetensors.torch import load_file
d = sys.argv[1]
hub, run = load_file(f"{d}/gpt2_hub.safetensors"), load_file(f"{d}/g0.safetensors")
conv, run64 = load_file(f"{d}/g64.safetensors"), load_file(f"{d}/g64run.safetensors")
for k, v in hub.items():
    name = "transformer." + k
    assert torch.equal(run.get(name, run.get("lm_head.weight")), v.float()), k  # wte: the tied lm_head
    got = conv[name] if name in conv else conv["lm_head.weight"]
    assert got.dtype == torch.float32 and torch.equal(got, v.float()), k
    assert torch.equal(run64.get(name, run64.get("lm_head.weight")), v.float()), k
PY

# A bf16 module: a note, and fp32 weights.
if "$BIN/bigc" import torch "$M:half" -o "$d/half.mlir" >/dev/null 2>"$d/err" && grep -q "note: the module's parameters are torch.bfloat16: imported in fp32" "$d/err" \
    && "$BIN/bigc-opt" "$d/half.mlir" >/dev/null; then
  echo "ok: a bf16 module is imported in fp32 with a note"
else
  echo "FAIL: the bf16 module"; cat "$d/err"; fail=1
fi
[ $fail -eq 0 ] && echo "PASS: bigc import's bad inputs" || echo "FAILED"
exit $fail
