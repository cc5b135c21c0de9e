#!/usr/bin/env bash
# The largest GPT-3-shaped model whose plan fits each machine of issue 44, with and without its
# drives: a fixed width (GPT-3's hidden sizes with their heads), the most layers that fit, found by
# bisection over whole compiles (the exit status of `bigc compile`: 0 fits, 1 does not). Batch 1 x
# seq 1024 (the seeds' machine) or 2048, vocabulary 50257, full recomputation; the leanest device
# plan bigc has for a model this size (ZeRO 3 over the ranks, the weights off the device between
# uses, the blocks' inputs kept on the host, each all-gather just before its use), and with the
# drive the optimizer's state and the weights on it, and the gradients that the host cannot hold
# (--offload-grads auto: ZeRO-Infinity's swap, bounded):
#
#   name        hardware            host         precision  hidden:heads  where the state lives
#   seeds1      v100-16g-x1         330 GB       fp16       8192:64       the drive | the host
#   seeds8      v100-16g-x8         330 GB       fp16       8192:64       the drive | the host
#   dgx2        dgx2-v100-32g-x16   the profile  fp16       25600:160 / 12288:96 (host)
#   dgxh100     h100-80g-x8         the profile  bf16       25600:160 / 12288:96 (host)
#
# Usage: bench/capacity/machines.sh [build/bin] [names...]   (every name: both variants, or VARIANTS)
# Prints one table row per configuration: layers, parameters, the device/host/drive use of the
# largest that fits, what the next layer runs out of, and the compile time of the largest.
set -euo pipefail
BIN=${1:-build/bin}
shift || true
BIGC="$BIN/bigc"
[ -x "$BIGC" ] || { echo "bench/capacity/machines.sh: $BIGC not found (build first, or pass the bin dir)" >&2; exit 1; }
NAMES=${*:-"seeds1 seeds8 dgx2 dgxh100"}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/nvme"
export BIGC_FIT_CANDIDATES=0 # (a plan that does not fit: the report only, no search of other options)

LEAN=(--recompute full --offload-activations)
# name variant -> "hardware|extra options|hidden:heads|seq|lo|hi" (lo fits, hi does not: checked)
config() {
  case "$1/$2" in
    seeds1/drive) echo "v100-16g-x1|--host-mem 330000000000 --precision fp16|8192:64|1024|240|290" ;;
    seeds1/host) echo "v100-16g-x1|--host-mem 330000000000 --precision fp16|8192:64|1024|8|64" ;;
    seeds8/drive) echo "v100-16g-x8|--host-mem 330000000000 --precision fp16 --ranks 8 --zero 3 --prefetch 0|8192:64|1024|240|290" ;;
    seeds8/host) echo "v100-16g-x8|--host-mem 330000000000 --precision fp16 --ranks 8 --zero 3 --prefetch 0|8192:64|1024|8|64" ;;
    dgx2/drive) echo "dgx2-v100-32g-x16|--precision fp16 --ranks 16 --zero 3 --prefetch 0|25600:160|2048|240|320" ;;
    dgx2/host) echo "dgx2-v100-32g-x16|--precision fp16 --ranks 16 --zero 3 --prefetch 0|12288:96|2048|8|96" ;;
    dgxh100/drive) echo "h100-80g-x8|--precision bf16 --ranks 8 --zero 3 --prefetch 0|25600:160|2048|240|320" ;;
    dgxh100/host) echo "h100-80g-x8|--precision bf16 --ranks 8 --zero 3 --prefetch 0|12288:96|2048|8|128" ;;
  esac
}
where() { # variant -> the offload options
  if [ "$1" = drive ]; then
    echo "--offload nvme --nvme-path $W/nvme --offload-params nvme" # (the gradients: auto)
  else
    echo "--offload cpu --offload-params host"
  fi
}
# probe L -> 0 fits, 1 not; the compile's report in $W/L.txt, its seconds in $W/L.s
probe() {
  local L=$1 hw=$2 opts=$3 ch=$4 seq=$5 variant=$6
  rm -f "$W/m.mlir"
  "$BIGC" gen gpt --layers "$L" --hidden "${ch%%:*}" --heads "${ch##*:}" --vocab 50257 --batch 1 --seq "$seq" \
    -o "$W/m.mlir" > /dev/null || { echo "bench/capacity/machines.sh: bigc gen gpt failed at $L layers" >&2; exit 1; }
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$BIGC" compile "$W/m.mlir" -o "$W/m.bigc" --hardware "$hw" $opts $(where "$variant") "${LEAN[@]}" \
    > "$W/$L.txt" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' > "$W/$L.s"
  rm -f "$W/m.bigc"
  [ $rc -le 1 ] || { echo "bench/capacity/machines.sh: compile failed ($rc):" >&2; cat "$W/$L.txt" >&2; exit 1; }
  [ "${VERBOSE:-0}" = 1 ] && echo "  probe $L layers: $([ $rc = 0 ] && echo fits || echo 'does not fit') ($(cat "$W/$L.s") s)" >&2
  return $rc
}
field() { grep -m1 "$1" "$2" | sed -E "s/^ *$1 *//" | cut -c1-60; }
echo "| machine | state on | hidden | layers | parameters | device arena / rank | host | drive / rank | the next layer | compile |"
echo "|---|---|---:|---:|---:|---|---|---|---|---:|"
for name in $NAMES; do
  for variant in ${VARIANTS:-drive host}; do
    IFS='|' read -r hw opts ch seq lo hi <<< "$(config "$name" "$variant")"
    rm -f "$W"/*.txt "$W"/*.s
    probe "$lo" "$hw" "$opts" "$ch" "$seq" "$variant" || { echo "| $name | $variant | ${ch%%:*} | < $lo (the bracket's low end does not fit) |||||||"; continue; }
    if probe "$hi" "$hw" "$opts" "$ch" "$seq" "$variant"; then
      echo "| $name | $variant | ${ch%%:*} | >= $hi (the bracket's high end fits) |||||||"; continue
    fi
    while [ $((hi - lo)) -gt 1 ]; do
      mid=$(((lo + hi) / 2))
      if probe "$mid" "$hw" "$opts" "$ch" "$seq" "$variant"; then lo=$mid; else hi=$mid; fi
    done
    r="$W/$lo.txt"
    params=$(field parameters "$r" | awk '{print $1}')
    why=$(grep -m1 "the plan does not fit" "$W/$hi.txt" | sed -E 's/.*needs ([0-9.]+ [KMGT]iB) of ([a-z]+) memory, ([0-9.]+ [KMGT]iB) available.*/\2: \1 of \3/')
    echo "| $name | $variant | ${ch%%:*} | $lo | $params | $(field 'device arena' "$r" | sed -E 's/ \(lower.*//') | $(if grep -q 'host .* for the [0-9]* ranks' "$r"; then grep -m1 'host .* for the [0-9]* ranks' "$r" | sed -E 's/.*host ([0-9.]+ [KMGT]iB) for the ([0-9]+) ranks.*/\1 (\2 ranks)/'; else field 'host arena' "$r" | sed -E 's/ \(lower.*//'; fi) | $(field 'nvme arena' "$r" | sed -E 's/ per rank.*//') | $why | $(printf '%.1f' "$(cat "$W/$lo.s")") s |"
  done
done
