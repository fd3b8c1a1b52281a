"""The rounds schedule: ask a trial per slot, run them as one Beam job, wait for all, report.

Each round's trials are one job (:class:`transforms.tuner.RunTrials`, Reshuffled to
workers); the oracle hears of every trial of a round at once, so an adaptive oracle sees the
same results at the same points on a rerun. On a :class:`~beam_pipeline.runtime.pool.
LocalWorkerPool`, a round that loses a pool process is rerun on a restarted pool (finished
trials' result files are reused, so nothing counts twice).

Example::

    run_rounds(search, TrialJobs(job, config, options, pool, shared.Shared()))
    search.round_seconds      # wall time of each round
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Sequence

from apache_beam.options import pipeline_options as po

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.background import BackgroundCall
from beam_pipeline.runtime.counters import job_counters
from beam_pipeline.runtime.options import create_pipeline, run_pipeline
from beam_pipeline.stages.tuner.search import Search, TrialJobs, gather_results, worker_per_element
from trainer.tuning import TrialSpec

__all__ = ["ROUND_ATTEMPTS", "run_rounds"]

ROUND_ATTEMPTS = 3  # a round (or a rolling trial) is rerun at most twice after losing a process
_LOG = logging.getLogger(__name__)


def run_rounds(search: Search, jobs: TrialJobs) -> None:
    """Runs rounds until the oracle stops (a dry run: the first round's graph only).

    Args:
      search: the search; its oracle is asked and told, its counters and times filled in.
      jobs: how the rounds' jobs run.
    """
    oracle = search.oracle
    counters: collections.Counter = collections.Counter()
    dry_run = jobs.options.view_as(po.TestOptions).dry_run
    while True:
        started = time.time()
        specs = oracle.next_round()
        if not specs:
            search.counters = dict(counters)
            return
        counters.update(_run_round(jobs, specs))
        search.jobs += 1
        if dry_run:
            search.ran = False
            return
        results = gather_results(specs)
        oracle.report(results)
        search.round_seconds.append(round(time.time() - started, 3))
        _LOG.info(
            "Tuner round %d: %d trial(s) in %.1f s: %s",
            specs[0].round,
            len(specs),
            search.round_seconds[-1],
            ", ".join(f"{r.trial_id}={r.status.value}" for r in results.values()),
        )


def _run_round(jobs: TrialJobs, specs: Sequence[TrialSpec]) -> dict[str, int]:
    """Runs one round's Beam job; returns its counters. Reruns it after a lost pool worker."""
    pool, options = jobs.pool, jobs.options
    if pool is None:
        p = create_pipeline(worker_per_element(options, len(specs)))
        _ = p | "RunTrials" >> jobs.run_trials(specs)
        timeout = jobs.config.worker_start_timeout
        result = run_pipeline(p, f"Tuner round {specs[0].round}", timeout)
        result.wait_until_finish()
        return job_counters(result)
    for _ in range(ROUND_ATTEMPTS):
        pool.wait_ready()  # a process that could not start says why (its log) here
        p = pool.pipeline(options)  # in this thread: see rolling.job_options on options
        _ = p | "RunTrials" >> jobs.run_trials(specs)

        def run(p=p) -> dict[str, int]:
            result = p.run()
            result.wait_until_finish()
            return job_counters(result)

        # The FnApiRunner waits forever for a worker process that died, so the job runs in
        # a daemon thread while this one watches the pool (an abandoned job's thread stays).
        call = BackgroundCall(run, f"tuner-round-{specs[0].round}")
        while call.thread.is_alive() and not pool.lost_workers():
            call.thread.join(timeout=0.5)
        if not call.thread.is_alive():
            return call.get()
        lost = pool.lost_workers()
        pool.restart()
        _LOG.warning(
            "Tuner worker process(es) %s exited during round %d (logs in %s); restarted the "
            "pool and rerunning the round (finished trials are not rerun).",
            lost,
            specs[0].round,
            pool.log_dir,
        )
    raise PipelineError(
        f"Tuner worker processes kept exiting during round {specs[0].round} (see the logs in "
        f"{pool.log_dir}); a trial probably runs out of memory: shrink the model or pass "
        "--direct_num_workers=1."
    )
