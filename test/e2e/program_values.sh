#!/usr/bin/env bash
# The program loader refuses numbers a kernel would turn into NaN or misread, one message naming
# the instruction and the value (exit 1), where it used to run with silent NaNs: AdamW's lr < 0,
# eps <= 0, beta2 >= 1 (in the instruction and in the optimizer section), a layernorm's eps < 0, a
# rate beyond the float range (1e300), a number no double holds (1e999 in the JSON), an integer attribute beyond 2^53 (heads
# 2^63 - 1, which a double cannot hold). Each edit is made on a compiled tiny GPT's payload and the
# container line rewritten (a valid checksum), so only the value is wrong.
set -uo pipefail
BIN=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
PY=/usr/bin/python3
fail=0
"$BIN/bigc" gen gpt --preset tiny -o "$d/m.mlir" >/dev/null
"$BIN/bigc" compile "$d/m.mlir" -o "$d/m.bigc" --quiet
# edit OUT WHAT: the program with one value replaced (WHAT: op:attr=value, or optimizer:key=value);
# the value is written into the JSON text as given.
edit() {
  $PY - "$d/m.bigc" "$d/$1.bigc" "$2" <<'PY'
import json, sys
src, out, what = sys.argv[1:4]
raw = open(src, "rb").read()
nl = raw.index(b"\n")
p = json.loads(raw[nl + 1:])
where, kv = what.split(":", 1)
key, value = kv.split("=", 1)
mark = "__VALUE__"
if where == "optimizer":
    p["optimizer"][key] = mark
else:
    ins = next(i for i in p["instructions"] if i["op"] == where)
    ins.setdefault("attrs", {})[key] = mark
text = json.dumps(p).replace(json.dumps(mark), value).encode()
h = 0xcbf29ce484222325
for b in text:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
version = raw[:nl].split()[1].decode()
open(out, "wb").write(f"BIGC-PROGRAM {version} {len(text)} {h:016x}\n".encode() + text)
PY
}
expect() { # NAME EDIT PATTERN
  edit "$1" "$2"
  "$BIN/bigc" run "$d/$1.bigc" --steps 1 --quiet 2>"$d/err"
  local rc=$?
  if [ $rc -ne 1 ] || ! grep -qE -- "$3" "$d/err" || [ "$(grep -c . "$d/err")" -ne 1 ]; then
    echo "FAIL: $1 ($2): exit $rc: $(cat "$d/err")"
    fail=1
  else
    echo "ok: $1: $(cut -c1-160 "$d/err")"
  fi
}
expect adam_lr "adamw:lr=-1" "instruction [0-9]+ \(adamw at .*\): AdamW's lr -1 must be finite and >= 0"
expect adam_eps "adamw:eps=-1" "AdamW's eps -1 must be positive"
expect adam_beta2 "adamw:beta2=2" "AdamW's beta2 2 must be in \[0, 1\)"
expect adam_big "adamw:lr=1e300" "AdamW's lr 1e\+300 must be finite and >= 0 \(within the float range\)"
expect adam_inf "adamw:lr=1e999" "payload is not valid JSON: .*number overflow parsing '1e999'"
expect opt_lr "optimizer:lr=-1" "optimizer: lr -1 must be finite and >= 0"
expect opt_beta1 "optimizer:beta1=1" "optimizer: beta1 1 must be in \[0, 1\)"
expect ln_eps "layernorm:eps=-1" "instruction [0-9]+ \(layernorm at .*\): attribute 'eps' must be a positive number"
expect heads "attention:heads=9223372036854775807" "attribute 'heads' must be an integer within what a program holds exactly \(\|x\| <= 2\^53\)"
"$BIN/bigc" run "$d/m.bigc" --steps 1 --quiet || { echo "FAIL: the unedited program does not run"; fail=1; }
exit $fail
