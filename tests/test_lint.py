"""ruff over the whole tree (config in ruff.toml): lint failures fail the test suite."""

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
