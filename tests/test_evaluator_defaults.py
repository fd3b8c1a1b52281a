"""The Evaluator's defaults on a label the docs never use: diamonds' ``price`` passed
through unchanged (an INT column, values in the hundreds to thousands), as a user following
getting-started writes it.

One pipeline root serves every test here: the first run trains a poor model on span 1 (the
model phase is then reused by the runs that only change the Evaluator's settings); a
second run trains a better one on span 2. Through ``beam_pipeline.cli.main`` in this
process, with the bundled stages on the DirectRunner and TFMA for real."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import TESTDATA

from beam_pipeline import cli
from beam_pipeline.stages.evaluator.evaluation import NO_BASELINE_TO_CHECK

DIAMONDS = os.path.join(TESTDATA, "diamonds")
_COMMON = [
    "--runner=DirectRunner",
    f"--module_file={os.path.join(DIAMONDS, 'diamonds_module.py')}",
    "--no_tuner",
    "--no_infra_validator",
    "--eval_steps=2",
    "--eval_slice_features=cut",
]


def _run(root, run_id, span, *flags):
    """(exit code, stdout, stderr) of one run of ``span``'s data, in this process."""
    argv = [
        *_COMMON,
        f"--data={os.path.join(DIAMONDS, f'span-{span}.csv')}",
        f"--pipeline_root={root}",
        f"--run_id={run_id}",
        *flags,
    ]
    return cli.main(argv)


def _stages(root, run_id):
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The pipeline root, after span 1's run with a poor model (20 steps)."""
    path = tmp_path_factory.mktemp("diamonds") / "root"
    assert _run(path, "first", 1, "--train_steps=20") == 0
    return path


@pytest.mark.slow
def test_an_int_regression_label_is_evaluated_as_regression_with_its_plots(root):
    # Before: the default EvalConfig picked the binary kind; TFMA raised "label must be
    # within [0, 1]" mid-job: 300 lines of traceback, exit 1, no summary.
    evaluation = _stages(root, "first")["Evaluator"]
    assert evaluation["status"] == "ok", evaluation["note"]
    assert evaluation["details"]["model_kind"] == "regression"
    # Its only threshold compares with a baseline and there is none: blessed, saying so
    # (not "no thresholds" above a table that lists one).
    assert evaluation["details"]["blessed"] is True
    assert evaluation["details"]["reason"] == NO_BASELINE_TO_CHECK
    overall = evaluation["details"]["metrics"]["Overall"]
    assert overall["mean_squared_error"] > 1e6  # price in dollars, squared
    # Numbers as a person reads them: no 7+-digit integer spelled out for a float metric.
    assert not re.search(r"\d{8,}", evaluation["note"]), evaluation["note"]
    table = evaluation["details"]["table_head"].splitlines()
    assert table[1].startswith("Overall") and table[2:] == sorted(table[2:])
    with open(os.path.join(root, "runs", "first", "report.html")) as f:
        report = f.read()
    for title in ("calibration (CalibrationPlot, Overall)", "residuals (CalibrationPlot, Overall)"):
        assert title in report


def _binary_config(tmp_path):
    path = tmp_path / "binary.pbtxt"
    path.write_text(
        'model_specs { label_key: "price_xf" signature_name: "serving_default" '
        'preprocessing_function_names: "transform_features" }\n'
        'metrics_specs { metrics { class_name: "BinaryAccuracy" } }\n'
        "slicing_specs {}\n"
    )
    return path


