"""The runner loop: every stage of the graph looked up, run, published, recorded; each
as soon as the stages it reads have ended, so that independent stages run at once.

Which stage waits for which follows from the declared inputs and outputs
(:func:`dependencies`): a stage waits for every earlier stage that produces a type it
reads (optional inputs included), and for every earlier stage whose :meth:`Stage.check`
may stop the run (:func:`run_order`). The Evaluator and the InfraValidator both wait only
for the Trainer, so they run at the same time; the Pusher waits for both.

For each stage whose inputs are ready the runner:

1. resolves its inputs: the artifacts the stages it reads produced (or an earlier
   execution of theirs had produced), by type;
2. computes its cache key from the producing stages' keys and its parameters
   (:func:`beam_pipeline.engine.execution.cache_key`);
3. looks up an earlier execution with that key (:class:`ExecutionRecords.lookup`: this
   run's earlier attempt, or any earlier run in the metadata store) whose outputs are all
   still published and hold the files recorded when they were published (sizes, and
   digests of the small files: :mod:`beam_pipeline.engine.contents`): a hit reuses them
   (``reuse`` records it) and reports the stage ``cached``; a damaged one is a miss whose
   rerun's row says which run's artifact changed;
4. on a miss: forgets this stage and every stage that depends on it (by dependency, not
   by position: a stage beside it keeps its record) and removes what they had published
   in the run directory (a stage marked ``keeps_outputs_on_rerun`` keeps its own when it
   is the one rerunning: the Trainer's checkpoints), records that it ``begin``s, makes a
   staging folder per output, runs the stage with its own Beam options where it has
   them (``--stage_beam_args``), publishes the outputs it returned (marker last),
   recording their files, and discards the other folders, or discards them all when it
   fails (``stop`` records the failure);
5. times it, adds its summary rows (in graph order, whatever order stages end in), and
   records the execution;
6. calls the stage's :meth:`Stage.check` as soon as it ended (which may stop the run,
   e.g. on blocking anomalies) and stops after a stage that halts the run.

A failure starts nothing more: the stages running beside it end and are recorded, then
the first failure in graph order is raised. A Ctrl-C stops the stages running on threads
of their own too (:func:`_raise_in`), records them, and is raised.

Example::

    run_stages(STAGE_GRAPH, ctx, RunRecords(manifest, store, run, data), summary)
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import importlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import first_line, user_error
from beam_pipeline.core.launcher_exit import exit_refused
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.execution import Execution, ExecutionRecords, cache_key, output_key
from beam_pipeline.engine.failures import is_interrupt, unexpected_error
from beam_pipeline.engine.fingerprint import pipeline_code, stage_code
from beam_pipeline.engine.reuse import cached_rows, noted, reusable, with_contents
from beam_pipeline.engine.stage import (
    Outputs,
    Stage,
    StageContext,
    StageFailed,
    StageResult,
)
from beam_pipeline.engine.summary import RunSummary, StageReport, StageStatus
from beam_pipeline.runtime.beam_flags import resolved

__all__ = ["dependencies", "resolve", "run_order", "run_stages"]

_LOG = logging.getLogger(__name__)


# The longest error note of a failed stage's row.
_MAX_NOTE = 500

# The artifacts produced so far: type -> (the artifact, the key of the producing stage).
_Available = dict[type[TypedArtifact], tuple[TypedArtifact, str]]


def run_stages(
    graph: Sequence[Stage],
    ctx: StageContext,
    records: ExecutionRecords,
    summary: RunSummary,
    stage_options: Optional[Mapping[str, Any]] = None,
) -> None:
    """Runs (or reuses) each stage of ``graph``, each as soon as its inputs are ready; see
    the module docstring.

    Args:
      graph: the stages in dependency order (``beam_pipeline.stages.STAGE_GRAPH``).
      ctx: the run's context.
      records: where earlier executions are looked up and new ones recorded.
      summary: the run's summary; each stage's rows are added in graph order.
      stage_options: a stage's own Beam options (``--stage_beam_args``), where it has
        them; the others get ``ctx.options``.

    Raises:
      The first failure in graph order (after its rows joined the summary and every stage
      running beside it ended), and what a stage's :meth:`Stage.check` raises to stop the
      run.
    """
    _Scheduler(graph, ctx, records, summary, stage_options or {}).run()


def dependencies(graph: Sequence[Stage]) -> list[frozenset[int]]:
    """Per stage of ``graph`` (by index), the earlier stages it reads an output of
    (optional inputs included): what must end before it starts, and what a rerun of one
    of them invalidates."""
    needs = []
    for index, stage in enumerate(graph):
        wanted = {spec.type for spec in stage.inputs}
        needs.append(frozenset(j for j in range(index) if wanted.intersection(graph[j].outputs)))
    return needs


def _may_stop(stage: Stage) -> bool:
    """Whether the stage's :meth:`Stage.check` may stop the run (it overrides it)."""
    return type(stage).check is not Stage.check


