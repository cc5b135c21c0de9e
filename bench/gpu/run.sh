#!/usr/bin/env bash
# One GPU, in one run: bigc (CUDA backend) and PyTorch (eager and torch.compile) train gpt2 (124M)
# and gpt2-medium (350M) in bf16 with the same model, batch, sequence length, AdamW and precision
# (fp32 master weights and AdamW states, bf16 compute; see torch_gpt2.py). Prints tokens/s, MFU,
# the peak memory allocated (bigc: its planned arena and workspace; PyTorch: max_memory_allocated)
# and the GPU memory in use (measured, the CUDA context included) of each, and bigc's speed against
# each peer (the fastest of bigc's programs that scripts/gpu-programs.sh wrote: as compiled, and
# with --pad-vocab 64 alone, with --fuse, with --fuse-loss, with both at three chunk widths of the
# loss), and --offload cpu's speed against the same program without it.
#
#   bash bench/gpu/run.sh BIN PROGRAMS      # BIN: bigc-run's dir; PROGRAMS: scripts/gpu-programs.sh ... bench
# Environment: PRESETS ("gpt2 gpt2-medium"), STEPS (20), WARMUP (5), BENCH_BATCH (16, must match the
# programs), PEAK_FLOPS (989e12: dense bf16 of an H100/H200 SXM), MODES ("eager compile").
set -euo pipefail
BIN=$1
P=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PRESETS=${PRESETS:-"gpt2 gpt2-medium"}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
B=${BENCH_BATCH:-16}
PEAK=${PEAK_FLOPS:-989e12}
MODES=${MODES:-"eager compile"}
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
RES=$OUT/gpu_bench.jsonl
: > "$RES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for p in $PRESETS; do
  # The program as compiled plainly, and (where scripts/gpu-programs.sh wrote it) with the vocabulary
  # padded to a multiple of 64 (--pad-vocab 64: the LM head's GEMMs without staging), and padded with
  # the LM head and loss fused (--fuse-loss: the logits never stored), and with the pairs of
  # memory-bound ops fused too (--fuse).
  for v in bf16 bf16-pad bf16-pad-fuseops bf16-pad-fuse bf16-pad-fuse-all bf16-pad-fuse-all-c4096 \
    bf16-pad-fuse-all-c8192 bf16-pad-offload; do
    prog=$P/$p-$v.bigc
    [ -e "$prog" ] || continue
    echo "== bigc $p ($v)" >&2
    "$BIN/bigc-run" "$prog" --backend cuda --synthetic --steps $((STEPS + WARMUP)) --log "$OUT/$p.$v.bigc.jsonl" \
      > "$OUT/$p.$v.bigc.out" 2>&1 || { cat "$OUT/$p.$v.bigc.out"; exit 1; }
    tail -n 3 "$OUT/$p.$v.bigc.out" >&2
    "$PY" - "$OUT/$p.$v.bigc.jsonl" "$OUT/$p.$v.bigc.out" "$p" "$B" "$WARMUP" "$PEAK" "$v" >> "$RES" <<'PY'
import json, re, statistics, sys
log, out, preset, B, warm, peak = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
impl = {"bf16": "bigc", "bf16-pad": "bigc --pad-vocab 64", "bf16-pad-fuseops": "bigc --pad-vocab 64 --fuse",
        "bf16-pad-fuse": "bigc --pad-vocab 64 --fuse-loss",
        "bf16-pad-fuse-all": "bigc --pad-vocab 64 --fuse-loss --fuse",
        "bf16-pad-fuse-all-c4096": "bigc --pad-vocab 64 --fuse-loss --loss-chunk 4096 --fuse",
        "bf16-pad-fuse-all-c8192": "bigc --pad-vocab 64 --fuse-loss --loss-chunk 8192 --fuse",
        "bf16-pad-offload": "bigc --pad-vocab 64 --offload cpu"}[sys.argv[7]]
rows = [json.loads(l) for l in open(log) if l.strip()][warm:]
text = open(out).read()
params = int(re.search(r"cuda backend, (\d+) parameters", text).group(1))
seq = 1024
L, C = {"gpt2": (12, 768), "gpt2-medium": (24, 1024), "gpt2-large": (36, 1280)}[preset]
tps = statistics.median(r["tokens_per_s"] for r in rows)
ws = re.search(r"workspace ([\d.]+) (MiB|GiB)", text)
wsb = float(ws.group(1)) * (2**20 if ws.group(2) == "MiB" else 2**30) if ws else 0
# What the program allocates: its planned device arena and the backend's workspace (PyTorch's
# counterpart: max_memory_allocated). Apart: the GPU memory in use, measured (cudaMemGetInfo: the
# CUDA context, the arena, the workspace; PyTorch's: mem_get_info after its steps).
arena = rows[-1]["planned_bytes"]["device"]
used = rows[-1]["peak_bytes"]["device"]
fpt = 6 * params + 12 * L * C * seq
print(json.dumps({"impl": impl, "preset": preset, "batch": B, "seq": seq, "params": params,
                  "step_ms": B * seq / tps * 1e3, "tokens_per_s": tps, "mfu": fpt * tps / peak,
                  "peak_bytes": int(arena + wsb), "arena_bytes": arena, "workspace_bytes": int(wsb),
                  "device_used_bytes": used,
                  "final_loss": rows[-1]["loss"]}))
PY
  done
  for m in $MODES; do
    echo "== pytorch $m $p" >&2
    "$PY" "$HERE/torch_gpt2.py" --preset "$p" --batch "$B" --seq 1024 --mode "$m" --steps "$STEPS" --warmup "$WARMUP" \
      --peak-flops "$PEAK" 2> "$OUT/$p.torch-$m.err" | tail -n 1 >> "$RES" || { tail -20 "$OUT/$p.torch-$m.err"; exit 1; }
  done
done
"$PY" - "$RES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| model | implementation | step (ms) | tokens/s | MFU | peak memory allocated | GPU memory in use | bigc faster by |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for preset in dict.fromkeys(r["preset"] for r in rows):
    rs = [r for r in rows if r["preset"] == preset]
    big = max((r for r in rs if r["impl"].startswith("bigc")), key=lambda r: r["tokens_per_s"])  # the faster bigc
    for r in rs:
        ratio = "" if r["impl"].startswith("bigc") else f"{big['tokens_per_s'] / r['tokens_per_s']:.2f}x"
        print(f"| {preset} (B={r['batch']}, T={r['seq']}) | {r['impl']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | "
              f"{100 * r['mfu']:.1f} % | {r['peak_bytes'] / 2**30:.2f} GiB | {r['device_used_bytes'] / 2**30:.2f} GiB | "
              f"{ratio} |")
# --offload cpu (the AdamW step on the host, overlapped) against the same program on the GPU alone.
for preset in dict.fromkeys(r["preset"] for r in rows):
    by = {r["impl"]: r for r in rows if r["preset"] == preset}
    off, base = by.get("bigc --pad-vocab 64 --offload cpu"), by.get("bigc --pad-vocab 64")
    if off and base:
        print(f"{preset}: --offload cpu {off['tokens_per_s']:,.0f} tokens/s, {100 * off['tokens_per_s'] / base['tokens_per_s']:.0f}% "
              f"of the same program without offload (the issue's goal: >= 70%); device {off['peak_bytes'] / 2**30:.2f} "
              f"against {base['peak_bytes'] / 2**30:.2f} GiB")
PY
