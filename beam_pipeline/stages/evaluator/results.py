"""TFMA's results read back for the Evaluator: the sliced metrics, each threshold in
words, the failures of TFMA's validation result in plain words (which slice, which metric,
by how much, against what), and the view the run report draws (thresholds, per-class
metrics, plots thinned for drawing).

Example::

    result = tfma.load_eval_result(output_path)
    sliced_metrics(result)["Overall"]["mean_squared_error"]
    failures(tfma.load_validation_result(output_path), baseline_metrics)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.engine.artifacts import ThresholdFailure

if TYPE_CHECKING:
    from tensorflow_model_analysis.proto import config_pb2

__all__ = [
    "VIEW_FILE",
    "allowed_value",
    "bound",
    "class_metrics",
    "failures",
    "number",
    "passed",
    "plots_view",
    "sliced_metrics",
    "thresholds_view",
]


def number(v: float) -> str:
    """A metric as a person reads it: a count whole (333447), others to 4 significant
    digits, e-notation only where a value needs it (1.23e+07, not 30 digits)."""
    v = float(v)
    if math.isfinite(v) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


# Beside TFMA's own files in evaluation/: what the run report draws, read from TFMA's
# outputs while TFMA is loaded (the report reads no TFMA proto: `runs report` imports no
# TensorFlow). Not named metrics*/plots*/validations*: TFMA's readers glob those prefixes.
VIEW_FILE = "report_view.json"
# The points of a curve the view keeps (TFMA computes 1,000 thresholds, 10,000 buckets).
_CURVE_POINTS = 101
_CALIBRATION_BUCKETS = 10


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _change_words(c, base: Optional[float] = None) -> str:
    """A GenericChangeThreshold in words: how much worse than the baseline it allows (a
    tolerance), or how much better it asks for."""
    from tensorflow_model_analysis.proto import config_pb2

    lower = c.direction == config_pb2.MetricDirection.LOWER_IS_BETTER
    parts = []
    for field, shown in (("relative", _pct), ("absolute", number)):
        if not c.HasField(field):
            continue
        v = getattr(c, field).value
        worse = v > 0 if lower else v < 0  # a tolerance: it may be this much worse
        side = ("above" if lower else "below") if worse else ("below" if lower else "above")
        parts.append(f"{'at most' if worse else 'at least'} {shown(abs(v))} {side} the baseline's")
    allowed = " and ".join(parts) or "any change from the baseline's"
    value = f" {number(base)}" if base is not None else ""
    return f"{allowed}{value} ({'lower' if lower else 'higher'} is better)"


def bound(threshold) -> str:
    """A TFMA MetricThreshold in words: a value threshold's bound, or how much worse than
    the baseline a change threshold allows."""
    if threshold.HasField("value_threshold"):
        v = threshold.value_threshold
        parts = []
        if v.HasField("lower_bound"):
            parts.append(f">= {number(v.lower_bound.value)}")
        if v.HasField("upper_bound"):
            parts.append(f"<= {number(v.upper_bound.value)}")
        return " and ".join(parts)
    return _change_words(threshold.change_threshold)


def allowed_value(c, base: float) -> Optional[float]:
    """The candidate's worst allowed value under change threshold ``c`` against a baseline
    value ``base`` (the stricter of its relative and absolute parts); None without one."""
    from tensorflow_model_analysis.proto import config_pb2

    lower = c.direction == config_pb2.MetricDirection.LOWER_IS_BETTER
    limits = []
    if c.HasField("relative") and base != 0:
        limits.append(base + c.relative.value * abs(base))
    if c.HasField("absolute"):
        limits.append(base + c.absolute.value)
    if not limits:
        return None
    return min(limits) if lower else max(limits)


def _value_miss(v, value: float) -> Optional[float]:
    if v.HasField("lower_bound") and value < v.lower_bound.value:
        return v.lower_bound.value - value
    if v.HasField("upper_bound") and value > v.upper_bound.value:
        return value - v.upper_bound.value
    return None


def _change_failure(metric: str, where: str, c, diff: float, base: Optional[float]):
    """A failed change threshold in plain words: the candidate's value, the bound it
    needed (from the baseline's value), how far from the baseline it is and by how much
    it missed."""
    from tensorflow_model_analysis.proto import config_pb2

    if base is None:  # the baseline's value is not known: the change alone
        return ThresholdFailure(
            f"{metric} vs baseline", where, diff, f"a change {_change_words(c)}", None
        )
    value = base + diff
    allowed = allowed_value(c, base)
    if diff == 0:
        moved = "the same as the baseline's"
    else:
        share = f"{_pct(abs(diff / base))} " if base else ""
        moved = f"{share}{'above' if diff > 0 else 'below'} the baseline's"
    if allowed is None:
        return ThresholdFailure(f"{metric} vs baseline", where, value, _change_words(c, base), None)
    lower = c.direction == config_pb2.MetricDirection.LOWER_IS_BETTER
    words = f"{'<=' if lower else '>='} {number(allowed)}, {_change_words(c, base)} (it is {moved})"
    return ThresholdFailure(f"{metric} vs baseline", where, value, words, abs(value - allowed))


def failures(
    validation, baseline_metrics: Mapping[str, Mapping[str, float]]
) -> tuple[ThresholdFailure, ...]:
    """Each threshold TFMA's validation result says failed, in plain words: which slice,
    which metric, its value, what it needed (against the baseline's value where it
    compares with one) and by how much it missed."""
    from tensorflow_model_analysis import slicer

    out = []
    for per_slice in validation.metric_validations_per_slice:
        where = slicer.stringify_slice_key(slicer.deserialize_slice_key(per_slice.slice_key))
        for f in per_slice.failures:
            value = float(f.metric_value.double_value.value)
            t = f.metric_threshold
            if f.metric_key.is_diff:
                base = (baseline_metrics.get(where) or {}).get(f.metric_key.name)
                out.append(
                    _change_failure(f.metric_key.name, where, t.change_threshold, value, base)
                )
            else:
                miss = _value_miss(t.value_threshold, value)
                out.append(ThresholdFailure(f.metric_key.name, where, value, bound(t), miss))
    for s in validation.missing_slices:
        out.append(ThresholdFailure("slice", str(list(s.feature_keys)), math.nan, "present"))
    return tuple(out)


def passed(
    thresholds: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Mapping[str, float]],
    baseline_metrics: Mapping[str, Mapping[str, float]],
) -> str:
    """The thresholds checked on the Overall slice, in plain words (a blessed verdict's
    reason): each metric's value, and against the baseline's by how much it changed."""
    overall, base = metrics.get("Overall") or {}, baseline_metrics.get("Overall") or {}
    out = []
    for t in thresholds:
        name = t["metric"]
        if t["slice"] not in ("Overall", "every slice") or name not in overall:
            continue
        value = overall[name]
        if not t["change"]:
            out.append(f"{name} on Overall = {number(value)}, needs {t['bound']}")
        elif name in base:
            b = base[name]
            moved = f"{_pct(abs(value - b) / abs(b))} " if b else ""
            side = "lower" if value < b else "higher" if value > b else "no different"
            than = f"{moved}{side} than" if side != "no different" else "the same as"
            out.append(
                f"{name} on Overall = {number(value)}, {than} the baseline's {number(b)} "
                f"(allowed: {t['bound']})"
            )
    return "; ".join(out)


def sliced_metrics(eval_result) -> dict[str, dict[str, float]]:
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


def thresholds_view(config: config_pb2.EvalConfig) -> list[dict[str, Any]]:
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
                    "bound": bound(wrapped),
                    "value": _threshold_value(threshold, change),
                }
            )
    return out


def config_pb2_threshold(threshold, change: bool):
    """A GenericValue/ChangeThreshold wrapped in a MetricThreshold (what :func:`bound`
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


def class_metrics(eval_result) -> dict[str, dict[str, float]]:
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


def plots_view(eval_result) -> list[dict[str, Any]]:
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
        # TFMA's buckets span [left, right] of its CalibrationPlot ([0, 1] for a
        # classifier's probability, the label's range for a regressor), with one open
        # bucket below and one above: merged into 10 over that span.
        found = plot.get("buckets") or []
        edges = [
            float(x)
            for b in found
            for x in (b.get("lowerThresholdInclusive"), b.get("upperThresholdExclusive"))
            if isinstance(x, (int, float)) and math.isfinite(float(x))
        ]
        left, right = (min(edges), max(edges)) if edges else (0.0, 1.0)
        width = (right - left) or 1.0
        merged = [[0.0, 0.0, 0.0] for _ in range(_CALIBRATION_BUCKETS)]
        for b in found:
            lo = b.get("lowerThresholdInclusive", left)
            finite = isinstance(lo, (int, float)) and math.isfinite(float(lo))
            lo = float(lo) if finite else left  # TFMA's open bucket below: "-Infinity"
            i = min(
                max(int((lo - left) / width * _CALIBRATION_BUCKETS), 0), _CALIBRATION_BUCKETS - 1
            )
            merged[i][0] += b.get("numWeightedExamples", 0.0)
            merged[i][1] += b.get("totalWeightedLabel", 0.0)
            merged[i][2] += b.get("totalWeightedRefinedPrediction", 0.0)
        buckets = [
            {
                "low": left + i * width / _CALIBRATION_BUCKETS,
                "count": n,
                "mean_label": label / n,
                "mean_prediction": prediction / n,
            }
            for i, (n, label, prediction) in enumerate(merged)
            if n
        ]
        return {"kind": "CalibrationPlot", "span": [left, right], "buckets": buckets}
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
