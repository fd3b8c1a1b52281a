"""Live progress: one line per stage while it runs, with rich on a terminal.

On a terminal (stdout is a TTY) each running stage is a rich spinner line (one per stage:
stages that do not depend on each other run at once, e.g. the Evaluator and the
InfraValidator), redrawn in place, with its elapsed time and what the run directory says
of its progress; when it ends it becomes a plain line with its status, seconds and rows.
When stdout is not a terminal (CI logs, a file, a pipe) the same facts are printed as
plain lines: one when a stage starts, one every :data:`PLAIN_EVERY_SECONDS` while it
runs, one when it ends. Every line starts with :data:`PROGRESS_PREFIX`. ``--no_progress``
turns it all off.

What a running stage shows is read by the display's own thread (from the run directory,
or from the runner's service), so no stage code waits on it:

- Tuner: trials done / running / failed and the best score so far, from keras-tuner's
  ``trial.json`` files in the tuner's project (staged or published);
- Trainer: the latest step and loss from the TensorBoard event files in ``model_run/``;
- the Beam jobs (ExampleGen+Statistics, Transform), as soon as the stage announces its job
  (:func:`beam_pipeline.runtime.jobs.announce_job`): the job's console link where it has
  one (Dataflow: ``https://console.cloud.google.com/dataflow/jobs/<region>/<job id>?
  project=<project>``, also printed as a line of its own), and, on a runner that reports
  counters while the job runs, the rows read, the rows written per split and rows per
  second since the job was submitted, read from the job's Beam counters every
  :data:`COUNTERS_EVERY_SECONDS` (:func:`beam_pipeline.runtime.counters.live_counters`).
  Dataflow reports them while a job runs; the DirectRunner and Beam's job services
  (``--job_endpoint=embed``, Flink's and Spark's job server) only when it ends (see
  :mod:`beam_pipeline.runtime.counters` for why): there the line shows the elapsed time
  only, and the rows and rows per second when the stage ends.

Example::

    events = RunEvents()
    with ProgressDisplay(events, sys.stdout):
        run(config, events=events)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Optional

from beam_pipeline.core.forked import fork_gate, gated_thread
from beam_pipeline.engine.events import RunEvents
from beam_pipeline.engine.summary import StageReport

__all__ = [
    "COUNTERS_EVERY_SECONDS",
    "PLAIN_EVERY_SECONDS",
    "PROGRESS_PREFIX",
    "ProgressDisplay",
    "row_ends",
]

PROGRESS_PREFIX = "> "
PLAIN_EVERY_SECONDS = 10.0
# Each poll of a job's counters is a call to the runner's service (the Dataflow API, a job
# service): every 5 s keeps a long job's line current at 12 calls a minute.
COUNTERS_EVERY_SECONDS = 5.0
_POLL_SECONDS = 0.5


_READ = "example_gen.rows_read"
_REJECTED = "example_gen.rows_rejected"
_WRITTEN = ("example_gen.rows_out.", "transform.rows_out.")


def _job_rows(counters: Mapping[str, int], seconds: float) -> str:
    """'rows read 1,000, train 660 / eval 340 written, 2,000 rows/s' from a running job's
    counters (those of :mod:`transforms.metrics`); '' before it has counted anything.

    The rate is of the rows read (ExampleGen) or, for a job that counts only what it
    writes (Transform), of the rows written, over ``seconds`` since the job's submission.
    """
    read = counters.get(_READ)
    written = {
        name.rsplit(".", 1)[1]: value
        for name, value in sorted(counters.items(), key=_train_first)
        if name.startswith(_WRITTEN)
    }
    parts = []
    if read is not None:
        rejected = counters.get(_REJECTED, 0)
        parts.append(f"rows read {read:,}" + (f" ({rejected:,} rejected)" if rejected else ""))
    if written:
        parts.append(" / ".join(f"{split} {n:,}" for split, n in written.items()) + " written")
    rows = read if read is not None else sum(written.values())
    if not parts or not rows:
        return ""
    if seconds > 0:
        parts.append(f"{rows / seconds:,.0f} rows/s")
    return ", ".join(parts)


def _train_first(item: tuple[str, int]) -> tuple[bool, str]:
    return (not item[0].endswith(".train"), item[0])


def _job_link(info) -> str:
    """'DataflowRunner job ID: URL' for a job with a console link, else ''."""
    if not info.url:
        return ""
    return (f"{info.runner} job {info.job_id}: " if info.job_id else "") + info.url


class _Running:
    """A running stage: when it started, its last plain line, its Beam job, its spinner."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.last_plain = started
        self.job: Optional[_Job] = None
        self.spinner = None


def row_ends(stage: str, report: StageReport) -> bool:
    """Whether ``report`` is the row of the running ``stage`` (its first row ends it; the
    ExampleGen+Statistics unit's first row is ExampleGen's)."""
    return stage == report.stage or stage.startswith(report.stage + "+")


class _Job:
    """The running stage's Beam job: its link and the latest counters read of it."""

    def __init__(self, info, counters: Optional[Callable[[], dict[str, int]]]) -> None:
        self.link = _job_link(info)
        self.read = counters
        self.submitted = time.time()
        self.polled = 0.0
        self.rows = ""


def _rows(report: StageReport) -> str:
    rows = sum(report.rows_out.values()) or sum(report.rows_in.values())
    if not rows:
        return ""
    rate = f", {rows / report.seconds:,.0f} rows/s" if report.seconds > 0 else ""
    return f", {rows:,} rows{rate}"


