"""An execution of a stage, and the records the runner looks executions up in and adds to.

:class:`Execution` is what the runner records when a stage finishes: its key (see
:func:`cache_key`), what it was built from, its input and output artifacts, its summary
rows and outcome. :class:`ExecutionRecords` is the seam between the runner and where
executions are kept: :class:`beam_pipeline.engine.run_records.RunRecords` implements it over
the run's manifest (:class:`beam_pipeline.engine.manifest.RunManifest`, which resumes a run and
has the look-up, forget and record part) and the metadata store (caching across runs,
history).

Example::

    found = records.lookup("Schema", key)   # None: a miss
    if found is None:
        records.forget(["Schema", "Validation", ...])
        ...  # run the stage
        records.record(Execution("Schema", key, built_from, ...))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.fingerprint import json_digest
from beam_pipeline.engine.history_entry import HISTORY
from beam_pipeline.engine.summary import StageReport

__all__ = ["Execution", "ExecutionRecords", "cache_key", "output_key"]


def output_key(key: str, artifact: Any) -> str:
    """What a stage downstream of ``artifact`` keys itself by: the key of the execution
    that made it and the folder it is in (a reused execution keeps its folders). An
    execution rerun under ``--no_cache``, or because its outputs were damaged, keeps its
    key but makes new outputs (another model, another verdict), so the stages that read
    them run again: keyed by the key alone they were reused, and a model that failed the
    serving check was reported pushed on the strength of an earlier verdict."""
    uri = artifact.uri  # as made (relative under a relative root) or as stored (absolute)
    folder = uri if fileio.is_remote(uri) else os.path.abspath(uri)
    return json_digest({"key": key, "folder": folder})


def cache_key(stage: str, built_from: Mapping[str, Any]) -> str:
    """A stage's cache key: the digest of its name and what it is built from."""
    return json_digest({"stage": stage, "built_from": built_from})


@dataclasses.dataclass
class Execution:
    """One finished execution of a stage.

    Attributes:
      stage: the stage.
      key: its cache key (:func:`cache_key` of ``built_from``).
      built_from: the upstream stages' keys (by input) and the stage's parameters.
      inputs: the artifacts it read.
      outputs: the artifacts it produced (published).
      reports: its summary rows as it reported them.
      outcome: facts a later look-up needs besides the artifacts (e.g. Validation's
        blocking-anomalies message).
      run_id: the run it belongs to.
      started / finished: ISO times.
      history: what it shows in the run history (:meth:`HistoryEntry.to_json
        <beam_pipeline.engine.history_entry.HistoryEntry.to_json>` of the stage's
        :meth:`~beam_pipeline.engine.stage.Stage.history`).
    """

    stage: str
    key: str
    built_from: Mapping[str, Any]
    inputs: Sequence[TypedArtifact]
    outputs: Sequence[TypedArtifact]
    reports: Sequence[StageReport]
    outcome: Mapping[str, Any]
    run_id: str
    started: str
    finished: str
    history: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """What is kept of it (in the run manifest, and as the store's execution
        properties): all but its stage, key and run, which the keeper files it under."""
        return {
            "built_from": dict(self.built_from),
            "inputs": [a.to_json() for a in self.inputs],
            "outputs": [a.to_json() for a in self.outputs],
            "reports": [r.to_json() for r in self.reports],
            "outcome": dict(self.outcome),
            "started": self.started,
            "finished": self.finished,
            HISTORY: dict(self.history),
        }

    @classmethod
    def from_json(
        cls, stage: str, key: str, run_id: str, kept: Mapping[str, Any]
    ) -> Optional[Execution]:
        """The execution :meth:`to_json` kept as ``kept``; None where it cannot be read (kept
        by another version: a miss, never an error)."""
        try:
            return cls(
                stage=stage,
                key=key,
                built_from=kept["built_from"],
                inputs=[TypedArtifact.from_json(a) for a in kept.get("inputs", [])],
                outputs=[TypedArtifact.from_json(a) for a in kept["outputs"]],
                reports=[StageReport.from_json(r) for r in kept.get("reports", [])],
                outcome=kept.get("outcome") or {},
                run_id=run_id,
                started=kept.get("started", ""),
                finished=kept.get("finished", ""),
                history=kept.get(HISTORY) or {},
            )
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def job_ids(self) -> list[str]:
        """The Beam job ids its summary rows name (remote runners)."""
        jobs = (r.details.get("job") or {} for r in self.reports)
        return [j["job_id"] for j in jobs if j.get("job_id")]


class ExecutionRecords(Protocol):
    """Where the runner looks up earlier executions and records new ones."""

    def lookup(self, stage: str, key: str) -> Optional[Execution]:
        """A successful earlier execution of ``stage`` with ``key``, or None.

        The runner reuses it only when each of its outputs is still published; a miss is
        never an error.
        """

    def forget(self, stages: Sequence[str]) -> None:
        """``stages`` (one that reruns and those after it) are about to be rerun in this
        run: their earlier executions in this run no longer describe its folders."""

    def record(self, execution: Execution) -> None:
        """Records a finished execution (its outputs are published)."""

    def reuse(self, execution: Execution) -> None:
        """The runner reuses ``execution`` (a hit of :meth:`lookup`) in this run."""

    def begin(
        self,
        stage: str,
        key: str,
        built_from: Mapping[str, Any],
        inputs: Sequence[TypedArtifact],
    ) -> None:
        """``stage`` starts (after :meth:`forget`), reading ``inputs``."""

    def stop(
        self,
        stage: str,
        error: Optional[BaseException],
        reports: Sequence[StageReport] = (),
    ) -> None:
        """``stage`` stopped without a result: failed with ``error``, or (None) halted the
        run without one (a dry run, nothing to do)."""
