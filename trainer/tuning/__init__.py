"""Tuning without a long-lived oracle server: trials run in workers, the oracle in the launcher.

One module per concept (keras-tuner splits the same concerns into ``engine/oracle.py``,
``engine/trial.py``, ``distribute/oracle_chief.py`` and ``oracle_client.py``); none imports
Beam (the Beam step is :class:`transforms.tuner.RunTrials`, the stage and its schedules are
in :mod:`beam_pipeline.stages.tuner`):

- :mod:`~trainer.tuning.search_space`: a search space declared in the pipeline config;
- :mod:`~trainer.tuning.messages`: the job, a trial, its result, a row of the table;
- :mod:`~trainer.tuning.result_files`: each trial attempt's result file in the shared folder;
- :mod:`~trainer.tuning.loader`: the module's ``tuner_fn`` (or a search space over its
  TrainSpec, :mod:`~trainer.tuning.hypermodel`) to a tuner on the shared project folder;
- :mod:`~trainer.tuning.trial_runner`: the worker side, :class:`TrialRunner`;
- :mod:`~trainer.tuning.oracle`: the launcher side, :class:`OracleDriver`;
- :mod:`~trainer.tuning.shared_state`: a JSON document changed by compare-and-swap (a
  lock file locally, GCS generations on gs://);
- :mod:`~trainer.tuning.search_loop`: the search job's worker loop, :class:`SearchLoop`:
  claim a trial (with a lease), run it, report it, on that shared state;
- :mod:`~trainer.tuning.early_stopping`: asynchronous successive halving (ASHA): each
  trial's objective per epoch and the rung decisions, in such a shared state.

Example (what the tuner stage does, minus Beam)::

    job = TuningJob(module_file="penguin_module.py", module_source=source,
                    train_files=(...,), eval_files=(...,), transform_graph_path=graph,
                    schema_path=schema, tuner_dir="/run/tuner", train_steps=20, eval_steps=5)
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, parallel_trials=2, max_trials=4)
    runner = TrialRunner(job)                    # on each worker
    while specs := oracle.next_round():
        oracle.report({s.trial_id: runner.run(s) for s in specs})
    oracle.best_hyperparameters()                # a HyperParameters config
"""

from trainer.tuning.early_stopping import EarlyStopping, EarlyStoppingRule
from trainer.tuning.loader import load_tuner
from trainer.tuning.messages import TrialRecord, TrialResult, TrialSpec, TrialStatus, TuningJob
from trainer.tuning.oracle import OracleDriver
from trainer.tuning.result_files import read_trial_result, write_trial_result
from trainer.tuning.search_loop import (
    DEFAULT_LEASE_SECONDS,
    Claim,
    SearchLoop,
    finished_driver,
    read_state,
    start_search_state,
    state_path,
)
from trainer.tuning.search_space import (
    Direction,
    ParameterType,
    SearchAlgorithm,
    SearchParameter,
    SearchSpace,
)
from trainer.tuning.trial_runner import TrialRunner

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "Claim",
    "SearchLoop",
    "finished_driver",
    "read_state",
    "start_search_state",
    "state_path",
    "Direction",
    "EarlyStopping",
    "EarlyStoppingRule",
    "OracleDriver",
    "ParameterType",
    "SearchAlgorithm",
    "SearchParameter",
    "SearchSpace",
    "TrialRecord",
    "TrialResult",
    "TrialRunner",
    "TrialSpec",
    "TrialStatus",
    "TuningJob",
    "load_tuner",
    "read_trial_result",
    "write_trial_result",
]
