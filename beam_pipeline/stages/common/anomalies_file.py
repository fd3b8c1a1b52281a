"""Reading the Anomalies artifact for the report: per split ``<split>/SchemaDiff.pb``
(a tensorflow_metadata ``Anomalies``) and the readable ``summary.txt``.

The Validation stage writes them; its report section lists them and ExampleGen's
statistics section marks the features they name.

Example::

    rows, text = read_anomalies(view)   # view: the report's ReportView
"""

from __future__ import annotations

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Anomalies
from beam_pipeline.engine.report_sections import ReportView

__all__ = ["DRIFT_BASELINE_FILE", "drift_baseline", "read_anomalies", "split_order"]

# In the Anomalies artifact, where drift was checked: the baseline's statistics folder.
DRIFT_BASELINE_FILE = "drift_baseline.txt"


def split_order(split: str) -> tuple[int, str]:
    """Sorts split folders as a reader expects them: train, eval, test, then the others."""
    return ({"train": 0, "eval": 1, "test": 2}.get(split, 3), split)


def drift_baseline(view: ReportView) -> str:
    """The statistics folder this run's drift was checked against ("" where it was not)."""
    if not view.published(Anomalies) or not fileio.exists(
        view.path(Anomalies, DRIFT_BASELINE_FILE)
    ):
        return ""
    return view.read_text(Anomalies, DRIFT_BASELINE_FILE).strip()


def read_anomalies(view: ReportView) -> tuple[list[dict], str]:
    """(each anomaly as ``split``, ``feature``, ``severity``, ``description``; the text of
    ``summary.txt`` or ""), from where the run's Anomalies artifact is."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    root = view.path(Anomalies)
    summary = fileio.join(root, "summary.txt")
    text = view.read_text(Anomalies, "summary.txt") if fileio.exists(summary) else ""
    rows = []
    for split in sorted(fileio.listdir(root), key=split_order):
        path = fileio.join(root, split.rstrip("/"), "SchemaDiff.pb")
        if not fileio.exists(path):
            continue
        anomalies = anomalies_pb2.Anomalies()
        with fileio.open(path, "rb") as f:
            anomalies.ParseFromString(f.read())
        for name, info in sorted(anomalies.anomaly_info.items()):
            rows.append(
                {
                    "split": split.rstrip("/"),
                    "feature": name,
                    "severity": anomalies_pb2.AnomalyInfo.Severity.Name(info.severity),
                    "description": info.description or info.short_description,
                }
            )
    return rows, text
