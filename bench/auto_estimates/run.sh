#!/usr/bin/env bash
# How far `bigc compile --auto`'s estimates are from the whole compile (issue 44: within 10% of
# the device memory): for each configuration below, the model cut to k1 and k2 layers (what --auto
# compiles: one and two layers, three and four where the weights stream layer by layer -- ZeRO 3
# or offload --, four and five with the activations on the host too, two and three a stage for a
# pipeline), their device arenas' lower bounds
# extrapolated linearly to every layer and times the larger cut's packing ratio, as
# driver/Auto.cpp's `estimate` does, against the same configuration compiled whole. The cuts are
# `bigc gen gpt --layers k` of the same preset (the model --auto cuts, regenerated). A plan that
# does not fit is compared by what its not-fit table says the device needs.
#
#   bench/auto_estimates/run.sh [BUILD_DIR]   (default build; h100-80g-x8, bf16, 8 ranks)
set -euo pipefail
BIN=$(cd "${1:-build}/bin" && pwd)
W=$(mktemp -d /tmp/bigc-auto-est.XXXXXX)
trap 'rm -rf "$W"' EXIT
PY=python3
# preset | flags (besides --hardware h100-80g-x8 --precision bf16 --ranks 8)
CONFIGS=(
  "gpt2-xl|--zero 1"
  "gpt2-xl|--zero 3"
  "gpt2-xl|--zero 3 --offload cpu --recompute full"
  "6.7b|--zero 3 --recompute selective"
  "6.7b|--zero 3 --offload cpu --recompute full"
  "13b|--zero 3 --recompute full"
  "13b|--zero 3 --offload cpu --recompute full --offload-params host"
  "13b|--pp 4 --micro-batches 4 --recompute full"
  "175b|--zero 3 --offload cpu --recompute full"
  "175b|--zero 3 --offload cpu --recompute full --offload-params host"
  "175b|--tp 8 --pad-vocab 64 --zero 1 --recompute full --offload cpu"
  # the leanest device plan (the blocks' inputs on the host, each gather just before its use)
  "13b|--zero 3 --offload cpu --recompute full --offload-params host --offload-activations --prefetch 0"
  "175b|--zero 3 --offload cpu --recompute full --offload-params host --offload-activations --prefetch 0"
)
arena() { # compile output -> "device_GiB host_GiB"
  $PY -c "
import re, sys
t = sys.stdin.read()
U = {'KiB': 2**-20, 'MiB': 2**-10, 'GiB': 1, 'TiB': 1024}
def g(space):  # (the arena, its lower bound)
    m = re.search(space + r' arena +([0-9.]+) (KiB|MiB|GiB|TiB) \\(lower bound ([0-9.]+) (KiB|MiB|GiB|TiB)', t)
    if not m:  # a plan that does not fit: its table of what each space needs
        m = re.search(r'^  ' + space + r' +([0-9.]+) (KiB|MiB|GiB|TiB) +([0-9.]+) (KiB|MiB|GiB|TiB)', t, re.M)
    if not m: return float('nan'), float('nan')
    return float(m.group(1)) * U[m.group(2)], float(m.group(3)) * U[m.group(4)]
print(*g('device'))"
}
compile() { # preset layers flags... -> arena
  local preset=$1 layers=$2; shift 2
  "$BIN/bigc" gen gpt --preset "$preset" ${layers:+--layers $layers} -o "$W/m.mlir" > /dev/null
  "$BIN/bigc" compile "$W/m.mlir" -o "$W/m.bigc" --hardware h100-80g-x8 --precision bf16 --ranks 8 "$@" 2>&1 | arena
}
echo "# $(date -u +%F), $(nproc) cores; h100-80g-x8, bf16, 8 ranks; device arena a rank, GiB"
printf "%-8s %-62s %9s %9s %7s\n" model flags estimate whole error
for c in "${CONFIGS[@]}"; do
  preset=${c%%|*}; flags=${c#*|}
  L=$($PY -c "print({'gpt2-xl': 48, '6.7b': 32, '13b': 40, '175b': 96}['$preset'])") # (the presets' layers)
  pp=1; [[ $flags =~ --pp\ ([0-9]+) ]] && pp=${BASH_REMATCH[1]}
  if [ "$pp" -gt 1 ]; then k1=$((2 * pp)); elif [[ $flags =~ --offload-activations ]]; then k1=4
  elif [[ $flags =~ --zero\ 3|--offload ]]; then k1=3; else k1=1; fi
  k2=$((k1 + pp))
  # shellcheck disable=SC2086
  read -r x xb < <(compile "$preset" $k1 $flags)
  # shellcheck disable=SC2086
  read -r y yb < <(compile "$preset" $k2 $flags)
  # shellcheck disable=SC2086
  read -r w _ < <(compile "$preset" "" $flags)
  $PY -c "
x, y, w, xb, yb, L, k1, k2 = float('$x'), float('$y'), float('$w'), float('$xb'), float('$yb'), $L, $k1, $k2
f = (L - k1) / (k2 - k1)
est = max(yb, xb + (yb - xb) * f) * (y / yb)  # the lower bound extrapolated, times the larger cut's packing
print('%-8s %-62s %9.2f %9.2f %6.1f%%' % ('$preset', '$flags', est, w, 100 * (est - w) / w))"
done
