#!/usr/bin/env bash
# The CPU backend on imported models against PyTorch eager, in one run on the same threads
# (docs/performance.md, "The CPU backend on imported models"): a LLaMA (`bigc import hf` of a
# LlamaForCausalLM config: RMSNorm, rotary, grouped-query attention, SwiGLU, untied head) and a
# hand-written GPT with exact GELU and no biases (bench/cpu/plain_gpt.py, `bigc import torch`),
# fp32, AdamW. bigc: `bigc run --synthetic --threads N`, the median of the steps' wall times from
# its log (the whole step, the time between instructions included); PyTorch: the same module
# (transformers' model; plain_gpt.py's), torch.set_num_threads(N), the median wall time of
# forward + backward + AdamW step.
#
#   bash bench/cpu/imported.sh [BIN]     # BIN: the directory of `bigc` (default build/bin)
# Environment: THREADS (2), STEPS (20), WARMUP (5), PYTHON (the project's .venv).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/build/bin}
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
L=4 C=256 H=4 KV=2 V=8192 B=4 T=256
cat > "$OUT/llama.json" <<JSON
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": $C, "intermediate_size": $((C * 8 / 3 / 64 * 64)),
 "num_hidden_layers": $L, "num_attention_heads": $H, "num_key_value_heads": $KV, "vocab_size": $V,
 "max_position_embeddings": $T, "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
JSON
export PLAIN_GPT="$L:$C:$H:$V:$B:$T"
echo "bench/cpu/imported: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $THREADS threads; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" >&2
"$BIN/bigc" import hf "$OUT/llama.json" --batch $B --seq $T -o "$OUT/llama.mlir" > /dev/null 2>&1
"$BIN/bigc" import torch "$HERE/plain_gpt.py:make" -o "$OUT/plain.mlir" > /dev/null 2>&1
for m in llama plain; do
  "$BIN/bigc" compile "$OUT/$m.mlir" -o "$OUT/$m.bigc" --quiet
  "$BIN/bigc" run "$OUT/$m.bigc" --synthetic --threads "$THREADS" --steps $((STEPS + WARMUP)) --log "$OUT/$m.jsonl" --quiet
done
"$PYTHON" - "$OUT" "$HERE" "$THREADS" "$STEPS" "$WARMUP" "$B" "$T" <<'PY'
import json, statistics, sys, time
import torch
import torch.nn.functional as F
out, here, threads, steps, warm, B, T = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
sys.path.insert(0, here)
torch.set_num_threads(threads)


def bigc_step(log):
    el = [json.loads(l)["elapsed_s"] for l in open(log) if l.strip()]
    return statistics.median(b - a for a, b in zip(el[warm - 1:], el[warm:]))


def torch_step(model, loss_fn, V):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    times = []
    for s in range(steps + warm):
        x, y = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model, x, y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warm:])


from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.from_pretrained(f"{out}/llama.json")
llama = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def hf_loss(m, x, y):
    lg = m(input_ids=x, use_cache=False).logits
    return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))


import plain_gpt
plain, _ = plain_gpt.make()
rows = [("LLaMA (import hf)", bigc_step(f"{out}/llama.jsonl"), torch_step(llama, hf_loss, cfg.vocab_size)),
        ("GPT, exact GELU, no biases (import torch)", bigc_step(f"{out}/plain.jsonl"),
         torch_step(plain, lambda m, x, y: m(x, y), plain_gpt.size()[3]))]
print(f"PyTorch {torch.__version__}, {threads} threads; 4 layers, 256 wide, vocabulary 8192, batch {B} x {T}; "
      "median step")
print()
print("| model | bigc step (ms) | PyTorch eager (ms) | bigc faster by |")
print("|---|---:|---:|---:|")
for name, b, t in rows:
    print(f"| {name} | {b * 1e3:.1f} | {t * 1e3:.1f} | {t / b:.2f}x |")
PY
