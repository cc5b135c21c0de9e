#!/usr/bin/env bash
# The Python environment of `bigc import` (python/bigc_import) and its end-to-end tests:
# <source>/.venv, holding PyTorch 2.15.0, transformers 5.23.0, safetensors and numpy from PyPI
# (Debian's python3 -m venv). The environment itself lives once per user and versions, in
# ${XDG_CACHE_HOME:-~/.cache}/bigc/venv-torch2.15.0-transformers5.23.0, and <source>/.venv is a
# link to it: a second clone, or a clean one in CI, finds it installed (5.6 GB, a few minutes to
# install) as it finds the Debian packages. Idempotent: when the environment has those versions
# it does nothing (in well under a second) and says so in one line.
#
#   scripts/setup-python.sh                  # make or check the environment, link <source>/.venv
#   BIGC_VENV=DIR scripts/setup-python.sh    # the environment in DIR instead (no link)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TORCH=2.15.0
TRANSFORMERS=5.23.0
LINK=
if [ -n "${BIGC_VENV:-}" ]; then
  VENV=$BIGC_VENV
elif [ -d "$ROOT/.venv" ] && [ ! -L "$ROOT/.venv" ]; then
  VENV=$ROOT/.venv # an environment made in the tree by an earlier version of this script
else
  VENV=${XDG_CACHE_HOME:-$HOME/.cache}/bigc/venv-torch$TORCH-transformers$TRANSFORMERS
  LINK=$ROOT/.venv
fi
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

# <source>/.venv -> the environment (replacing a stale link).
link() {
  [ -n "$LINK" ] || return 0
  if [ "$(readlink "$LINK" 2>/dev/null)" != "$VENV" ]; then
    ln -sfn "$VENV" "$LINK"
  fi
}

if have_versions; then
  link
  echo "setup-python: $VENV has torch $TORCH and transformers $TRANSFORMERS (nothing to do)"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"

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
link
echo "setup-python: $VENV ready (torch $TORCH, transformers $TRANSFORMERS)"
