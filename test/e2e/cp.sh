#!/usr/bin/env bash
# Context parallelism (--cp, --cp-kind) on the CPU backend: a LLaMA-shaped model (grouped-query
# attention with 8 heads over 4 key/value heads, rotary embeddings, `bigc gen llama`) trained 10
# steps with each sequence of 32 tokens split over 2 and 4 ranks, by ring attention and by the
# all-to-all (DeepSpeed-Ulysses), alone, with --tp 2, with --zero 3 over 2 data groups, with
# --recompute full and micro-batches, with --pp 2, with --offload cpu and the fused loss, against the single-rank fp32 run on the same global batch
# (32 sequences) from the same initial weights; bf16 against the single-rank bf16 run. The bounds:
# the issue's 1e-6 on the losses (relative; measured 1.1e-7 at most), ranks.sh's 2e-5 on the
# weights' update (||w - w_one|| / ||w_one - w_init||; measured below, MEASURED lines). Then the bad
# inputs: one message each, exit 1, nothing written.
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
for b in 32 16 8; do
  "$BIN/bigc" gen llama --layers 2 --hidden 64 --heads 8 --kv-heads 4 --ffn 128 --vocab 256 --seq 32 --batch $b \
    -o "$d/b$b.mlir"
done
"$BIN/bigc" gen gpt --layers 1 --hidden 32 --heads 2 --vocab 64 --seq 32 --batch 4 -o "$d/gpt.mlir"
source "$HERE/equivalence_runs.shlib" # compile NAME MODEL OPTIONS..., run NAME, bad PATTERN OPTIONS...

compile one b32
compile one16 b32 --precision bf16
compile ring2 b32 --ranks 2 --cp 2
compile ring4 b32 --ranks 4 --cp 4
compile a2a2 b32 --ranks 2 --cp 2 --cp-kind a2a
compile a2a4 b32 --ranks 4 --cp 4 --cp-kind a2a
compile ring2tp2 b32 --ranks 4 --cp 2 --tp 2 --sequence-parallel
compile ring4tp2 b32 --ranks 8 --cp 4 --tp 2
compile a2a2tp2 b32 --ranks 4 --cp 2 --cp-kind a2a --tp 2
compile ring2z3 b16 --ranks 4 --cp 2 --zero 3
compile a2a2z3 b16 --ranks 4 --cp 2 --cp-kind a2a --zero 3
compile ring2rc b8 --ranks 2 --cp 2 --recompute full --micro-batches 4
compile ring2bf16 b32 --ranks 2 --cp 2 --precision bf16
compile ring2pp2 b16 --ranks 4 --cp 2 --pp 2 --micro-batches 2
compile ring2off b32 --ranks 2 --cp 2 --offload cpu --fuse-loss --fuse
names="one one16 ring2 ring4 a2a2 a2a4 ring2tp2 ring4tp2 a2a2tp2 ring2z3 a2a2z3 ring2rc ring2bf16 ring2pp2 ring2off"
for n in $names; do run $n; done
"$BIN/bigc" run "$d/one.bigc" --steps 0 --save-weights "$d/init.safetensors" --quiet
"$BIN/bigc" inspect "$d/ring4.bigc" > "$d/ring4.txt"
# The streams' discipline (the ring's shifts and the all-to-alls on comm_cp, nothing else there) and
# the plan's proof, on a ring and an all-to-all program.
for n in ring4 a2a2z3 ring2tp2; do
  $PY "$HERE/check_streams.py" "$d/$n.bigc" > /dev/null
  "$BIN/bigc" verify "$d/$n.bigc" > "$d/$n.verify"
done
grep -q "the context axis's 20 ring shifts and 0 all-to-alls per step, on one stream in the same order on each of the 4 ranks of a cp group, pair in order and cannot deadlock" "$d/ring4.verify" ||
  { echo "FAIL: bigc verify on ring4:"; cat "$d/ring4.verify"; exit 1; }
grep -q "the context axis's 0 ring shifts and 8 all-to-alls per step" "$d/a2a2z3.verify" ||
  { echo "FAIL: bigc verify on a2a2z3:"; cat "$d/a2a2z3.verify"; exit 1; }

$PY - "$d" "$HERE" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import runlog
d = sys.argv[1]
check = runlog.Checks()
w0 = runlog.weights(f"{d}/init.safetensors")
base, _ = runlog.losses(f"{d}/one.jsonl")
check("the model learns", len(base) == 10 and base[-1] < base[0] - 0.05, f"loss {base[0]:.4f} -> {base[-1]:.4f}")
F32 = (1e-6, 2e-5)
pairs = [(n, "one", *F32) for n in ["ring2", "ring4", "a2a2", "a2a4", "ring2tp2", "ring4tp2", "a2a2tp2", "ring2z3",
                                    "a2a2z3", "ring2rc", "ring2pp2", "ring2off"]]
# bf16 against bf16 on one rank: the blocks' partial outputs and the travelling key/value gradients
# are f32, so the difference is the order of the sums (measured 2026-11-28: see MEASURED).
pairs.append(("ring2bf16", "one16", 2e-4, 2e-2))
for n, ref, tol, utol in pairs:
    r, u = runlog.compare(check, d, n, ref, tol, utol, w0, what=f"cp vs one rank")
    print(f"MEASURED {n}: loss {r:.3g}, update {u:.3g}")
plan = open(f"{d}/ring4.txt").read()
check("inspect shows the cp axis", "context parallel: cp 4 (within dp: 1 data groups of 4 ranks); each sequence of "
      "32 tokens in 8 chunks of 4, rank 0 (index 0 on the cp axis) holding chunks 0 and 7; attention by ring (20 shifts "
      "per step" in plan, "the plan names the context axis, the chunks and the ring")
sys.exit(0 if check.ok else 1)
PY

# Bad input: one clear message each, exit 1, nothing written.
bad "sequence of 32 tokens must split into 2 x 3 = 6 equal chunks" "$d/b32.mlir" --ranks 3 --cp 3
bad "option --cp 2 does not divide the data-parallel ranks.*--ranks must be a multiple of cp x tp = 4" "$d/b32.mlir" --ranks 6 --cp 2 --tp 2
bad "4 key/value heads and 8 query heads, which 8 does not divide" "$d/b32.mlir" --ranks 8 --cp 8 --cp-kind a2a
bad "an operand without the tokens \('tensor<32x32xf32>'\) spans the sequence's dimension: a position table" \
  "$d/gpt.mlir" --ranks 2 --cp 2
bad "the model has no attention, so nothing needs the whole sequence" "$HERE/../Passes/tensor-parallel.mlir" --ranks 2 \
  --cp 2
bad "cp-kind" "$d/b32.mlir" --ranks 2 --cp 2 --cp-kind ulysses
bad "option --cp-kind: only with --cp C, C > 1" "$d/b32.mlir" --cp-kind a2a
# The global batch counts the data groups (a group's cp ranks share its sequences): 2 x 32 here.
bad "global-batch 128 with 2 data-parallel group\(s\) of 2 cp ranks x 1 micro-batch\(es\) needs a batch of 64" \
  "$d/b32.mlir" --ranks 4 --cp 2 --global-batch 128
"$BIN/bigc" compile "$d/b32.mlir" --ranks 4 --cp 2 --global-batch 64 -o "$d/gb.bigc" --quiet
echo "cp: ok"
