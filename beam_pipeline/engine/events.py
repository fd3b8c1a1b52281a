"""The events a run tells its caller while it goes (:class:`RunEvents`).

The runner tells them; the CLI's log and progress display (:mod:`beam_pipeline.console`,
:mod:`beam_pipeline.progress`) listen. Here, not in the console module, so that the stage
declarations, which every command imports for its flags, need nothing of the terminal's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

__all__ = ["RunEvents"]


class RunEvents:
    """What a run tells its caller while it goes: its directory once it exists, each stage
    as it starts and ends, each Beam job a stage submits. The CLI's log and progress
    display subscribe to them; with no subscriber every event is a no-op (a run called
    from Python, a test).
    """

    _EVENTS = ("run_started", "stage_started", "job_submitted", "stage_finished")

    def __init__(self):
        self.run_dir: Optional[str] = None
        self.graph: tuple[Any, ...] = ()
        # Stage -> what tells its progress from its files while it runs (Stage.progress).
        self.details: dict[str, Callable[[str], str]] = {}
        self._listeners: dict[str, list[Callable[..., None]]] = {e: [] for e in self._EVENTS}

    def subscribe(self, **callbacks: Callable[..., None]) -> None:
        """``subscribe(run_started=f, stage_started=g, stage_finished=h)``, any of them."""
        for event, callback in callbacks.items():
            self._listeners[event].append(callback)

    def run_started(self, run_dir: str, graph: Sequence[Any] = ()) -> None:
        """The run directory exists (``<pipeline_root>/runs/<run_id>``); ``graph``: the
        stages the run runs (kept in ``graph``: its report shows their sections)."""
        self.run_dir = run_dir
        self.graph = tuple(graph)
        for callback in self._listeners["run_started"]:
            callback(run_dir)

    def stage_started(self, stage: str, details: Optional[Callable[[str], str]] = None) -> None:
        """A stage (ExampleGen, Transform, Tuner, ...) starts running (not when cached);
        ``details(run_dir)`` tells how far it got (its declaration's ``progress``)."""
        if details is not None:
            self.details[stage] = details
        for callback in self._listeners["stage_started"]:
            callback(stage)

    def job_submitted(self, info, counters, stage: Optional[str] = None) -> None:
        """A running stage submitted a Beam job.

        Args:
          info: its :class:`~beam_pipeline.runtime.runners.JobInfo` (id, console link).
          counters: reads the job's counters while it runs
            (:func:`beam_pipeline.runtime.counters.live_counters`), or None where the
            runner reports none before the job ends.
          stage: the stage that submitted it (as ``stage_started`` named it); None: the
            one running (several stages may run at once).
        """
        for callback in self._listeners["job_submitted"]:
            callback(info, counters, stage)

    def stage_finished(self, report) -> None:
        """A stage's :class:`~beam_pipeline.engine.summary.StageReport` joined the summary."""
        for callback in self._listeners["stage_finished"]:
            callback(report)
