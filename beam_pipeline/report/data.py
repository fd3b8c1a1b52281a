"""Reads what a run directory holds into plain values for the report's template.

Each section is read on its own and never raises: a missing artifact (a failed run, a
skipped stage) or one that cannot be parsed becomes a line in ``missing`` saying what is
missing and why, and the other sections still render.

Each artifact is read where the run's manifest (``manifest.json``: per finished stage its
typed outputs with their URIs, the record the stage cache and the metadata store's lineage
are written from) says it is: a stage the run reused from an earlier run (``cached``) has
its outputs in that run's folder, and the section says which run it came from.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact

__all__ = ["Origin", "ReportData", "collect", "REJECTED_ROWS_SHOWN"]

_LOG = logging.getLogger(__name__)
REJECTED_ROWS_SHOWN = 20
_TOP_VALUES_SHOWN = 10
# The model-check stages' folders (Evaluator: blessing/, InfraValidator: infra_blessing/,
# Pusher: pushed_model/), read by name so that the report needs none of their code: their
# JSON files are shown as they are, and their blessing markers, when present.
_EXTRA_ARTIFACTS = ("blessing", "infra_blessing", "pushed_model")
_MARKERS = ("BLESSED", "NOT_BLESSED", "INFRA_BLESSED", "INFRA_NOT_BLESSED")
# Each section's artifacts (folder names), for the "reused from run X" line it shows.
SECTION_ARTIFACTS = {
    "statistics": (Artifact.STATISTICS.value,),
    "schema": (Artifact.SCHEMA.value,),
    "anomalies": (Artifact.ANOMALIES.value,),
    "rejected": (Artifact.REJECTED.value,),
    "trials": (Artifact.TUNER.value,),
    "training": (Artifact.MODEL_RUN.value,),
    "evaluation": (Artifact.EVALUATION.value, *_EXTRA_ARTIFACTS),
}


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where one artifact of the run is read from.

    Attributes:
      path: the artifact's folder.
      run_id: the run that published it.
      reused: published by an earlier run, whose output this run's stage reused.
    """

    path: str
    run_id: str
    reused: bool


@dataclasses.dataclass
class ReportData:
    """Everything the template shows; a section whose artifact is missing stays empty."""

    run_dir: str
    stages: list[dict] = dataclasses.field(default_factory=list)
    # artifact folder name -> where it is read (from the manifest; this run's folder else)
    origins: dict[str, Origin] = dataclasses.field(default_factory=dict)
    # section id -> the earlier runs whose artifacts the section shows
    reused_from: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    splits: list[str] = dataclasses.field(default_factory=list)
    # feature name -> {"type": ..., "splits": {split: stats dict}}
    features: dict[str, dict] = dataclasses.field(default_factory=dict)
    schema: list[dict] = dataclasses.field(default_factory=list)
    anomalies: list[dict] = dataclasses.field(default_factory=list)
    anomalies_text: str = ""
    # feature -> its anomalies ("split: description"), for the marks in the statistics
    anomalous: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    rejected: list[dict] = dataclasses.field(default_factory=list)
    rejected_total: int = 0
    trials: list[dict] = dataclasses.field(default_factory=list)
    objective: Optional[dict] = None
    hyperparameter_names: list[str] = dataclasses.field(default_factory=list)
    # tag -> {"train": [(step, value)], "validation": [...]}
    curves: dict[str, dict[str, list[tuple[int, float]]]] = dataclasses.field(default_factory=dict)
    training: Optional[dict] = None
    # hyperparameter name -> True when the search samples it on a log scale
    log_scaled: dict[str, bool] = dataclasses.field(default_factory=dict)
    # trial id -> [(step, objective)] as keras-tuner observed them (per epoch)
    trial_curves: dict[str, list[tuple[int, float]]] = dataclasses.field(default_factory=dict)
    # the Evaluator's verdict, metrics per slice (candidate, baseline), thresholds, plots
    verdict: Optional[dict] = None
    evaluation: list[dict] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)


