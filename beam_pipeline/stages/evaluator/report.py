"""The Evaluator's section of the run report: its verdict (``blessing/blessing.json``) with
TFMA's outputs as the Evaluator read them (``evaluation/report_view.json``: the
thresholds, the baseline's metrics, the per-class metrics and the plots), drawn as bars
per slice, confusion matrices and ROC, precision-recall and calibration curves."""

from __future__ import annotations

from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import ModelBlessing, ModelEvaluation
from beam_pipeline.engine.report_sections import (
    Fragment,
    ReportSection,
    ReportView,
    json_key_values,
)

__all__ = ["evaluation_section"]

_STYLE = (
    ".blessed { color: #1a7f37; font-weight: bold; } .not-blessed { color: #cf222e; "
    "font-weight: bold; }\ntd.fail { background: #ffebe9; } td.pass { background: #e6f4ea; }\n"
)
_MARKERS = {"BLESSED": ("blessed", True), "NOT_BLESSED": ("blessed", False)}


def evaluation_section(view: ReportView) -> ReportSection:
    section = ReportSection(
        "evaluation",
        "Evaluation",
        artifacts=(ModelEvaluation, ModelBlessing),
        empty="No evaluation in this run.",
        style=_STYLE,
    )
    with section.reading("the evaluation"):
        verdict = _verdict(view)
        if verdict is not None:
            values = {"verdict": verdict, "plots": {"evaluation": _plots(verdict)}}
            section.parts.append(Fragment("beam_pipeline.stages.evaluator", "report.html", values))
        # blessing.json is drawn as the verdict, its metrics and thresholds.
        skip = ("blessing.json",) if verdict is not None else ()
        section.parts.extend(json_key_values(view, ModelBlessing, skip, _MARKERS))
    return section


