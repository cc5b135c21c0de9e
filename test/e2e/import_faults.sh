#!/usr/bin/env bash
# bigc import under faults: nothing left running, nothing written late, one message each.
#   - a model whose forward never returns: stopped by --timeout, exit 1, no process left;
#   - SIGTERM / SIGINT to bigc while it imports: the importer's process group ends with it, and the
#     files never appear (not even seconds later); SIGKILL to bigc: the importer dies with it
#     (PR_SET_PDEATHSIG), nothing appears, and the next import into the directory removes what the
#     killed one staged;
#   - the user's code calling sys.exit(0) or os._exit(N): exit 1 and one message, nothing written;
#   - config values out of range (sizes <= 0, non-finite or negative epsilons, heads that do not
#     divide) and an empty example batch: one message naming the field, exit 1, nothing written.
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/python_env.shlib" # PY, or exit 77
d=$(mktemp -d)
trap 'pkill -KILL -f "$d/" 2>/dev/null; rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cat >"$d/models.py" <<'EOF'
import os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(self):
        super().__init__(); self.e = nn.Embedding(16, 8); self.h = nn.Linear(8, 16)
    def forward(self, x, y):
        return F.cross_entropy(self.h(self.e(x)).view(-1, 16), y.view(-1))
class Loops(M):
    def forward(self, x, y):
        while True:
            pass
def batch(b=1):
    return (torch.zeros(b, 4, dtype=torch.long), torch.zeros(b, 4, dtype=torch.long))
def make():
    return M(), batch()
def slow():  # a few seconds in the user's code: the import is surely under way when signalled
    time.sleep(4)
    return M(), batch()
def loops():
    return Loops(), batch()
def exits():
    sys.exit(0)  # MARK: exit0
def os_exits():
    os._exit(3)
def empty():
    return M(), batch(0)
EOF
cat >"$d/exit_at_import.py" <<'EOF'
import os
os._exit(0)
def make():
    pass
EOF

# No process of this test's files left running (the importer's command line names them).
no_process_left() {
  sleep 0.5
  if pgrep -f "$d/" >/dev/null; then
    bad "$1: a process is still running: $(pgrep -af "$d/")"
    pkill -KILL -f "$d/"
  fi
}
no_files() { # DIR WHAT: nothing but the test's own inputs there
  local left
  left=$(ls -A "$1" | grep -v -e '^models.py$' -e '^exit_at_import.py$' -e '^__pycache__$' || true)
  [ -z "$left" ] || bad "$2: left $left"
}

# 1. A forward that never returns: --timeout.
mkdir "$d/t" && cp "$d/models.py" "$d/t/"
t0=$(date +%s)
"$BIN/bigc" import torch "$d/t/models.py:loops" -o "$d/t/m.mlir" --timeout 6 2>"$d/err"
rc=$?
[ $rc -eq 1 ] || bad "timeout: exit $rc, expected 1"
grep -q "did not finish within 6 s (--timeout 6): stopped it, nothing written" "$d/err" || bad "timeout: $(cat "$d/err")"
[ "$(grep -c . "$d/err")" -eq 1 ] || bad "timeout: more than one line: $(cat "$d/err")"
[ $(($(date +%s) - t0)) -lt 60 ] || bad "timeout: took $(($(date +%s) - t0)) s"
no_process_left timeout
no_files "$d/t" timeout
echo "ok: a forward that never returns is stopped by --timeout ($(cat "$d/err" | cut -c1-80)...)"
"$BIN/bigc" import torch "$d/t/models.py:make" -o "$d/t/m.mlir" --timeout -1 2>"$d/err" && bad "--timeout -1 accepted"
grep -q "option --timeout: expected a number of seconds >= 0" "$d/err" || bad "--timeout -1: $(cat "$d/err")"

# 2. Signals to bigc while it imports: the importer ends with it; nothing appears, then or later.
for sig in TERM INT; do
  mkdir "$d/s$sig" && cp "$d/models.py" "$d/s$sig/"
  "$BIN/bigc" import torch "$d/s$sig/models.py:slow" -o "$d/s$sig/m.mlir" 2>"$d/err" &
  pid=$!
  sleep 2
  kill -$sig $pid
  wait $pid
  rc=$?
  [ $rc -ne 0 ] || bad "SIG$sig: exit 0"
  grep -q "stopped by SIG$sig; its Python process was ended; nothing written" "$d/err" || bad "SIG$sig: $(cat "$d/err")"
  no_process_left "SIG$sig"
  sleep 4 # (the user's function would have returned by now, and the import finished)
  no_files "$d/s$sig" "SIG$sig"
  echo "ok: SIG$sig to bigc import (exit $rc): the importer ended, nothing written then or 4 s later"
