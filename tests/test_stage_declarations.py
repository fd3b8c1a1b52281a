"""Stages are declarations: flags, YAML keys, the summary, the report and ``runs show`` come
from them, and a stage of a user's own (tests/testdata/toy_stage.py: its declaration, its
transform, one line in a graph) runs through the CLI and the Python API like the bundled
ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import PENGUIN_DIR, REPO, TESTDATA

from beam_pipeline.core.errors import PipelineError

PENGUIN_CSV = os.path.join(PENGUIN_DIR, "penguins.csv")
TOY = os.path.join(TESTDATA, "toy_stage.py")
# The data stages only (no module file: Transform and the model stages skip).
DATA_ONLY = ["--no_progress", f"--data={PENGUIN_CSV}", "--csv_null_values=,NA"]


def _cli(*args: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
    )


def _cli_here(*args: str) -> int:
    """The same command through the CLI's entry point in this process (``cli.main``): for
    the reruns, whose checks read the run's files and records, not its terminal; a process
    of its own would import Beam again for each."""
    from beam_pipeline import cli

    return cli.main(list(args))


def _section(html: str, section: str) -> str:
    """The body of the report's section ``section``."""
    found = re.search(rf'<section id="{section}">(.*?)</section>', html, re.S)
    assert found, f"no section {section!r} in the report"
    return found.group(1).strip()


def test_every_flag_is_a_declared_setting_and_each_stage_has_its_group():
    from beam_pipeline import flags
    from beam_pipeline.stages.graph import STAGE_GRAPH

    parser = flags.build_parser()
    table = flags.flag_table()
    ours = {
        a.dest
        for a in parser._actions
        if a.dest not in ("help", "version", "config", "graph", "verbose", "log_file", "progress")
    }
    assert ours == set(table) - {"search_space"}  # search_space: a YAML mapping, no flag
    titles = {g.title for g in parser._action_groups}
    for stage in STAGE_GRAPH:
        if stage.Config is not None:
            assert stage.name in titles


def test_the_toy_stage_runs_through_the_cli_summary_report_and_runs_show(tmp_path):
    root = str(tmp_path / "root")
    graph = f"--graph={TOY}:GRAPH"
    shown = _cli(graph, "--help")
    assert shown.returncode == 0 and "--count_every" in shown.stdout, shown.stderr[-2000:]

    proc = _cli(graph, *DATA_ONLY, f"--pipeline_root={root}", "--run_id=a", "--count_every=1")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert "CountExamples" in proc.stdout  # the summary's row
    run_dir = os.path.join(root, "runs", "a")
    with open(os.path.join(run_dir, "summary.json")) as f:
        rows = {r["stage"]: r for r in json.load(f)["stages"]}
    with open(os.path.join(run_dir, "example_counts", "counts-00000-of-00001.json")) as f:
        counts = json.load(f)
    # Every example of each split, as ExampleGen wrote them.
    assert counts == {s: n for s, n in rows["ExampleGen"]["rows_out"].items()}
    assert rows["CountExamples"]["note"] == f"{sum(counts.values())} examples counted"
    with open(os.path.join(run_dir, "report.html")) as f:
        html = f.read()
    assert "<td>CountExamples</td>" in html  # its summary row
    # Its own section (its report_sections hook), in graph order: after ExampleGen's
    # statistics, before the Schema's.
    sections = re.findall(r'<section id="([a-z]+)">', html)
    assert sections[:4] == ["stages", "statistics", "counts", "schema"], sections
    counted = _section(html, "counts")
    assert counted.startswith("<h2>Example counts</h2>")
    for split, n in counts.items():
        assert f'<tr><td>{split}</td><td class="n">{n}</td></tr>' in counted, counted
    runs = _cli("runs", "show", "a", f"--pipeline_root={root}", "--json")
    assert runs.returncode == 0, runs.stderr[-2000:]
    stages = [e["stage"] for e in json.loads(runs.stdout)["executions"]]
    assert "CountExamples" in stages

    # The second run reuses it; another setting of its own reruns it.
    here = [*DATA_ONLY, f"--pipeline_root={root}"]
    assert _cli_here(graph, *here, "--run_id=b", "--count_every=1") == 0
    with open(os.path.join(root, "runs", "b", "summary.json")) as f:
        rows = {r["stage"]: r for r in json.load(f)["stages"]}
    assert rows["CountExamples"]["status"] == "cached"
    # A cached stage's section shows the counts run a published, and says so.
    report_b = os.path.join(root, "runs", "b", "report.html")
    with open(report_b) as f:
        html = f.read()
    counted = _section(html, "counts")
    assert '<p class="origin" data-reused-from="a">' in counted
    assert f'<td class="n">{counts["train"]}</td>' in counted
    # `runs report` reads the bundled graph: the toy stage has its summary row only; with
    # the run's --graph, its section again, as the run wrote it.
    os.remove(report_b)
    assert _cli_here("runs", "report", "b", f"--pipeline_root={root}") == 0
    with open(report_b) as f:
        rewritten = f.read()
    assert "<td>CountExamples</td>" in rewritten and 'id="counts"' not in rewritten
    assert _cli_here("runs", "report", "b", graph, f"--pipeline_root={root}") == 0
    with open(report_b) as f:
        assert f.read() == html
    assert _cli_here(graph, *here, "--run_id=c", "--count_every=2") == 0
    with open(os.path.join(root, "runs", "c", "summary.json")) as f:
        rows = {r["stage"]: r for r in json.load(f)["stages"]}
    assert rows["CountExamples"]["status"] == "ok" and rows["ExampleGen"]["status"] == "cached"

    # The stage's own code is in its key: an edited stage file is not reused (this
    # project's sources are keyed by the pipeline's code digest; a user's file by its own).
    edited = tmp_path / "toy_stage.py"
    edited.write_text(open(TOY).read().replace("examples counted", "examples counted!"))
    assert _cli_here(f"--graph={edited}:GRAPH", *here, "--run_id=d", "--count_every=2") == 0
    with open(os.path.join(root, "runs", "d", "summary.json")) as f:
        rows = {r["stage"]: r for r in json.load(f)["stages"]}
    assert rows["CountExamples"]["status"] == "ok" and rows["CountExamples"]["note"].endswith("!")


