"""The command line's flags: ``python -m beam_pipeline [flags] [Beam flags]`` to a config.

Our flags and an optional YAML ``--config`` (same keys as the flags, without ``--``) become
one frozen :class:`~beam_pipeline.config.PipelineConfig`; flags given on the command line
win over the file. Every other flag must be a Beam pipeline option (``--runner``,
``--direct_running_mode``, ``--project``, ...) and is passed through to
``PipelineOptions``; a flag neither knows is an error.

With neither ``--data`` nor ``--config``, the bundled penguin example runs.

One concept, kept in one module though over 400 lines: the table of our flags and the
conversion of each (flag or YAML value) into its typed config field.

Example::

    python -m beam_pipeline --runner=DirectRunner
    python -m beam_pipeline --data=data/ --module_file=my_module.py --runner=DirectRunner
    python -m beam_pipeline runs list   # the run history: see beam_pipeline.history

    config = parse_config(["--data=data/", "--runner=DirectRunner"])  # what cli.main runs
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from beam_pipeline.config import (
    BUNDLED_CONFIG,
    BulkInferrerConfig,
    DataConfig,
    EvaluatorConfig,
    PipelineConfig,
    PusherConfig,
    TrainerConfig,
    TransformConfig,
    TunerConfig,
    TunerSchedule,
    check_run_id,
    parse_custom_config,
)
from beam_pipeline.console import OutputConfig
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DataFormat, Split

__all__ = ["build_parser", "parse_config", "parse_output"]

# Flag name -> (section, field). Sections are the nested config dataclasses.
_FIELDS: dict[str, tuple[str, str]] = {
    "data": ("data", "data"),
    "data_format": ("data", "data_format"),
    "csv_delimiter": ("data", "csv_delimiter"),
    "csv_null_values": ("data", "csv_null_values"),
    "csv_max_field_bytes": ("data", "csv_max_field_bytes"),
    "split_buckets": ("data", "split_buckets"),
    "input_splits": ("data", "input_splits"),
    "partition_feature": ("data", "partition_feature"),
    "max_rejected_fraction": ("data", "max_rejected_fraction"),
    "schema": ("data", "schema"),
    "infer_feature_shape": ("data", "infer_feature_shape"),
    "max_string_domain_size": ("data", "max_string_domain_size"),
    "ignore_anomalies": ("data", "ignore_anomalies"),
    "module_file": ("", "module_file"),
    "max_module_folder_mib": ("", "max_module_folder_mib"),
    "pipeline_root": ("", "pipeline_root"),
    "run_id": ("", "run_id"),
    "worker_start_timeout": ("", "worker_start_timeout"),
    "metadata_url": ("", "metadata_url"),
    "no_cache": ("", "no_cache"),
    "analyzer_cache": ("transform", "analyzer_cache"),
    "train_steps": ("trainer", "train_steps"),
    "eval_steps": ("trainer", "eval_steps"),
    "hyperparameters": ("trainer", "hyperparameters"),
    "base_model": ("trainer", "base_model"),
    "trainer_accelerator": ("trainer", "accelerator"),
    "trainer_min_ram": ("trainer", "min_ram"),
    "custom_config": ("trainer", "custom_config"),
    "trainer": ("trainer", "enabled"),
    "trainer_entry_point": ("trainer", "entry_point"),
    "mixed_precision": ("trainer", "mixed_precision"),
    "tuner": ("tuner", "enabled"),
    "tuner_parallel_trials": ("tuner", "parallel_trials"),
    "tuner_schedule": ("tuner", "schedule"),
    "tuner_max_trials": ("tuner", "max_trials"),
    "tuner_train_steps": ("tuner", "train_steps"),
    "tuner_eval_steps": ("tuner", "eval_steps"),
    "tuner_accelerator": ("tuner", "accelerator"),
    "tuner_min_ram": ("tuner", "min_ram"),
    "tuner_lease_seconds": ("tuner", "lease_seconds"),
    "search_space": ("tuner", "search_space"),  # YAML only: a nested mapping
    "gpus_per_trial": ("tuner", "gpus_per_trial"),
    "trainer_timeout": ("", "trainer_timeout"),
    "trial_timeout": ("", "trial_timeout"),
    "evaluator": ("evaluator", "enabled"),
    "eval_config": ("evaluator", "eval_config"),
    "eval_split": ("evaluator", "eval_split"),
    "eval_slice_features": ("evaluator", "slice_features"),
    "eval_baseline": ("evaluator", "baseline"),
    "infra_validator": ("evaluator", "infra_validator"),
    "infra_load_timeout": ("evaluator", "infra_load_timeout"),
    "serving_endpoint": ("evaluator", "serving_endpoint"),
    "serving_model_name": ("evaluator", "serving_model_name"),
    "push_destination": ("pusher", "destination"),
    "require_blessing": ("pusher", "require_blessing"),
}
# Section (as in _FIELDS) -> its config dataclass, whose field defaults --help shows.
_SECTIONS: dict[str, type] = {
    "": PipelineConfig,
    "data": DataConfig,
    "transform": TransformConfig,
    "trainer": TrainerConfig,
    "tuner": TunerConfig,
    "evaluator": EvaluatorConfig,
    "pusher": PusherConfig,
    "bulk_inferrer": BulkInferrerConfig,
}


# Warm start from a model of this pipeline (Trainer).
_FIELDS.update(warm_start=("trainer", "warm_start"))
# Spans of --data (ExampleGen).
_FIELDS.update(span_window=("data", "span_window"), spans=("data", "spans"))
# Drift and skew thresholds (Validation).
_FIELDS.update(
    drift_threshold=("data", "drift_threshold"), skew_threshold=("data", "skew_threshold")
)
# The BulkInferrer's flags (scoring new data).
_FIELDS.update(
    infer_data=("bulk_inferrer", "data"),
    infer_model=("bulk_inferrer", "model"),
    infer_max_batch_size=("bulk_inferrer", "max_batch_size"),
    infer_output_examples=("bulk_inferrer", "output_examples"),
)
# Keys of a YAML config file whose paths are read relative to the file.
_PATH_KEYS = {
    "data",
    "module_file",
    "schema",
    "hyperparameters",
    "base_model",
    "pipeline_root",
    "eval_config",
    "push_destination",
    "infer_data",
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of beam_pipeline's own flags (Beam's flags are checked separately)."""
    prog = command_name()
    p = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [flags] [Beam pipeline flags, e.g. --runner=DirectRunner]\n"
        "       %(prog)s runs {list,show,lineage,diff,report} ...",
        description="Run a TFX-style ML pipeline (ExampleGen, statistics, schema, validation, "
        "tf.Transform, tuning, training) as Apache Beam jobs. Any other --flag is passed to "
        "Beam's PipelineOptions (e.g. --runner, --direct_running_mode, --project).",
        epilog=f"The run history: {prog} runs list | show RUN | lineage URI | diff RUN_A "
        f"RUN_B | report RUN (see {prog} runs --help).",
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        formatter_class=_HelpFormatter,
    )
    a = p.add_argument
    a("--version", action=_Version, help="Print the version and exit.")
    a("--config", help="YAML file with the same settings as the flags (flags win).")
    g = p.add_argument_group("data")
    g.add_argument(
        "--data", help="CSV or TFRecord (tf.Example, optionally .gz) file, folder or glob."
    )
    g.add_argument(
        "--data_format",
        choices=[f.value for f in DataFormat],
        help="The input files' format; auto: from their names.",
    )
    g.add_argument("--csv_delimiter", help="The CSV files' field separator.")
    g.add_argument(
        "--csv_null_values", help="Comma-separated values that mean missing, e.g. 'NA,null'."
    )
    g.add_argument(
        "--csv_max_field_bytes",
        type=int,
        help="A CSV row with a longer field (UTF-8 bytes) is rejected (default 16 MiB).",
    )
    g.add_argument("--split_buckets", help="Hash split, e.g. train=2,eval=1 (the default).")
    g.add_argument("--input_splits", help="Input already split: train=PATTERN,eval=PATTERN.")
    g.add_argument("--partition_feature", help="Rows sharing this column's value share a split.")
    g.add_argument("--max_rejected_fraction", type=float, help="Fail above this (default 0).")
    g.add_argument("--schema", help="A schema.pbtxt to use instead of inferring one.")
    g.add_argument(
        "--no_infer_feature_shape",
        dest="infer_feature_shape",
        action="store_false",
        help="Infer no fixed shapes: every feature a variable-length list in the schema.",
    )
    g.add_argument(
        "--max_string_domain_size",
        type=int,
        help="A string feature with more distinct values gets no domain in the schema.",
    )
    g.add_argument("--ignore_anomalies", action="store_true", help="Report anomalies, go on.")
    g.add_argument(
        "--span_window",
        type=int,
        help="With {SPAN} in --data: read the N latest spans (default 1, the latest).",
    )
    g.add_argument("--spans", help="With {SPAN} in --data: read spans FIRST:LAST, e.g. 1:3.")
    g.add_argument(
        "--drift_threshold",
        type=float,
        help="Drift threshold of every feature without a schema drift_comparator, against "
        "the previous run (L-infinity for categorical, Jensen-Shannon for numeric).",
    )
    g.add_argument(
        "--skew_threshold",
        type=float,
        help="The same for skew_comparator: eval against train.",
    )
    g = p.add_argument_group("pipeline")
    g.add_argument("--module_file", help="Python file with preprocessing_fn / run_fn / tuner_fn.")
    g.add_argument(
        "--max_module_folder_mib",
        type=float,
        help="Most MiB of Python files in the module file's folder, staged for the workers.",
    )
    g.add_argument("--pipeline_root", help="Folder (or gs:// path) for runs and caches.")
    g.add_argument("--run_id", help="Name of the run directory (default: timestamp).")
    g.add_argument(
        "--no_analyzer_cache",
        dest="analyzer_cache",
        action="store_false",
        help="Do not reuse or write tf.Transform's analyzer cache.",
    )
    g.add_argument(
        "--worker_start_timeout",
        type=float,
        help="Seconds a job may go without a live worker before it fails (default 120).",
    )
    g.add_argument(
        "--metadata_url",
        help="SQLAlchemy URL of the metadata store (default: SQLite "
        "<pipeline_root>/metadata.sqlite; e.g. postgresql+psycopg://user@host/db).",
    )
    g.add_argument(
        "--no_cache",
        nargs="?",
        const="all",
        help="Run these stages (comma-separated, e.g. Tuner,Trainer; all of them without a "
        "value) even when an earlier run's outputs could be reused.",
    )
    _add_stage_beam_args_flag(g)  # stage_beam_args block
    g = p.add_argument_group("trainer")
    g.add_argument(
        "--train_steps", type=int, help="Steps the Trainer trains (fn_args.train_steps)."
    )
    g.add_argument(
        "--eval_steps", type=int, help="Steps the Trainer evaluates (fn_args.eval_steps)."
    )
    g.add_argument("--hyperparameters", help="Keras Tuner HyperParameters config JSON file.")
    g.add_argument("--base_model", help="SavedModel folder to warm-start from.")
    g.add_argument(
        "--warm_start",
        choices=["latest_blessed", "latest"],
        help="Warm-start from this pipeline's latest blessed (or latest) model, found in the "
        "metadata store (fn_args.base_model).",
    )
    g.add_argument(
        "--trainer_accelerator", help="e.g. type:nvidia-l4;count:1;install-nvidia-driver"
    )
    g.add_argument("--trainer_min_ram", help="e.g. 16GB")
    g.add_argument("--custom_config", help="JSON object reaching fn_args.custom_config.")
    g.add_argument(
        "--trainer_entry_point",
        help="run_fn-like function or TrainSpec class of the module to train with.",
    )
    g.add_argument(
        "--no_trainer",
        dest="trainer",
        action="store_false",
        help="Do not train (nor evaluate or push): the data stages, Transform and tuning run.",
    )
    g.add_argument(
        "--mixed_precision",
        action="store_true",
        help="Train in float16 on GPUs, bfloat16 on CPUs (TrainSpec; fn_args.mixed_precision).",
    )
    g = p.add_argument_group("tuner")
    g.add_argument(
        "--tuner_parallel_trials", type=int, help="Trials that run at once, each on a worker."
    )
    g.add_argument(
        "--tuner_schedule",
        choices=[s.value for s in TunerSchedule],
        help="rolling: a worker that finishes a trial starts the next at once (a job per "
        "trial); rounds: synchronous rounds (reproducible adaptive searches); search_job: "
        "one job per search, each worker claims trials from the oracle's state in the run's "
        "storage. Default: search_job on Dataflow, Flink, Spark and portable job servers, "
        "rolling on the DirectRunner and the embedded job service.",
    )
    g.add_argument(
        "--tuner_max_trials", type=int, help="Most trials (default: the tuner_fn's own limit)."
    )
    g.add_argument("--tuner_train_steps", type=int, help="Training steps of each trial.")
    g.add_argument("--tuner_eval_steps", type=int, help="Evaluation steps of each trial.")
    g.add_argument(
        "--tuner_accelerator", help="A trial worker's accelerator, as --trainer_accelerator."
    )
    g.add_argument("--tuner_min_ram", help="A trial worker's least memory, e.g. 16GB.")
    g.add_argument(
        "--tuner_lease_seconds",
        type=int,
        help="search_job: a trial whose worker stopped renewing it this long is re-issued.",
    )
    g.add_argument(
        "--no_tuner",
        dest="tuner",
        action="store_false",
        help="Do not tune: train with --hyperparameters or the module's own.",
    )
    g.add_argument(
        "--gpus_per_trial",
        type=int,
        help="GPUs of its own for each local trial worker on a multi-GPU host (default 0: shared).",
    )
    g.add_argument(
        "--trial_timeout",
        type=float,
        help="Seconds a tuning trial may run; past it, it is stopped and recorded as timed "
        "out (default: no limit).",
    )
    g.add_argument(
        "--trainer_timeout",
        type=float,
        help="Seconds run_fn may train before the run fails (default: no limit).",
    )
    g = p.add_argument_group("evaluator, infra validator, pusher")
    g.add_argument("--eval_config", help="TFMA EvalConfig file (text or JSON); default: derived.")
    g.add_argument("--eval_split", help="Split to evaluate and validate on (default eval).")
    g.add_argument("--eval_slice_features", help="Comma-separated features to slice metrics by.")
    g.add_argument(
        "--no_eval_baseline",
        dest="eval_baseline",
        action="store_false",
        help="Do not compare with the latest blessed model.",
    )
    g.add_argument(
        "--no_evaluator",
        dest="evaluator",
        action="store_false",
        help="Do not evaluate the model (nor push it: a push needs the Evaluator's blessing).",
    )
    g.add_argument(
        "--no_infra_validator",
        dest="infra_validator",
        action="store_false",
        help="Do not load and serve the model as a check (nor push it).",
    )
    g.add_argument("--infra_load_timeout", type=float, help="Seconds to load (default 60).")
    g.add_argument(
        "--serving_endpoint",
        help="HOST:PORT of a TF Serving server (gRPC) serving the model: validate it there.",
    )
    g.add_argument("--serving_model_name", help="The model's name on that server (default model).")
    g.add_argument("--push_destination", help="Folder or gs:// path for <version>/ folders.")
    g.add_argument(
        "--require_blessing",
        action="store_true",
        help="Exit non-zero when the model is not blessed.",
    )
    _add_bulk_inferrer_flags(p.add_argument_group("bulk inferrer"))
    _add_output_flags(p.add_argument_group("output"))
    return p


