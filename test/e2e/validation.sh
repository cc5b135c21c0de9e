#!/usr/bin/env bash
# Validation (bigc run --val-data, bigc eval): the program's evaluation program is the step's own
# forward; during training it runs alone in the training arenas, under bigc eval in a memory plan
# of its own (eval.plan: no gradients, no optimizer state, its activations packed on their own;
# pipelined and nvme programs have none and run in the training arenas). The held-out loss of a batch
# is exactly the loss the training step computes on that batch before its update: bigc eval on the
# first batch of a file equals, bit for bit, step 1's loss of bigc run on the same file from the
# same weights, for every technique (ZeRO 1-3, tensor and pipeline parallelism, offload to the host
# and the drive, micro-batches, recomputation, 16-bit precision, the fused loss), and each
# program's own evaluation arena is smaller than the step's and holds no gradient or optimizer
# state. On 2 ranks it equals one rank with 2 micro-batches (the same sequences; to float
# rounding). During training the log's val_loss after step N (training arenas) equals bigc eval of
# that step's checkpoint (its own plan). Bad inputs: one error each.
set -uo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
fail=0
bad() { echo "FAIL: $*"; fail=1; }
"$BIN/bigc" gen gpt --preset tiny --layers 2 --batch 2 --seq 32 -o "$d/m.mlir" >/dev/null
head -c 60000 /dev/urandom | od -An -tu1 -v | tr -s ' ' '\n' | grep . >"$d/bytes.txt"
$PY - "$d" <<'PY'
import struct, sys
d = sys.argv[1]
vals = [int(x) for x in open(f"{d}/bytes.txt")]
def write(path, toks):
    h = [0] * 256
    h[0], h[1], h[2] = 20240520, 1, len(toks)
    open(path, "wb").write(struct.pack("<256i", *h) + struct.pack(f"<{len(toks)}H", *toks))
write(f"{d}/train.bin", [(v * 7 + i) % 256 for i, v in enumerate(vals[:40000])])
write(f"{d}/val.bin", vals[40000:])
write(f"{d}/short.bin", vals[:40])
write(f"{d}/short2.bin", vals[:200])
PY
"$BIN/bigc" compile "$d/m.mlir" -o "$d/plain.bigc" --quiet
"$BIN/bigc" run "$d/plain.bigc" --data "$d/train.bin" --steps 3 --save-weights "$d/w.safetensors" --quiet
loss_of() { $PY -c "import json, sys; print(repr(json.loads(open(sys.argv[1]).readline())['loss']))" "$1"; }
# eval NAME FLAGS...: compiled with FLAGS; bigc eval (one batch of val.bin) against step 1 of a run on val.bin
check() {
  local name=$1
  shift
  "$BIN/bigc" compile "$d/m.mlir" -o "$d/$name.bigc" --quiet "$@" 2>"$d/err" ||
    { bad "$name: compile: $(cat "$d/err")"; return; }
  "$BIN/bigc" eval "$d/$name.bigc" --data "$d/val.bin" --eval-batches 1 --load-weights "$d/w.safetensors" \
    --quiet >"$d/$name.eval" 2>"$d/err" || { bad "$name: eval: $(cat "$d/err")"; return; }
  "$BIN/bigc" run "$d/$name.bigc" --data "$d/val.bin" --steps 1 --load-weights "$d/w.safetensors" \
    --log "$d/$name.jsonl" --quiet 2>"$d/err" || { bad "$name: run: $(cat "$d/err")"; return; }
  local e s
  e=$(sed -n 's/^bigc eval: loss \([0-9.]*\) on 1 batches.*/\1/p' "$d/$name.eval")
  s=$($PY -c "print('%.6f' % $(loss_of "$d/$name.jsonl"))")
  [ -n "$e" ] && [ "$e" = "$s" ] || { bad "$name: bigc eval $e, the training step's loss $s"; return; }
  local plan
  plan=$($PY - "$d/$name.bigc" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
p = json.loads(raw[raw.index(b"\n") + 1:])
plan = (p.get("eval") or {}).get("plan")
if any(s["name"] == "nvme" for s in p["spaces"]) or p.get("stages"):
    print("none" if plan is None else "FAIL: a plan for a pipelined or nvme program")
    sys.exit()
if plan is None:
    print("FAIL: no eval.plan"); sys.exit()
step = {s["name"]: s["arena_bytes"] for s in p["spaces"]}
roles = {p["buffers"][i]["role"] for i in plan["buffers"]}
if roles & {"grad", "optimizer"}:
    print("FAIL: the plan keeps", sorted(roles & {"grad", "optimizer"})); sys.exit()
if not all(plan["arenas"][k] < step[k] for k in plan["arenas"] if plan["arenas"][k] > 0):
    print("FAIL: arenas", plan["arenas"], "not below the step's", step); sys.exit()
print(" ".join(f"{k} {plan['arenas'][k]}/{step[k]}" for k in sorted(plan["arenas"])))
PY
)
  case $plan in FAIL*) bad "$name: $plan"; return ;; esac
  echo "ok: $name: the held-out loss $e is the training step's loss on that batch (evaluation arenas: $plan)"
}
check plain
check zero1 --ranks 2 --zero 1
check zero2 --ranks 2 --zero 2
check zero3 --ranks 2 --zero 3
check tp2 --ranks 2 --tp 2
check pp2 --ranks 2 --pp 2 --micro-batches 2
check pp2_tp2_sp_z3 --ranks 8 --pp 2 --tp 2 --zero 3 --sequence-parallel --micro-batches 2
check micro2 --micro-batches 2
check recompute --recompute full
check bf16 --precision bf16
check fp16 --precision fp16
check offload --offload cpu
check offload_z2 --ranks 2 --zero 2 --offload cpu
check nvme --offload nvme --nvme-path "$d"
check fused --fuse-loss --fuse
# Two ranks against one rank with two micro-batches (rank r reads chunk r, micro-batch k chunk k).
e2=$(sed -n 's/^bigc eval: loss \([0-9.]*\).*/\1/p' "$d/zero3.eval")
e1=$(sed -n 's/^bigc eval: loss \([0-9.]*\).*/\1/p' "$d/micro2.eval")
$PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-6 * abs(b) else 1)" \
  "$e2" "$e1" || bad "2 ranks (ZeRO 3) $e2, one rank with 2 micro-batches $e1"