def test_a_bad_graph_is_one_sentence(tmp_path):
    proc = _cli(f"--graph={tmp_path}/none.py:GRAPH", *DATA_ONLY)
    assert proc.returncode == 2
    assert "none.py cannot be loaded" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli(f"--graph={TOY}:NOPE", *DATA_ONLY)
    assert proc.returncode == 2 and "has no sequence of stages named NOPE" in proc.stderr


def test_the_python_api_runs_a_graph_and_returns_its_summary(tmp_path):
    import beam_pipeline as bp

    sys.path.insert(0, TESTDATA)
    try:
        import toy_stage
    finally:
        sys.path.remove(TESTDATA)
    config = bp.make_config(
        data=PENGUIN_CSV,
        csv_null_values="NA,",
        pipeline_root=str(tmp_path / "root"),
        count_every=1,
        beam_args=["--runner=DirectRunner"],
        graph=toy_stage.GRAPH,
    )
    assert config.count.every == 1 and config.trainer.train_steps == 100  # defaults
    summary = bp.run(config, graph=toy_stage.GRAPH)
    assert summary.stage("CountExamples").status.value == "ok"
    assert summary.stage("ExampleGen").rows_out["train"] > 0
    with open(os.path.join(summary.run_dir, "report.html")) as f:
        assert '<section id="counts"><h2>Example counts</h2>' in f.read()  # the graph's
    with pytest.raises(PipelineError, match="did you mean 'train_steps'"):
        bp.make_config(train_step=3)
    # A flag's text is read as the flag reads it; a bad one is one sentence.
    assert bp.make_config(train_steps="50").trainer.train_steps == 50
    with pytest.raises(PipelineError, match=r"--train_steps='x' is not a whole number"):
        bp.make_config(train_steps="x")


def test_a_stage_appended_to_a_run_that_stops_early_gets_a_row_saying_why(tmp_path):
    # (*STAGE_GRAPH, MyStage()) in a run without a module file: Transform stops the run,
    # and every stage after it, the user's too, once got no row at all.
    import beam_pipeline as bp

    sys.path.insert(0, TESTDATA)
    try:
        import toy_stage
    finally:
        sys.path.remove(TESTDATA)
    graph = (*bp.STAGE_GRAPH, toy_stage.CountStage())
    config = bp.make_config(
        data=PENGUIN_CSV,
        csv_null_values="NA,",
        pipeline_root=str(tmp_path / "root"),
        beam_args=["--runner=DirectRunner"],
        graph=graph,
    )
    summary = bp.run(config, graph=graph, report=False)
    names = [row.stage for row in summary.stages]
    after = names[names.index("Transform") + 1 :]
    in_graph = [s.name for s in graph]
    assert after == in_graph[in_graph.index("Transform") + 1 :]
    assert after[-1] == "CountExamples"
    for name in after:
        row = summary.stage(name)
        assert row.status.value == "skipped", row
        assert row.note == "not run: Transform stopped the run (no --module_file)", row


def test_the_python_api_writes_the_report_of_a_failed_run_too(tmp_path):
    import beam_pipeline as bp

    data = tmp_path / "rows.csv"
    data.write_text("a,b\n1,2\n3\n")  # a short row: rejected, over the default 0 share
    config = bp.make_config(
        data=str(data), pipeline_root=str(tmp_path / "root"), beam_args=["--runner=DirectRunner"]
    )
    with pytest.raises(PipelineError, match="max_rejected_fraction"):
        bp.run(config)
    [run_dir] = (tmp_path / "root" / "runs").iterdir()
    assert (run_dir / "report.html").exists()
