"""What a run prints on the terminal, and its full log in the run directory.

By default the terminal shows only what is the user's business: the progress lines, the
summary, warnings about the user's data, module and trials, and errors. Everything else
(TensorFlow's C++ logger, libraries' INFO logs, known deprecation notices and warnings
about our own calls) goes to the run's log file, ``<run_dir>/run.log`` unless
``--log_file`` names another, which keeps every line. ``-v/--verbose`` prints everything
on the terminal as well.

The mechanisms, each where the noise comes from:

- TensorFlow's C++ logger: ``TF_CPP_MIN_LOG_LEVEL`` in the environment before TensorFlow
  loads (worker processes this package starts inherit it). TensorFlow 2.21 also logs a
  few lines through absl before absl's logging is initialized ("oneDNN custom operations
  are on", "Could not find cuda drivers"); those go to file descriptor 2 whatever the
  level, so :class:`RunLog` points descriptor 2 at the log file for the run.
- The module's own output: a module's ``run_fn``/``tuner_fn`` prints (Keras's progress
  bars, with their ANSI codes, from ``model.fit``'s default ``verbose``) on ``sys.stdout``
  and ``sys.stderr``, in the launcher or in a worker process it started. :class:`RunLog`
  points descriptor 1 at the log file too, and leaves ``sys.stdout``/``sys.stderr`` on
  descriptors 1 and 2: every such line (the launcher's and its child processes') lands in
  the log. What the CLI itself shows (progress, summary, warnings, errors) goes to
  :attr:`RunLog.stdout` and :attr:`RunLog.stderr`, copies of the terminal's descriptors.
- Python logging: the terminal's handler shows WARNING and above, minus the records of
  :data:`NOT_FOR_THE_USER` (known library notices, by logger and message); the log
  file's handler takes INFO and above, all of them.
- Python warnings: routed to logging (``logging.captureWarnings``), so the same filter
  applies: a known warning is kept in the log and left off the terminal; an unknown one
  (the user's business until we know better) is shown.

Example::

    with RunLog(OutputConfig()) as log:
        log.attach(run_dir)           # once the run directory is known
        ...
    print(log.path)                   # <run_dir>/run.log
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from typing import IO, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.secrets import mask

__all__ = [
    "LOG_FILE",
    "NOT_FOR_THE_USER",
    "OutputConfig",
    "RunLog",
    "quiet_environment",
]

LOG_FILE = "run.log"
_FORMAT = "%(levelname)s %(name)s: %(message)s"
_FILE_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


class _MaskingFormatter(logging.Formatter):
    """Log lines with URL credentials masked (a library may log a URL with its password)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record))


_LOG = logging.getLogger(__name__)

# (logger name, message pattern) of records that are not the user's business: each is a
# library talking about its own calls or ours, with nothing the user can change. Scoped by
# logger and message so that anything else from the same library still shows.
NOT_FOR_THE_USER: tuple[tuple[str, str], ...] = (
    # tfx-bsl's TFXIO calls TensorFlow's deprecated parse_example_dataset.
    ("tensorflow", r"is deprecated and will be removed in a future version"),
    # Keras' fit() on a tf.data.Dataset given shuffle=True (its default): the datasets the
    # trainer hands out are shuffled already.
    ("py.warnings", r"`shuffle=True` was passed, but will be ignored"),
    # Beam's own notices about its runners and options, not about the user's pipeline.
    ("apache_beam", r"Discarding unparseable args|is experimental|Make sure that locally"),
    # Deprecation notices of the stack about itself (protobuf, TensorFlow, Keras, tf.Transform).
    ("py.warnings", r"DeprecationWarning: "),
    # tf.Transform rewriting its analyzer cache entry's METADATA file when it adds entries
    # to it (in the entry's private copy: see beam_pipeline.stages.transform.analyzer_cache);
    # every other sink of a run writes into a fresh folder, where nothing exists to delete.
    ("apache_beam.io.filebasedsink", r"^Deleting \d+ existing files in target path matching"),
    # tf.Transform's graph analysis (for its analyzer cache), one per vocabulary, about the
    # tables of the tf.function it traces preprocessing_fn in itself: the transform graph it
    # saves initializes them once when loaded, and nothing in the module can lift them.
    ("absl", r"^Tables initialized inside a tf\.function"),
    # Each multi_processing worker's start-up notice about a folder only Dataflow has.
    ("apache_beam.runners.portability.local_job_service", r"No semi_persistent_directory found"),
    # Beam 2.77's RunInference (the BulkInferrer) measuring its memory where torch is not
    # installed: its `resource` import shares a try block with torch's, on the root logger.
    ("root", r"^Resource module is not available for current platform"),
)


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """How the run talks to the user (none of it shapes an artifact, so it is not part of
    the run's identity).

    Attributes:
      verbose: print every log line and warning on the terminal too (``-v/--verbose``).
      log_file: where the full log goes (default ``<run_dir>/run.log``).
      progress: show the live progress lines (``--no_progress`` turns them off).
    """

    verbose: bool = False
    log_file: Optional[str] = None
    progress: bool = True


