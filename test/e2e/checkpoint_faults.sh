#!/usr/bin/env bash
# What a training run keeps under faults (issue: "nothing lost"), on the tiny GPT:
#  1. a damaged newest checkpoint: skipped and moved aside as step-N.damaged (never resumed, kept or
#     counted again); retention then keeps the checkpoint resumed from and the new one; damage the
#     new one too, and the one resumed from still resumes;
#  2. the log: a resumed run keeps the lines up to its step and appends (bit-identical to a run that
#     never stopped); after kill -9 the log is there under its own name with every step so far; an
#     error exit keeps every step and adds the error as a last JSON line;
#  3. two runs on one checkpoint directory: the second is refused, naming the first's pid;
#  4. --check-numerics blames the instruction that made the first inf (AdamW, not its weights) and
#     gives the fp16 hint only for fp16;
#  5. a checkpoint that cannot be written (a file-size limit standing in for a full disk): SIGTERM
#     says so and names the newest complete checkpoint, exit 1; a periodic one stops the run with the
#     same message, the log keeping every step and the error;
#  6. --resume at --steps still writes --save-weights; I32 weights are refused by --load-weights;
#  1b. a run killed while writing its first checkpoint: --resume starts over instead of refusing; a
#     checkpoint a same-step replacement renamed aside comes back.
set -uo pipefail
BIN=$1
d=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$d"' EXIT
PY=/usr/bin/python3
fail=0
bad() { echo "FAIL: $*"; fail=1; }
"$BIN/bigc" gen gpt --preset tiny -o "$d/m.mlir" >/dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --quiet
run() { "$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --quiet "$@"; }
losses() { $PY -c "import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if 'loss' in j: print(j['step'], j['loss'])" "$1"; }
run --steps 12 --log "$d/straight.jsonl"

# 1. A damaged newest checkpoint.
run --steps 8 --checkpoint-dir "$d/ck" --checkpoint-every 4
$PY -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-3] ^= 1; open(p, 'wb').write(b)" \
  "$d/ck/step-00000008/state.safetensors"
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 12 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume \
  --log "$d/a.jsonl" 2>"$d/err" >/dev/null || bad "resume past a damaged checkpoint: $(cat "$d/err")"
grep -q "skipping .*step-00000008.*checksum mismatch (damaged); moved aside to .*step-00000008.damaged" "$d/err" ||
  bad "the damaged checkpoint was not reported as moved aside: $(cat "$d/err")"
grep -q "resumed from .*step-00000004" "$d/err" || bad "not resumed from step 4: $(cat "$d/err")"
[ "$(ls "$d/ck" | tr '\n' ' ')" = "step-00000008.damaged step-00000012 " ] &&
  bad "the checkpoint resumed from (step 4) was deleted while the damaged one stayed"
# keep 2: the one resumed from (4) and the new ones (8 again, 12) -> 8 and 12 complete, 4 pruned only
# once two newer complete ones exist; the damaged one aside, not counted.
[ "$(ls "$d/ck" | tr '\n' ' ')" = "step-00000008 step-00000008.damaged step-00000012 " ] ||
  bad "after resuming: $(ls "$d/ck" | tr '\n' ' ')"
$PY -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-3] ^= 1; open(p, 'wb').write(b)" \
  "$d/ck/step-00000012/state.safetensors"
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 12 --checkpoint-dir "$d/ck" --resume --log "$d/a2.jsonl" \
  2>"$d/err" >/dev/null || bad "resume after damaging the new one too: $(cat "$d/err")"
grep -q "resumed from .*step-00000008 " "$d/err" || bad "did not resume from step 8: $(cat "$d/err")"
[ -d "$d/ck/step-00000012.damaged" ] && [ -d "$d/ck/step-00000008.damaged" ] ||
  bad "the second damaged checkpoint was not moved aside: $(ls "$d/ck" | tr '\n' ' ')"
echo "ok: damaged checkpoints moved aside ($(ls "$d/ck" | tr '\n' ' ')); the good ones kept and resumed"

# 1b. A run killed while writing its first checkpoint leaves only a temporary directory: --resume
# passes over it, starts at step 0 and trains on (found by e2e.fault_injection, FAULT_SEED=1795829055,
# where every later attempt was refused); the next checkpoint removes it. A checkpoint renamed aside
# by a same-step replacement that never arrived (.old-step-N.PID) is resumed where it is.
mkdir -p "$d/ik/.step-00000002.tmp.99999" && echo partial >"$d/ik/.step-00000002.tmp.99999/model.safetensors"
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 12 --checkpoint-dir "$d/ik" --checkpoint-every 4 --resume \
  --log "$d/ik.jsonl" 2>"$d/err" >/dev/null || bad "resume over an incomplete checkpoint only: $(cat "$d/err")"