class ProgressDisplay:
    """Subscribes to a run's :class:`RunEvents` and shows each stage while it runs.

    Args:
      events: the run's events.
      out: where the lines go (stdout); a TTY gets rich's live display, anything else
        plain lines.
      enabled: False for ``--no_progress``: nothing is shown.
      plain_every: seconds between two plain lines of a running stage.
      counters_every: seconds between two reads of a running job's counters.
    """

    def __init__(
        self,
        events: RunEvents,
        out: IO[str],
        *,
        enabled: bool = True,
        plain_every: float = PLAIN_EVERY_SECONDS,
        counters_every: float = COUNTERS_EVERY_SECONDS,
    ):
        self._out = out
        self._events = events
        self._enabled = enabled
        self._plain_every = plain_every
        self._counters_every = counters_every
        self._tty = bool(getattr(out, "isatty", lambda: False)())
        self._lock = threading.Lock()
        # The running stages, in the order they started.
        self._running: dict[str, _Running] = {}
        self._run_dir: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._live = None
        if enabled:
            events.subscribe(
                run_started=self._run_started,
                stage_started=self._stage_started,
                job_submitted=self._job_submitted,
                stage_finished=self._stage_finished,
            )

    def __enter__(self) -> ProgressDisplay:
        if not self._enabled:
            return self
        if self._tty:
            # rich only here (a terminal), not at import: --help and runs need it not.
            from rich.console import Console
            from rich.live import Live
            from rich.spinner import Spinner
            from rich.text import Text

            self._spinner_class = Spinner
            self._console = Console(file=self._out, highlight=False)
            # Not rich's redirection of sys.stdout/sys.stderr: while a run goes they are
            # its log (beam_pipeline.console), where a module's own output belongs.
            self._live = Live(
                Text(""),
                console=self._console,
                # Drawn by this display's own gated thread (_poll), not rich's refresh
                # thread, which would draw while the launcher forks its fork server.
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        self._thread = threading.Thread(target=self._poll, name="bp-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._live is not None:
            self._live.stop()

    # RunEvents callbacks (the run's thread).

    def _run_started(self, run_dir: str) -> None:
        self._run_dir = run_dir

    def _stage_started(self, stage: str) -> None:
        with self._lock:
            self._running[stage] = _Running(time.time())
        if not self._tty:
            self._print(f"{PROGRESS_PREFIX}{stage}: running")

    def _job_submitted(self, info, counters, stage: Optional[str] = None) -> None:
        job = _Job(info, counters)
        with self._lock:
            if stage is None and len(self._running) == 1:
                stage = next(iter(self._running))
            running = self._running.get(stage) if stage is not None else None
            if running is None:
                return
            running.job = job
        if job.link:  # a line of its own, so that it stays on the terminal to be clicked
            self._print(f"{PROGRESS_PREFIX}{stage}: {job.link}")

    def _stage_finished(self, report: StageReport) -> None:
        with self._lock:  # the stage's first row ends it (a unit may add several rows)
            for stage in self._running:
                if row_ends(stage, report):
                    del self._running[stage]
                    break
        seconds = f" in {report.seconds:.1f} s" if report.seconds else ""
        self._print(
            f"{PROGRESS_PREFIX}{report.stage}: {report.status.value}{seconds}{_rows(report)}"
        )

    # The display's thread.

    def _lines(self) -> list[tuple[str, _Running, str]]:
        """(stage, its state, its line) of each running stage, in the order they started."""
        with self._lock:
            running = list(self._running.items())
        return [(stage, state, self._stage_line(stage, state)) for stage, state in running]

    def _line(self) -> Optional[str]:
        """The line of the stage that started last, None when none runs."""
        lines = self._lines()
        return lines[-1][2] if lines else None

    def _stage_line(self, stage: str, state: _Running) -> str:
        started, job = state.started, state.job
        detail = ""
        read = self._events.details.get(stage)  # the stage declaration's progress
        if read is not None and self._run_dir and "://" not in self._run_dir:
            try:
                detail = read(self._run_dir)
            except Exception:  # noqa: BLE001 - progress never fails the run
                detail = ""
        if job is not None:
            detail = "; ".join(d for d in (self._job_counters(job), job.link) if d)
        text = f"{stage}: running {time.time() - started:.0f} s"
        return f"{text}, {detail}" if detail else text

    def _job_counters(self, job: _Job) -> str:
        """The job's rows, read again when the last read is COUNTERS_EVERY_SECONDS old."""
        now = time.time()
        if job.read is not None and now - job.polled >= self._counters_every:
            job.polled = now
            job.rows = _job_rows(job.read(), now - job.submitted)
        return job.rows

    def _poll(self) -> None:
        # Gated (beam_pipeline.core.forked): the launcher may fork its fork server while
        # this thread lives, never while it draws.
        with gated_thread():
            while not self._stop.wait(min(_POLL_SECONDS, self._plain_every)):
                with fork_gate():
                    self._draw()

    def _draw(self) -> None:
        lines = self._lines()
        if self._live is not None:
            from rich.console import Group
            from rich.text import Text

            for _, state, line in lines:
                # A Text, not a str: rich would read a str as markup (a "[" in a detail
                # would be mangled), and parsing it costs several times the CPU of the
                # rest of the display.
                if state.spinner is None:
                    state.spinner = self._spinner_class("dots", text=Text(line))
                else:
                    state.spinner.update(text=Text(line))
            group = Group(*(s.spinner for _, s, _ in lines)) if lines else Text("")
            self._live.update(group, refresh=True)
            return
        for _, state, line in lines:
            if time.time() - state.last_plain >= self._plain_every:
                state.last_plain = time.time()
                self._print(PROGRESS_PREFIX + line)

    def _print(self, line: str) -> None:
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            self._out.write(line + "\n")
            self._out.flush()
