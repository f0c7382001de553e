#!/usr/bin/env bash
# Create .venv (if needed) and install graphscale with its test extras into it.
#
# torch: a fresh venv gets ${GRAPHSCALE_TORCH:-torch==2.13.0} first (the CPU wheel on
# machines that have it locally; an unpinned torch would pull several GB of CUDA
# packages). Set GRAPHSCALE_TORCH="" to keep whatever torch the venv already has,
# or e.g. GRAPHSCALE_TORCH="torch==2.5.1" for another build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${GRAPHSCALE_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.graphscale-installed"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  torch_spec=${GRAPHSCALE_TORCH-torch==2.13.0}
  if [ -n "$torch_spec" ] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/python" -m pip install -q --no-compile "$torch_spec"
  fi
  "$VENV/bin/python" -m pip install -q --no-compile -e ".[test]"
  # byte-compile what was installed on every core (pip compiles file by file: 59 s against 37 s for the whole setup
  # on 2 cores); a file that does not compile (some packages ship such test data) is skipped, as pip skips it
  "$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    > /dev/null || true
  echo "$want" > "$stamp"
fi
