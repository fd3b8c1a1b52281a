"""The Evaluator stage: TFMA's sliced metrics, thresholds and blessing for the trained model.

One concept: from an EvalConfig (TFMA's own proto, read from a file or derived from the
model) to a blessing. The launcher builds and checks the config (bad input stops here,
before any Beam job), runs :class:`transforms.evaluator.EvaluateModel` on the run's
runner, reads TFMA's validation result back and publishes two artifacts:

- ``evaluation/``: TFMA's own output (metrics, plots, validations, eval_config.json),
  readable by ``tfma.load_eval_result`` / ``tfma.load_validation_result``;
- ``blessing/``: ``BLESSED`` or ``NOT_BLESSED`` (TFX's ModelBlessing layout) and
  ``blessing.json``: blessed or not, the baseline, and each failed threshold (metric,
  slice, value, bound).

The default EvalConfig, when none is given: the label the model was trained on (the
``evaluation_label_key`` that :func:`trainer.export_serving_model` records), computed by
the model's ``transform_features`` signature (TFMA's ``preprocessing_function_names``:
the raw label may be a string, the model predicts class ids), and metrics for the kind of
model the trainer exported (:class:`ModelKind`, from the width of its prediction, the
label's dtype, its class domain and its values: :mod:`.kinds`):

- multi-class (two or more scores): ``SparseCategoricalAccuracy``, at least 0.6 and at
  most 1% below the baseline's;
- binary (one output, an integer label within {0, 1}): ``BinaryAccuracy``, at least 0.6
  and at most 1% below the baseline's, and ``AUC`` (no threshold);
- regression (one output, a float label or an integer one beyond {0, 1}):
  ``MeanSquaredError`` (at most 1% above the baseline's), ``MeanAbsoluteError`` (no
  threshold) and a ``CalibrationPlot`` over the label's range (the report's calibration
  and residual plots);
- one class (a label whose vocabulary has one value): ``SparseCategoricalAccuracy``, no
  threshold (there is nothing to tell apart);

each with ``ExampleCount``; slices: overall plus each ``--eval_slice_features`` feature.
The default thresholds block on the Overall slice only (``per_slice_thresholds``): the
other slices are reported, not judged, unless the user's EvalConfig says so.
Without a baseline, change thresholds are dropped and the model is judged on value
thresholds alone (TFMA's rubber stamp). A config left with no threshold at all (the first
regression model, a one-class label, an ``--eval_config`` without thresholds) blesses the
model, saying why (TFMA alone would refuse it with ``missing_thresholds``, and no later
run could have a baseline); every verdict says in words which metric on which slice,
against what and by how much (:mod:`.results`).

Example::

    config = build_eval_config(None, model_dir, schema, slice_features=("island",))
    result = run_evaluation(config, model_dir, None, "run/examples/eval/*", staging, options)
    result.blessed, result.failures
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from beam_pipeline.engine.artifacts import EvaluationResult, ThresholdFailure
from beam_pipeline.stages.evaluator.kinds import (
    ModelFacts,
    ModelKind,
    label_classes,
    label_range,
    model_facts,
    model_kind,
    prediction_key,
)
from beam_pipeline.stages.evaluator.results import (
    VIEW_FILE,
    class_metrics,
    failures,
    passed,
    plots_view,
    sliced_metrics,
    thresholds_view,
)

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_model_analysis.proto import config_pb2

__all__ = [
    "DEFAULT_MIN_ACCURACY",
    "DEFAULT_TOLERANCE",
    "EvaluationResult",
    "ModelFacts",
    "ModelKind",
    "ThresholdFailure",
    "build_eval_config",
    "check_eval_config_file",
    "label_classes",
    "label_range",
    "model_kind",
    "model_facts",
    "run_evaluation",
]

# TFX's penguin example's bar for its accuracy threshold.
DEFAULT_MIN_ACCURACY = 0.6
# The default change thresholds' tolerance: a candidate may be at most this much worse
# than the baseline, relative to the baseline's value, on the Overall slice (a metric
# measured on a sample moves a little between two equally good models; an absolute
# 1e-10 on every slice refused a model 17% better overall for one slice's 0.006).
DEFAULT_TOLERANCE = 0.01
# The buckets of a regressor's calibration plot over the label's range (the report
# draws it as calibration and residuals per bucket of predictions).
_REGRESSION_BUCKETS = 20


# What a verdict says when the config has no threshold left to check.
NO_THRESHOLDS = "no thresholds"
# ... and when its only thresholds compare with a baseline there is none of.
NO_BASELINE_TO_CHECK = "its thresholds compare with a baseline, so none was checked"


def _parse_config_file(path: str) -> config_pb2.EvalConfig:
    from google.protobuf import json_format, text_format
    from tensorflow_model_analysis.proto import config_pb2

    try:
        text = fileio.read_file(path)
    except OSError as e:
        raise PipelineError(
            f"--eval_config {path} cannot be read ({first_line(e)}); pass an EvalConfig file."
        ) from None
    try:
        if text.lstrip().startswith("{"):
            return json_format.Parse(text, config_pb2.EvalConfig())
        return text_format.Parse(text, config_pb2.EvalConfig())
    except (json_format.ParseError, text_format.ParseError) as e:
        raise PipelineError(
            f"--eval_config {path} does not parse as a TFMA EvalConfig ({first_line(e)}); "
            "write it in protobuf text or JSON format with model_specs, metrics_specs and "
            "slicing_specs (see docs/model-checks.md)."
        ) from None


def _default_config(
    facts: ModelFacts,
    model_dir: str,
    classes: Optional[int] = None,
    values: Optional[tuple[float, float]] = None,
) -> config_pb2.EvalConfig:
    from tensorflow_model_analysis.proto import config_pb2

    from trainer.export import SERVING_SIGNATURE, TRANSFORM_FEATURES_SIGNATURE

    if not facts.label_key:
        raise PipelineError(
            f"The model in {model_dir} records no label for the Evaluator; pass --eval_config "
            "with model_specs {label_key: ...} (or export it with "
            "trainer.export_serving_model, which records it)."
        )
    spec = config_pb2.ModelSpec(signature_name=SERVING_SIGNATURE, label_key=facts.label_key)
    if TRANSFORM_FEATURES_SIGNATURE in facts.signatures:
        spec.preprocessing_function_names.append(TRANSFORM_FEATURES_SIGNATURE)
    spec.prediction_key = prediction_key(facts)
    config = config_pb2.EvalConfig(model_specs=[spec])
    metrics = config.metrics_specs.add()
    metrics.metrics.add(class_name="ExampleCount")
    kind = model_kind(facts, classes, values)

    def on_overall(metric) -> config_pb2.MetricThreshold:
        # Thresholds block on the Overall slice only: the other slices are reported (a
        # small slice moves by chance between two equally good models).
        per_slice = metric.per_slice_thresholds.add()
        per_slice.slicing_specs.add()  # the overall slice
        return per_slice.threshold

    if kind in (ModelKind.MULTI_CLASS, ModelKind.BINARY):
        name = "SparseCategoricalAccuracy" if kind is ModelKind.MULTI_CLASS else "BinaryAccuracy"
        threshold = on_overall(metrics.metrics.add(class_name=name))
        threshold.value_threshold.lower_bound.value = DEFAULT_MIN_ACCURACY
        threshold.change_threshold.direction = config_pb2.MetricDirection.HIGHER_IS_BETTER
        threshold.change_threshold.relative.value = -DEFAULT_TOLERANCE
        if kind is ModelKind.BINARY:
            metrics.metrics.add(class_name="AUC")
    elif kind is ModelKind.REGRESSION:
        threshold = on_overall(metrics.metrics.add(class_name="MeanSquaredError"))
        threshold.change_threshold.direction = config_pb2.MetricDirection.LOWER_IS_BETTER
        threshold.change_threshold.relative.value = DEFAULT_TOLERANCE
        metrics.metrics.add(class_name="MeanAbsoluteError")
        if values is not None and values[1] > values[0]:
            # Mean label against mean prediction per bucket of predictions over the
            # label's range: the report's calibration and residual plots.
            plot = {"num_buckets": _REGRESSION_BUCKETS, "left": values[0], "right": values[1]}
            metrics.metrics.add(class_name="CalibrationPlot", config=json.dumps(plot))
    else:  # one class: every prediction is that class; nothing to set a bar on
        metrics.metrics.add(class_name="SparseCategoricalAccuracy")
    return config


def _check_config(
    config: config_pb2.EvalConfig,
    where: str,
    facts: ModelFacts,
    schema: Optional[schema_pb2.Schema],
) -> None:
    """Refuses a metric, slice feature or label that does not exist, naming it."""
    from trainer.export import TRANSFORM_FEATURES_SIGNATURE

    raw = {f.name for f in schema.feature} if schema is not None else set()
    if not config.model_specs:
        raise PipelineError(f"{where} has no model_specs; add model_specs {{label_key: ...}}.")
    for spec in config.model_specs:
        names = set(spec.preprocessing_function_names)
        missing = sorted(names - set(facts.signatures))
        if missing:
            raise PipelineError(
                f"{where} names preprocessing function {missing[0]!r}, which the model does not "
                f"have (its signatures: {', '.join(facts.signatures)}); remove it or export it."
            )
        space = raw | (set(facts.transformed_features) if names else set())
        if spec.label_key and space and spec.label_key not in space:
            hint = (
                f"the transformed features: {', '.join(facts.transformed_features)}"
                if TRANSFORM_FEATURES_SIGNATURE in names
                else f"the raw features: {', '.join(sorted(raw))}"
            )
            raise PipelineError(
                f"{where} gives label_key {spec.label_key!r}, which the model cannot produce; "
                f"set it to one of {hint}."
            )
    features = raw | set(facts.transformed_features)
    for slicing in config.slicing_specs:
        for key in slicing.feature_keys:
            if features and key not in features:
                raise PipelineError(
                    f"{where} slices on feature {key!r}, which the data does not have; slice "
                    f"on one of {', '.join(sorted(raw or features))}."
                )
    _check_metrics(config, where)


def _check_metrics(config: config_pb2.EvalConfig, where: str) -> None:
    """Refuses a metric class that neither TFMA nor Keras defines, or whose own module
    does not import or lacks it (TFMA would fail in the middle of its Beam job)."""
    import keras
    import tensorflow_model_analysis as tfma

    for metrics in config.metrics_specs:
        for metric in metrics.metrics:
            name = metric.class_name
            if metric.module:
                _check_metric_module(where, metric.module, name)
            elif not (hasattr(tfma.metrics, name) or hasattr(keras.metrics, name)):
                raise PipelineError(
                    f"{where} names metric {name!r}, which neither TFMA nor Keras defines; use "
                    "a class from tfma.metrics or keras.metrics (e.g. SparseCategoricalAccuracy)."
                )


def check_eval_config_file(path: str) -> None:
    """The checks of ``--eval_config`` that need no model, made before the run starts
    (:meth:`EvaluatorStage.preflight`): it parses, and its metric classes import.

    Raises:
      PipelineError: naming the file and what to fix.
    """
    _check_metrics(_parse_config_file(path), f"--eval_config {path}")


def _check_metric_module(where: str, module: str, name: str) -> None:
    """Imports a metric's own module as TFMA will on its workers (TFMA's
    ``_keras_class_for``/``_class_for``): one that does not import, or lacks the class,
    stops the run here, not in the middle of the Beam job."""
    import importlib

    try:
        found = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is the same user-facing problem
        raise PipelineError(
            f"{where} names metric {name!r} in module {module!r}, which does not import "
            f"({type(e).__name__}: {first_line(e)}); install that module (or put it on "
            "PYTHONPATH), or fix the metric's module in metrics_specs."
        ) from None
    if not hasattr(found, name):
        raise PipelineError(
            f"{where} names metric {name!r} in module {module!r}, which has no such class; "
            "fix the metric's class_name or module in metrics_specs."
        )


def build_eval_config(
    eval_config_path: Optional[str],
    model_dir: str,
    schema: Optional[schema_pb2.Schema],
    slice_features: Sequence[str] = (),
    facts: Optional[ModelFacts] = None,
    label_classes: Optional[int] = None,
    label_values: Optional[tuple[float, float]] = None,
) -> config_pb2.EvalConfig:
    """The EvalConfig of a run: ``--eval_config``'s file, else the default from the model;
    either with ``ExampleCount`` added where it lacks one.

    Args:
      eval_config_path: a TFMA EvalConfig in protobuf text or JSON format, or None.
      model_dir: the candidate SavedModel.
      schema: the raw data's schema (the features slices and labels may name).
      slice_features: features to slice on besides the overall slice (added to either).
      facts: :func:`model_facts` of ``model_dir`` when the caller has them already (a
        SavedModel load is not free); else loaded here.
      label_classes: the transformed label's number of classes (:func:`label_classes`),
        which tells a one-class label from a binary one; None when unknown.
      label_values: the raw label's smallest and largest value (:func:`label_range`),
        which tell a binary integer label from a regression one; None when unknown.

    Raises:
      PipelineError: the file does not parse, or names a metric (or a metric module), a
        slice feature or a label that does not exist; the model does not load; the kind
        of an integer label cannot be told (:func:`model_kind`).
    """
    if facts is None:
        facts = model_facts(model_dir)
    if eval_config_path:
        config = _parse_config_file(eval_config_path)
        where = f"--eval_config {eval_config_path}"
    else:
        config = _default_config(facts, model_dir, label_classes, label_values)
        where = "the default EvalConfig"
    if not any(m.class_name == "ExampleCount" for s in config.metrics_specs for m in s.metrics):
        # Every evaluation counts its examples (the summary's rows in; TFX's penguin
        # config, for one, asks for accuracy alone): a spec of its own, no threshold.
        config.metrics_specs.add().metrics.add(class_name="ExampleCount")
    have = {tuple(s.feature_keys) for s in config.slicing_specs if not s.feature_values}
    if not config.slicing_specs:
        config.slicing_specs.add()  # the overall slice
    for feature in slice_features:
        if (feature,) not in have:
            config.slicing_specs.add(feature_keys=[feature])
    _check_config(config, where if eval_config_path else "--eval_slice_features", facts, schema)
    return config


def _with_baseline(config: config_pb2.EvalConfig, baseline: Optional[str]):
    """The config TFMA runs: two named model specs with a baseline, no change thresholds
    without one (the rubber stamp)."""
    from tensorflow_model_analysis.proto import config_pb2

    from transforms.evaluator import BASELINE, CANDIDATE

    config = config_pb2.EvalConfig.FromString(config.SerializeToString())
    if baseline is None:
        for metrics in config.metrics_specs:
            for metric in metrics.metrics:
                metric.threshold.ClearField("change_threshold")
                kept = []
                for per_slice in metric.per_slice_thresholds:
                    per_slice.threshold.ClearField("change_threshold")
                    if per_slice.threshold.HasField("value_threshold"):
                        kept.append(per_slice)
                del metric.per_slice_thresholds[:]
                metric.per_slice_thresholds.extend(kept)
            for threshold in metrics.thresholds.values():
                threshold.ClearField("change_threshold")
        return config
    candidate = config.model_specs[0]
    candidate.name = CANDIDATE
    base = config.model_specs.add()
    base.CopyFrom(candidate)
    base.name = BASELINE
    base.is_baseline = True
    return config


def run_evaluation(
    config: config_pb2.EvalConfig,
    model_dir: str,
    baseline: Optional[str],
    file_pattern: str,
    output_path: str,
    options: PipelineOptions,
) -> EvaluationResult:
    """Runs TFMA as a Beam job on ``options``' runner and reads its blessing back.

    Args:
      config: from :func:`build_eval_config`.
      model_dir / baseline: the candidate and the baseline SavedModel (or None).
      file_pattern: the eval split's examples.
      output_path: the (staging) folder of the evaluation artifact.
      options: the run's Beam options.
    """
    import tensorflow_model_analysis as tfma

    from beam_pipeline.runtime.options import create_pipeline
    from transforms.evaluator import BASELINE, CANDIDATE, EvaluateModel

    run_config = _with_baseline(config, baseline)
    with create_pipeline(options) as p:
        _ = p | "Evaluate" >> EvaluateModel(
            file_pattern,
            run_config,
            candidate=model_dir,
            baseline=baseline,
            output_path=output_path,
        )
    validation = tfma.load_validation_result(output_path)
    if baseline is None:
        result = tfma.load_eval_result(output_path)
    else:
        result = tfma.load_eval_result(output_path, model_name=CANDIDATE)
    baseline_metrics = (
        sliced_metrics(tfma.load_eval_result(output_path, model_name=BASELINE)) if baseline else {}
    )
    metrics = sliced_metrics(result)
    failed = failures(validation, baseline_metrics)
    thresholds = thresholds_view(config)
    view = {
        # The config as given: a change threshold without a baseline is listed too (as not
        # checked), though TFMA ran without it.
        "thresholds": thresholds,
        "baseline_metrics": baseline_metrics,
        "class_metrics": class_metrics(result),
        "plots": plots_view(result),
    }
    fileio.write_file(fileio.join(output_path, VIEW_FILE), json.dumps(view, indent=1) + "\n")
    blessed, reason = bool(validation.validation_ok), ""
    if not _has_thresholds(run_config) and not failed:
        # TFMA refuses a model it has nothing to check on (missing_thresholds) unless
        # rubber-stamped; the Evaluator blesses it and says why, so that a first
        # regression model (its one threshold compares with a baseline) becomes the
        # baseline of the next run.
        blessed, reason = True, NO_THRESHOLDS
        if thresholds:
            reason = NO_BASELINE_TO_CHECK
    elif not blessed and not failed:
        reason = "TFMA's validation failed without naming a threshold" + (
            " (missing_thresholds)" if validation.missing_thresholds else ""
        )
    elif blessed:
        reason = passed(thresholds, metrics, baseline_metrics)
    return EvaluationResult(
        blessed=blessed,
        failures=failed,
        baseline=baseline,
        metrics=metrics,
        reason=reason,
    )


def _has_thresholds(config: config_pb2.EvalConfig) -> bool:
    """Whether the EvalConfig TFMA ran has any metric threshold to check (TFMA's own
    test, the one behind its ``missing_thresholds``)."""
    from tensorflow_model_analysis.metrics import metric_specs

    return bool(
        metric_specs.metric_thresholds_from_metrics_specs(config.metrics_specs, eval_config=config)
    )
