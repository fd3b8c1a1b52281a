"""What a search did, as both schedules (rounds, rolling) record it, and the results they gather.

Example::

    search = Search(OracleDriver(tuner, 2), {}, True, setup_seconds, TunerSchedule.ROUNDS)
    results = gather_results(specs)         # what the workers wrote, by trial id
    search.oracle.report(results)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from beam_pipeline.config import TunerSchedule
from trainer.tuning import OracleDriver, TrialResult, TrialSpec, read_trial_result

__all__ = ["Search", "gather_results"]


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
        report to the oracle.
    """

    oracle: OracleDriver
    counters: dict[str, int]
    ran: bool
    setup_seconds: float
    schedule: TunerSchedule
    round_seconds: list[float] = dataclasses.field(default_factory=list)
    trial_job_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
