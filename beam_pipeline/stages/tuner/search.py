"""What both schedules (rounds, rolling) share: how they run trial jobs, what a search did.

- :class:`TrialJobs`: the search's job, the run's config and options, the local pool (if
  any) and the workers' shared runner handle; makes each job's ``RunTrials`` step;
- :class:`Search`: the driven oracle, summed counters, where the time went;
- :func:`gather_results`: the results the trials' workers wrote.

Example::

    jobs = TrialJobs(job, config, options, pool, shared.Shared())
    search = Search(OracleDriver(tuner, 2), {}, True, setup_seconds, TunerSchedule.ROUNDS)
    p | "RunTrials" >> jobs.run_trials(specs)
    search.oracle.report(gather_results(specs))     # what the workers wrote, by trial id
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.runtime.runners import worker_per_element
from beam_pipeline.stages.tuner.settings import TunerSchedule
from trainer.tuning import OracleDriver, TrialResult, TrialSpec, TuningJob, read_trial_result
from transforms.tuner import RunSearch, RunTrials

__all__ = ["Search", "TrialJobs", "gather_results", "worker_per_element"]


@dataclasses.dataclass(frozen=True)
class TrialJobs:
    """How a search's trials run as Beam jobs, whichever the schedule.

    Attributes:
      job: what every trial needs.
      config: the run's configuration (``config.tuner``'s hints, the watchdog's timeout).
      options: the jobs' options.
      pool: the local worker pool the jobs run on, or None (the options' runner).
      runners: the workers' shared ``TrialRunner`` handle (see ``RunTrials``).
    """

    job: TuningJob
    config: PipelineConfig
    options: PipelineOptions
    pool: Optional[LocalWorkerPool]
    runners: shared.Shared

    def run_trials(self, specs: Sequence[TrialSpec]) -> RunTrials:
        """A job's step for ``specs`` (a transform applies to one pipeline: one per job)."""
        hints = self.config.tuner
        return RunTrials(
            self.job,
            specs,
            accelerator=hints.accelerator,
            min_ram=hints.min_ram,
            runners=self.runners,
        )

    def run_search(self, state_path: str, slots: int | Sequence[int]) -> RunSearch:
        """The search job's step: a loop per slot on ``state_path`` (one per job)."""
        hints = self.config.tuner
        return RunSearch(
            self.job,
            state_path,
            slots,
            lease_seconds=hints.lease_seconds,
            accelerator=hints.accelerator,
            min_ram=hints.min_ram,
            runners=self.runners,
        )


def gather_results(specs: Sequence[TrialSpec]) -> dict[str, TrialResult]:
    """The results the trials' workers wrote, keyed by trial id (one per trial attempt)."""
    out = {}
    for spec in specs:
        result = read_trial_result(spec.project_dir, spec.trial_id, spec.attempt)
        if result is not None:
            out[spec.trial_id] = result
    return out


@dataclasses.dataclass
class Search:
    """What a search did: the driven oracle, summed counters, and where the time went.

    Attributes:
      oracle: the launcher's oracle, driven by the schedule.
      counters: the trial jobs' Beam counters, summed.
      ran: False for a dry run (the first round's job graph was built only).
      setup_seconds: loading the launcher's tuner.
      schedule: the schedule that ran.
      round_seconds: wall time of each synchronous round.
      trial_job_seconds: per trial of a rolling search, from its job's start to its
        report to the oracle; of a search job, from its claim to its report.
      jobs: the Beam jobs the search ran (a search job: 1, plus one per local pool
        process that was lost and replaced).
      reissued: trials a search job re-issued (a lost worker's, or an expired lease).
    """

    oracle: OracleDriver
    counters: dict[str, int]
    ran: bool
    setup_seconds: float
    schedule: TunerSchedule
    round_seconds: list[float] = dataclasses.field(default_factory=list)
    trial_job_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    jobs: int = 0
    reissued: int = 0