def run_order(graph: Sequence[Stage]) -> list[frozenset[int]]:
    """Per stage, the earlier stages that must end before it starts: those it reads (see
    :func:`dependencies`) and every earlier stage whose check may stop the run (a gate:
    Validation's blocking anomalies stop the run before Transform starts, as they did
    when every stage ran in turn)."""
    gates = [i for i, stage in enumerate(graph) if _may_stop(stage)]
    return [
        needs | frozenset(g for g in gates if g < index)
        for index, needs in enumerate(dependencies(graph))
    ]


def _dependents(graph: Sequence[Stage], index: int) -> list[int]:
    """``index`` and every stage that reads, directly or not, an output of it (graph
    order): what a rerun of it invalidates."""
    needs = dependencies(graph)
    found = [index]
    for later in range(index + 1, len(graph)):
        if needs[later].intersection(found):
            found.append(later)
    return found


@dataclasses.dataclass
class _Running:
    """A stage the runner started (a miss): what its record needs, and how it ended."""

    index: int
    stage: Stage
    ctx: StageContext
    inputs: dict[type[TypedArtifact], TypedArtifact]
    key: str
    built_from: dict[str, Any]
    used: tuple[TypedArtifact, ...]
    damaged: str
    started: datetime.datetime
    thread: Optional[threading.Thread] = None
    # Set by the stage's thread when it ends: (result, error, rows of a StageFailed, end).
    ended: Optional[tuple[Any, ...]] = None
    # Held while ``ended`` is set and while a Ctrl-C is raised in the stage's thread, so
    # that the KeyboardInterrupt lands only in a stage that has not ended (see _work).
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # A Ctrl-C was raised in the stage's thread before it ended.
    interrupted: bool = False


