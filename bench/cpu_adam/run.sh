#!/usr/bin/env bash
# CPU AdamW benchmark: bigc's cpuAdamW vs torch.optim.AdamW and DeepSpeedCPUAdam on the same N
# fp32 parameters (fp32 grads), the same thread count, steady state; plus this machine's memory
# bandwidth and the fraction of it the Adam reaches. Prints a table (and keeps the raw JSON lines
# in $OUT/results.jsonl).
#
#   bash bench/cpu_adam/run.sh            # N=100000000 THREADS=2 ROUNDS=3 STEPS=10 WARMUP=3
#   N=10000000 ROUNDS=1 bash bench/cpu_adam/run.sh
#
# Setup (first run only): a virtual environment bench/.venv made from Debian's /usr/bin/python3
# with --system-site-packages (it sees Debian's torch 1.13) and DeepSpeed 0.12.6 from PyPI
# (the newest line that still works with torch 1.13); DeepSpeed JIT-compiles its CPU Adam with
# g++/ninja at first use (about 90 s per variant; cached in bench/.venv/torch_ext_*).
# Implementations run one per process, in ROUNDS rounds; in each process the implementation's
# steps alternate with those of bigc's cpuAdamW on its own copy of the buffers, so both see the
# same machine at the same moment (this machine is shared: other work comes and goes), and the
# speedup is the median of the ratios of adjacent steps. Figures: medians over rounds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-100000000}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
IMPLS=${IMPLS:-"bigc deepspeed deepspeed-asbuilt torch torch-foreach torch-fused"}
OUT=${OUT:-$ROOT/build-bench/cpu_adam}
PY=/usr/bin/python3
VENV=$ROOT/bench/.venv
mkdir -p "$OUT"
export OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=${OMP_PROC_BIND:-false}

# 1. Build the C++ bench and the ctypes library from the runtime's source (no CMake needed).
CXXFLAGS="-std=c++17 -O3 -march=native -ffp-contract=fast -fopenmp -I$ROOT/include"
g++ $CXXFLAGS "$ROOT/bench/cpu_adam/cpu_adam_bench.cpp" "$ROOT/runtime/optim/CpuAdam.cpp" -o "$OUT/cpu_adam_bench"
g++ $CXXFLAGS -fPIC -shared "$ROOT/bench/cpu_adam/capi.cpp" "$ROOT/runtime/optim/CpuAdam.cpp" -o "$OUT/libbigc_cpu_adam.so"

# 2. The virtual environment with DeepSpeed (torch from Debian through system site packages).
# DeepSpeed JIT-compiles its CPU Adam against torch's C++ headers and pybind11: Debian ships them
# in libtorch-dev and pybind11-dev (python3-torch alone has no headers; the build then fails with
# "torch/extension.h: No such file or directory").
for pkg in libtorch-dev pybind11-dev; do
  if ! dpkg-query -W -f='${Status}' $pkg 2>/dev/null | grep -q "install ok installed"; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get install -y -qq --no-install-recommends $pkg >&2
  fi
done
if ! "$VENV/bin/python" -c 'import deepspeed' 2>/dev/null; then
  echo "== setting up $VENV (DeepSpeed 0.12.6 from PyPI)" >&2
  "$PY" -m venv --system-site-packages "$VENV"
  # --no-deps: DeepSpeed's requirements name torch, which must stay Debian's (no multi-GB wheel).
  "$VENV/bin/pip" install -q --no-build-isolation --no-deps deepspeed==0.12.6 hjson py-cpuinfo \
    'pydantic<2' pynvml psutil tqdm packaging ninja >&2
fi
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)' >&2

RES=$OUT/results.jsonl
: > "$RES"
bench() { # impl
  local ext=$VENV/torch_ext_${1//-/_}
  TORCH_EXTENSIONS_DIR=$ext PATH="$VENV/bin:$PATH" "$VENV/bin/python" "$ROOT/bench/cpu_adam/adam_bench.py" \
    --impl "$1" --n "$N" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
    --lib "$OUT/libbigc_cpu_adam.so" 2>"$OUT/$1.log" | tail -n 1
}

# 3. bigc against torch.optim.AdamW's numbers.
echo "== correctness: bigc cpuAdamW vs torch.optim.AdamW (10 steps)" >&2
bench check | tee -a "$RES"

# 4. Memory bandwidth and the C++ bench (grads f32; and the mixed-precision offload case:
#    bf16/f16 grads in, bf16/f16 compute copy out).
echo "== C++ bench (bandwidth, dtypes)" >&2
"$OUT/cpu_adam_bench" --n "$N" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" | tee -a "$RES"
for t in bf16 f16; do
  "$OUT/cpu_adam_bench" --n "$N" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
    --grad $t --half $t --no-triad | tee -a "$RES"
done

# 5. The implementations, interleaved; each round starts one further along the list, so that no
#    implementation always runs right after the same one.
read -r -a LIST <<< "$IMPLS"
K=${#LIST[@]}
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS" >&2
  for j in $(seq 0 $((K - 1))); do
    impl=${LIST[$(( (j + r - 1) % K ))]}
    line=$(bench "$impl" || true)
    if [ -z "$line" ]; then
      echo "   $impl failed: see $OUT/$impl.log" >&2
      continue
    fi
    echo "$line" | sed "s/^{/{\"round\": $r, /" | tee -a "$RES" >&2
  done
done

# 6. Table.
"$PY" "$ROOT/bench/cpu_adam/summarize.py" "$RES"
