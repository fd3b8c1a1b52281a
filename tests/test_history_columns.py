"""The run history (``runs list|show|diff``) draws what each stage recorded with its
execution (``Stage.history``): it names no stage, and a stage of a user's own
(tests/testdata/toy_stage.py) gets its column in ``runs list`` and its line in ``runs show``
like the bundled ones get theirs."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

from conftest import PENGUIN_DIR, REPO, TESTDATA

HISTORY = os.path.join(REPO, "beam_pipeline", "history")
TOY = os.path.join(TESTDATA, "toy_stage.py")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, COLUMNS="200"),  # a wide table: every header whole
        timeout=900,
    )


def _names() -> tuple[set[str], set[str]]:
    """(every bundled stage's name and each part of a joined one, those of them that are
    also artifact types' names)."""
    from beam_pipeline.engine.artifacts import artifact_types
    from beam_pipeline.stages.graph import STAGE_GRAPH

    names = {part for s in STAGE_GRAPH for part in (s.name, *s.name.split("+"))}
    assert {"Trainer", "Pusher", "ExampleGen", "Statistics"} <= names
    return names, names & set(artifact_types())


def _a_stage_module(module: str) -> bool:
    """A stage's own module: under ``beam_pipeline.stages`` but not what the stages share
    (``common``) or the graph's loader (``graph``, which ``runs report --graph`` uses)."""
    shared = ("beam_pipeline.stages.common", "beam_pipeline.stages.graph")
    return module.startswith("beam_pipeline.stages") and not module.startswith(shared)


def stage_mentions(source: str, names: set[str], artifacts: set[str]) -> list[str]:
    """Where ``source`` names a stage: a string (docstrings and f-strings included) that is
    a stage's name, or holds one as a word; an identifier that spells one (``TRAINER``,
    ``pusher_row``); an import of a stage's module (:func:`_a_stage_module`). A name that
    is also an artifact type's (Schema, Statistics: the artifacts ``runs diff`` compares)
    counts only as a whole string.
    """
    words = sorted(names - artifacts)
    spelled = [n.lower() for n in words]
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in names or any(re.search(rf"\b{re.escape(n)}\b", text) for n in words):
                found.append(f"line {line}: string {text[:60]!r}")
        identifiers = []
        if isinstance(node, ast.Name):
            identifiers = [node.id]
        elif isinstance(node, ast.Attribute):
            identifiers = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            identifiers = [node.name]
        elif isinstance(node, ast.arg):
            identifiers = [node.arg]
        elif isinstance(node, ast.alias):
            identifiers = [node.asname or node.name]
            if _a_stage_module(node.name):
                found.append(f"line {line}: imports {node.name}")
        if isinstance(node, ast.ImportFrom) and _a_stage_module(node.module or ""):
            found.append(f"line {line}: imports from {node.module}")
        for identifier in identifiers:
            flat = identifier.lower().replace("_", "")
            if any(n in flat for n in spelled):
                found.append(f"line {line}: identifier {identifier}")
    return found


def test_the_run_history_names_no_stage():
    names, artifacts = _names()
    files = sorted(f for f in os.listdir(HISTORY) if f.endswith(".py"))
    assert "views.py" in files and "compare.py" in files and "command.py" in files
    bad = []
    for name in files:
        with open(os.path.join(HISTORY, name), encoding="utf-8") as f:
            bad += [f"history/{name} {m}" for m in stage_mentions(f.read(), names, artifacts)]
    assert not bad, "\n".join(bad)


def test_the_check_tells_a_named_stage():
    names, artifacts = _names()
    for source in [
        'TRAINER = "Trainer"\n',
        'checks.get("Evaluator", {})\n',
        'x = "ExampleGen"\n',
        "def f():\n    '''The Pusher's verdict.'''\n",
        "pusher_row = 1\n",
        "from beam_pipeline.stages.trainer.stage import TrainerStage\n",
        'd = _output(x, "Schema")\n',
    ]:
        assert stage_mentions(source, names, artifacts), source
    for source in [
        'print("Schema: not compared")\n',
        "from beam_pipeline.stages.common.schema_file import read_schema\n",
        "from beam_pipeline.stages.graph import load_graph\n",
        'd["compared"]\n',
    ]:
        assert not stage_mentions(source, names, artifacts), source


def test_a_stage_of_ones_own_gets_its_column_in_runs_list_and_its_line_in_runs_show(tmp_path):
    root = str(tmp_path / "root")
    proc = _cli(
        f"--graph={TOY}:GRAPH",
        "--no_progress",
        f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
        "--csv_null_values=,NA",
        f"--pipeline_root={root}",
        "--run_id=a",
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    with open(os.path.join(root, "runs", "a", "summary.json")) as f:
        rows = {r["stage"]: r for r in json.load(f)["stages"]}
    total = sum(rows["ExampleGen"]["rows_out"].values())  # every example: --count_every=1

    listed = _cli("runs", "list", f"--pipeline_root={root}", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (row,) = json.loads(listed.stdout)
    # Its column, where the graph places it (after ExampleGen), then the bundled stages'
    # (declared by the graph: shown though a run without a module made none). A column of
    # a stage that did not run shows its default; a bundled stage that runs without a
    # module file (a data stage) shows what it recorded, which this test does not know.
    from beam_pipeline.stages.graph import load_graph

    graph = load_graph(f"{TOY}:GRAPH")
    declared = {k: v for s in graph for k, v in s.history_columns.items()}
    ok = {n for n, r in rows.items() if r["status"] == "ok"}
    ran = {s.name for s in graph if set(s.name.split("+")) <= ok}
    idle = {k: v for s in graph if s.name not in ran for k, v in s.history_columns.items()}
    assert list(declared)[0] == "counted" and "CountExamples" in ran
    assert set(row["columns"]) == set(declared)  # in the graph's order: the table below
    assert {k: row["columns"][k] for k in idle} == idle
    assert row["columns"]["counted"] == row["counted"] == total
    table = _cli("runs", "list", f"--pipeline_root={root}")
    assert table.returncode == 0, table.stderr[-2000:]
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "status" in line)
    assert [c.strip() for c in lines[header].strip("┃ ").split("┃")] == [
        "run", "start", "status", *declared, "cached",
    ]  # fmt: skip
    run_line = next(line for line in lines[header + 1 :] if line.startswith("│ a "))
    cells = dict(zip(declared, [c.strip() for c in run_line.strip("│ ").split("│")][3:]))
    assert cells["counted"] == str(total)
    assert {k: cells[k] for k in idle} == {k: "-" for k in idle}

    shown = _cli("runs", "show", "a", f"--pipeline_root={root}")
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert lines.index(f"Counted: {total} examples") < lines.index("Executions")  # run's lines
    shown = _cli("runs", "show", "a", f"--pipeline_root={root}", "--json")
    view = json.loads(shown.stdout)
    assert view["counted"] == total and f"Counted: {total} examples" in view["lines"]
