"""Beam flags: strict parsing and pipeline creation.

Beam's own ``PipelineOptions`` only warns about flags it does not know ("Discarding
unparseable args"); here an unknown flag is an error, so a typo never silently changes a
run. ``create_pipeline`` runs ``--runner=DirectRunner`` on Beam's FnApiRunner directly:
Beam's DirectRunner would first try the Prism runner, which downloads a binary at run
time and fails on an air-gapped machine before falling back. ``run_pipeline`` runs a job
and fails it, rather than waiting forever as Beam would, when its workers are lost: in
the DirectRunner's multi_processing mode when a worker process dies; on every other
runner when no worker shows life for ``--worker_start_timeout`` seconds
(:mod:`beam_pipeline.runtime.watchdog`).

Example::

    options = parse_beam_args(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    p = create_pipeline(options)
    ...
    result = run_pipeline(p, "Transform")   # then result.wait_until_finish()
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import re
import threading
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.background import BackgroundCall
from beam_pipeline.runtime.beam_flags import DIRECT_NAMES as _DIRECT_NAMES
from beam_pipeline.runtime.beam_flags import is_direct, is_multi_processing, resolved
from beam_pipeline.runtime.watchdog import DEFAULT_WORKER_START_TIMEOUT, watch

__all__ = [
    "new_options",
    "parse_beam_args",
    "create_pipeline",
    "run_pipeline",
    "is_direct",
    "is_multi_processing",
    "unknown_beam_flags",
    "refuse_unknown_flags",
    "check_runner",
    "beam_option_names",
]

_LOG = logging.getLogger(__name__)


def _all_option_classes() -> list[type]:
    seen, todo, out = set(), list(PipelineOptions.__subclasses__()), []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _beam_parser():
    # exit_on_error=False: a bad value raises ArgumentError (argparse would print usage to
    # a stderr the run's log has taken, and exit 2 silently).
    parser = po._BeamArgumentParser(allow_abbrev=False, exit_on_error=False)  # pylint: disable=protected-access
    for cls in _all_option_classes():
        try:
            cls._add_argparse_args(parser)  # pylint: disable=protected-access
        except Exception:  # noqa: BLE001  an option class clashing with another; skip it
            continue
    return parser


def unknown_beam_flags(args: Sequence[str], where: str = "") -> list[str]:
    """The flags in ``args`` that no Beam ``PipelineOptions`` class defines.

    Args:
      where: how the error names a flag's place, e.g. ``--stage_beam_args=Trainer:``.

    Raises:
      PipelineError: a Beam flag with a value its option does not take
        (``--direct_num_workers=abc``).
    """
    import argparse

    try:
        _, unknown = _beam_parser().parse_known_args(list(args))
    except argparse.ArgumentError as e:
        name = e.argument_name or ""
        given = next((a for a in args if a.split("=", 1)[0] == name), name)
        raise PipelineError(
            f"{where}{given} is not a value Beam's {name} takes ({e.message}); pass one it takes."
        ) from None
    return unknown


def beam_option_names() -> list[str]:
    """Every Beam pipeline option's name, without ``--`` (``runner``, ``project``, ...)."""
    return sorted(
        option[2:]
        for action in _beam_parser()._actions  # noqa: SLF001  argparse keeps no public list
        for option in action.option_strings
        if option.startswith("--")
    )


def _did_you_mean(flag: str, own_flags: Sequence[str]) -> str:
    """'did you mean --x? Else ' for the known flag (``own_flags`` or Beam's) closest to
    ``flag``."""
    import difflib

    name = flag.split("=", 1)[0]
    beam_flags = [
        option
        for action in _beam_parser()._actions  # noqa: SLF001  argparse keeps no public list
        for option in action.option_strings
        if option.startswith("--")
    ]
    close = difflib.get_close_matches(name, [*own_flags, *beam_flags], n=1, cutoff=0.75)
    return f"did you mean {close[0]}? Else " if close else ""