class _Scheduler:
    """One run of the graph (see :func:`run_stages`).

    Every record, summary row, event and check is handled here, on the caller's thread,
    in one place: the store's connection, the manifest and the summary are never written
    from two threads. A stage's own work (:func:`_run`) runs on the caller's thread when
    it is the only one that can run (every stage of a linear stretch of the graph: a
    Ctrl-C reaches its code as it always did), and on a thread of its own when several
    can (the Evaluator and the InfraValidator, which both wait only for the Trainer).
    """

    def __init__(self, graph, ctx, records, summary, stage_options):
        self.graph, self.ctx, self.records, self.summary = graph, ctx, records, summary
        self.stage_options = stage_options
        self.order = run_order(graph)
        self.available: _Available = {}
        self.done: set[int] = set()
        self.running: dict[int, _Running] = {}
        self.errors: dict[int, BaseException] = {}
        self.halted = ""  # why a stage stopped the run, once one did
        self.ended: queue.Queue[int] = queue.Queue()
        # Rows per stage index: the summary lists them in graph order, whatever the order
        # in which the stages ended.
        self.base = len(summary.stages)
        self.rows: dict[int, list[StageReport]] = {}

    def run(self) -> None:
        try:
            while True:
                if not self.errors and not self.halted:
                    self._start_ready()
                if not self.running:
                    break
                self._end(self.running.pop(self.ended.get()))
        except KeyboardInterrupt:
            self._interrupt()
            raise
        except BaseException:
            self._drain()  # a runner error on this thread: no stage is left running
            raise
        if self.errors:
            first = min(self.errors)
            error = self.errors[first]
            raise unexpected_error(self.graph[first], self.ctx, error) or error
        for index, stage in enumerate(self.graph):  # each stage the halt kept from running
            if self.halted and index not in self.rows:
                row = StageReport(stage.name, StageStatus.SKIPPED, note=self.halted)
                self._add_rows(index, [row])
                _announce(self.ctx, [row])

    # Starting.

    def _ready(self) -> list[int]:
        return [
            i
            for i in range(len(self.graph))
            if i not in self.done and i not in self.running and self.order[i] <= self.done
        ]

    def _start_ready(self) -> None:
        """Reuses what can be reused and starts the other stages whose inputs are ready."""
        starting: list[_Running] = []
        while not self.errors and not self.halted:
            ready = [i for i in self._ready() if i not in {s.index for s in starting}]
            if not ready:
                break
            progressed = False
            for index in ready:
                try:
                    started = self._prepare(index)
                except BaseException as error:  # noqa: BLE001 - raised once the others end
                    if isinstance(error, KeyboardInterrupt):
                        raise
                    self._failed(index, error)
                    break
                if started is None:
                    progressed = True  # cached: what it made may make others ready
                    break
                starting.append(started)
            if not progressed:
                break
        if self.errors:
            return  # a failure (or a check that stops the run) starts nothing more
        # Recorded as begun all together, before any of them works: a stage's start is
        # before its siblings' ends in the store's times too.
        for run in starting:
            self._begin(run)
        if len(starting) == 1 and not self.running:
            run = starting[0]
            self.running[run.index] = run
            _work(run, None)  # the only stage that can run: on this thread
            self.ended.put(run.index)
            return
        for run in starting:
            # Its work's code loaded here, not on its thread: see Stage.executor.
            if type(run.stage).run is Stage.run:  # (a stage that overrides run names none)
                importlib.import_module(run.stage.executor_module())
        for run in starting:
            self.running[run.index] = run
            run.thread = threading.Thread(
                target=_work, args=(run, self.ended), name=f"bp-{run.stage.name}", daemon=True
            )
            run.thread.start()

    def _prepare(self, index: int) -> Optional[_Running]:
        """Reuses stage ``index`` (None) or returns it to run."""
        stage = self.graph[index]
        ctx = dataclasses.replace(
            self.ctx, options=self.stage_options.get(stage.name, self.ctx.options), stage=stage.name
        )
        inputs, built_from = resolve(stage, ctx, self.available)
        key = cache_key(stage.name, built_from)
        execution, damaged = reusable(self.records.lookup(stage.name, key))
        if execution is not None:
            self.records.reuse(execution)
            cached = cached_rows(execution, ctx.run_dir.run_id)
            self._add_rows(index, cached)
            _announce(ctx, cached)
            self._made(index, execution, key, ctx)
            return None
        used = tuple(
            a for a, _ in (self.available[i.type] for i in stage.inputs if i.type in self.available)
        ) + tuple(a for a in inputs.values() if a.type_name in built_from.get("resolved", {}))
        # It runs: its executor gets Beam's own options (deferred until now: beam_flags).
        ctx = dataclasses.replace(ctx, options=resolved(ctx.options))
        return _Running(
            index, stage, ctx, inputs, key, built_from, used, damaged, datetime.datetime.now()
        )

    def _begin(self, run: _Running) -> None:
        _forget(self.graph, run.index, run.ctx, self.records)
        run.started = datetime.datetime.now()
        self.records.begin(run.stage.name, run.key, run.built_from, run.used)
        if run.stage.name in self.stage_options:  # what its jobs get, in the run's log
            given = run.ctx.options.get_all_options(drop_default=True)
            _LOG.info(
                "%s runs with its own Beam options (the run's and its --stage_beam_args): %s",
                run.stage.name,
                ", ".join(f"{k}={v}" for k, v in sorted(given.items())),
            )
        if not run.stage.skip_reason(run.ctx, run.inputs):  # a skip is shown once, as it ends
            run.ctx.events.stage_started(run.stage.name, run.stage.progress)

    # Ending.

    def _end(self, run: _Running) -> None:
        """Adds the ended stage's rows, records it and runs its check."""
        result, error, failed_rows, finished = run.ended
        stage, ctx = run.stage, run.ctx
        if error is not None:
            rows = failed_rows or [_failed_row(stage, ctx, error, run.started)]
            self._add_rows(run.index, rows)
            _announce(ctx, rows)
            self.records.stop(stage.name, error)
            self._failed(run.index, error)
            return
        shown = noted(result.reports, run.damaged)
        self._add_rows(run.index, shown)
        _announce(ctx, shown)
        if result.halt:
            self.records.stop(stage.name, None, result.reports)
            note = result.reports[0].note if result.reports else ""
            self.halted = f"not run: {stage.name} stopped the run" + (f" ({note})" * bool(note))
            return
        execution = Execution(
            stage=stage.name,
            key=run.key,
            built_from=run.built_from,
            inputs=run.used,
            outputs=tuple(result.outputs),
            reports=list(result.reports),
            outcome=dict(result.outcome),
            run_id=ctx.run_dir.run_id,
            started=run.started.isoformat(timespec="seconds"),
            finished=finished.isoformat(timespec="seconds"),
            history=stage.history(result.reports).to_json(),
        )
        self.records.record(execution)
        self._made(run.index, execution, run.key, ctx)

    def _made(self, index: int, execution: Execution, key: str, ctx: StageContext) -> None:
        """Stage ``index`` ended (or was reused): its outputs are available, its check runs."""
        for artifact in execution.outputs:
            self.available[type(artifact)] = (artifact, output_key(key, artifact))
        self.done.add(index)
        try:
            self.graph[index].check(ctx, execution.outcome)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - raised once the others end
            self._failed(index, error)

    def _failed(self, index: int, error: BaseException) -> None:
        """Keeps stage ``index``'s error, raised once the others end; an unexpected one's
        traceback goes to the run's log (the terminal gets its sentence)."""
        self.errors[index] = error
        if unexpected_error(self.graph[index], self.ctx, error) is not None:
            _LOG.info("%s stopped on:", self.graph[index].name, exc_info=error)

    def _add_rows(self, index: int, rows: Sequence[StageReport]) -> None:
        self.rows.setdefault(index, []).extend(rows)
        self.summary.stages[self.base :] = [row for i in sorted(self.rows) for row in self.rows[i]]

    def _drain(self) -> None:
        """Waits for every running stage and records how it ended."""
        while self.running:
            self._end(self.running.pop(self.ended.get()))

    def _interrupt(self) -> None:
        """Ctrl-C reached this thread while stages ran on theirs: each gets a
        KeyboardInterrupt too, as a stage on this thread would, and is waited for and
        recorded (a second Ctrl-C stops the waiting)."""
        unraised = [run for run in self.running.values() if run.thread is not None]
        try:
            while unraised:
                unraised = [run for run in unraised if not _interrupted(run)]
                if unraised:  # a thread inside the import machinery: let it leave it
                    unraised[0].thread.join(0.01)
            for run in list(self.running.values()):
                if run.thread is not None:
                    run.thread.join()
        except KeyboardInterrupt:
            pass
        for index in sorted(self.running):
            run = self.running.pop(index)
            if run.ended is None or run.interrupted:
                # Still running (a second Ctrl-C), or stopped by the Ctrl-C: whatever its
                # code made of the KeyboardInterrupt is the interruption, never a result or
                # an error of its own. TensorFlow turns a KeyboardInterrupt raised inside
                # one of its calls into an error of its own ("... REPLACED BY
                # KeyboardInterrupt"), which a stage may translate (a model that "does not
                # load"); a stage that caught it may even end normally.
                if run.ended is not None and run.ended[1] is not None:
                    _LOG.info("%s ended after the Ctrl-C with: %r", run.stage.name, run.ended[1])
                run.ended = (None, KeyboardInterrupt(), [], datetime.datetime.now())
            self._end(run)


