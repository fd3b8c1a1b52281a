"""Typed pipeline configuration.

Flags and YAML config files are turned into these frozen dataclasses once, at the entry
point (:mod:`beam_pipeline.cli`); every stage receives typed config, never loose dicts or
JSON strings.

Example::

    cfg = PipelineConfig(data=DataConfig(data="data/*.csv"), module_file="my_module.py")
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES, DataFormat, Split

if TYPE_CHECKING:
    # For the annotation only: the CLI reads flags into this config before anything heavy
    # loads, and importing the trainer package costs about a second (cli.py imports
    # SearchSpace when a config declares a search space).
    from beam_pipeline.engine.stage import StageName
    from trainer.tuning.search_space import SearchSpace

__all__ = [
    "DataConfig",
    "TransformConfig",
    "TrainerConfig",
    "TunerConfig",
    "EvaluatorConfig",
    "PusherConfig",
    "BulkInferrerConfig",
    "PipelineConfig",
    "BUNDLED_EXAMPLE_DIR",
    "BUNDLED_CONFIG",
    "parse_custom_config",
    "check_run_id",
    "DEFAULT_CSV_MAX_FIELD_BYTES",
]

BUNDLED_EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "examples", "penguin")
BUNDLED_CONFIG = os.path.join(BUNDLED_EXAMPLE_DIR, "pipeline.yaml")


# One path segment: a run id names a folder under <pipeline_root>/runs and nothing else.
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _check_int(flag: str, value: object, minimum: int, why: str = "") -> None:
    """Refuses a value of an integer flag that is not a whole number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PipelineError(
            f"--{flag}={value!r} is out of range: pass a whole number of at least {minimum}{why}."
        )


def check_run_id(run_id: str) -> None:
    """Refuses a ``--run_id`` that is not one path segment of safe characters.

    Raises:
      PipelineError: ``run_id`` is empty, ``.``/``..``, holds a slash, or is an absolute
        path, any of which would write outside ``<pipeline_root>/runs/``.
    """
    if not isinstance(run_id, str) or not _RUN_ID_RE.fullmatch(run_id):
        raise PipelineError(
            f"--run_id={run_id!r} is not a run name: use 1 to 128 letters, digits, '.', '_' or "
            "'-' starting with a letter or digit (it names one folder under "
            "<pipeline_root>/runs), or leave it out for a timestamp."
        )


def parse_custom_config(text: str) -> dict[str, Any]:
    """``--custom_config`` text -> the dict ``fn_args.custom_config`` receives.

    Raises:
      PipelineError: the text is not JSON, or not a JSON object.
    """
    try:
        parsed = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise PipelineError(
            f"--custom_config is not valid JSON ({e.msg} at column {e.colno}); pass a JSON "
            "object such as '{\"epochs\": 3}'."
        ) from None
    if not isinstance(parsed, dict):
        raise PipelineError(
            f"--custom_config is a JSON {type(parsed).__name__}, not an object; pass a JSON "
            "object such as '{\"epochs\": 3}'."
        )
    return parsed


