#!/usr/bin/env bash
# The Python environment of `bigc import` (python/bigc_import) and its end-to-end tests:
# <source>/.venv, made with Debian's python3 -m venv, holding PyTorch 2.15.0, transformers 5.23.0,
# safetensors and numpy from PyPI. Idempotent: when .venv already has those versions it does
# nothing (in well under a second) and says so in one line.
#
#   scripts/setup-python.sh            # make or check <source>/.venv
#   BIGC_VENV=DIR scripts/setup-python.sh   # another place
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${BIGC_VENV:-$ROOT/.venv}
TORCH=2.15.0
TRANSFORMERS=5.23.0
PY=/usr/bin/python3

# The versions installed in the venv, read from the package metadata (no import of torch: fast).
have_versions() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "$TORCH" "$TRANSFORMERS" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
want_torch, want_tf = sys.argv[1], sys.argv[2]
try:
    ok = (version("torch").split("+")[0] == want_torch and version("transformers") == want_tf
          and version("safetensors") and version("numpy"))
except PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}

if have_versions; then
  echo "setup-python: $VENV has torch $TORCH and transformers $TRANSFORMERS (nothing to do)"
  exit 0
fi

if [ ! -x "$PY" ]; then
  echo "setup-python: $PY is missing (Debian: apt-get install python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-python: creating $VENV ($($PY --version 2>&1))"
  if ! "$PY" -m venv "$VENV"; then
    echo "setup-python: '$PY -m venv' failed (Debian: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi
echo "setup-python: installing torch==$TORCH transformers==$TRANSFORMERS safetensors numpy into $VENV" \
     "(from PyPI; a few minutes the first time)"
"$VENV/bin/python" -m pip install --progress-bar off -q \
    "torch==$TORCH" "transformers==$TRANSFORMERS" safetensors numpy
if ! have_versions; then
  echo "setup-python: $VENV still lacks torch $TORCH / transformers $TRANSFORMERS after pip install" >&2
  exit 1
fi
echo "setup-python: $VENV ready (torch $TORCH, transformers $TRANSFORMERS)"
