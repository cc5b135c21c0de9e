#!/usr/bin/env bash
# Long sequences on one machine (issue 43): Llama-3-8B (`bigc gen llama --preset llama3-8b`, batch 1)
# on h100-80g-x8 (8 x H100 80 GB, 2 TB host), ZeRO 3 over the 8 ranks, bf16, --recompute full, the
# fused loss. (1) The per-rank memory of one long sequence as the context axis grows: the device
# arena and the activations at its peak for cp 1, 2, 4, 8 at 128k tokens. (2) The longest sequence
# that fits (powers of two from 8k; the plan must fit the profile) for each context layout, ring or
# all-to-all, with and without --offload-activations, and Megatron-Bridge's 8-GPU layout (tp 2 x
# cp 4), each with the cost model's step time at that length. Plans only: compiled here, not run.
#
#   bench/long_context/run.sh [BUILD_DIR]   (default build)
set -euo pipefail
BIN=$(cd "${1:-build}/bin" && pwd)
W=$(mktemp -d /tmp/bigc-long.XXXXXX)
trap 'rm -rf "$W"' EXIT
BASE=(--hardware h100-80g-x8 --ranks 8 --zero 3 --precision bf16 --recompute full --fuse-loss)
model() { # T -> the model file (made once)
  [ -f "$W/l$1.mlir" ] || "$BIN/bigc" gen llama --preset llama3-8b --seq "$1" --batch 1 -o "$W/l$1.mlir"
  echo "$W/l$1.mlir"
}
field() { # compile output, pattern -> the first match's group 1
  sed -nE "s/$2/\1/p" "$1" | head -n1
}
plan() { # T, flags... -> 0 when the plan fits; $W/out holds the compile's summary
  local T=$1; shift
  "$BIN/bigc" compile "$(model "$T")" "${BASE[@]}" "$@" -o "$W/p.bigc" > "$W/out" 2>&1
}
echo "## per-rank memory of one 131,072-token sequence (Llama-3-8B, h100-80g-x8, ZeRO 3, bf16, recompute full)"
echo
echo "| cp | device arena | activations at the peak | step (cost model) |"
echo "|---|---|---|---|"
for C in 1 2 4 8; do
  plan 131072 --cp "$C" || true
  echo "| $C | $(field "$W/out" '^  device arena +([0-9.]+ [KMGT]iB).*') | $(field "$W/out" '.*; activation ([0-9.]+ [KMGT]?i?B);.*') | $(field "$W/out" '^  estimate +([0-9.]+ m?s) per step.*') |"
done
echo
echo "## the longest sequence that fits (powers of two from 8k)"
echo
echo "| layout | longest | device arena there | host arena there (per rank) | step there (cost model) | twice that needs |"
echo "|---|---|---|---|---|---|"
LAYOUTS=(
  "no context parallelism|"
  "cp 2 ring|--cp 2"
  "cp 4 ring|--cp 4"
  "cp 8 ring|--cp 8"
  "cp 8 all-to-all|--cp 8 --cp-kind a2a"
  "activation offload, no cp|--offload-activations"
  "cp 8 ring + activation offload|--cp 8 --offload-activations"
  "tp 2 x cp 4 (Megatron-Bridge's 8-GPU layout)|--tp 2 --cp 4 --sequence-parallel"
)
for l in "${LAYOUTS[@]}"; do
  name=${l%%|*}
  read -r -a flags <<< "${l#*|}"
  best=0 line="" why=""
  for T in 8192 16384 32768 65536 131072 262144 524288 1048576 2097152 4194304; do
    if plan "$T" "${flags[@]}"; then
      best=$T
      line="$(field "$W/out" '^  device arena +([0-9.]+ [KMGT]iB).*') | $(field "$W/out" '^  host arena +([0-9.]+ [KMGT]iB).*') | $(field "$W/out" '^  estimate +([0-9.]+ m?s) per step.*')"
    else
      why="$T: $(field "$W/out" '.*needs ([0-9.]+ [KMGT]iB of [a-z]+ memory, [0-9.]+ [KMGT]iB available).*')"
      break
    fi
  done
  echo "| $name | $best | $line | ${why:-(not tried)} |"
done
