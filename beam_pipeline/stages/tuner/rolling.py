"""The rolling schedule: every slot runs one trial's job; a slot that frees asks for the next.

Each trial is its own small Beam job (on a :class:`~beam_pipeline.runtime.pool.
LocalWorkerPool`: on the slot's own process), run in a thread of the launcher; the
launcher's thread alone talks to the oracle, reporting a trial as soon as its job ends, so
no slot waits for another's slower trial (as keras-tuner workers each ask the oracle for
their next trial). The FnApiRunner waits forever for a pool process that died, so the loop
also watches the pool: a lost process is replaced and its trial's job rerun (a finished
trial's result file is reused, so nothing counts twice).

Example::

    run_rolling(search, TrialJobs(job, config, options, pool, shared.Shared()))
    search.trial_job_seconds      # per trial, from its job's start to its report
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Optional

import apache_beam as beam
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.counters import job_counters
from beam_pipeline.runtime.options import create_pipeline, run_pipeline
from beam_pipeline.runtime.pool import LocalWorkerPool, quiet_lost_workers
from beam_pipeline.stages.tuner.rounds import ROUND_ATTEMPTS
from beam_pipeline.stages.tuner.search import Search, TrialJobs, gather_results, worker_per_element
from trainer.tuning import TrialResult, TrialSpec, TrialStatus, write_trial_result

__all__ = ["TIMED_OUT", "job_options", "run_rolling"]

# The start of a timed-out trial's error (its status is keras-tuner's FAILED).
TIMED_OUT = "TimeoutError"

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class _TrialJob:
    """One trial's job of a rolling search, running in its own thread."""

    slot: int
    spec: TrialSpec
    tries: int
    started: float
    result: Optional[beam.runners.runner.PipelineResult] = None  # once submitted


# Beam's stager writes the launcher's installed packages (``pip freeze``, a subprocess
# that costs the launcher CPU time) into every portable or Dataflow job it submits,
# for the workers to compare with theirs; this experiment of Beam's turns that off.
_NO_ENVIRONMENT_LIST = "disable_logging_submission_environment"


def job_options(options: PipelineOptions, trial_id: str, first: bool = True) -> PipelineOptions:
    """A copy of ``options`` for one trial's job; a given --job_name gets the trial as a suffix.

    Trial jobs run side by side, and Dataflow refuses two running jobs of the same name. A
    copy, because each job is built in a thread of its own and Beam's PipelineOptions are
    not thread-safe: ``view_as`` fills the shared option dict while ``beam.Pipeline``
    deep-copies it, and two trial jobs built at once from one options object have come
    out with the DirectRunner, running a portable-runner trial in the launcher. Call it
    from the thread that owns ``options``.

    Args:
      options: the search's options.
      trial_id: the trial's id.
      first: whether this is the search's first job. The later ones leave out the list of
        the launcher's packages that Beam stages with each job: it is the same launcher's
        list as the first job's, and making it was a ``pip freeze`` per trial.
    """
    own = worker_per_element(options, 1)  # a copy, as beam.Pipeline copies its options
    cloud = own.view_as(po.GoogleCloudOptions)
    if cloud.job_name:
        cloud.job_name = f"{cloud.job_name}-trial-{trial_id}".lower().replace("_", "-")
    if not first:
        own.view_as(po.DebugOptions).add_experiment(_NO_ENVIRONMENT_LIST)
    return own


def run_rolling(search: Search, jobs: TrialJobs) -> None:
    """Runs the rolling schedule until the oracle has nothing more to run and nothing runs.

    Args:
      search: the search; its oracle is asked and told, its counters and times filled in.
      jobs: how the trials' jobs run (each in a daemon thread of this process, so an
        abandoned job's thread never holds the process).
    """
    pool, options = jobs.pool, jobs.options
    done: queue.Queue = queue.Queue()
    running: dict[int, _TrialJob] = {}
    counters: collections.Counter = collections.Counter()

    def launch(slot: int, spec: TrialSpec, tries: int = 1) -> None:
        entry = _TrialJob(slot, spec, tries, time.time())
        running[slot] = entry
        search.jobs += 1
        # Here: the job's thread must not read options.
        own = job_options(options, spec.trial_id, first=search.jobs == 1)

        def run() -> None:
            try:
                # On a pool this waits for the slot's process (a restarted one starts anew).
                p = pool.pipeline(own, worker=slot) if pool is not None else create_pipeline(own)
                _ = p | "RunTrials" >> jobs.run_trials([spec])
                if pool is not None:
                    entry.result = p.run()
                else:  # the trial's own job on the runner, watched (beam_options.run_pipeline)
                    what = f"Tuner trial {spec.trial_id}"
                    entry.result = run_pipeline(p, what, jobs.config.worker_start_timeout)
                entry.result.wait_until_finish()
                done.put((entry, job_counters(entry.result), None))
            except BaseException as e:  # noqa: BLE001  handed to the launcher's thread
                done.put((entry, None, e))

        name = f"tuner-trial-{spec.trial_id}-slot-{slot}"
        threading.Thread(target=run, name=name, daemon=True).start()

    try:
        with quiet_lost_workers() if pool is not None else contextlib.nullcontext():
            _roll_until_done(
                search, pool, done, running, counters, launch, jobs.config.tuner.trial_timeout
            )
    except BaseException:
        # The search stops here: the other trials' jobs must not run on (on Dataflow, a
        # submitted job would go on costing; on a pool, a trial would go on writing into
        # the staging folder the stage deletes next).
        for entry in running.values():
            _cancel(entry)
        if pool is not None and running:
            pool.stop_jobs(sorted(running))
        raise


