#!/usr/bin/env bash
# The cost model against the CPU backend: for each configuration of CONFIGS, the step time
# `bigc compile --hardware PROFILE` estimates (the program's `estimate.step_seconds`) and the
# median step `bigc run --synthetic` measures (steps 2..STEPS of the run log's elapsed_s), their
# ratio, and the rank agreement of the two orders (Spearman's rho).
# Model: a 4-block GPT 256 wide (4 heads), vocabulary 8192, batch 4 x 256 (the CPU comparison of
# the GPU issue), fp32 unless a configuration says otherwise.
# Usage: bench/costmodel/run.sh [build/bin] [PROFILE (default cpu) or a profile file; `calibrate`: a
# profile `bigc calibrate` writes first, in the same run]
# Then `bigc compile --auto --ranks R` with the same profile for each R of AUTO_RANKS, and the plan
# it picks measured beside the others: its tokens/s against the fastest configuration measured on
# as many ranks.
# Environment: STEPS (6), PASSES (1: rounds over all configurations, each configuration's fastest
# round counts), AUTO_RANKS ("1 2"; "" for none), AUTO_TOL (0.10), THREADS (all cores),
# CALIBRATE_SECONDS (0.5: bigc calibrate --seconds).
# CHECK="MAXERR MINRHO" (make test's e2e.costmodel: "0.35 0.8", AUTO_TOL=0.20, PASSES=2 STEPS=5): exit 1 unless
# every configuration's estimate is within MAXERR of its measured median, the orders agree to
# Spearman's rho >= MINRHO and each --auto pick is within AUTO_TOL of the fastest on its ranks;
# without the 4-micro-batch configuration (13 remain); a second calibration and measurement when
# the first misses (this machine's speed drifts by 10-20% between runs minutes apart: docs/performance.md).
# RECORD=FILE.json: also write what was measured (the profile used, each configuration's measured
# step and tokens/s, --auto's picks and theirs) for test/e2e/costmodel.sh, which checks the
# estimates against it in `make test` without timing anything.
set -euo pipefail
BIN=${1:-build/bin}
PROFILE=${2:-cpu}
STEPS=${STEPS:-6}
PASSES=${PASSES:-1}
AUTO_RANKS=${AUTO_RANKS:-"1 2"}
AUTO_TOL=${AUTO_TOL:-0.10}
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
         "bf16, offload cpu:--precision bf16 --offload cpu" "fused loss:--fuse-loss")
if [ -n "${CHECK:-}" ]; then
  KEEP=()
  for c in "${CONFIGS[@]}"; do [ "${c%%:*}" = "4 micro-batches" ] || KEEP+=("$c"); done
  CONFIGS=("${KEEP[@]}")
