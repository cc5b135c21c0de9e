#!/usr/bin/env bash
# The programs bigc compile writes stay byte-identical unless a change means them to differ: each
# option set below compiles a tiny GPT or LLaMA (bigc gen) and the program file's SHA-256 must be
# the one recorded in test/data/program-golden.txt. A change that alters programs on purpose
# regenerates the record (`bash test/e2e/program_golden.sh $PWD/build/bin --update`) and says why in its
# commit; a refactoring (the op registry, the option table) must leave every line as it is.
set -uo pipefail
BIN=$1
GOLDEN="$(cd "$(dirname "$0")/../data" && pwd)/program-golden.txt"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
"$BIN/bigc" gen gpt --preset tiny -o gpt.mlir >/dev/null || exit 1
"$BIN/bigc" gen llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 256 --seq 32 --batch 2 -o llama.mlir \
  >/dev/null || exit 1
sets=(
  "gpt"
  "gpt --fuse"
  "gpt --fuse-loss"
  "gpt --precision bf16 --fuse"
  "gpt --precision fp16"
  "gpt --ranks 2 --zero 3"
  "gpt --ranks 2 --zero 2 --offload cpu"
  "gpt --ranks 4 --tp 2 --sequence-parallel"
  "gpt --ranks 2 --tp 2 --pad-vocab 64 --fuse-loss"
  "gpt --ranks 2 --pp 2 --micro-batches 4"
  "gpt --ranks 2 --pp 2 --micro-batches 4 --pp-schedule zero-bubble"
  "gpt --recompute full --micro-batches 2"
  "gpt --offload nvme --nvme-path /tmp/bigc-program-golden.nvme --nvme-chunk 4096" # (the path is in the program)
  "gpt --recompute selective --optimizer-states bf16 --precision bf16"
  "gpt --recompute auto --device-mem 3500K"
  "llama"
  "llama --fuse --precision bf16"
  "llama --ranks 2 --tp 2"
  "llama --ranks 2 --zero 3 --fuse-loss"
  "llama --recompute full"
)
out=()
for s in "${sets[@]}"; do
  read -r model opts <<<"$s"
  # shellcheck disable=SC2086 # opts: words
  "$BIN/bigc" compile "$model.mlir" -o p.bigc --quiet $opts || { echo "FAIL: bigc compile $s"; exit 1; }
  out+=("$(sha256sum p.bigc | cut -d' ' -f1)  $s")
done
if [ "${2:-}" = "--update" ]; then
  printf '%s\n' "${out[@]}" >"$GOLDEN"
  echo "wrote $GOLDEN (${#out[@]} programs)"
  exit 0
fi
fail=0
for line in "${out[@]}"; do
  if ! grep -qxF "$line" "$GOLDEN"; then
    echo "FAIL: the program of '${line#*  }' differs from the recorded one ($GOLDEN): ${line%%  *}"
    fail=1
  fi
done
[ "$(wc -l <"$GOLDEN")" -eq "${#out[@]}" ] || { echo "FAIL: $GOLDEN records $(wc -l <"$GOLDEN") programs, the test compiles ${#out[@]}"; fail=1; }
[ $fail -eq 0 ] && echo "ok: ${#out[@]} programs byte-identical to the record"
exit $fail