def _lost_message(lost: _TrialJob, slot: int, code: Optional[int], log_dir: str) -> str:
    """Why a trial's worker process kept exiting, in one sentence: its exit code tells a
    kill (the kernel's OOM killer sends SIGKILL) from the trial's own exit call or crash."""
    trial = lost.spec.trial_id
    if code is not None and code < 0:
        return (
            f"Tuner trial {trial} had its worker process {slot} killed by signal {-code} "
            f"{lost.tries} times (see the logs in {log_dir}); the trial probably runs out of "
            "memory: shrink the model or pass --direct_num_workers=1."
        )
    return (
        f"Tuner trial {trial} ended its worker process with exit code {code} {lost.tries} "
        f"times (an os._exit or sys.exit call in the model's code, or a crash: see the logs "
        f"in {log_dir}); remove that call from the model's code."
    )


def _stop(entry: _TrialJob, pool: Optional[LocalWorkerPool]) -> None:
    """Stops a trial's job: its pool process killed (and replaced), else the job cancelled."""
    if pool is not None:
        pool.stop_jobs([entry.slot])
    else:
        _cancel(entry)


def _cancel(entry: _TrialJob) -> None:
    if entry.result is None:
        return
    try:
        entry.result.cancel()
    except Exception as e:  # noqa: BLE001  runners without cancel (the FnApiRunner)
        _LOG.debug("Could not cancel trial %s's job: %s", entry.spec.trial_id, e)


def _roll_until_done(
    search: Search,
    pool: Optional[LocalWorkerPool],
    done: queue.Queue,
    running: dict[int, _TrialJob],
    counters: collections.Counter,
    launch: Callable[..., None],
    timeout: Optional[float] = None,
) -> None:
    """The rolling schedule's loop (see :func:`run_rolling`): ask, launch, wait, report.

    ``running`` maps a slot to its trial's job; ``launch(slot, spec, tries=1)`` starts a
    job and records it there; each job's thread puts ``(entry, counters, error)`` on
    ``done`` when it ends. A trial running past ``timeout`` seconds (``--trial_timeout``)
    is stopped (its pool process killed and replaced; another runner's job cancelled) and
    reported FAILED as timed out; the search goes on.
    """
    oracle = search.oracle
    slots = oracle.slots
    ask = True
    reported = timed_out = 0

    def report(results: dict, spec: TrialSpec) -> None:
        try:
            oracle.report(results, [spec])
        except PipelineError:
            if timed_out and timed_out == reported + 1:
                raise PipelineError(
                    f"All {timed_out} tuning trials so far ran past --trial_timeout="
                    f"{timeout:g} s and were stopped, so the search stopped; raise "
                    "--trial_timeout, or make the trials shorter (--tuner_train_steps)."
                ) from None
            raise

    while True:
        if ask:
            free = [slot for slot in range(slots) if slot not in running]
            for slot, spec in zip(free, oracle.ask(len(free)) if free else []):
                launch(slot, spec)
            ask = False
        if not running:  # the oracle has nothing more to run and nothing runs
            search.counters = dict(counters)
            return
        try:
            entry, counts, error = done.get(timeout=0.5)
        except queue.Empty:
            late = [e for e in running.values() if timeout and time.time() - e.started > timeout]
            for entry in late:
                del running[entry.slot]
                _stop(entry, pool)
                spec = entry.spec
                result = TrialResult.failed(
                    spec,
                    TrialStatus.FAILED,
                    f"{TIMED_OUT}: ran past --trial_timeout={timeout:g} s and was stopped",
                    seconds=round(time.time() - entry.started, 3),
                    started=round(entry.started, 3),
                )
                write_trial_result(spec.project_dir, result)
                _LOG.warning("Tuner trial %s ran past --trial_timeout; stopped.", spec.trial_id)
                timed_out += 1
                report({spec.trial_id: result}, spec)
                reported += 1
                search.trial_job_seconds[spec.trial_id] = result.seconds
                ask = True
            for slot in pool.lost_workers() if pool is not None else []:
                code = pool.exit_code(slot)
                pool.restart_worker(slot)
                lost = running.pop(slot, None)
                if lost is None:
                    continue
                if lost.tries >= ROUND_ATTEMPTS:
                    raise PipelineError(_lost_message(lost, slot, code, pool.log_dir)) from None
                _LOG.warning(
                    "Tuner worker process %d exited (code %s) during trial %s (log in %s); "
                    "restarted it and rerunning the trial.",
                    slot,
                    code,
                    lost.spec.trial_id,
                    pool.log_dir,
                )
                launch(slot, lost.spec, lost.tries + 1)
            continue
        if running.get(entry.slot) is not entry:  # an abandoned job (its process was lost)
            continue
        del running[entry.slot]
        if error is not None:
            raise error
        counters.update(counts)
        results = gather_results([entry.spec])
        report(results, entry.spec)
        reported += 1
        seconds = round(time.time() - entry.started, 3)
        search.trial_job_seconds[entry.spec.trial_id] = seconds
        ask = True
        _LOG.info(
            "Tuner trial %s: %s in %.1f s on slot %d",
            entry.spec.trial_id,
            ", ".join(r.status.value for r in results.values()) or "no result",
            seconds,
            entry.slot,
        )
