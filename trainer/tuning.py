"""Tuning without a long-lived oracle server: trials run in workers, the oracle advances in rounds.

Two halves, neither importing Beam (the Beam step is :class:`transforms.tuning.RunTrials`):

- In a worker, :class:`TrialRunner` loads the module file (from the source text carried in
  the job when the file is not on the worker's disk), calls ``tuner_fn(fn_args)`` once and
  runs trials with the returned tuner: for each trial it rebuilds the keras-tuner ``Trial``
  from the hyperparameters config the launcher sent and calls the tuner's own
  ``run_trial`` with ``fit_kwargs``, so the tuner's callbacks, ``executions_per_trial``,
  Hyperband's ``tuner/epochs`` / ``tuner/initial_epoch`` and its resume from the parent
  trial's checkpoint behave as in ``tuner.search``. The tuner's project folder is the
  shared tuner folder, so a checkpoint written by one worker is found by the worker that
  resumes it. Each attempt's :class:`TrialResult` is written beside the trial's checkpoint
  (``trial_<id>/beam_result-<attempt>.json``); a worker retried by the runner finds it and
  returns it instead of training again, so no trial is counted twice.
- On the launcher, :class:`OracleRounds` drives any keras-tuner oracle (RandomSearch,
  GridSearch, BayesianOptimization, Hyperband): it asks for up to P trials per round
  (``create_trial`` with P distinct tuner ids, as P keras-tuner workers would), then reports
  the results (``update_trial`` / ``end_trial``, which also save the oracle's state to the
  tuner folder), until the oracle stops or ``max_trials`` is reached. A trial that raises
  is recorded with its error and the search goes on; keras-tuner's
  ``max_consecutive_failed_trials`` still ends a hopeless search, here as a PipelineError.

Without a ``tuner_fn``, a :class:`SearchSpace` declared in the pipeline config tunes a
module's :class:`trainer.TrainSpec` (categorical / int / float hyperparameters, log
sampling, any of the four oracles).

Example (what the tuner stage does, minus Beam)::

    job = TuningJob(module_file="penguin_module.py", module_source=source,
                    train_files=(...,), eval_files=(...,), transform_graph_path=graph,
                    schema_path=schema, tuner_dir="/run/tuner", train_steps=20, eval_steps=5)
    rounds = OracleRounds(load_tuner(job, job.tuner_dir).tuner, parallel_trials=2, max_trials=4)
    runner = TrialRunner(job)                    # on each worker
    while specs := rounds.next_round():
        rounds.report({s.trial_id: runner.run(s) for s in specs})
    rounds.best_hyperparameters()                # a HyperParameters config
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import posixpath
import socket
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import StagedModule
from trainer.data_accessor import DataAccessor
from trainer.fn_args import ExampleCounts, FnArgs, TunerFnResult
from trainer.module_loader import ModuleKind, error_place, load_trainer_module

if TYPE_CHECKING:
    import keras_tuner

__all__ = [
    "Direction",
    "ParameterType",
    "SearchAlgorithm",
    "SearchParameter",
    "SearchSpace",
    "TrialStatus",
    "TuningJob",
    "TrialSpec",
    "TrialResult",
    "TrialRecord",
    "TrialRunner",
    "OracleRounds",
    "load_tuner",
    "limit_threads",
    "read_trial_result",
    "worker_name",
    "prewarm",
]

_LOG = logging.getLogger(__name__)
_RESULT_PREFIX = "beam_result-"
_WORKERS_SUBDIR = "workers"


def worker_name() -> str:
    """``host:pid`` of this process (what a trial records as its worker)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class TrialStatus(str, enum.Enum):
    """How a trial ended; the values are keras-tuner's ``TrialStatus`` strings.

    INVALID: the trial raised; the oracle retries it up to its ``max_retries_per_trial``
    (0 by default) and then records it FAILED. FAILED: it raised keras-tuner's
    ``FailedTrialError`` (no retry), or ran out of retries.
    """

    COMPLETED = "COMPLETED"
    INVALID = "INVALID"
    FAILED = "FAILED"


class ParameterType(str, enum.Enum):
    """Kinds of hyperparameters a config-declared search space has."""

    CATEGORICAL = "categorical"
    INT = "int"
    FLOAT = "float"


class SearchAlgorithm(str, enum.Enum):
    """The keras-tuner oracle a config-declared search space runs with."""

    RANDOM = "random"
    GRID = "grid"
    BAYESIAN = "bayesian"
    HYPERBAND = "hyperband"


class Direction(str, enum.Enum):
    """Whether the objective is minimized or maximized."""

    MIN = "min"
    MAX = "max"


