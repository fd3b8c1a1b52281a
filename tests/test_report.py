"""The run report on run directories a run leaves when it fails: it renders what exists and
says what is missing (the whole run's report is checked in test_cli_runs.py)."""

from __future__ import annotations

import json
import os
import re

from beam_pipeline.report import write_report


def test_a_run_directory_with_nothing_in_it_still_gets_a_report(tmp_path):
    path = write_report(str(tmp_path))
    assert path == os.path.join(str(tmp_path), "report.html")
    html = open(path, encoding="utf-8").read()
    assert "Not in this report" in html
    assert "no summary.json (the run stopped before any stage)" in html
    assert "statistics: not published (ExampleGen&#39;s job did not finish)" in html


def test_a_failed_stage_is_shown_and_an_unreadable_artifact_is_named(tmp_path):
    stages = [
        {"stage": "ExampleGen", "status": "ok", "rows_in": {"all": 3}, "rows_out": {}},
        {"stage": "Transform", "status": "failed", "note": "preprocessing_fn raised <KeyError>"},
    ]
    (tmp_path / "summary.json").write_text(json.dumps({"run_dir": "x", "stages": stages}))
    (tmp_path / "tuner").mkdir()
    (tmp_path / "tuner" / "trials.json").write_text("{not json")
    html = open(write_report(str(tmp_path)), encoding="utf-8").read()
    assert '<td class="failed">failed</td>' in html
    assert "preprocessing_fn raised &lt;KeyError&gt;" in html  # escaped, not markup
    assert "the tuner&#39;s trials: could not be read (JSONDecodeError" in html


def test_the_report_of_an_existing_run_is_written_again_from_the_command_line(tmp_path, capsys):
    from beam_pipeline.report.__main__ import main

    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    assert main([str(run)]) == 0
    assert capsys.readouterr().out == f"{run / 'report.html'}\n"
    assert (run / "report.html").exists()
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'nope'} is not a folder; pass a run directory "
        "(<pipeline_root>/runs/<run_id>).\n"
    )


def test_the_model_checks_blessings_are_shown_when_present(tmp_path):
    # As the Evaluator and InfraValidator write them (TFX's ModelBlessing layout), the
    # Evaluator's verdict with its failed threshold, and no report_view.json (an Evaluator
    # of an older version): the metrics are shown, and the note says what is not.
    (tmp_path / "blessing").mkdir()
    (tmp_path / "blessing" / "NOT_BLESSED").write_text("")
    failure = {"metric": "accuracy", "slice": "Overall", "value": 0.4, "bound": ">= 0.6"}
    (tmp_path / "blessing" / "blessing.json").write_text(
        json.dumps(
            {
                "blessed": False,
                "failures": [{**failure, "by": 0.2}],
                "baseline": None,
                "metrics": {"Overall": {"accuracy": 0.4, "example_count": 10.0}},
            }
        )
    )
    (tmp_path / "infra_blessing").mkdir()
    (tmp_path / "infra_blessing" / "INFRA_BLESSED").write_text("")
    html = open(write_report(str(tmp_path)), encoding="utf-8").read()
    assert '<span class="not-blessed">NOT blessed</span>: 1 threshold check(s) failed' in html
    assert '<td>accuracy</td><td>Overall</td><td class="n">0.4</td><td>&gt;= 0.6</td>' in html
    assert html.count('<svg class="bp-bars"') == 2  # accuracy, example_count
    assert "rerun with --no_cache Evaluator" in html
    assert (
        "<h3>blessing/NOT_BLESSED</h3>" in html and "<h3>infra_blessing/INFRA_BLESSED</h3>" in html
    )
    assert "No evaluation in this run." not in html


def test_a_reused_artifact_is_read_from_the_run_that_published_it(tmp_path):
    # A cached stage's outputs are the earlier run's, as the manifest records them; the
    # report reads them there and says so, and a reused artifact that is gone is named as
    # such (not as a stage that did not finish).
    first, again = tmp_path / "runs" / "first", tmp_path / "runs" / "again"
    (first / "tuner").mkdir(parents=True)
    (first / "tuner" / "_PUBLISHED").write_text("")
    trial = {"trial_id": "0", "status": "COMPLETED", "objective": 0.5, "hyperparameters": {}}
    (first / "tuner" / "trials.json").write_text(json.dumps({"trials": [trial]}))
    again.mkdir()
    stages = {
        "Tuner": {"artifacts": ["tuner"], "outputs": [{"uri": str(first / "tuner")}]},
        "ExampleGen+Statistics": {
            "artifacts": ["statistics"],
            "outputs": [{"uri": str(first / "statistics")}],
        },
    }
    (again / "manifest.json").write_text(json.dumps({"stages": stages}))
    html = open(write_report(str(again)), encoding="utf-8").read()
    trials = html.split('<section id="trials">', 1)[1].split("</section>", 1)[0]
    assert '<p class="origin" data-reused-from="first">' in trials
    assert "<td>0</td><td>COMPLETED</td>" in trials
    assert f"statistics: reused from run first, but {first / 'statistics'} is no longer" in html
    assert "ExampleGen&#39;s job did not finish" not in html


