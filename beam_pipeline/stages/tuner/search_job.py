"""The search_job schedule: the whole search is ONE Beam job of long-lived worker loops.

The launcher writes the search's first state (its freshly made oracle driver) into the
run's storage beside the tuner project (:func:`trainer.tuning.start_search_state`) and
runs one job, :class:`transforms.tuner.RunSearch`: a loop per slot, each on its own
worker, claiming the next trial by an atomic compare-and-swap on that state, running it,
reporting it, until the oracle is done (:mod:`trainer.tuning.search_loop`). The launcher
then reads the final state into its own driver and the stage writes its tables as for
the other schedules. On Dataflow the search pays one job start-up, not one per trial or
per round; no worker needs to reach the launcher.

On a :class:`~beam_pipeline.runtime.pool.LocalWorkerPool` the job runs on the pool's
warm processes, one loop each. The FnApiRunner waits forever for a process that died, so
the launcher watches the pool: a lost process is replaced and its slot gets a job of its
own on the new process (its loop takes the lost loop's trial back at once, same attempt,
so nothing counts twice); the stuck job is abandoned (its other loops go on to the end).

Example::

    run_search_job(search, TrialJobs(job, config, options, pool, shared.Shared()))
    search.jobs               # 1
"""

from __future__ import annotations

import collections
import copy
import logging
import time
from typing import Optional

from apache_beam.options import pipeline_options as po

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.background import BackgroundCall
from beam_pipeline.runtime.counters import job_counters
from beam_pipeline.runtime.options import create_pipeline, run_pipeline
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.stages.tuner.rounds import ROUND_ATTEMPTS
from beam_pipeline.stages.tuner.search import Search, TrialJobs, worker_per_element
from trainer.tuning import finished_driver, read_state, start_search_state, state_path

__all__ = ["run_search_job"]

_LOG = logging.getLogger(__name__)
_WATCH_SECONDS = 0.5


def run_search_job(search: Search, jobs: TrialJobs) -> None:
    """Runs the search as one job until the oracle is done (a dry run: builds it only).

    Args:
      search: the search; its oracle (the launcher's driver) gets the final state, its
        counters, jobs and times filled in.
      jobs: how the job runs (the local pool, or the options' runner).

    Raises:
      PipelineError: the search stopped (a fatal trial error, too many failures in a
        row, ``tuner_fn`` failing on a worker), or a pool process kept exiting.
    """
    driver = search.oracle
    path = state_path(driver.project_dir)
    dry_run = jobs.options.view_as(po.TestOptions).dry_run
    start_search_state(driver, path, jobs.config.tuner.lease_seconds)
    if jobs.pool is None:
        p = create_pipeline(worker_per_element(jobs.options, driver.slots))
        _ = p | "RunSearch" >> jobs.run_search(path, driver.slots)
        result = run_pipeline(p, "Tuner search", jobs.config.worker_start_timeout)
        result.wait_until_finish()
        search.jobs = 1
        if dry_run:
            search.ran = False
            return
        counters = job_counters(result)
    else:
        counters = _run_on_pool(search, jobs, jobs.pool, path)
    doc = read_state(path)
    finished_driver(driver, doc)  # raises the error that stopped the search
    driver.save()
    search.counters = counters
    search.reissued = int(doc["reissued"])
    search.trial_job_seconds = {
        trial_id: round(t["reported"] - t["claimed"], 3)
        for trial_id, t in doc["times"].items()
        if "reported" in t and "claimed" in t
    }


def _run_on_pool(search: Search, jobs: TrialJobs, pool: LocalWorkerPool, path: str) -> dict:
    """The search job on the pool's processes; a lost process's slots get a job anew."""
    pool.wait_ready()  # a process that could not start says why (its log) here
    slots = search.oracle.slots
    counters: collections.Counter = collections.Counter()
    live: list[BackgroundCall] = []
    abandoned = 0
    losses: collections.Counter = collections.Counter()

    def launch(slot_numbers: list[int], worker: Optional[int]) -> None:
        # Built here, in the caller's thread: Beam's options are not thread-safe (see
        # rolling.job_options); the job runs in a daemon thread the launcher watches.
        own = copy.deepcopy(jobs.options)
        p = pool.pipeline(own, worker=worker)
        _ = p | "RunSearch" >> jobs.run_search(path, slot_numbers)

        def run(p=p) -> dict[str, int]:
            result = p.run()
            result.wait_until_finish()
            return job_counters(result)

        live.append(BackgroundCall(run, f"tuner-search-job-{search.jobs}"))
        search.jobs += 1

    launch(list(range(slots)), None)
    while True:
        for call in [c for c in live if not c.thread.is_alive()]:
            live.remove(call)
            counters.update(call.get())  # raises what the job raised
        lost = pool.lost_workers()
        if lost:
            dead = {i: pool.pids[i] for i in lost}
            loops = read_state(path)["loops"]
            abandoned += len(live)  # each live job may have had a loop on a lost process
            live.clear()
            for index, pid in dead.items():
                mine = sorted(int(s) for s, w in loops.items() if w.endswith(f":{pid}"))
                if not mine:  # it died before its loop claimed: the slots no loop claimed
                    mine = [s for s in range(slots) if str(s) not in loops]
                for slot in mine:
                    losses[slot] += 1
                    if losses[slot] >= ROUND_ATTEMPTS:
                        raise PipelineError(
                            f"Tuner worker process {index} kept exiting while it ran the "
                            f"search's slot {slot} (see the logs in {pool.log_dir}); a trial "
                            "probably runs out of memory: shrink the model or pass "
                            "--direct_num_workers=1."
                        )
                _LOG.warning(
                    "Tuner worker process %d exited during the search (log in %s); restarted "
                    "it, its slot(s) %s go on there (their trials are not counted twice).",
                    index,
                    pool.log_dir,
                    mine,
                )
                pool.restart_worker(index)
                if mine:
                    launch(mine, index)
            continue
        if not live:
            if not abandoned:
                return dict(counters)
            # An abandoned job's loops on live processes run on to the end: done when the
            # state says the search is over and no trial is held.
            doc = read_state(path)
            if (doc["done"] or doc["stopped"]) and not doc["leases"]:
                return dict(counters)
        time.sleep(_WATCH_SECONDS)
