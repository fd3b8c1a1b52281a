"""ExampleGen+Statistics' sections of the run report: the statistics per feature and split
(anomalous features marked) and the first rejected rows, read without Beam or TensorFlow."""

from __future__ import annotations

import json
from typing import Any

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Anomalies, RejectedRows, Statistics
from beam_pipeline.engine.report_sections import (
    Code,
    Fragment,
    Note,
    ReportSection,
    ReportView,
    Table,
)

__all__ = ["REJECTED_ROWS_SHOWN", "statistics_section", "rejected_section"]

REJECTED_ROWS_SHOWN = 20
_TOP_VALUES_SHOWN = 10
_STATISTICS_STYLE = (
    ".anomalous { color: #cf222e; } .badge { background: #ffebe9; color: #cf222e; border: "
    "1px solid #f0a0a0; border-radius: 3px; font-size: 11px; padding: 0 4px; margin-left: "
    ".4em; }\n"
)


def statistics_section(view: ReportView) -> ReportSection:
    """Per feature and split (train and eval side by side, as Facets shows them) the
    statistics a user checks, with overlaid histograms; the Validation's anomalies mark
    their features."""
    from beam_pipeline.core.svg import overlaid_histograms
    from beam_pipeline.stages.common.anomalies_file import read_anomalies, split_order

    section = ReportSection(
        "statistics",
        "Statistics",
        artifacts=(Statistics,),
        empty="No statistics.",
        style=_STATISTICS_STYLE,
    )
    splits: list[str] = []
    features: dict[str, dict] = {}
    with section.reading("the statistics"):
        from tensorflow_metadata.proto.v0 import statistics_pb2

        if not view.published(Statistics):
            section.missing.append(
                view.gone(Statistics)
                or "statistics: not published (ExampleGen's job did not finish)"
            )
            return section
        root = view.path(Statistics)
        found = sorted(
            (d.rstrip("/") for d in fileio.listdir(root) if fileio.isdir(fileio.join(root, d))),
            key=split_order,
        )
        for split in found:
            stats = Statistics.read_file(fileio.join(root, split, "FeatureStats.pb"))
            if not stats.datasets:
                continue
            splits.append(split)
            dataset = stats.datasets[0]
            for feature in dataset.features:
                name = ".".join(feature.path.step) or feature.name
                kind = statistics_pb2.FeatureNameStatistics.Type.Name(feature.type)
                entry = features.setdefault(name, {"type": kind, "splits": {}})
                entry["splits"][split] = _feature_stats(feature, dataset.num_examples)
    if not features:
        return section
    baseline = _drift_baseline(section, view)
    anomalous: dict[str, list[str]] = {}
    try:  # the marks only: the Validation's section says when its file is unreadable
        rows = read_anomalies(view)[0] if view.published(Anomalies) else []
    except Exception:  # noqa: BLE001 - a report never fails the run
        rows = []
    for a in rows:
        anomalous.setdefault(a["feature"], []).append(f"{a['split']}: {a['description']}")
    for name, feature in features.items():
        worst = max((st.get("missing_pct", 0.0) for st in feature["splits"].values()), default=0)
        feature["sort_key"] = (name not in anomalous, -worst, name)
    hist = {
        name: overlaid_histograms(
            {
                **{
                    split: stats.get("histogram") or []
                    for split, stats in feature["splits"].items()
                    if stats.get("histogram")
                },
                **{
                    f"baseline {split}": stats.get("histogram") or []
                    for split, stats in baseline.get(name, {}).items()
                    if stats.get("histogram")
                },
            }
        )
        for name, feature in features.items()
    }
    for name, feature in features.items():
        # This run's splits, then (where drift was checked) the baseline's train.
        feature["rows"] = [(split, feature["splits"].get(split)) for split in splits]
        if baseline:
            feature["rows"].append(("baseline train", baseline.get(name, {}).get("train")))
    data = {
        "splits": splits,
        "features": features,
        "anomalous": anomalous,
        "baseline": baseline.get("", ""),
    }
    values = {"data": data, "plots": {"hist": hist}}
    section.parts.append(Fragment("beam_pipeline.stages.example_gen", "report.html", values))
    return section


