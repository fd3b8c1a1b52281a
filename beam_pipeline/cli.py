"""Command line: ``python -m beam_pipeline [flags] [Beam flags]`` runs the pipeline.

:mod:`beam_pipeline.flags` turns the flags (and an optional YAML ``--config``) into one
frozen :class:`~beam_pipeline.config.PipelineConfig`; :func:`main` runs it and prints what
a person needs: progress, the summary, errors as one sentence with an exit code, the
report's path. ``python -m beam_pipeline runs ...`` is the run history
(:mod:`beam_pipeline.history`).

Example::

    python -m beam_pipeline --runner=DirectRunner
    python -m beam_pipeline runs list
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Optional

from beam_pipeline.core.errors import PipelineError, user_error
from beam_pipeline.core.gpus import gpu_environment
from beam_pipeline.core.secrets import mask
from beam_pipeline.engine.events import RunEvents

if TYPE_CHECKING:
    from beam_pipeline.console import RunLog
    from beam_pipeline.engine.config import PipelineConfig

__all__ = ["build_parser", "console_main", "main", "parse_config", "parse_output"]  # noqa: F822 - see __getattr__


def __getattr__(name: str) -> Any:
    # The flags' parser, imported when a run needs it: `runs` commands read no flags of a
    # run, and the parser reads every stage's declaration.
    if name in ("build_parser", "parse_config", "parse_output"):
        from beam_pipeline import flags

        return getattr(flags, name)
    raise AttributeError(f"module 'beam_pipeline.cli' has no attribute {name!r}")


# Where Beam logs a worker's error with its traceback: the DoFn runner (in_memory), the SDK
# worker, the job service (it forwards the workers' logs, escaped) and the portable
# runner's client (on the root logger); Beam 2.77 is pinned.
_BEAM_ERROR_LOGGERS = (
    "apache_beam.runners.common",
    "apache_beam.runners.worker.sdk_worker",
    "apache_beam.runners.portability.local_job_service",
    "apache_beam.runners.portability.portable_runner",
    "",
)


class _HandledWorkerErrors(logging.Filter):
    """Drops Beam's ERROR log (with traceback) of a worker error that the CLI prints anyway
    as one sentence (see :func:`~beam_pipeline.core.errors.user_error`); another worker
    error's traceback (a bug: the run ends with the runner's sentence for it) is kept for
    the run's log only; other records are kept."""

    def __init__(self):
        super().__init__()
        self.pipeline_root = ""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            if record.levelno < logging.ERROR:
                return True
            # The traceback as text; a forwarded worker log has it escaped (\n, \").
            text = record.getMessage().replace("\\n", "\n").replace('\\"', '"')
            exc = RuntimeError(text.replace("\\'", "'"))
            if "Traceback (most recent call last)" not in text:
                return user_error(exc, self.pipeline_root) is None
        if user_error(exc, self.pipeline_root) is not None:
            return False
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def main(argv: Optional[Sequence[str]] = None, *, events: Optional[RunEvents] = None) -> int:
    """Entry point; returns the process exit code.

    Quiet by default (see :mod:`beam_pipeline.console`): the terminal gets the progress
    lines (:mod:`beam_pipeline.progress`), the summary, the user's warnings and errors;
    the full log goes to the run directory's ``run.log``. The run's ``report.html`` is
    written at the end of every run that got a run directory, also a failed one, and its
    path is the last line printed. ``events``: the run's events, with a caller's listeners
    (:func:`console_main`'s); a new one by default.
    """
    argv = sys.argv[1:] if argv is None else argv
    # GPU memory growth for this process and every one it starts, set before TensorFlow is
    # imported (the ``beam-pipeline`` script enters here, not through ``__main__``).
    gpu_environment(os.environ)
    if _runs_command(argv):  # the run history (beam_pipeline.history), not a run
        from beam_pipeline.history import main as runs_main

        return runs_main(argv[1:])
    if _answers_at_once(argv):
        code = _answer(argv)
        if code is not None:
            return code
    # The terminal's log and progress display, for a run only (imported here: --help and
    # --version print without them).
    from beam_pipeline.console import RunLog
    from beam_pipeline.flags import parse_output
    from beam_pipeline.progress import ProgressDisplay

    output = parse_output(argv)
    if not output.verbose:
        sys.unraisablehook = _log_unraisable
    events = events if events is not None else RunEvents()
    report = None
    with RunLog(output) as log:
        # The terminal (log.stdout): sys.stdout is the log while the run goes, so that a
        # module's own output (Keras's progress bars) is kept there.
        progress = ProgressDisplay(events, log.stdout, enabled=output.progress)
        with progress:
            events.subscribe(run_started=log.attach)
            try:
                code, summary, error = _run(argv, events, log)
            finally:
                if events.run_dir:  # a failed run's report too: it shows what exists
                    from beam_pipeline.report import write_report

                    report = write_report(events.run_dir, events.graph or None)
    if error:  # the one sentence, once the progress display has stopped
        print(f"error: {error}", file=sys.stderr)
    if summary is not None:
        print(summary.format())
    if events.run_dir:
        where = [f"Report: {report}" if report else "Report: not written (see the log)"]
        if log.path:
            where.append(f"full log: {log.path}")
        print("; ".join(where))
    return code


