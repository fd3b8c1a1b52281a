"""``beam-pipeline runs list|show RUN|lineage ARTIFACT_URI|diff RUN_A RUN_B``.

Finds the store like a run does (``--metadata_url``, else ``<--pipeline_root>/metadata.sqlite``)
but never creates one: a missing default store is an error. Prints rich tables, or with
``--json`` the views of :mod:`~beam_pipeline.history.views` and
:mod:`~beam_pipeline.history.compare` as one JSON document. A user error (an unknown run
or uri, no store) is one sentence on stderr and exit code 2.

Example::

    python -m beam_pipeline runs list --pipeline_root=pipeline_runs
    python -m beam_pipeline runs show 20260101-120000-abcdef --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

import beam_pipeline.history.compare as compare
import beam_pipeline.history.views as views
from beam_pipeline.console import quiet_environment
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.secrets import mask
from beam_pipeline.metadata import MetadataStore, open_for_pipeline

__all__ = ["main"]

_SHORT = 12  # fingerprints and cache keys are shown by their first characters
_WHOLE = {"run", "stage", "status", "start"}
_DIGEST = re.compile(r"[0-9a-f]{40,}")


def _parser() -> argparse.ArgumentParser:
    from beam_pipeline.core.command import command_name

    p = argparse.ArgumentParser(
        prog=f"{command_name()} runs", description="Run history from the metadata store."
    )
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--pipeline_root",
        default="pipeline_runs",
        help="Folder whose metadata.sqlite is the store (default: pipeline_runs).",
    )
    where.add_argument("--metadata_url", default="", help="SQLAlchemy URL of the store.")
    where.add_argument(
        "--pipeline_name",
        default="",
        help="The pipeline whose runs to show, as its runs gave it (default: the "
        "--pipeline_root's absolute path).",
    )
    where.add_argument("--json", action="store_true", help="Print JSON for scripts.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{list,show,lineage,diff,report}")
    listing = sub.add_parser("list", parents=[where], help="Every recorded run, newest first.")
    listing.add_argument(
        "--limit", type=int, default=None, help="Only the N newest runs (default: every run)."
    )
    show = sub.add_parser("show", parents=[where], help="One run's executions.")
    show.add_argument("run")
    lineage = sub.add_parser(
        "lineage", parents=[where], help="What made an artifact, and what was made from it."
    )
    lineage.add_argument("uri")
    diff = sub.add_parser("diff", parents=[where], help="Two runs compared.")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    report = sub.add_parser(
        "report", parents=[where], help="(Re)writes a recorded run's report.html; prints its path."
    )
    report.add_argument("run")
    report.add_argument(
        "--graph",
        default="",
        help="FILE.py:NAME or module:NAME: the stage graph the run used, for the sections "
        "of your own stages (default: the bundled graph; other stages show their summary "
        "row only).",
    )
    return p


def _report(
    store: MetadataStore, pipeline_root: str, run_id: str, graph_spec: str = ""
) -> dict[str, Any]:
    """Writes the recorded run's ``report.html`` (beam_pipeline.report) in its folder, with
    the sections of the stages of ``graph_spec`` (``--graph``; "": the bundled graph)."""
    from beam_pipeline.report import write_report
    from beam_pipeline.stages.graph import load_graph

    views.run_executions(store, run_id)  # raises for a run the store does not hold
    run_dir = fileio.join(pipeline_root, "runs", run_id)
    if not fileio.isdir(run_dir):
        raise PipelineError(
            f"Run {run_id!r} is recorded but its folder {run_dir} does not exist; pass the "
            "--pipeline_root that run used."
        )
    graph = load_graph(graph_spec) if graph_spec else None  # a bad one: one sentence
    path = write_report(run_dir, graph)
    if path is None:
        raise PipelineError(
            f"The report of run {run_id!r} could not be written in {run_dir}; see the "
            "warning above, fix the folder's permissions or free space, and rerun."
        )
    return {"run_id": run_id, "report": path}


def _open(args: argparse.Namespace) -> MetadataStore:
    store = open_for_pipeline(
        args.pipeline_root, args.metadata_url, existing=True, pipeline_name=args.pipeline_name
    )
    assert store is not None  # existing=True: a missing store is an error
    return store


def _short(value: Optional[str]) -> str:
    return (value or "-")[:_SHORT]


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # digests (alone or in a value) by their first characters
        return _DIGEST.sub(lambda m: m.group()[:_SHORT], value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], cut: Sequence[str] = ()
) -> Any:
    if not rows:
        return f"{title}: none"
    table = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        # Names, statuses and run ids whole; long uris and parameter lists fold; a value of
        # the ``cut`` columns (key=value lines) too long for its column ends in "…" (its
        # value is in --json).
        overflow = "ellipsis" if c in cut else "fold"
        table.add_column(c, overflow=overflow, no_wrap=c in _WHOLE)
    for row in rows:
        table.add_row(*(_plain(v) for v in row))
    return table


def _cell(value: Any) -> str:
    """A value a stage recorded for a ``runs list`` column: a mapping as ``key=value``
    lines, a boolean as yes/no, nothing as ``-``."""
    if isinstance(value, dict):
        return "\n".join(f"{k}={_plain(v)}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _plain(value)


def _list(console: Console, rows: list[dict]) -> None:
    # The columns the runs' stages recorded, in the order they ran (a stage that ran in
    # one run only gets its column, "-" in the others). Narrow enough for 100 columns:
    # the fingerprints are in `runs show` and --json.
    columns = list(dict.fromkeys(c for r in rows for c in r.get("columns") or {}))
    cut = [c for c in columns if any(isinstance(r["columns"].get(c), dict) for r in rows)]
    console.print(
        _table(
            "Runs (newest first)",
            ["run", "start", "status", *columns, "cached"],
            [
                [
                    r["run_id"],
                    (r["start"] or "-")[:16].replace("T", " "),
                    r["status"],
                    *(_cell(r["columns"].get(c)) for c in columns),
                    f"{len(r['cached'])} of {len(r['stages'])}" if r["cached"] else "-",
                ]
                for r in rows
            ],
            cut,
        )
    )


def _base(executions: list[dict]) -> str:
    """The folder the executions' local artifacts share (a run's own directory, or the
    runs folder when some are another run's): paths are shown under it, so that they fit
    a table whole."""
    uris = [
        a["uri"]
        for e in executions
        for side in ("inputs", "outputs")
        for role, a in e[side].items()
        if role != "data" and not fileio.is_remote(a["uri"])
    ]
    if not uris:
        return ""
    base = os.path.commonpath(uris)
    return os.path.dirname(base) if base in uris else base


def _artifacts(side: dict, base: str = "") -> str:
    def shown(uri: str) -> str:
        return os.path.relpath(uri, base) if base and uri.startswith(base + os.sep) else uri

    return "\n".join(shown(a["uri"]) for a in side.values()) or "-"


def _status(e: dict) -> str:
    status = e.get("summary_status", e["status"])
    return status + (f" (from run {e['cached_from_run']})" if e.get("cached_from_run") else "")


def _executions(console: Console, title: str, executions: list[dict], base: str = "") -> None:
    console.print(
        _table(
            title,
            ["#", "stage", "status", "outputs", "job ids"],
            [
                [
                    e["id"],
                    e["stage"],
                    _status(e),
                    _artifacts(e["outputs"], base),
                    "\n".join(e["job_ids"]) or "-",
                ]
                for e in executions
            ],
        )
    )


def _parameters(console: Console, executions: list[dict]) -> None:
    console.print(
        _table(
            "Parameters",
            ["#", "stage", "parameters"],
            [
                [
                    e["id"],
                    e["stage"],
                    "\n".join(
                        f"{k}={_plain(v)}" for k, v in sorted(compare.flat(e["parameters"]).items())
                    )
                    or "-",
                ]
                for e in executions
            ],
        )
    )


def _show(console: Console, run: dict) -> None:
    console.print(
        f"Run {run['run_id']}: {run['status']}, {run['start']} .. {run['end'] or '-'}; "
        f"data {_short(run['data'])}, module {_short(run['module'])}"
    )
    for line in run.get("lines") or ():  # what its stages recorded for it
        console.print(line)
    executions = run["executions"]
    base = _base(executions)
    if base:
        # Whole, however long: the terminal wraps it, never in the middle of a name.
        console.print(f"Artifacts under {base}", soft_wrap=True)
    _executions(console, "Executions", executions, base)
    for e in executions:
        if e.get("error"):
            console.print(f"Error of #{e['id']} {e['stage']} ({e['status']}): {e['error']}")
    _parameters(console, executions)
    checks = run.get("model_checks") or {}
    if checks:
        console.print(
            _table(
                "Model checks",
                ["stage", "status", "verdict"],
                [[stage, c["status"], c["note"]] for stage, c in checks.items()],
            )
        )
    failures = [f for c in checks.values() for f in c.get("failures") or ()]
    if failures:
        console.print(
            _table(
                "Failed thresholds",
                ["metric", "slice", "value", "bound", "misses by"],
                [[f["metric"], f["slice"], f["value"], f["bound"], f.get("by")] for f in failures],
            )
        )


def _lineage(console: Console, found: dict) -> None:
    a = found["artifact"]
    state = a["state"] if a.get("exists", True) else f"{a['state']}, then deleted: gone from disk"
    # One line whatever the width: a path broken over lines cannot be copied.
    console.print(
        f"{a['type']} {a['uri']} ({state}, fingerprint {_short(a['fingerprint'])})",
        soft_wrap=True,
    )
    _executions(console, "Made by (upstream)", found["upstream"], _base(found["upstream"]))
    _executions(
        console, "Made from it (downstream)", found["downstream"], _base(found["downstream"])
    )


def _diff(console: Console, d: dict) -> None:
    a, b = d["runs"]
    console.print(
        _table(
            "Inputs", ["", a, b], [[k, _short(x), _short(y)] for k, (x, y) in d["inputs"].items()]
        )
    )
    if d.get("identical"):
        # Not tables of zeros: the one fact.
        same = ["inputs", "parameters", "schema", "statistics", *d["compared"]]
        console.print(
            f"Runs {a} and {b} are identical: the same {', '.join(same[:-1])} and {same[-1]}."
        )
        return
    console.print(
        _table(
            "Parameters that differ",
            ["stage", "parameter", a, b],
            [[s, k, x, y] for s, p in d["parameters"].items() for k, (x, y) in p.items()],
        )
    )
    if d["schema"] is None:
        console.print("Schema: not compared (a run has no schema on disk)")
    else:
        s = d["schema"]
        rows = [[f, "added", "", ""] for f in s["added"]] + [
            [f, "removed", "", ""] for f in s["removed"]
        ]
        rows += [[f, k, x, y] for f, fields in s["changed"].items() for k, (x, y) in fields.items()]
        console.print(_table("Schema differences", ["feature", "change", a, b], rows))
    if d["drift"] is None:
        console.print("Statistics: not compared (a run has no statistics on disk)")
    else:
        console.print(
            _table(
                "Numeric features: mean and std per split",
                [
                    "split",
                    "feature",
                    f"mean {a}",
                    f"mean {b}",
                    "Δ mean",
                    f"std {a}",
                    f"std {b}",
                    "Δ std",
                ],
                [
                    [
                        split,
                        f,
                        v["mean_a"],
                        v["mean_b"],
                        v["mean_change"],
                        v["std_a"],
                        v["std_b"],
                        v["std_change"],
                    ]
                    for split, features in d["drift"].items()
                    for f, v in features.items()
                ],
            )
        )
    for name, section in d["compared"].items():
        console.print(
            _table(name.capitalize(), ["", a, b], [[k, x, y] for k, (x, y) in section.items()])
        )


def _report_line(console: Console, result: dict[str, Any]) -> None:
    console.print(result["report"], soft_wrap=True)


def _width(environ: Mapping[str, str]) -> Optional[int]:
    """The tables' width: a terminal's own (rich reads it, or COLUMNS); into a pipe or a
    file, COLUMNS or wide rows (nothing there wraps them again). A COLUMNS that is not a
    positive number is ignored, as rich and shutil ignore it."""
    if sys.stdout.isatty():
        return None
    columns = environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else 200


def main(argv: Sequence[str]) -> int:
    """Runs one ``runs`` command; returns the exit code (2 for a user error)."""
    quiet_environment(os.environ)  # before fileio loads TensorFlow: no C++ INFO lines
    args = _parser().parse_args(list(argv))
    console = Console(width=_width(os.environ), highlight=False)
    hint = ""
    try:
        if args.command == "list" and args.limit is not None and args.limit < 1:
            raise PipelineError(
                f"runs list --limit {args.limit} is not a number of runs; pass a positive "
                "number, e.g. --limit 10, or leave --limit out to list every run."
            )
        with _open(args) as store:
            if args.command == "list":
                result: Any = views.run_rows(store, args.limit)
                draw = _list
                others = store.pipelines() if not result else []
                if others:  # another root's (or name's) runs: say which are there
                    hint = (
                        f"No run of pipeline {store.pipeline} is recorded; the store holds "
                        f"runs of {', '.join(others)}: pass the --pipeline_root they used "
                        "(or --pipeline_name)."
                    )
            elif args.command == "show":
                result, draw = views.run_view(store, args.run), _show
            elif args.command == "lineage":
                result, draw = views.lineage_view(store, args.uri), _lineage
            elif args.command == "report":
                result = _report(store, args.pipeline_root, args.run, args.graph)
                draw = _report_line
            else:
                result, draw = compare.diff_runs(store, args.run_a, args.run_b), _diff
    except PipelineError as e:
        print(f"error: {mask(str(e))}", file=sys.stderr)
        return e.exit_code
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        draw(console, result)
        if hint:
            console.print(hint, soft_wrap=True)
    return 0
