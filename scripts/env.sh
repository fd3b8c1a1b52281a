#!/bin/sh
# Creates (or refreshes) the project's virtual environment in .venv from requirements.lock,
# with this repository installed in editable mode. Safe to run repeatedly: it reinstalls
# only when requirements.lock or setup.py changed since the last install.
# Usage: sh scripts/env.sh   (PYTHON=python3.11 by default)
set -e
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=$(cat requirements.lock setup.py | sha256sum | cut -c1-16)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$stamp" > .venv/.installed
fi
