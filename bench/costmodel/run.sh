#!/usr/bin/env bash
# The cost model against the CPU backend: for each configuration of CONFIGS, the step time
# `bigc compile --hardware PROFILE` estimates (the program's `estimate.step_seconds`) and the
# median step `bigc run --synthetic` measures (steps 2..STEPS of the run log's elapsed_s), their
# ratio, and the rank agreement of the two orders (Spearman's rho).
# Model: a 4-block GPT 256 wide (4 heads), vocabulary 8192, batch 4 x 256 (the CPU comparison of
# the GPU issue), fp32 unless a configuration says otherwise.
# Usage: bench/costmodel/run.sh [build/bin] [PROFILE (default cpu) or a profile file; `calibrate`: a
# profile `bigc calibrate` writes first, in the same run]
# Environment: STEPS (6), THREADS (all cores), CALIBRATE_SECONDS (0.5: bigc calibrate --seconds).
# CHECK="MAXERR MINRHO" (make test's e2e.costmodel: "0.35 0.8"): exit 1 unless every configuration's
# estimate is within MAXERR of its measured median and the orders agree to Spearman's rho >= MINRHO;
# without the 4-micro-batch configuration (12 remain); a second calibration and measurement when
# the first misses (this machine's speed drifts by 10-20% between runs minutes apart: docs/performance.md).
set -euo pipefail
BIN=${1:-build/bin}
PROFILE=${2:-cpu}
STEPS=${STEPS:-6}
[ -x "$BIN/bigc" ] || { echo "bench/costmodel/run.sh: $BIN/bigc not found" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CAL=0
if [ "$PROFILE" = calibrate ]; then
  CAL=1
  PROFILE="$W/calibrated.json"
fi
"$BIN/bigc" gen gpt --preset tiny --layers 4 --hidden 256 --heads 4 --vocab 8192 --batch 4 --seq 256 -o "$W/m.mlir" > /dev/null
CONFIGS=("plain:" "recompute full:--recompute full" "recompute selective:--recompute selective"
         "2 micro-batches:--micro-batches 2" "4 micro-batches:--micro-batches 4" "bf16:--precision bf16"
         "offload cpu:--offload cpu"
         "2 ranks, ZeRO 1:--ranks 2 --zero 1" "2 ranks, ZeRO 3:--ranks 2 --zero 3" "tp 2:--ranks 2 --tp 2"
         "pp 2:--ranks 2 --pp 2 --micro-batches 2" "4 ranks, ZeRO 2:--ranks 4 --zero 2"
         "bf16, offload cpu:--precision bf16 --offload cpu")
if [ -n "${CHECK:-}" ]; then
  KEEP=()
  for c in "${CONFIGS[@]}"; do [ "${c%%:*}" = "4 micro-batches" ] || KEEP+=("$c"); done
  CONFIGS=("${KEEP[@]}")
fi
THR=()
[ -n "${THREADS:-}" ] && THR=(--threads "$THREADS")
measure() {
  if [ $CAL = 1 ]; then
    "$BIN/bigc" calibrate -o "$PROFILE" --seconds "${CALIBRATE_SECONDS:-0.5}" >&2
  fi
  local i=0
  for c in "${CONFIGS[@]}"; do
    name=${c%%:*}; o=${c#*:}
    # shellcheck disable=SC2086
    "$BIN/bigc" compile "$W/m.mlir" -o "$W/$i.bigc" --hardware "$PROFILE" --quiet $o
    echo "== $name" >&2
    "$BIN/bigc" run "$W/$i.bigc" --synthetic --steps "$STEPS" --log "$W/$i.jsonl" --quiet "${THR[@]}"
    "$BIN/bigc" inspect "$W/$i.bigc" --json > "$W/$i.json"
    i=$((i + 1))
  done
}
report() {
/usr/bin/python3 - "$W" "$PROFILE" "${CHECK:-}" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys, time
W, profile, check, configs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = []
for i, c in enumerate(configs):
    log = [json.loads(l) for l in open(f"{W}/{i}.jsonl") if l.strip()]
    el = [r["elapsed_s"] for r in log]
    measured = statistics.median([b - a for a, b in zip(el, el[1:])])
    est = json.load(open(f"{W}/{i}.json"))["estimate"]["step_seconds"]
    rows.append((c.split(":")[0], c.split(":", 1)[1], est, measured))
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda k: xs[k])
    r = [0.0] * len(xs)
    for pos, k in enumerate(order):
        r[k] = pos + 1.0
    return r
re, rm = ranks([r[2] for r in rows]), ranks([r[3] for r in rows])
n = len(rows)
rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(re, rm)) / (n * (n * n - 1))
print(f"bench/costmodel ({time.strftime('%Y-%m-%d')}): profile {profile}, a 4-block GPT 256 wide, vocabulary "
      f"8192, batch 4 x 256")
print()
print("| configuration | options | estimated | measured (median) | estimated / measured |")
print("|---|---|---:|---:|---:|")
worst = 0.0
for name, o, e, m in rows:
    worst = max(worst, abs(e / m - 1))
    print(f"| {name} | `{o or '(none)'}` | {e * 1e3:.1f} ms | {m * 1e3:.1f} ms | {e / m:.2f} |")
print()
print(f"largest error {worst:.0%}; Spearman's rho of the two orders {rho:.3f}")
if check:
    maxerr, minrho = map(float, check.split())
    ok = worst <= maxerr and rho >= minrho
    print(("ok   " if ok else "FAIL ") + f"{n} configurations: every estimate within {worst:.1%} of its measured median "
          f"(bound {maxerr:.0%}), Spearman's rho {rho:.3f} (bound {minrho})")
    sys.exit(0 if ok else 1)
PY
}
measure
if ! report; then
  [ -n "${CHECK:-}" ] || exit 1
  echo "costmodel: outside the bounds; a second calibration and measurement" >&2
  measure
  report
fi
