#!/bin/sh
# Creates (or refreshes) the project's virtual environment in .venv from requirements.lock
# and requirements-docs.txt (the docs site's mkdocs, which the tests build), with this
# repository installed in editable mode. Safe to run repeatedly: it reinstalls only when
# one of those files or setup.py changed since the last install.
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

# requirements.lock and requirements-docs.txt with uv, or with pip where uv fails (its
# output stays in the log).
lock_install() {
  .venv/bin/python -m uv pip install --compile-bytecode --python .venv/bin/python \
    -r requirements.lock -r requirements-docs.txt ||
    .venv/bin/python -m pip install -r requirements.lock -r requirements-docs.txt
}

if [ ! -x .venv/bin/python ]; then
  printf 'env: creating .venv with %s\n' "$PY"
  "$PY" -m venv .venv
fi
stamp=$(cat requirements.lock requirements-docs.txt setup.py | sha256sum | cut -c1-16)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
  step "upgrading pip" .venv/bin/python -m pip install --upgrade pip
  # uv installs the same pinned set as pip (uv pip check: compatible; pip freeze: the same
  # packages), faster: it downloads, unpacks and compiles in parallel. --compile-bytecode
  # as pip does: without the .pyc files every test process compiles TensorFlow's modules
  # itself, which makes a whole suite far slower. pip does it if uv cannot (uv reads PyPI,
  # or UV_INDEX_URL; not pip.conf).
  step "installing uv" .venv/bin/python -m pip install "uv==0.13.9"
  step "installing requirements.lock and requirements-docs.txt" lock_install
  step "installing this repository (editable)" .venv/bin/python -m pip install --no-deps -e .
  echo "$stamp" > .venv/.installed
  echo "env: .venv is ready"
else
  echo "env: .venv is up to date"
fi
# The project's own modules compiled, as pip compiles a package it installs (an editable
# install does not): without the .pyc files, and where PYTHONDONTWRITEBYTECODE is set,
# every command and test process compiles them again. Only changed files are compiled.
step "compiling this repository's modules" \
  .venv/bin/python -m compileall -q beam_pipeline transforms trainer