echo "ok: 2 ranks $e2 = one rank with 2 micro-batches $e1"
# During training: val_loss after step 4 is bigc eval of the checkpoint of step 4.
"$BIN/bigc" run "$d/plain.bigc" --data "$d/train.bin" --val-data "$d/val.bin" --eval-every 4 --eval-batches 5 \
  --steps 6 --checkpoint-dir "$d/ck" --checkpoint-every 4 --keep-checkpoints 5 --log "$d/t.jsonl" --quiet
n=$(grep -c val_loss "$d/t.jsonl")
[ "$n" = 2 ] || bad "val_loss in $n lines, expected 2 (after steps 4 and 6)"
v4=$($PY -c "import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j['step'] == 4: print('%.6f' % j['val_loss'])" "$d/t.jsonl")
e4=$("$BIN/bigc" eval "$d/plain.bigc" --data "$d/val.bin" --eval-batches 5 --checkpoint "$d/ck/step-00000004" |
  sed -n 's/^bigc eval: loss \([0-9.]*\).*/\1/p')
[ -n "$v4" ] && [ "$v4" = "$e4" ] || bad "val_loss after step 4 $v4, bigc eval of its checkpoint $e4"
echo "ok: val_loss after step 4 ($v4) = bigc eval --checkpoint of step 4 ($e4)"
# Bad inputs.
expect() { # PATTERN -- CMD...
  local pattern=$1
  shift 2
  "$@" >/dev/null 2>"$d/err" && { bad "accepted: $*"; return; }
  grep -qF -- "$pattern" "$d/err" || { bad "$*: $(cat "$d/err")"; return; }
  echo "ok: refused: $(cat "$d/err" | head -n 1 | cut -c1-150)"
}
expect "--eval-every needs --val-data FILE" -- "$BIN/bigc" run "$d/plain.bigc" --eval-every 5 --steps 1
expect "short.bin has 40 tokens; one batch of 2×32 needs B·T+1 = 65" -- "$BIN/bigc" run "$d/plain.bigc" --val-data "$d/short.bin" --steps 1
"$BIN/bigc" compile "$d/m.mlir" -o "$d/k4.bigc" --micro-batches 4 --quiet
expect "fewer than one evaluation batch (4 x 2 x 32 = 256 tokens" -- "$BIN/bigc" eval "$d/k4.bigc" --data "$d/short2.bin"
expect "--eval-batches 100000: " -- "$BIN/bigc" eval "$d/plain.bigc" --data "$d/val.bin" --eval-batches 100000
expect "--data FILE: the held-out token file to evaluate on is missing" -- "$BIN/bigc" eval "$d/plain.bigc"
expect "unknown option '--steps'" -- "$BIN/bigc" eval "$d/plain.bigc" --data "$d/val.bin" --steps 3
exit $fail