done
mkdir "$d/k" && cp "$d/models.py" "$d/k/"
"$BIN/bigc" import torch "$d/k/models.py:slow" -o "$d/k/m.mlir" 2>/dev/null &
pid=$!
sleep 2
kill -KILL $pid
wait $pid 2>/dev/null
no_process_left SIGKILL
sleep 4
[ ! -e "$d/k/m.mlir" ] && [ ! -e "$d/k/m.safetensors" ] || bad "SIGKILL: the files appeared after bigc was killed"
"$BIN/bigc" import torch "$d/k/models.py:make" -o "$d/k/m.mlir" >/dev/null 2>"$d/err" || bad "after SIGKILL: $(cat "$d/err")"
left=$(ls -A "$d/k" | grep -v -e '^models.py$' -e '^m.mlir$' -e '^m.safetensors$' || true)
[ -z "$left" ] || bad "SIGKILL: the next import left $left"
echo "ok: SIGKILL to bigc import: the importer died with it, nothing written; the next import cleaned up"

# 3. The user's code exits: one message, exit 1, nothing written.
expect() { # NAME PATTERN -- ARGS...
  local name=$1 pattern=$2
  shift 3
  mkdir -p "$d/x" && rm -f "$d/x/m.mlir" "$d/x/m.safetensors"
  "$BIN/bigc" import "$@" -o "$d/x/m.mlir" >"$d/out" 2>"$d/err"
  local rc=$?
  [ $rc -eq 1 ] || { bad "$name: exit $rc, expected 1: $(cat "$d/err")"; return; }
  [ "$(grep -c . "$d/err")" -eq 1 ] || { bad "$name: not one line: $(cat "$d/err")"; return; }
  grep -qE "^bigc import: .*$pattern" "$d/err" || { bad "$name: stderr lacks /$pattern/: $(cat "$d/err")"; return; }
  [ -z "$(ls -A "$d/x")" ] || { bad "$name: wrote $(ls -A "$d/x")"; return; }
  echo "ok: $name: $(cat "$d/err" | cut -c1-150)"
}
expect "sys.exit(0)" "models.py:$(grep -n 'MARK: exit0' "$d/models.py" | cut -d: -f1): the model's code called sys.exit\(0\)" -- torch "$d/models.py:exits"
expect "os._exit(3)" "ended with exit status 3 before writing anything: .*os._exit\(3\)" -- torch "$d/models.py:os_exits"
expect "os._exit(0) at import" "ended with exit status 0 before writing anything: .*sys.exit\(0\) or os._exit\(0\)" -- torch "$d/exit_at_import.py:make"
expect "empty batch" "the example batch is empty \(tokens \[0, 4\]\)" -- torch "$d/models.py:empty"
no_process_left exits

# 4. Config values: checked before anything is built.
gpt2() { printf '{"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 64, "n_positions": 16, %s}\n' "$1" >"$d/c.json"; }
llama() { printf '{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 16, %s}\n' "$1" >"$d/c.json"; }
gpt2 '"vocab_size": 0'
expect "vocab_size 0" '"vocab_size" is 0; it must be a positive integer' -- hf "$d/c.json"
gpt2 '"n_layer": -1'
expect "n_layer -1" '"n_layer" is -1; it must be a positive integer' -- hf "$d/c.json"
gpt2 '"layer_norm_epsilon": 1e999'
expect "eps 1e999" '"layer_norm_epsilon" is Infinity; it must be a finite number > 0' -- hf "$d/c.json"
gpt2 '"layer_norm_epsilon": NaN'
expect "eps NaN" '"layer_norm_epsilon" is NaN; it must be a finite number > 0' -- hf "$d/c.json"
gpt2 '"layer_norm_epsilon": -1e-5'
expect "eps < 0" '"layer_norm_epsilon" is -1e-05; it must be a finite number > 0' -- hf "$d/c.json"
gpt2 '"n_head": 3'
expect "n_head 3" '"n_head" 3 does not divide "n_embd" 32' -- hf "$d/c.json"
gpt2 '"n_embd": 3000000000'
expect "n_embd 3e9" '"n_embd" is 3000000000; it must be a positive integer \(at most 2\^31 - 1\)' -- hf "$d/c.json"
llama '"rms_norm_eps": 0'
expect "rms_norm_eps 0" '"rms_norm_eps" is 0; it must be a finite number > 0' -- hf "$d/c.json"
llama '"num_key_value_heads": 3'
expect "kv heads 3" '"num_key_value_heads" 3 does not divide "num_attention_heads" 4' -- hf "$d/c.json"
llama '"num_attention_heads": 5'
expect "heads 5" '"num_attention_heads" 5 does not divide "hidden_size" 32' -- hf "$d/c.json"
llama '"rope_theta": -10000.0'
expect "rope_theta < 0" '"rope_theta" is -10000.0; it must be a finite number > 0' -- hf "$d/c.json"
llama '"intermediate_size": true'
expect "intermediate_size true" '"intermediate_size" is true; it must be a positive integer' -- hf "$d/c.json"
no_process_left configs

exit $fail