def collect(run_dir: str) -> ReportData:
    """Reads every section of the report from ``run_dir``; never raises."""
    data = ReportData(run_dir=run_dir)
    sections: list[tuple[str, Callable[[ReportData], None]]] = [
        ("the run summary (summary.json)", _summary),
        ("the run manifest (manifest.json)", _origins),
        ("the statistics", _statistics),
        ("the schema", _schema),
        ("the anomalies", _anomalies),
        ("the rejected rows", _rejected),
        ("the tuner's trials", _trials),
        ("the training curves", _curves),
        ("the evaluation", _evaluation),
    ]
    for what, read in sections:
        try:
            read(data)
        except Exception as e:  # noqa: BLE001 - a report never fails the run
            _LOG.info("report: %s could not be read", what, exc_info=True)
            data.missing.append(f"{what}: could not be read ({type(e).__name__}: {e})")
    for a in data.anomalies:
        data.anomalous.setdefault(a["feature"], []).append(f"{a['split']}: {a['description']}")
    for name, feature in data.features.items():
        worst = max((st.get("missing_pct", 0.0) for st in feature["splits"].values()), default=0)
        feature["sort_key"] = (name not in data.anomalous, -worst, name)
    for section, names in SECTION_ARTIFACTS.items():
        found = [data.origins[n] for n in names if n in data.origins]
        reused = [o.run_id for o in found if o.reused]
        if reused:
            data.reused_from[section] = sorted(set(reused))
    return data


def _absolute(path: str) -> str:
    path = path.rstrip("/")
    return path if fileio.is_remote(path) else os.path.abspath(path)


def _origins(data: ReportData) -> None:
    """Where each artifact of the run is, from the manifest's record of each finished
    stage: a cached stage's outputs are an earlier run's (``<root>/runs/<run_id>/<name>``)."""
    from beam_pipeline.engine.manifest import MANIFEST_FILE

    path = fileio.join(data.run_dir, MANIFEST_FILE)
    if not fileio.exists(path):
        return  # a run made before manifests: every artifact is in its own folder
    own = _absolute(data.run_dir)
    for record in (json.loads(_read_text(path)).get("stages") or {}).values():
        for name, output in zip(record.get("artifacts") or [], record.get("outputs") or []):
            uri = _absolute(str(output.get("uri") or ""))
            if not uri:
                continue
            folder = uri.rsplit("/", 1)[0]
            data.origins[name] = Origin(
                path=uri, run_id=folder.rsplit("/", 1)[-1], reused=folder != own
            )


def _path(data: ReportData, artifact: Artifact | str, *parts: str) -> str:
    name = artifact.value if isinstance(artifact, Artifact) else artifact
    origin = data.origins.get(name)
    if origin is not None:
        return fileio.join(origin.path, *parts)
    return fileio.join(data.run_dir, name, *parts)


def _published(data: ReportData, artifact: Artifact | str) -> bool:
    return fileio.exists(_path(data, artifact, PUBLISHED_MARKER))


def _gone(data: ReportData, artifact: Artifact) -> Optional[str]:
    """For an artifact this run reused that is no longer published where the earlier run
    put it: the line saying so (the stage did finish, in that run); else None."""
    origin = data.origins.get(artifact.value)
    if origin is None or not origin.reused or _published(data, artifact):
        return None
    return (
        f"{artifact.value}: reused from run {origin.run_id}, but {origin.path} is no longer "
        "published there (deleted or moved since)"
    )


def _read_text(path: str) -> str:
    with fileio.open(path, "r") as f:
        return f.read()


