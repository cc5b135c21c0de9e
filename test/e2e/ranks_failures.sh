#!/usr/bin/env bash
# Eight ranks that go wrong, and what the plan says per rank:
#  1. a rank that fails mid-step (BIGC_FAULT kind=crash) stops every rank: exit 1 within seconds,
#     one message naming the rank, the step and the collective the others were stopped in;
#  2. a rank that stops answering (kind=hang) makes the others time out (--comm-timeout): exit 1,
#     the message names the missing rank, the collective and the step; no hang;
#  3. ZeRO-3: the model-state bytes per rank (bigc inspect --json --rank R) fall as 1/N for
#     N = 1, 2, 4, 8; ZeRO-1 and 2 keep the weights whole, shard the rest;
#  4. with --hardware, the plan's estimate (bigc compile's line, inspect --json): step time and the
#     share of each collective hidden behind compute, consistent (hidden <= time);
#  5. bad input: --rank out of range, --dump-grads of sharded gradients, BIGC_FAULT malformed (an mpirun world that does not divide
#     the ranks: test/e2e/mpirun.sh): one clear error each, exit 1.
set -euo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
"$BIN/bigc" gen gpt --preset tiny --batch 2 -o "$d/m.mlir" > /dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/z2.bigc" --ranks 8 --zero 2 --quiet
"$BIN/bigc" compile "$d/m.mlir" -o "$d/z3.bigc" --ranks 8 --zero 3 --quiet

expect_fail() { # name, expected substrings..., then -- command
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  local t0=$SECONDS rc=0
  timeout 120 "$@" > "$d/out.txt" 2>&1 || rc=$?
  if [ $rc -ne 1 ]; then echo "FAIL $name: exit $rc (expected 1)"; cat "$d/out.txt"; exit 1; fi
  for p in "${pats[@]}"; do
    grep -qF -- "$p" "$d/out.txt" || { echo "FAIL $name: no '$p' in:"; cat "$d/out.txt"; exit 1; }
  done
  echo "ok   $name: exit 1 after $((SECONDS - t0)) s: $(head -c 300 "$d/out.txt")"
}

expect_fail "crash" "rank 3" "crashed in step 2" "stopped in step 2: instruction" -- \
  env BIGC_FAULT=rank=3,step=2,kind=crash "$BIN/bigc" run "$d/z2.bigc" --steps 4 --quiet
expect_fail "hang" "step 3: instruction" "waited 10 s for rank 5, which did not reach this collective" -- \
  env BIGC_FAULT=rank=5,step=3,kind=hang "$BIN/bigc" run "$d/z3.bigc" --steps 4 --quiet --comm-timeout 10
grep -qE "\((all_gather|reduce_scatter|all_reduce) at " "$d/out.txt" || { echo "FAIL hang: no collective named"; exit 1; }
expect_fail "inspect --rank 8" "--rank 8 is out of range: the program has 8 ranks (0..7)" -- \
  "$BIN/bigc" inspect "$d/z3.bigc" --rank 8
expect_fail "dump-grads of shards" "--dump-grads: the gradients of this program are sharded over its 8 ranks" -- \
  "$BIN/bigc" run "$d/z2.bigc" --steps 1 --dump-grads "$d/g.safetensors"
expect_fail "BIGC_FAULT" "BIGC_FAULT='rank=x': expected rank=R,step=S,kind=crash|hang" -- \
  env BIGC_FAULT=rank=x "$BIN/bigc" run "$d/z3.bigc" --steps 1 --quiet

# The plan's estimate with --hardware: step time and each collective's share hidden behind compute.
"$BIN/bigc" compile "$d/m.mlir" -o "$d/est.bigc" --hardware a100-80g-x8 --zero 3 > "$d/est.txt"
grep -qE "estimate +[0-9.]+ (ns|us|ms|s) per step on a100-80g-x8 .*all_gather [0-9.]+ (ns|us|ms|s), [0-9]+% hidden" "$d/est.txt" || {
  echo "FAIL: no estimate line in bigc compile's output"; cat "$d/est.txt"; exit 1; }
"$BIN/bigc" inspect "$d/est.bigc" --json | $PY -c '
import json, sys
e = json.load(sys.stdin)["estimate"]
c = {x["op"]: x for x in e["collectives"]}
assert e["step_seconds"] >= e["compute_seconds"] > 0, e
assert set(c) >= {"all_gather", "reduce_scatter"}, c
for x in c.values():
    assert 0 <= x["hidden_seconds"] <= x["seconds"] + 1e-12 and 0 <= x["hidden_fraction"] <= 1, x
print("ok   estimate: step %.3f ms, compute %.3f ms, all-gather %.0f%% hidden" % (
    e["step_seconds"] * 1e3, e["compute_seconds"] * 1e3, 100 * c["all_gather"]["hidden_fraction"]))'

# The timeline marks the comm stream.
"$BIN/bigc" inspect "$d/z3.bigc" --timeline "$d/z3.svg" > /dev/null
grep -q "collectives (all-reduce, reduce-scatter, all-gather) ([0-9]* instructions" "$d/z3.svg" || {
  echo "FAIL: the timeline has no comm-stream lane"; exit 1; }
echo "ok   timeline: a lane of collectives"

# 1/N: a 4-block model so that padding is small against the tensors.
"$BIN/bigc" gen gpt --preset tiny --layers 4 --hidden 128 --heads 4 -o "$d/w.mlir" > /dev/null
for n in 1 2 4 8; do
  for z in 1 2 3; do "$BIN/bigc" compile "$d/w.mlir" -o "$d/w${n}z$z.bigc" --ranks $n --zero $z --quiet; done
done
$PY - "$BIN" "$d" <<'PY'
import json, subprocess, sys
b, d = sys.argv[1], sys.argv[2]
ok = True
def inspect(n, z, r):
    return json.loads(subprocess.check_output([f"{b}/bigc", "inspect", f"{d}/w{n}z{z}.bigc", "--json", "--rank", str(r)]))
# fp32, per parameter: master 4 + compute copy 4 + AdamW moments 8 = 16 bytes, whole; ZeRO-1/2 add
# the rank's shard of the compute copy (4 more, logically) and keep the copy itself whole.
for z in (1, 2, 3):
    wholes = set()
    for n in (2, 4, 8):
        for r in (0, n - 1):
            j = inspect(n, z, r)
            ms = j["model_state_bytes"]
            wholes.add(ms["whole"])
            frac = ms["rank"] / ms["whole"]
            want = 1.0 / n if z == 3 else (4.0 + 16.0 / n) / 20.0
            good = abs(frac - want) <= 0.01 * want + 0.002 and j["rank"] == r
            print(("ok   " if good else "FAIL ") + f"zero {z}, {n} ranks, rank {r}: model state {ms['rank']} of "
                  f"{ms['whole']} bytes = {frac:.4f} (expected {want:.4f})")
            ok &= good
            if z == 3:
                c = j["collectives"]
                good = c.get("all_gather", {}).get("count", 0) > 0 and c.get("reduce_scatter", {}).get("count", 0) > 0
                ok &= good
    good = len(wholes) == 1
    print(("ok   " if good else "FAIL ") + f"zero {z}: the whole model state is the same for 2, 4 and 8 ranks: {sorted(wholes)}")
    ok &= good
sys.exit(0 if ok else 1)
PY
