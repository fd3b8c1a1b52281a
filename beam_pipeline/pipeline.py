"""A run: every check before the first Beam job, then the stage graph, then the summary.

A run has phases because tf.Transform must know the schema when it builds its graph:

1. *Data phase*, one Beam job: ExampleGen (read, type, split, write examples, reject bad
   rows) fused with Statistics (a streaming combine over the same RecordBatches, so the
   data is read once). Then, on the launcher (small protos): Schema inference and
   Validation of every split against the schema.
2. *Transform phase*, one Beam job: tf.Transform analyze (train) + transform (all splits).
3. *Model phase*: tuning and training, each a Beam job whose heavy work runs on workers.

Each stage is a typed unit (:mod:`beam_pipeline.engine`), declared once in
:data:`beam_pipeline.stages.graph.STAGE_GRAPH` and run by one runner loop
(:func:`beam_pipeline.engine.runner.run_stages`). Everything a run needs is checked here
before the first Beam job starts (flags, input files, CSV header, module file, schema,
the metadata store's URL), and every artifact is published atomically. A rerun with the
same run id resumes: the stages an earlier attempt finished are kept, the rest run (see
:mod:`beam_pipeline.engine.manifest`); one with other inputs or flags is refused. Every
execution is recorded in the metadata store, where a stage is also looked up by its cache
key across runs (:mod:`beam_pipeline.engine.run_records`).

Example::

    summary = run(parse_config(["--data=data.csv", "--module_file=m.py"]))
    print(summary.format())
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
from collections.abc import Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, no_room
from beam_pipeline.core.forked import WORKER_MODULES_ENV, warm_fork_server
from beam_pipeline.core.gpus import gpu_environment, hide_gpus
from beam_pipeline.core.module_staging import bundle_module_file
from beam_pipeline.core.user_module import get_preprocessing_fn
from beam_pipeline.engine import Preflight, Stage, StageContext, Started, run_stages
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.events import RunEvents
from beam_pipeline.engine.fingerprint import pipeline_code
from beam_pipeline.engine.history_entry import HISTORY_COLUMNS, declared_columns
from beam_pipeline.engine.look_ahead import reused_stages
from beam_pipeline.engine.manifest import RunManifest, run_identity
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.engine.run_records import DATA_TYPE, RunRecords, stored_lookup
from beam_pipeline.engine.summary import RunSummary, write_summary
from beam_pipeline.engine.user_code import UserCode
from beam_pipeline.metadata import (
    METADATA_FILE,
    ArtifactSpec,
    MetadataStore,
    RunStatus,
    open_for_pipeline,
)
from beam_pipeline.metadata.launcher import this_launcher
from beam_pipeline.runtime.beam_flags import (
    DeferredOptions,
    is_direct,
    is_multi_processing,
    light_values,
    resolved,
)
from beam_pipeline.runtime.preflight import start_worker_pool_check
from beam_pipeline.runtime.runners import RunnerFamily, check_remote_paths, runner_family
from beam_pipeline.runtime.scratch import run_temp_dir
from beam_pipeline.stages.graph import STAGE_GRAPH, load_graph
from trainer import load_trainer_module

__all__ = ["run"]

_LOG = logging.getLogger(__name__)


def _stages_run_here(options) -> bool:
    """Whether a stage may run in this process: every runner but the DirectRunner's
    multi_processing mode (worker processes) and Dataflow. A portable runner's LOOPBACK
    workers run in this process, hence the short list."""
    return not is_multi_processing(options) and runner_family(options) is not (
        RunnerFamily.DATAFLOW
    )


def _open_store(config: PipelineConfig) -> Optional[MetadataStore]:
    """The metadata store (``--metadata_url``, or SQLite in the pipeline root), its URL
    checked and its schema created or upgraded; None for a remote pipeline root without a
    URL (SQLite cannot live there): the run is then not recorded and nothing is reused
    from other runs.

    Raises:
      PipelineError: the store cannot be opened; one sentence naming the URL and the fix.
    """
    if not config.metadata_url and fileio.is_remote(config.pipeline_root):
        _LOG.warning(
            "--pipeline_root %s is remote and no --metadata_url is given: this run is not "
            "recorded in a metadata store and reuses nothing from earlier runs.",
            config.pipeline_root,
        )
        return None
    if not config.metadata_url:
        # The default store lives in the pipeline root: one that cannot be written is named
        # as such (cli.py: "Cannot write <root>/runs ..."), not as a store to replace.
        fileio.makedirs(fileio.join(config.pipeline_root, "runs"))
    return open_for_pipeline(
        config.pipeline_root, config.metadata_url or None, pipeline_name=config.pipeline_name
    )


def run(
    config: PipelineConfig,
    events: Optional[RunEvents] = None,
    graph: Optional[Sequence[Stage]] = None,
) -> RunSummary:
    """Runs the whole pipeline described by ``config``; ``events`` hears of its directory
    and stages as they go (the CLI's log and progress display).

    Raises:
      PipelineError: bad flags, inputs, module file, or data; the message says the fix.
    """
    if graph is None:
        graph = load_graph(config.graph) if config.graph else STAGE_GRAPH
    gpu_environment(os.environ)  # the Python API's callers too: see beam_pipeline.core.gpus
    # Beam's options, built only once something asks more of them than the runner and its
    # mode: a rerun that reuses every stage never imports Beam (beam_flags).
    options = _beam_options(config.beam_args)
    # Each stage's own Beam flags, checked now: a bad one stops the run before anything runs.
    stage_options = _stage_options(config, graph)
    # What a stage's settings leave to the runner (the Tuner's schedule), decided now:
    # recorded in the run's identity.
    for stage in graph:
        config = stage.configure(config, options)
    # What the stages' workers import, for a local pool's fork server to import once.
    modules = dict.fromkeys(m for stage in graph for m in stage.worker_modules)
    os.environ[WORKER_MODULES_ENV] = ",".join(modules)
    if not _has_store(config) and _forks(graph, config, options, frozenset()):
        # A first run into this root reuses nothing: a fresh fork server's imports start
        # now, beside the checks below and the module's load (see the look-ahead below).
        warm_fork_server(early=True)
    # First, before any file or job is created: remote workers cannot use local paths.
    check_remote_paths(config, options)
    for stage in _switched_on(graph, config):  # e.g. the serving check's server must
        stage.check_settings(config, options)  # answer now, not later
    # A local EXTERNAL worker pool must start a worker that imports this project; checked
    # while the inputs and the module file are checked, and waited for before anything is
    # created (beam_pipeline.runtime.preflight).
    pool_checked = start_worker_pool_check(options, config.worker_start_timeout)
    # What each stage reads for the whole run, its own inputs checked (ExampleGen's --data,
    # the Schema stage's --schema): kept for that stage alone (ctx.prepared(stage)).
    prepared = {stage.name: stage.prepare(config, options) for stage in graph}
    data_stage = next((s for s in graph if s.reads_input_data), None)
    data = data_stage.input_data(prepared[data_stage.name]) if data_stage else None
    fingerprint = data.fingerprint if data is not None else None
    # The module file and its folder's Python files: read (and the folder's size checked)
    # before the run directory exists. Their digest keys every stage that runs its code.
    bundle = None
    if config.module_file:
        bundle = bundle_module_file(config.module_file, config.max_module_folder_mib)
    # What the module's workers run: the module file and its folder's Python files, and
    # which of those files is the module (two module files of one folder share the
    # archive: without its name, the second would reuse the first's Tuner and Trainer).
    module_digest = None
    if bundle is not None:
        named = f"{bundle.archive_sha256} {os.path.basename(config.module_file)}"
        module_digest = hashlib.sha256(named.encode()).hexdigest()
    identity = run_identity(
        config,
        fingerprint,
        bundle.sha256 if bundle else None,
        bundle.archive_sha256 if bundle else None,
    )
    loaded: dict[str, Any] = {}  # the loaded module (trainer.UserModule), once it is
    user_code = None
    if config.module_file:
        user_code = UserCode(
            config.module_file,
            module_digest,
            lambda: _load_module(config, options, loaded),
            config.pipeline_root,
        )
    # Each stage's own checks (servers it talks to, the host's GPUs, its inputs, models in
    # the store), before anything is written and before the first Beam job.
    opened: dict[str, Optional[MetadataStore]] = {}

    def store_once() -> Optional[MetadataStore]:
        # Opened before anything is written: a bad --metadata_url stops the run here.
        if "store" not in opened:
            opened["store"] = _open_store(config)
        return opened["store"]

    try:
        # Which stages an earlier run serves: a stage that will run needs the module's
        # code and maybe the fork server; a rerun that reuses every stage needs neither.
        reused, every_stage_reused = _look_ahead(
            graph, config, options, identity, user_code, prepared, stage_options, store_once
        )
        if _forks(graph, config, options, reused):
            # Its imports (seconds of CPU) overlap with the module's load and the data
            # stages instead of delaying the first stage that forks.
            warm_fork_server()
        if not every_stage_reused:
            # A stage will run: its hooks and its jobs get Beam's own options.
            options = resolved(options)
        if user_code is not None and not every_stage_reused:
            # Loaded now, before any Beam work: a syntax error, a trainer_fn or a bad
            # run_fn signature stops the run now, not after the data stages.
            user_code.preprocessing_fn()
        checks = Preflight(config, options, loaded.get("module"), store_once)
        for stage in _switched_on(graph, config):
            stage.preflight(checks)
    except BaseException:
        if opened.get("store") is not None:
            opened["store"].close()
        raise

    pool_checked()
    store = store_once()
    scratch = contextlib.ExitStack()
    try:
        # A rerun of a --run_id resumes it, or is refused before anything is written: one
        # with other inputs, or one another launcher is running now.
        if store is not None and config.run_id:
            store.refuse_live_run(config.run_id)
        run_dir, manifest = RunManifest.open(config.pipeline_root, config.run_id, identity)
        manifest.order = [stage.name for stage in graph]
        # What the run's processes write through tempfile (autograph's files, the pool's
        # logs, unpacked modules) goes to a folder of the run's own, removed at its end.
        scratch.enter_context(run_temp_dir(config.pipeline_root))
        run = None
        if store is not None:
            properties = {
                "data": fingerprint,
                "module": module_digest,
                "code": pipeline_code(),
                # Who runs it: `runs list` tells a killed launcher's run from a live one.
                "launcher": this_launcher(),
                # The columns `runs list` shows for it, whichever stages get to record.
                HISTORY_COLUMNS: declared_columns(graph),
            }
            run = store.start_run(run_dir.run_id, properties=properties)
        spec = ArtifactSpec(data.uri, DATA_TYPE, fingerprint=fingerprint) if data else None
        data_name = data_stage.name if data_stage else ""
        records = RunRecords(manifest, store, run, spec, config.no_cache, data_name)
        summary = RunSummary(run_dir.root)
        events = events if events is not None else RunEvents()
        events.run_started(run_dir.root, graph)
        # The model phase's workers load the module and its folder's Python files staged
        # beside the artifacts, named by their sha256 (<run_dir>/module/<sha256>/...), not
        # the user's copies, which may change or be out of their reach.
        staged = bundle.stage(run_dir.root) if bundle is not None else None
        # What the stages start for the run: closed at its end, a failure included.
        resources = contextlib.ExitStack()
        started: dict[str, Started] = {}
        try:
            ctx = StageContext(
                config=config,
                options=options,
                run_dir=run_dir,
                identity=manifest.identity,
                user_code=user_code,
                module_digest=module_digest,
                staged=staged,
                events=events,
                prepared_values=prepared,
                started_values=started,
            )
            _start(graph, ctx, manifest, resources, started, reused)
            run_stages(graph, ctx, records, summary, stage_options)
        except BaseException as e:
            resources.close()
            run_dir.remove_staging()
            # The run's own error is what the user must see: a summary or a store that
            # cannot be written now (a full disk) is logged, not raised over it.
            write_summary(summary, after_error=True)
            # Ctrl-C, or SIGTERM / SIGHUP (which the CLI turns into the same interrupt).
            stopped = isinstance(e, KeyboardInterrupt)
            _finish(store, run, RunStatus.INTERRUPTED if stopped else RunStatus.FAILED)
            raise
        resources.close()
        run_dir.remove_staging()
        write_summary(summary)
        if run is not None:
            store.finish_run(run, RunStatus.COMPLETE)
        return summary
    finally:
        scratch.close()
        if store is not None:
            store.close()


def _look_ahead(
    graph: Sequence[Stage],
    config: PipelineConfig,
    options,
    identity: dict[str, Any],
    user_code: Optional[UserCode],
    prepared: dict[str, Any],
    stage_options: dict[str, Any],
    store_once,
) -> tuple[frozenset[str], bool]:
    """The stages an earlier run's executions will serve (up to the first that runs), and
    whether that is every stage (:mod:`beam_pipeline.engine.look_ahead`). Nothing is
    written and the module is not loaded. A pipeline root without a store yet (a first
    run) or without one at all reuses nothing: the store is not opened for it here."""
    if not _has_store(config):
        return frozenset(), False
    store = store_once()
    if store is None:
        return frozenset(), False
    ctx = StageContext(
        config=config,
        options=options,
        run_dir=RunDirectory(config.pipeline_root, config.run_id),
        identity=identity,
        user_code=user_code.look_ahead() if user_code is not None else None,
        module_digest=user_code.digest if user_code is not None else None,
        prepared_values=prepared,
    )
    return reused_stages(graph, ctx, stored_lookup(store, config.no_cache), stage_options)


def _has_store(config: PipelineConfig) -> bool:
    """Whether the run's metadata store may hold earlier runs: one at ``--metadata_url``,
    or the default one's file in the pipeline root."""
    if config.metadata_url:
        return True
    # A remote root holds no default store (SQLite cannot live there): see _open_store.
    root = config.pipeline_root
    return not fileio.is_remote(root) and fileio.exists(fileio.join(root, METADATA_FILE))


def _forks(graph: Sequence[Stage], config: PipelineConfig, options, reused) -> bool:
    """Whether a stage that will run (one not in ``reused``) works in processes forked from
    the fork server, which only the DirectRunner's runs start: in multi_processing mode any
    stage (its Beam workers are forks), else a stage that declares ``forks`` (the Tuner's
    pool and oracle, the Trainer's user-code process, the InfraValidator's sandbox) and
    whose inputs it cannot run without some stage switched on makes (the InfraValidator
    of a run without the Trainer is skipped: no model). A data-only in_memory run starts
    no fork server: its imports would cost a core's seconds and about 600 MiB for
    nothing."""
    switched_on = _switched_on(graph, config)
    will_run = [s for s in switched_on if s.name not in reused]
    if not will_run or not is_direct(options):
        return False
    if is_multi_processing(options):
        return True
    made = {t for s in switched_on for t in s.outputs}
    return any(
        s.forks and all(i.type in made for i in s.inputs if i.skip_without) for s in will_run
    )


def _load_module(config: PipelineConfig, options, loaded: dict[str, Any]):
    """Loads the module file and returns its ``preprocessing_fn``; the loaded module goes
    to ``loaded["module"]`` (the stages' preflight checks read it: the Trainer's, what
    it trains with).

    Raises:
      PipelineError: the module does not load, defines a ``trainer_fn`` or no
        ``preprocessing_fn``; one sentence naming the file and the fix.
    """
    user_module = load_trainer_module(config.module_file, entry_point=config.trainer.entry_point)
    preprocessing_fn = get_preprocessing_fn(user_module.module, config.module_file)
    if not _stages_run_here(options):
        # The launcher's own TensorFlow work (the tuner's oracle builds the model to learn
        # its search space) must not take a GPU its workers need. A module file imports
        # TensorFlow anyway; without one nothing here would import it.
        hide_gpus("the run's stages run in worker processes")
    loaded["module"] = user_module
    return preprocessing_fn


def _switched_on(graph: Sequence[Stage], config: PipelineConfig) -> list[Stage]:
    """The stages of ``graph`` not switched off (``--no_<stage>``): a stage switched off
    is neither checked nor started (its hooks need not test its switch)."""
    return [stage for stage in graph if stage.switched_on(config) is not False]


def _start(
    graph: Sequence[Stage],
    ctx: StageContext,
    manifest: RunManifest,
    resources: contextlib.ExitStack,
    started: dict[str, Started],
    reused: frozenset[str] = frozenset(),
) -> None:
    """Starts what each stage that will run starts for the run (:meth:`Stage.start`, e.g.
    the Tuner's worker processes, which import TensorFlow while the data stages run):
    each closed by ``resources`` at the run's end, or earlier by its stage. A stage that
    the look-ahead found in ``reused`` starts nothing (should the runner run it after all,
    its own run starts what it needs)."""
    for stage in _switched_on(graph, ctx.config):
        if manifest.has(stage.name) or stage.name in reused:  # it does not run
            continue
        resource = stage.start(dataclasses.replace(ctx, stage=stage.name))
        if resource is None:
            continue
        stack = contextlib.ExitStack()
        resources.callback(stack.close)
        started[stage.name] = Started(stack.enter_context(resource), stack)


def _beam_options(args: Sequence[str]):
    """The run's Beam options: :class:`DeferredOptions` where
    :func:`~beam_pipeline.runtime.beam_flags.light_values` reads every flag (Beam imported
    only when something needs more than the runner and its mode), else Beam's
    ``PipelineOptions``, parsed and checked now.

    Raises:
      PipelineError: as :func:`~beam_pipeline.runtime.options.parse_beam_args`.
    """
    given = light_values(args)
    if given is None:
        return _parse_beam_args(args)
    return DeferredOptions(args, given, _parse_beam_args)


def _parse_beam_args(args: Sequence[str]):
    """:func:`~beam_pipeline.runtime.options.parse_beam_args`, Beam imported now."""
    from beam_pipeline.runtime.options import parse_beam_args

    return parse_beam_args(args)


def _stage_options(config: PipelineConfig, graph: Sequence[Stage]) -> dict[str, Any]:
    """The Beam options of each stage ``--stage_beam_args`` names: the run's flags, then
    the stage's (later flags win), as TFX's ``with_beam_pipeline_args``.

    Raises:
      PipelineError: a stage that is none of the graph's (the Python API's configs are
        not checked by the flags), or a flag that is no Beam option.
    """
    names = {s.name: s.name for s in graph}
    found: dict[str, Any] = {}
    if not config.stage_beam_args:
        return found
    from beam_pipeline.runtime.options import parse_beam_args, unknown_beam_flags

    for stage, flags in config.stage_beam_args:
        if stage not in names:
            raise PipelineError(
                f"stage_beam_args names stage {stage!r}, which is not one; use one of "
                f"{', '.join(names)}."
            )
        unknown = unknown_beam_flags(list(flags), where=f"--stage_beam_args={stage}:")
        if unknown:
            raise PipelineError(
                f"--stage_beam_args={stage}:{unknown[0]} is not a Beam pipeline option; check "
                "its spelling (every Beam flag is --flag=value; --help lists ours)."
            )
        try:
            found[names[stage]] = parse_beam_args([*config.beam_args, *flags])
        except PipelineError as e:
            raise PipelineError(f"{stage}'s --stage_beam_args: {e}", exit_code=e.exit_code) from e
    return found


def _finish(store: Optional[MetadataStore], run, status: RunStatus) -> None:
    """Records the run's end after its error; a store that cannot is logged."""
    if run is None:
        return
    try:
        store.finish_run(run, status)
    except Exception as e:  # noqa: BLE001 - the run's own error is the one to raise
        # A full disk is what the run's own error says already: the log only.
        level = logging.INFO if no_room(e) else logging.WARNING
        _LOG.log(level, "The metadata store could not record the end of run %s: %s", run.run_id, e)
