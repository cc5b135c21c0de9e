#!/usr/bin/env bash
# Installs what bigc needs from Debian's packages when it is missing. Safe to run again.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
pkgs=(cmake ninja-build ccache g++ pkg-config lld clang-format-14
      llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
      nlohmann-json3-dev libopenblas-dev libopenblas0-openmp libgtest-dev
      python3-torch python3-numpy python3-venv libopenmpi-dev openmpi-bin liburing-dev)
for p in "${pkgs[@]}"; do have "$p" || need+=("$p"); done
if [ ${#need[@]} -eq 0 ]; then
  echo "deps: all present"
  exit 0
fi
echo "deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
