#!/usr/bin/env bash
# Compile time and memory-plan quality (planned arena / lower bound) per preset, and the tiny
# model's training speed on the CPU backend. Prints a markdown table for docs/performance.md.
# Usage: bench/plan_and_compile.sh [build/bin] [presets...]
set -euo pipefail
BIN=${1:-build/bin}; shift || true
PRESETS=${*:-tiny gpt2 gpt2-medium gpt2-xl 13b 175b}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "| preset | parameters | compile (s) | buffers | instructions | device arena | lower bound | arena / lower bound |"
echo "|---|---|---|---|---|---|---|---|"
for p in $PRESETS; do
  "$BIN/bigc" gen gpt --preset "$p" -o "$d/$p.mlir"
  t0=$(date +%s.%N)
  # Planning only: the capacity is set high so every preset compiles.
  "$BIN/bigc" compile "$d/$p.mlir" -o "$d/$p.bigc" --device-mem 64T --quiet
  t1=$(date +%s.%N)
  "$BIN/bigc" inspect "$d/$p.bigc" --json > "$d/$p.json"
  /usr/bin/python3 - "$d/$p.json" "$p" "$t0" "$t1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); p = sys.argv[2]; t = float(sys.argv[4]) - float(sys.argv[3])
dev = j["spaces"]["device"]
gib = lambda b: f"{b / 2**30:.3f} GiB"
print(f"| {p} | {j['parameters']:,} | {t:.2f} | {j.get('buffers', '')} | {j.get('instructions', '')} | "
      f"{gib(dev['arena_bytes'])} | {gib(dev['lower_bound_bytes'])} | "
      f"{dev['arena_bytes'] / dev['lower_bound_bytes']:.4f} |")
PY
done
echo
echo "tiny preset, CPU backend, synthetic data, 50 steps:"
"$BIN/bigc" gen gpt --preset tiny -o "$d/t.mlir"
"$BIN/bigc" compile "$d/t.mlir" -o "$d/t.bigc" --quiet
"$BIN/bigc" run "$d/t.bigc" --synthetic --steps 50 --log "$d/t.jsonl" --quiet
/usr/bin/python3 - "$d/t.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][10:]
el = [r["elapsed_s"] for r in rows]
dt = (el[-1] - el[0]) / (len(el) - 1)
print(f"steps/s {1 / dt:.1f}, tokens/s {sum(r['tokens_per_s'] for r in rows) / len(rows):.0f} (steps 11-50)")
PY
