"""Which schedule a search runs when ``--tuner_schedule`` is left unset, decided from the
run's runner alone (no Beam import: every run decides it before it knows whether the Tuner
will run, a rerun that reuses every stage included).

Example::

    config = with_schedule(config, options)  # config.tuner.schedule set
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.core import fileio
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.runtime.beam_flags import option
from beam_pipeline.runtime.runners import RunnerFamily, runner_family
from beam_pipeline.stages.tuner.settings import TunerSchedule

__all__ = ["default_schedule", "with_schedule"]


def default_schedule(options, pipeline_root: str) -> TunerSchedule:
    """The schedule of a search whose ``--tuner_schedule`` was left unset.

    SEARCH_JOB where each job starts workers of its own (Dataflow, Flink, Spark, a portable
    job server): a job per trial would pay that start-up per trial, minutes on Dataflow
    (benchmarks/dataflow_cost.py's model). ROLLING on the DirectRunner and the other
    runners in this process, whose warm pool makes a trial's job cheap to start and where
    rolling was not measured slower (benchmarks/README.md), and on Beam's embedded
    job service (``--job_endpoint=embed``), which gives a job one
    worker process, so a search job's loops would run one after another there while
    rolling's trial jobs run side by side. Also ROLLING where the search job's state has
    no compare-and-swap store (a pipeline root that is neither local nor ``gs://``).
    """
    if runner_family(options) is RunnerFamily.IN_PROCESS:  # the DirectRunner among them
        return TunerSchedule.ROLLING
    if option(options, "PortableOptions", "job_endpoint") == "embed":
        return TunerSchedule.ROLLING
    if fileio.is_remote(pipeline_root) and not pipeline_root.startswith("gs://"):
        return TunerSchedule.ROLLING
    return TunerSchedule.SEARCH_JOB


def with_schedule(config: PipelineConfig, options) -> PipelineConfig:
    """``config`` with its tuner schedule decided (the runner's default when unset), so that
    the run's identity and its records name the schedule that runs."""
    if config.tuner.schedule is not None:
        return config
    schedule = default_schedule(options, config.pipeline_root)
    return dataclasses.replace(config, tuner=dataclasses.replace(config.tuner, schedule=schedule))