def refuse_unknown_flags(args: Sequence[str], own_flags: Sequence[str] = ()) -> None:
    """Refuses the first flag in ``args`` that Beam does not know, suggesting the closest
    of ``own_flags`` (the caller's command-line flags, ``--module_file``...) and Beam's.

    ``own_flags`` come from the caller: this module sits below the command line and does
    not know its flags.

    Raises:
      PipelineError: a flag is unknown to both.
    """
    unknown = unknown_beam_flags(args)
    if unknown:
        raise PipelineError(
            f"Unknown flag {unknown[0]!r} on the command line: it is neither a beam_pipeline "
            f"flag nor a Beam pipeline option; {_did_you_mean(unknown[0], own_flags)}check "
            "its spelling (every setting is --flag=value) or run with --help."
        )


def _runner_names() -> list[str]:
    """Beam's runners by class name (DirectRunner, DataflowRunner, PortableRunner, ...)."""
    return [path.rsplit(".", 1)[-1] for path in po.StandardOptions.ALL_KNOWN_RUNNERS]


def check_runner(options: PipelineOptions) -> None:
    """Refuses a ``--runner`` that Beam does not know (a class path is Beam's to load).

    Raises:
      PipelineError: naming the runner and the closest known one.
    """
    import difflib

    runner = options.view_as(po.StandardOptions).runner
    if not isinstance(runner, str) or runner in _DIRECT_NAMES or "." in runner:
        return
    names = _runner_names()
    lowered = {n.lower() for n in names}
    if runner.lower() in lowered or runner.lower() + "runner" in lowered:
        return  # as Beam's create_runner reads it (case-insensitive, "Runner" optional)
    close = difflib.get_close_matches(runner, names, n=1, cutoff=0.6)
    hint = f"did you mean --runner={close[0]}? " if close else ""
    raise PipelineError(
        f"--runner={runner} is not a runner Beam knows; {hint}Pass one of "
        f"{', '.join(sorted(names))} (or a runner class's full module path)."
    )


class _Options(PipelineOptions):
    """``PipelineOptions`` whose ``view_as(cls)`` builds each view once.

    Beam builds a new view on every call, which means a new argparse parser over the
    view class's options, parsing every flag again; and it calls it for every transform
    applied and every type-hint check (``typehints.is_consistent_with``): about 3,700
    calls, 3-4 CPU seconds, to build the bundled Transform's job alone, and half of the
    launcher's time per trial job of the tuner. A view holds no state of its own (it reads
    and writes the dict every view shares), so one view per class answers exactly as a
    fresh one would. The cache is not pickled or copied: a copy makes its own views.
    """

    def view_as(self, cls):
        views = self.__dict__.get("_views")
        if views is None:
            views = {}
            object.__setattr__(self, "_views", views)  # PipelineOptions guards setattr
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def _dofn_specs_cached(get_dofn_specs):
    """Beam's ``userstate.get_dofn_specs``, remembered per DoFn instance.

    Beam inspects every method of a DoFn (``inspect`` signatures of each attribute) each
    time it asks whether the DoFn is stateful: about eight times per ParDo while a job is
    built and translated, 3,300 calls for the bundled Transform's 420 ParDos. The answer
    depends only on the instance's methods, which do not change once it is built, so it
    is kept per instance (weakly: a DoFn that is dropped drops its entry). Beam offers no
    switch for this; the wrapper returns Beam's own answer.
    """
    import functools
    import weakref

    cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @functools.wraps(get_dofn_specs)
    def cached(dofn):
        try:
            specs = cache.get(dofn)
        except TypeError:  # not weak-referenceable or not hashable: ask Beam each time
            return get_dofn_specs(dofn)
        if specs is None:
            specs = get_dofn_specs(dofn)
            cache[dofn] = specs
        return specs

    return cached


def _signatures_cached(get_signature):
    """Beam's ``typehints.decorators.get_signature``, remembered per method's function.

    Beam asks for the ``inspect`` signature of each DoFn method (``process``,
    ``setup``, ...) of every DoFn instance it meets while a job is built and run: tens of
    thousands of ``inspect.signature`` calls for one Transform job, most of them for the
    same few classes' methods, a sixth of a small Transform job's CPU. A bound method's
    signature is its function's, less the bound first argument, whatever the instance,
    so it is kept per function (weakly). Other callables (functions, builtins, partials,
    callable objects) go to Beam each time. Beam offers no switch for this either.
    """
    import functools
    import types
    import weakref

    cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @functools.wraps(get_signature)
    def cached(func):
        if type(func) is not types.MethodType or type(func.__func__) is not types.FunctionType:
            return get_signature(func)
        signature = cache.get(func.__func__)
        if signature is None:
            signature = cache[func.__func__] = get_signature(func)
        return signature

    return cached