def _summary(data: ReportData) -> None:
    path = fileio.join(data.run_dir, "summary.json")
    if not fileio.exists(path):
        data.missing.append("the stage table: no summary.json (the run stopped before any stage)")
        return
    blank = {"status": "?", "rows_in": {}, "rows_out": {}, "rows_rejected": 0, "seconds": 0.0}
    blank.update(note="", artifact=None)
    data.stages = [{**blank, **s} for s in json.loads(_read_text(path)).get("stages", [])]


def _statistics(data: ReportData) -> None:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if not _published(data, Artifact.STATISTICS):
        data.missing.append(
            _gone(data, Artifact.STATISTICS)
            or "statistics: not published (ExampleGen's job did not finish)"
        )
        return
    root = _path(data, Artifact.STATISTICS)
    splits = sorted(
        (d.rstrip("/") for d in fileio.listdir(root) if fileio.isdir(fileio.join(root, d))),
        key=_split_order,
    )
    for split in splits:
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        with fileio.open(fileio.join(root, split, "FeatureStats.pb"), "rb") as f:
            stats.ParseFromString(f.read())
        if not stats.datasets:
            continue
        data.splits.append(split)
        dataset = stats.datasets[0]
        for feature in dataset.features:
            name = ".".join(feature.path.step) or feature.name
            entry = data.features.setdefault(name, {"type": _feature_type(feature), "splits": {}})
            entry["splits"][split] = _feature_stats(feature, dataset.num_examples)


def _split_order(split: str) -> tuple[int, str]:
    return ({"train": 0, "eval": 1, "test": 2}.get(split, 3), split)


def _feature_type(feature) -> str:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    return statistics_pb2.FeatureNameStatistics.Type.Name(feature.type)


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


def _schema(data: ReportData) -> None:
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path = _path(data, Artifact.SCHEMA, "schema.pbtxt")
    if not fileio.exists(path):
        data.missing.append(_gone(data, Artifact.SCHEMA) or "schema: not published")
        return
    schema = text_format.Parse(_read_text(path), schema_pb2.Schema())
    domains = {d.name: list(d.value) for d in schema.string_domain}
    for f in schema.feature:
        domain = list(f.string_domain.value) or domains.get(f.domain, [])
        presence = f.presence
        if presence.min_fraction >= 1.0:
            required = "required"
        elif presence.min_count >= 1:
            required = "in every split"
        else:
            required = "optional"
        shape = "x".join(str(d.size) for d in f.shape.dim) if f.HasField("shape") else "-"
        data.schema.append(
            {
                "name": f.name,
                "type": schema_pb2.FeatureType.Name(f.type),
                "presence": required,
                "shape": shape,
                "domain": ", ".join(domain[:12]) + (" ..." if len(domain) > 12 else ""),
            }
        )


def _anomalies(data: ReportData) -> None:
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    if not _published(data, Artifact.ANOMALIES):
        data.missing.append(
            _gone(data, Artifact.ANOMALIES) or "anomalies: not published (validation did not run)"
        )
        return
    root = _path(data, Artifact.ANOMALIES)
    summary = fileio.join(root, "summary.txt")
    if fileio.exists(summary):
        data.anomalies_text = _read_text(summary)
    for split in sorted(fileio.listdir(root), key=_split_order):
        path = fileio.join(root, split.rstrip("/"), "SchemaDiff.pb")
        if not fileio.exists(path):
            continue
        anomalies = anomalies_pb2.Anomalies()
        with fileio.open(path, "rb") as f:
            anomalies.ParseFromString(f.read())
        for name, info in sorted(anomalies.anomaly_info.items()):
            data.anomalies.append(
                {
                    "split": split.rstrip("/"),
                    "feature": name,
                    "severity": anomalies_pb2.AnomalyInfo.Severity.Name(info.severity),
                    "description": info.description or info.short_description,
                }
            )