fi
THR=()
[ -n "${THREADS:-}" ] && THR=(--threads "$THREADS")
# A command line's flags as a set, without --hardware and the default --ranks 1 (every flag here
# takes one value).
flagset() {
  local out=() k
  while [ $# -ge 2 ]; do
    k="$1 $2"
    shift 2
    case "$k" in --hardware\ *|"--ranks 1") continue ;; esac
    out+=("$k")
  done
  printf '%s\n' "${out[@]}" | sort | tr '\n' ';'
}
compile_configs() {
  local i=0 c o
  for c in "${CONFIGS[@]}"; do
    o=${c#*:}
    # shellcheck disable=SC2086
    "$BIN/bigc" compile "$W/m.mlir" -o "$W/$i.bigc" --hardware "$PROFILE" --quiet $o
    "$BIN/bigc" inspect "$W/$i.bigc" --json > "$W/$i.json"
    i=$((i + 1))
  done
}
# With `calibrate` and several rounds, a second calibration before round 2 and the faster figure of
# the two for each rate (the shorter for each latency), as each configuration's faster round counts:
# a calibration in one of the machine's slow spells made every estimate up to 44% long (CI,
# 2026-11-26), the geometric mean of two did not prevent it.
calibrate() {
  "$BIN/bigc" calibrate -o "$W/cal$1.json" --seconds "${CALIBRATE_SECONDS:-0.5}" >&2
  if [ "$1" = 1 ]; then
    cp "$W/cal1.json" "$PROFILE"
    return
  fi
  /usr/bin/python3 - "$W/cal1.json" "$W/cal$1.json" "$PROFILE" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def faster(k, x, y, rate=False):
    if isinstance(x, dict):  # op_flops: a rate per kernel
        return {kk: faster(kk, x[kk], y.get(kk, x[kk]), k == "op_flops") for kk in x}
    if not isinstance(x, float):  # names, sizes, counts: the first calibration's
        return x
    if rate or k.endswith("_flops") or k.endswith("_bytes_per_s"):
        return max(x, y)
    if k.endswith("_s"):  # latencies and overheads
        return min(x, y)
    return x
merged = {k: faster(k, v, b.get(k, v)) for k, v in a.items()}
merged["sources"] = ["the faster of two calibrations a minute or two apart, each figure"] + a.get("sources", [])
json.dump(merged, open(sys.argv[3], "w"), indent=2)
PY
}
measure() {
  if [ $CAL = 1 ]; then calibrate 1; fi
  compile_configs
  # --auto on 1 and 2 ranks with the same profile: the plan it picks is measured beside the others.
  # A pick with the options of a configuration above is that configuration's program: its runs count.
  local r
  declare -gA AUTO_SAME=()
  for r in $AUTO_RANKS; do
    "$BIN/bigc" compile "$W/m.mlir" -o "$W/auto$r.bigc" --hardware "$PROFILE" --auto --ranks "$r" \
      > "$W/auto$r.txt" 2>&1 || { cat "$W/auto$r.txt" >&2; exit 1; }
    local pick
    pick=$(sed -n 's/.*chosen: bigc compile .* -o [^ ]*//p' "$W/auto$r.txt")
    i=0
    for c in "${CONFIGS[@]}"; do
      # shellcheck disable=SC2086
      [ "$(flagset ${c#*:})" = "$(flagset $pick)" ] && AUTO_SAME[$r]=$i
      i=$((i + 1))
    done
  done
  # PASSES rounds over all configurations; each configuration's figure is its fastest round's
  # median (the machine's slow spells only ever add time).
  local pass
  for pass in $(seq 1 "$PASSES"); do
    if [ $CAL = 1 ] && [ "$pass" = 2 ]; then
      calibrate 2
      compile_configs # the same programs; their estimates under the merged profile
    fi
    i=0
    for c in "${CONFIGS[@]}"; do
      echo "== ${c%%:*} (round $pass of $PASSES)" >&2
      "$BIN/bigc" run "$W/$i.bigc" --synthetic --steps "$STEPS" --log "$W/$i.$pass.jsonl" --quiet "${THR[@]}"
      i=$((i + 1))
    done
    for r in $AUTO_RANKS; do
      if [ -n "${AUTO_SAME[$r]:-}" ]; then
        cp "$W/${AUTO_SAME[$r]}.$pass.jsonl" "$W/auto$r.$pass.jsonl"
        continue
      fi
      echo "== --auto --ranks $r (round $pass of $PASSES)" >&2
      "$BIN/bigc" run "$W/auto$r.bigc" --synthetic --steps "$STEPS" --log "$W/auto$r.$pass.jsonl" --quiet "${THR[@]}"
    done
  done
}
report() {
/usr/bin/python3 - "$W" "$PROFILE" "${CHECK:-}" "$PASSES" "$AUTO_RANKS" "$AUTO_TOL" "${CONFIGS[@]}" <<'PY'
import json, re, statistics, sys, time
W, profile, check, passes, auto_ranks, auto_tol = sys.argv[1:7]
passes, auto_ranks, auto_tol, configs = int(passes), auto_ranks.split(), float(auto_tol), sys.argv[7:]
def fastest(stem):
    """(median step seconds, tokens/s) of the fastest round (steps 2.. of each)."""
    best = None
    for p in range(1, passes + 1):
        log = [json.loads(l) for l in open(f"{W}/{stem}.{p}.jsonl") if l.strip()]
        el = [r["elapsed_s"] for r in log]
        step = statistics.median([b - a for a, b in zip(el, el[1:])])
        tps = statistics.median(r["tokens_per_s"] for r in log[1:])
        if best is None or step < best[0]:
            best = (step, tps)
    return best
rows, tokens = [], []
for i, c in enumerate(configs):
    measured, tps = fastest(str(i))
    tokens.append(tps)
    est = json.load(open(f"{W}/{i}.json"))["estimate"]["step_seconds"]
    rows.append((c.split(":")[0], c.split(":", 1)[1], est, measured))
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda k: xs[k])
    r = [0.0] * len(xs)
    for pos, k in enumerate(order):
        r[k] = pos + 1.0
    return r
r_est, r_meas = ranks([r[2] for r in rows]), ranks([r[3] for r in rows])
n = len(rows)
rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(r_est, r_meas)) / (n * (n * n - 1))
print(f"bench/costmodel ({time.strftime('%Y-%m-%d')}): profile {profile}, a 4-block GPT 256 wide, vocabulary "
      f"8192, batch 4 x 256")
