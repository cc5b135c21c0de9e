#!/usr/bin/env bash
# The tree follows .clang-format (clang-format 14, Debian 12's): lists the files that do not and
# exits 1. Fix with: git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || true)
[ -n "$CF" ] || { echo "check-format: clang-format-14 is missing (Debian: apt-get install clang-format-14)" >&2; exit 1; }
if [ -d .git ] || git rev-parse --git-dir >/dev/null 2>&1; then
  files=$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
else
  files=$(find . -path ./build\* -prune -o -path ./.venv -prune -o \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
# One clang-format run over every file (it names each file that differs in its diagnostics).
mapfile -t bad < <("$CF" --dry-run --Werror $files 2>&1 | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*clang-format.*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} files do not follow .clang-format: ${bad[*]}" >&2
  echo "fix: clang-format-14 -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: $(echo "$files" | wc -w) files follow .clang-format"