def command_name() -> str:
    """How the user ran us: ``beam-pipeline`` (the installed command) or ``python -m
    beam_pipeline``, for the usage line and the messages that quote a command."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "beam-pipeline":
        return "beam-pipeline"
    return "python -m beam_pipeline"


class _Version(argparse.Action):
    """``--version``: the installed distribution's version (read only when asked)."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.pop("default", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        try:
            version = metadata.version("beam-pipeline")
        except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
            version = "(not installed)"
        print(f"beam-pipeline {version}")  # stdout, as argparse's own version action
        parser.exit()


def _config_default(dest: str) -> Any:
    """The default of the config field a flag sets (None: no single value to show)."""
    import dataclasses

    if dest not in _FIELDS:
        return None
    section, name = _FIELDS[dest]
    cls = _SECTIONS[section]
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _shown(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(
            f"{_shown(v[0])}={_shown(v[1])}" if isinstance(v, tuple) else _shown(v) for v in value
        )
    return str(value)


class _HelpFormatter(argparse.HelpFormatter):
    """Each flag's help ends with its default, read from the config dataclasses (their
    one home), unless the help says it already or the flag is a switch."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.nargs == 0:
            return text
        value = _config_default(action.dest)
        if value is None or value == "" or value == () or isinstance(value, bool):
            return text
        shown = _shown(value).replace("%", "%%")  # argparse %-formats help
        if shown == "":
            shown = "''"
        return f"{text[:-1] if text.endswith('.') else text} (default {shown})."


def _add_bulk_inferrer_flags(g) -> None:
    g.add_argument(
        "--infer_data",
        help="CSV or TFRecord file, folder or glob of new examples to score (PredictionLogs).",
    )
    g.add_argument(
        "--infer_model",
        help="blessed (this run's model if blessed, the default), latest_blessed (the "
        "pipeline's newest blessed model) or a SavedModel folder.",
    )
    g.add_argument(
        "--infer_max_batch_size", type=int, help="Most examples per model call (default 1024)."
    )
    g.add_argument(
        "--infer_output_examples",
        action="store_true",
        help="Also write the examples with the predictions joined as features.",
    )


def _add_output_flags(g) -> None:
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Print every log line and warning (TensorFlow's, Beam's) on the terminal too.",
    )
    g.add_argument("--log_file", help="Where the run's full log goes (default <run_dir>/run.log).")
    g.add_argument(
        "--no_progress", dest="progress", action="store_false", help="No live progress lines."
    )


# Flags of how the run talks to the user: OutputConfig, not part of the run's identity.
_OUTPUT_FLAGS = ("verbose", "log_file", "progress")


def parse_output(argv: Sequence[str]) -> OutputConfig:
    """``-v/--verbose``, ``--log_file`` and ``--no_progress`` as an OutputConfig (flags
    only; every other flag, and a malformed one, is :func:`parse_config`'s to check)."""
    parser = argparse.ArgumentParser(
        add_help=False, allow_abbrev=False, exit_on_error=False, argument_default=argparse.SUPPRESS
    )
    _add_output_flags(parser)
    try:
        args, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return OutputConfig()
    given = vars(args)
    return OutputConfig(**{k: given[k] for k in _OUTPUT_FLAGS if k in given})


def _load_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or {}
    except OSError as e:
        raise PipelineError(
            f"--config {path} cannot be read ({e.strerror}); pass an existing YAML file."
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise PipelineError(
            f"--config {path}{where} is not valid YAML; fix the syntax there."
        ) from e
    if not isinstance(raw, dict):
        raise PipelineError(
            f"--config {path} must hold a mapping of settings, e.g. 'data: file.csv'."
        )
    unknown = sorted(set(raw) - set(_FIELDS) - {"beam_args"})
    if unknown:
        # Beam's options (runner: DirectRunner) as the file's own settings: passed on to
        # Beam like its beam_args list, before the command line's flags (which win).
        beam = _beam_settings(path, {k: raw.pop(k) for k in unknown})
        raw["beam_args"] = beam + [str(a) for a in raw.get("beam_args") or []]
    base = os.path.dirname(os.path.abspath(path))
    for key in _PATH_KEYS & set(raw):
        value = raw[key]
        if isinstance(value, str) and value and "://" not in value and not os.path.isabs(value):
            raw[key] = os.path.join(base, value)
    return raw


def _beam_settings(path: str, settings: dict[str, Any]) -> list[str]:
    """A config file's settings that are not ours, as Beam flags (``runner: X`` is
    ``--runner=X``, ``true`` the bare flag, a list one flag per item).

    Raises:
      PipelineError: a setting that is not a Beam pipeline option either.
    """
    import difflib

    from beam_pipeline.runtime.options import beam_option_names

    names = beam_option_names()
    args: list[str] = []
    for key, value in settings.items():
        if key not in names:
            close = difflib.get_close_matches(key, [*_FIELDS, *names], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PipelineError(
                f"--config {path} has setting {key!r}, which is neither a beam_pipeline "
                f"setting nor a Beam pipeline option; {hint}Use the flag names without '--' "
                "(see --help)."
            )
        for item in value if isinstance(value, list) else [value]:
            if item is True:
                args.append(f"--{key}")
            elif item is not False and item is not None:
                args.append(f"--{key}={item}")
    return args


def _pairs(flag: str, text: Any, value_type: type) -> tuple:
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        for part in str(text).split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise PipelineError(
                    f"--{flag} {text!r} must look like train=...,eval=...; fix its format."
                )
            items.append((name.strip(), value.strip()))
    out = []
    for name, value in items:
        try:
            split = Split(name)
        except ValueError:
            raise PipelineError(
                f"--{flag} names split {name!r}; use train, eval or test."
            ) from None
        try:
            out.append((split, value_type(value)))
        except ValueError:
            raise PipelineError(
                f"--{flag} gives {name} {value!r}, which is not a whole number; pass e.g. "
                "--split_buckets=train=2,eval=1."
            ) from None
    return tuple(out)


def _no_cache(value: Any) -> tuple:
    """``--no_cache``'s stages: all (the flag alone, ``true``), none, or a list of names."""
    from beam_pipeline.engine.stage import StageName

    if value is True or str(value).strip().lower() == "all":
        return tuple(StageName)
    if value is False or value is None:
        return ()
    names = {s.value.lower(): s for s in StageName}
    names.update(examplegen=StageName.DATA, statistics=StageName.DATA)
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    stages = []
    for item in items:
        stage = names.get(str(item).strip().lower())
        if stage is None:
            raise PipelineError(
                f"--no_cache names stage {str(item).strip()!r}, which is not one; pass all or "
                f"some of {','.join(s.value for s in StageName)} (or no value: all)."
            )
        if stage not in stages:
            stages.append(stage)
    return tuple(stages)


def _span_range(value: Any) -> tuple[int, int]:
    """``--spans FIRST:LAST`` as (FIRST, LAST)."""
    first, sep, last = str(value).partition(":")
    try:
        if not sep:
            raise ValueError
        return int(first), int(last)
    except ValueError:
        raise PipelineError(
            f"--spans={value!r} is not FIRST:LAST; pass two span numbers, e.g. --spans=1:3."
        ) from None


def _convert(key: str, value: Any) -> Any:
    if key == "run_id":
        # Given but empty is refused (left out, a timestamp is generated); the rest of the
        # check is PipelineConfig's.
        text = str(value) if value is not None else ""
        check_run_id(text)
        return text
    if key == "max_rejected_fraction" and isinstance(value, str):
        try:
            return float(value)  # YAML reads 1e-2 as a string
        except ValueError:
            pass  # refused with its range by DataConfig
    if key == "csv_null_values":
        return tuple(value) if isinstance(value, (list, tuple)) else tuple(str(value).split(","))
    if key == "split_buckets":
        return _pairs(key, value, int)
    if key == "input_splits":
        return _pairs(key, value, str)
    if key == "search_space":
        from trainer.tuning.search_space import SearchSpace

        if not isinstance(value, dict):
            raise PipelineError(
                "search_space in --config must be a mapping (algorithm, objective, "
                "hyperparameters: {...}); see docs/tuning.md."
            )
        return SearchSpace.from_mapping(value)
    if key == "no_cache":
        return _no_cache(value)
    if key == "stage_beam_args":  # stage_beam_args block
        return _stage_beam_args(value)
    if key == "data_format":
        return DataFormat(value)
    if key == "eval_slice_features":
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        return tuple(str(v).strip() for v in items if str(v).strip())
    if key == "eval_split":
        try:
            return Split(value)
        except ValueError:
            raise PipelineError(
                f"--eval_split={value!r} is not a split; use one of "
                f"{', '.join(s.value for s in Split)}."
            ) from None
    if key == "tuner_schedule":
        try:
            return TunerSchedule(value)
        except ValueError:
            raise PipelineError(
                f"tuner_schedule: {value!r} is not a schedule; use one of "
                f"{', '.join(s.value for s in TunerSchedule)}."
            ) from None
    if key == "spans":
        return _span_range(value)
    if key == "custom_config":
        text = value if isinstance(value, str) else json.dumps(value)
        parse_custom_config(text)  # checked here, parsed again where fn_args is built
        return text
    return value


def _check_bundled_module(module_file: Any) -> None:
    """Without --data and --config the bundled penguin data is read: only the bundled
    module file (or none) fits it; another module would silently run on penguins."""
    if module_file is None:
        return
    bundled = os.path.join(os.path.dirname(BUNDLED_CONFIG), "penguin_module.py")
    if os.path.abspath(str(module_file)) != os.path.abspath(bundled):
        raise PipelineError(
            f"--module_file {module_file} is given without --data (or --config), which would "
            "run it on the bundled penguin example's data; pass --data=YOUR_DATA (a CSV or "
            "TFRecord file, folder or glob) with it."
        )


def parse_config(argv: Sequence[str]) -> PipelineConfig:
    """Flags (+ optional YAML) -> PipelineConfig; leftover flags become ``beam_args``.

    Raises:
      PipelineError: an unknown setting in the config file or a malformed value. Unknown
        command-line flags are checked against Beam's options by ``parse_beam_args``.
    """
    args, rest = build_parser().parse_known_args(list(argv))
    given = {k: v for k, v in vars(args).items() if k not in _OUTPUT_FLAGS}
    settings: dict[str, Any] = {}
    config_path = given.pop("config", None)
    if config_path is None and "data" not in given:
        if "input_splits" not in given:
            _check_bundled_module(given.get("module_file"))
        config_path = BUNDLED_CONFIG
    beam_args: list[str] = []
    if config_path:
        loaded = _load_yaml(config_path)
        beam_args = [str(a) for a in loaded.pop("beam_args", [])]
        settings.update(loaded)
    _merge_stage_beam_args(settings, given)  # stage_beam_args block
    settings.update(given)
    sections: dict[str, dict[str, Any]] = {
        "": {},
        "data": {},
        "transform": {},
        "trainer": {},
        "tuner": {},
        "evaluator": {},
        "pusher": {},
        "bulk_inferrer": {},
    }
    for key, value in settings.items():
        section, field = _FIELDS[key]
        sections[section][field] = _convert(key, value)
    extra = [a for a in rest if a != "--"]
    return PipelineConfig(
        data=DataConfig(**sections["data"]),
        transform=TransformConfig(**sections["transform"]),
        trainer=TrainerConfig(**sections["trainer"]),
        tuner=TunerConfig(**sections["tuner"]),
        evaluator=EvaluatorConfig(**sections["evaluator"]),
        pusher=PusherConfig(**sections["pusher"]),
        bulk_inferrer=BulkInferrerConfig(**sections["bulk_inferrer"]),
        beam_args=tuple(beam_args + extra),
        **sections[""],
    )


# --- stage_beam_args: per-stage Beam flags (issue 33; TFX's with_beam_pipeline_args) ---

_FIELDS.update(stage_beam_args=("", "stage_beam_args"))


def _add_stage_beam_args_flag(g) -> None:
    g.add_argument(
        "--stage_beam_args",
        action="append",
        metavar="STAGE:--FLAG=VALUE",
        help="A Beam flag for one stage's jobs only, after the run's (later flags win), e.g. "
        "--stage_beam_args=Trainer:--machine_type=a2-highgpu-1g; repeat it for more. In "
        "--config: stage_beam_args: {Trainer: [--machine_type=a2-highgpu-1g]}.",
    )


def _stage_beam_args(value: Any) -> tuple:
    from beam_pipeline.config import stage_beam_args

    return stage_beam_args(value)


def _merge_stage_beam_args(settings: dict[str, Any], given: dict[str, Any]) -> None:
    """The command line's ``--stage_beam_args`` add to the config file's (after them: a
    flag given in both wins from the command line), as the Beam flags do."""
    if "stage_beam_args" in settings and "stage_beam_args" in given:
        given["stage_beam_args"] = [settings["stage_beam_args"], *given["stage_beam_args"]]


# --- end of the stage_beam_args block ---
