"""CI's promise that a green run means the service-backed tests ran: with
BEAM_PIPELINE_TEST_REQUIRE_SERVICES=1 (what .ci/run exports), a test whose database server
or Chromium is missing FAILS naming the service; without it (the README's own command) the
same test is skipped. Each row runs one such test in a fresh pytest with its service made
unreachable for that process only (a port where nothing listens, a PATH without Chromium):
the shared servers keep running. The test fails at its fixture, before any pipeline runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, REQUIRE_SERVICES, free_port

_PORT = free_port()  # nothing listens there
_ROWS = [
    # (service, the one test that needs it, environment that hides it, the failure's words)
    (
        "postgresql",
        "tests/test_metadata_server.py::"
        "test_the_migrations_create_and_upgrade_the_schema_on_the_server[postgresql]",
        {
            "BEAM_PIPELINE_TEST_POSTGRESQL_URL": (
                f"postgresql://beam_pipeline:bp4tests@127.0.0.1:{_PORT}/beam_pipeline_test"
            )
        },
        f"no postgresql server at postgresql+pg8000://beam_pipeline:***@127.0.0.1:{_PORT}/",
    ),
    (
        "mysql",
        "tests/test_metadata_server.py::"
        "test_the_migrations_create_and_upgrade_the_schema_on_the_server[mysql]",
        {
            "BEAM_PIPELINE_TEST_MYSQL_URL": (
                f"mysql://beam_pipeline:bp4tests@127.0.0.1:{_PORT}/beam_pipeline_test"
            )
        },
        f"no mysql server at mysql+pymysql://beam_pipeline:***@127.0.0.1:{_PORT}/",
    ),
    (
        "chromium",
        "tests/test_cli_runs.py::test_the_report_renders_in_headless_chromium_without_console_errors",
        {"PATH": "/nonexistent"},
        "no chromium on PATH",
    ),
]


@pytest.mark.parametrize("required", [True, False], ids=["ci", "readme"])
@pytest.mark.parametrize("service, test, hidden, words", _ROWS, ids=[row[0] for row in _ROWS])
def test_a_missing_service_fails_in_ci_and_is_skipped_elsewhere(
    service, test, hidden, words, required
):
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_SERVICES}
    env.update(hidden, PYTHONPATH=REPO)
    if required:  # what .ci/run exports before it runs the suite
        with open(os.path.join(REPO, ".ci", "run")) as f:
            (value,) = re.findall(rf"^export {REQUIRE_SERVICES}=(\S+)$", f.read(), re.M)
        env[REQUIRE_SERVICES] = value
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-rfEs", test],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert words in out, out[-3000:]
    if required:
        assert proc.returncode == 1 and ("1 failed" in out or "1 error" in out), out[-3000:]
        assert f"{REQUIRE_SERVICES}=1" in out, out[-3000:]
    else:
        assert proc.returncode == 0 and "1 skipped" in out, out[-3000:]