def _rejected(data: ReportData) -> None:
    if not _published(data, Artifact.REJECTED):
        data.missing.append(_gone(data, Artifact.REJECTED) or "rejected rows: not published")
        return
    for path in sorted(fileio.glob(_path(data, Artifact.REJECTED, "rejected-*.jsonl"))):
        with fileio.open(path, "r") as f:
            for line in f:
                if not line.strip():
                    continue
                data.rejected_total += 1
                if len(data.rejected) < REJECTED_ROWS_SHOWN:
                    row = json.loads(line)
                    text = str(row.get("text", ""))
                    row["text"] = text if len(text) <= 200 else text[:200] + " ..."
                    data.rejected.append(row)


def _trials(data: ReportData) -> None:
    path = _path(data, Artifact.TUNER, "trials.json")
    if not fileio.exists(path):
        if not _skipped(data, "Tuner"):
            data.missing.append(
                _gone(data, Artifact.TUNER)
                or "trials: no tuner/trials.json (the Tuner did not run or finish)"
            )
        return
    record = json.loads(_read_text(path))
    data.objective = record.get("objective")
    data.trials = record.get("trials", [])
    names: list[str] = []
    for trial in data.trials:
        for name in trial.get("hyperparameters", {}):
            if name not in names:
                names.append(name)
    data.hyperparameter_names = names
    best = _path(data, Artifact.TUNER, "best_hyperparameters.json")
    space = json.loads(_read_text(best)).get("space", []) if fileio.exists(best) else []
    for hp in space:
        config = hp.get("config") or {}
        values = [v for v in config.get("values") or [] if isinstance(v, (int, float))]
        values += [
            v for v in (config.get("min_value"), config.get("max_value")) if isinstance(v, float)
        ]
        # Log-sampled (Float/Int sampling="log"), or a choice of positive numbers over a
        # decade or more (TFX's learning rates 1e-2, 1e-3): a linear axis would put all
        # but the largest at its left edge.
        data.log_scaled[config.get("name", "")] = config.get("sampling") == "log" or (
            len(values) > 1 and min(values) > 0 and max(values) / min(values) >= 10
        )
    objective = (data.objective or {}).get("name")
    for path in sorted(fileio.glob(_path(data, Artifact.TUNER, "*", "trial_*", "trial.json"))):
        trial = json.loads(_read_text(path))
        observed = ((trial.get("metrics") or {}).get("metrics") or {}).get(objective) or {}
        points = [
            (int(o.get("step", 0)), float(o["value"][0]))
            for o in observed.get("observations") or []
            if o.get("value")
        ]
        if points:
            data.trial_curves[str(trial.get("trial_id"))] = sorted(points)


def _skipped(data: ReportData, stage: str) -> bool:
    """Whether the summary says ``stage`` was skipped (nothing of it is missing then)."""
    return any(s.get("stage") == stage and s.get("status") == "skipped" for s in data.stages)


