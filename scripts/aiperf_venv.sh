#!/usr/bin/env bash
# Build (once) the virtual environment that holds aiperf for tests/test_aiperf.py, and print its path.
# aiperf pins its own transformers, pandas and plotly, so it gets a venv of its own, outside the repository, reused
# across runs: SPECVIZ_AIPERF_VENV, default ~/.cache/specviz-aiperf-venv. It is rebuilt only when requirements-aiperf.txt
# changes (its hash is stamped in the venv once the install succeeded; a half-built venv has no stamp and is redone).
# Needs PyPI (or a mirror pip is configured for) on the first build; a few minutes, mostly downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SPECVIZ_AIPERF_VENV:-$HOME/.cache/specviz-aiperf-venv}"
PYTHON="${SPECVIZ_AIPERF_PYTHON:-python3}"  # aiperf 0.13.0 wants Python 3.11 to 3.13
REQS="requirements-aiperf.txt"
STAMP="$VENV/.specviz-stamp"
WANT="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/aiperf" ]; then
  echo "$VENV"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then  # never delete a folder that is not a venv
  echo "$VENV exists and is not a virtual environment: set SPECVIZ_AIPERF_VENV elsewhere" >&2
  exit 1
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q -r "$REQS" >&2
"$VENV/bin/aiperf" --version >/dev/null 2>&1 || "$VENV/bin/aiperf" --help >/dev/null
echo "$WANT" >"$STAMP"
echo "$VENV"
