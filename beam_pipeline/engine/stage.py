"""What a stage is: a declaration (name, inputs, outputs, settings) and its hooks.

A stage declares the artifact types it reads (:class:`Input`) and writes (``outputs``), its
settings (``Config``, a frozen dataclass of :func:`~beam_pipeline.core.settings.setting`
fields: flags, YAML keys and help come from them; :func:`switch` lets it be switched off),
what its results depend on besides (:meth:`Stage.parameters`), and names the module that
does its work (:attr:`Stage.executor`, by default ``executor.py`` beside the declaration),
whose ``run(stage, ctx, inputs, out) -> StageResult`` the base class calls. What every
stage needs is the runner's (:func:`beam_pipeline.engine.runner.run_stages`): the cache
key, the look-up of an earlier execution, a staging folder per output, publishing them
atomically or discarding them on failure, timing, the summary rows and the record of the
execution.

Example (a stage that copies the schema: ``copy_schema/stage.py``, ``copy_schema/executor.py``
and one line in ``graph.py``)::

    # copy_schema/stage.py
    class CopySchema(Stage):
        name = "CopySchema"
        inputs = (Input(Schema, key="schema"),)
        outputs = (Schema,)

    # copy_schema/executor.py
    def run(stage, ctx, inputs, out):
        fileio.copy(inputs[Schema].file, fileio.join(out.folder(Schema), SCHEMA_FILE))
        report = StageReport(stage.name, StageStatus.OK, artifact=out.uri(Schema))
        return StageResult([report], outputs=(out.artifact(Schema),))
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from beam_pipeline.core.settings import setting, settings_of
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.config import PipelineConfig, register_section
from beam_pipeline.engine.events import RunEvents

# For annotations only: every command imports the stage declarations (--help for their
# flags), and these modules serve a run, not a declaration.
if TYPE_CHECKING:
    from beam_pipeline.core.module_staging import StagedModule
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.engine.summary import StageReport
    from beam_pipeline.engine.user_code import UserCode

__all__ = [
    "Input",
    "InputData",
    "Preflight",
    "Stage",
    "StageContext",
    "StageResult",
    "StageFailed",
    "Started",
    "Outputs",
    "switch",
]


def switch(help: str) -> Any:  # noqa: A002 - argparse's word for it
    """The field ``enabled: bool = switch("Do not ...")`` of a stage's Config: the stage
    can be switched off. The kernel makes the rest from it: the flag ``--no_<config_key>``
    and the YAML key ``<config_key>: false``, the skip row (note ``--no_<config_key>``),
    the switch's place in the stage's cache key (:meth:`Stage.key_parameters`), and a
    switched-off stage's hooks left uncalled (``check_settings``, ``preflight``,
    ``start``, ``resolved_inputs``: they need not test the switch)."""
    # flag "": the section's key (core.settings.settings_of).
    return setting(True, flag="", help=help, kind="switch")


@dataclasses.dataclass(frozen=True)
class Input:
    """An artifact a stage reads, produced by an earlier stage of the graph.

    Attributes:
      type: the artifact type.
      key: the name under which the producing stage's cache key enters this stage's
        (None: implied by another input's, e.g. the schema behind the transform graph).
      optional: the stage also runs without it (its key is then None).
      skip_without: the stage does not run without it: its skip row's note then (e.g.
        "no model was trained"); "": it runs (``optional``) or waits for it.
    """

    type: type[TypedArtifact]
    key: Optional[str]
    optional: bool = False
    skip_without: str = ""


@dataclasses.dataclass(frozen=True)
class StageContext:
    """What every stage of one run may use besides its input artifacts.

    Attributes:
      config: the run's configuration.
      options: Beam's pipeline options (the runner each stage's job runs on).
      run_dir: the run directory.
      identity: the run's identity (see :func:`beam_pipeline.engine.manifest.run_identity`); its
        settings sections enter the model stages' keys.
      user_code: the module file (:class:`~beam_pipeline.engine.user_code.UserCode`),
        loaded only when a stage needs its code; None without a module.
      module_digest: the digest of the module, its name and its folder's Python files, or None.
      staged: the module file as staged in the run directory for the workers, or None.
      events: hears of each stage as it starts and ends (the CLI's progress display).
      stage: the stage this context was made for (the runner gives each stage its own,
        with its own ``options`` where ``--stage_beam_args`` names it); None outside a
        stage.
      prepared_values: stage name -> what its :meth:`Stage.prepare` returned for this run
        (read by the stage itself with :meth:`prepared`).
      started_values: stage name -> what its :meth:`Stage.start` started (read by the stage
        itself with :meth:`started`).
    """

    config: PipelineConfig
    options: Any  # Beam's PipelineOptions (not imported here: Beam is heavy to import)
    run_dir: RunDirectory
    identity: Mapping[str, Any]
    user_code: Optional[UserCode] = None
    module_digest: Optional[str] = None
    staged: Optional[StagedModule] = None
    events: RunEvents = dataclasses.field(default_factory=RunEvents)
    stage: Optional[str] = None
    prepared_values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    started_values: Mapping[str, Started] = dataclasses.field(default_factory=dict)

    @property
    def preprocessing_fn(self) -> Optional[Callable]:
        """The module's tf.Transform function (the module loaded now if it was not), or
        None without a module.

        Raises:
          PipelineError: the module does not load.
        """
        return self.user_code.preprocessing_fn() if self.user_code is not None else None

    def transform_code(self) -> Optional[str]:
        """What the Transform stage's key holds of the module (see
        :meth:`UserCode.transform_code <beam_pipeline.engine.user_code.UserCode.transform_code>`);
        None without a module."""
        if self.user_code is None:
            return None
        return self.user_code.transform_code()

    def prepared(self, stage: Stage) -> Any:
        """What ``stage``'s :meth:`Stage.prepare` returned for this run (None: nothing).

        Raises:
          ValueError: the context is another stage's: a stage reads only its own values
            (what several stages need comes from the config or ``stages.common``).
        """
        self._own(stage)
        return self.prepared_values.get(stage.name)

    def started(self, stage: Stage) -> Started:
        """What ``stage``'s :meth:`Stage.start` started (``with ctx.started(self) as value:``
        uses it and closes it; a stage that started nothing gets None there).

        Raises:
          ValueError: the context is another stage's.
        """
        self._own(stage)
        return self.started_values.get(stage.name) or Started(None)

    def _own(self, stage: Stage) -> None:
        if self.stage is not None and stage.name != self.stage:
            raise ValueError(
                f"{self.stage} asked for {stage.name}'s prepared or started values; a stage "
                "reads only its own (take shared values from the config or stages.common)."
            )


class Started:
    """A resource a stage's :meth:`Stage.start` started: its value, and its closing.

    The run closes it at its end (also on a failure or Ctrl-C); the stage may close it
    earlier, once it is done with it: ``with ctx.started(self) as pool: ...``. Closing
    twice closes once.
    """

    def __init__(self, value: Any, stack: Optional[contextlib.ExitStack] = None):
        self.value = value
        self._stack = stack if stack is not None else contextlib.ExitStack()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class InputData:
    """The run's input data as the stage that reads it gives it (:meth:`Stage.input_data`).

    Attributes:
      uri: where it is (its path or paths), as the metadata store records it.
      fingerprint: the digest of its content and of every setting that shapes what is read
        of it: the run's identity holds it (a resume with other data is refused).
    """

    uri: str
    fingerprint: str


@dataclasses.dataclass
class StageResult:
    """What :meth:`Stage.run` returns.

    Attributes:
      reports: the stage's summary rows (the first one is timed by the runner).
      outputs: the artifacts it produced (those in runner-made staging folders are
        published by the runner; a staging folder without an artifact here is discarded).
      outcome: facts a later look-up needs besides the artifacts (JSON values).
      halt: the run stops after this stage (e.g. a ``--dry_run``: later stages need
        outputs that were not made); a halting execution is not recorded.
    """

    reports: list[StageReport]
    outputs: Sequence[TypedArtifact] = ()
    outcome: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    halt: bool = False


class StageFailed(Exception):
    """A stage failed with summary rows to show and, maybe, outputs to publish anyway.

    The runner appends ``reports`` to the summary, publishes ``publish`` (e.g. the rejected
    rows that explain the failure), discards the other staging folders and raises ``error``.
    """

    def __init__(
        self,
        error: BaseException,
        reports: Sequence[StageReport],
        publish: Sequence[type[TypedArtifact]] = (),
    ):
        super().__init__(str(error))
        self.error = error
        self.reports = list(reports)
        self.publish = tuple(publish)


class Outputs:
    """A stage's output folders during its run: staging folders the runner publishes.

    Attributes:
      run_dir: the run directory.
      staging: output type -> its staging folder (made by the runner before ``run``).
    """

    def __init__(self, run_dir: RunDirectory, staging: Mapping[type[TypedArtifact], str]):
        self.run_dir = run_dir
        self.staging = dict(staging)

    def folder(self, artifact: type[TypedArtifact]) -> str:
        """Where the stage writes ``artifact`` (its staging folder)."""
        return self.staging[artifact]

    def uri(self, artifact: type[TypedArtifact]) -> str:
        """Where ``artifact`` is published once the stage succeeds."""
        return self.run_dir.path(artifact.FOLDER)

    def artifact(self, artifact: type[TypedArtifact], **properties: Any) -> TypedArtifact:
        """The output ``artifact`` at its published place, with ``properties``."""
        return artifact(self.uri(artifact), properties)


@dataclasses.dataclass(frozen=True)
class Preflight:
    """What a stage's :meth:`Stage.preflight` may check, before the run directory exists.

    Attributes:
      config: the run's configuration.
      options: Beam's PipelineOptions.
      user_module: the loaded module file (``trainer.UserModule``), or None.
      store: opens (once) and returns the metadata store, or None where the run has none.
    """

    config: PipelineConfig
    options: Any
    user_module: Any = None
    store: Callable[[], Any] = lambda: None


class Stage:
    """One unit of the graph: its declaration (class attributes) and its hooks.

    Attributes:
      name: the stage's name (a string: the unit a run caches, resumes and reports by).
      description: what it does and where it runs, one line of the docs' stage table
        (built from the graph, ``scripts/docs_flags.py``).
      inputs: the artifacts it reads, from earlier stages: it starts once the stages that
        produce them ended (optional ones included), beside any stage it does not read.
      outputs: the artifact types it may produce.
      Config: its settings, a frozen dataclass whose fields are
        :func:`~beam_pipeline.core.settings.setting` s (flags, YAML keys, help, defaults
        all come from them); None: no settings of its own.
      config_key: its section's key in :class:`PipelineConfig` (``config.<key>``) and the
        title of its flags in ``--help``.
      publishes_itself: its ``run`` stages and publishes its outputs itself (the runner
        makes no staging folders): the Trainer, whose ``model_run/`` is written in place so
        that a retry resumes from its checkpoints, and the Tuner.
      keeps_outputs_on_rerun: its published folders stay when it reruns itself (the
        Trainer's checkpoints); an earlier stage's rerun removes them.
      in_run_identity: its settings are part of the run's identity (a resume with other
        values is refused); the data stages' settings enter it through the data's digest.
      reads_input_data: it reads the run's ``--data`` (the store records the data as its
        input).
      reads: the settings of other stages' sections it reads, ``"<config_key>.<field>"``
        (or a whole ``"<config_key>"``): a stage reads its own section and the run's
        settings; what it needs of another stage's is declared here, where the reader
        sees it (``tests/test_layers.py`` holds that nothing else is read). They are not
        in its cache key by themselves: :meth:`parameters` keys what changes its outputs.
      worker_modules: modules its Beam workers import (a local worker pool's fork server
        imports them once, before it forks a worker per job).
      forks: on the DirectRunner its work runs in processes forked from the fork server
        whatever the Beam mode (the Tuner's trials and oracle, the Trainer's user code,
        the InfraValidator's sandbox): a run warms the server early when such a stage will
        run. A stage whose only forks are Beam workers leaves it False (they are forks in
        ``multi_processing`` mode only, which warms the server by itself).
      executor: the module that does its work, whose ``run(stage, ctx, inputs, out)``
        :meth:`run` calls: a module name beside the declaration's (default ``executor``:
        ``<the stage's package>.executor``) or a full module path. Its hooks import it when
        they run (``--help`` and ``runs`` load no Beam). The runner imports it on its own
        thread before the stage starts on one of its own: a Ctrl-C is raised in a running
        stage's thread, and one that lands while that thread imports can leave Python's
        import lock held for good.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    inputs: ClassVar[tuple[Input, ...]] = ()
    outputs: ClassVar[tuple[type[TypedArtifact], ...]] = ()
    Config: ClassVar[Optional[type]] = None
    config_key: ClassVar[Optional[str]] = None
    publishes_itself: ClassVar[bool] = False
    keeps_outputs_on_rerun: ClassVar[bool] = False
    worker_modules: ClassVar[tuple[str, ...]] = ()
    forks: ClassVar[bool] = False
    executor: ClassVar[str] = "executor"
    reads_input_data: ClassVar[bool] = False
    reads: ClassVar[tuple[str, ...]] = ()
    in_run_identity: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.Config is not None and cls.config_key:
            register_section(cls.config_key, cls.Config, cls.in_run_identity)

    def configure(self, config: PipelineConfig, options: Any) -> PipelineConfig:
        """The run's config with what this stage's settings leave to the runner decided
        (e.g. the Tuner's schedule), before the run's identity is computed."""
        return config

    def check_settings(self, config: PipelineConfig, options: Any) -> None:
        """First checks, of its settings alone (a server it will talk to answers), before
        the inputs and the module file are read; raises PipelineError with the fix."""
        return None

    def progress(self, run_dir: str) -> str:
        """How far it got while it runs, from its files in ``run_dir`` (the progress line's
        detail, polled; a stage with a Beam job gets the job's counters instead); ""."""
        return ""

    def preflight(self, run: Preflight) -> None:
        """Checks made before anything is written or any Beam job runs (its inputs,
        servers it will talk to, the host's GPUs); raises PipelineError with the fix."""
        return None

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        """The settings (JSON values) its outputs depend on besides its inputs: its key's."""
        return {}

    # The field of a stage's Config that switches it off, made by :func:`switch`
    # (``--no_<config_key>``, the YAML key ``<config_key>: false``).
    SWITCH: ClassVar[str] = "enabled"

    def switch_flag(self) -> Optional[str]:
        """The flag of its switch (``--no_<flag>`` turns it off); None: it declares none."""
        if self.Config is None or not self.config_key:
            return None
        for name, declared in settings_of(self.Config, self.config_key):
            if name == self.SWITCH and declared.kind == "switch":
                return declared.flag
        return None

    def switched_on(self, config: PipelineConfig) -> Optional[bool]:
        """Whether its switch is on in ``config``; None: it declares none."""
        if self.switch_flag() is None:
            return None
        return bool(getattr(getattr(config, self.config_key), self.SWITCH))

    def skip_reason(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact]
    ) -> str:
        """Why it does not run in this run, decided from the settings and which inputs
        exist alone ("": it runs). The runner then records its skip row without starting
        it (no "running" line). Default: its switch is off (``--no_<flag>``), or an input
        it cannot run without is absent (its :attr:`Input.skip_without`)."""
        if self.switched_on(ctx.config) is False:
            return f"--no_{self.switch_flag()}"
        missing = (i.skip_without for i in self.inputs if i.type not in inputs)
        return next((note for note in missing if note), "")

    def key_parameters(self, ctx: StageContext) -> dict[str, Any]:
        """What its cache key holds besides its inputs' keys: its :meth:`parameters` and,
        for every stage that has one, its switch. Kept here, not in each stage's
        ``parameters``: a stage switched off records a skip, which a later run with the
        switch on must not reuse (a stage that forgot to key it once did)."""
        params = dict(self.parameters(ctx))
        on = self.switched_on(ctx.config)
        if on is not None:
            params["switched_on"] = on
        return params

    def resolved_inputs(self, ctx: StageContext) -> tuple[TypedArtifact, ...]:
        """Artifacts of earlier runs it reads, found in the metadata store (TFX's Resolver,
        e.g. the Trainer's ``--warm_start`` model): recorded as its inputs, in its key, and
        handed to :meth:`run` with the others."""
        return ()

    def executor_module(self) -> str:
        """The full name of its :attr:`executor` module."""
        if "." in self.executor:
            return self.executor
        return f"{type(self).__module__.rpartition('.')[0]}.{self.executor}"

    def run(
        self,
        ctx: StageContext,
        inputs: Mapping[type[TypedArtifact], TypedArtifact],
        out: Outputs,
    ) -> StageResult:
        """Does the stage's work: its :attr:`executor`'s ``run(stage, ctx, inputs, out)``
        (a stage may override this method instead).

        Args:
          ctx: the run's context.
          inputs: input type -> the artifact an earlier stage produced (an optional input
            that none produced is absent).
          out: the output staging folders.

        Raises:
          StageFailed: a failure with summary rows; any other exception: a failure without.
        """
        return importlib.import_module(self.executor_module()).run(self, ctx, inputs, out)

    def work(
        self,
        ctx: StageContext,
        inputs: Mapping[type[TypedArtifact], TypedArtifact],
        out: Outputs,
    ) -> StageResult:
        """What the runner calls: the skip row when :meth:`skip_reason` gives one (the same
        for every stage a setting switched off), else :meth:`run`."""
        skip = self.skip_reason(ctx, inputs)
        if skip:
            from beam_pipeline.engine.summary import StageReport, StageStatus

            return StageResult([StageReport(self.name, StageStatus.SKIPPED, note=skip)])
        return self.run(ctx, inputs, out)

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        """Called as soon as the stage ran or was found cached; raises to stop the run.

        A stage that overrides it is a gate: every later stage of the graph waits for it
        (:func:`beam_pipeline.engine.runner.run_order`), so that the run stops before they
        start; stages that neither read its outputs nor follow a gate run beside it.

        Args:
          ctx: the run's context.
          outcome: the execution's outcome (:attr:`StageResult.outcome`).
        """
        return None  # most stages never stop the run once they finished

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Its sections of the run's ``report.html``, read from what the run directory
        holds (``view``: its artifacts, wherever a cached stage's are, and the summary
        rows); the report shows them in graph order. Without any, the stage has its
        summary row only. Import what reads and draws inside this method: the report
        (``runs report``) loads neither Beam nor TensorFlow."""
        return []

    # Run-level hooks: what a stage prepares before anything is written, and what it
    # starts for the whole run (kept per stage: ``ctx.prepared(self)``, ``ctx.started(self)``).

    def prepare(self, config: PipelineConfig, options: Any) -> Any:
        """Checks its own inputs and reads what its run needs, for the whole run, before
        the module file is loaded and before anything is written (e.g. ExampleGen resolves
        and fingerprints ``--data``, the Schema stage reads ``--schema``); called for every
        stage in graph order. Its value is the stage's own (``ctx.prepared(self)``);
        raises PipelineError with the fix."""
        return None

    def input_data(self, prepared: Any) -> Optional[InputData]:
        """For the stage that :attr:`reads_input_data`: the run's input data (its place and
        fingerprint, for the run's identity and the store), from what :meth:`prepare`
        returned; None: it gives none."""
        return None

    def start(self, ctx: StageContext) -> Optional[contextlib.AbstractContextManager]:
        """A resource to start once the run directory exists, before the first stage runs
        (e.g. the Tuner's worker processes, which import TensorFlow while the data stages
        run): entered now, closed at the run's end (a failure and Ctrl-C included) or
        earlier by the stage (``with ctx.started(self) as value:``). Not called for a stage
        an earlier attempt of the run finished; None: nothing to start."""
        return None

    # -- What the run history shows of it (runs list, runs show, runs diff) ---------------

    # The ``runs list`` columns its :meth:`history` gives, each with the value a run in
    # which it recorded none shows (it did not run, or failed): every run of a graph lists
    # the same columns, in the graph's order (recorded with the run as it starts).
    history_columns: ClassVar[Mapping[str, Any]] = {}

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        """What this execution shows in the run history, from its summary rows: its
        ``runs list`` columns, the facts and lines of ``runs show``, its verdict as a
        model check, its sections of ``runs diff`` (:class:`HistoryEntry`).

        The runner calls it as it records an execution that ended with a result (a
        reused one shows what its original recorded) and keeps the answer with it in
        the metadata store, which the ``runs`` commands read without importing any stage.

        Args:
          reports: the summary rows the stage's ``run`` returned (ok or skipped).
        """
        from beam_pipeline.engine.history_entry import HistoryEntry

        return HistoryEntry()  # most stages show only their executions
