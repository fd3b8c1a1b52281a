"""Stage reports and the run summary printed at the end of a run.

Every stage returns a :class:`StageReport`; the run collects them into a
:class:`RunSummary`, prints it as a table and writes it as ``summary.json`` in the run
directory with :func:`write_summary`: atomically (a temporary file renamed into place), so
a reader never sees half a summary, and never over an earlier summary with an empty one.

Example::

    report = StageReport(stage="ExampleGen", status=StageStatus.OK, rows_in={"all": 344})
    print(RunSummary(run_dir="...", stages=[report]).format())
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import sys
from typing import Any, Optional

from beam_pipeline.core import fileio

__all__ = [
    "StageStatus",
    "StageReport",
    "RunSummary",
    "SUMMARY_FILE",
    "split_order",
    "write_summary",
]

SUMMARY_FILE = "summary.json"
_LOG = logging.getLogger(__name__)


class StageStatus(str, enum.Enum):
    OK = "ok"
    SKIPPED = "skipped"
    FAILED = "failed"
    CACHED = "cached"


@dataclasses.dataclass
class StageReport:
    """What one stage did.

    Attributes:
      stage: the stage's name (ExampleGen, Statistics, ...).
      status: how it ended.
      rows_in / rows_out: row counts per split (``{"train": 230, "eval": 114}``); rows_in
        may use the key ``"all"`` before splitting.
      rows_rejected: rows the stage refused (sent to the rejected-rows artifact).
      seconds: wall time.
      artifact: where its artifact was published.
      note: one line of detail (why skipped, eval metrics, the model path, ...).
      details: extra machine-readable facts (metrics, best hyperparameters, ...).
    """

    stage: str
    status: StageStatus
    rows_in: dict[str, int] = dataclasses.field(default_factory=dict)
    rows_out: dict[str, int] = dataclasses.field(default_factory=dict)
    rows_rejected: int = 0
    seconds: float = 0.0
    artifact: Optional[str] = None
    note: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.rows_in = split_order(self.rows_in)
        self.rows_out = split_order(self.rows_out)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StageReport:
        """The inverse of :meth:`to_json` (JSON keeps what ``default=str`` made of details)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in fields}
        values["status"] = StageStatus(values["status"])
        return cls(**values)


# The order splits are shown in, whichever of a job's counters came first.
_SPLIT_ORDER = ("all", "train", "eval", "test")


def split_order(counts: dict[str, Any]) -> dict[str, Any]:
    """``counts`` keyed by split with all, train, eval, test first (then the rest)."""

    def rank(key: str) -> tuple[int, str]:
        return (_SPLIT_ORDER.index(key) if key in _SPLIT_ORDER else len(_SPLIT_ORDER), key)

    return {k: counts[k] for k in sorted(counts, key=rank)}


def _counts(c: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in split_order(c).items()) or "-"


@dataclasses.dataclass
class RunSummary:
    """All stage reports of one run."""

    run_dir: str
    stages: list[StageReport] = dataclasses.field(default_factory=list)

    def stage(self, name: str) -> Optional[StageReport]:
        """The first summary row of the stage ``name`` (``Trainer``, ``ExampleGen``, ...),
        or None when the run has none."""
        return next((s for s in self.stages if s.stage == name), None)

    def format(self) -> str:
        """The summary as a fixed-width table followed by per-stage notes."""
        head = ("stage", "status", "rows in", "rows out", "rejected", "seconds", "artifact")
        rows = [head] + [
            (
                s.stage,
                s.status.value,
                _counts(s.rows_in),
                _counts(s.rows_out),
                str(s.rows_rejected),
                f"{s.seconds:.1f}",
                s.artifact or "-",
            )
            for s in self.stages
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
        lines = [f"Run directory: {self.run_dir}"]
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])
        for s in self.stages:
            if s.note:
                lines.append(f"{s.stage}: {s.note}")
            table = s.details.get("table_head")  # e.g. the tuner's best trials
            if table:
                lines.extend("    " + row for row in str(table).splitlines())
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(
            {"run_dir": self.run_dir, "stages": [s.to_json() for s in self.stages]},
            indent=2,
            default=str,
        )


def _write_errors() -> tuple[type[BaseException], ...]:
    """What writing the summary may raise: OSError, and TensorFlow's errors only where gfile
    (a remote run directory) imported it; a local one is written with the OS's calls, so a
    data-only run never imports TensorFlow."""
    tf = sys.modules.get("tensorflow")
    return (OSError, tf.errors.OpError) if tf is not None else (OSError,)


def write_summary(summary: RunSummary, *, after_error: bool = False) -> Optional[str]:
    """Writes ``summary.json`` into the run directory atomically; returns its path.

    The JSON goes to a temporary file beside it, renamed over ``summary.json`` only once
    complete: a full disk or a kill leaves the earlier summary (or none), never a 0-byte or
    truncated one. A summary without stages (a run that failed before its first stage)
    never replaces an existing one.

    Args:
      summary: the run's summary; ``summary.run_dir`` is the run directory.
      after_error: the run is already failing; a summary that cannot be written is then
        logged, not raised, so the caller's real error is what the user sees.

    Returns:
      the summary's path, or None when nothing was written.

    Raises:
      PipelineError: the file cannot be written (only when ``after_error`` is False).
    """
    from beam_pipeline.core.errors import PipelineError, no_room

    path = fileio.join(summary.run_dir, SUMMARY_FILE)
    try:
        if not summary.stages and fileio.exists(path):
            return None
        fileio.write_atomic(path, summary.to_json())
        return path
    except _write_errors() as e:  # evaluated once raised, after any gfile import
        cause = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
        if after_error:
            # A full disk is what the run's own error says already: the log only.
            level = logging.INFO if no_room(e) else logging.WARNING
            _LOG.log(level, "The run summary %s could not be written (%s).", path, cause)
            return None
        raise PipelineError(
            f"The run summary {path} could not be written ({cause}); free space or fix the "
            "permissions there (the run's artifacts are published)."
        ) from e
