"""The trial result store: each attempt's :class:`TrialResult` beside the trial's checkpoint.

``<project_dir>/trial_<id>/beam_result-<attempt>.json``, in the tuner's shared project
folder: the worker writes it (atomically) when the attempt ends, the launcher reads it to
report the trial to the oracle, and a worker retried by the runner finds it and returns it
instead of training again, so no trial is counted twice.

Example::

    write_trial_result(spec.project_dir, result)          # on the worker
    read_trial_result(spec.project_dir, "03", 0)          # on the launcher: the result, or None
"""

from __future__ import annotations

from typing import Optional

from beam_pipeline.core import fileio
from trainer.tuning.messages import TrialResult

__all__ = ["read_trial_result", "write_trial_result"]

_RESULT_PREFIX = "beam_result-"


def _result_path(project_dir: str, trial_id: str, attempt: int) -> str:
    return fileio.join(project_dir, f"trial_{trial_id}", f"{_RESULT_PREFIX}{attempt}.json")


def read_trial_result(project_dir: str, trial_id: str, attempt: int) -> Optional[TrialResult]:
    """The result an earlier run of this trial attempt left, or None."""
    path = _result_path(project_dir, trial_id, attempt)
    if not fileio.exists(path):
        return None
    with fileio.open(path) as f:
        return TrialResult.from_json(f.read())


def write_trial_result(project_dir: str, result: TrialResult) -> None:
    """Writes ``result`` as its attempt's file (atomically: a reader never sees half of it)."""
    path = _result_path(project_dir, result.trial_id, result.attempt)
    fileio.makedirs(fileio.join(project_dir, f"trial_{result.trial_id}"))
    fileio.write_atomic(path, result.to_json())
