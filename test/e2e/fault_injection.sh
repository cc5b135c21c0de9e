#!/usr/bin/env bash
# Fault injection: a training run killed at random moments, again and again, until it finishes.
# Each attempt resumes from the newest complete checkpoint and is stopped by kill -9 or SIGTERM
# after a random delay, sometimes while a checkpoint is being written (held open by the test hook
# BIGC_TEST_CHECKPOINT_PAUSE_MS), with background or --checkpoint-sync checkpoints. After every
# attempt: no process is left; every line of the log parses (but for a line torn by the kill) and
# each step's loss is bit for bit the one of a run that was never stopped. At the end the log holds
# steps 1..N once each, exactly the uninterrupted run's, and no temporary directory is left. Then
# `bigc import` killed at random moments: no Python process left, nothing written, and the next
# import succeeds. FAULT_SEED repeats a sequence of moments (printed first).
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d)
trap 'pkill -KILL -f "$d/" 2>/dev/null; rm -rf "$d"' EXIT
PY=/usr/bin/python3
SEED=${FAULT_SEED:-$(date +%s)}
echo "fault injection: FAULT_SEED=$SEED"
RANDOM=$SEED
fail=0
bad() { echo "FAIL: $*"; fail=1; }
N=200 # steps of ~5-20 ms: each attempt gets some way before it is killed
"$BIN/bigc" gen gpt --preset tiny --layers 2 --hidden 128 --heads 4 -o "$d/m.mlir" >/dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --quiet
"$BIN/bigc" run "$d/m.bigc" --synthetic --seed 3 --steps $N --log "$d/ref.jsonl" --quiet
# check_log LOG FINAL: each complete line parses and its loss is the reference's; FINAL: steps 1..N
check_log() {
  $PY - "$d/ref.jsonl" "$1" "$2" <<'PY'
import json, sys
ref = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
text = open(sys.argv[2]).read() if __import__("os").path.exists(sys.argv[2]) else ""
lines = text.split("\n")
torn = lines.pop()  # "" when the file ends with a newline
steps = []
for l in lines:
    j = json.loads(l)
    if "error" in j:
        continue
    if j["loss"] != ref[j["step"]]:
        sys.exit(f"step {j['step']}: loss {j['loss']!r}, the uninterrupted run's {ref[j['step']]!r}")
    steps.append(j["step"])
if steps != list(range(1, len(steps) + 1)):
    sys.exit(f"the log's steps are not 1..{len(steps)} once each: {steps}")
if sys.argv[3] == "final" and (steps != sorted(ref) or torn):
    sys.exit(f"the finished log holds steps {steps[:3]}..{steps[-3:]} ({len(steps)}), torn tail {torn!r}")
PY
}
attempts=0 kills=0 during=0
# Ten attempts killed at a random moment, then one left to finish.
while [ $attempts -lt 11 ]; do
  attempts=$((attempts + 1))
  env=()
  mode=()
  [ $((RANDOM % 3)) -eq 0 ] && env=(BIGC_TEST_CHECKPOINT_PAUSE_MS=$((200 + RANDOM % 600)))
  [ $((RANDOM % 2)) -eq 0 ] && mode=(--checkpoint-sync)
  before=$(cat "$d/run.jsonl" 2>/dev/null | wc -l)
  env "${env[@]}" "$BIN/bigc" run "$d/m.bigc" --synthetic --seed 3 --steps $N --checkpoint-dir "$d/ck" \
    --checkpoint-every $((2 + RANDOM % 4)) --resume --log "$d/run.jsonl" --quiet "${mode[@]}" 2>"$d/err" &
  pid=$!
  sig=none
  if [ $attempts -le 10 ]; then
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.05 + r % 100 / 100 }')
    sig=KILL
    [ $((RANDOM % 4)) -eq 0 ] && sig=TERM
    sleep "$delay"
    if kill -0 $pid 2>/dev/null; then
      ls -a "$d/ck" 2>/dev/null | grep -q '^\.step-' && during=$((during + 1))
      kill -$sig $pid 2>/dev/null && kills=$((kills + 1))
    fi
  fi
  wait $pid 2>/dev/null
  rc=$?
  if pgrep -f "$d/m.bigc" >/dev/null; then bad "attempt $attempts: a process is left"; pkill -KILL -f "$d/m.bigc"; fi
  why=$(check_log "$d/run.jsonl" partial 2>&1) || bad "attempt $attempts (SIG$sig): $why"
  # 143: a SIGTERM that came before bigc installed its handler (the process still loading, which
  # on a busy machine can take longer than the delay) ends it as kill -9 would; the handler's own
  # stop is exit 0 after a step, so a 143 after the log has grown is a failure.
  after=$(cat "$d/run.jsonl" 2>/dev/null | wc -l)
  case $rc in
  0 | 137) ;;
  143) [ "$sig" = TERM ] && [ "$after" = "$before" ] && [ ! -s "$d/err" ] ||
    bad "attempt $attempts (SIG$sig): exit 143 after the run had started (log $before -> $after lines): $(cat "$d/err")" ;;
  *) bad "attempt $attempts (SIG$sig): exit $rc: $(cat "$d/err")" ;;
  esac
done
[ "$(ls "$d/ck" | grep '^step-' | sort | tail -n 1)" = "$(printf 'step-%08d' $N)" ] || bad "not finished: $(ls "$d/ck")"
why=$(check_log "$d/run.jsonl" final 2>&1) || bad "the finished log: $why"
left=$(ls -a "$d/ck" | grep -e '^\.step-' -e '^\.old-' || true)
[ -z "$left" ] || bad "temporary directories left: $left"
echo "ok: $attempts attempts, $kills kills ($during while a checkpoint was being written); every resume bit for bit, the log whole ($N steps)"

# The importer killed at random moments.
source "$HERE/python_env.shlib" # PY for the import (or exit 77)
cat >"$d/mod.py" <<'EOF'
import time, torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(self):
        super().__init__(); self.e = nn.Embedding(16, 8); self.h = nn.Linear(8, 16)
    def forward(self, x, y):
        return F.cross_entropy(self.h(self.e(x)).view(-1, 16), y.view(-1))
def make():
    time.sleep(0.5)
    return M(), (torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
EOF
mkdir "$d/imp"
for k in 1 2 3; do
  "$BIN/bigc" import torch "$d/mod.py:make" -o "$d/imp/m.mlir" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.2 + r % 400 / 100 }')"
  finished=1
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; finished=0; }
  wait $pid 2>/dev/null
  sleep 0.5
  pgrep -f "$d/mod.py" >/dev/null && { bad "import $k: the importer is still running"; pkill -KILL -f "$d/mod.py"; }
  if [ $finished = 0 ] && { [ -e "$d/imp/m.mlir" ] || [ -e "$d/imp/m.safetensors" ]; }; then
    bad "import $k: files written by an import that was killed"
  fi
  rm -f "$d/imp/m.mlir" "$d/imp/m.safetensors"
done
"$BIN/bigc" import torch "$d/mod.py:make" -o "$d/imp/m.mlir" >/dev/null 2>"$d/err" || bad "import after the kills: $(cat "$d/err")"
[ "$(ls -A "$d/imp" | tr '\n' ' ')" = "m.mlir m.safetensors " ] || bad "after the kills: $(ls -A "$d/imp")"
echo "ok: bigc import killed 3 times at random moments: nothing left running, nothing written; then imported"
exit $fail