def _work(run: _Running, ended: Optional[queue.Queue]) -> None:
    """Runs the stage (on whichever thread calls it) and keeps how it ended.

    A Ctrl-C raised in this thread (_Scheduler._interrupt) lands inside the outer ``try``:
    it is raised only while ``run.ended`` is unset, under ``run.lock``, and this thread
    sets ``run.ended`` under that lock, inside the ``try``. So it never escapes the thread
    (which would print a traceback) nor stops the queue from hearing of the end.
    """
    try:
        try:
            result, error, rows = _run(run.stage, run.ctx, run.inputs), None, []
        except _Failed as failed:
            result, error, rows = None, failed.error, failed.rows
        except BaseException as e:  # noqa: BLE001 - handed to the runner's thread
            result, error, rows = None, e, []
        with run.lock:
            run.ended = (result, error, rows, datetime.datetime.now())
    except KeyboardInterrupt as e:  # raised by _interrupt between the stage's end and here
        run.ended = (None, e, [], datetime.datetime.now())
    if ended is not None:
        ended.put(run.index)


def _interrupted(run: _Running) -> bool:
    """Raises a KeyboardInterrupt in ``run``'s thread unless it has ended (see _work):
    whether that is done; False while the thread is inside the import machinery."""
    with run.lock:
        if run.ended is not None:
            return True
        if not _raise_in(run.thread, KeyboardInterrupt):
            return False
        run.interrupted = True
        return True


