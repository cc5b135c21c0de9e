#!/usr/bin/env bash
# Packs what a GPU machine needs to check bigc there when it has the CUDA toolkit, cmake and ninja but
# neither MLIR nor Debian's development packages nor internet: the runtime's build dependencies
# (headers and libraries of nlohmann-json, OpenBLAS's OpenMP build with its Fortran runtime,
# GoogleTest, liburing) taken from this machine's Debian packages, and the programs of
# scripts/gpu-programs.sh (every set; llama-bench imports Hugging Face configs: the Python
# environment of scripts/setup-python.sh), compiled here, into one tarball.
#
#   scripts/gpu-bundle.sh BUILD/bin OUT.tar.xz
#
# Then on the GPU machine, in a copy of this source tree: scripts/gpu-check.sh OUT.tar.xz
set -euo pipefail
BIN=$1
OUT=$2
[ -x "$BIN/bigc" ] || { echo "gpu-bundle.sh: $BIN/bigc not found (build the compiler first: make build)" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
D=$W/deps
mkdir -p "$D"
# Regular files and links of the packages (the directories come with them).
for p in nlohmann-json3-dev libgtest-dev libgmock-dev liburing-dev liburing2 libopenblas0-openmp libgfortran5 \
  libquadmath0; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || {
    echo "gpu-bundle.sh: package $p is not installed here (scripts/install-deps.sh)" >&2
    exit 1
  }
  dpkg -L "$p" | while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
  done
done > "$W/files"
tar -cf - -T "$W/files" 2> /dev/null | tar -xf - -C "$D"
# OpenBLAS's headers (one API for its builds) where CMakeLists.txt looks for the OpenMP build's.
A=$(gcc -print-multiarch)
mkdir -p "$D/usr/include/$A/openblas-openmp"
for h in /usr/include/$A/openblas-pthread/*.h; do cp -L "$h" "$D/usr/include/$A/openblas-openmp/"; done
# The programs the GPU tests and the benchmark run.
bash "$ROOT/scripts/gpu-programs.sh" "$BIN" "$W/programs" tiny ranks bench llama-bench > /dev/null
tar -cJf "$OUT" -C "$W" deps programs
echo "gpu-bundle.sh: $OUT ($(du -h "$OUT" | cut -f1); $(ls "$W/programs" | wc -l) programs)"
