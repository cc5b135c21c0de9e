#!/usr/bin/env bash
# `bigc-run inspect` and `bigc-run verify` (built without MLIR, so present on GPU machines) print
# what `bigc inspect` and `bigc verify` print, byte for byte: stdout, stderr, exit status and the
# timeline SVG, on hand-written programs (test/Driver/Inputs/make_toy_program.py: plain, offload
# with four streams, and an unsafe one with a wait dropped), for every option and some errors.
# Their output is kept in test/cli/expected/ (written by `bigc`); the runtime-only build compares
# bigc-run against it, the compiler build compares both tools against it and against each other,
# and also on compiled tiny GPTs (one rank, and two ranks with ZeRO-3).
# BIGC_UPDATE_EXPECTED=1 with the compiler build rewrites test/cli/expected/ from `bigc`.
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECTED=$HERE/expected
PY=/usr/bin/python3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d" # programs named by relative paths: the reports print them

$PY "$HERE/../Driver/Inputs/make_toy_program.py" toy.bigc 4096 128
$PY "$HERE/../Driver/Inputs/make_toy_program.py" offload.bigc 4096 4096 offload
# unsafe.bigc: the d2h copy of the gradient no longer waits for the add that computes it.
$PY - offload.bigc unsafe.bigc <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
p = json.loads(raw[raw.index(b"\n") + 1:])
copy = [x for x in p["instructions"] if x.get("stream") == "d2h"][0]
del copy["wait"]
def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
body = json.dumps(p).encode()
open(sys.argv[2], "wb").write(b"BIGC-PROGRAM %d %d %016x\n" % (p["version"], len(body), fnv(body)) + body)
PY

# run TOOL CASE ARGS...: stdout, stderr, exit status and the timeline (when asked) of one command,
# into TOOL.CASE.out.
run() {
  local tool=$1 name=$2
  shift 2
  local cmd=("$BIN/$tool")
  rm -f timeline.svg
  set +e
  "${cmd[@]}" "$@" > out.txt 2> err.txt
  local rc=$?
  set -e
  {
    echo "exit $rc"
    echo "--- stdout"
    cat out.txt
    echo "--- stderr"
    cat err.txt
    if [ -f timeline.svg ]; then
      echo "--- timeline.svg"
      cat timeline.svg
    fi
  } > "$tool.$name.out"
}

cases() { # TOOL
  local t=$1
  run "$t" inspect-toy inspect toy.bigc
  run "$t" inspect-toy-memory inspect toy.bigc --memory
  run "$t" inspect-toy-json inspect toy.bigc --json
  run "$t" inspect-toy-timeline inspect toy.bigc --timeline timeline.svg
  run "$t" inspect-offload-memory inspect offload.bigc --memory --rank 0
  run "$t" inspect-offload-json inspect offload.bigc --json
  run "$t" inspect-offload-timeline inspect offload.bigc --memory --timeline=timeline.svg
  run "$t" inspect-help inspect --help
  run "$t" inspect-bad-rank inspect toy.bigc --rank 1
  run "$t" inspect-bad-option inspect toy.bigc --memroy
  run "$t" inspect-missing inspect missing.bigc
  run "$t" inspect-no-file inspect
  run "$t" verify-toy verify toy.bigc
  run "$t" verify-offload verify offload.bigc
  run "$t" verify-unsafe verify unsafe.bigc
  run "$t" verify-unsafe-limit verify unsafe.bigc --limit 1
  run "$t" verify-bad-limit verify unsafe.bigc --limit 0
  run "$t" verify-help verify --help
  run "$t" verify-missing verify missing.bigc
}

fail=0
cases bigc-run
names=$(ls bigc-run.*.out | sed 's/^bigc-run\.//; s/\.out$//')
if [ -x "$BIN/bigc" ]; then
  cases bigc
  for n in $names; do
    if ! cmp -s "bigc.$n.out" "bigc-run.$n.out"; then
      echo "FAIL: bigc-run $n differs from bigc:"
      diff "bigc.$n.out" "bigc-run.$n.out" | head -20
      fail=1
    fi
  done
  if [ "${BIGC_UPDATE_EXPECTED:-0}" = 1 ]; then
    rm -f "$EXPECTED"/*.out
    for n in $names; do cp "bigc.$n.out" "$EXPECTED/$n.out"; done
    echo "wrote $(echo $names | wc -w) files to $EXPECTED"
  fi
fi
for n in $names; do
  if [ ! -f "$EXPECTED/$n.out" ]; then
    echo "FAIL: $EXPECTED/$n.out is missing (BIGC_UPDATE_EXPECTED=1 with the compiler build writes it)"
    fail=1
  elif ! cmp -s "$EXPECTED/$n.out" "bigc-run.$n.out"; then
    echo "FAIL: bigc-run $n differs from test/cli/expected/$n.out:"
    diff "$EXPECTED/$n.out" "bigc-run.$n.out" | head -20
    fail=1
  fi
done
grep -q "^exit 0" bigc-run.verify-toy.out && grep -q "^exit 1" bigc-run.verify-unsafe.out || {
  echo "FAIL: verify did not prove the toy safe and the unsafe toy unsafe"
  fail=1
}

# Compiled programs (compiler build): bigc and bigc-run agree.
if [ -x "$BIN/bigc" ]; then
  "$BIN/bigc" gen gpt --preset tiny -o m.mlir > /dev/null
  "$BIN/bigc" compile m.mlir -o tiny.bigc --quiet
  "$BIN/bigc" compile m.mlir -o z3.bigc --ranks 2 --zero 3 --quiet
  for t in bigc bigc-run; do
    run "$t" tiny-memory inspect tiny.bigc --memory --timeline timeline.svg
    run "$t" tiny-json inspect tiny.bigc --json
    run "$t" z3-rank1 inspect z3.bigc --memory --rank 1 --timeline timeline.svg
    run "$t" z3-json inspect z3.bigc --json --rank 1
    run "$t" tiny-verify verify tiny.bigc
    run "$t" z3-verify verify z3.bigc
  done
  for n in tiny-memory tiny-json z3-rank1 z3-json tiny-verify z3-verify; do
    if ! cmp -s "bigc.$n.out" "bigc-run.$n.out"; then
      echo "FAIL: bigc-run $n differs from bigc:"
      diff "bigc.$n.out" "bigc-run.$n.out" | head -20
      fail=1
    fi
  done
  grep -q "^exit 0" bigc-run.z3-verify.out || { echo "FAIL: the ZeRO-3 program did not verify"; fail=1; }
fi
[ $fail = 0 ] && echo "PASS: bigc-run inspect/verify = bigc inspect/verify ($(echo $names | wc -w) cases)"
exit $fail