# importlib's own code takes the interpreter's import lock and its modules' locks without
# guarding the instruction after each acquisition (``_imp.acquire_lock()`` before its
# ``try``): an exception raised there leaves the lock held by a thread that then ends, and
# every later import in the process waits for it forever.
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def _raise_in(thread: threading.Thread, error: type[BaseException]) -> bool:
    """Raises ``error`` in ``thread`` at its next Python instruction, unless the thread is
    inside the import machinery (False: try again once it has left it).

    Python delivers a Ctrl-C to the main thread only; a stage on a thread of its own
    would run on to its end. CPython's ``PyThreadState_SetAsyncExc`` is the one way to
    stop it where a stage on the main thread would stop (its code unwinds: its Beam job
    and its processes are stopped by their own ``finally`` blocks); a thread blocked in a
    system call gets it when the call returns. That may be in importlib's code, which is
    not safe against it (_IMPORT_MACHINERY): the thread's innermost frame is looked at
    before and after (the thread may have run in between: then the error is withdrawn
    before it can run again in most cases; only a switch of threads between these three
    calls and one inside the machinery is left to chance).
    """
    if _importing(thread):
        return False
    raise_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    raise_async(ctypes.c_ulong(thread.ident), ctypes.py_object(error))
    if _importing(thread):
        raise_async(ctypes.c_ulong(thread.ident), None)  # withdrawn
        return False
    return True


