"""ruff over the whole tree (config in ruff.toml): lint and format failures fail the test suite
(the format check includes the Python blocks of README.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_ruff_is_clean():
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    proc = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean():
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    proc = subprocess.run(
        [ruff, "format", "--check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
