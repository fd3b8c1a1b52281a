#!/bin/sh
# Creates (or refreshes) the project's virtual environment in .venv from requirements.lock,
# with this repository installed in editable mode. Safe to run repeatedly: it reinstalls
# only when requirements.lock or setup.py changed since the last install.
# Prints one line per step; a step's own output (pip's, setuptools') goes to
# .venv/install.log and is printed in full when the step fails.
# Usage: sh scripts/env.sh   (PYTHON=python3.11 by default)
set -e
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
LOG=.venv/install.log

# step "what it does" command...: one line, and the command's output only if it fails.
step() {
  what=$1
  shift
  printf 'env: %s\n' "$what"
  if ! "$@" >"$LOG" 2>&1; then
    printf 'env: %s failed; its output (from %s):\n' "$what" "$LOG" >&2
    cat "$LOG" >&2
    exit 1
  fi
}

if [ ! -x .venv/bin/python ]; then
  printf 'env: creating .venv with %s\n' "$PY"
  "$PY" -m venv .venv
fi
stamp=$(cat requirements.lock setup.py | sha256sum | cut -c1-16)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
  step "upgrading pip" .venv/bin/python -m pip install --upgrade pip
  step "installing requirements.lock" .venv/bin/python -m pip install -r requirements.lock
  step "installing this repository (editable)" .venv/bin/python -m pip install --no-deps -e .
  echo "$stamp" > .venv/.installed
  echo "env: .venv is ready"
else
  echo "env: .venv is up to date"
fi
