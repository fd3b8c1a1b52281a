"""The Tuner's section of the run report: its trials (``tuner/trials.json``), the objective
per trial and per hyperparameter, and each trial's objective per epoch as keras-tuner
observed it (``tuner/*/trial_*/trial.json``)."""

from __future__ import annotations

import json
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Hyperparameters
from beam_pipeline.engine.report_sections import Fragment, ReportSection, ReportView

__all__ = ["trials_section"]


def _number(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def trials_section(view: ReportView) -> ReportSection:
    section = ReportSection(
        "trials",
        "Trials",
        artifacts=(Hyperparameters,),
        empty="No trials (the Tuner did not run).",
    )
    with section.reading("the tuner's trials"):
        if not fileio.exists(view.path(Hyperparameters, "trials.json")):
            if not view.skipped("Tuner"):
                section.missing.append(
                    view.gone(Hyperparameters)
                    or "trials: no tuner/trials.json (the Tuner did not run or finish)"
                )
            return section
        data = _read(view)
        if data["trials"]:
            values = {"data": data, "plots": _plots(data)}
            section.parts.append(Fragment("beam_pipeline.stages.tuner", "report.html", values))
    return section


def _read(view: ReportView) -> dict[str, Any]:
    record = view.read_json(Hyperparameters, "trials.json")
    trials = record.get("trials", [])
    names: list[str] = []
    for trial in trials:
        for name in trial.get("hyperparameters", {}):
            if name not in names:
                names.append(name)
    best = view.path(Hyperparameters, "best_hyperparameters.json")
    space = (
        view.read_json(Hyperparameters, "best_hyperparameters.json").get("space", [])
        if fileio.exists(best)
        else []
    )
    log_scaled = {}
    for hp in space:
        config = hp.get("config") or {}
        values = [v for v in config.get("values") or [] if isinstance(v, (int, float))]
        values += [
            v for v in (config.get("min_value"), config.get("max_value")) if isinstance(v, float)
        ]
        # Log-sampled (Float/Int sampling="log"), or a choice of positive numbers over a
        # decade or more (TFX's learning rates 1e-2, 1e-3): a linear axis would put all
        # but the largest at its left edge.
        log_scaled[config.get("name", "")] = config.get("sampling") == "log" or (
            len(values) > 1 and min(values) > 0 and max(values) / min(values) >= 10
        )
    objective = record.get("objective")
    name = (objective or {}).get("name")
    curves = {}
    for path in sorted(fileio.glob(view.path(Hyperparameters, "*", "trial_*", "trial.json"))):
        with fileio.open(path, "r") as f:
            trial = json.loads(f.read())
        observed = ((trial.get("metrics") or {}).get("metrics") or {}).get(name) or {}
        points = [
            (int(o.get("step", 0)), float(o["value"][0]))
            for o in observed.get("observations") or []
            if o.get("value")
        ]
        if points:
            curves[str(trial.get("trial_id"))] = sorted(points)
    return {
        "objective": objective,
        "trials": trials,
        "hyperparameter_names": names,
        "log_scaled": log_scaled,
        "trial_curves": curves,
        # Early stopping ran: the table gets each trial's epochs and highest rung.
        "rungs": any(t.get("rung") is not None for t in trials),
    }


def _plots(data: dict[str, Any]) -> dict[str, Any]:
    """The objective per trial and per hyperparameter (a log axis where the search samples
    on one), and per epoch of each trial when a trial logged more than one."""
    from beam_pipeline.core.svg import lines, scatter

    trial_plots = {}
    scored = [
        (t, _number(t.get("objective")))
        for t in data["trials"]
        if _number(t.get("objective")) is not None
    ]
    objective = (data["objective"] or {}).get("name", "objective")
    if scored:
        trial_plots["per trial"] = scatter(
            [
                (float(i), y, f"trial {t.get('trial_id')}: {y:.4g}")
                for i, (t, y) in enumerate(scored)
            ],
            xlabel="trial (in the order recorded)",
            ylabel=objective,
        )
        for name in data["hyperparameter_names"]:
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
                xlog=numeric and data["log_scaled"].get(name, False),
            )
    trial_curves = ""
    if any(len(points) > 1 for points in data["trial_curves"].values()):
        trial_curves = lines(
            {f"trial {k}": v for k, v in sorted(data["trial_curves"].items())},
            xlabel="epoch",
            ylabel=objective,
            width=480,
        )
    return {"trials": trial_plots, "trial_curves": trial_curves}