def _importing(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_filename in _IMPORT_MACHINERY


def _failed_row(
    stage: Stage, ctx: StageContext, error: BaseException, started: datetime.datetime
) -> StageReport:
    """The summary row of a stage that failed without one: its error in one line (the
    sentence the CLI prints for it, when it has one)."""
    if is_interrupt(error):
        note = "interrupted"
    else:
        root = ctx.config.pipeline_root if ctx.config is not None else None
        sentence = (user_error(error, root) if root is not None else None) or unexpected_error(
            stage, ctx, error
        )
        note = str(sentence) if sentence is not None else f"{type(error).__name__}: "
        note = note if sentence is not None else note + first_line(error)
        if len(note) > _MAX_NOTE:
            note = note[: _MAX_NOTE - 3] + "..."
    seconds = round((datetime.datetime.now() - started).total_seconds(), 3)
    # ExampleGen+Statistics fails as its first stage: ExampleGen.
    name = stage.name.split("+", 1)[0]
    return StageReport(name, StageStatus.FAILED, seconds=seconds, note=note)


def _announce(ctx: StageContext, rows: Sequence[StageReport]) -> None:
    """Tells the run's listeners (the progress display) of each summary row a stage added."""
    for row in rows:
        ctx.events.stage_finished(row)


def resolve(
    stage: Stage, ctx: StageContext, available: _Available
) -> tuple[dict[type[TypedArtifact], TypedArtifact], dict[str, Any]]:
    """The stage's input artifacts and what its key is built from."""
    inputs, built_from = {}, {}
    for spec in stage.inputs:
        found = available.get(spec.type)
        if found is None and not spec.optional:
            raise RuntimeError(f"{stage.name} needs a {spec.type.__name__}; none was made")
        if found is not None:
            inputs[spec.type] = found[0]
        if spec.key is not None:
            built_from[spec.key] = found[1] if found is not None else None
    built_from.update(stage.key_parameters(ctx))
    # Artifacts of earlier runs found in the store (Stage.resolved_inputs; none if off).
    resolved = stage.resolved_inputs(ctx) if stage.switched_on(ctx.config) is not False else ()
    for artifact in resolved:
        inputs[type(artifact)] = artifact
    if resolved:
        built_from["resolved"] = {a.type_name: a.uri for a in resolved}
    # The code that runs it: another version's (or an edited checkout's) result is not
    # this code's result (beam_pipeline.engine.fingerprint.pipeline_code).
    built_from["pipeline_code"] = pipeline_code()
    own = stage_code(stage)  # a stage of the user's own: its file's content
    if own is not None:
        built_from["stage_code"] = own
    return inputs, built_from


def _forget(
    graph: Sequence[Stage], index: int, ctx: StageContext, records: ExecutionRecords
) -> None:
    """Forgets stage ``index`` and the stages that depend on it (they rerun after it; a
    stage that does not read it keeps its record, and may be running) and removes what
    they had published in this run."""
    rerun = [graph[i] for i in _dependents(graph, index)]
    records.forget([s.name for s in rerun])
    for i, stage in enumerate(rerun):
        if i == 0 and stage.keeps_outputs_on_rerun:
            continue
        for artifact in stage.outputs:
            path = ctx.run_dir.path(artifact.FOLDER)
            if fileio.exists(path):
                fileio.rmtree(path)


class _Failed(Exception):
    """A stage's :class:`StageFailed`, its staging handled: its error and rows."""

    def __init__(self, error: BaseException, rows: list[StageReport]):
        super().__init__(str(error))
        self.error, self.rows = error, rows


def _run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
) -> StageResult:
    """Runs the stage in its staging folders; publishes its outputs or discards them.

    Raises:
      _Failed: the stage raised :class:`StageFailed` (its rows timed).
    """
    run_dir = ctx.run_dir
    staging = (
        {} if stage.publishes_itself else {a: run_dir.new_staging(a.FOLDER) for a in stage.outputs}
    )
    started = time.time()
    try:
        # A stage of the user's own (--graph) runs here, in the launcher.
        with exit_refused(f"stage {stage.name}'s run", "return its StageResult or raise"):
            result = stage.work(ctx, inputs, Outputs(run_dir, staging))
    except StageFailed as failed:
        for artifact, folder in staging.items():
            if artifact in failed.publish:
                run_dir.publish(artifact.FOLDER, folder)
            else:
                run_dir.discard(folder)
        _time(failed.reports, started)
        raise _Failed(failed.error, failed.reports) from None
    except BaseException:
        for folder in staging.values():
            run_dir.discard(folder)
        raise
    made = {type(a) for a in result.outputs}
    for artifact, folder in staging.items():
        if artifact in made and not result.halt:
            run_dir.publish(artifact.FOLDER, folder)
        else:
            run_dir.discard(folder)
    if not result.halt:
        result = dataclasses.replace(result, outputs=[with_contents(a) for a in result.outputs])
    _time(result.reports, started)
    return result


def _time(reports: Sequence[StageReport], started: float) -> None:
    """The stage's own row (its first) gets the stage's wall time, publishing included."""
    if reports and reports[0].status in (StageStatus.OK, StageStatus.FAILED):
        reports[0].seconds = round(time.time() - started, 3)
