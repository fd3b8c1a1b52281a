"""The worker side of a search: :class:`TrialRunner` runs trial attempts in this process.

It loads the module file (from the source text carried in the job when the file is not on
the worker's disk), loads the tuner once (:mod:`trainer.tuning.loader`) and runs trials
with it: for each trial it rebuilds the keras-tuner ``Trial`` from the hyperparameters
config the launcher sent and calls the tuner's own ``run_trial`` with ``fit_kwargs``, so
the tuner's callbacks, ``executions_per_trial``, Hyperband's ``tuner/epochs`` /
``tuner/initial_epoch`` and its resume from the parent trial's checkpoint behave as in
``tuner.search``. Each attempt's :class:`TrialResult` goes to the trial result store
(:mod:`trainer.tuning.result_files`); a retried worker returns the stored one instead of training
again. The role of keras-tuner's ``distribute/oracle_client.py`` worker, without a server.

Example::

    runner = TrialRunner(job)
    result = runner.run(spec)    # a TrialResult, also written to the shared folder
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import threading
import time
import traceback
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from trainer.fn_args import TunerFnResult
from trainer.module_loader import error_place
from trainer.process import limit_threads, worker_name
from trainer.run_training import label_outside_vocabulary
from trainer.tuning.early_stopping import TrialRungs, rung_callback, trial_rungs
from trainer.tuning.loader import load_tuner_with_path, set_project_dir
from trainer.tuning.messages import TrialResult, TrialSpec, TrialStatus, TuningJob
from trainer.tuning.result_files import read_trial_result, write_trial_result

__all__ = ["TrialRunner"]

_LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def _older_objects_frozen():
    """One full garbage collection per trial instead of keras-tuner's two.

    ``Tuner._try_build`` runs ``keras.backend.clear_session()`` and ``gc.collect()`` before
    every trial: two passes over every object of the process, to free the previous trial's
    models. In a process that has imported the ML stack such a pass is slow (it walks the
    hundreds of thousands of objects the imports made). Here one pass
    frees what earlier trials left, then everything older than this trial is frozen (the
    collector's permanent generation), so keras-tuner's passes only look at what the trial
    itself makes; the objects are unfrozen when it ends. A process that froze its objects
    already (a fork of the fork server, whose preload froze its imports) is left as it is:
    ``gc.unfreeze`` would undo that.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


_WORKERS_SUBDIR = "workers"


class TrialRunner:
    """Runs trials of one tuning job in this process (a Beam worker creates one per DoFn).

    ``tuner_fn`` is called once, on the first trial; later trials reuse the tuner and its
    ``fit_kwargs``, as ``tuner.search`` does. TensorFlow's thread pools are capped to
    ``job.threads_per_trial`` at construction.

    Example::

        runner = TrialRunner(job)
        result = runner.run(spec)    # a TrialResult, also written to the shared folder
    """

    def __init__(self, job: TuningJob) -> None:
        self._job = job
        limit_threads(job.threads_per_trial)
        self._loaded: Optional[TunerFnResult] = None
        self._module_path = job.module_file
        # Held while a search loop loads the shared state into this runner's oracle
        # (:mod:`trainer.tuning.search_loop`): loops sharing a runner take turns with it.
        self.oracle_lock = threading.Lock()

    def tuner(self) -> TunerFnResult:
        """This process's tuner (``tuner_fn`` runs on the first call).

        Raises:
          PipelineError: the module or its ``tuner_fn`` failed (see :func:`load_tuner`).
        """
        return self._tuner()

    def _tuner(self) -> TunerFnResult:
        if self._loaded is None:
            from trainer.strategy import choose_strategy

            # host-pid: one folder per worker process
            folder = worker_name().replace(":", "-")
            working_dir = fileio.join(self._job.tuner_dir, _WORKERS_SUBDIR, folder)
            self._loaded, self._module_path = load_tuner_with_path(
                self._job, working_dir, strategy=choose_strategy()
            )
        return self._loaded

    def run(self, spec: TrialSpec) -> TrialResult:
        """Runs one trial attempt, or returns the result an earlier run of it left.

        Never raises for an error in the trial (it is the result's ``error``); a
        ``tuner_fn`` that fails here gives a ``fatal`` result.
        """
        done = read_trial_result(spec.project_dir, spec.trial_id, spec.attempt)
        if done is not None:
            return dataclasses.replace(done, reused=True)
        start = time.time()
        try:
            loaded = self._tuner()
        except PipelineError as e:
            # Written like any result: the launcher reads results from the shared folder,
            # and without it would only know that no result came back.
            result = TrialResult.failed(
                spec,
                TrialStatus.FAILED,
                str(e),
                fatal=True,
                seconds=round(time.time() - start, 3),
                worker=worker_name(),
                started=round(start, 3),
            )
            write_trial_result(spec.project_dir, result)
            return result
        if loaded.tuner.project_dir != spec.project_dir:
            set_project_dir(loaded.tuner, spec.project_dir)
        stopped = self._stopped_before(loaded, spec, start)
        result = stopped or self._execute(loaded, spec, start)
        write_trial_result(spec.project_dir, result)
        return result

    def _stopped_before(
        self, loaded: TunerFnResult, spec: TrialSpec, start: float
    ) -> Optional[TrialResult]:
        """With early stopping: the result of a trial that an earlier run of this attempt
        stopped at a rung before its worker was lost (it is not trained again), else None."""
        if not self._job.early_stopping.enabled:
            return None
        rungs = trial_rungs(spec.project_dir, spec.trial_id)
        if not rungs.stopped:
            return None
        objective = loaded.tuner.oracle.objective
        trained = [v for v in rungs.curve if not math.isnan(v)]
        best = (max if objective.direction == "max" else min)(trained)
        return TrialResult(
            trial_id=spec.trial_id,
            attempt=spec.attempt,
            status=TrialStatus.STOPPED,
            hyperparameters=dict(spec.hyperparameters),
            metrics={objective.name: best},
            best_step=rungs.curve.index(best),
            seconds=round(time.time() - start, 3),
            worker=worker_name(),
            started=round(start, 3),
            curve=rungs.curve,
            rung=rungs.rung,
        )

    def _fit_kwargs(self, loaded: TunerFnResult, spec: TrialSpec) -> dict:
        """The module's ``fit_kwargs``, plus the rung callback when early stopping is on."""
        rule = self._job.early_stopping
        if not rule.enabled:
            return loaded.fit_kwargs
        objective = loaded.tuner.oracle.objective
        callback = rung_callback(rule, spec.project_dir, spec.trial_id, objective)
        callbacks = [*loaded.fit_kwargs.get("callbacks", []), callback]
        return {**loaded.fit_kwargs, "callbacks": callbacks}

    def _execute(self, loaded: TunerFnResult, spec: TrialSpec, start: float) -> TrialResult:
        import keras_tuner

        # keras-tuner's own conversion of run_trial's return value (History, dict, float,
        # or a list of them) to the metrics it reports; private, but keras-tuner is pinned.
        from keras_tuner.src.engine import tuner_utils

        tuner = loaded.tuner
        objective = tuner.oracle.objective
        hp = keras_tuner.HyperParameters.from_config(dict(spec.hyperparameters))
        trial = keras_tuner.engine.trial.Trial(hp, trial_id=spec.trial_id, status="RUNNING")
        status, metrics, step, error, trace, fatal = TrialStatus.COMPLETED, {}, 0, None, None, False
        sentence: Optional[str] = None
        try:
            with _older_objects_frozen():
                returned = tuner.run_trial(trial, **self._fit_kwargs(loaded, spec))
            tuner_utils.validate_trial_results(returned, objective, "Tuner.run_trial()")
            metrics = {
                str(k): float(v)
                for k, v in tuner_utils.convert_to_metrics_dict(returned, objective).items()
            }
            step = int(tuner_utils.get_best_step(returned, objective))
        except Exception as e:  # noqa: BLE001  a trial's error is its result, as in keras-tuner
            trace = traceback.format_exc()
            where = error_place(e, self._module_path, self._job.module_file)
            error = f"{type(e).__name__}: {first_line(e)} ({where})"
            fatal = isinstance(e, keras_tuner.errors.FatalError)
            sentence = label_outside_vocabulary(e, f"Trial {spec.trial_id}'s fit in {where}")
            fatal = fatal or sentence is not None  # the data's: every trial would fail on it
            failed = fatal or isinstance(e, keras_tuner.errors.FailedTrialError)
            status = TrialStatus.FAILED if failed else TrialStatus.INVALID
            _LOG.warning("Trial %s raised %s", spec.trial_id, error)
        rungs = (
            trial_rungs(spec.project_dir, spec.trial_id)
            if self._job.early_stopping.enabled
            else TrialRungs()
        )
        if rungs.stopped and status is TrialStatus.COMPLETED:
            status = TrialStatus.STOPPED
        return TrialResult(
            trial_id=spec.trial_id,
            attempt=spec.attempt,
            status=status,
            hyperparameters=trial.hyperparameters.get_config(),
            metrics=metrics,
            best_step=step,
            error=error,
            traceback=trace,
            fatal=fatal,
            sentence=sentence,
            seconds=round(time.time() - start, 3),
            worker=worker_name(),
            started=round(start, 3),
            curve=rungs.curve,
            rung=rungs.rung,
        )
