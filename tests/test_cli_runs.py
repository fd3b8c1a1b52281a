"""Whole runs of the CLI that train, tune or run several jobs (apart from test_cli.py so that
the two pytest-xdist processes share the long ones: a test file goes to one process)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import unescape as html_unescape

import pytest
from conftest import PENGUIN_DIR, PENGUIN_FEATURES
from test_cli import MODULE, _run_dir, _summary

from beam_pipeline import cli
from beam_pipeline.engine.fingerprint import pipeline_code
from beam_pipeline.engine.summary import RunSummary, StageReport
from beam_pipeline.progress import PROGRESS_PREFIX

pytestmark = pytest.mark.slow

# The bundled stages' report sections: (id, heading), in order (the report has them all,
# and a new stage's own in graph order: _report_sections).
REPORT_SECTIONS = [
    ("stages", "Stages"),
    ("statistics", "Statistics"),
    ("schema", "Schema"),
    ("anomalies", "Anomalies"),
    ("rejected", "Rejected rows"),
    ("trials", "Trials"),
    ("training", "Training"),
    ("evaluation", "Evaluation"),
]


def _report_sections(run_dir: str) -> list[tuple[str, str]]:
    """The sections the graph's declarations give ``run_dir``'s report (its stage table,
    then each stage's ``report_sections``), which must hold REPORT_SECTIONS in order."""
    from beam_pipeline.report.data import collect

    declared = [("stages", "Stages"), *((s.id, s.title) for s in collect(run_dir).sections)]
    assert [s for s in declared if s in REPORT_SECTIONS] == REPORT_SECTIONS
    return declared


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The README's first command, as a user runs it: ``python -m beam_pipeline
    --runner=DirectRunner`` in a fresh process from an empty folder (its runs go to
    ``pipeline_runs/`` there), stdout and stderr kept apart, and no TF_CPP_MIN_LOG_LEVEL
    from the test environment (the CLI must quiet TensorFlow itself)."""
    cwd = tmp_path_factory.mktemp("first_command")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "--runner=DirectRunner"],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, _run_dir(str(cwd / "pipeline_runs"))


def test_the_first_command_prints_only_progress_the_summary_and_the_report(default_run):
    # Before issue 15 this printed 48 lines: 28 on stderr (TensorFlow's C++ INFO lines and
    # a cuInit ERROR, 16 tf.Transform analyzer-cache warnings for the bundled module, a
    # deprecation notice, a Keras UserWarning) and the 20-line summary.
    proc, run_dir = default_run
    assert proc.stderr == ""  # no TensorFlow C++ line, no Python warning, no log record
    lines = proc.stdout.splitlines()
    progress = [line for line in lines if line.startswith(PROGRESS_PREFIX)]
    assert lines[: len(progress)] == progress  # the progress lines, then the rest
    with open(os.path.join(run_dir, "summary.json")) as f:
        recorded = json.load(f)
    summary = RunSummary(
        recorded["run_dir"], [StageReport.from_json(s) for s in recorded["stages"]]
    )
    # As the summary names the run directory: under the relative default pipeline_root.
    report = os.path.join(recorded["run_dir"], "report.html")
    log = os.path.join(recorded["run_dir"], "run.log")
    assert lines[len(progress) :] == summary.format().splitlines() + [
        f"Report: {report}; full log: {log}"
    ]
    # Through a pipe: plain lines, a stage's start, then its rows' ends as the summary has
    # them (and "running N s" lines every 10 s between them); stages that run at once (the
    # Evaluator and the InfraValidator) end in either order, the summary in graph order.
    assert "\x1b" not in proc.stdout
    assert progress[0] == f"{PROGRESS_PREFIX}ExampleGen+Statistics: running"
    ends = [line for line in progress if not re.search(r": running( \d+ s.*)?$", line)]
    ended = {line.split(":")[0]: line for line in ends}
    assert sorted(ended) == sorted(PROGRESS_PREFIX + s.stage for s in summary.stages)
    assert all(f": {s.status.value}" in ended[PROGRESS_PREFIX + s.stage] for s in summary.stages)
    assert os.path.isfile(os.path.join(run_dir, "report.html"))
    # What the terminal was spared is in the full log: TensorFlow's C++ lines among them,
    # those it writes at import before its logger is set up whatever TF_CPP_MIN_LOG_LEVEL
    # says. Which they are depends on the machine ("oneDNN custom operations are on" only
    # on CPUs where oneDNN is on by default; "Could not find cuda drivers" without a GPU),
    # so a fresh import here under the run's level says which to look for.
    with open(os.path.join(run_dir, "run.log")) as f:
        text = f.read()
    probe = subprocess.run(
        [sys.executable, "-c", "import tensorflow"],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        check=True,
    )
    cxx = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ (\S+\.cc:\d+\] .*)$", re.M)
    said_at_import = cxx.findall(probe.stderr)
    assert said_at_import, f"TensorFlow's import wrote no C++ line here:\n{probe.stderr}"
    assert all(line in text for line in said_at_import), said_at_import
    assert "cache key varies on repeated tracing" not in text  # the bundled module's own
    # sys.argv as `python -m beam_pipeline` has it: Beam reads it for options built without
    # flags, and would warn about our flags ("Discarding unparseable args").
    assert "nparseable" not in text


def test_the_progress_display_reads_trials_and_training_from_the_run_directory(default_run):
    from beam_pipeline.stages.graph import STAGE_GRAPH

    _DETAILS = {s.name: s.progress for s in STAGE_GRAPH}  # each stage declares its own
    _, run_dir = default_run
    # The bundled search: 4 trials, all done; the best score is the Tuner's own best trial's
    # (its val accuracy: 1 in 4 runs by hand, 0.98 in a CI run, so not a fixed figure).
    best = _summary(run_dir)["Tuner"]["details"]["objective"]["value"]
    assert _DETAILS["Tuner"](run_dir) == f"trials: 4 done, 0 running, 0 failed; best {best:.4g}"
    # 100 steps of 10 per epoch: TensorBoard's last train point is epoch 10's loss.
    assert re.fullmatch(r"epoch 10, loss \d\.\d+(e-\d+)?", _DETAILS["Trainer"](run_dir))


def test_the_report_shows_every_section_and_needs_no_network(default_run):
    _, run_dir = default_run
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as f:
        html = f.read()
    sections = re.findall(r'<section id="([a-z_]+)">', html)
    assert sections == [section for section, _ in _report_sections(run_dir)]
    assert "Not in this report" not in html  # a whole run: nothing is missing
    features = re.findall(r'<h3 class="feature" id="feature-([a-z_]+)">', html)
    assert sorted(features) == sorted(PENGUIN_FEATURES)
    # A histogram per numeric feature (5: four measurements and the year), train and eval
    # overlaid; the objective per trial and per hyperparameter (learning_rate, num_layers);
    # a curve per metric logged to TensorBoard (loss and accuracy at least).
    assert html.count('<svg class="bp-hist"') == 5
    assert html.count('<svg class="bp-scatter"') == 3
    assert html.count('<svg class="bp-curve"') >= 2
    assert "epoch_loss" in html and "Biscoe" in html  # a curve's tag; a top value
    # Keras logs epoch_* per epoch: the curve's x axis says so (it said "step").
    curve = html.split("epoch_loss</figcaption>")[0].rsplit('<svg class="bp-curve"', 1)[1]
    assert ">epoch</text>" in curve and ">step</text>" not in curve
    # TFX's learning rates (1e-2, 1e-3) are a decade apart: a log axis, ticks at powers of 10.
    lr = html.split("objective per learning_rate")[0].rsplit('<svg class="bp-scatter"', 1)[1]
    assert "learning_rate (log scale)" in lr and ">0.001</text>" in lr and ">0.01</text>" in lr
    # The evaluation from TFMA's outputs: the verdict, the threshold that decided it, the
    # metrics per slice as a table and a chart (the bundled run slices by island).
    evaluation = html.split('<section id="evaluation">', 1)[1]
    assert '<span class="blessed">Blessed</span>' in evaluation
    (thresholds,) = re.findall(r'<table class="thresholds">(.*?)</table>', evaluation, re.S)
    assert "sparse_categorical_accuracy" in thresholds and "&gt;= 0.6" in thresholds
    assert "not checked (no baseline)" in thresholds  # the change threshold, on a first run
    (table,) = re.findall(r'<table class="eval-metrics">(.*?)</table>', evaluation, re.S)
    for slice_name in ("Overall", "island:Biscoe", "island:Dream", "island:Torgersen"):
        assert f"<td>{slice_name}</td>" in table
    assert evaluation.count('<svg class="bp-bars"') == 2  # accuracy and example count
    assert 'class="bp-bound"' in evaluation  # the 0.6 threshold drawn on the accuracy chart
    # Offline: no script, and no stylesheet, image or font from elsewhere.
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_default_run_trains_and_the_model_serves_raw_examples_in_a_fresh_process(default_run):
    import conftest_trainer
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from beam_pipeline.engine.run_dir import RunDirectory

    _, run_dir = default_run
    root, run_id = os.path.dirname(os.path.dirname(run_dir)), os.path.basename(run_dir)
    stages = _summary(run_dir)
    tuner, trainer = stages["Tuner"], stages["Trainer"]
    assert tuner["status"] == "ok"
    assert tuner["details"]["best_hyperparameters"]  # 4 trials, 2 at a time, by default
    assert trainer["status"] == "ok"
    # Relative, as the default --pipeline_root is.
    assert trainer["artifact"] == os.path.join("pipeline_runs", "runs", run_id, "model")
    assert "sparse_categorical_accuracy=" in trainer["note"]
    # Its serving signature on the raw eval examples (in this process: the InfraValidator
    # below served it from a fresh `python -I` process).
    examples = conftest_trainer.read_raw_examples(RunDirectory(root, run_id), "eval")
    assert len(examples) == stages["ExampleGen"]["rows_out"]["eval"]
    served = conftest_trainer.classify_accuracy(os.path.join(run_dir, "model"), examples)
    # The bundled module is seeded (penguin_module.SEED): with each learning rate 0.01 the
    # search can pick, 100 steps served 1.0, 0.990 and 0.990 on the 105 eval rows (1, 2, 3
    # hidden layers, measured once each; the tuned run picked 1 layer, 1.0). Unseeded, it
    # served 0.79 in one fresh-clone CI run of three.
    assert served >= 0.9

    # The model checks: sliced metrics (overall and per island, from the bundled config),
    # blessed on value thresholds alone (no earlier blessed model), served from a sandbox
    # that wrote TF Serving's warm-up file into the model; no --push_destination: no push.
    evaluation = stages["Evaluator"]
    assert evaluation["status"] == "ok" and evaluation["details"]["blessed"] is True
    assert "rubber stamp" in evaluation["note"]
    assert set(evaluation["details"]["metrics"]) == {
        "Overall",
        "island:Biscoe",
        "island:Dream",
        "island:Torgersen",
    }
    infra = stages["InfraValidator"]["details"]
    assert infra["blessed"] is True and infra["endpoint"] is None  # the sandbox served it
    assert infra["load_seconds"] > 0
    assert sorted(int(batch) for batch in infra["latency_ms"]) == [1, 8, 32]
    assert all(0 < v["p50"] <= v["p99"] for v in infra["latency_ms"].values())
    # The warm-up file TF Serving replays: PredictionLogs of PredictRequests of each size.
    warmup = os.path.join(run_dir, "model", "assets.extra", "tf_serving_warmup_requests")
    sizes = []
    for record in tf.data.TFRecordDataset(warmup):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        assert log.predict_log.request.model_spec.signature_name == "serving_default"
        sizes.append(tf.make_ndarray(log.predict_log.request.inputs["examples"]).shape[0])
    assert sizes == [1, 8, 32]
    assert stages["Pusher"]["note"] == "blessed; not pushed: no --push_destination"


def test_rerun_reuses_the_analyzer_cache_and_the_module_is_imported_once(default_run, tmp_path):
    # A run in the default run's pipeline root (its analyzer cache) with a module that logs
    # each import; it has the bundled preprocessing_fn (from a helper beside it) and no
    # tuner_fn or run_fn, so the Tuner and Trainer stages load it, find nothing to do and
    # skip: the launcher's three loads (the run's check, Tuner, Trainer) at no training cost.
    _, run_dir = default_run
    first = _summary(run_dir)["Transform"]["details"]
    assert first["analyzer_cache"].startswith("written")
    # A copy of the default run's root: the --no_cache run below makes newer executions
    # under its stages' keys, after which the later tests' reruns of the default command
    # would rightly train again (what they read is no longer what the first run made).
    root = str(tmp_path / "pipeline_runs")
    shutil.copytree(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))), root)
    module_dir = tmp_path / "module"
    module_dir.mkdir()
    (module_dir / "bundled_penguin_helpers.py").write_bytes(open(MODULE, "rb").read())
    log = module_dir / "imports.log"
    (module_dir / "counted_module.py").write_text(
        "import os\n"
        "\n"
        "from bundled_penguin_helpers import preprocessing_fn  # noqa: F401\n"
        "\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
    )
    args = [
        "--runner=DirectRunner",
        f"--pipeline_root={root}",
        f"--config={os.path.join(PENGUIN_DIR, 'pipeline.yaml')}",
        f"--module_file={module_dir / 'counted_module.py'}",
    ]
    # The same bytes at another path with another modification time: the cache's key is the
    # content (test_resume.py checks that changed bytes of the same size and time miss).
    copy = tmp_path / "copy" / "renamed.csv"
    copy.parent.mkdir()
    copy.write_bytes(open(os.path.join(PENGUIN_DIR, "penguins.csv"), "rb").read())
    os.utime(copy, (1_000_000_000, 1_000_000_000))
    # --no_cache: run every stage (the metadata store would reuse the default run's: the
    # preprocessing_fn is the same code), so that Transform's analyzer cache, a cache of its
    # own, is what is tested.
    assert cli.main(args + [f"--data={copy}", "--run_id=counted", "--no_cache"]) == 0
    assert log.read_text().split() == [str(os.getpid())]  # once per run, not three times
    stages = _summary(os.path.join(root, "runs", "counted"))
    assert stages["Tuner"]["status"] == stages["Trainer"]["status"] == "skipped"
    assert stages["Transform"]["status"] == "ok"
    assert stages["Transform"]["details"]["analyzer_cache"] == "reused (no analyzer recomputed)"
    # The same file with the same bytes in the same process is not executed again (see
    # test_trainer_module_loader for an edited one): a rerun, every stage from the store.
    assert cli.main(args + [f"--data={copy}", "--run_id=counted_again"]) == 0
    again = _summary(os.path.join(root, "runs", "counted_again"))
    assert {s["status"] for s in again.values()} <= {"cached", "skipped"}
    assert log.read_text().split() == [str(os.getpid())]


def test_runs_commands_print_nothing_on_stderr_and_import_no_tensorflow(default_run):
    # `runs list` / `runs show` read the metadata store only, `runs diff` and `runs report`
    # the run's records too: in a fresh process, as a user types them in the first
    # command's folder, they print the run and nothing on stderr (they once imported
    # TensorFlow to check that a local file exists, to read a file, to list a folder or to
    # read the TensorBoard event files: about 6 s each time, and its C++ lines on stderr).
    _, run_dir = default_run
    folder = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))
    run_id = os.path.basename(run_dir)
    code = (
        "import runpy, sys; sys.argv = ['beam_pipeline', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('beam_pipeline', run_name='__main__')\n"
        "finally:\n"
        "    print('tensorflow' in sys.modules, file=sys.stdout)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    report = os.path.join(run_dir, "report.html")
    with open(report, encoding="utf-8") as f:
        written_by_the_run = f.read()
    # Gone before `runs report`: the report checked below is the one it wrote, not the
    # run's left in place by a `runs report` that wrote nothing.
    os.remove(report)
    for argv in (
        ["runs", "list"],
        ["runs", "show", run_id],
        ["runs", "diff", run_id, run_id],
        ["runs", "report", run_id],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and proc.stderr == "", (argv, proc.stderr[-3000:])
        assert run_id in proc.stdout, proc.stdout
        assert proc.stdout.splitlines()[-1] == "False", argv  # no TensorFlow imported
        if argv[1] == "diff":  # the pipeline code that made the run is one of its inputs
            (row,) = [line for line in proc.stdout.splitlines() if " code " in line]
            assert re.findall(r"[0-9a-f]{12}", row) == [pipeline_code()[:12]] * 2, row
    # `runs report` wrote the report the run wrote (its training curves read without
    # TensorFlow's reader, the same points).
    assert os.path.isfile(report), "`runs report` did not write report.html"
    with open(report, encoding="utf-8") as f:
        assert f.read() == written_by_the_run


def _reused_sections(html: str) -> dict[str, str]:
    """Section id -> the run its "Reused from run X" line names, for each section that has
    one."""
    found = {}
    for section, body in re.findall(r'<section id="([a-z_]+)">(.*?)</section>', html, re.S):
        origin = re.search(r'<p class="origin" data-reused-from="([^"]+)">', body)
        if origin:
            found[section] = origin.group(1)
    return found


def test_a_rerun_whose_stages_are_all_reused_has_a_whole_report(default_run, monkeypatch):
    # The second run into one pipeline root, the normal case after the first: every stage
    # is reused. Its report (and `runs report`'s) shows what those stages published in the
    # first run's folder, each section saying so, and never claims a stage did not finish
    # (it said "statistics: not published (ExampleGen's job did not finish)", "trials: no
    # tuner/trials.json", and had empty sections). In this process, from the first
    # command's folder (the report is what is checked; test_runs_commands_print_nothing...
    # runs `runs report` in a fresh one).
    _, run_dir = default_run
    first = os.path.basename(run_dir)
    folder = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))
    monkeypatch.chdir(folder)
    args = ["--runner=DirectRunner", "--run_id=again"]
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *args])
    assert cli.main(args) == 0
    again = os.path.join(folder, "pipeline_runs", "runs", "again")
    stages = _summary(again)
    assert {s["status"] for s in stages.values()} <= {"cached", "skipped"}
    assert stages["Evaluator"]["status"] == "cached"
    report = os.path.join(again, "report.html")
    with open(report, encoding="utf-8") as f:
        html = f.read()
    for written in (html, None):
        if written is None:  # `runs report` writes the same page again
            os.remove(report)
            assert cli.main(["runs", "report", "again"]) == 0
            with open(report, encoding="utf-8") as f:
                written = f.read()
            assert written == html
        assert "Not in this report" not in written and "not published" not in written
        # Each section names the run its stage's artifacts came from, as the stage's row
        # says ("reused from run X": the first run, or the analyzer-cache test's run for
        # the data stages when it ran before this one).
        reused = _reused_sections(written)
        for section, stage in {
            "statistics": "Statistics",
            "schema": "Schema",
            "anomalies": "Validation",
            "rejected": "ExampleGen",
            "trials": "Tuner",
            "training": "Trainer",
            "evaluation": "Evaluator",
        }.items():
            (source,) = re.findall(r"^reused from run (\S+?);?(?: |$)", stages[stage]["note"])
            assert source in reused[section].split(), (section, reused)
            assert "again" not in reused[section].split()
        assert reused["trials"] == reused["training"] == first
        # The statistics of every feature (a histogram per numeric feature and split),
        # the trials (a row and a point each), the training curves and the evaluation.
        features = re.findall(r'<h3 class="feature" id="feature-([a-z_]+)">', written)
        assert sorted(features) == sorted(PENGUIN_FEATURES)
        assert written.count('<svg class="bp-hist"') == 5
        assert written.count('<svg class="bp-scatter"') == 3
        assert written.count('<svg class="bp-curve"') >= 2
        evaluation = written.split('<section id="evaluation">', 1)[1]
        assert "No evaluation in this run." not in evaluation
        assert '<span class="blessed">Blessed</span>' in evaluation
        assert evaluation.count('<svg class="bp-bars"') == 2


# An EvalConfig asking TFMA for plots, as a TFX user writes one for the penguin model: the
# multi-class confusion matrix, and per class (binarized) the confusion matrices at
# thresholds (ROC, precision-recall), the calibration histogram and the AUC.
_PLOTS_EVAL_CONFIG = """
model_specs { label_key: "species_xf" preprocessing_function_names: "transform_features" }
slicing_specs {}
slicing_specs { feature_keys: "island" }
metrics_specs {
  metrics {
    class_name: "SparseCategoricalAccuracy"
    threshold {
      value_threshold { lower_bound { value: 0.6 } }
      change_threshold { direction: HIGHER_IS_BETTER absolute { value: -1e-10 } }
    }
  }
  metrics { class_name: "MultiClassConfusionMatrixPlot" }
}
metrics_specs {
  binarize { class_ids { values: [0, 1, 2] } }
  metrics { class_name: "ConfusionMatrixPlot" }
  metrics { class_name: "CalibrationPlot" }
  metrics { class_name: "AUC" }
}
"""


@pytest.fixture(scope="module")
def plots_run(default_run, tmp_path_factory):
    """A later run on a copy of the default run's root (its store; the other tests' runs
    there are left as they are) that trains the model again (a new model, so that the
    default run's blessed one is its baseline) and evaluates it with that EvalConfig: its
    run directory. In this process (what is checked is the report it writes, not the
    terminal: the first command's own process is test_the_first_command's), from the
    copy's folder, as its relative default root has it; under the default run's pipeline
    name, so that the copy continues that pipeline (its runs, cache and models)."""
    _, run_dir = default_run
    first_root = os.path.dirname(os.path.dirname(os.path.abspath(run_dir)))
    folder = tmp_path_factory.mktemp("plots")
    shutil.copytree(first_root, folder / "pipeline_runs")
    config = folder / "eval_config.pbtxt"
    config.write_text(_PLOTS_EVAL_CONFIG)
    args = ["--runner=DirectRunner", "--run_id=plots", f"--eval_config={config}"]
    args += ["--no_infra_validator", "--no_cache=Trainer", f"--pipeline_name={first_root}"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(sys, "argv", ["beam_pipeline", *args])
        assert cli.main(args) == 0
    return os.path.join(folder, "pipeline_runs", "runs", "plots")


def test_the_report_draws_tfma_plots_and_the_candidate_beside_its_baseline(default_run, plots_run):
    _, first = default_run
    run_dir = plots_run
    stages = _summary(run_dir)
    assert stages["Trainer"]["status"] == stages["Evaluator"]["status"] == "ok"
    baseline = os.path.abspath(os.path.join(first, "model"))
    assert stages["Evaluator"]["details"]["baseline"] == baseline
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as f:
        html = f.read()
    evaluation = html.split('<section id="evaluation">', 1)[1]
    assert f"Compared with the baseline <code>{baseline}</code>" in evaluation
    # The thresholds, each with its result: the change threshold was checked this time
    # (the model trained again from the same seeds: passed, or failed by a hair).
    (thresholds,) = re.findall(r'<table class="thresholds">(.*?)</table>', evaluation, re.S)
    rows = [
        re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        for row in re.findall(r"<tr><td>.*?</tr>", thresholds, re.S)
    ]
    assert sorted(r[2] for r in rows) == [
        "&gt;= 0.6",
        "at most 1e-10 below the baseline&#39;s (higher is better)",
    ]
    assert all(r[3] == "passed" or r[3].startswith("failed on ") for r in rows), rows
    assert "not checked" not in thresholds
    # Candidate / baseline / change per slice, and the candidate's bars beside the
    # baseline's (the example counts: the same examples, no change).
    (table,) = re.findall(r'<table class="eval-metrics">(.*?)</table>', evaluation, re.S)
    assert "(candidate / baseline / change)" in table and "105 / 105 / 0</td>" in table
    bars = re.findall(r'<svg class="bp-bars".*?</svg>', evaluation, re.S)
    assert bars and all("baseline" in b and "candidate" in b for b in bars)
    # TFMA's plots: a confusion matrix per slice (overall and the three islands), ROC,
    # precision-recall and calibration curves with a line per class, the per-class AUCs.
    assert evaluation.count('<svg class="bp-matrix"') == 4
    for title in ("ROC (ConfusionMatrixPlot", "precision-recall (", "calibration (CalibrationPlot"):
        (svg,) = re.findall(
            r'(<svg class="bp-curve"(?:(?!</svg>).)*</svg>)<figcaption>' + re.escape(title),
            evaluation,
            re.S,
        )
        assert svg.count("<polyline ") + svg.count("<circle ") >= 3, title
    assert "auc (classId:0)" in evaluation and "auc (classId:2)" in evaluation


_LAYOUT_CHECK = """<script>
const problems = [];
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll("text")];
  const titles = texts.filter(t => t.matches(".bp-xtitle, .bp-ytitle"));
  for (const t of texts) {
    const r = t.getBoundingClientRect();
    if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 ||
        r.bottom > box.bottom + 1) problems.push("clipped: " + t.textContent);
    for (const u of titles) {
      if (u === t) continue;
      const q = u.getBoundingClientRect();
      if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom)
        problems.push("overlap: " + u.textContent + " / " + t.textContent);
    }
  }
}
document.body.setAttribute("data-layout", JSON.stringify(problems));
</script>"""


def _layout_problems(page: str, tmp_path) -> list[str]:
    """The texts of the report's plots that the browser draws clipped at their plot's edge
    or over an axis title, measured in Chromium by a script added to a copy of the page
    (the report itself has none)."""
    with open(page, encoding="utf-8") as f:
        html = f.read()
    probe = tmp_path / "layout.html"
    probe.write_text(html.replace("</body>", _LAYOUT_CHECK + "</body>"), encoding="utf-8")
    dom, console = _render_in_chromium(str(probe), tmp_path, str(tmp_path / "layout.png"))
    assert console == [], console
    (found,) = re.findall(r'<body data-layout="([^"]*)"', dom)
    return json.loads(html_unescape(found))


def test_a_blessed_model_is_pushed_and_a_worse_one_is_not(default_run, monkeypatch, capsys):
    # Later runs of the default run's pipeline root (the same relative root, from its
    # folder): every stage up to the Pusher is reused from the metadata store.
    _, run_dir = default_run
    folder = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))
    monkeypatch.chdir(folder)
    serving = os.path.join(folder, "serving", "penguin")
    blocker = os.path.join(folder, "a_file")
    open(blocker, "w").close()
    args = ["--runner=DirectRunner", "--run_id=pushed"]
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *args])
    # A push destination that cannot be written: the run fails at the Pusher only.
    assert cli.main(args + [f"--push_destination={blocker}/models"]) == 2
    assert "a_file/models is not writable" in capsys.readouterr().err
    # The rerun of that run with a writable destination runs only the Pusher.
    assert cli.main(args + [f"--push_destination={serving}"]) == 0
    stages = _summary(os.path.join("pipeline_runs", "runs", "pushed"))
    assert stages["Pusher"]["status"] == "ok"
    assert {s["status"] for k, s in stages.items() if k != "Pusher"} <= {"cached", "skipped"}
    assert stages["Pusher"]["artifact"] == os.path.join(serving, "1")
    assert os.path.exists(os.path.join(serving, "1", "assets.extra", "tf_serving_warmup_requests"))

    # A worse model (one training step): compared with the blessed model of the first run
    # on the same examples, it is not blessed and not pushed, and the summary says which
    # thresholds failed and by how much.
    worse = ["--runner=DirectRunner", "--run_id=worse", f"--push_destination={serving}"]
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *worse])
    # (No InfraValidator: the Pusher's first reason not to push is the Evaluator's verdict.)
    assert cli.main(worse + ["--train_steps=1", "--no_tuner", "--no_infra_validator"]) == 0
    stages = _summary(os.path.join("pipeline_runs", "runs", "worse"))
    evaluation = stages["Evaluator"]
    assert evaluation["details"]["blessed"] is False
    # The store keeps absolute paths (the default pipeline root is relative).
    assert evaluation["details"]["baseline"] == os.path.abspath(os.path.join(run_dir, "model"))
    failed = {(f["metric"], f["slice"]) for f in evaluation["details"]["failures"]}
    # One step from random weights: 0.2 and 0.66 eval accuracy in 2 runs by hand, against
    # the first model's 0.97-1.0 (100 steps): the change threshold (not worse than the
    # baseline) fails by 0.3 or more; the 0.6 value threshold may or may not.
    assert ("sparse_categorical_accuracy vs baseline", "Overall") in failed
    assert "NOT blessed: " in evaluation["note"]
    assert "sparse_categorical_accuracy vs baseline on Overall = " in evaluation["note"]
    # Only the Overall slice blocks (the islands are reported, not judged).
    assert {s for _, s in failed} == {"Overall"}
    # By how much, for every failure: the change threshold's bound (1% below the
    # baseline's accuracy) minus the accuracy; the value threshold's 0.6 minus it.
    failures = evaluation["details"]["failures"]
    baseline_accuracy = _summary(run_dir)["Evaluator"]["details"]["metrics"]["Overall"][
        "sparse_categorical_accuracy"
    ]
    for f in failures:
        change = f["metric"].endswith(" vs baseline")
        bound = baseline_accuracy * 0.99 if change else 0.6
        assert f["by"] == pytest.approx(bound - f["value"]) and f["by"] > 0, f
    change = next(f for f in failures if f["metric"].endswith(" vs baseline"))
    assert f"the baseline's {baseline_accuracy:.4g} (higher is better)" in change["bound"]
    assert stages["Pusher"]["status"] == "skipped"
    assert stages["Pusher"]["note"].startswith("not pushed: the Evaluator did not bless it")
    assert sorted(os.listdir(serving)) == ["1"]

    # `runs show` says the same from the metadata store: the verdicts, and each failed
    # threshold with its value, bound and by how much it misses.
    capsys.readouterr()
    assert cli.main(["runs", "show", "worse", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)["model_checks"]
    assert checks["Evaluator"]["blessed"] is False
    assert checks["Evaluator"]["failures"] == evaluation["details"]["failures"]
    assert checks["Evaluator"]["note"] == evaluation["note"]
    assert checks["Pusher"]["pushed"] is False
    assert cli.main(["runs", "show", "worse"]) == 0
    shown = capsys.readouterr().out
    assert "Failed thresholds" in shown and "misses by" in shown
    failed_rows = shown.split("Failed thresholds", 1)[1].splitlines()
    # The change threshold's row: the candidate's value, by how much it misses the bound
    # (the value threshold's row shows the same value, with its own miss).
    row = next(line for line in failed_rows if f"{change['by']:.4g}" in line)
    assert "Overall" in row and f"{change['value']:.4g}" in row
    assert "NOT blessed:" in shown.split("Model checks", 1)[1]


# Debian's chromium package (see docs/development.md); the report's rendering is checked in it.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The chromium fixture (conftest.py): set up before the module-scoped runs it would waste.
needs_chromium = pytest.mark.usefixtures("chromium")


def _render_in_chromium(page: str, tmp_path, screenshot: str) -> tuple[str, list[str]]:
    """(the DOM after rendering, the page's console messages) of ``page`` in headless
    Chromium, which writes a screenshot of it to ``screenshot``. Console messages are what
    Chromium logs as CONSOLE on stderr: any console.log/error and uncaught exception."""
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--window-size=1280,3800",
            f"--screenshot={screenshot}",
            "--dump-dom",
            "file://" + page,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@needs_chromium
def test_the_report_renders_in_headless_chromium_without_console_errors(default_run, tmp_path):
    _, run_dir = default_run
    # The console check itself: a page with an error is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    _, console = _render_in_chromium(str(broken), tmp_path, str(tmp_path / "broken.png"))
    assert any("undefinedFunction is not defined" in line for line in console), console

    screenshot = tmp_path / "report.png"
    dom, console = _render_in_chromium(
        os.path.join(run_dir, "report.html"), tmp_path, str(screenshot)
    )
    assert console == []
    assert screenshot.stat().st_size > 50_000  # a page drawn, not a blank one (~230 KB)
    headings = re.findall(r"<h2>([^<]+)</h2>", dom)
    assert headings == [heading for _, heading in _report_sections(run_dir)]
    for name in PENGUIN_FEATURES:
        assert f'id="feature-{name}"' in dom
    # Plots as the browser parsed them: SVG elements with their bars, points and lines.
    assert dom.count('<svg class="bp-hist"') == 5 and dom.count("<rect ") >= 10 * 5
    assert dom.count('<svg class="bp-scatter"') == 3 and dom.count("<circle ") >= 4 * 3
    assert dom.count('<svg class="bp-curve"') >= 2 and "<polyline " in dom
    # No tick label under an axis title, no text cut at a plot's edge (titles overlapped
    # the y tick labels and were clipped).
    assert _layout_problems(os.path.join(run_dir, "report.html"), tmp_path) == []


@needs_chromium
def test_the_evaluation_plots_render_in_headless_chromium(plots_run, tmp_path):
    run_dir = plots_run
    screenshot = tmp_path / "plots.png"
    dom, console = _render_in_chromium(
        os.path.join(run_dir, "report.html"), tmp_path, str(screenshot)
    )
    assert console == []
    assert dom.count('<svg class="bp-matrix"') == 4 and dom.count('<svg class="bp-bars"') >= 2
    assert _layout_problems(os.path.join(run_dir, "report.html"), tmp_path) == []
