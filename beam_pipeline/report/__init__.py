"""The run report: ``report.html`` in the run directory, one self-contained file.

Written at the end of every run that got a run directory, a failed one too: each section
shows what the run directory holds (the stage table, per split and feature the statistics
a user checks in Facets with train and eval side by side, the schema, the anomalies, the
first rejected rows with file and line, the tuner's trials with the objective per trial
and per hyperparameter, the training curves from the TensorBoard event files in
``model_run/``, evaluation results when those stages exist) and says what is missing. No
script, no stylesheet or font from a network: plain HTML, CSS and inline SVG
(:mod:`beam_pipeline.report.svg`), rendered by a Jinja template (autoescaped).

Example::

    path = write_report("pipeline_runs/runs/20260101-120000")   # None if it failed
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import no_room
from beam_pipeline.report.data import ReportData, collect
from beam_pipeline.report.svg import bars, lines, matrix, overlaid_histograms, scatter

__all__ = ["REPORT_FILE", "render_report", "write_report"]

REPORT_FILE = "report.html"
_LOG = logging.getLogger(__name__)


def _number(x) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _x_axis(tag: str) -> str:
    """The x axis of a TensorBoard scalar as Keras logged it: ``epoch_*`` per epoch,
    ``batch_*`` and ``*_vs_iterations`` per training step."""
    if tag.startswith("epoch_"):
        return "epoch"
    return "step"


def _plots(data: ReportData) -> dict:
    """The SVG of each plot, keyed as the template uses them."""
    hist = {
        name: overlaid_histograms(
            {
                split: stats.get("histogram") or []
                for split, stats in feature["splits"].items()
                if stats.get("histogram")
            }
        )
        for name, feature in data.features.items()
    }
    curves = {
        tag: lines(
            runs,
            xlabel=_x_axis(tag),
            ylabel=tag.removeprefix("epoch_")
            .removeprefix("batch_")
            .removeprefix("evaluation_")
            .removesuffix("_vs_iterations"),
        )
        for tag, runs in sorted(data.curves.items())
    }
    single = {
        tag: all(len(points) == 1 for points in runs.values()) for tag, runs in data.curves.items()
    }
    trial_plots = {}
    scored = [
        (t, _number(t.get("objective")))
        for t in data.trials
        if _number(t.get("objective")) is not None
    ]
    objective = (data.objective or {}).get("name", "objective")
    if scored:
        trial_plots["per trial"] = scatter(
            [
                (float(i), y, f"trial {t.get('trial_id')}: {y:.4g}")
                for i, (t, y) in enumerate(scored)
            ],
            xlabel="trial (in the order recorded)",
            ylabel=objective,
        )
        for name in data.hyperparameter_names:
            values = [t.get("hyperparameters", {}).get(name) for t, _ in scored]
            numeric = all(_number(v) is not None for v in values)
            categories = [] if numeric else sorted({str(v) for v in values})
            xs = [float(v) if numeric else float(categories.index(str(v))) for v in values]
            trial_plots[name] = scatter(
                [
                    (x, y, f"trial {t.get('trial_id')}: {name}={v}, {y:.4g}")
                    for x, v, (t, y) in zip(xs, values, scored)
                ],
                xlabel=name,
                ylabel=objective,
                categories=categories,
                xlog=numeric and data.log_scaled.get(name, False),
            )
    trial_curves = ""
    if any(len(points) > 1 for points in data.trial_curves.values()):
        trial_curves = lines(
            {f"trial {k}": v for k, v in sorted(data.trial_curves.items())},
            xlabel="epoch",
            ylabel=objective,
            width=480,
        )
    return {
        "hist": hist,
        "curves": curves,
        "single_point_curves": single,
        "trials": trial_plots,
        "trial_curves": trial_curves,
        "evaluation": _evaluation_plots(data.verdict),
    }


def _evaluation_plots(verdict: Optional[dict]) -> dict:
    """Per metric a bar chart over the slices (candidate and baseline, the value threshold
    as a dashed line); TFMA's plots: a confusion matrix per slice, ROC, precision-recall and
    calibration curves (one line per class) for the overall slice."""
    if not verdict:
        return {"bars": {}, "matrices": {}, "curves": {}}
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
    matrices, roc, pr, calibration = {}, {}, {}, {}
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
    return {"bars": bars_by_metric, "matrices": matrices, "curves": curves}


def render_report(run_dir: str) -> str:
    """The report of ``run_dir`` as one HTML string (raises only on a template bug)."""
    import jinja2

    data = collect(run_dir)
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("beam_pipeline.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = _format_number
    return env.get_template("report.html").render(
        data=data, plots=_plots(data), run_name=os.path.basename(run_dir.rstrip("/"))
    )


def _format_number(x) -> str:
    n = _number(x)
    if n is None:
        return "-" if x is None else str(x)
    if n == int(n) and abs(n) < 1e15:
        return str(int(n))
    return f"{n:.4g}"


def write_report(run_dir: str) -> Optional[str]:
    """Writes ``<run_dir>/report.html`` (atomically); returns its path, or None when it
    could not be written (logged: a report never fails the run)."""
    path = fileio.join(run_dir, REPORT_FILE)
    try:
        fileio.write_atomic(path, render_report(run_dir))
    except Exception as e:  # noqa: BLE001 - a report never fails the run
        # On a full disk the run's own error said so already (and the CLI prints that
        # the report was not written): the log only.
        level = logging.INFO if no_room(e) else logging.WARNING
        _LOG.log(level, "The run report %s could not be written.", path, exc_info=True)
        return None
    return path
