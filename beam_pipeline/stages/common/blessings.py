"""The model checks' shared pieces: the blessings the Evaluator and the InfraValidator
write and the Pusher reads, and the rule by which each of the three skips a run without a
model.

``blessing/`` (the ``ModelBlessing`` artifact) holds ``BLESSED`` or ``NOT_BLESSED`` and
``blessing.json`` (an :class:`EvaluationResult`); ``infra_blessing/`` (``InfraBlessing``)
holds ``INFRA_BLESSED`` or ``INFRA_NOT_BLESSED`` and ``infra_validation.json`` (an
:class:`InfraResult`), as TFX's blessings do.

Example::

    write_blessing(folder, EvaluationResult(True, (), None, {"Overall": {"accuracy": 0.9}}))
    read_blessing(folder).blessed   # True
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.summary import StageReport

__all__ = [
    "BLESSING_FILE",
    "EvaluationResult",
    "INFRA_FILE",
    "InfraResult",
    "NO_LABEL_FIX",
    "ThresholdFailure",
    "read_blessing",
    "read_infra_result",
    "write_blessing",
    "write_infra_result",
    "verdict",
]

BLESSING_FILE = "blessing.json"
INFRA_FILE = "infra_validation.json"

# Why the Evaluator skips a trained model, and the fix (the Pusher's note repeats it).
NO_LABEL_FIX = (
    "records no label; pass --eval_config (a TFMA EvalConfig naming model_specs.label_key) "
    "to evaluate and bless it"
)


@dataclasses.dataclass(frozen=True)
class ThresholdFailure:
    """A threshold a model failed on one slice."""

    metric: str
    slice: str
    value: float
    bound: str
    # How far the value is on the wrong side of the bound (absolute thresholds; None for
    # a relative change threshold or a missing slice, and in blessings written before it).
    by: Optional[float] = None

    def describe(self) -> str:
        short = f", misses it by {self.by:.4g}" if self.by is not None else ""
        return f"{self.metric} on {self.slice} = {self.value:.4g}, needs {self.bound}{short}"


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    """What the Evaluator decided and measured.

    Attributes:
      blessed: every threshold passed on every slice.
      failures: the thresholds that failed.
      baseline: the baseline model folder, or None (judged on value thresholds alone).
      metrics: slice name -> metric name -> value (the candidate's).
      reason: why, in words: "" when ``failures`` say it (or every threshold passed),
        :data:`~beam_pipeline.stages.evaluator.evaluation.NO_THRESHOLDS` when there was none
        to check, else TFMA's own verdict.
    """

    blessed: bool
    failures: tuple[ThresholdFailure, ...]
    baseline: Optional[str]
    metrics: dict[str, dict[str, float]]
    reason: str = ""

    def why(self) -> str:
        """The verdict's reason in words (never empty for a model that is not blessed)."""
        if self.failures:
            return "; ".join(f.describe() for f in self.failures)
        if self.reason:
            return self.reason
        return "every threshold passed" if self.blessed else "TFMA's validation failed"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def write_blessing(folder: str, result: EvaluationResult) -> None:
    """Writes ``BLESSED``/``NOT_BLESSED`` and ``blessing.json`` into ``folder``."""
    fileio.write_file(fileio.join(folder, "BLESSED" if result.blessed else "NOT_BLESSED"), "")
    fileio.write_file(
        fileio.join(folder, BLESSING_FILE), json.dumps(result.to_json(), indent=1) + "\n"
    )


def read_blessing(folder: str) -> Optional[EvaluationResult]:
    """The blessing written into ``folder``, or None if there is none."""
    path = fileio.join(folder, BLESSING_FILE)
    if not fileio.exists(path):
        return None
    d = json.loads(fileio.read_file(path))
    return EvaluationResult(
        blessed=d["blessed"],
        failures=tuple(ThresholdFailure(**f) for f in d["failures"]),
        baseline=d["baseline"],
        metrics=d["metrics"],
        reason=d.get("reason", ""),
    )


@dataclasses.dataclass(frozen=True)
class InfraResult:
    """The serving check's verdict and measurements.

    Attributes:
      blessed: the model loaded in time and answered every request well.
      problems: why not, one line each (the loader's or the request's message).
      load_seconds: time to load the SavedModel in the sandbox.
      latency_ms: batch size -> {"p50": ms, "p99": ms} over the repeats of that request.
      endpoint: the TF Serving server that answered (``--serving_endpoint``), or None for
        the sandbox (then ``load_seconds`` is the sandbox's load time).
    """

    blessed: bool
    problems: tuple[str, ...]
    load_seconds: Optional[float]
    latency_ms: dict[int, dict[str, float]]
    endpoint: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def write_infra_result(folder: str, result: InfraResult) -> None:
    """Writes ``INFRA_BLESSED``/``INFRA_NOT_BLESSED`` and ``infra_validation.json`` into
    ``folder``."""
    name = "INFRA_BLESSED" if result.blessed else "INFRA_NOT_BLESSED"
    fileio.write_file(fileio.join(folder, name), "")
    fileio.write_file(fileio.join(folder, INFRA_FILE), json.dumps(result.to_json(), indent=1))


def read_infra_result(folder: str) -> Optional[InfraResult]:
    """The result written into ``folder``, or None."""
    path = fileio.join(folder, INFRA_FILE)
    if not fileio.exists(path):
        return None
    d = json.loads(fileio.read_file(path))
    return InfraResult(
        d["blessed"],
        tuple(d["problems"]),
        d["load_seconds"],
        {int(k): v for k, v in d["latency_ms"].items()},
        d.get("endpoint"),
    )


def verdict(reports: Sequence[StageReport], *also: str) -> Optional[dict[str, Any]]:
    """A model check's verdict as the run history shows it (its
    :attr:`~beam_pipeline.engine.history_entry.HistoryEntry.verdict`): whether its first
    summary row blessed the model (None: it did not decide), the thresholds it missed,
    and the details ``also`` names; None without a row."""
    if not reports:
        return None
    details = reports[0].details
    found = {"blessed": details.get("blessed"), "failures": list(details.get("failures") or [])}
    found.update({name: details.get(name) for name in also})
    return found
