#!/usr/bin/env bash
# The CPU backend against PyTorch on the CPU, in one run on the same threads: the same GPT-2 (bigc
# gen gpt; torch_gpt.py builds the same module), fp32, AdamW, batch and sequence, trained by
# `bigc run --synthetic --threads N` and by PyTorch eager and torch.compile (torch.set_num_threads(N)).
# Prints the median step time of each, tokens/s and bigc's speed against each peer.
#
#   bash bench/cpu/run.sh [BIN]        # BIN: the directory of `bigc` (default build/bin)
# Environment: CONFIGS (default: the GPU issue's 4-block GPT 256 wide, vocabulary 8192, batch 4 x
# 256; and a 6-block 384-wide one with GPT-2's 50257 vocabulary), THREADS (2), STEPS (20),
# WARMUP (5), MODES ("eager compile"), PYTHON (the project's .venv: scripts/setup-python.sh),
# OUT_DIR (a temporary directory): each run's log and cpu_bench.jsonl.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/build/bin}
[ -x "$BIN/bigc" ] || { echo "bench/cpu/run.sh: $BIN/bigc not found (make build)" >&2; exit 1; }
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
MODES=${MODES:-"eager compile"}
# name:layers:hidden:heads:vocab:batch:seq
CONFIGS=${CONFIGS:-"gpt-4x256-v8192:4:256:4:8192:4:256 gpt-6x384-v50257:6:384:6:50257:4:256"}
if [ -z "${PYTHON:-}" ]; then
  bash "$ROOT/scripts/setup-python.sh" >&2
  PYTHON=$ROOT/.venv/bin/python
fi
OUT=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
RES=$OUT/cpu_bench.jsonl
: > "$RES"
echo "bench/cpu: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $THREADS threads; results in $OUT" >&2
for cfg in $CONFIGS; do
  IFS=: read -r name L C H V B T <<< "$cfg"
  echo "== bigc $name" >&2
  "$BIN/bigc" gen gpt --layers "$L" --hidden "$C" --heads "$H" --vocab "$V" --batch "$B" --seq "$T" \
    -o "$OUT/$name.mlir" > /dev/null
  "$BIN/bigc" compile "$OUT/$name.mlir" -o "$OUT/$name.bigc" --quiet
  "$BIN/bigc" run "$OUT/$name.bigc" --synthetic --threads "$THREADS" --steps $((STEPS + WARMUP)) \
    --log "$OUT/$name.bigc.jsonl" --quiet
  "$PYTHON" - "$OUT/$name.bigc.jsonl" "$name" "$L" "$C" "$H" "$V" "$B" "$T" "$WARMUP" "$THREADS" >> "$RES" <<'PY'
import json, statistics, sys
log, name = sys.argv[1], sys.argv[2]
L, C, H, V, B, T, warm, threads = map(int, sys.argv[3:])
rows = [json.loads(l) for l in open(log) if l.strip()]
el = [r["elapsed_s"] for r in rows]
steps = [b - a for a, b in zip(el[warm - 1:], el[warm:])]  # steps warm+1 .. end
dt = statistics.median(steps)
print(json.dumps({"impl": "bigc", "config": name, "threads": threads, "layers": L, "hidden": C, "heads": H,
                  "vocab": V, "batch": B, "seq": T, "step_ms": dt * 1e3, "tokens_per_s": B * T / dt,
                  "final_loss": rows[-1]["loss"]}))
PY
  for m in $MODES; do
    echo "== pytorch $m $name" >&2
    "$PYTHON" "$HERE/torch_gpt.py" --layers "$L" --hidden "$C" --heads "$H" --vocab "$V" --batch "$B" --seq "$T" \
      --threads "$THREADS" --mode "$m" --steps "$STEPS" --warmup "$WARMUP" 2> "$OUT/$name.torch-$m.err" \
      | tail -n 1 | sed "s/^{/{\"config\": \"$name\", /" >> "$RES" || { tail -20 "$OUT/$name.torch-$m.err"; exit 1; }
  done
done
"$PYTHON" - "$RES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
torch = next((r["torch"] for r in rows if "torch" in r), "?")
print(f"PyTorch {torch}; median step of each run")
print()
print("| model | implementation | step (ms) | tokens/s | bigc faster by |")
print("|---|---|---:|---:|---:|")
for cfg in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == cfg]
    big = next(r for r in rs if r["impl"] == "bigc")
    desc = f"{big['layers']} x {big['hidden']}, V {big['vocab']}, {big['batch']} x {big['seq']}, {big['threads']} threads"
    for r in rs:
        ratio = "" if r is big else f"{r['step_ms'] / big['step_ms']:.2f}x"
        print(f"| {desc} | {r['impl']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | {ratio} |")
PY
