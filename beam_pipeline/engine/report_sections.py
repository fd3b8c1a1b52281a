"""What a stage shows in the run's ``report.html``: its sections, read from the run directory.

Each stage's :meth:`~beam_pipeline.engine.stage.Stage.report_sections` hook gets a
:class:`ReportView` (read access to what the run published: an artifact's folder, wherever
the run's manifest says it is, whether it is published, the summary rows) and returns
:class:`ReportSection` s, each a title and parts of a few generic kinds: :class:`Table`,
:class:`KeyValues`, :class:`Figures` (inline SVG from :mod:`beam_pipeline.core.svg`),
:class:`Note`, or a :class:`Fragment` (a Jinja template of the stage's own, for a layout the
generic kinds do not give). The report (:mod:`beam_pipeline.report`) walks the graph's
stages in order and renders what they return; it knows no stage.

A stage the run reused from an earlier run (``cached``) has its outputs in that run's
folder: :meth:`ReportView.path` reads them there, and the section lists the types it shows
(``artifacts``) so that the report says which run they came from.

Example (a stage's hook)::

    def report_sections(self, view):
        section = ReportSection("counts", "Example counts", artifacts=(ExampleCounts,),
                                empty="No counts (the stage did not run).")
        with section.reading("the example counts"):  # an unreadable file: one line
            counts = view.read_json(ExampleCounts, "counts.json")
            section.parts.append(Table(["split", "examples"], sorted(counts.items())))
        return [section]
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

from beam_pipeline.core import fileio
from beam_pipeline.core.types import PUBLISHED_MARKER
from beam_pipeline.engine.artifacts import TypedArtifact

__all__ = [
    "Code",
    "Figures",
    "Fragment",
    "KeyValues",
    "Note",
    "Origin",
    "ReportSection",
    "ReportView",
    "Table",
    "json_key_values",
]

_LOG = logging.getLogger(__name__)
# An artifact type, or its folder's name in the run directory.
ArtifactRef = Union[type[TypedArtifact], str]


# -- the parts of a section ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Code:
    """A table cell shown as code (a file name, a raw row)."""

    text: str


@dataclasses.dataclass
class Table:
    """A table: a header row and rows of cells (text, numbers, :class:`Code`, None as
    ``-``); numbers are right-aligned and shown with 4 significant digits."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    title: str = ""


@dataclasses.dataclass
class KeyValues:
    """Name / value pairs (e.g. a JSON file flattened by :func:`json_key_values`)."""

    items: Sequence[tuple[str, Any]]
    title: str = ""


@dataclasses.dataclass
class Figures:
    """Plots side by side: (inline SVG from :mod:`beam_pipeline.core.svg`, caption)."""

    figures: Sequence[tuple[str, str]]


@dataclasses.dataclass
class Note:
    """A paragraph: ``style`` "plain", "note" (small, grey) or "pre" (preformatted)."""

    text: str
    style: str = "plain"


@dataclasses.dataclass
class Fragment:
    """A Jinja template of the stage's own, rendered with ``values`` (autoescaped; the
    ``num`` filter formats numbers as the tables do).

    Attributes:
      package: the package holding the template file (ship it as package data).
      name: the file's name in it.
      values: the template's variables.
    """

    package: str
    name: str
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Part = Union[Table, KeyValues, Figures, Note, Fragment]


@dataclasses.dataclass
class ReportSection:
    """One section of the report.

    Attributes:
      id: its anchor (lowercase letters); a later stage's section with the same id adds
        its parts to it (the model checks' files join the evaluation).
      title: its heading, also its link at the top of the report.
      artifacts: the types it shows: when the run reused them, the section names the
        run they came from.
      parts: what it shows, in order.
      empty: shown when it has no parts.
      missing: lines for the report's "Not in this report" box (what is missing, why).
      after: the id of a section it follows when the report has one (else it comes in the
        order of the graph).
      style: CSS rules its parts need, added to the report's stylesheet.
    """

    id: str
    title: str
    artifacts: tuple[ArtifactRef, ...] = ()
    parts: list[Part] = dataclasses.field(default_factory=list)
    empty: str = ""
    missing: list[str] = dataclasses.field(default_factory=list)
    after: str = ""
    style: str = ""

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Reads within: an exception becomes the line "``what``: could not be read (...)"
        and the section keeps what was read before it (a report never fails the run)."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - a report never fails the run
            _LOG.info("report: %s could not be read", what, exc_info=True)
            self.missing.append(f"{what}: could not be read ({type(e).__name__}: {e})")


# -- what the run directory holds ----------------------------------------------------------


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


def _folder(artifact: ArtifactRef) -> str:
    return artifact if isinstance(artifact, str) else artifact.folder_name()


def _absolute(path: str) -> str:
    path = path.rstrip("/")
    return path if fileio.is_remote(path) else os.path.abspath(path)


