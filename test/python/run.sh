#!/usr/bin/env bash
# The importer's unit tests (test/python/test_*.py) in the project's Python environment (exit 77,
# skipped, without one).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../e2e/python_env.shlib" # PY, or exit 77
cd "$HERE" && PYTHONDONTWRITEBYTECODE=1 "$PY" -m unittest discover -s "$HERE" -p 'test_*.py' -v 2>&1
