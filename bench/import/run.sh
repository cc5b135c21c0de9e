#!/usr/bin/env bash
# Importing published model configs without materialising them (docs/performance.md, "Import"):
# `bigc import hf` of TinyLlama-1.1B, Llama-3.2-1B, Mistral-7B-v0.1, Mixtral-8x7B and Llama-3-70B's config.json
# (their published values, below; batch 1, seq 256): wall time and the largest resident memory of
# the import (bigc and its Python child), then of `bigc compile` of the result. And a checkpoint
# under other names (GPT-2's own, without "transformer.", bf16; gpt2-large's shape): `bigc import hf
# --weights` refers to it in place (bigc.weights_names), and `bigc run` reads it once, cold: that
# read's rate against dd's cold O_DIRECT read of the same file, and the import's time and memory
# against the import without weights.
#
#   bench/import/run.sh [BUILD_DIR [WORK_DIR]]   (defaults: build, a new directory under /tmp)
#
# Targets (issue 42): Llama-3-70B's config in <= 30 s and <= 2 GB; Llama-3.2-1B in <= 10 s; the
# weights at >= 80% of the disk's read rate, in memory that does not grow with the model.
set -euo pipefail
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" && pwd)
W=${2:-$(mktemp -d /tmp/bigc-import-bench.XXXXXX)}
mkdir -p "$W"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${BIGC_PYTHON:-$HERE/../../.venv/bin/python}
measure() { # label, command...: "label  seconds  max-RSS-GB"
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$W/time.txt" "$@" > "$W/out.txt" 2>&1 || { cat "$W/out.txt" >&2; return 1; }
  read -r secs kb < "$W/time.txt"
  printf "%-34s %8.1f s %8.2f GB\n" "$label" "$secs" "$(echo "$kb / 1048576" | bc -l)"
}
$PY - "$W" <<'PY'
import json, sys
w = sys.argv[1]
common = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
          "rms_norm_eps": 1e-05, "initializer_range": 0.02, "attention_bias": False, "torch_dtype": "bfloat16"}
cfgs = {
    "tinyllama-1.1b": dict(common, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                           max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=False),
    "llama-3.2-1b": dict(common, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
                         rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    "mistral-7b": dict(common, architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=4096,
                       intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
                       rope_theta=10000.0, sliding_window=4096, tie_word_embeddings=False),
    "mixtral-8x7b": dict(common, architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=4096,
                         intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
                         rope_theta=1000000.0, num_local_experts=8, num_experts_per_tok=2,
                         router_aux_loss_coef=0.02, output_router_logits=False, tie_word_embeddings=False),
    "llama-3-70b": dict(common, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                        max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False),
}
for k, v in cfgs.items():
    json.dump(v, open(f"{w}/{k}.json", "w"), indent=1)
PY
echo "# $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf "%-34s %10s %11s\n" "step" "wall" "max RSS"
for m in tinyllama-1.1b llama-3.2-1b mistral-7b mixtral-8x7b llama-3-70b; do
  measure "import hf $m" "$BIN/bigc" import hf "$W/$m.json" --batch 1 --seq 256 -o "$W/$m.mlir"
  measure "compile $m" "$BIN/bigc" compile "$W/$m.mlir" -o "$W/$m.bigc" --precision bf16 --quiet
done

# A checkpoint to convert: gpt2-large's shape, bf16, GPT-2's own names (no "transformer.").
$PY - "$W" <<'PY'
import json, sys, torch
from safetensors.torch import save_file
w = sys.argv[1]
cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 1280, "n_layer": 36,
       "n_head": 20, "vocab_size": 50257, "n_positions": 1024}
json.dump(cfg, open(f"{w}/gpt2-large.json", "w"))
E, L, V, P = 1280, 36, 50257, 1024
g = torch.Generator().manual_seed(0)
t = {"wte.weight": (V, E), "wpe.weight": (P, E), "ln_f.weight": (E,), "ln_f.bias": (E,)}
for i in range(L):
    p = f"h.{i}."
    t.update({p + "ln_1.weight": (E,), p + "ln_1.bias": (E,), p + "ln_2.weight": (E,), p + "ln_2.bias": (E,),
              p + "attn.c_attn.weight": (E, 3 * E), p + "attn.c_attn.bias": (3 * E,),
              p + "attn.c_proj.weight": (E, E), p + "attn.c_proj.bias": (E,),
              p + "mlp.c_fc.weight": (E, 4 * E), p + "mlp.c_fc.bias": (4 * E,),
              p + "mlp.c_proj.weight": (4 * E, E), p + "mlp.c_proj.bias": (E,)})
save_file({k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) for k, s in t.items()},
          f"{w}/gpt2-large.safetensors")
PY
ck="$W/gpt2-large.safetensors"
size=$(stat -c %s "$ck")
# Cold: the page cache dropped (as root; else the file's pages advised out, which a virtual disk's
# own cache may still serve).
cold() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; else
    $PY -c "
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" "$1"
  fi
}
cold "$ck"
/usr/bin/time -f "%e" -o "$W/dd.txt" dd if="$ck" of=/dev/null bs=8M iflag=direct 2> /dev/null
dd_s=$(cat "$W/dd.txt")
measure "import hf gpt2-large --weights" "$BIN/bigc" import hf "$W/gpt2-large.json" --batch 1 --seq 256 \
  --weights "$ck" -o "$W/g.mlir"
read -r with_s _ < "$W/time.txt"
measure "import hf gpt2-large (no weights)" "$BIN/bigc" import hf "$W/gpt2-large.json" --batch 1 --seq 256 -o "$W/g0.mlir"
read -r base_s _ < "$W/time.txt"
grep -q 'bigc.weights_names' "$W/g.mlir" || { echo "the renamed checkpoint was not referred to in place" >&2; exit 1; }
"$BIN/bigc" compile "$W/g.mlir" -o "$W/g.bigc" --quiet
cold "$ck"
measure "run gpt2-large, 1 step (reads it)" "$BIN/bigc" run "$W/g.bigc" --steps 1 --log "$W/run.jsonl"
$PY - "$size" "$dd_s" "$with_s" "$base_s" "$W/run.jsonl" <<'PY'
import json, sys
size, dd, with_w, base = int(sys.argv[1]), *map(float, sys.argv[2:5])
load = next(r["startup"]["load_weights_s"] for r in map(json.loads, open(sys.argv[5])) if "startup" in r)
print(f"checkpoint {size / 1e9:.2f} GB (bf16, GPT-2's own names): referred to in place; the import with "
      f"--weights {with_w:.1f} s against {base:.1f} s without; bigc run reads it cold in {load:.2f} s, "
      f"{size / 1e9 / load:.2f} GB/s ({100 * dd / load:.0f}% of dd's cold O_DIRECT read, {size / 1e9 / dd:.2f} GB/s)")
PY
rm -f "$W"/*.safetensors "$W"/*.bigc