def quiet_environment(env: dict, *, verbose: bool = False) -> dict:
    """Sets TensorFlow's C++ log level in ``env`` (e.g. ``os.environ`` before TensorFlow
    loads, or a worker's environment) unless the user set one or asked for ``verbose``.

    Level 2 keeps TensorFlow's C++ errors and drops its INFO and WARNING lines.
    """
    if not verbose:
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


class _ForTheUser(logging.Filter):
    """Drops the records of :data:`NOT_FOR_THE_USER` (the terminal's handler only)."""

    def __init__(self):
        super().__init__()
        self._rules = [(name, re.compile(pattern)) for name, pattern in NOT_FOR_THE_USER]

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        for logger, pattern in self._rules:
            if (name == logger or name.startswith(logger + ".")) and pattern.search(
                record.getMessage()
            ):
                return False
        return True


class _LogFile(logging.FileHandler):
    """The log file's handler: one that cannot write (a full disk) stops writing.

    logging's default prints "--- Logging error ---" and a traceback to the terminal for
    every record that fails, hundreds of lines on a full disk; the run's own error says
    what to fix, so the file logging stops quietly instead.
    """

    failed: Optional[BaseException] = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.failed = error
            return
        super().handleError(record)


class RunLog:
    """The terminal's and the log file's handlers, and descriptors 1 and 2, for one run.

    The log is written to a temporary local file until :meth:`attach` names the run
    directory; on exit it is copied there (``fileio``: a ``gs://`` run directory too).
    Descriptor 2 (and 1) is redirected only when ``sys.stderr`` (and ``sys.stdout``) is
    that descriptor (a real process, not a test capturing them).

    Attributes:
      stdout / stderr: the terminal, for what the CLI shows the user while the run goes
        (``sys.stdout``/``sys.stderr`` when nothing is redirected).
    """

    def __init__(self, output: OutputConfig, *, for_api: bool = False):
        self.output = output
        # The Python API's (for_api): Python's logging and stdout stay the caller's (no
        # handler added, no level changed, warnings not captured; descriptor 1 left as it
        # is, where a callback's print goes); descriptor 2 alone points at the log.
        self._python_logging = not for_api
        self.path: Optional[str] = None  # where the log ends up, once known
        self.stdout: IO[str] = sys.stdout
        self.stderr: IO[str] = sys.stderr
        self._tmp_path: Optional[str] = None
        self._saved_fd: Optional[int] = None
        self._saved_out_fd: Optional[int] = None
        self._handlers: list[logging.Handler] = []
        self._root_level = logging.WARNING
        self._captured_warnings = False

    def __enter__(self) -> RunLog:
        import tempfile  # lazily: `--help` imports this module, not this

        verbose = self.output.verbose
        quiet_environment(os.environ, verbose=verbose)
        fd, self._tmp_path = tempfile.mkstemp(prefix="beam-pipeline-", suffix=".log")
        os.close(fd)
        root = logging.getLogger()
        self._root_level = root.level
        self.stdout, self.stderr = sys.stdout, sys.stderr
        if not verbose and _is_fd(sys.stderr, 2):
            sys.stderr.flush()
            self._saved_fd = os.dup(2)
            self.stderr = open(  # noqa: SIM115 (closed in __exit__)
                self._saved_fd, "w", buffering=1, errors="backslashreplace", closefd=False
            )
            if self._python_logging and _is_fd(sys.stdout, 1):
                sys.stdout.flush()
                self._saved_out_fd = os.dup(1)
                self.stdout = open(  # noqa: SIM115 (closed in __exit__)
                    self._saved_out_fd, "w", buffering=1, errors="backslashreplace", closefd=False
                )
            self._point_at(self._tmp_path)
        if not self._python_logging:
            return self
        terminal = logging.StreamHandler(self.stderr)
        terminal.setFormatter(_MaskingFormatter(_FORMAT))
        terminal.setLevel(logging.INFO if verbose else logging.WARNING)
        if not verbose:
            terminal.addFilter(_ForTheUser())
        to_file = _LogFile(self._tmp_path, encoding="utf-8")
        to_file.setFormatter(_MaskingFormatter(_FILE_FORMAT))
        to_file.setLevel(logging.INFO)
        self._handlers = [terminal, to_file]
        for handler in self._handlers:
            root.addHandler(handler)
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        self._captured_warnings = True
        return self

    def attach(self, run_dir: str) -> None:
        """Names the run directory. A local log (``<run_dir>/run.log`` or ``--log_file``)
        is written in place from now on, appended to the log of an earlier attempt of the
        run, so that a killed run leaves its log there; a remote one is copied at the end.
        """
        self.path = self.output.log_file or fileio.join(run_dir, LOG_FILE)
        if fileio.is_remote(self.path) or self._tmp_path is None:
            return
        import shutil

        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "ab") as log, open(self._tmp_path, "rb") as so_far:
                shutil.copyfileobj(so_far, log)
            if self._handlers:
                to_file = self._handlers[1]
                assert isinstance(to_file, logging.FileHandler)
                old = to_file.setStream(open(self.path, "a", encoding="utf-8"))  # noqa: SIM115
                if old is not None:
                    old.close()
            self._point_at(self.path)
        except OSError as e:  # kept in the temporary file, copied at the end if it can be
            _LOG.info("The run's log stays in %s until the end (%s).", self._tmp_path, e)
            return
        os.unlink(self._tmp_path)
        self._tmp_path = None

    def __exit__(self, *exc) -> None:
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            try:
                handler.close()
            except OSError:
                # A full disk: the log's last lines are lost, but the terminal must get its
                # descriptors back below, or the run's one sentence is never seen.
                pass
        if self._python_logging:
            root.setLevel(self._root_level)
        if self._captured_warnings:
            logging.captureWarnings(False)
        for saved, fd, stream, terminal in (
            (self._saved_out_fd, 1, sys.stdout, self.stdout),
            (self._saved_fd, 2, sys.stderr, self.stderr),
        ):
            if saved is None:
                continue
            stream.flush()
            terminal.close()
            os.dup2(saved, fd)
            os.close(saved)
        if self._saved_fd is not None:
            self.stdout, self.stderr = sys.stdout, sys.stderr
            self._saved_fd = self._saved_out_fd = None
        if self._tmp_path is None:  # written in place since attach()
            return
        target = self.path or self.output.log_file
        try:
            if target and fileio.is_remote(target):
                fileio.copy(self._tmp_path, target, overwrite=True)
                self.path = target
            elif target:
                # Not fileio for a local file: it loads TensorFlow (seconds, and C++ lines
                # on the terminal now that descriptor 2 is back) in a run that ended before
                # loading it (a flag error with --log_file).
                import shutil

                os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
                shutil.copyfile(self._tmp_path, target)
                self.path = target
        except Exception as e:  # noqa: BLE001 - the log never fails the run (OSError, OpError)
            self.path = None
            print(f"warning: the run's log could not be written to {target} ({e})", file=sys.stderr)
        finally:
            os.unlink(self._tmp_path)
            self._tmp_path = None

    def _point_at(self, path: str) -> None:
        """Points the redirected descriptors (2, and 1 when it is) at the log ``path``."""
        if self._saved_fd is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        log_fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(log_fd, 2)
        if self._saved_out_fd is not None:
            os.dup2(log_fd, 1)
        os.close(log_fd)


def _is_fd(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False
