#!/usr/bin/env bash
# One GPU, in one run: bigc (CUDA backend) and Hugging Face's LlamaForCausalLM (SDPA; eager and
# torch.compile; fused AdamW) train Llama-3.2-1B (tied embeddings, vocabulary 128,256) and
# TinyLlama-1.1B in bf16 from the same configs (bench/gpu/configs), batch x 2048 tokens, the same
# AdamW and precision (fp32 master weights and AdamW states, bf16 compute; torch_llama.py). Prints
# tokens/s, MFU, the peak memory allocated (bigc: its planned arena and workspace; PyTorch:
# max_memory_allocated) and the GPU memory in use, and bigc's speed against each peer (the fastest
# of bigc's programs: as compiled, with --fuse, with --fuse --fuse-loss --pad-vocab 64). The bar
# (issue 45): >= 1.0x torch.compile on both.
#
#   bash scripts/gpu-programs.sh build/bin PROGRAMS llama-bench     # where the compiler is
#   bash bench/gpu/llama.sh BIN PROGRAMS                             # on the GPU machine
# Environment: MODELS ("llama3.2-1b tinyllama-1.1b"), STEPS (20), WARMUP (5), LLAMA_BATCH (4, must
# match the programs), PEAK_FLOPS (989e12: dense bf16 of an H100/H200 SXM), MODES ("eager compile"),
# OUT_DIR (the logs and gpu_llama.jsonl; default a temporary directory).
set -euo pipefail
BIN=$1
P=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS:-"llama3.2-1b tinyllama-1.1b"}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
B=${LLAMA_BATCH:-4}
PEAK=${PEAK_FLOPS:-989e12}
MODES=${MODES:-"eager compile"}
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
RES=$OUT/gpu_llama.jsonl
: > "$RES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for m in $MODELS; do
  for v in bf16 bf16-fuse bf16-fuse-all; do
    prog=$P/$m-$v.bigc
    [ -e "$prog" ] || continue
    echo "== bigc $m ($v)" >&2
    "$BIN/bigc-run" "$prog" --backend cuda --synthetic --steps $((STEPS + WARMUP)) --log "$OUT/$m.$v.bigc.jsonl" \
      > "$OUT/$m.$v.bigc.out" 2>&1 || { cat "$OUT/$m.$v.bigc.out"; exit 1; }
    tail -n 3 "$OUT/$m.$v.bigc.out" >&2
    "$PY" - "$OUT/$m.$v.bigc.jsonl" "$OUT/$m.$v.bigc.out" "$m" "$B" "$WARMUP" "$PEAK" "$v" \
      "$HERE/configs/$m.json" >> "$RES" <<'PY'
import json, re, statistics, sys
log, out, model, B, warm, peak, v, cfg = sys.argv[1:9]
B, warm, peak = int(B), int(warm), float(peak)
impl = {"bf16": "bigc", "bf16-fuse": "bigc --fuse", "bf16-fuse-all": "bigc --fuse --fuse-loss --pad-vocab 64"}[v]
c = json.load(open(cfg))
L, C, seq = c["num_hidden_layers"], c["hidden_size"], 2048
rows = [json.loads(l) for l in open(log) if l.strip()][warm:]
text = open(out).read()
params = int(re.search(r"cuda backend, (\d+) parameters", text).group(1))
tps = statistics.median(r["tokens_per_s"] for r in rows)
ws = re.search(r"workspace ([\d.]+) (MiB|GiB)", text)
wsb = float(ws.group(1)) * (2**20 if ws.group(2) == "MiB" else 2**30) if ws else 0
arena = rows[-1]["planned_bytes"]["device"]
fpt = 6 * params + 12 * L * C * seq
print(json.dumps({"impl": impl, "preset": model, "batch": B, "seq": seq, "params": params,
                  "step_ms": B * seq / tps * 1e3, "tokens_per_s": tps, "mfu": fpt * tps / peak,
                  "peak_bytes": int(arena + wsb), "arena_bytes": arena, "workspace_bytes": int(wsb),
                  "device_used_bytes": rows[-1]["peak_bytes"]["device"], "final_loss": rows[-1]["loss"]}))
PY
  done
  for mode in $MODES; do
    echo "== pytorch $mode $m" >&2
    "$PY" "$HERE/torch_llama.py" --config "$HERE/configs/$m.json" --batch "$B" --seq 2048 --mode "$mode" \
      --steps "$STEPS" --warmup "$WARMUP" --peak-flops "$PEAK" 2> "$OUT/$m.torch-$mode.err" | tail -n 1 >> "$RES" ||
      { tail -20 "$OUT/$m.torch-$mode.err"; exit 1; }
  done
done
"$PY" - "$RES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| model | implementation | step (ms) | tokens/s | MFU | peak memory allocated | GPU memory in use | bigc faster by |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for preset in dict.fromkeys(r["preset"] for r in rows):
    rs = [r for r in rows if r["preset"] == preset]
    bigcs = [r for r in rs if r["impl"].startswith("bigc")]
    big = max(bigcs, key=lambda r: r["tokens_per_s"]) if bigcs else None  # the fastest bigc
    for r in rs:
        ratio = "" if r["impl"].startswith("bigc") or not big else f"{big['tokens_per_s'] / r['tokens_per_s']:.2f}x"
        print(f"| {preset} (B={r['batch']}, T={r['seq']}) | {r['impl']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | "
              f"{100 * r['mfu']:.1f} % | {r['peak_bytes'] / 2**30:.2f} GiB | {r['device_used_bytes'] / 2**30:.2f} GiB | "
              f"{ratio} |")
PY
