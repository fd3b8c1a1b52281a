"""The Tuner stage's artifacts and summary: the trials as CSV, JSON, a text table and a plot.

- ``trials.json`` / ``trials.csv``: per trial its hyperparameters, objective, status
  (COMPLETED, STOPPED by early stopping, FAILED), start time, seconds, attempts, round,
  worker (host:pid), error, and with early stopping the epochs it trained and the highest
  rung it reached (0: the first);
- ``objective.svg``: the objective per trial and the best so far;
- the stage's summary row: a one-line note and, in its details, the best trial, counts, times
  and the head of the trials table ranked by the objective.

Example::

    write_trials(staging, records, "val_loss", "min")
    plot_objective(os.path.join(staging, OBJECTIVE_PLOT), records, "val_loss", "min")
    report = stage_report(records, search, best, artifact, workers, restarts, started)
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.tuner.search import Search
from beam_pipeline.stages.tuner.settings import TunerSchedule
from trainer.tuning import TrialRecord, TrialStatus

__all__ = [
    "OBJECTIVE_PLOT",
    "STAGE",
    "TRIALS_CSV",
    "TRIALS_JSON",
    "plot_objective",
    "stage_report",
    "write_text",
    "write_trials",
]

STAGE = "Tuner"
TRIALS_JSON = "trials.json"
TRIALS_CSV = "trials.csv"
OBJECTIVE_PLOT = "objective.svg"
_HEAD_ROWS = 5
# Trials with an objective: trained to the end, or stopped early at a rung.
_SCORED = (TrialStatus.COMPLETED, TrialStatus.STOPPED)


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _format_hps(values: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_format_value(v)}" for k, v in values.items()) or "(none)"


def _ranked(records: Sequence[TrialRecord], direction: str) -> list[TrialRecord]:
    done = [r for r in records if r.objective is not None and not math.isnan(r.objective)]
    done.sort(key=lambda r: r.objective, reverse=direction == "max")
    return done + [r for r in records if r not in done]


def _table_head(records: Sequence[TrialRecord], objective: str, direction: str) -> str:
    head = ("trial", "status", objective, "hyperparameters", "seconds", "worker")
    rows = [head] + [
        (
            r.trial_id,
            r.status.value,
            "-" if r.objective is None else f"{r.objective:.4g}",
            _format_hps(r.hyperparameters),
            f"{r.seconds:.1f}",
            r.worker or "-",
        )
        for r in _ranked(records, direction)[:_HEAD_ROWS]
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def write_text(path: str, text: str) -> None:
    with fileio.open(path, "w") as f:
        f.write(text)


def write_trials(folder: str, records: Sequence[TrialRecord], objective: str, direction: str):
    rows = [r.to_dict() for r in records]
    write_text(
        os.path.join(folder, TRIALS_JSON),
        json.dumps(
            {"objective": {"name": objective, "direction": direction}, "trials": rows},
            indent=2,
            default=str,
        ),
    )
    hp_names = sorted({k for r in records for k in r.hyperparameters})
    metric_names = sorted({k for r in records for k in r.metrics})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["trial_id", "status", "objective", *hp_names, *metric_names]
        + ["started", "seconds", "attempts", "round", "worker", "error", "epochs", "rung"]
    )
    for r in records:
        writer.writerow(
            [r.trial_id, r.status.value, "" if r.objective is None else r.objective]
            + [r.hyperparameters.get(k, "") for k in hp_names]
            + [r.metrics.get(k, "") for k in metric_names]
            + [r.started, r.seconds, r.attempts, r.round, r.worker, r.error or ""]
            + [r.epochs or "", "" if r.rung is None else r.rung]
        )
    write_text(os.path.join(folder, TRIALS_CSV), out.getvalue())


def plot_objective(path: str, records: Sequence[TrialRecord], objective: str, direction: str):
    """Objective per trial (start order) and the best so far, as a small SVG file.

    Drawn with the run report's own SVG plots (:mod:`beam_pipeline.core.svg`), not
    matplotlib: Keras imports matplotlib's pyplot at import time wherever it is installed,
    which cost every process that imports TensorFlow CPU time (launcher, pool and Beam
    workers), for this one plot.
    """
    from beam_pipeline.core.svg import lines

    done = [(i, r.objective) for i, r in enumerate(records) if r.objective is not None]
    best, best_line = None, []
    for i, y in done:
        better = best is None or (y > best if direction == "max" else y < best)
        best = y if better else best
        best_line.append((i, best))
    failed = [r.trial_id for r in records if r.status not in _SCORED]
    xlabel = "trial (start order)" + (f"; failed: {', '.join(failed)}" if failed else "")
    series = {"trial": done, "best so far": best_line} if done else {}
    svg = lines(series, xlabel=xlabel, ylabel=f"{objective} ({direction})", width=480)
    write_text(path, svg or _NO_TRIAL_SVG)


_NO_TRIAL_SVG = (
    '<svg class="bp-curve" width="480" height="40" xmlns="http://www.w3.org/2000/svg">'
    '<text x="10" y="24" font-size="12">no trial completed</text></svg>'
)


def stage_report(
    records: Sequence[TrialRecord],
    search: Search,
    best: Mapping[str, Any],
    artifact: str,
    pool_workers: Optional[int],
    restarts: int,
    started: float,
) -> StageReport:
    oracle = search.oracle
    objective, direction = oracle.objective
    best_id = oracle.best_trial_id()
    top = next(r for r in records if r.trial_id == best_id)
    done = sum(r.status is TrialStatus.COMPLETED for r in records)
    stopped = sum(r.status is TrialStatus.STOPPED for r in records)
    failed = len(records) - done - stopped
    workers = sorted({r.worker for r in records if r.worker})
    best_values = dict(best.get("values", {}))
    if search.schedule is TunerSchedule.ROLLING:
        how = f"{oracle.slots} at a time (rolling)"
    elif search.schedule is TunerSchedule.SEARCH_JOB:
        how = f"{oracle.slots} at a time (search_job: {search.jobs} job(s))"
    else:
        how = f"in {oracle.rounds} rounds"
    note = (
        f"{len(records)} trials ({done} completed, "
        + (f"{stopped} stopped early, " if stopped else "")
        + f"{failed} failed) {how} "
        f"on {len(workers)} worker process(es); best {objective}="
        f"{top.objective:.4g} (trial {top.trial_id}): {_format_hps(best_values)}; "
        f"table: {os.path.join(artifact, TRIALS_CSV)}"
    )
    return StageReport(
        stage=STAGE,
        status=StageStatus.OK,
        seconds=round(time.time() - started, 3),
        artifact=artifact,
        note=note,
        details={
            "best_hyperparameters": best_values,
            "best_trial": top.trial_id,
            "objective": {"name": objective, "direction": direction, "value": top.objective},
            "trials": len(records),
            "completed": done,
            "failed": failed,
            "stopped": stopped,
            # Each stopped trial: the epochs it trained and the rung it did not pass.
            "stopped_trials": {
                r.trial_id: {"epochs": r.epochs, "rung": r.rung}
                for r in records
                if r.status is TrialStatus.STOPPED
            },
            "trial_epochs": sum(r.epochs for r in records),
            "schedule": search.schedule.value,
            "rounds": oracle.rounds,
            "workers": workers,
            "local_pool_workers": pool_workers,
            "worker_restarts": restarts,
            "table_head": _table_head(records, objective, direction),
            "counters": dict(search.counters),
            "setup_seconds": search.setup_seconds,
            "round_seconds": list(search.round_seconds),
            "trial_job_seconds": dict(search.trial_job_seconds),
            "jobs": search.jobs,
            "reissued": search.reissued,
        },
    )