def _state_weight_without_module_scan(get_deep_size):
    """Beam's state cache weight (``statecache.get_deep_size``) without objsize's scan of
    every loaded module's globals.

    Beam weighs each side input and state value it caches (a 100 MB budget for the
    in-process runner's worker) with ``objsize.get_deep_size``, whose default first
    collects the globals dict of every module in ``sys.modules`` as objects not to
    traverse: a walk of thousands of modules once TensorFlow is imported, at every cached
    value, a tenth of a small run's launcher CPU. It only keeps a module's namespace out
    of a weight, and Beam's filter already stops at modules, types and functions, the ways
    a value reaches one; a value that holds a namespace dict itself now counts it, so a
    weight can only grow and the cache evict sooner, never hold more than Beam's budget.
    The values the stages cache (analyzer results, vocabularies, statistics) weighed the
    same with and without it. Beam's own size, referent and filter functions are kept.
    """
    import functools

    from apache_beam.runners.worker import statecache

    @functools.wraps(get_deep_size)
    def weight(*objs) -> int:
        return statecache.objsize.get_deep_size(
            *objs,
            get_size_func=statecache._size_func,  # noqa: SLF001  Beam's own, as it passes them
            get_referents_func=statecache._get_referents_func,  # noqa: SLF001
            filter_func=statecache._filter_func,  # noqa: SLF001
            exclude_modules_globals=False,
        )

    return weight


def _replace_once(wrap, module, name: str, *importers) -> None:
    """``module.name`` replaced by ``wrap(module.name)``, marked so that a second call
    leaves it; ``importers``: Beam's modules that imported the name themselves, which get
    the replacement too."""
    current = getattr(module, name)
    if getattr(current, "beam_pipeline_cached", False):
        return
    replacement = wrap(current)
    replacement.beam_pipeline_cached = True
    for owner in (module, *importers):
        setattr(owner, name, replacement)


def _environment_list_made_once(create):
    """Beam stager's list of the launcher's packages, made once per process.

    Every portable or Dataflow job that Beam submits stages a list of the launcher's
    installed packages, for its workers to compare with theirs: the stager makes it with a
    ``pip freeze`` subprocess, most of a second of CPU, at every submission (the data stages, the
    Transform, each trial round, the Trainer, the Evaluator: every job of a run). The
    packages do not change while the launcher runs, so the first list's text is kept and
    each later job stages the same file again, named as Beam names it. Beam offers no
    switch for this (its ``disable_logging_submission_environment`` experiment drops the
    list instead); the wrapper calls Beam's own function for the first list, and again
    whenever that one made none (pip missing: Beam then logs and stages nothing).
    """
    import functools

    from apache_beam.runners.portability import stager

    made: dict[str, str] = {}
    lock = threading.Lock()

    @functools.wraps(create)
    def once(temp_dir):
        path = os.path.join(temp_dir, stager.SUBMISSION_ENV_DEPENDENCIES_FILE)
        with lock:
            text = made.get("text")
            if text is None:
                artifacts = create(temp_dir)
                if artifacts and os.path.isfile(path):
                    with open(path, encoding="utf-8") as f:
                        made["text"] = f.read()
                return artifacts
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return [
            stager.Stager._create_file_stage_to_artifact(  # noqa: SLF001  as Beam's own
                path, stager.SUBMISSION_ENV_DEPENDENCIES_FILE
            )
        ]

    once.beam_pipeline_cached = True
    return once


# Two stages running at once may build their first pipelines together: the check and the
# patch of Beam's classes happen once.
_CACHES_LOCK = threading.Lock()