@dataclasses.dataclass(frozen=True)
class SearchParameter:
    """One hyperparameter of a config-declared search space.

    Attributes:
      name: the name the model reads (``hp.get(name)``).
      type: CATEGORICAL (``values``), INT or FLOAT (``min``..``max``, inclusive).
      values: the choices of a categorical hyperparameter.
      min / max / step: the range of an int or float one (``step`` optional).
      log: sample the range log-uniformly (``min`` must be above 0).
    """

    name: str
    type: ParameterType
    values: tuple[Any, ...] = ()
    min: Optional[float] = None
    max: Optional[float] = None
    step: Optional[float] = None
    log: bool = False

    def register(self, hp: keras_tuner.HyperParameters) -> None:
        """Declares this hyperparameter in ``hp``."""
        sampling = "log" if self.log else "linear"
        if self.type is ParameterType.CATEGORICAL:
            hp.Choice(self.name, list(self.values))
        elif self.type is ParameterType.INT:
            step = int(self.step) if self.step else None
            hp.Int(self.name, int(self.min), int(self.max), step=step, sampling=sampling)
        else:
            hp.Float(self.name, self.min, self.max, step=self.step, sampling=sampling)


_SPACE_KEYS = {"algorithm", "objective", "direction", "max_trials", "max_epochs", "seed"}
_PARAMETER_KEYS = {"type", "values", "min", "max", "step", "log"}


