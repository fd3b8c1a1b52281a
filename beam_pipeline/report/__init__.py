"""The run report: ``report.html`` in the run directory, one self-contained file.

Written at the end of every run that got a run directory, a failed one too: the stage
table, then each stage's sections in the order of the graph
(:meth:`~beam_pipeline.engine.stage.Stage.report_sections`: the bundled stages show the
statistics, the schema, the anomalies, the rejected rows, the trials, the training curves
and the evaluation), and what is missing. No script, no stylesheet or font from a network:
plain HTML, CSS and inline SVG (:mod:`beam_pipeline.core.svg`), rendered by a Jinja
template (autoescaped).

Example::

    path = write_report("pipeline_runs/runs/20260101-120000")   # None if it failed
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import no_room
from beam_pipeline.report.data import collect

__all__ = ["REPORT_FILE", "render_report", "write_report"]

REPORT_FILE = "report.html"
_LOG = logging.getLogger(__name__)


def _number(x) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _fragment_source(name: str):
    """A stage's template (:class:`~beam_pipeline.engine.report_sections.Fragment`),
    named ``<package>:<file>``: its source, file name and whether the compiled one is
    still up to date (its file's modification time unchanged: a stage's author edits it
    between two reports of one process, a notebook's); None for any other name."""
    import importlib.resources

    package, sep, file = name.partition(":")
    if not sep:
        return None
    resource = importlib.resources.files(package).joinpath(file)
    source = resource.read_text(encoding="utf-8")
    if not isinstance(resource, os.PathLike):
        return source, None, lambda: False  # not a file (a zipped package): read each time
    path = os.fspath(resource)
    mtime = os.path.getmtime(path)
    return source, path, lambda: os.path.exists(path) and os.path.getmtime(path) == mtime


@functools.lru_cache(maxsize=1)
def _environment():
    """One Jinja environment per process: it keeps the templates it compiled (each
    report of a process that runs several, a notebook's or a test's, compiled them
    again)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PackageLoader("beam_pipeline.report", "templates"),
                jinja2.FunctionLoader(_fragment_source),
            ]
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = _format_number
    return env


def render_report(run_dir: str, graph: Optional[Sequence[Any]] = None) -> str:
    """The report of ``run_dir`` with the sections of ``graph``'s stages (default: the
    bundled graph) as one HTML string (raises only on a template bug)."""
    from markupsafe import Markup

    data = collect(run_dir, graph)
    env = _environment()

    def fragment(part) -> Any:
        template = env.get_template(f"{part.package}:{part.name}")
        return Markup(template.render(**part.values))

    return env.get_template("report.html").render(
        data=data,
        run_name=os.path.basename(run_dir.rstrip("/")),
        kind=lambda part: type(part).__name__,
        fragment=fragment,
        number=lambda x: _number(x) is not None,
    )


def _format_number(x) -> str:
    n = _number(x)
    if n is None:
        return "-" if x is None else str(x)
    # inf/-inf (a float column may hold them) and NaN have no int(): shown as Python
    # writes them.
    if math.isfinite(n) and n == int(n) and abs(n) < 1e15:
        return str(int(n))
    return f"{n:.4g}"


def write_report(run_dir: str, graph: Optional[Sequence[Any]] = None) -> Optional[str]:
    """Writes ``<run_dir>/report.html`` (atomically) with the sections of ``graph``'s
    stages (default: the bundled graph); returns its path, or None when it could not be
    written (logged: a report never fails the run)."""
    path = fileio.join(run_dir, REPORT_FILE)
    try:
        fileio.write_atomic(path, render_report(run_dir, graph))
    except Exception as e:  # noqa: BLE001 - a report never fails the run
        # On a full disk the run's own error said so already (and the CLI prints that
        # the report was not written): the log only.
        level = logging.INFO if no_room(e) else logging.WARNING
        _LOG.log(level, "The run report %s could not be written.", path, exc_info=True)
        return None
    return path