def _drift_baseline(section: ReportSection, view: ReportView) -> dict[str, dict]:
    """The drift baseline's statistics, drawn beside this run's (TFDV's
    ``visualize_statistics(lhs, rhs)``): feature -> split -> statistics, and under ""
    the baseline's folder; empty where drift was not checked."""

    from beam_pipeline.stages.common.anomalies_file import drift_baseline

    try:
        where = drift_baseline(view)
    except Exception:  # noqa: BLE001 - the Validation's section says when it is unreadable
        return {}
    if not where:
        return {}
    out: dict[str, dict] = {"": where}
    # Drift compares the train split (the Validation stage's rule).
    path = fileio.join(where, "train", "FeatureStats.pb")
    try:
        stats = Statistics.read_file(path)
    except Exception as e:  # noqa: BLE001 - a report never fails the run
        section.missing.append(f"the drift baseline's statistics {path}: not readable ({e})")
        return {}
    for dataset in stats.datasets[:1]:
        for feature in dataset.features:
            name = ".".join(feature.path.step) or feature.name
            out.setdefault(name, {})["train"] = _feature_stats(feature, dataset.num_examples)
    return out


def _feature_stats(feature, num_examples: int) -> dict[str, Any]:
    which = feature.WhichOneof("stats")
    out: dict[str, Any] = {"kind": which}
    if which == "num_stats":
        s = feature.num_stats
        common = s.common_stats
        out.update(min=s.min, mean=s.mean, max=s.max, std=s.std_dev, zeros=s.num_zeros)
        buckets = []
        for histogram in s.histograms:
            if histogram.type == histogram.STANDARD:
                buckets = [(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets]
        out["histogram"] = buckets
    elif which == "string_stats":
        s = feature.string_stats
        common = s.common_stats
        out.update(unique=s.unique, avg_length=s.avg_length)
        out["top_values"] = [(v.value, v.frequency) for v in s.top_values[:_TOP_VALUES_SHOWN]]
    elif which == "bytes_stats":
        common = feature.bytes_stats.common_stats
    else:
        common = None
    present = common.num_non_missing if common is not None else 0
    missing = common.num_missing if common is not None else 0
    total = present + missing or num_examples
    out.update(
        count=present,
        missing=missing,
        missing_pct=(100.0 * missing / total) if total else 0.0,
    )
    return out


def rejected_section(view: ReportView) -> ReportSection:
    """The first rejected rows, each with its file, line and reason; shown after the
    anomalies (the data's problems together)."""
    section = ReportSection(
        "rejected",
        "Rejected rows",
        artifacts=(RejectedRows,),
        empty="No row was rejected.",
        after="anomalies",
    )
    with section.reading("the rejected rows"):
        if not view.published(RejectedRows):
            section.missing.append(view.gone(RejectedRows) or "rejected rows: not published")
            return section
        total, shown = 0, []
        for path in sorted(fileio.glob(view.path(RejectedRows, "rejected-*.jsonl"))):
            with fileio.open(path, "r") as f:
                for line in f:
                    if not line.strip():
                        continue
                    total += 1
                    if len(shown) < REJECTED_ROWS_SHOWN:
                        row = json.loads(line)
                        text = str(row.get("text", ""))
                        text = text if len(text) <= 200 else text[:200] + " ..."
                        where = f"{row.get('file', '?')}:{row.get('line', '?')}"
                        shown.append([Code(where), row.get("reason", ""), Code(text)])
        if shown:
            section.parts.append(Note(f"{total} rejected; the first {len(shown)}:"))
            section.parts.append(Table(["file:line", "reason", "text"], shown))
    return section