def _curves(data: ReportData) -> None:
    root = _path(data, Artifact.MODEL_RUN)
    if not fileio.exists(root):
        if not _skipped(data, "Trainer"):
            data.missing.append(
                _gone(data, Artifact.MODEL_RUN)
                or "training curves: no model_run/ (the Trainer did not run)"
            )
        return
    result = fileio.join(root, "training_result.json")
    if fileio.exists(result):
        data.training = json.loads(_read_text(result))
    events = [
        p
        for p in fileio.glob(fileio.join(root, "*", "events.out.tfevents.*"))
        + fileio.glob(fileio.join(root, "events.out.tfevents.*"))
    ]
    if not events:
        data.missing.append("training curves: no TensorBoard event files in model_run/")
        return
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    for path in sorted(events):
        run = os.path.basename(os.path.dirname(path))
        run = "train" if run == os.path.basename(root) else run
        for record in _tfrecords(path):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor") and value.tensor.dtype in (1, 2):  # float, double
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1:
                        continue
                    number = float(array.reshape(()))
                else:
                    continue
                if math.isfinite(number):
                    data.curves.setdefault(value.tag, {}).setdefault(run, []).append(
                        (int(event.step), number)
                    )
    for runs in data.curves.values():
        for points in runs.values():
            points.sort()


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tfrecords(path: str):
    """The records of a TFRecord file (TensorBoard's event files), each checked.

    Written out because every reader at hand imports TensorFlow (TensorFlow's, and
    TensorBoard's when TensorFlow is installed), several times what a `runs report`
    otherwise takes. Beam's ``_TFRecordUtil`` (the framing ``transforms.tfrecords`` writes
    with) has the same checks, but importing Beam would cost the command seconds too. The
    format: a little-endian 8-byte length, its masked CRC-32C, the
    record, its masked CRC-32C. Reading stops at a truncated or damaged record (a run
    killed while TensorBoard wrote), so the curves keep the points before it.
    """
    import struct

    with fileio.open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            length, length_crc = struct.unpack("<QI", header)
            if _masked_crc(header[:8]) != length_crc:
                _LOG.warning("%s: a damaged record length; the curves stop there.", path)
                return
            record, footer = f.read(length), f.read(4)
            if len(record) < length or len(footer) < 4:
                return  # truncated: the writer was stopped
            if struct.unpack("<I", footer)[0] != _masked_crc(record):
                _LOG.warning("%s: a damaged record; the curves stop there.", path)
                return
            yield record


def _evaluation(data: ReportData) -> None:
    _verdict(data)
    for name in _EXTRA_ARTIFACTS:
        root = _path(data, name)
        if not fileio.isdir(root):
            continue
        for path in sorted(fileio.glob(fileio.join(root, "*.json"))):
            if name == Artifact.BLESSING.value and data.verdict is not None:
                continue  # drawn as the verdict, its metrics and thresholds
            try:
                content = json.loads(_read_text(path))
            except ValueError:
                continue
            data.evaluation.append(
                {"artifact": name, "file": os.path.basename(path), "items": _flatten(content)}
            )
        for marker in _MARKERS:
            if fileio.exists(fileio.join(root, marker)):
                blessed = not marker.endswith("NOT_BLESSED")
                data.evaluation.append(
                    {"artifact": name, "file": marker, "items": [("blessed", blessed)]}
                )


def _verdict(data: ReportData) -> None:
    """The Evaluator's verdict (``blessing/blessing.json``) with TFMA's outputs as the
    Evaluator read them (``evaluation/report_view.json``: the thresholds, the baseline's
    metrics, the per-class metrics and the plots)."""
    path = _path(data, Artifact.BLESSING, "blessing.json")
    if not fileio.exists(path):
        return
    blessing = json.loads(_read_text(path))
    view_path = _path(data, Artifact.EVALUATION, "report_view.json")
    view = json.loads(_read_text(view_path)) if fileio.exists(view_path) else {}
    candidate = blessing.get("metrics") or {}
    baseline = view.get("baseline_metrics") or {}
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
    thresholds = view.get("thresholds") or []
    for t in thresholds:
        failed = [
            f
            for f in failures
            if f.get("metric", "").split(" (change")[0] == t["metric"]
            and (" (change" in f.get("metric", "")) == t["change"]
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
    data.verdict = {
        "blessed": bool(blessing.get("blessed")),
        "why": why,
        "baseline": blessing.get("baseline"),
        "metric_names": names,
        "rows": rows,
        "thresholds": thresholds,
        "failures": failures,
        "class_metrics": view.get("class_metrics") or {},
        "plots": view.get("plots") or [],
        "has_view": bool(view),
    }


def _short(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else str(x)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A JSON value as (dotted key, scalar) pairs, at most 60 of them."""
    out: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and len(value) <= 10:
        for i, v in enumerate(value):
            out.extend(_flatten(v, f"{prefix}[{i}]"))
    else:
        text = value if isinstance(value, (int, float, bool)) or value is None else str(value)
        out.append((prefix or "value", text))
    return out[:60]