def console_main() -> NoReturn:
    """The ``beam-pipeline`` script and ``python -m beam_pipeline``: :func:`main`, then the
    process's exit with its code; the collector as a process of its own allows.

    A run's start-up (the flags, the store, the module's and the ML stack's imports) runs
    with the cyclic collector off, and its objects go to the collector's permanent
    generation when the stages start (:func:`_collect_from_here`): each full collection
    walks every object made so far, several during the imports, and in the stages one
    every few seconds of a large input's parsing, each walking every object of
    TensorFlow, Keras and Beam again. Before the exit the objects left are frozen too:
    the interpreter's teardown would otherwise run the collector over all of them after
    the run's last line. What the teardown still does: threads joined, ``atexit``
    handlers (the pools', logging's), every object freed by its reference count. What it
    leaves: objects held only by a reference cycle are not finalized, as at a crash;
    :func:`main` has closed the run's log, store and report before it returns, so the run
    relies on none. Only here, in a process of its own: a caller of :func:`main` (a test,
    a notebook) keeps its collector. (``runs`` commands keep it on: they import no stack.)
    """
    events = RunEvents()
    if not _runs_command(sys.argv[1:]):
        gc.disable()
        events.subscribe(run_started=_collect_from_here)
    code = main(events=events)
    gc.freeze()
    sys.exit(code)


def _runs_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a ``runs`` command (the run history), not a run."""
    return bool(argv) and argv[0] == "runs"


def _collect_from_here(run_dir: str) -> None:
    """The run's stages start: what the start-up made, frozen; the collector on again."""
    gc.freeze()
    gc.enable()


def _log_unraisable(unraisable) -> None:
    """Logs an exception Python could not raise (one in a ``__del__``) instead of printing
    its traceback on the terminal.

    A Ctrl-C that lands while TensorFlow builds an object leaves it half-made, and its
    ``__del__`` fails when it is collected: Python would print "Exception ignored in ...
    Traceback" beside the run's one sentence. The log keeps it (``-v`` prints it).
    """
    logging.getLogger(__name__).info(
        "Exception ignored in %r",
        unraisable.object,
        exc_info=(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback),
    )


def _answers_at_once(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--help`` or ``--version``, which print and exit."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in ("-h", "--help", "--version"):
            return True
    return False


def _answer(argv: Sequence[str]) -> Optional[int]:
    """Prints what ``--help`` or ``--version`` asks for and returns the exit code; None
    where the flags ask for a run after all (argparse read the word as another flag's
    value)."""
    from beam_pipeline import flags

    try:
        flags.parse_config(argv)
    except SystemExit as e:  # argparse's exit after printing (or after a usage error)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    except PipelineError as e:  # e.g. a --graph or --config that cannot be read
        print(f"error: {mask(str(e))}", file=sys.stderr)
        return e.exit_code
    return None


# 128 + SIGINT, as a shell reports a command Ctrl-C ended.
EXIT_INTERRUPTED = 130

# What a scheduler sends to stop a command: `timeout`, Kubernetes and Slurm send SIGTERM, a
# closed terminal or ssh session SIGHUP. Either stops a run as Ctrl-C does.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _refuse_unknown_flags(config: PipelineConfig) -> None:
    """A flag neither ours nor Beam's (left in ``beam_args``) is refused here, where this
    parser's flags are known, so that the error suggests ``--module_file`` for
    ``--modul_file``; the run's own check (``parse_beam_args``) knows Beam's alone."""
    from beam_pipeline import flags
    from beam_pipeline.runtime.beam_flags import light_values

    if light_values(config.beam_args) is not None:
        return  # Beam's flags with values Beam takes (and Beam not imported for them)
    from beam_pipeline.runtime.options import refuse_unknown_flags

    own = [
        option
        for action in flags.build_parser()._actions  # noqa: SLF001  argparse keeps no public list
        for option in action.option_strings
        if option.startswith("--")
    ]
    refuse_unknown_flags(config.beam_args, own_flags=own)


def _ended_well(running: list[str], row) -> None:
    """A stage's row: one that did not fail ends it in ``running``."""
    from beam_pipeline.engine.summary import StageStatus
    from beam_pipeline.progress import row_ends

    if row.status is not StageStatus.FAILED:
        running[:] = [stage for stage in running if not row_ends(stage, row)]


@contextlib.contextmanager
def _stop_signals_interrupt(received: list[int]):
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread while the run goes,
    as SIGINT does, so that they end it the way Ctrl-C does (the running stages stopped,
    their staging and partial cache entries removed, the store's records ended, one
    sentence); ``received`` gets the signal's number. Python's default for them ends the
    process at once, leaving all of that behind. The previous handlers are restored.

    Python runs a signal's handler between any two instructions of the main thread, a
    weakref callback's or a ``__del__``'s included (SQLAlchemy's and TensorFlow's run at any
    allocation), and there the KeyboardInterrupt is only passed to ``sys.unraisablehook``:
    the run would go on to its end and exit 0 as if no signal had come. So the hook sends the
    same signal again, which lands in the run's own code; Ctrl-C (Python's
    default SIGINT handler has the same gap) is covered the same way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (cli.main called from a thread)
        return
    raised: list[tuple[int, KeyboardInterrupt]] = []  # the last signal and its interrupt
    main = threading.main_thread().ident

    def in_hook(frame) -> bool:
        while frame is not None and frame.f_code is not send_again.__code__:
            frame = frame.f_back
        return frame is not None

    def send_later(signum: int) -> None:
        # Once the main thread has left the hook, where a handler's error is dropped too.
        while in_hook(sys._current_frames().get(main)):  # noqa: SLF001  no public way
            time.sleep(0.001)
        signal.pthread_kill(main, signum)

    def stop(signum, frame):
        if in_hook(frame):
            threading.Thread(target=send_later, args=(signum,), daemon=True).start()
            return
        if signum != signal.SIGINT and signum not in received:
            received.append(signum)
        name = [] if signum == signal.SIGINT else [signal.Signals(signum).name]
        error = KeyboardInterrupt(*name)
        raised[:] = [(signum, error)]
        raise error

    def send_again(unraisable) -> None:
        # That very interrupt only: one the runner raised in a stage's thread is its own.
        if raised and unraisable.exc_value is raised[0][1]:
            threading.Thread(target=send_later, args=(raised[0][0],), daemon=True).start()
            return
        hook(unraisable)

    signals = list(_STOP_SIGNALS)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not a SIG_IGN (nohup, &)
        signals.append(signal.SIGINT)
    hook = sys.unraisablehook
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    sys.unraisablehook = send_again
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted(
    events: RunEvents, running: Sequence[str], received: Sequence[int]
) -> tuple[int, None, str]:
    """An interrupted run's exit code (128 + the signal, as a shell reports it) and one
    sentence: what stopped it, where, and how to go on from there."""
    code, how = EXIT_INTERRUPTED, "interrupted"
    if received:
        code = 128 + received[0]
        how = f"stopped by {signal.Signals(received[0]).name}"
    during = f" during {' and '.join(running)}" if running else ""
    if not events.run_dir:
        return code, None, f"the run was {how}{during} before it started; nothing was written."
    run_id = os.path.basename(os.path.normpath(events.run_dir))
    sentence = (
        f"the run was {how}{during}; what its finished stages published is kept: run "
        f"the same command with --run_id={run_id} to resume it."
    )
    return code, None, sentence


