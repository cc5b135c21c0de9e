#!/usr/bin/env bash
# The cost model on the CPU backend, against steps measured once on a quiet machine and recorded
# (bench/costmodel/cpu_steps.json, written by `RECORD=... bench/costmodel/run.sh build/bin
# calibrate`: the calibrated profile of that run, each configuration's measured step and tokens/s,
# and what `--auto` picked). Nothing is timed here, so the test holds on a machine whose cores are
# busy with other work; the live comparison is the benchmark's (bench/costmodel/run.sh,
# docs/performance.md). Each configuration is compiled with the recorded profile and its estimate
# must be within 35% of the recorded step, the two orders must agree (Spearman's rho >= 0.8), and
# `bigc compile --auto --ranks R` with that profile must pick a plan recorded within 20% of the
# fastest configuration recorded on as many ranks (tokens/s): the bounds the live test held.
set -euo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REC=$ROOT/bench/costmodel/cpu_steps.json
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
$PY -c "import json, sys; json.dump(json.load(open(sys.argv[1]))['profile'], open(sys.argv[2], 'w'))" "$REC" "$d/profile.json"
"$BIN/bigc" gen gpt --preset tiny --layers 4 --hidden 256 --heads 4 --vocab 8192 --batch 4 --seq 256 -o "$d/m.mlir" >/dev/null
i=0
while IFS= read -r opts; do
  # shellcheck disable=SC2086
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/$i.bigc" --hardware "$d/profile.json" --quiet $opts
  "$BIN/bigc" inspect "$d/$i.bigc" --json >"$d/$i.json"
  i=$((i + 1))
done < <($PY -c "import json, sys
for c in json.load(open(sys.argv[1]))['configurations']: print(c['options'])" "$REC")
for r in $($PY -c "import json, sys; print(' '.join(json.load(open(sys.argv[1]))['auto']))" "$REC"); do
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/auto$r.bigc" --hardware "$d/profile.json" --auto --auto-seconds 0 --ranks "$r" >"$d/auto$r.txt" 2>&1 ||
    { cat "$d/auto$r.txt"; exit 1; }
done
$PY - "$REC" "$d" <<'PY'
import json, re, sys
rec, d = json.load(open(sys.argv[1])), sys.argv[2]
rows = []
for i, c in enumerate(rec["configurations"]):
    est = json.load(open(f"{d}/{i}.json"))["estimate"]["step_seconds"]
    rows.append((c, est))
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda k: xs[k])
    r = [0.0] * len(xs)
    for pos, k in enumerate(order):
        r[k] = pos + 1.0
    return r
a, b = ranks([c["step_s"] for c, _ in rows]), ranks([e for _, e in rows])
n = len(rows)
rho = 1 - 6 * sum((x - y) ** 2 for x, y in zip(a, b)) / (n * (n * n - 1))
print(f"recorded {rec['date']}: {rec['model']}")
worst = 0.0
for c, e in rows:
    err = e / c["step_s"] - 1
    worst = max(worst, abs(err))
    print(f"  {c['name']:24s} measured {c['step_s'] * 1e3:7.1f} ms  estimated {e * 1e3:7.1f} ms  {100 * err:+6.1f}%")
ok = worst <= 0.35 and rho >= 0.8
print(f"{'ok' if ok else 'FAIL'}: {n} configurations, largest error {worst:.1%} (bound 35%), Spearman's rho {rho:.3f} (bound 0.8)")
def flagset(o):
    t = o.split()
    pairs = {" ".join(t[k:k + 2]) for k in range(0, len(t) - 1, 2)}
    return {p for p in pairs if not p.startswith("--hardware") and p != "--ranks 1"}
def ranks_of(o):
    m = re.search(r"--ranks (\d+)", o)
    return m.group(1) if m else "1"
for r, recorded in rec["auto"].items():
    text = open(f"{d}/auto{r}.txt").read()
    pick = re.search(r"chosen: bigc compile .*? -o \S+ ?(.*)", text).group(1).strip()
    pick = re.sub(r"--hardware \S+ ?", "", pick).strip()
    tps = None
    if flagset(pick) == flagset(recorded["options"]):
        tps = recorded["tokens_per_s"]
    for c, _ in rows:
        if flagset(c["options"]) == flagset(pick):
            tps = c["tokens_per_s"]
    same = [c for c, _ in rows if ranks_of(c["options"]) == r]
    best = max(same, key=lambda c: c["tokens_per_s"])
    if tps is None:
        print(f"FAIL: --auto --ranks {r} picks `{pick}`, which has no recorded measurement: re-record "
              "with RECORD=bench/costmodel/cpu_steps.json bench/costmodel/run.sh build/bin calibrate")
        ok = False
        continue
    good = tps >= 0.8 * best["tokens_per_s"]
    ok &= good
    print(f"{'ok' if good else 'FAIL'}: --auto --ranks {r} picks `{pick or '(none)'}`: {tps:,.0f} tokens/s recorded, "
          f"{tps / best['tokens_per_s']:.2f} of the fastest on {r} rank(s) ({best['name']}, bound 0.80)")
sys.exit(0 if ok else 1)
PY
