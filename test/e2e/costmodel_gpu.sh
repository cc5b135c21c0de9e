#!/usr/bin/env bash
# The cost model on a GPU: hardware/h100-x1.json (rates calibrated from bigc's own kernels on an H100,
# bench/gpu/calibrate.py) against the steps measured on that GPU (bench/gpu/h100_steps.json: gpt2 and
# gpt2-medium, bf16, batch 16 x 1024, in 22 configurations: padded vocabulary or not, --fuse,
# --fuse-loss at three chunk widths, --offload cpu, --micro-batches 2 and 4, --recompute full and
# selective). Each configuration is compiled here with --hardware h100-x1 and its estimate must be
# within 20% of the measured step, and the estimates must rank the configurations as the
# measurements do (Spearman >= 0.8): the issue's bounds for the CPU backend, held on the GPU.
# Measured 2026-11-26: largest error 11.5% (gpt2 with its vocabulary unpadded: the model does not
# count the staging of unaligned GEMMs), Spearman 0.98. Runs without a GPU: the measurements are
# recorded.
set -euo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
for m in gpt2 gpt2-medium; do
  "$BIN/bigc" gen gpt --preset $m --batch 16 --seq 1024 -o "$d/$m.mlir" > /dev/null
done
while read -r i model opts; do
  # shellcheck disable=SC2086
  "$BIN/bigc" compile "$d/$model.mlir" -o "$d/x.bigc" --hardware h100-x1 --precision bf16 --lr 3e-4 $opts |
    sed -n 's/^  estimate *\([0-9.]*\) \(ms\|s\) per step.*/\1 \2/p' > "$d/est.$i"
  [ -s "$d/est.$i" ] || { echo "FAIL: no estimate for $model $opts"; exit 1; }
done < <($PY - "$ROOT/bench/gpu/h100_steps.json" <<'PY'
import json, sys
for i, s in enumerate(json.load(open(sys.argv[1]))["steps"]):
    print(i, s["model"], s["options"])
PY
)
$PY - "$ROOT/bench/gpu/h100_steps.json" "$d" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = []
for i, s in enumerate(doc["steps"]):
    v, unit = open(f"{sys.argv[2]}/est.{i}").read().split()
    est = float(v) * (1e3 if unit == "s" else 1.0)
    rows.append((s, est, est / s["step_ms"] - 1))
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda k: xs[k])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r
a, b = ranks([s["step_ms"] for s, _, _ in rows]), ranks([e for _, e, _ in rows])
ma, mb = sum(a) / len(a), sum(b) / len(b)
cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
rho = cov / (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
print(f"{'model':12s} {'options':56s} {'measured':>9s} {'estimate':>9s} {'error':>7s}")
for s, est, err in rows:
    print(f"{s['model']:12s} {s['options'] or '(as generated)':56s} {s['step_ms']:8.1f}  {est:8.1f}  {100 * err:+6.1f}%"
          + ("  (calibration)" if s.get("calibration") else ""))
worst = max(rows, key=lambda r: abs(r[2]))
out = [r for r in rows if not r[0].get("calibration")]
worst_out = max(out, key=lambda r: abs(r[2]))
ok = abs(worst[2]) <= 0.20 and rho >= 0.8
print(f"{len(rows)} configurations ({len(out)} not used in the calibration): largest error {100 * abs(worst[2]):.1f}% "
      f"({worst[0]['model']} {worst[0]['options'] or 'as generated'}; <= 20%), of those not in the calibration "
      f"{100 * abs(worst_out[2]):.1f}%; Spearman {rho:.3f} (>= 0.8)")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