def _run(argv: Sequence[str], events: RunEvents, log: RunLog) -> tuple[int, Optional[Any], str]:
    """The run itself: (exit code, the summary of a run that succeeded, the error)."""
    config: Optional[PipelineConfig] = None
    quiet = _HandledWorkerErrors()
    # The stages started and not ended well, for an interrupt's message: two may run at
    # once (the Evaluator and the InfraValidator), and both are stopped.
    running: list[str] = []
    events.subscribe(
        stage_started=running.append,
        stage_finished=lambda row: _ended_well(running, row),
    )
    beam_loggers = [logging.getLogger(name) for name in _BEAM_ERROR_LOGGERS]
    for logger in beam_loggers:
        logger.addFilter(quiet)
    from beam_pipeline import flags

    received: list[int] = []  # SIGTERM or SIGHUP, when one stopped the run
    try:
        # argparse's --help, --version and usage errors are for the terminal, not the log.
        with contextlib.redirect_stdout(log.stdout), contextlib.redirect_stderr(log.stderr):
            config = flags.parse_config(argv)
        quiet.pipeline_root = config.pipeline_root
        _refuse_unknown_flags(config)
        from beam_pipeline.api import run  # heavy imports only after flags are valid

        # The report is written below, for a failed run too.
        with _stop_signals_interrupt(received):
            summary = run(config, events=events, report=False)
    except PipelineError as e:
        # Beam's in-process runner re-raises a worker's PipelineError with the step added
        # ("... [while running 'X']"): user_error gives the sentence alone.
        error = user_error(e, "") or e
        return error.exit_code, None, mask(str(error))
    except KeyboardInterrupt:
        return _interrupted(events, running, received)
    except Exception as e:
        from beam_pipeline.engine.failures import is_interrupt

        if is_interrupt(e):
            # Ctrl-C caught in a Beam thread and raised again wrapped, user code's
            # file in its traceback: an interrupt all the same, not an error to fix.
            return _interrupted(events, running, received)
        # A full disk or a folder that cannot be written, on the launcher or a worker, or an
        # exception raised in the user's code on a worker: one sentence naming the path and
        # the cause. Anything else is a bug: its traceback.
        error = user_error(e, config.pipeline_root) if config is not None else None
        if error is None:
            raise
        return error.exit_code, None, mask(str(error))
    finally:
        for logger in beam_loggers:
            logger.removeFilter(quiet)
    return 0, summary, ""