class ReportView:
    """Read access to a run directory for the report's sections.

    Attributes:
      run_dir: the run directory.
      rows: the summary's rows (``summary.json``: dicts with ``stage``, ``status``,
        ``note``, ``details``, ...), in graph order; empty before any stage ended.
      origins: artifact folder name -> where it is read (from the run's manifest).
    """

    def __init__(self, run_dir: str, rows: Sequence[Mapping[str, Any]] = ()):
        self.run_dir = run_dir
        self.rows = list(rows)
        self.origins: dict[str, Origin] = {}

    def read_origins(self) -> None:
        """Where each artifact is, from the manifest's record of each finished stage: a
        cached stage's outputs are an earlier run's (``<root>/runs/<run_id>/<name>``)."""
        from beam_pipeline.engine.manifest import MANIFEST_FILE

        path = fileio.join(self.run_dir, MANIFEST_FILE)
        if not fileio.exists(path):
            return  # a run made before manifests: every artifact is in its own folder
        own = _absolute(self.run_dir)
        with fileio.open(path, "r") as f:
            stages = json.loads(f.read()).get("stages") or {}
        for record in stages.values():
            for name, output in zip(record.get("artifacts") or [], record.get("outputs") or []):
                uri = _absolute(str(output.get("uri") or ""))
                if not uri:
                    continue
                folder = uri.rsplit("/", 1)[0]
                self.origins[name] = Origin(
                    path=uri, run_id=folder.rsplit("/", 1)[-1], reused=folder != own
                )

    def path(self, artifact: ArtifactRef, *parts: str) -> str:
        """The artifact's folder (or a file in it): where the manifest says the run's
        artifact is (an earlier run's for a cached stage), this run's folder else."""
        origin = self.origins.get(_folder(artifact))
        if origin is not None:
            return fileio.join(origin.path, *parts)
        return fileio.join(self.run_dir, _folder(artifact), *parts)

    def published(self, artifact: ArtifactRef) -> bool:
        """Whether the artifact is complete where it is read (its publication marker)."""
        return fileio.exists(self.path(artifact, PUBLISHED_MARKER))

    def origin(self, artifact: ArtifactRef) -> Optional[Origin]:
        """Where the manifest says the artifact is; None where it says nothing."""
        return self.origins.get(_folder(artifact))

    def gone(self, artifact: ArtifactRef) -> Optional[str]:
        """For an artifact this run reused that is no longer published where the earlier
        run put it: the line saying so (its stage did finish, in that run); else None."""
        origin = self.origin(artifact)
        if origin is None or not origin.reused or self.published(artifact):
            return None
        return (
            f"{_folder(artifact)}: reused from run {origin.run_id}, but {origin.path} is no "
            "longer published there (deleted or moved since)"
        )

    def reused_from(self, artifacts: Sequence[ArtifactRef]) -> list[str]:
        """The earlier runs whose ``artifacts`` this run reused, sorted."""
        found = [self.origins.get(_folder(a)) for a in artifacts]
        return sorted({o.run_id for o in found if o is not None and o.reused})

    def row(self, name: str) -> Optional[Mapping[str, Any]]:
        """The summary row named ``name``, or None."""
        return next((r for r in self.rows if r.get("stage") == name), None)

    def skipped(self, name: str) -> bool:
        """Whether the summary row ``name`` says the stage was skipped."""
        row = self.row(name)
        return row is not None and row.get("status") == "skipped"

    def read_text(self, artifact: ArtifactRef, *parts: str) -> str:
        with fileio.open(self.path(artifact, *parts), "r") as f:
            return f.read()

    def read_json(self, artifact: ArtifactRef, *parts: str) -> Any:
        return json.loads(self.read_text(artifact, *parts))


def json_key_values(
    view: ReportView,
    artifact: ArtifactRef,
    skip: Sequence[str] = (),
    markers: Mapping[str, tuple[str, Any]] = {},  # noqa: B006 - read only
) -> list[Part]:
    """The artifact's JSON files (all but ``skip``) as they are, one :class:`KeyValues`
    each titled ``<folder>/<file>``, then each of its ``markers`` (file name -> the pair
    its presence means, e.g. ``{"BLESSED": ("blessed", True)}``) that exists; none where
    its folder does not exist."""
    root = view.path(artifact)
    if not fileio.isdir(root):
        return []
    name = _folder(artifact)
    out: list[Part] = []
    for path in sorted(fileio.glob(fileio.join(root, "*.json"))):
        if os.path.basename(path) in skip:
            continue
        try:
            with fileio.open(path, "r") as f:
                content = json.loads(f.read())
        except ValueError:
            continue
        out.append(KeyValues(_flatten(content), title=f"{name}/{os.path.basename(path)}"))
    for marker, pair in markers.items():
        if fileio.exists(fileio.join(root, marker)):
            out.append(KeyValues([pair], title=f"{name}/{marker}"))
    return out


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