def _number(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _short(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else str(x)


def _failed_metric(name: str) -> tuple[str, bool]:
    """(the metric, whether it compared with the baseline) of a failure's metric name:
    "mean_squared_error vs baseline", or "... (change vs baseline)" in older blessings."""
    for suffix in (" vs baseline", " (change vs baseline)"):
        if name.endswith(suffix):
            return name[: -len(suffix)], True
    return name, False


def _verdict(view: ReportView) -> Optional[dict]:
    if not fileio.exists(view.path(ModelBlessing, "blessing.json")):
        return None
    blessing = view.read_json(ModelBlessing, "blessing.json")
    has_view = fileio.exists(view.path(ModelEvaluation, "report_view.json"))
    tfma = view.read_json(ModelEvaluation, "report_view.json") if has_view else {}
    candidate = blessing.get("metrics") or {}
    baseline = tfma.get("baseline_metrics") or {}
    names = sorted(
        {n for row in candidate.values() for n in row if not n.endswith("_diff")},
        key=lambda n: (n == "example_count", n),
    )
    rows = []
    for slice_name in sorted(candidate, key=lambda s: (s != "Overall", s)):
        values = candidate[slice_name]
        cells = {}
        for n in names:
            base = (baseline.get(slice_name) or {}).get(n)
            diff = values.get(f"{n}_diff")
            if base is None and diff is not None and n in values:
                base = values[n] - diff
            cells[n] = {"candidate": values.get(n), "baseline": base, "diff": diff}
        rows.append({"slice": slice_name, "cells": cells})
    failures = blessing.get("failures") or []
    thresholds = tfma.get("thresholds") or []
    for t in thresholds:
        failed = [
            f for f in failures if _failed_metric(f.get("metric", "")) == (t["metric"], t["change"])
        ]
        t["failed_on"] = [f.get("slice") for f in failed]
    reason = blessing.get("reason") or ""
    if failures:
        why = "; ".join(
            f"{f['metric']} on {f['slice']} = {_short(f.get('value'))}, needs {f['bound']}"
            for f in failures
        )
    else:
        why = reason or (
            "every threshold passed"
            if blessing.get("blessed")
            else "no reason recorded (an Evaluator of an older version)"
        )
    return {
        "blessed": bool(blessing.get("blessed")),
        "why": why,
        "baseline": blessing.get("baseline"),
        "metric_names": names,
        "rows": rows,
        "thresholds": thresholds,
        "failures": failures,
        "class_metrics": _overall_first(tfma.get("class_metrics") or {}),
        "plots": tfma.get("plots") or [],
        "has_view": bool(tfma),
    }


def _overall_first(by_slice: dict) -> dict:
    """Slices in a reader's order: Overall, then the others by name."""
    return {k: by_slice[k] for k in sorted(by_slice, key=lambda s: (s != "Overall", s))}


def _plots(verdict: dict) -> dict:
    """Per metric a bar chart over the slices (candidate and baseline, the value threshold
    as a dashed line); TFMA's plots: a confusion matrix per slice, ROC, precision-recall and
    calibration curves (one line per class) for the overall slice."""
    from beam_pipeline.core.svg import bars, lines, matrix

    bars_by_metric = {}
    for name in verdict["metric_names"]:
        groups = {}
        for row in verdict["rows"]:
            cell = row["cells"].get(name) or {}
            series = {"candidate": _number(cell.get("candidate"))}
            if cell.get("baseline") is not None:
                series["baseline"] = _number(cell.get("baseline"))
            groups[row["slice"]] = series
        bound = next(
            (
                (t["value"], f"threshold {t['bound']} ({t['slice']})")
                for t in verdict["thresholds"]
                if t["metric"] == name and not t["change"] and t.get("value") is not None
            ),
            None,
        )
        svg = bars(groups, xlabel=name, bound=bound)
        if svg:
            bars_by_metric[name] = svg
    matrices, roc, pr, calibration, residuals = {}, {}, {}, {}, {}
    plots = sorted(verdict["plots"], key=lambda p: (p["slice"] != "Overall", p["slice"]))
    # Every slice's matrix over the same classes (TFMA lists those a slice has).
    classes = sorted(
        {c for p in plots if p["kind"] == "MultiClassConfusionMatrixPlot" for c in p["classes"]}
    )
    for plot in plots:
        label = plot.get("sub_key") or "model"
        if plot["kind"] == "MultiClassConfusionMatrixPlot":
            counts = [[0.0] * len(classes) for _ in classes]
            for i, actual in enumerate(plot["classes"]):
                for j, predicted in enumerate(plot["classes"]):
                    counts[classes.index(actual)][classes.index(predicted)] = plot["counts"][i][j]
            matrices[plot["slice"]] = matrix([str(c) for c in classes], counts)
        elif plot["slice"] != "Overall":
            continue
        elif plot["kind"] == "ConfusionMatrixPlot":
            points = plot["points"]
            roc[label] = sorted((p["fpr"], p["tpr"]) for p in points)
            pr[label] = sorted((p["tpr"], p["precision"]) for p in points)
        elif plot["kind"] == "CalibrationPlot":
            calibration[label] = [(b["mean_prediction"], b["mean_label"]) for b in plot["buckets"]]
            if plot.get("span", [0.0, 1.0]) != [0.0, 1.0]:  # a regressor's: over its label
                residuals[label] = [
                    (b["mean_prediction"], b["mean_label"] - b["mean_prediction"])
                    for b in plot["buckets"]
                ]
    curves = {}
    if roc:
        curves["ROC (ConfusionMatrixPlot, Overall)"] = lines(
            roc, xlabel="false positive rate", ylabel="true positive rate", diagonal=True
        )
        curves["precision-recall (ConfusionMatrixPlot, Overall)"] = lines(
            pr, xlabel="recall", ylabel="precision"
        )
    if calibration:
        curves["calibration (CalibrationPlot, Overall)"] = lines(
            calibration, xlabel="mean prediction", ylabel="mean label", diagonal=True
        )
    if residuals:
        curves["residuals (CalibrationPlot, Overall)"] = lines(
            residuals, xlabel="mean prediction", ylabel="mean label - mean prediction"
        )
    return {"bars": bars_by_metric, "matrices": matrices, "curves": curves}
