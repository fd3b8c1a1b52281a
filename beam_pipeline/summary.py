"""Stage reports and the run summary printed at the end of a run.

Every stage returns a :class:`StageReport`; the run collects them into a
:class:`RunSummary`, prints it as a table and writes it as ``summary.json`` in the run
directory.

Example::

    report = StageReport(stage="ExampleGen", status=StageStatus.OK, rows_in={"all": 344})
    print(RunSummary(run_dir="...", stages=[report]).format())
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Optional

__all__ = ["StageStatus", "StageReport", "RunSummary"]


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

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d


def _counts(c: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in c.items()) or "-"


@dataclasses.dataclass
class RunSummary:
    """All stage reports of one run."""

    run_dir: str
    stages: list[StageReport] = dataclasses.field(default_factory=list)

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