def _install_beam_caches() -> None:
    """The DoFn spec and signature caches, the state cache's weight without the module
    scan, and the package list made once (see their functions)."""
    from apache_beam.runners.portability.stager import Stager
    from apache_beam.runners.worker import statecache
    from apache_beam.transforms import core, ptransform, userstate, util
    from apache_beam.typehints import decorators

    with _CACHES_LOCK:
        _replace_once(_dofn_specs_cached, userstate, "get_dofn_specs")
        _replace_once(_signatures_cached, decorators, "get_signature", core, ptransform, util)
        _replace_once(_state_weight_without_module_scan, statecache, "get_deep_size")
        create = Stager._create_stage_submission_env_dependencies  # noqa: SLF001
        if not getattr(create, "beam_pipeline_cached", False):
            Stager._create_stage_submission_env_dependencies = staticmethod(  # noqa: SLF001
                _environment_list_made_once(create)
            )


def new_options(flags: Sequence[str] = (), **overrides) -> PipelineOptions:
    """``PipelineOptions(flags, **overrides)`` whose views are built once (see ``_Options``).

    It also installs the DoFn spec and signature caches and the stager's package list made
    once, so that
    every pipeline built from options of this project (``create_pipeline``'s, and the local
    pool's trial jobs) gets them.
    """
    _install_beam_caches()
    return _Options(list(flags), **overrides)


