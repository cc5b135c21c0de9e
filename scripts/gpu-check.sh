#!/usr/bin/env bash
# On a GPU machine without MLIR or the development packages, in a copy of this source tree: builds the
# runtime from the tarball of scripts/gpu-bundle.sh (its build dependencies and compiled programs),
# runs the GPU tests (`ctest -L gpu`: the kernels against the CPU backend, test/gpu/train.sh,
# test/gpu/ranks.sh) and then the GPU benchmark (bench/gpu/run.sh: bigc against PyTorch eager and
# torch.compile, which must be importable).
#
#   scripts/gpu-check.sh BUNDLE.tar.xz [WORKDIR]
# Environment: BENCH=0 skips the benchmark; CTEST_ARGS adds ctest arguments (e.g. "-R CudaKernels");
# the benchmark's own variables (PRESETS, MODES, STEPS) pass through.
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
fi
exit $rc
