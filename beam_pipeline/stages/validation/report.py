"""The Validation stage's section of the run report: each anomaly per split and feature
(``anomalies/<split>/SchemaDiff.pb``), or the readable ``summary.txt``."""

from __future__ import annotations

from beam_pipeline.engine.artifacts import Anomalies
from beam_pipeline.engine.report_sections import Note, ReportSection, ReportView, Table
from beam_pipeline.stages.common.anomalies_file import read_anomalies

__all__ = ["anomalies_section"]


def anomalies_section(view: ReportView) -> ReportSection:
    section = ReportSection(
        "anomalies", "Anomalies", artifacts=(Anomalies,), empty="No anomalies recorded."
    )
    with section.reading("the anomalies"):
        if not view.published(Anomalies):
            section.missing.append(
                view.gone(Anomalies) or "anomalies: not published (validation did not run)"
            )
            return section
        rows, text = read_anomalies(view)
        if rows:
            columns = ["split", "feature", "severity", "description"]
            section.parts.append(Table(columns, [[r[c] for c in columns] for r in rows]))
        elif text:
            section.parts.append(Note(text, style="pre"))
    return section