def parse_beam_args(args: Sequence[str]) -> PipelineOptions:
    """Builds ``PipelineOptions`` from Beam flags, refusing unknown ones.

    The DirectRunner defaults to ``--direct_running_mode=in_memory`` (fastest for small
    data); ``multi_threading`` is refused because it drops elements in Beam 2.77.

    Raises:
      PipelineError: a flag is unknown to both this tool and Beam, or a mode is unsafe.
    """
    refuse_unknown_flags(args)
    options = new_options(args)
    check_runner(options)
    direct = options.view_as(po.DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise PipelineError(
            "--direct_running_mode=multi_threading drops elements in Beam 2.77; use "
            "--direct_running_mode=in_memory or --direct_running_mode=multi_processing."
        )
    return options


def create_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A ``beam.Pipeline`` for ``options``; the DirectRunner skips the Prism attempt."""
    options = resolved(options)  # Beam's own, where the run's were deferred (beam_flags)
    _install_beam_caches()
    if not is_direct(options):
        return beam.Pipeline(options=options)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    from beam_pipeline.runtime import forked_sdk_worker

    forked_sdk_worker.install()  # multi_processing's workers: forks, not fresh interpreters

    # The same construction as Beam's SwitchingDirectRunner, minus its Prism attempt: the
    # workers of multi_processing mode receive the pipeline options through provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return beam.Pipeline(
        runner=fn_runner.FnApiRunner(provision_info=provision_info), options=options
    )


# What Beam's SubprocessSdkWorker thread raises when its worker process exits unasked
# (apache_beam/runners/portability/local_job_service.py; Beam is pinned in the lock file).
_WORKER_EXIT = re.compile(r"Worker subprocess exited with return code (-?\d+)")
_WORKER_THREAD = "run_worker"
_KILLED = (-9, 137)  # SIGKILL (the kernel's OOM killer), seen directly or through the shell
_GRACE_S = 2.0  # a job whose worker died as it shut down may still end on its own
# Held for a whole multi_processing job: its watch replaces threading.excepthook, which is
# the process's, so two such jobs of stages running at once run one after the other.
_hook_lock = threading.Lock()


def run_pipeline(
    p: beam.Pipeline, what: str, worker_start_timeout: float = DEFAULT_WORKER_START_TIMEOUT
):
    """``p.run()``, except that a job whose workers are lost fails instead of hanging.

    DirectRunner, ``multi_processing`` mode: Beam's FnApiRunner waits forever for a worker
    process that exited (killed for memory, say): the thread that started it raises and
    nothing else notices. Here such a job runs in a thread of its own while this one
    watches for that exit, and a :class:`PipelineError` names the job and the fix. One
    such job at a time in one process (one watch at a time): a second one, of a stage
    running beside it, waits for the first to end.

    Portable runners, Flink, Spark, Dataflow: the job is submitted from a daemon thread
    (Beam's embedded job service runs the job on a thread that inherits it, so an
    abandoned job cannot keep the process alive) and the result's ``wait_until_finish``
    is watched (:func:`beam_pipeline.runtime.watchdog.watch`): no live worker for
    ``worker_start_timeout`` seconds cancels the job with one sentence saying why. The
    in-memory DirectRunner: plain ``p.run()`` (its work runs in this process).

    Args:
      p: a pipeline from :func:`create_pipeline`, built and not yet run.
      what: the job's name in the message, e.g. ``"Transform"``.
      worker_start_timeout: seconds a job may go without a live worker (not DirectRunner).

    Returns:
      the ``PipelineResult`` (on the FnApiRunner, of a finished job).

    Raises:
      PipelineError: a worker process exited while the job ran, or the job could not be
        submitted within ``worker_start_timeout`` (at least 30 s); the abandoned job's
        thread is a daemon and nothing of it is published.
    """
    if not is_direct(p.options):
        # A copy taken before p.run(), which clears the runner while it works.
        options = copy.deepcopy(p.options)
        return watch(_submit(p, what, worker_start_timeout), options, what, worker_start_timeout)
    if not is_multi_processing(p.options):
        return p.run()
    exits: queue.Queue = queue.Queue()

    with _hook_lock:
        previous = threading.excepthook

        def hook(args) -> None:
            match = _WORKER_EXIT.search(str(args.exc_value))
            thread = args.thread
            if match and thread is not None and thread.name == _WORKER_THREAD:
                exits.put(int(match.group(1)))  # said once below, in one sentence
                return
            previous(args)

        threading.excepthook = hook
        try:
            running = BackgroundCall(p.run, f"beam-job-{what}")
            job = running.thread
            while job.is_alive() and exits.empty():
                job.join(timeout=0.5)
            if job.is_alive():
                job.join(timeout=_GRACE_S)
            # A job that failed on a lost worker may end just before that worker's thread
            # reports the exit.
            wait = _GRACE_S if not job.is_alive() and running.error is not None else 0.0
            try:
                code = exits.get(timeout=wait) if wait else exits.get_nowait()
            except queue.Empty:
                code = None
        finally:
            threading.excepthook = previous
    error = running.error
    if code is not None and (job.is_alive() or error is not None):
        # Alive: Beam waits for the dead worker forever. Failed: Beam's own error is about a
        # closed channel, not about the worker.
        raise _worker_exit_error(what, code) from error
    if code is not None:
        _LOG.warning("A worker process of the %s job exited with code %s as it ended.", what, code)
    return running.get()


# The least time a job service gets to accept a job, whatever --worker_start_timeout says:
# submission is not a worker's start (Beam's embedded job service stages the job and its
# artifacts first, seconds on a busy machine), and a small --worker_start_timeout, which
# rightly fails a dead worker fast, must not fail a slow but healthy submission.
_MIN_SUBMIT_S = 30.0


def _submit(p: beam.Pipeline, what: str, timeout: float):
    """``p.run()`` from a daemon thread (see :func:`run_pipeline`), waited for ``timeout``.

    At least :data:`_MIN_SUBMIT_S` seconds.
    """
    timeout = max(timeout, _MIN_SUBMIT_S)
    submitting = BackgroundCall(p.run, f"beam-submit-{what}")
    submitting.thread.join(timeout=timeout)
    if submitting.thread.is_alive():
        raise PipelineError(
            f"The {what} job was not accepted within {timeout:.0f} s (--worker_start_timeout); "
            "check that the runner's job service (--job_endpoint, --flink_master, "
            "--spark_master_url) is up and reachable, or pass a larger --worker_start_timeout."
        )
    return submitting.get()


def _worker_exit_error(what: str, code: int) -> PipelineError:
    if code in _KILLED:
        return PipelineError(
            f"A worker process of the {what} job was killed while the job ran (out of "
            "memory, most likely); rerun with a smaller --direct_num_workers, with "
            "--direct_running_mode=in_memory, or on a machine with more memory."
        )
    return PipelineError(
        f"A worker process of the {what} job exited with code {code} while the job ran "
        "(its output is above); rerun with --direct_running_mode=in_memory to get the "
        "error in this process."
    )