def test_event_files_are_read_record_by_record_as_tensorflow_reads_them(tmp_path, caplog):
    """The report reads TensorBoard's event files without TensorFlow: the same records as
    TensorFlow's reader; a truncated or damaged one ends the file there."""
    import tensorflow as tf

    from beam_pipeline.stages.trainer.report import tfrecords as _tfrecords

    path = str(tmp_path / "events.out.tfevents.1")
    records = [b"", b"x", bytes(range(256)) * 40, b"last"]
    with tf.io.TFRecordWriter(path) as writer:
        for r in records:
            writer.write(r)
    assert list(_tfrecords(path)) == records
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == records
    data = open(path, "rb").read()
    cut = str(tmp_path / "cut")
    with open(cut, "wb") as f:
        f.write(data[:-3])  # the writer stopped inside the last record's checksum
    assert list(_tfrecords(cut)) == records[:-1]
    damaged = bytearray(data)
    damaged[12 + 0 + 4 + 12 + 1 + 4 + 12 + 100] ^= 1  # a byte of the third record
    bad = str(tmp_path / "bad")
    with open(bad, "wb") as f:
        f.write(bytes(damaged))
    assert list(_tfrecords(bad)) == records[:2]
    assert "a damaged record" in caplog.text


def test_sections_come_from_the_graphs_stages_in_order_merged_and_placed(tmp_path):
    # The report knows no stage: it shows what each stage of the graph returns, in graph
    # order; a section with an earlier one's id joins it, `after` places one behind
    # another, and a hook that raises costs its own sections only (one line says so).
    from beam_pipeline.engine.report_sections import (
        Code,
        Figures,
        KeyValues,
        Note,
        ReportSection,
        Table,
    )
    from beam_pipeline.engine.stage import Stage

    class _Shown(Stage):
        def __init__(self, name, sections):
            self.name, self._sections = name, sections

        def run(self, ctx, inputs, out):
            raise AssertionError("not run here")

        def report_sections(self, view):
            if self._sections is None:
                raise ValueError("a file is damaged")
            return self._sections

    graph = (
        _Shown("A", [ReportSection("one", "One", empty="Nothing yet."),
                     ReportSection("late", "Late", parts=[Note("placed")], after="two")]),
        _Shown("Broken", None),
        _Shown("B", [ReportSection("two", "Two", parts=[
            Table(["file", "n"], [[Code("a.csv:3"), 7], ["b", None]]),
            Figures([("<svg class='x'></svg>", "a <plot>")]),
        ])]),
        _Shown("C", [ReportSection("one", "ignored", parts=[KeyValues([("ok", True)], "c/x")])]),
    )  # fmt: skip
    html = open(write_report(str(tmp_path), graph), encoding="utf-8").read()
    assert re.findall(r'<section id="([a-z]+)"><h2>([^<]+)</h2>', html) == [
        ("stages", "Stages"), ("one", "One"), ("two", "Two"), ("late", "Late"),
    ]  # fmt: skip
    one = html.split('<section id="one">', 1)[1].split("</section>", 1)[0]
    assert "<h3>c/x</h3>\n<table><tr><td>ok</td><td>True</td></tr></table>" in one
    assert "Nothing yet." not in one
    assert '<tr><td><code>a.csv:3</code></td><td class="n">7</td></tr>' in html
    assert "<tr><td>b</td><td>-</td></tr>" in html
    assert "<figcaption>a &lt;plot&gt;</figcaption>" in html
    assert "Broken&#39;s report sections: could not be read (ValueError: a file is damaged)" in html


def test_a_stages_template_edited_between_two_reports_of_one_process_shows_the_edit(
    tmp_path, monkeypatch
):
    # The process keeps its compiled templates (one Jinja environment), but a stage's own
    # template that its author edits (a notebook's session) is read again.
    import sys

    from beam_pipeline.engine.report_sections import Fragment, ReportSection
    from beam_pipeline.engine.stage import Stage

    package = tmp_path / "my_stage_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    template = package / "part.html"
    template.write_text("<p>first {{ n }}</p>")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_stage_pkg", raising=False)

    class _Mine(Stage):
        name = "Mine"

        def run(self, ctx, inputs, out):
            raise AssertionError("not run here")

        def report_sections(self, view):
            part = Fragment("my_stage_pkg", "part.html", {"n": 1})
            return [ReportSection("mine", "Mine", parts=[part])]

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = open(write_report(str(tmp_path / "a"), (_Mine(),)), encoding="utf-8").read()
    assert "<p>first 1</p>" in first
    template.write_text("<p>second {{ n }}</p>")
    os.utime(template, ns=(0, os.stat(template).st_mtime_ns + 1_000_000_000))
    second = open(write_report(str(tmp_path / "b"), (_Mine(),)), encoding="utf-8").read()
    assert "<p>second 1</p>" in second and "first" not in second
