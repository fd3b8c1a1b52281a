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
label's dtype and the transformed label's class domain):

- multi-class (two or more scores): ``SparseCategoricalAccuracy``, at least 0.6 and not
  below the baseline's;
- binary (one output, an integer label): ``BinaryAccuracy``, at least 0.6 and not below
  the baseline's, and ``AUC`` (no threshold);
- regression (one output, a float label): ``MeanSquaredError`` (not above the baseline's)
  and ``MeanAbsoluteError`` (no threshold);
- one class (a label whose vocabulary has one value): ``SparseCategoricalAccuracy``, no
  threshold (there is nothing to tell apart);

each with ``ExampleCount``; slices: overall plus each ``--eval_slice_features`` feature.
Without a baseline, change thresholds are dropped and the model is judged on value
thresholds alone (TFMA's rubber stamp). A config left with no threshold at all (the first
regression model, a one-class label, an ``--eval_config`` without thresholds) blesses the
model, saying "no thresholds" (TFMA alone would refuse it with ``missing_thresholds``, and
no later run could have a baseline); a model that is not blessed always says why.

Example::

    config = build_eval_config(None, model_dir, schema, slice_features=("island",))
    result = run_evaluation(config, model_dir, None, "run/examples/eval/*", staging, options)
    result.blessed, result.failures
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from beam_pipeline.stages.common.blessings import (
    BLESSING_FILE,
    EvaluationResult,
    ThresholdFailure,
    read_blessing,
    write_blessing,
)

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_model_analysis.proto import config_pb2

__all__ = [
    "BLESSING_FILE",
    "DEFAULT_MIN_ACCURACY",
    "EvaluationResult",
    "ModelFacts",
    "ModelKind",
    "ThresholdFailure",
    "build_eval_config",
    "label_classes",
    "model_kind",
    "model_facts",
    "read_blessing",
    "run_evaluation",
    "write_blessing",
]

# Beside TFMA's own files in evaluation/: what the run report draws, read from TFMA's
# outputs while TFMA is loaded (the report reads no TFMA proto: `runs report` imports no
# TensorFlow). Not named metrics*/plots*/validations*: TFMA's readers glob those prefixes.
VIEW_FILE = "report_view.json"
# The points of a curve the view keeps (TFMA computes 1,000 thresholds, 10,000 buckets).
_CURVE_POINTS = 101
_CALIBRATION_BUCKETS = 10
# TFX's penguin example's bar for its accuracy threshold.
DEFAULT_MIN_ACCURACY = 0.6
# A change threshold that only refuses a model worse than the baseline (TFX's example).
_NOT_WORSE = 1e-10


class ModelKind(str, enum.Enum):
    """The kinds of model the default EvalConfig has metrics for."""

    MULTI_CLASS = "multi-class"
    BINARY = "binary"
    REGRESSION = "regression"
    ONE_CLASS = "one-class"


# What a verdict says when the config has no threshold left to check.
NO_THRESHOLDS = "no thresholds"


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the default EvalConfig and its checks need from the SavedModel."""

    signatures: tuple[str, ...]
    label_key: Optional[str]
    outputs: dict[str, tuple[Optional[int], ...]]
    transformed_features: tuple[str, ...]
    # The label's dtype as the transform_features signature computes it ("int", "float",
    # "string"), None where the model does not compute it.
    label_dtype: Optional[str] = None


def model_facts(model_dir: str) -> ModelFacts:
    """Loads the SavedModel once and reads its signatures, outputs and recorded label.

    Raises:
      PipelineError: the folder holds no SavedModel that loads.
    """
    import tensorflow as tf

    from trainer.export import SERVING_SIGNATURE, TRANSFORM_FEATURES_SIGNATURE

    try:
        loaded = tf.saved_model.load(model_dir)
    except Exception as e:  # noqa: BLE001  any load failure is the same user-facing problem
        raise PipelineError(
            f"The model in {model_dir} does not load ({type(e).__name__}: {first_line(e)}); "
            "rerun the Trainer (a new --run_id) so that it exports a SavedModel."
        ) from None
    signatures = tuple(sorted(loaded.signatures.keys()))
    outputs: dict[str, tuple[Optional[int], ...]] = {}
    if SERVING_SIGNATURE in loaded.signatures:
        for name, spec in loaded.signatures[SERVING_SIGNATURE].structured_outputs.items():
            outputs[name] = tuple(spec.shape.as_list())
    transformed: dict = {}
    if TRANSFORM_FEATURES_SIGNATURE in loaded.signatures:
        transformed = dict(loaded.signatures[TRANSFORM_FEATURES_SIGNATURE].structured_outputs)
    label = getattr(loaded, "evaluation_label_key", None)
    label_key = label.numpy().decode() if label is not None else None
    dtype = transformed[label_key].dtype if label_key in transformed else None
    if dtype is None:
        label_dtype = None
    elif dtype.is_integer or dtype.is_bool:
        label_dtype = "int"
    elif dtype.is_floating:
        label_dtype = "float"
    else:
        label_dtype = "string"
    return ModelFacts(
        signatures=signatures,
        label_key=label_key,
        outputs=outputs,
        transformed_features=tuple(sorted(transformed)),
        label_dtype=label_dtype,
    )


def label_classes(transform_graph: str, label_key: Optional[str]) -> Optional[int]:
    """How many classes the transformed label ``label_key`` has, from the integer domain
    tf.Transform recorded for it (``compute_and_apply_vocabulary`` records one: 0, or -1
    for an unknown value, to the vocabulary's size - 1); None when it has none (a raw or
    float label) or there is no schema."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path = fileio.join(transform_graph, "transformed_metadata", "schema.pbtxt")
    if not label_key or not fileio.exists(path):
        return None
    schema = text_format.Parse(fileio.read_file(path), schema_pb2.Schema())
    for feature in schema.feature:
        if feature.name == label_key and feature.HasField("int_domain"):
            domain = feature.int_domain
            if domain.HasField("min") and domain.HasField("max"):
                # Class ids count from 0; a vocabulary without OOV buckets records min -1,
                # its default value for an unknown string, which is no class.
                return int(domain.max - max(domain.min, 0) + 1)
    return None


def model_kind(facts: ModelFacts, classes: Optional[int] = None) -> ModelKind:
    """The kind of model ``facts`` describe: two or more scores a multi-class classifier;
    one output a one-class classifier (a label with one class), a binary classifier (an
    integer label) or a regressor (a float label, or one the model does not compute)."""
    key = _prediction_key(facts)
    shape = facts.outputs.get(key or next(iter(facts.outputs), ""), ())
    width = shape[-1] if shape and shape[-1] is not None else 1
    if classes == 1:
        return ModelKind.ONE_CLASS
    if width > 1:
        return ModelKind.MULTI_CLASS
    if facts.label_dtype == "int":
        return ModelKind.BINARY
    return ModelKind.REGRESSION


def _prediction_key(facts: ModelFacts) -> str:
    if len(facts.outputs) > 1:
        return "scores" if "scores" in facts.outputs else sorted(facts.outputs)[0]
    return ""


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
    facts: ModelFacts, model_dir: str, classes: Optional[int] = None
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
    spec.prediction_key = _prediction_key(facts)
    config = config_pb2.EvalConfig(model_specs=[spec])
    metrics = config.metrics_specs.add()
    metrics.metrics.add(class_name="ExampleCount")
    kind = model_kind(facts, classes)
    if kind in (ModelKind.MULTI_CLASS, ModelKind.BINARY):
        name = "SparseCategoricalAccuracy" if kind is ModelKind.MULTI_CLASS else "BinaryAccuracy"
        m = metrics.metrics.add(class_name=name)
        m.threshold.value_threshold.lower_bound.value = DEFAULT_MIN_ACCURACY
        m.threshold.change_threshold.direction = config_pb2.MetricDirection.HIGHER_IS_BETTER
        m.threshold.change_threshold.absolute.value = -_NOT_WORSE
        if kind is ModelKind.BINARY:
            metrics.metrics.add(class_name="AUC")
    elif kind is ModelKind.REGRESSION:
        m = metrics.metrics.add(class_name="MeanSquaredError")
        m.threshold.change_threshold.direction = config_pb2.MetricDirection.LOWER_IS_BETTER
        m.threshold.change_threshold.absolute.value = _NOT_WORSE
        metrics.metrics.add(class_name="MeanAbsoluteError")
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
    import keras
    import tensorflow_model_analysis as tfma

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
    for metrics in config.metrics_specs:
        for metric in metrics.metrics:
            name = metric.class_name
            if metric.module:
                continue  # a user's own metric class: TFMA imports it on the workers
            if not (hasattr(tfma.metrics, name) or hasattr(keras.metrics, name)):
                raise PipelineError(
                    f"{where} names metric {name!r}, which neither TFMA nor Keras defines; use "
                    "a class from tfma.metrics or keras.metrics (e.g. SparseCategoricalAccuracy)."
                )


def build_eval_config(
    eval_config_path: Optional[str],
    model_dir: str,
    schema: Optional[schema_pb2.Schema],
    slice_features: Sequence[str] = (),
    facts: Optional[ModelFacts] = None,
    label_classes: Optional[int] = None,
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

    Raises:
      PipelineError: the file does not parse, or names a metric, a slice feature or a
        label that does not exist; the model does not load.
    """
    if facts is None:
        facts = model_facts(model_dir)
    if eval_config_path:
        config = _parse_config_file(eval_config_path)
        where = f"--eval_config {eval_config_path}"
    else:
        config = _default_config(facts, model_dir, label_classes)
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


def _bound(threshold) -> str:
    """A readable bound of a TFMA MetricThreshold that failed."""
    if threshold.HasField("value_threshold"):
        v = threshold.value_threshold
        parts = []
        if v.HasField("lower_bound"):
            parts.append(f">= {v.lower_bound.value:g}")
        if v.HasField("upper_bound"):
            parts.append(f"<= {v.upper_bound.value:g}")
        return " and ".join(parts)
    from tensorflow_model_analysis.proto import config_pb2

    c = threshold.change_threshold
    word = "higher" if c.direction == config_pb2.MetricDirection.HIGHER_IS_BETTER else "lower"
    return f"change vs baseline {word} is better (absolute {c.absolute.value:g})"


def _miss(threshold, value: float) -> Optional[float]:
    """By how much ``value`` misses a TFMA MetricThreshold (None where it does not, or
    where the threshold is relative: its bound depends on the baseline's value)."""
    from tensorflow_model_analysis.proto import config_pb2

    if threshold.HasField("value_threshold"):
        v = threshold.value_threshold
        if v.HasField("lower_bound") and value < v.lower_bound.value:
            return v.lower_bound.value - value
        if v.HasField("upper_bound") and value > v.upper_bound.value:
            return value - v.upper_bound.value
        return None
    c = threshold.change_threshold
    if not c.HasField("absolute"):
        return None
    if c.direction == config_pb2.MetricDirection.HIGHER_IS_BETTER:
        miss = c.absolute.value - value
    else:
        miss = value - c.absolute.value
    return miss if miss > 0 else None


def _failures(validation) -> tuple[ThresholdFailure, ...]:
    from tensorflow_model_analysis import slicer

    out = []
    for per_slice in validation.metric_validations_per_slice:
        name = slicer.stringify_slice_key(slicer.deserialize_slice_key(per_slice.slice_key))
        for f in per_slice.failures:
            metric = f.metric_key.name + (" (change vs baseline)" if f.metric_key.is_diff else "")
            value = f.metric_value.double_value.value
            bound, miss = _bound(f.metric_threshold), _miss(f.metric_threshold, float(value))
            out.append(ThresholdFailure(metric, name, float(value), bound, miss))
    if validation.missing_slices:
        for s in validation.missing_slices:
            out.append(ThresholdFailure("slice", str(list(s.feature_keys)), math.nan, "present"))
    return tuple(out)


def _metrics(eval_result) -> dict[str, dict[str, float]]:
    from tensorflow_model_analysis import slicer

    table: dict[str, dict[str, float]] = {}
    for key, by_output in eval_result.slicing_metrics:
        values = by_output.get("", {}).get("", {})
        row = {
            k: float(v["doubleValue"])
            for k, v in values.items()
            if isinstance(v, dict) and "doubleValue" in v
        }
        table[slicer.stringify_slice_key(key)] = row
    return table


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
    failures = _failures(validation)
    view = {
        # The config as given: a change threshold without a baseline is listed too (as not
        # checked), though TFMA ran without it.
        "thresholds": _thresholds_view(config),
        "baseline_metrics": (
            _metrics(tfma.load_eval_result(output_path, model_name=BASELINE)) if baseline else {}
        ),
        "class_metrics": _class_metrics(result),
        "plots": _plots_view(result),
    }
    fileio.write_file(fileio.join(output_path, VIEW_FILE), json.dumps(view, indent=1) + "\n")
    blessed, reason = bool(validation.validation_ok), ""
    if not _has_thresholds(run_config) and not failures:
        # TFMA refuses a model it has nothing to check on (missing_thresholds) unless
        # rubber-stamped; the Evaluator blesses it and says why, so that a first
        # regression model (its one threshold compares with a baseline) becomes the
        # baseline of the next run.
        blessed, reason = True, NO_THRESHOLDS
    elif not blessed and not failures:
        reason = "TFMA's validation failed without naming a threshold" + (
            " (missing_thresholds)" if validation.missing_thresholds else ""
        )
    return EvaluationResult(
        blessed=blessed,
        failures=failures,
        baseline=baseline,
        metrics=_metrics(result),
        reason=reason,
    )


def _thresholds_view(config: config_pb2.EvalConfig) -> list[dict[str, Any]]:
    """Each threshold TFMA checked: the metric (as TFMA names it in its results), the
    slice it applies to, the bound in words and whether it compares with the baseline."""
    from tensorflow_model_analysis import slicer
    from tensorflow_model_analysis.metrics import metric_specs

    out = []
    found = metric_specs.metric_thresholds_from_metrics_specs(
        config.metrics_specs, eval_config=config
    )
    for key, entries in found.items():
        for slice_spec, threshold in entries:
            where = "every slice"
            if slice_spec is not None:
                spec = slicer.SingleSliceSpec(spec=slice_spec)
                where = str(spec) if not spec.is_overall() else "Overall"
            change = threshold.DESCRIPTOR.name == "GenericChangeThreshold"
            wrapped = config_pb2_threshold(threshold, change)
            out.append(
                {
                    "metric": key.name,
                    "sub_key": str(key.sub_key) if key.sub_key else "",
                    "slice": where,
                    "change": change,
                    "bound": _bound(wrapped),
                    "value": _threshold_value(threshold, change),
                }
            )
    return out


def config_pb2_threshold(threshold, change: bool):
    """A GenericValue/ChangeThreshold wrapped in a MetricThreshold (what :func:`_bound`
    reads)."""
    from tensorflow_model_analysis.proto import config_pb2

    wrapped = config_pb2.MetricThreshold()
    (wrapped.change_threshold if change else wrapped.value_threshold).CopyFrom(threshold)
    return wrapped


def _threshold_value(threshold, change: bool) -> Optional[float]:
    """The number a bar chart draws for a threshold: a value threshold's bound."""
    if change:
        return None
    if threshold.HasField("lower_bound"):
        return float(threshold.lower_bound.value)
    if threshold.HasField("upper_bound"):
        return float(threshold.upper_bound.value)
    return None


def _class_metrics(eval_result) -> dict[str, dict[str, float]]:
    """The metrics TFMA computed per class or top-k (``binarize`` in a metrics spec): slice
    -> "metric (classId:N)" -> value."""
    from tensorflow_model_analysis import slicer

    table: dict[str, dict[str, float]] = {}
    for key, by_output in eval_result.slicing_metrics:
        row = {}
        for output, by_sub_key in (by_output or {}).items():
            for sub_key, values in (by_sub_key or {}).items():
                if not sub_key:
                    continue
                for name, v in (values or {}).items():
                    if isinstance(v, dict) and "doubleValue" in v:
                        label = f"{name} ({sub_key}{', ' + output if output else ''})"
                        row[label] = float(v["doubleValue"])
        if row:
            table[slicer.stringify_slice_key(key)] = row
    return table


def _plots_view(eval_result) -> list[dict[str, Any]]:
    """TFMA's plots, thinned for drawing: per slice and class, a confusion matrix at
    thresholds as ROC and precision-recall points, a calibration histogram in 10 buckets,
    a multi-class confusion matrix as counts."""
    from tensorflow_model_analysis import slicer

    out = []
    for key, by_output in eval_result.plots:
        where = slicer.stringify_slice_key(key)
        # TFMA gives None for a slice (or output) it has no plot of: none was asked for.
        for output, by_sub_key in (by_output or {}).items():
            for sub_key, plots in (by_sub_key or {}).items():
                for name, plot in (plots or {}).items():
                    drawn = _plot_points(name, plot)
                    if drawn is not None:
                        out.append({"slice": where, "output": output, "sub_key": sub_key, **drawn})
    return out


def _plot_points(name: str, plot: dict) -> Optional[dict[str, Any]]:
    if name == "confusionMatrixAtThresholds":
        matrices = plot.get("matrices") or []
        step = max(1, len(matrices) // (_CURVE_POINTS - 1))
        kept = matrices[::step] + ([matrices[-1]] if (len(matrices) - 1) % step else [])
        points = []
        for m in kept:
            tp, fp = m.get("truePositives", 0.0), m.get("falsePositives", 0.0)
            tn, fn = m.get("trueNegatives", 0.0), m.get("falseNegatives", 0.0)
            points.append(
                {
                    "threshold": m.get("threshold", 0.0),
                    "tpr": tp / (tp + fn) if tp + fn else 0.0,
                    "fpr": fp / (fp + tn) if fp + tn else 0.0,
                    "precision": m.get("precision", tp / (tp + fp) if tp + fp else 1.0),
                }
            )
        return {"kind": "ConfusionMatrixPlot", "points": points}
    if name == "calibrationHistogramBuckets":
        merged = [[0.0, 0.0, 0.0] for _ in range(_CALIBRATION_BUCKETS)]
        for b in plot.get("buckets") or []:
            lo = b.get("lowerThresholdInclusive", 0.0)
            lo = 0.0 if lo == "-Infinity" else float(lo)
            i = min(max(int(lo * _CALIBRATION_BUCKETS), 0), _CALIBRATION_BUCKETS - 1)
            merged[i][0] += b.get("numWeightedExamples", 0.0)
            merged[i][1] += b.get("totalWeightedLabel", 0.0)
            merged[i][2] += b.get("totalWeightedRefinedPrediction", 0.0)
        buckets = [
            {
                "low": i / _CALIBRATION_BUCKETS,
                "count": n,
                "mean_label": label / n,
                "mean_prediction": prediction / n,
            }
            for i, (n, label, prediction) in enumerate(merged)
            if n
        ]
        return {"kind": "CalibrationPlot", "buckets": buckets}
    if name == "multiClassConfusionMatrixAtThresholds":
        matrices = plot.get("matrices") or []
        if not matrices:
            return None
        entries = matrices[0].get("entries") or []
        ids = sorted(
            {int(e.get("actualClassId", 0)) for e in entries}
            | {int(e.get("predictedClassId", 0)) for e in entries}
        )
        counts = [[0.0] * len(ids) for _ in ids]
        for e in entries:
            i, j = (
                ids.index(int(e.get("actualClassId", 0))),
                ids.index(int(e.get("predictedClassId", 0))),
            )
            counts[i][j] += e.get("numWeightedExamples", 0.0)
        return {"kind": "MultiClassConfusionMatrixPlot", "classes": ids, "counts": counts}
    return None


def _has_thresholds(config: config_pb2.EvalConfig) -> bool:
    """Whether the EvalConfig TFMA ran has any metric threshold to check (TFMA's own
    test, the one behind its ``missing_thresholds``)."""
    from tensorflow_model_analysis.metrics import metric_specs

    return bool(
        metric_specs.metric_thresholds_from_metrics_specs(config.metrics_specs, eval_config=config)
    )