@pytest.mark.slow
def test_a_stage_s_unexpected_error_ends_in_one_sentence_with_the_summary_and_report(
    root, tmp_path, capfd
):
    # Binary metrics asked for on the INT price: TFMA's own error, in the Beam job (an
    # error no stage expects). The runner ends it for any stage, not the Evaluator alone.
    code = _run(root, "binary", 1, "--train_steps=20", f"--eval_config={_binary_config(tmp_path)}")
    out, err = capfd.readouterr()
    assert code == 2
    errors = [line for line in err.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith(
        "error: Evaluator stopped on an unexpected error (ValueError: label must be within [0, 1]"
    ), err[-3000:]
    assert "--run_id=binary to resume" in errors[0]
    assert "Traceback" not in out + err
    stages = _stages(root, "binary")
    assert stages["Evaluator"]["status"] == "failed"
    assert stages["Evaluator"]["note"].startswith("Evaluator stopped on an unexpected error")
    assert os.path.exists(os.path.join(root, "runs", "binary", "report.html"))
    assert f"Report: {os.path.join(root, 'runs', 'binary', 'report.html')}" in out
    # Its traceback is kept for a bug report: in the run's log.
    with open(os.path.join(root, "runs", "binary", "run.log")) as f:
        assert "label must be within [0, 1]" in f.read()


@pytest.mark.slow
def test_a_retrained_model_better_overall_is_blessed_by_the_default_thresholds(root):
    # Before: a change threshold of 1e-10 on every slice refused a model 17% better
    # overall because one slice worsened by 0.006.
    assert _run(root, "second", 2, "--train_steps=300") == 0
    evaluation = _stages(root, "second")["Evaluator"]
    details = evaluation["details"]
    assert details["baseline"] == str(root / "runs" / "first" / "model")
    assert details["blessed"] is True, evaluation["note"]
    # In plain words: which metric, on which slice, against the baseline's value, how much.
    assert re.match(
        r"blessed: mean_squared_error on Overall = \S+, [\d.]+% lower than the baseline's \S+ "
        r"\(allowed: at most 1% above the baseline's \(lower is better\)\)",
        evaluation["note"],
    ), evaluation["note"]


@pytest.mark.slow
def test_runs_list_and_diff_show_the_evaluator_s_metrics_beside_the_trainer_s(root, capsys):
    # Before: both were called "eval" and only the Trainer's (Keras's validation on
    # --eval_steps batches) were shown. The Evaluator's: TFMA over the whole eval split.
    second = os.path.join(root, "runs", "second", "summary.json")
    if not os.path.exists(second):
        assert _run(root, "second", 2, "--train_steps=300") == 0
    capsys.readouterr()
    assert cli.main(["runs", "list", f"--pipeline_root={root}", "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    overall = _stages(root, "second")["Evaluator"]["details"]["metrics"]["Overall"]
    assert rows["second"]["evaluation"] == overall
    assert rows["second"]["metrics"] == _stages(root, "second")["Trainer"]["details"]["metrics"]
    assert _stages(root, "second")["Trainer"]["note"].startswith("validation ")
    assert cli.main(["runs", "diff", "first", "second", f"--pipeline_root={root}", "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    first = _stages(root, "first")["Evaluator"]["details"]["metrics"]["Overall"]
    mse = diff["compared"]["evaluation"]["mean_squared_error"]
    assert mse == [first["mean_squared_error"], overall["mean_squared_error"]]


_SPEC = 'model_specs { label_key: "price_xf" preprocessing_function_names: "transform_features" }\n'


@pytest.mark.parametrize(
    "text, sentence",
    [
        (
            _SPEC + 'metrics_specs { metrics { class_name: "Mse" module: "no_such_metrics" } }',
            "names metric 'Mse' in module 'no_such_metrics', which does not import "
            "(ModuleNotFoundError: No module named 'no_such_metrics'); install that module",
        ),
        (
            _SPEC + 'metrics_specs { metrics { class_name: "Mse" module: "json" } }',
            "names metric 'Mse' in module 'json', which has no such class; fix the metric's",
        ),
        ("metrics_specs { metrics { class_name: ", "does not parse as a TFMA EvalConfig"),
    ],
)
def test_an_eval_config_that_cannot_work_stops_the_run_before_anything_is_written(
    root, tmp_path, capfd, text, sentence
):
    # Before: a metric module that does not exist was imported by TFMA in the middle of
    # its Beam job (201 lines of traceback), after the InfraValidator was published.
    path = tmp_path / "eval_config.pbtxt"
    path.write_text(text)
    code = _run(root, "bad-config", 1, "--train_steps=20", f"--eval_config={path}")
    err = capfd.readouterr().err
    assert code == 2
    # One sentence naming the file, the metric and the fix.
    assert err.startswith(f"error: --eval_config {path} ") and err.count("\n") == 1, err
    assert sentence in err, err
    assert not os.path.exists(os.path.join(root, "runs", "bad-config"))


@pytest.mark.parametrize(
    "metrics, lines",
    [
        # A regressor's squared error in dollars: e-notation, never 36 digits spelled out.
        (
            {"cut:Ideal": {"mean_squared_error": 3.2e35}, "Overall": {"mean_squared_error": 1e35}},
            ["Overall                 1e+35", "cut:Ideal               3.2e+35"],
        ),
        # Counts whole; Overall first, then the slices by name, whatever TFMA's order.
        (
            {"b": {"example_count": 5.0}, "Overall": {"example_count": 333447.0}, "a": {}},
            [
                "Overall                 333447",
                "a                       -",
                "b                       5",
            ],
        ),
    ],
)
def test_the_summary_s_metrics_table_reads_overall_first_with_numbers_formatted(metrics, lines):
    from beam_pipeline.stages.evaluator.executor import metrics_table

    assert [line.rstrip() for line in metrics_table(metrics).splitlines()[1:]] == lines
