#!/usr/bin/env bash
# On a GPU machine without MLIR or the development packages, in a copy of this source tree: builds the
# runtime from the tarball of scripts/gpu-bundle.sh (its build dependencies and compiled programs),
# runs the GPU tests (`ctest -L gpu`: the kernels against the CPU backend, test/gpu/train.sh,
# test/gpu/ranks.sh) and then the GPU benchmarks (bench/gpu/run.sh: GPT-2, and bench/gpu/llama.sh:
# Llama-3.2-1B and TinyLlama-1.1B, LLAMA=0 skips it; bigc against PyTorch eager and torch.compile,
# which must be importable, and transformers for the LLaMA peer; not yet run on a GPU).
#
#   scripts/gpu-check.sh BUNDLE.tar.xz [WORKDIR]
# Then, unless set to 0: CURVE=1 trains Llama-3.2-1B 300 steps (CURVE_STEPS) by bigc and twice by
# PyTorch from the same weights and tokens (bench/gpu/llama_curve.sh: WORKDIR/curve/llama_curve.svg),
# STEPS_CM=1 measures the single-GPU configurations of the cost model's check
# (every *-cm-* program and the padded ones: WORKDIR/cm.jsonl, one line each with step_ms, for
# bench/gpu/h100_steps.json), PROFILE=1 prints `bigc run --profile` of the gpt2 programs that
# bench/gpu/calibrate_h100.sh calibrates from (WORKDIR/profile-NAME.log), SANITIZE=1 runs
# compute-sanitizer (SANITIZE_TOOLS, default memcheck racecheck synccheck initcheck) over the kernel
# tests of the fused and vectorised kernels and the loss's (in place).
# Environment: BENCH=0 skips the benchmark; CTEST_ARGS adds ctest arguments (e.g. "-R CudaKernels");
# the benchmark's own variables (PRESETS, MODES, STEPS) pass through. On a lent machine of 15 minutes
# the same steps took 6 minutes (2026-11-26, an H100: build 40 s, ctest 110 s, bench with
# MODES=compile 180 s, the rest 45 s; those steps ran from a script of the same commands, this one
# has not yet run on a GPU; synccheck, initcheck and the loss tests' sanitizer runs came later, not
# timed).
set -euo pipefail
BUNDLE=$(realpath "$1")
W=${2:-$(mktemp -d)}
mkdir -p "$W"
W=$(cd "$W" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
tar -xJf "$BUNDLE" -C "$W"
A=$(gcc -print-multiarch 2> /dev/null || echo x86_64-linux-gnu)
P=$W/deps/usr
export LD_LIBRARY_PATH=$P/lib/$A/openblas-openmp:$P/lib/$A${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$P/lib/$A/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
echo "== build (runtime, no compiler) in $W/build"
cmake -S "$ROOT" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGC_ENABLE_COMPILER=OFF -DBIGC_ENABLE_MPI=OFF \
  -DCMAKE_PREFIX_PATH="$P" > "$W/cmake.log" 2>&1 || { tail -30 "$W/cmake.log"; exit 1; }
cmake --build "$W/build" -j "$(nproc)" --target bigc-run bigc-gpu-tests > "$W/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$W/build.log" | head -30; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "(nvidia-smi: no GPU listed)"
echo "== ctest -L gpu"
rc=0
# shellcheck disable=SC2086
(cd "$W/build" && BIGC_GPU_PROGRAMS=$W/programs ctest -L gpu --output-on-failure ${CTEST_ARGS:-}) || rc=1
if [ "${BENCH:-1}" != 0 ]; then
  echo "== bench/gpu"
  OUT_DIR=$W/bench bash "$ROOT/bench/gpu/run.sh" "$W/build/bin" "$W/programs" || rc=1
  if [ "${LLAMA:-1}" != 0 ] && ls "$W"/programs/llama3.2-1b-*.bigc > /dev/null 2>&1; then
    echo "== bench/gpu/llama.sh"
    OUT_DIR=$W/bench-llama bash "$ROOT/bench/gpu/llama.sh" "$W/build/bin" "$W/programs" || rc=1
  fi
fi
if ! nvidia-smi -L 2> /dev/null | grep -q "^GPU"; then
  echo "== no GPU: the loss curve, steps, profiles and compute-sanitizer skipped"
  exit $rc
fi
if [ "${CURVE:-1}" != 0 ] && [ -e "$W/programs/llama3.2-1b-bf16-fuse.bigc" ]; then
  echo "== the loss curve: Llama-3.2-1B, bigc against PyTorch ($W/curve/llama_curve.svg)"
  STEPS=${CURVE_STEPS:-300} bash "$ROOT/bench/gpu/llama_curve.sh" "$W/build/bin" "$W/programs" "$W/curve" || rc=1
fi
if [ "${STEPS_CM:-1}" != 0 ]; then
  echo "== single-GPU steps for the cost model ($W/cm.jsonl)"
  : > "$W/cm.jsonl"
  for f in "$W"/programs/*-cm-*.bigc "$W"/programs/gpt2-bf16-pad.bigc "$W"/programs/gpt2-medium-bf16-pad.bigc; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .bigc)
    timeout 60 "$W/build/bin/bigc-run" "$f" --backend cuda --synthetic --steps 12 --log "$W/cm-$n.jsonl" --quiet ||
      { echo "$n: failed"; rc=1; continue; }
    python3 - "$W/cm-$n.jsonl" "$n" >> "$W/cm.jsonl" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(r, r[1:])][3:]
print(json.dumps({"name": sys.argv[2], "step_ms": round(1e3 * statistics.median(d), 2), "loss": r[-1]["loss"]}))
PY
  done
  cat "$W/cm.jsonl"
fi
if [ "${PROFILE:-1}" != 0 ]; then
  for n in gpt2-bf16-pad gpt2-bf16-pad-fuseops gpt2-bf16-pad-fuse-all-c4096; do
    [ -e "$W/programs/$n.bigc" ] || continue
    echo "== bigc run $n --profile ($W/profile-$n.log)"
    "$W/build/bin/bigc-run" "$W/programs/$n.bigc" --backend cuda --synthetic --steps 6 --profile > "$W/profile-$n.log" 2>&1 ||
      rc=1
    grep -A12 "^profile (" "$W/profile-$n.log" || true
  done
fi
if [ "${SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer"
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$W/build/bin/bigc-gpu-tests" \
      --gtest_filter='CudaKernels.FusedPairs:CudaKernels.FusedLmHeadAndLoss:CudaKernels.LayernormAndItsGradient:CudaKernels.RmsNormAndItsGradient:CudaKernels.AdamWMatchesTheCpuBitForBit:CudaKernels.CrossEntropyAndItsGradient:CudaKernels.LossGradientsInPlace' \
      > "$W/sanitizer-$tool.log" 2>&1 || { echo "$tool: errors ($W/sanitizer-$tool.log)"; rc=1; }
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$W/sanitizer-$tool.log" || true
  done
fi
exit $rc