grep -q "passing over .*step-00000002.tmp.99999: an incomplete checkpoint" "$d/err" ||
  bad "the incomplete checkpoint was not reported: $(cat "$d/err")"
grep -q "no checkpoint in .*: starting at step 0" "$d/err" || bad "did not start at step 0: $(cat "$d/err")"
[ "$(losses "$d/ik.jsonl")" = "$(losses "$d/straight.jsonl")" ] || bad "the run over an incomplete checkpoint differs"
[ "$(ls -A "$d/ik" | grep -v '^.lock$' | tr '\n' ' ')" = "step-00000008 step-00000012 " ] ||
  bad "leftovers after the run: $(ls -A "$d/ik" | tr '\n' ' ')"
mv "$d/ik/step-00000012" "$d/ik/.old-step-00000012.4242"
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 12 --checkpoint-dir "$d/ik" --resume --log "$d/ik.jsonl" \
  2>"$d/err" >/dev/null || bad "resume with the newest checkpoint renamed aside: $(cat "$d/err")"
grep -q "resumed from .*/.old-step-00000012.4242 (step 12" "$d/err" ||
  bad "the checkpoint renamed aside was not resumed: $(cat "$d/err")"
echo "ok: an incomplete checkpoint passed over (a fresh start), a replaced one left aside taken back"

# 2. The log: resumed, killed, and on an error.
run --steps 6 --checkpoint-dir "$d/lk" --checkpoint-every 3 --log "$d/L.jsonl"
run --steps 12 --checkpoint-dir "$d/lk" --resume --log "$d/L.jsonl"
[ "$(losses "$d/L.jsonl")" = "$(losses "$d/straight.jsonl")" ] ||
  bad "the resumed log is not steps 1-12 of the straight run: $(losses "$d/L.jsonl" | tr '\n' ' ')"
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --quiet --steps 100000 --log "$d/K.jsonl" &
pid=$!
for _ in $(seq 1 1200); do [ "$(cat "$d/K.jsonl" 2>/dev/null | wc -l)" -ge 5 ] && break; sleep 0.05; done
kill -9 $pid
wait $pid 2>/dev/null
n=$(wc -l <"$d/K.jsonl")
[ "$n" -ge 5 ] && [ ! -e "$d/K.jsonl.tmp" ] || bad "after kill -9: $n lines, $(ls "$d" | grep K.jsonl)"
$PY -c "import json, sys; [json.loads(l) for l in open(sys.argv[1]).read().splitlines()[:-1]]" "$d/K.jsonl" ||
  bad "after kill -9: the log's lines do not parse"
echo "ok: the log resumed (12 steps equal to the straight run's) and kept under kill -9 ($n lines)"
"$BIN/bigc" compile "$d/m.mlir" -o "$d/inf.bigc" --lr 3e38 --weight-decay 10 --quiet
"$BIN/bigc" run "$d/inf.bigc" --synthetic --steps 3 --check-numerics --log "$d/E.jsonl" --quiet 2>"$d/err" &&
  bad "an inf update did not stop the run"
tail -n 1 "$d/E.jsonl" | grep -q '"step":1,"error":"step 1: instruction [0-9]* (adamw at .*) produced inf or nan: output 0 .* from finite inputs' ||
  bad "the log's last line: $(tail -n 1 "$d/E.jsonl")"
grep -q "already holds inf" "$d/err" && bad "the weights blamed for AdamW's inf: $(cat "$d/err")"
grep -q "bf16 instead of fp16" "$d/err" && bad "the fp16 hint for an fp32 program: $(cat "$d/err")"
grep -q '"exit_status":1' "$d/E.jsonl" || bad "no exit status in the error line"
echo "ok: --check-numerics blames AdamW (from finite inputs), the log ends with the error: $(tail -c 120 "$d/E.jsonl")"
"$BIN/bigc" compile "$d/m.mlir" -o "$d/h.bigc" --precision fp16 --lr 3e38 --weight-decay 10 --quiet
"$BIN/bigc" run "$d/h.bigc" --synthetic --steps 3 --check-numerics --quiet 2>"$d/err"
grep -q "bf16 instead of fp16" "$d/err" || bad "no fp16 hint for an fp16 program: $(cat "$d/err")"

