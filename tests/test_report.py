"""The run report on run directories a run leaves when it fails: it renders what exists and
says what is missing (the whole run's report is checked in test_cli_runs.py)."""

from __future__ import annotations

import json
import os

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
    # As the Evaluator and InfraValidator write them (TFX's ModelBlessing layout).
    (tmp_path / "blessing").mkdir()
    (tmp_path / "blessing" / "NOT_BLESSED").write_text("")
    (tmp_path / "blessing" / "blessing.json").write_text(
        json.dumps({"blessed": False, "failed": [{"metric": "accuracy", "value": 0.4}]})
    )
    (tmp_path / "infra_blessing").mkdir()
    (tmp_path / "infra_blessing" / "INFRA_BLESSED").write_text("")
    html = open(write_report(str(tmp_path)), encoding="utf-8").read()
    assert "<h3>blessing/blessing.json</h3>" in html
    assert "<td>failed[0].metric</td><td>accuracy</td>" in html
    assert (
        "<h3>blessing/NOT_BLESSED</h3>" in html and "<h3>infra_blessing/INFRA_BLESSED</h3>" in html
    )
    assert "No evaluation in this run." not in html


def test_event_files_are_read_record_by_record_as_tensorflow_reads_them(tmp_path, caplog):
    """The report reads TensorBoard's event files without TensorFlow: the same records as
    TensorFlow's reader; a truncated or damaged one ends the file there."""
    import tensorflow as tf

    from beam_pipeline.report.data import _tfrecords

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
