"""Reads what a run directory holds into what the report's template shows.

The stage table comes from the run's summary (``summary.json``); every other section from
the stages of the graph, in order: each stage's
:meth:`~beam_pipeline.engine.stage.Stage.report_sections` reads its artifacts through a
:class:`~beam_pipeline.engine.report_sections.ReportView` (where the run's manifest says
they are: a stage the run reused from an earlier run has its outputs in that run's folder)
and returns its sections. Nothing here raises: a missing artifact (a failed run, a skipped
stage) or one that cannot be parsed becomes a line in ``missing`` saying what is missing
and why, and the other sections still render. A stage of the run that the graph does not
hold (``runs report`` of a run with a ``--graph`` of its own) has its summary row only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.report_sections import ReportSection, ReportView

__all__ = ["ReportData", "collect"]

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class ReportData:
    """Everything the template shows.

    Attributes:
      run_dir: the run directory.
      stages: the summary's rows (dicts), for the stage table.
      sections: the stages' sections, in the order shown.
      reused_from: section id -> the earlier runs whose artifacts it shows.
      missing: what the report cannot show, and why.
      style: the sections' own CSS rules.
    """

    run_dir: str
    stages: list[dict] = dataclasses.field(default_factory=list)
    sections: list[ReportSection] = dataclasses.field(default_factory=list)
    reused_from: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    missing: list[str] = dataclasses.field(default_factory=list)
    style: list[str] = dataclasses.field(default_factory=list)


def collect(run_dir: str, graph: Optional[Sequence[Any]] = None) -> ReportData:
    """Reads the report of ``run_dir`` with the sections of ``graph``'s stages (default:
    the bundled graph); never raises."""
    if graph is None:
        from beam_pipeline.stages.graph import STAGE_GRAPH

        graph = STAGE_GRAPH
    data = ReportData(run_dir=run_dir)
    view = ReportView(run_dir)
    for what, read in (
        ("the run summary (summary.json)", lambda: _summary(data)),
        ("the run manifest (manifest.json)", view.read_origins),
    ):
        try:
            read()
        except Exception as e:  # noqa: BLE001 - a report never fails the run
            _LOG.info("report: %s could not be read", what, exc_info=True)
            data.missing.append(f"{what}: could not be read ({type(e).__name__}: {e})")
    view.rows = data.stages
    by_id: dict[str, ReportSection] = {}
    for stage in graph:
        try:
            sections = list(stage.report_sections(view))
        except Exception as e:  # noqa: BLE001 - a report never fails the run
            _LOG.info("report: %s's sections could not be read", stage.name, exc_info=True)
            data.missing.append(
                f"{stage.name}'s report sections: could not be read ({type(e).__name__}: {e})"
            )
            continue
        for section in sections:
            known = by_id.get(section.id)
            if known is None:
                by_id[section.id] = section
                data.sections.append(section)
            else:  # a later stage adds to an earlier stage's section
                known.artifacts += tuple(a for a in section.artifacts if a not in known.artifacts)
                known.parts.extend(section.parts)
                known.missing.extend(section.missing)
                known.style += section.style
    data.sections = _placed(data.sections)
    for section in data.sections:
        data.missing.extend(section.missing)
        reused = view.reused_from(section.artifacts)
        if reused:
            data.reused_from[section.id] = reused
        if section.style and section.style not in data.style:
            data.style.append(section.style)
    return data


def _placed(sections: list[ReportSection]) -> list[ReportSection]:
    """``sections`` in graph order, each one with an ``after`` that the report holds moved
    behind that section (and behind those moved there before it)."""
    ids = {s.id for s in sections}
    out = [s for s in sections if not (s.after and s.after in ids)]
    last: dict[str, str] = {}
    for section in sections:
        if section.after and section.after in ids:
            anchor = last.get(section.after, section.after)
            at = next((i for i, s in enumerate(out) if s.id == anchor), len(out) - 1)
            out.insert(at + 1, section)
            last[section.after] = section.id
    return out


def _summary(data: ReportData) -> None:
    path = fileio.join(data.run_dir, "summary.json")
    if not fileio.exists(path):
        data.missing.append("the stage table: no summary.json (the run stopped before any stage)")
        return
    blank = {"status": "?", "rows_in": {}, "rows_out": {}, "rows_rejected": 0, "seconds": 0.0}
    blank.update(note="", artifact=None)
    with fileio.open(path, "r") as f:
        rows = json.loads(f.read()).get("stages", [])
    data.stages = [{**blank, **s} for s in rows]
