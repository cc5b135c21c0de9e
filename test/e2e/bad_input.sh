#!/usr/bin/env bash
# Every bad input gets one clear error naming the place, exit status 1, and nothing half-written.
set -uo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
# expect_error STATUS PATTERN OUTPUT-THAT-MUST-NOT-EXIST -- command...
expect_error() {
  local want=$1 pattern=$2 nofile=$3; shift 4
  "$@" >"$d/out" 2>"$d/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then
    echo "FAIL: '$*' exited $rc, expected $want"; cat "$d/err"; fail=1; return
  fi
  if ! grep -qE "$pattern" "$d/err"; then
    echo "FAIL: '$*' stderr lacks /$pattern/:"; cat "$d/err"; fail=1; return
  fi
  if grep -qiE "segmentation|core dumped|terminate called|Assertion" "$d/err"; then
    echo "FAIL: '$*' crashed:"; cat "$d/err"; fail=1; return
  fi
  if [ "$nofile" != "-" ] && [ -e "$nofile" ]; then
    echo "FAIL: '$*' left $nofile behind"; fail=1; return
  fi
  echo "ok: $* -> $(head -n1 "$d/err")"
}

"$BIN/bigc" gen gpt --preset tiny -o "$d/model.mlir" || exit 1
"$BIN/bigc" compile "$d/model.mlir" -o "$d/model.bigc" --quiet || exit 1

# Files that are not there.
expect_error 1 "nope.mlir" "$d/x.bigc" -- "$BIN/bigc" compile "$d/nope.mlir" -o "$d/x.bigc"
expect_error 1 "nope.bigc" - -- "$BIN/bigc" run "$d/nope.bigc" --steps 1
expect_error 1 "nope.bigc" - -- "$BIN/bigc-run" "$d/nope.bigc" --steps 1
expect_error 1 "nope.bigc" - -- "$BIN/bigc" inspect "$d/nope.bigc"
# MLIR with a syntax error and with a shape error: file:line:col.
sed '0,/bigc.matmul/s/bigc.matmul/bigc.matmul %%%/' "$d/model.mlir" > "$d/syntax.mlir"
expect_error 1 "syntax.mlir:[0-9]+:[0-9]+: error" "$d/x.bigc" -- "$BIN/bigc" compile "$d/syntax.mlir" -o "$d/x.bigc"
/usr/bin/python3 - "$d/model.mlir" "$d/shape.mlir" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
# Make the first c_fc weight declaration and its use disagree with the activations.
s = s.replace("tensor<64x256xf32>", "tensor<65x256xf32>")
open(sys.argv[2], "w").write(s)
PY
expect_error 1 "shape.mlir:[0-9]+:[0-9]+: error" "$d/x.bigc" -- "$BIN/bigc" compile "$d/shape.mlir" -o "$d/x.bigc"
# Unknown flags, presets, subcommands.
expect_error 1 "unknown option '--zeroo'" "$d/x.bigc" -- "$BIN/bigc" compile "$d/model.mlir" -o "$d/x.bigc" --zeroo=3
expect_error 1 "unknown option" - -- "$BIN/bigc" run "$d/model.bigc" --stepz 3
expect_error 1 "preset.*gpt5" "$d/y.mlir" -- "$BIN/bigc" gen gpt --preset gpt5 -o "$d/y.mlir"
expect_error 1 "heads" "$d/y.mlir" -- "$BIN/bigc" gen gpt --hidden 66 --heads 4 -o "$d/y.mlir"
expect_error 1 "unknown" - -- "$BIN/bigc" frobnicate
# Truncated and corrupted programs.
head -c 200 "$d/model.bigc" > "$d/trunc.bigc"
expect_error 1 "trunc.bigc" - -- "$BIN/bigc" run "$d/trunc.bigc" --steps 1
expect_error 1 "trunc.bigc" - -- "$BIN/bigc" inspect "$d/trunc.bigc"
/usr/bin/python3 - "$d/model.bigc" "$d/corrupt.bigc" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x20
open(sys.argv[2], "wb").write(b)
PY
expect_error 1 "corrupt.bigc.*(checksum|corrupt)" - -- "$BIN/bigc" run "$d/corrupt.bigc" --steps 1
printf 'hello' > "$d/text.bigc"
expect_error 1 "text.bigc" - -- "$BIN/bigc-run" "$d/text.bigc" --steps 1
# A data file too short for one batch (tiny: B=4, T=64 needs 257 tokens).
printf 'short text' > "$d/short.txt"
"$BIN/bigc" data encode "$d/short.txt" -o "$d/short.bin" || { echo "FAIL: encode"; fail=1; }
expect_error 1 "short.bin.*tokens" "$d/w.safetensors" -- "$BIN/bigc" run "$d/model.bigc" --data "$d/short.bin" --steps 1 --save-weights "$d/w.safetensors"
expect_error 1 "missing.txt" "$d/t.bin" -- "$BIN/bigc" data encode "$d/missing.txt" -o "$d/t.bin"
# Weights whose names or shapes do not match.
"$BIN/bigc" gen gpt --preset tiny --hidden 32 -o "$d/other.mlir" && \
"$BIN/bigc" compile "$d/other.mlir" -o "$d/other.bigc" --quiet && \
"$BIN/bigc" run "$d/other.bigc" --steps 0 --save-weights "$d/other.safetensors" --quiet || { echo "FAIL: setup"; fail=1; }
expect_error 1 "shape" "$d/w2.safetensors" -- "$BIN/bigc" run "$d/model.bigc" --load-weights "$d/other.safetensors" --steps 1 --save-weights "$d/w2.safetensors"
printf 'garbage!' > "$d/bad.safetensors"
expect_error 1 "bad.safetensors" - -- "$BIN/bigc" run "$d/model.bigc" --load-weights "$d/bad.safetensors" --steps 1
# A plan that does not fit.
expect_error 1 "does not fit" "$d/x.bigc" -- "$BIN/bigc" compile "$d/model.mlir" -o "$d/x.bigc" --device-mem 1M
# --virtual-ranks: for a multi-rank program on the CUDA backend only.
expect_error 1 "virtual-ranks.*has one rank" - -- "$BIN/bigc" run "$d/model.bigc" --virtual-ranks --backend cpu --steps 1
"$BIN/bigc" compile "$d/model.mlir" -o "$d/r2.bigc" --ranks 2 --zero 1 --quiet
expect_error 1 "virtual-ranks.*runs on the cpu backend here" - -- "$BIN/bigc" run "$d/r2.bigc" --virtual-ranks --backend cpu --steps 1
[ $fail -eq 0 ] && echo "PASS" || echo "FAILED"
exit $fail
