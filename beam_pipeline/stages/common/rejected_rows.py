"""The rejected-rows guard that ExampleGen and the BulkInferrer share.

A stage that sets bad rows aside (``rejected-*.jsonl``: ``file``, ``line``, ``reason``) fails
when it read no row or rejected more than ``--max_rejected_fraction`` of them, naming the
first rejected row, and publishes the rejected rows so the user can read them all.

Example::

    check_rejected(
        out, RejectedRows, "ExampleGen", read=47, rows_out={"train": 30, "eval": 14},
        rejected=3, limit=0.05, rows_of="input rows",
        empty="--data x.csv holds no data rows; add rows below the header.",
    )
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.stage import Outputs, StageFailed
from beam_pipeline.engine.summary import StageReport, StageStatus

__all__ = ["check_rejected", "first_rejected"]


def first_rejected(rejected_dir: str) -> str:
    """The first rejected row as 'file:line reason': the smallest (file, line) of the rows a
    reader rejected, else the reason alone of a row read fine and refused later (a model
    refusing it: it has no line of its own, ``file`` empty); "none" if there is none."""
    first = None
    for path in fileio.glob(fileio.join(rejected_dir, "rejected-*")):
        with fileio.open(path) as f:
            for line in f:
                row = json.loads(line)
                key = (row["file"] == "", row["file"], row["line"], row["reason"])
                first = key if first is None or key < first else first
    if first is None:
        return "none"
    return first[3] if first[0] else f"{first[1]}:{first[2]} {first[3]}"


def check_rejected(
    out: Outputs,
    artifact: type[Artifact],
    stage: str,
    *,
    read: int,
    rows_out: Mapping[str, int],
    rejected: int,
    limit: float,
    rows_of: str,
    empty: str,
) -> None:
    """Fails ``stage`` (its ``artifact`` of rejected rows published) when no row was read
    (the sentence ``empty``) or more than ``limit`` of the ``read`` rows were rejected
    ("3 of 47 <rows_of> (6.38%) were rejected, more than --max_rejected_fraction=…")."""
    fraction = rejected / read if read else 0.0
    if read and fraction <= limit:
        return
    rejected_dir = out.uri(artifact)
    report = StageReport(
        stage, StageStatus.FAILED, {"all": read}, rows_out, rejected, 0.0, rejected_dir
    )
    if not read:
        error = PipelineError(empty)
    else:
        error = PipelineError(
            f"{rejected} of {read} {rows_of} ({fraction:.2%}) were rejected, more than "
            f"--max_rejected_fraction={limit} (first: {first_rejected(out.folder(artifact))}); "
            f"fix those rows (all listed in {rejected_dir}) or raise --max_rejected_fraction."
        )
    raise StageFailed(error, [report], publish=(artifact,))