print()
print(f"| configuration | options | estimated | measured (median{', fastest of ' + str(passes) + ' rounds' if passes > 1 else ''}) | estimated / measured |")
print("|---|---|---:|---:|---:|")
worst = 0.0
for name, o, e, m in rows:
    worst = max(worst, abs(e / m - 1))
    print(f"| {name} | `{o or '(none)'}` | {e * 1e3:.1f} ms | {m * 1e3:.1f} ms | {e / m:.2f} |")
print()
print(f"largest error {worst:.0%}; Spearman's rho of the two orders {rho:.3f}")
# --auto's pick against the fastest configuration measured on as many ranks (tokens/s: the global
# batch differs between them).
auto_ok = True
if auto_ranks:
    print()
    print("| `--auto` on | its pick | tokens/s | the fastest measured on as many ranks | tokens/s | pick / fastest |")
    print("|---|---|---:|---|---:|---:|")
for r in auto_ranks:
    text = open(f"{W}/auto{r}.txt").read()
    pick = re.search(r"chosen: bigc compile .*? -o \S+ ?(.*)", text).group(1).strip()
    pick = re.sub(r"--hardware \S+ ?", "", pick).strip()
    _, tps = fastest(f"auto{r}")
    def ranks_of(o):
        m = re.search(r"--ranks (\d+)", o)
        return m.group(1) if m else "1"
    same = [(tokens[i], rows[i][0], rows[i][1]) for i in range(len(rows)) if ranks_of(rows[i][1]) == r]
    best = max(same)
    ok = tps >= (1 - auto_tol) * best[0]
    auto_ok &= ok
    print(f"| {r} rank{'s' if r != '1' else ''} | `{pick or '(none)'}` | {tps:,.0f} | {best[1]} (`{best[2] or '(none)'}`) | "
          f"{best[0]:,.0f} | {tps / best[0]:.2f}{'' if ok else ' (below ' + format(1 - auto_tol, '.2f') + ')'} |")
record = __import__("os").environ.get("RECORD")
if record:
    picks = {}
    for r in auto_ranks:
        text = open(f"{W}/auto{r}.txt").read()
        pick = re.search(r"chosen: bigc compile .*? -o \S+ ?(.*)", text).group(1).strip()
        picks[r] = {"options": re.sub(r"--hardware \S+ ?", "", pick).strip(), "tokens_per_s": fastest(f"auto{r}")[1]}
    json.dump({"date": time.strftime("%Y-%m-%d"), "model": "bigc gen gpt --preset tiny --layers 4 --hidden 256 "
               "--heads 4 --vocab 8192 --batch 4 --seq 256", "profile": json.load(open(profile)),
               "configurations": [{"name": name, "options": o, "step_s": m, "tokens_per_s": tokens[i]}
                                  for i, (name, o, e, m) in enumerate(rows)],
               "auto": picks}, open(record, "w"), indent=1)
    print(f"recorded in {record}")
if check:
    maxerr, minrho = map(float, check.split())
    ok = worst <= maxerr and rho >= minrho and auto_ok
    print(("ok   " if ok else "FAIL ") + f"{n} configurations: every estimate within {worst:.1%} of its measured median "
          f"(bound {maxerr:.0%}), Spearman's rho {rho:.3f} (bound {minrho}); --auto's picks "
          f"{'as fast as the fastest measured' if auto_ok else 'SLOWER than the fastest measured'} (within {auto_tol:.0%})")
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