def _enum(kind: type[enum.Enum], value: Any, where: str):
    try:
        return kind(str(value).lower())
    except ValueError:
        names = ", ".join(m.value for m in kind)
        raise PipelineError(f"{where} is {value!r}; use one of: {names}.") from None


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineError(f"{where} is {value!r}; use a whole number of at least 1.")
    return value


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A search space declared in the pipeline config, for a module without ``tuner_fn``.

    The module's :class:`trainer.TrainSpec` builds, compiles and trains each trial's model
    (``model`` / ``loss`` / ``optimizer`` / ``metrics``, ``train_dataset`` /
    ``eval_dataset``); its ``default_hyperparameters()`` values not in the space stay
    fixed, so the best hyperparameters hold every value the spec reads.

    Example (the ``search_space`` section of a pipeline YAML, as Determined's configs
    declare one)::

        search_space:
          algorithm: bayesian           # random | grid | bayesian | hyperband
          objective: val_sparse_categorical_accuracy
          direction: max                # optional for metrics keras-tuner knows
          max_trials: 8
          seed: 42
          hyperparameters:
            learning_rate: {type: float, min: 1.0e-4, max: 1.0e-1, log: true}
            num_layers: {type: int, min: 1, max: 3}
            units: {type: categorical, values: [8, 16, 32]}

    Attributes:
      parameters: the hyperparameters searched.
      algorithm: the keras-tuner oracle.
      objective / direction: the metric to optimize (``val_`` metrics need eval data).
      max_trials: the oracle's budget (Hyperband: its ``max_epochs`` and brackets decide).
      max_epochs: Hyperband's most epochs of ``train_steps`` steps for one model.
      seed: the oracle's seed.
    """

    parameters: tuple[SearchParameter, ...]
    algorithm: SearchAlgorithm = SearchAlgorithm.RANDOM
    objective: str = "val_loss"
    direction: Optional[Direction] = None
    max_trials: int = 10
    max_epochs: int = 3
    seed: Optional[int] = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "search_space") -> SearchSpace:
        """Reads the config section shown in the class docstring.

        Raises:
          PipelineError: an unknown key or type, a missing or empty range, or a log range
            that reaches 0; the message names the key.
        """
        if not isinstance(data, Mapping):
            raise PipelineError(f"{where} is not a mapping; write it as in the docs' example.")
        unknown = set(data) - _SPACE_KEYS - {"hyperparameters"}
        if unknown:
            raise PipelineError(
                f"{where} has unknown key(s) {sorted(unknown)}; use "
                f"{sorted(_SPACE_KEYS | {'hyperparameters'})}."
            )
        declared = data.get("hyperparameters")
        if not isinstance(declared, Mapping) or not declared:
            raise PipelineError(
                f"{where}.hyperparameters is missing or empty; declare at least one, e.g. "
                "learning_rate: {type: float, min: 1.0e-4, max: 1.0e-1, log: true}."
            )
        parameters = tuple(
            _parameter(str(name), spec, f"{where}.hyperparameters.{name}")
            for name, spec in declared.items()
        )
        direction = data.get("direction")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise PipelineError(f"{where}.seed is {seed!r}; use a whole number.")
        return cls(
            parameters=parameters,
            algorithm=_enum(SearchAlgorithm, data.get("algorithm", "random"), f"{where}.algorithm"),
            objective=str(data.get("objective", "val_loss")),
            direction=None
            if direction is None
            else _enum(Direction, direction, f"{where}.direction"),
            max_trials=_positive_int(data.get("max_trials", 10), f"{where}.max_trials"),
            max_epochs=_positive_int(data.get("max_epochs", 3), f"{where}.max_epochs"),
            seed=seed,
        )

    def hyperparameters(self) -> keras_tuner.HyperParameters:
        """The space as keras-tuner ``HyperParameters``."""
        import keras_tuner

        hp = keras_tuner.HyperParameters()
        for parameter in self.parameters:
            parameter.register(hp)
        return hp


def _parameter(name: str, spec: Any, where: str) -> SearchParameter:
    if not isinstance(spec, Mapping):
        raise PipelineError(f"{where} is not a mapping; write e.g. {{type: int, min: 1, max: 3}}.")
    unknown = set(spec) - _PARAMETER_KEYS
    if unknown:
        raise PipelineError(
            f"{where} has unknown key(s) {sorted(unknown)}; use {sorted(_PARAMETER_KEYS)}."
        )
    kind = _enum(ParameterType, spec.get("type", ""), f"{where}.type")
    log = bool(spec.get("log", False))
    if kind is ParameterType.CATEGORICAL:
        values = spec.get("values")
        if not isinstance(values, (list, tuple)) or not values:
            raise PipelineError(f"{where}.values is missing or empty; list the choices.")
        return SearchParameter(name, kind, values=tuple(values))
    low, high, step = spec.get("min"), spec.get("max"), spec.get("step")
    number = int if kind is ParameterType.INT else (int, float)
    for key, value in (("min", low), ("max", high), ("step", step)):
        if (value is not None or key != "step") and (
            isinstance(value, bool) or not isinstance(value, number)
        ):
            wanted = "a whole number" if kind is ParameterType.INT else "a number"
            raise PipelineError(f"{where}.{key} is {value!r}; give {wanted}.")
    if low > high:
        raise PipelineError(f"{where} has min {low} above max {high}; swap them.")
    if log and low <= 0:
        raise PipelineError(f"{where} samples log-uniformly from min {low}; use a min above 0.")
    return SearchParameter(name, kind, min=low, max=high, step=step, log=log)


@dataclasses.dataclass(frozen=True)
class TuningJob:
    """What every trial of one search needs (plain values: it travels to the workers).

    Attributes:
      module_file: the module file's path as the user gave it.
      module_source: its text, so a worker without the launcher's disk can load it.
      staged: the run's staged copy of the module and its folder, which workers load (so
        the module's helper modules import there too); None: ``module_file`` itself.
      train_files / eval_files: file patterns of the transformed examples.
      transform_graph_path: the tf.Transform output folder.
      schema_path: the raw schema (``schema.pbtxt``), or None.
      tuner_dir: the shared tuner folder: ``fn_args.working_dir`` on the launcher; the
        tuner project (oracle state, trial checkpoints, results) lives in it.
      train_steps / eval_steps: the tuning run's ``fn_args.train_steps`` / ``eval_steps``.
      custom_config: reaches ``fn_args.custom_config``.
      threads_per_trial: TensorFlow intra-op threads of a trial's process (0: TF's default).
      search_space: a search space declared in the pipeline config; with it, a module
        whose model is a :class:`trainer.TrainSpec` subclass is tuned without a
        ``tuner_fn`` (see :class:`SearchSpace`).
      entry_point: the TrainSpec subclass to tune with a search space, when the module
        has several (the trainer's ``entry_point``).
    """

    module_file: str
    module_source: Optional[str]
    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    transform_graph_path: str
    schema_path: Optional[str]
    tuner_dir: str
    train_steps: int
    eval_steps: int
    custom_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    threads_per_trial: int = 0
    search_space: Optional[SearchSpace] = None
    entry_point: Optional[str] = None
    staged: Optional[StagedModule] = None


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """One trial to run: a Beam element.

    Attributes:
      trial_id: the oracle's trial id.
      attempt: 0 for the first run of the trial, n for the oracle's n-th retry of it.
      hyperparameters: the trial's ``HyperParameters.get_config()`` (Hyperband's
        ``tuner/epochs``, ``tuner/initial_epoch`` and ``tuner/trial_id`` among its values).
      project_dir: the tuner project's shared folder (trial checkpoints are read and
        written there).
      round: the round of the search that asked for it (0-based).
    """

    trial_id: str
    attempt: int
    hyperparameters: Mapping[str, Any]
    project_dir: str
    round: int = 0


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """What one attempt of a trial did.

    Attributes:
      trial_id / attempt: which trial attempt.
      status: COMPLETED, INVALID (raised) or FAILED (``FailedTrialError``).
      hyperparameters: the trial's HyperParameters config after the model was built (a
        build may register new hyperparameters; the oracle learns them from here).
      metrics: the objective and the other metrics at the best epoch (COMPLETED only).
      best_step: the best epoch, as keras-tuner reports it.
      error: ``ErrorType: message (module.py:line)`` when the trial raised.
      traceback: the full traceback when it raised.
      fatal: the error ends the whole search (keras-tuner's ``FatalError``, or a
        ``tuner_fn`` that fails on the worker).
      seconds: wall time of the attempt (build + fit).
      started: when the attempt started (seconds since the epoch, the worker's clock).
      worker: ``host:pid`` of the process that ran it.
      reused: the result of an earlier, finished run of this attempt (a runner retry).
    """

    trial_id: str
    attempt: int
    status: TrialStatus
    hyperparameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    best_step: int = 0
    error: Optional[str] = None
    traceback: Optional[str] = None
    fatal: bool = False
    seconds: float = 0.0
    worker: str = ""
    reused: bool = False
    started: float = 0.0

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialResult:
        d = json.loads(text)
        d["status"] = TrialStatus(d["status"])
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One row of the trials table.

    Attributes:
      trial_id: the oracle's trial id.
      status: COMPLETED or FAILED (INVALID while a retry is pending).
      objective: the oracle's score of the trial (None unless COMPLETED).
      hyperparameters: the trial's hyperparameter values.
      metrics: its metrics at the best epoch.
      seconds: wall time of its last attempt.
      started: when its last attempt started (seconds since the epoch, the worker's clock).
      worker: ``host:pid`` of the process that ran its last attempt.
      attempts: how many times it ran.
      round: the round of its last attempt.
      error: why it failed.
    """

    trial_id: str
    status: TrialStatus
    objective: Optional[float]
    hyperparameters: Mapping[str, Any]
    metrics: Mapping[str, float]
    seconds: float
    worker: str
    attempts: int
    round: int
    error: Optional[str] = None
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d


def limit_threads(threads: int) -> bool:
    """Caps this process's TensorFlow thread pools so parallel trials do not fight for cores.

    Call it before TensorFlow runs its first op (first thing in a worker process): the
    pools cannot be resized after that.

    Args:
      threads: intra-op threads (inter-op get at least 2); 0 or less leaves TF's default.

    Returns:
      True when the pools have that size now.
    """
    if threads <= 0:
        return False
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
    except RuntimeError:  # TF already initialized in this process; keep what it has.
        have = tf.config.threading.get_intra_op_parallelism_threads()
        if have != threads:
            _LOG.info("TensorFlow already runs %s intra-op threads; not %d.", have, threads)
        return have == threads
    return True


def prewarm() -> None:
    """Imports what a trial needs (seconds of imports), so a warm worker's first trial is fast."""
    import keras  # noqa: F401
    import keras_tuner  # noqa: F401
    import tensorflow  # noqa: F401
    import tensorflow_transform  # noqa: F401
    from tfx_bsl.public import tfxio  # noqa: F401


def _result_path(project_dir: str, trial_id: str, attempt: int) -> str:
    return fileio.join(project_dir, f"trial_{trial_id}", f"{_RESULT_PREFIX}{attempt}.json")


def read_trial_result(project_dir: str, trial_id: str, attempt: int) -> Optional[TrialResult]:
    """The result an earlier run of this trial attempt left, or None."""

    path = _result_path(project_dir, trial_id, attempt)
    if not fileio.exists(path):
        return None
    with fileio.open(path) as f:
        return TrialResult.from_json(f.read())


def _write_trial_result(project_dir: str, result: TrialResult) -> None:

    path = _result_path(project_dir, result.trial_id, result.attempt)
    fileio.makedirs(fileio.join(project_dir, f"trial_{result.trial_id}"))
    fileio.write_atomic(path, result.to_json())


def _fn_args(job: TuningJob, working_dir: str, strategy=None) -> FnArgs:
    return FnArgs(
        working_dir=working_dir,
        train_files=list(job.train_files),
        eval_files=list(job.eval_files),
        train_steps=job.train_steps,
        eval_steps=job.eval_steps,
        schema_path=job.schema_path,
        transform_graph_path=job.transform_graph_path,
        data_accessor=DataAccessor(telemetry_descriptors=("beam_pipeline", "Tuner")),
        custom_config=dict(job.custom_config),
        num_examples=ExampleCounts({"train": job.train_files, "eval": job.eval_files}),
        strategy=strategy,
    )


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def load_tuner(job: TuningJob, working_dir: str, *, strategy=None) -> TunerFnResult:
    """Loads the module file and calls its ``tuner_fn`` with the tuning ``FnArgs``.

    The tuner's project folder is then set to ``<job.tuner_dir>/<project_name>`` whatever
    ``directory`` the module gave it, so every process reads and writes the same one.

    Args:
      job: the tuning job.
      working_dir: ``fn_args.working_dir``: the tuner folder on the launcher; a folder of
        its own per worker process (so a tuner created with ``overwrite=True`` clears only
        that folder, never the shared project).
      strategy: reaches ``fn_args.strategy``.

    Returns:
      the :class:`TunerFnResult` (``fit_kwargs`` as a dict).

    Raises:
      PipelineError: the module file fails to load, defines no ``tuner_fn``, or
        ``tuner_fn`` raises or returns something other than a tuner and fit_kwargs.
    """
    return _load_tuner(job, working_dir, strategy)[0]


def _load_tuner(job: TuningJob, working_dir: str, strategy=None) -> tuple[TunerFnResult, str]:
    """:func:`load_tuner`, plus the path the module was executed from (for error places)."""
    import keras_tuner

    loaded = load_trainer_module(
        job.module_file,
        source=job.module_source,
        entry_point=job.entry_point,
        staged=job.staged,
    )
    tuner_fn = getattr(loaded.module, "tuner_fn", None)
    if callable(tuner_fn) and job.search_space is not None:
        raise PipelineError(
            f"Module file {job.module_file} defines tuner_fn and the pipeline config declares "
            "a search_space; keep one of them."
        )
    if job.search_space is not None:
        if loaded.kind is not ModuleKind.SPEC:
            raise PipelineError(
                f"The pipeline config declares a search_space but module file "
                f"{job.module_file} trains with {loaded.kind.value}, not a TrainSpec subclass; "
                "define tuner_fn(fn_args) instead, or train with a TrainSpec."
            )
        fn_args = _fn_args(job, working_dir, strategy)
        result = _spec_tuner(loaded.spec_class, job.search_space, fn_args)
        return result, str(loaded.module.__file__ or job.module_file)
    if not callable(tuner_fn):
        raise PipelineError(
            f"Module file {job.module_file} defines no tuner_fn(fn_args); add one that returns "
            "TunerFnResult(tuner=..., fit_kwargs=...), or pass --no_tuner."
        )
    try:
        result = tuner_fn(_fn_args(job, working_dir, strategy))
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001  user code: say where it failed
        where = error_place(e, loaded.module.__file__ or job.module_file, job.module_file)
        _LOG.exception("tuner_fn in %s failed.", job.module_file)
        raise PipelineError(
            f"tuner_fn in {where} raised {type(e).__name__} ({_one_line(e)}); fix the module "
            "file (the full traceback is in the log)."
        ) from None
    tuner = getattr(result, "tuner", None)
    fit_kwargs = getattr(result, "fit_kwargs", None)
    if not isinstance(tuner, keras_tuner.engine.base_tuner.BaseTuner) or not isinstance(
        fit_kwargs, Mapping
    ):
        raise PipelineError(
            f"tuner_fn in {job.module_file} returned {type(result).__name__}, not "
            "TunerFnResult(tuner=<a keras_tuner tuner>, fit_kwargs=<dict>); return "
            "`TunerFnResult(tuner=tuner, fit_kwargs={...})` (from trainer import TunerFnResult)."
        )
    project_dir = fileio.join(job.tuner_dir, tuner.project_name)
    if os.path.normpath(str(tuner.project_dir)) != os.path.normpath(project_dir):
        _set_project_dir(tuner, project_dir)
    return TunerFnResult(tuner=tuner, fit_kwargs=dict(fit_kwargs)), str(
        loaded.module.__file__ or job.module_file
    )


def _spec_tuner(spec_class: type, space: SearchSpace, fn_args: FnArgs) -> TunerFnResult:
    """A keras-tuner tuner over ``space`` whose trials train with the module's TrainSpec."""
    import keras_tuner

    from trainer.export import model_input_names

    class SpecHyperModel(keras_tuner.HyperModel):
        """Builds and fits a trial's model with the TrainSpec (made once per process)."""

        def __init__(self) -> None:
            super().__init__(name=spec_class.__name__)
            self._spec = None

        def spec(self):
            if self._spec is None:
                import tensorflow_transform as tft

                spec = spec_class()
                spec.fn_args = fn_args
                spec.tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
                spec.setup()
                self._spec = spec
            return self._spec

        def build(self, hp):
            spec = self.spec()
            model = spec.model(hp)
            model.compile(
                optimizer=spec.optimizer(hp), loss=spec.loss(hp), metrics=spec.metrics(hp)
            )
            return model

        def fit(self, hp, model, *args, **kwargs):
            spec, names = self.spec(), model_input_names(model)
            return model.fit(
                _model_inputs(spec.train_dataset(hp), names),
                steps_per_epoch=fn_args.train_steps,
                validation_data=_model_inputs(spec.eval_dataset(hp), names),
                validation_steps=fn_args.eval_steps,
                **kwargs,
            )

    hypermodel = SpecHyperModel()
    # The spec's defaults that the space does not search stay fixed at their values.
    hp = keras_tuner.HyperParameters()
    searched = {p.name for p in space.parameters}
    defaults = hypermodel.spec().default_hyperparameters()
    for name, value in defaults.values.items():
        if name not in searched:
            hp.Fixed(name, value)
    hp.merge(space.hyperparameters())
    objective = (
        keras_tuner.Objective(space.objective, space.direction.value)
        if space.direction is not None
        else space.objective
    )
    common = dict(
        hypermodel=hypermodel,
        objective=objective,
        hyperparameters=hp,
        tune_new_entries=False,
        seed=space.seed,
        directory=fn_args.working_dir,
        project_name=f"{spec_class.__name__}_tuning",
    )
    if space.algorithm is SearchAlgorithm.HYPERBAND:
        tuner = keras_tuner.Hyperband(max_epochs=space.max_epochs, **common)
    else:
        kind = {
            SearchAlgorithm.RANDOM: keras_tuner.RandomSearch,
            SearchAlgorithm.GRID: keras_tuner.GridSearch,
            SearchAlgorithm.BAYESIAN: keras_tuner.BayesianOptimization,
        }[space.algorithm]
        tuner = kind(max_trials=space.max_trials, **common)
    return TunerFnResult(tuner=tuner, fit_kwargs={"verbose": 0})


def _model_inputs(dataset, names: Optional[Sequence[str]]):
    """Keeps only the model's inputs in (features, label) elements, as the spec runner does."""
    spec = dataset.element_spec
    if names is None or not (isinstance(spec, tuple) and isinstance(spec[0], Mapping)):
        return dataset
    return dataset.map(lambda features, label: ({k: features[k] for k in names}, label))


def _set_project_dir(tuner: keras_tuner.engine.base_tuner.BaseTuner, project_dir: str) -> None:
    """Points the tuner and its oracle at ``project_dir`` (what their constructor does)."""
    directory, name = (
        posixpath.split(project_dir) if "://" in project_dir else os.path.split(project_dir)
    )
    tuner.directory = directory
    tuner.project_name = name
    tuner.oracle._set_project_dir(directory, name)  # pylint: disable=protected-access


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

    def _tuner(self) -> TunerFnResult:
        if self._loaded is None:
            from trainer.strategy import choose_strategy

            working_dir = fileio.join(
                self._job.tuner_dir,
                _WORKERS_SUBDIR,
                f"{socket.gethostname()}-{os.getpid()}",
            )
            self._loaded, self._module_path = _load_tuner(
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
            result = TrialResult(
                spec.trial_id,
                spec.attempt,
                TrialStatus.FAILED,
                dict(spec.hyperparameters),
                error=str(e),
                fatal=True,
                seconds=round(time.time() - start, 3),
                worker=worker_name(),
                started=round(start, 3),
            )
            _write_trial_result(spec.project_dir, result)
            return result
        if loaded.tuner.project_dir != spec.project_dir:
            _set_project_dir(loaded.tuner, spec.project_dir)
        result = self._execute(loaded, spec, start)
        _write_trial_result(spec.project_dir, result)
        return result

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
        try:
            returned = tuner.run_trial(trial, **loaded.fit_kwargs)
            tuner_utils.validate_trial_results(returned, objective, "Tuner.run_trial()")
            metrics = {
                str(k): float(v)
                for k, v in tuner_utils.convert_to_metrics_dict(returned, objective).items()
            }
            step = int(tuner_utils.get_best_step(returned, objective))
        except Exception as e:  # noqa: BLE001  a trial's error is its result, as in keras-tuner
            trace = traceback.format_exc()
            where = error_place(e, self._module_path, self._job.module_file)
            error = f"{type(e).__name__}: {_one_line(e)} ({where})"
            fatal = isinstance(e, keras_tuner.errors.FatalError)
            failed = fatal or isinstance(e, keras_tuner.errors.FailedTrialError)
            status = TrialStatus.FAILED if failed else TrialStatus.INVALID
            _LOG.warning("Trial %s raised %s", spec.trial_id, error)
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
            seconds=round(time.time() - start, 3),
            worker=worker_name(),
            started=round(start, 3),
        )


class OracleRounds:
    """Drives a keras-tuner oracle in rounds of up to ``parallel_trials`` trials (launcher side).

    Two ways to drive it, both asking the oracle from this one place:

    - synchronous rounds: :meth:`next_round` asks a trial for every slot, the caller runs
      them all and reports them all with :meth:`report`, then asks again;
    - rolling rounds: :meth:`ask` asks trials for the free slots only (``count`` of them)
      while other slots' trials still run, and :meth:`report` ends just the trials given.
      A slot that frees gets its next trial at once, as a keras-tuner worker asks the
      oracle for its next trial when it is done; no slot waits for a round's slowest trial.

    Each slot has its own tuner id, so the oracle hands out that many trials at once, as
    it would to that many keras-tuner workers.

    Args:
      tuner: the launcher's tuner (from :func:`load_tuner`); its oracle is driven.
      parallel_trials: slots: trials that run at once.
      max_trials: caps the oracle's own ``max_trials`` (Hyperband has none by default).
      module_file: named in error messages.

    Raises:
      PipelineError: ``parallel_trials`` or ``max_trials`` below 1.
    """

    def __init__(
        self,
        tuner: keras_tuner.engine.base_tuner.BaseTuner,
        parallel_trials: int,
        max_trials: Optional[int] = None,
        module_file: str = "",
    ) -> None:
        if parallel_trials < 1 or (max_trials is not None and max_trials < 1):
            raise PipelineError(
                f"--tuner_parallel_trials={parallel_trials} / --tuner_max_trials={max_trials} "
                "are out of range; pass values of at least 1."
            )
        self._tuner = tuner
        self._oracle = tuner.oracle
        self._module_file = module_file
        if max_trials is not None and not self._oracle.trials:
            own = self._oracle.max_trials
            self._oracle.max_trials = max_trials if own is None else min(own, max_trials)
        self._oracle.verbose = 0  # the stage reports the trials; keras-tuner would print them
        self._tuner_ids = tuple(f"beam-trial-slot-{i}" for i in range(parallel_trials))
        self._results: dict[str, TrialResult] = {}
        self._pending: dict[str, tuple[str, TrialSpec]] = {}  # trial id -> (tuner id, spec)
        self._round_of: dict[str, int] = {}
        self.rounds = 0

    @property
    def project_dir(self) -> str:
        """The tuner project's shared folder."""
        return str(self._tuner.project_dir)

    @property
    def objective(self) -> tuple[str, str]:
        """(name, direction) of the oracle's objective."""
        return self._oracle.objective.name, self._oracle.objective.direction

    @property
    def slots(self) -> int:
        """How many trials run at once."""
        return len(self._tuner_ids)

    @property
    def running(self) -> list[TrialSpec]:
        """The trials asked for and not reported yet."""
        return [spec for _, spec in self._pending.values()]

    def next_round(self) -> list[TrialSpec]:
        """Asks the oracle for the next round's trials; an empty list when the search is over.

        Raises:
          PipelineError: the previous round was not reported.
        """
        if self._pending:
            raise PipelineError(
                "OracleRounds.next_round was called before the previous round's results were "
                "reported; call report() first."
            )
        return self.ask()

    def ask(self, count: Optional[int] = None) -> list[TrialSpec]:
        """Asks the oracle for trials for up to ``count`` free slots (default: all free ones).

        The trials asked in one call form one round. An empty list means the oracle has
        nothing to run now: the search is over when no trial is running either; otherwise
        it may wait for running trials (Hyperband's next rung), so ask again after a report.
        """
        busy = {tuner_id for tuner_id, _ in self._pending.values()}
        free = [t for t in self._tuner_ids if t not in busy]
        specs = []
        for tuner_id in free[:count] if count is not None else free:
            trial = self._oracle.create_trial(tuner_id)
            if trial.status != "RUNNING":
                # STOPPED: the search is over; IDLE: the oracle waits for running trials
                # (Hyperband's next rung). Either way, no more trials this round.
                break
            run_times = getattr(self._oracle, "_run_times", {})
            spec = TrialSpec(
                trial_id=trial.trial_id,
                attempt=int(run_times.get(trial.trial_id, 0)),
                hyperparameters=trial.hyperparameters.get_config(),
                project_dir=self.project_dir,
                round=self.rounds,
            )
            self._pending[spec.trial_id] = (tuner_id, spec)
            self._round_of[spec.trial_id] = self.rounds
            specs.append(spec)
        if specs:
            self.rounds += 1
        return specs

    def report(
        self,
        results: Mapping[str, TrialResult],
        trials: Optional[Sequence[TrialSpec]] = None,
    ) -> None:
        """Reports trials' results to the oracle (trial id order) and saves its state.

        Args:
          results: results by trial id.
          trials: the trials to end (their slots free up); default: every running trial.
            A trial with no result (its worker was lost for good) is reported as raised.

        Raises:
          PipelineError: a fatal trial error, or keras-tuner's limit of consecutive
            failed trials was reached.
        """
        import keras_tuner

        ended = self.running if trials is None else list(trials)
        for spec in ended:
            self._pending.pop(spec.trial_id, None)
        for spec in sorted(ended, key=lambda s: s.trial_id):
            result = results.get(spec.trial_id)
            if result is None:
                result = TrialResult(
                    spec.trial_id,
                    spec.attempt,
                    TrialStatus.INVALID,
                    dict(spec.hyperparameters),
                    error="no result came back from the worker that ran it",
                )
            self._results[spec.trial_id] = result
            if result.fatal:
                raise PipelineError(
                    f"Trial {spec.trial_id} hit an error that stops the whole search "
                    f"({result.error}); fix tuner_fn or the model in {self._module_file}."
                )
            trial = self._oracle.get_trial(spec.trial_id)
            if result.hyperparameters:
                trial.hyperparameters = keras_tuner.HyperParameters.from_config(
                    dict(result.hyperparameters)
                )
            status = result.status
            if status is TrialStatus.COMPLETED:
                try:
                    self._oracle.update_trial(
                        spec.trial_id, dict(result.metrics), step=result.best_step
                    )
                except ValueError as e:  # the objective is not among the metrics
                    status = TrialStatus.FAILED
                    self._results[spec.trial_id] = dataclasses.replace(
                        result, status=status, error=f"ValueError: {_one_line(e)}"
                    )
            trial.status = status.value
            trial.message = result.traceback or self._results[spec.trial_id].error
            try:
                self._oracle.end_trial(trial)
            except RuntimeError as e:
                if "consecutive failures" not in str(e):
                    raise
                limit = self._oracle.max_consecutive_failed_trials
                raise PipelineError(
                    f"Tuning stopped: {limit} trials in a row failed (keras-tuner's "
                    f"max_consecutive_failed_trials={limit}), the last one with "
                    f"{self._results[spec.trial_id].error}; fix the model or the search space "
                    f"in {self._module_file}."
                ) from None
        self._oracle.save()

    def records(self) -> list[TrialRecord]:
        """The trials table, in the order the trials started."""
        rows = []
        order = list(self._oracle.start_order) or sorted(self._oracle.trials)
        for trial_id in order:
            trial = self._oracle.trials[trial_id]
            result = self._results.get(trial_id)
            try:
                status = TrialStatus(trial.status)
            except ValueError:  # RUNNING: asked for but never reported
                status = TrialStatus.INVALID
            completed = status is TrialStatus.COMPLETED
            rows.append(
                TrialRecord(
                    trial_id=trial_id,
                    status=status,
                    objective=float(trial.score) if completed and trial.score is not None else None,
                    hyperparameters=dict(trial.hyperparameters.values),
                    metrics=dict(result.metrics) if result else {},
                    seconds=result.seconds if result else 0.0,
                    worker=result.worker if result else "",
                    attempts=(result.attempt + 1) if result else 0,
                    round=self._round_of.get(trial_id, -1),
                    error=None if completed or not result else result.error,
                    started=result.started if result else 0.0,
                )
            )
        return rows

    def best_hyperparameters(self) -> Optional[dict[str, Any]]:
        """The best completed trial's HyperParameters config, or None when none completed."""
        best = self._oracle.get_best_trials(1)
        if not best or best[0].status != TrialStatus.COMPLETED.value:
            return None
        return best[0].hyperparameters.get_config()

    def best_trial_id(self) -> Optional[str]:
        """The id of the best completed trial, or None when none completed."""
        best = self._oracle.get_best_trials(1)
        if not best or best[0].status != TrialStatus.COMPLETED.value:
            return None
        return best[0].trial_id

    def last_error(self) -> Optional[str]:
        """The error of the last trial that failed, if any."""
        failed = [r for r in self._results.values() if r.error]
        return failed[-1].error if failed else None
