#!/usr/bin/env bash
# Recomputation changes where activations live, never what is computed: the tiny GPT trains 10
# steps (fp32) with --recompute none, full, selective and auto (a budget between the smallest and
# the largest plan) and every loss equals the plain run's bit for bit (docs/performance.md says
# bit-identical; the recomputed values come from the same kernels and inputs); the device arenas
# order full < selective < none; bigc inspect reports the bytes saved and FLOPs added; a budget
# below any recomputation schedule fails (exit 1) naming the minimum, writing nothing.
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$BIN/bigc" gen gpt --preset tiny -o "$d/model.mlir"
for p in none full selective; do
  "$BIN/bigc" compile "$d/model.mlir" -o "$d/$p.bigc" --recompute "$p" --quiet
  "$BIN/bigc" inspect "$d/$p.bigc" --json > "$d/$p.json"
done
# A budget halfway between full's arena and none's.
budget=$(/usr/bin/python3 -c "import json,sys; a=[json.load(open(f))['spaces']['device']['arena_bytes'] for f in sys.argv[1:]]; print((a[0]+a[1])//2)" "$d/full.json" "$d/none.json")
"$BIN/bigc" compile "$d/model.mlir" -o "$d/auto.bigc" --recompute auto --memory-budget "$budget" > "$d/auto.out"
cat "$d/auto.out"
"$BIN/bigc" inspect "$d/auto.bigc" --json > "$d/auto.json"
"$BIN/bigc" inspect "$d/full.bigc" > "$d/full.txt"
for p in none full selective auto; do
  "$BIN/bigc" run "$d/$p.bigc" --synthetic --steps 10 --log "$d/$p.jsonl" --quiet
done
# Impossible budget: exit 1, the minimum named, nothing written.
set +e
"$BIN/bigc" compile "$d/model.mlir" -o "$d/bad.bigc" --recompute auto --memory-budget 1M --quiet 2> "$d/bad.err"
rc=$?
set -e
/usr/bin/python3 - "$d" "$budget" "$rc" <<'PY'
import json, os, re, sys
d, budget, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
logs = {p: [json.loads(l) for l in open(f"{d}/{p}.jsonl") if l.strip()] for p in ("none", "full", "selective", "auto")}
base = [r["loss"] for r in logs["none"]]
assert len(base) == 10, f"expected 10 steps, got {len(base)}"
for p in ("full", "selective", "auto"):
    losses = [r["loss"] for r in logs[p]]
    assert len(losses) == 10, f"{p}: expected 10 steps, got {len(losses)}"
    worst = max(abs(a - b) / abs(a) for a, b in zip(base, losses))
    print(f"{p:10s} max relative loss difference to none over 10 steps: {worst:.3g}")
    assert losses == base, f"{p}: losses differ from the plain run by {worst} relative (expected bit-identical)"
js = {p: json.load(open(f"{d}/{p}.json")) for p in ("none", "full", "selective", "auto")}
arena = {p: js[p]["spaces"]["device"]["arena_bytes"] for p in js}
print("device arena:", ", ".join(f"{p} {arena[p]}" for p in arena), f"(auto budget {budget})")
assert arena["full"] < arena["selective"] < arena["none"], f"expected full < selective < none, got {arena}"
assert arena["auto"] <= budget, f"auto's arena {arena['auto']} exceeds the budget {budget}"
assert arena["auto"] < arena["none"]
for p in ("full", "selective", "auto"):
    rc_ = js[p]["recompute"]
    assert rc_["policy"] == p, rc_
    assert rc_["saved_bytes"] > 0 and rc_["flops_added"] > 0 and rc_["forward_flops"] > 0, rc_
    assert rc_["instructions"] > 0, rc_
    print(f"{p:10s} saved {rc_['saved_bytes']} bytes, +{rc_['flops_added']} FLOPs ({100*rc_['flops_added_fraction_of_forward']:.1f}% of the forward)")
assert js["none"]["recompute"]["saved_bytes"] == 0 and js["none"]["recompute"]["instructions"] == 0
# full recomputes more than selective and saves more.
assert js["full"]["recompute"]["saved_bytes"] > js["selective"]["recompute"]["saved_bytes"]
assert js["full"]["recompute"]["flops_added"] > js["selective"]["recompute"]["flops_added"]
txt = open(f"{d}/full.txt").read()
assert re.search(r"recompute: full: [0-9.]+ (KiB|MiB) of activations not kept for the backward; \+[0-9.]+ MFLOP per step", txt), txt
out = open(f"{d}/auto.out").read()
assert "recompute auto:" in out and "fits --memory-budget" in out, out
err = open(f"{d}/bad.err").read()
print("impossible budget:", err.strip())
assert rc == 1, f"impossible budget: exit {rc}, expected 1"
assert "is smaller than any recomputation schedule reaches: the minimum is" in err, err
assert not os.path.exists(f"{d}/bad.bigc"), "a program was written despite the error"
print("PASS")
PY
