"""Data safety of a run directory: the summary, content-keyed caches, resume and refusal."""

from __future__ import annotations

import json
import os

import pytest

from beam_pipeline.errors import PipelineError
from beam_pipeline.summary import (
    SUMMARY_FILE,
    RunSummary,
    StageReport,
    StageStatus,
    write_summary,
)


def _summary(run_dir: str, *stages: str) -> RunSummary:
    return RunSummary(
        run_dir, [StageReport(s, StageStatus.OK, rows_out={"train": 2}) for s in stages]
    )


def test_summary_is_written_whole_and_an_empty_one_never_replaces_it(tmp_path):
    run_dir = str(tmp_path)
    path = write_summary(_summary(run_dir, "ExampleGen", "Statistics"))
    assert path == os.path.join(run_dir, SUMMARY_FILE)
    with open(path) as f:
        written = json.load(f)
    assert [s["stage"] for s in written["stages"]] == ["ExampleGen", "Statistics"]
    assert StageReport.from_json(written["stages"][0]).rows_out == {"train": 2}
    before = open(path, "rb").read()
    # A later attempt that failed before its first stage must not blank the summary.
    assert write_summary(RunSummary(run_dir), after_error=True) is None
    assert open(path, "rb").read() == before
    assert os.listdir(run_dir) == [SUMMARY_FILE]  # no temporary file left behind


def test_a_summary_that_cannot_be_written_never_hides_the_runs_own_error(tmp_path, caplog):
    run_dir = str(tmp_path)
    os.mkdir(os.path.join(run_dir, SUMMARY_FILE))  # the rename onto it fails, as a full disk
    with pytest.raises(PipelineError, match=r"summary\.json could not be written \(.*\); free"):
        write_summary(_summary(run_dir, "ExampleGen"))
    # After the run's error: logged only, so the caller re-raises its own error.
    assert write_summary(_summary(run_dir, "ExampleGen"), after_error=True) is None
    assert "could not be written" in caplog.text
    assert os.listdir(run_dir) == [SUMMARY_FILE]  # the temporary files were removed