class TunerSchedule(str, enum.Enum):
    """How the tuner's trials are handed to workers.

    ROLLING: a worker that finishes a trial gets the next one at once (each trial is its
    own small job, several run at a time); every worker stays busy, but an adaptive
    oracle (BayesianOptimization) sees results in the order they finish.
    ROUNDS: synchronous rounds of ``parallel_trials`` trials; the next round starts when
    the round's slowest trial ends; an adaptive oracle's trials are the same on a rerun.
    SEARCH_JOB: one job for the whole search: a long-lived loop per slot, each on its own
    worker, claims the next trial from the oracle's state in the run's storage (an atomic
    compare-and-swap per ask and report), runs it and reports it; a lost worker's trial is
    re-issued when its lease (``lease_seconds``) runs out. No job start-up per trial.

    Left unset, the runner decides (:func:`beam_pipeline.stages.tuner.tuning.default_schedule`):
    SEARCH_JOB where every job starts workers of its own (Dataflow, Flink, Spark, a portable
    job server), ROLLING on the DirectRunner and Beam's embedded job service.
    """

    ROLLING = "rolling"
    ROUNDS = "rounds"
    SEARCH_JOB = "search_job"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the input data is and how ExampleGen reads, splits and checks it.

    Attributes:
      data: a file, a folder or a glob (local or any Beam filesystem such as gs://).
      data_format: CSV or TFRecord of tf.Example; AUTO decides by file name.
      csv_delimiter: the CSV field separator.
      csv_null_values: field values that mean "missing" (the empty field always does).
      split_buckets: (split, buckets) pairs for the deterministic hash split.
      input_splits: (split, file pattern) pairs when the input is already split; replaces
        the hash split.
      partition_feature: rows with the same value of this column land in the same split.
      max_rejected_fraction: the run fails when more than this fraction of rows is rejected.
      schema: a user-provided schema.pbtxt that replaces schema inference.
      infer_feature_shape: required single-valued features get a fixed shape [1] in the
        inferred schema (dense tensors in tf.Transform), as TFX's SchemaGen option.
      max_string_domain_size: strings with at most this many distinct values get a domain.
      ignore_anomalies: report blocking anomalies but go on.
      csv_max_field_bytes: a CSV row with a field longer than this (UTF-8 bytes) is
        rejected.
      drift_threshold: the drift threshold of every feature whose schema sets no
        ``drift_comparator`` (L-infinity distance for categorical features, approximate
        Jensen-Shannon divergence for numeric ones) against the previous run's statistics;
        None: the schema's thresholds only.
      skew_threshold: the same for ``skew_comparator``: eval (and test) against train.
      span_window: with ``{SPAN}`` in ``data``: how many of the latest spans are read.
      spans: with ``{SPAN}`` in ``data``: the spans read, (first, last), instead.
    """

    data: str = ""
    data_format: DataFormat = DataFormat.AUTO
    csv_delimiter: str = ","
    csv_null_values: tuple[str, ...] = ("",)
    split_buckets: tuple[tuple[Split, int], ...] = ((Split.TRAIN, 2), (Split.EVAL, 1))
    input_splits: tuple[tuple[Split, str], ...] = ()
    partition_feature: Optional[str] = None
    max_rejected_fraction: float = 0.0
    schema: Optional[str] = None
    infer_feature_shape: bool = True
    max_string_domain_size: int = 100
    ignore_anomalies: bool = False
    csv_max_field_bytes: int = DEFAULT_CSV_MAX_FIELD_BYTES
    drift_threshold: Optional[float] = None
    skew_threshold: Optional[float] = None
    span_window: int = 1
    spans: Optional[tuple[int, int]] = None

    def __post_init__(self):
        _check_int("span_window", self.span_window, 1)
        if self.spans is not None and not 0 <= self.spans[0] <= self.spans[1]:
            raise PipelineError(
                f"--spans={self.spans[0]}:{self.spans[1]} is not a range of spans; pass "
                "FIRST:LAST with FIRST <= LAST, e.g. --spans=1:3."
            )
        if (self.spans is not None or self.span_window != 1) and not (
            "{SPAN}" in self.data or "{YYYY}" in self.data
        ):
            raise PipelineError(
                "--spans and --span_window need {SPAN} or {YYYY}{MM}{DD} in --data (e.g. "
                "--data='root/span-{SPAN}/*.csv'); add it or drop them."
            )
        for flag in ("drift_threshold", "skew_threshold"):
            t = getattr(self, flag)
            if t is not None and (
                isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1
            ):
                raise PipelineError(
                    f"--{flag}={t!r} is out of range: pass a distance from 0 to 1, e.g. 0.1."
                )
        # Checked here, when flags become config, so that a bad value stops the run before
        # any file is written or any Beam job runs.
        f = self.max_rejected_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            # NaN fails both comparisons, so it is refused too (it would turn the guard off).
            raise PipelineError(
                f"--max_rejected_fraction={f!r} is out of range: pass a number from 0 to 1 "
                "(the share of input rows that may be rejected), e.g. 0.01."
            )
        _check_int("max_string_domain_size", self.max_string_domain_size, 0)
        _check_int("csv_max_field_bytes", self.csv_max_field_bytes, 1)
        if not self.split_buckets:
            raise PipelineError(
                "--split_buckets names no split; pass e.g. --split_buckets=train=2,eval=1."
            )
        for split, n in self.split_buckets:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise PipelineError(
                    f"--split_buckets gives {split.value} {n!r} buckets: pass a whole number of "
                    "at least 1 for each split, e.g. --split_buckets=train=2,eval=1."
                )
        for flag, pairs, example in (
            ("split_buckets", self.split_buckets, "train=2,eval=1"),
            ("input_splits", self.input_splits, "train=PATTERN,eval=PATTERN"),
        ):
            names = [s.value for s, _ in pairs]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise PipelineError(
                    f"--{flag} names split {twice[0]} twice; name each split once, e.g. "
                    f"--{flag}={example}."
                )
        if Split.TRAIN not in self.splits:
            flag, example = (
                ("input_splits", "train=PATTERN")
                if self.input_splits
                else ("split_buckets", "train=N")
            )
            raise PipelineError(f"--{flag} has no train split; add {example}.")

    @property
    def splits(self) -> tuple[Split, ...]:
        if self.input_splits:
            return tuple(s for s, _ in self.input_splits)
        return tuple(s for s, _ in self.split_buckets)


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """tf.Transform settings.

    Attributes:
      analyzer_cache: reuse tf.Transform's analyzer cache across runs of the same
        pipeline root (kept under ``<pipeline_root>/cache/transform``).
    """

    analyzer_cache: bool = True


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Settings of the training stage (TFX's TrainArgs/EvalArgs and more).

    Attributes:
      enabled: False skips training even when the module defines ``run_fn``.
      train_steps / eval_steps: reach ``fn_args.train_steps`` / ``fn_args.eval_steps``.
      hyperparameters: path of a Keras Tuner ``HyperParameters`` config JSON.
      base_model: a SavedModel directory to warm-start from (``fn_args.base_model``).
      accelerator: Beam resource hint, e.g. ``type:nvidia-l4;count:1;install-nvidia-driver``.
      min_ram: Beam resource hint, e.g. ``16GB``.
      custom_config: JSON object text reaching ``fn_args.custom_config`` as a dict.
      entry_point: the module's ``run_fn``-like function or TrainSpec subclass to train
        with (default: ``run_fn``, else the module's only TrainSpec subclass).
      mixed_precision: a TrainSpec's model computes in float16 on GPUs, bfloat16 on CPUs
        (training and tuning); a ``run_fn`` gets the policy's name in
        ``fn_args.mixed_precision`` (see :mod:`trainer.precision`).
      warm_start: ``latest_blessed`` or ``latest``: ``fn_args.base_model`` is that model of
        this pipeline, found in the metadata store (instead of a ``base_model`` path).
    """

    enabled: bool = True
    train_steps: int = 100
    eval_steps: int = 5
    hyperparameters: Optional[str] = None
    base_model: Optional[str] = None
    accelerator: Optional[str] = None
    min_ram: Optional[str] = None
    custom_config: str = "{}"
    entry_point: Optional[str] = None
    mixed_precision: bool = False
    warm_start: Optional[str] = None

    def __post_init__(self):
        if self.warm_start not in (None, "latest_blessed", "latest"):
            raise PipelineError(
                f"--warm_start={self.warm_start!r} is not a choice; pass latest_blessed or "
                "latest (or --base_model PATH for a given SavedModel)."
            )
        if self.warm_start and self.base_model:
            raise PipelineError(
                "--warm_start and --base_model both name the model to start from; pass one."
            )
        if self.base_model:  # 0 steps: export the warm-started model as it is
            _check_int("train_steps", self.train_steps, 0)
        else:
            _check_int("train_steps", self.train_steps, 1, " (0 only with --base_model)")
        _check_int("eval_steps", self.eval_steps, 1)


@dataclasses.dataclass(frozen=True)
class TunerConfig:
    """Settings of the tuning stage.

    Attributes:
      enabled: False (``--no_tuner``) skips tuning.
      parallel_trials: trials that run at once.
      schedule: rolling (a freed worker gets the next trial at once), synchronous rounds
        or one search job; see :class:`TunerSchedule`. None: the runner decides
        (:func:`beam_pipeline.stages.tuner.tuning.default_schedule`).
      max_trials: caps the tuner's own ``max_trials`` when given.
      train_steps / eval_steps: the tuning run's ``fn_args.train_steps`` / ``eval_steps``.
      accelerator / min_ram: resource hints of the trial step.
      lease_seconds: the search_job schedule's lease: a claimed trial whose worker has not
        renewed it for this long is re-issued to another worker.
      search_space: a search space declared in the YAML config (``search_space:``), used
        with a TrainSpec module that has no ``tuner_fn``.
      gpus_per_trial: on a host with several GPUs, each local trial worker process gets
        this many GPUs of its own (``CUDA_VISIBLE_DEVICES``); 0: every worker sees every
        GPU (on one GPU the trials share it, each with memory growth).
    """

    enabled: bool = True
    parallel_trials: int = 2
    schedule: Optional[TunerSchedule] = None
    max_trials: Optional[int] = None
    train_steps: int = 20
    eval_steps: int = 5
    accelerator: Optional[str] = None
    min_ram: Optional[str] = None
    lease_seconds: int = 120
    search_space: Optional[SearchSpace] = None
    gpus_per_trial: int = 0

    def __post_init__(self):
        _check_int("tuner_parallel_trials", self.parallel_trials, 1)
        _check_int("gpus_per_trial", self.gpus_per_trial, 0)
        _check_int("tuner_lease_seconds", self.lease_seconds, 1)
        if self.max_trials is not None:
            _check_int("tuner_max_trials", self.max_trials, 1)
        _check_int("tuner_train_steps", self.train_steps, 1)
        _check_int("tuner_eval_steps", self.eval_steps, 1)


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """Settings of the Evaluator and InfraValidator stages.

    Attributes:
      enabled: False (``--no_evaluator``) skips the evaluation (and so the push).
      eval_config: a TFMA EvalConfig file (protobuf text or JSON); default: derived from
        the model (see :mod:`beam_pipeline.stages.evaluator.evaluation`).
      eval_split: the split the model is evaluated and served requests from.
      slice_features: features to slice the metrics by, besides the overall slice.
      baseline: compare with the latest blessed model of the pipeline (from the
        metadata store) when there is one.
      infra_validator: False (``--no_infra_validator``) skips the serving check.
      infra_load_timeout: seconds the model may take to load in the serving check.
      serving_endpoint: ``HOST:PORT`` of a running TF Serving server (its gRPC API) that
        serves the model: the serving check sends its requests there instead of to the
        sandbox ("": the sandbox).
      serving_model_name: the model name that server serves the model as.
    """

    enabled: bool = True
    eval_config: Optional[str] = None
    eval_split: Split = Split.EVAL
    slice_features: tuple[str, ...] = ()
    baseline: bool = True
    infra_validator: bool = True
    infra_load_timeout: float = 60.0
    serving_endpoint: str = ""
    serving_model_name: str = "model"

    def __post_init__(self):
        t = self.infra_load_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
            raise PipelineError(
                f"--infra_load_timeout={t!r} is not a positive number of seconds; pass e.g. "
                "--infra_load_timeout=60."
            )
        endpoint = self.serving_endpoint
        if endpoint and not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d{1,5}", endpoint):
            raise PipelineError(
                f"--serving_endpoint={endpoint} is not HOST:PORT; pass TF Serving's gRPC "
                "address, e.g. --serving_endpoint=localhost:8500."
            )
        if not self.serving_model_name:
            raise PipelineError(
                "--serving_model_name is empty; pass the name the server serves the model "
                "as (its --model_name; TF Serving's Docker image: model)."
            )


@dataclasses.dataclass(frozen=True)
class PusherConfig:
    """Settings of the Pusher stage.

    Attributes:
      destination: where blessed models go, as ``<destination>/<version>/`` (a local
        folder or gs://); empty: no push.
      require_blessing: exit non-zero when the model is not blessed (for CI pipelines).
    """

    destination: str = ""
    require_blessing: bool = False


@dataclasses.dataclass(frozen=True)
class BulkInferrerConfig:
    """Settings of the BulkInferrer stage (scoring new data with a model).

    Attributes:
      data: a file, folder or glob of raw examples (CSV or TFRecord, read as ``--data``
        is) to score; empty: the stage does not run.
      model: which model scores them: ``blessed`` (this run's model when the Evaluator
        blessed it), ``latest_blessed`` (the pipeline's newest blessed model, from the
        metadata store) or a SavedModel folder.
      max_batch_size: the most examples one model call scores.
      output_examples: also write the examples with the predictions joined as features.
    """

    data: str = ""
    model: str = "blessed"
    max_batch_size: int = 1024
    output_examples: bool = False

    def __post_init__(self):
        _check_int("infer_max_batch_size", self.max_batch_size, 1)
        if not self.model:
            raise PipelineError(
                "--infer_model is empty; pass blessed, latest_blessed or a SavedModel folder."
            )


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """The whole run's configuration.

    Attributes:
      pipeline_root: folder (or gs:// path) holding run directories and caches.
      run_id: the run directory's name under ``pipeline_root/runs``; generated when empty.
      module_file: the user's module (``preprocessing_fn``, ``run_fn``, ``tuner_fn``).
      max_module_folder_mib: the most the Python files of the module file's folder, staged
        with it for the workers, may weigh.
      beam_args: the Beam flags, passed through to ``PipelineOptions``.
      worker_start_timeout: seconds a job on a portable, Flink, Spark or Dataflow runner
        may go without a live worker before it is cancelled and the run fails.
      metadata_url: the metadata store's SQLAlchemy URL; empty: the SQLite file
        ``<pipeline_root>/metadata.sqlite``.
      no_cache: the stages (:class:`~beam_pipeline.engine.stage.StageName`) that run even
        when an earlier execution's outputs could be reused.
      trainer_timeout: seconds the Trainer's ``run_fn`` (or TrainSpec) may run before it is
        stopped and the run fails; None (the default): no limit. Not part of the run's
        identity: how long one may wait changes no result.
      trial_timeout: seconds one tuning trial may run before it is stopped and recorded as
        timed out (the search goes on); None (the default): no limit.
    """

    data: DataConfig = DataConfig()
    module_file: Optional[str] = None
    max_module_folder_mib: float = 20.0
    pipeline_root: str = "pipeline_runs"
    run_id: str = ""
    transform: TransformConfig = TransformConfig()
    trainer: TrainerConfig = TrainerConfig()
    tuner: TunerConfig = TunerConfig()
    evaluator: EvaluatorConfig = EvaluatorConfig()
    pusher: PusherConfig = PusherConfig()
    bulk_inferrer: BulkInferrerConfig = BulkInferrerConfig()
    beam_args: tuple[str, ...] = ()
    worker_start_timeout: float = 120.0
    metadata_url: str = ""
    no_cache: tuple[StageName, ...] = ()
    trainer_timeout: Optional[float] = None
    trial_timeout: Optional[float] = None

    def __post_init__(self):
        if self.run_id:  # empty: a timestamp is generated
            check_run_id(self.run_id)
        for flag in ("trainer_timeout", "trial_timeout"):
            limit = getattr(self, flag)
            if limit is not None and (
                isinstance(limit, bool)
                or not isinstance(limit, (int, float))
                or not 0 < limit < math.inf
            ):
                raise PipelineError(
                    f"--{flag}={limit} is not a positive number of seconds; pass e.g. "
                    f"--{flag}=3600, or leave it out for no limit."
                )
        mib = self.max_module_folder_mib
        if isinstance(mib, bool) or not isinstance(mib, (int, float)) or not 0 < mib < math.inf:
            raise PipelineError(
                f"--max_module_folder_mib={mib!r} is out of range: pass a number of MiB above 0."
            )
        t = self.worker_start_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
            raise PipelineError(
                f"--worker_start_timeout={t} is not a positive number of seconds; pass e.g. "
                "--worker_start_timeout=120."
            )