# 3. Two runs on one checkpoint directory.
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --quiet --steps 100000 --checkpoint-dir "$d/two" &
pid=$!
for _ in $(seq 1 1200); do [ -s "$d/two/.lock" ] && break; sleep 0.05; done
run --steps 5 --checkpoint-dir "$d/two" --resume 2>"$d/err" && bad "a second run on a directory in use was let in"
grep -q -- "--checkpoint-dir $d/two is in use by another run (pid $pid)" "$d/err" || bad "second run: $(cat "$d/err")"
kill -TERM $pid
wait $pid || bad "the first run did not stop cleanly on SIGTERM"
run --steps 3 --checkpoint-dir "$d/two" --resume 2>"$d/err" >/dev/null || bad "the directory stayed locked: $(cat "$d/err")"
echo "ok: a second run on a checkpoint directory in use is refused, naming pid $pid"

# 5. A checkpoint that cannot be written (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with EFBIG).
run --steps 2 --checkpoint-dir "$d/full"
(
  trap '' XFSZ
  ulimit -f 200 # KiB: the log fits, the checkpoint's files do not
  exec "$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 100000 --checkpoint-dir "$d/full" --resume \
    --log "$d/F.jsonl" --quiet
) 2>"$d/err" &
pid=$!
for _ in $(seq 1 1200); do [ "$(cat "$d/F.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 1 ] || bad "SIGTERM with a failing checkpoint: exit $rc"
grep -q "stopped by SIGTERM after step [0-9]*, but .*could not be written: .*File too large; the newest complete checkpoint is .*step-00000002 (step 2): continue from it" "$d/err" ||
  bad "SIGTERM with a failing checkpoint: $(cat "$d/err")"
grep -q "continue with the same command and --resume" "$d/err" && bad "told to resume a checkpoint that was not written"
tail -n 1 "$d/F.jsonl" | grep -q '"error":"stopped by SIGTERM' || bad "the log lacks the error: $(tail -n 1 "$d/F.jsonl")"
[ "$(ls "$d/full" | tr '\n' ' ')" = "step-00000002 " ] || bad "checkpoints after the failure: $(ls -a "$d/full")"
echo "ok: SIGTERM when the checkpoint cannot be written: exit 1, $(grep -o 'but .*' "$d/err" | cut -c1-150)"
(
  trap '' XFSZ
  ulimit -f 200
  exec "$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 20 --checkpoint-dir "$d/full" --resume \
    --checkpoint-every 3 --log "$d/G.jsonl" --quiet
) 2>"$d/err"
rc=$?
[ $rc -eq 1 ] || bad "a periodic checkpoint that fails: exit $rc"
grep -q "could not be written: .*File too large; the newest complete checkpoint is .*step-00000002" "$d/err" ||
  bad "a periodic checkpoint that fails: $(cat "$d/err")"
[ "$(losses "$d/G.jsonl" | head -n 1)" = "$(losses "$d/straight.jsonl" | sed -n 3p)" ] ||
  bad "the failing run's log does not start at step 3: $(head -n 1 "$d/G.jsonl")"
tail -n 1 "$d/G.jsonl" | grep -q '"error":' || bad "the log lacks the error line"
echo "ok: a periodic checkpoint that fails stops the run naming the newest complete one; the log keeps $(grep -c loss "$d/G.jsonl") steps and the error"

# 6. --save-weights with nothing to run; I32 weights.
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 5 --steps 12 --checkpoint-dir "$d/lk" --resume \
  --save-weights "$d/w.safetensors" --quiet 2>"$d/err" || bad "--resume at --steps: $(cat "$d/err")"
cmp -s "$d/w.safetensors" "$d/lk/step-00000012/model.safetensors" || {
  $PY - "$d/w.safetensors" "$d/lk/step-00000012/model.safetensors" <<'PY' || bad "--save-weights at --steps differs from the checkpoint's weights"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    # (the checkpoint's names are Hugging Face's: bigc gen gpt's under "transformer.")
    return {k.replace("transformer.", "", 1): b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b else 1)
PY
}
[ -s "$d/w.safetensors" ] || bad "--resume at --steps wrote no --save-weights"
$PY - "$d/w.safetensors" "$d/i32.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = next(k for k in h if k != "__metadata__" and h[k]["dtype"] == "F32")
h[name]["dtype"] = "I32"  # same size: the bytes read as integers
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
print(name)
PY
run --steps 1 --load-weights "$d/i32.safetensors" 2>"$d/err" && bad "I32 weights were loaded"
grep -q "is stored as I32 (integers): weights are F32, BF16 or F16" "$d/err" || bad "I32 weights: $(cat "$d/err")"
echo "ok: --save-weights written at --steps; I32 weights refused: $(cut -c1-120 "$d/err")"
exit $fail
