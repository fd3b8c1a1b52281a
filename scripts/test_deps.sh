#!/bin/sh
# Installs what the test suite needs beyond .venv: Debian's chromium package, in which
# tests/test_cli_runs.py renders a run's report.html (that test is skipped without it).
# Needs root and apt-get (Debian/Ubuntu); elsewhere it says so and does nothing. Never
# fails: the rest of the suite runs either way.
# Usage: sh scripts/test_deps.sh
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  echo "test deps: chromium is installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test deps: not root or no apt-get; install chromium yourself to run the report's browser test"
  exit 0
fi
echo "test deps: installing chromium (apt-get)"
# Bounded: a mirror that does not answer must not hold the test run (timeout is coreutils').
if ! { timeout 300 apt-get update -qq \
  && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq chromium; } \
  >/tmp/beam-pipeline-test-deps.log 2>&1; then
  echo "test deps: apt-get could not install chromium (see /tmp/beam-pipeline-test-deps.log); the report's browser test will be skipped"
fi
exit 0
