"""The live progress display through a pseudo-terminal (rich's live line) and through a
pipe (plain periodic lines), in a child process as a user's terminal or CI log sees it.
What it reads of a real run (trials, training steps) is checked in test_cli_runs.py."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
from conftest import REPO

from beam_pipeline.progress import PROGRESS_PREFIX

# Two stages as the runner announces them; the Transform runs long enough for periodic
# lines (every 0.2 s here) and for rich's spinner to redraw.
_SCRIPT = """
import sys, time
from beam_pipeline.engine.events import RunEvents
from beam_pipeline.progress import ProgressDisplay
from beam_pipeline.engine.summary import StageReport, StageStatus

events = RunEvents()
with ProgressDisplay(events, sys.stdout, enabled=sys.argv[1] == "on", plain_every=0.2):
    events.run_started(sys.argv[2])
    events.stage_started("ExampleGen")
    events.stage_finished(StageReport("ExampleGen", StageStatus.OK, rows_out={"train": 200,
                                      "eval": 100}, seconds=2.0))
    events.stage_started("Transform")
    time.sleep(1.5)
    events.stage_finished(StageReport("Transform", StageStatus.FAILED, seconds=1.5))
print("summary")
"""


def _env():
    return dict(os.environ, PYTHONPATH=REPO, TERM="xterm-256color", COLUMNS="100")


def test_through_a_pipe_progress_is_plain_lines(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "on", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "\x1b" not in proc.stdout  # no escape sequence in a log file
    assert lines[:3] == [
        f"{PROGRESS_PREFIX}ExampleGen: running",
        f"{PROGRESS_PREFIX}ExampleGen: ok in 2.0 s, 300 rows, 150 rows/s",
        f"{PROGRESS_PREFIX}Transform: running",
    ]
    periodic = [
        line for line in lines[3:-2] if line.startswith(f"{PROGRESS_PREFIX}Transform: running ")
    ]
    # Every 0.2 s for 1.5 s: about 7 (at least 1 even on a machine loaded to a standstill).
    assert len(periodic) >= 1 and periodic == lines[3:-2]
    assert lines[-2:] == [f"{PROGRESS_PREFIX}Transform: failed in 1.5 s", "summary"]


def test_in_a_terminal_progress_is_a_live_line_and_stays_off_with_no_progress(tmp_path):
    def through_pty(switch: str) -> str:
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdout is the pseudo-terminal
            os.execve(
                sys.executable, [sys.executable, "-c", _SCRIPT, switch, str(tmp_path)], _env()
            )
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, b"".join(chunks)[-2000:]
        return b"".join(chunks).decode("utf-8", "replace")

    shown = through_pty("on")
    # rich redraws the running stage in place (cursor movements), then prints the ends.
    assert "\x1b[" in shown and "Transform: running" in shown
    assert f"{PROGRESS_PREFIX}ExampleGen: ok in 2.0 s, 300 rows, 150 rows/s" in shown
    assert f"{PROGRESS_PREFIX}Transform: failed in 1.5 s" in shown
    assert shown.rstrip().endswith("summary")
    off = through_pty("off")
    assert off.replace("\r\n", "\n") == "summary\n"


@pytest.mark.parametrize("stage", ["Tuner", "Trainer"])
def test_a_stage_without_its_files_yet_shows_only_its_time(tmp_path, stage):
    from beam_pipeline.stages.graph import STAGE_GRAPH

    progress = {s.name: s.progress for s in STAGE_GRAPH}  # each stage declares its own
    assert progress[stage](str(tmp_path)) == ""


def test_a_beam_job_shows_its_console_link_at_once_and_only_the_rows_its_runner_reports():
    """What a running Beam job adds to its stage's line, driven by the run's events as a
    stage sends them (beam_pipeline.runtime.jobs.announce_job); the display's thread is not
    started, so each line is read when the test asks for it."""
    import io
    import re

    from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult
    from google.cloud import dataflow as dataflow_api

    from beam_pipeline.engine.events import RunEvents
    from beam_pipeline.progress import ProgressDisplay, _job_rows
    from beam_pipeline.runtime.counters import live_counters
    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.runtime.runners import JobInfo, dataflow_console_url, job_info

    # A Dataflow job as Beam's DataflowRunner returns it once submitted (offline: this
    # result has no API client, so it has reported no counters yet).
    options = parse_beam_args(
        ["--runner=DataflowRunner", "--project=my-project", "--region=europe-west4"]
    )
    job_id = "2026-01-02_03_04_05-67"
    result = DataflowPipelineResult(dataflow_api.Job(id=job_id), None)
    # The link's form is test_runners.py's test_dataflow_job_id_and_console_link.
    link = f"DataflowRunner job {job_id}: " + dataflow_console_url(
        job_id, "europe-west4", "my-project"
    )
    out = io.StringIO()
    events = RunEvents()
    display = ProgressDisplay(events, out, counters_every=0.0)
    events.stage_started("ExampleGen+Statistics")
    poll = live_counters(result, options)
    assert poll is not None and poll() == {}
    events.job_submitted(job_info(result, options), poll)
    # The link is printed at once, on a line of its own, and stays in the running line.
    assert out.getvalue().splitlines() == [
        f"{PROGRESS_PREFIX}ExampleGen+Statistics: running",
        f"{PROGRESS_PREFIX}ExampleGen+Statistics: {link}",
    ]
    assert re.fullmatch(
        rf"ExampleGen\+Statistics: running \d+ s, {re.escape(link)}", display._line()
    )

    # Counters as a runner reports them while the job runs: rows read and written per
    # split, and rows per second since the job's submission.
    counts = {
        "example_gen.rows_read": 1000,
        "example_gen.rows_rejected": 3,
        "example_gen.rows_out.eval": 330,
        "example_gen.rows_out.train": 667,
        "statistics.rows": 900,
    }
    events.job_submitted(JobInfo("FlinkRunner", "job-1"), lambda: counts)
    assert re.fullmatch(
        r"ExampleGen\+Statistics: running \d+ s, rows read 1,000 \(3 rejected\), "
        r"train 667 / eval 330 written, [\d,]+ rows/s",
        display._line(),
    )
    assert _job_rows(counts, 2.0) == (
        "rows read 1,000 (3 rejected), train 667 / eval 330 written, 500 rows/s"
    )
    transform = {"transform.rows_out.train": 6, "transform.rows_out.eval": 4}
    assert _job_rows(transform, 2.0) == "train 6 / eval 4 written, 5 rows/s"
    assert _job_rows({}, 2.0) == "" and _job_rows({"statistics.rows": 5}, 2.0) == ""

    # The DirectRunner reports counters only when its job ends: nothing to poll, the line
    # keeps its elapsed time (and no job link: it runs on this machine).
    direct = parse_beam_args(["--runner=DirectRunner"])
    assert live_counters(None, direct) is None
    events.stage_started("Transform")
    events.job_submitted(JobInfo("DirectRunner", note="ran on this machine"), None)
    assert re.fullmatch(r"Transform: running \d+ s", display._line())
    assert out.getvalue().splitlines()[-1] == f"{PROGRESS_PREFIX}Transform: running"
