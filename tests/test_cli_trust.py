"""What a new user can trust, through ``python -m beam_pipeline`` as users run it: no silent
fallback, a terminal that shows only the CLI's own output, and errors that name the fix.

Each test runs the CLI in a process of its own (conftest.forked_cli: a fork of the warm
fork server, with its own descriptors 1 and 2: the module's own output and the log's
redirection are what is tested) and asserts the phrase that names the fix; the installed
``beam-pipeline`` script, whose own start is tested, runs as a fresh process. The runs
share one pipeline root per module, so the data stages of the bundled penguin data run
once and later runs reuse them from the metadata store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import PENGUIN_DIR, REPO, TESTDATA, forked_cli, one_sentence

from beam_pipeline.core.errors import EXIT_USER_ERROR

pytestmark = pytest.mark.slow

PENGUIN_CSV = os.path.join(PENGUIN_DIR, "penguins.csv")
PENGUIN_MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")
TFX_DIR = os.path.join(TESTDATA, "penguin_tfx")
ANSI = re.compile(r"\x1b\[")
# The bundled data's flags, without the model checks (each test asks for what it checks).
FAST = ["--no_progress", "--no_evaluator", "--no_infra_validator"]


def _cli(*args: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    return forked_cli(args, cwd=cwd)


def _penguin_source() -> str:
    with open(PENGUIN_MODULE) as f:
        return f.read()


def _data_only_source(extra: str) -> str:
    """The bundled module up to its run_fn (preprocessing_fn and helpers), then ``extra``."""
    source = _penguin_source()
    return source[: source.index("def run_fn(")] + extra


def _write(folder, name: str, text: str) -> str:
    path = os.path.join(str(folder), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("trust"))


# 1. No silent fallback.


def test_a_misspelled_run_fn_is_named_before_any_job(tmp_path):
    module = _write(tmp_path, "m.py", _data_only_source("def run_function(fn_args):\n    pass\n"))
    # In tmp_path, without --pipeline_root: the default root (pipeline_runs/) would be there.
    proc = _cli(
        f"--data={PENGUIN_CSV}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        "--no_progress",
        cwd=str(tmp_path),
    )
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    sentence = one_sentence(proc.stderr)
    assert "defines run_function() but no run_fn; did you mean run_fn?" in sentence
    assert "--trainer_entry_point=run_function" in sentence
    assert sorted(os.listdir(tmp_path)) == ["m.py"]  # nothing written


def test_a_module_file_without_data_is_an_error_naming_data(tmp_path):
    module = _write(tmp_path, "my_module.py", _data_only_source(""))
    proc = _cli(f"--module_file={module}", cwd=str(tmp_path))
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    sentence = one_sentence(proc.stderr)
    assert "without --data" in sentence and "pass --data=" in sentence
    assert sorted(os.listdir(tmp_path)) == ["my_module.py"]  # nothing ran on the penguins


def test_a_module_with_nothing_to_train_skips_the_tuner_and_says_what_ran(tmp_path, root):
    tuner_fn = "def tuner_fn(fn_args):\n    raise AssertionError('the Tuner must not run')\n"
    module = _write(tmp_path, "data_only.py", _data_only_source(tuner_fn))
    proc = _cli(
        f"--data={PENGUIN_CSV}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        "--run_id=data_only",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    stages = _summary(root, "data_only")
    assert stages["Transform"]["status"] in ("ok", "cached")
    assert stages["Tuner"]["status"] == "skipped"
    assert (
        "defines no run_fn or TrainSpec subclass, so there is no model to tune"
        in (stages["Tuner"]["note"])
    )
    note = stages["Trainer"]["note"]
    assert "the data stages and Transform ran; nothing was tuned, trained" in note, note
    assert "only the data stages ran" not in proc.stdout
    # 5. One sentence per split, train first, and no ".;" (the split order and punctuation).
    assert "Validation: Split 'train': no anomalies; Split 'eval': no anomalies\n" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if re.match(r"(ExampleGen|Transform) ", line)]
    assert rows and all(r.index("train=") < r.index("eval=") for r in rows), rows


def _fails_once_source() -> str:
    """The bundled module whose first attempt stops after its second epoch (its Keras
    backup then holds 2 epochs); a rerun of the run id resumes from that backup."""
    source = _penguin_source()
    callback = 'keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),'
    assert callback in source
    source = source.replace(
        callback, callback + "\n                _StopOnce(fn_args.model_run_dir),"
    )
    return source + (
        "\n\nclass _StopOnce(keras.callbacks.Callback):\n"
        "    def __init__(self, folder):\n"
        "        super().__init__()\n"
        "        self.marker = os.path.join(folder, 'stopped_once')\n"
        "\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        "        if epoch == 1 and not os.path.exists(self.marker):\n"
        "            open(self.marker, 'w').close()\n"
        "            raise RuntimeError('stopped once after epoch 2')\n"
    )


def test_a_failing_run_fn_is_one_sentence_and_its_rerun_says_where_it_resumed(tmp_path, root):
    module = _write(tmp_path, "fails_once.py", _fails_once_source())
    args = [
        f"--data={PENGUIN_CSV}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        "--run_id=resumed",
        # 3 epochs of 1 step (the bundled module's _epochs): the first attempt stops
        # after the second, the rerun trains the third.
        "--train_steps=3",
        "--eval_steps=1",
        "--no_tuner",
        "--no_infra_validator",
        "--no_progress",
    ]
    failed = _cli(*args)
    assert failed.returncode == EXIT_USER_ERROR, failed.stderr
    # 2. The sentence is the whole of stderr; the traceback is in run.log.
    assert failed.stderr.startswith("error: run_fn in "), failed.stderr
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert "RuntimeError (stopped once after epoch 2)" in failed.stderr
    assert "Traceback" not in failed.stderr and "ERROR" not in failed.stderr
    with open(os.path.join(root, "runs", "resumed", "run.log")) as f:
        log = f.read()
    assert "Traceback" in log and "stopped once after epoch 2" in log

    resumed = _cli(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr == ""
    backup = os.path.join(root, "runs", "resumed", "model_run", "backup")
    line = next(x for x in resumed.stdout.splitlines() if x.startswith("Trainer: "))
    assert f"resumed after epoch 2 from {backup}" in line, line
    trainer = _summary(root, "resumed")["Trainer"]["details"]
    assert trainer["start_epoch"] == 2 and trainer["resumed_from"] == backup

    # 3. The same pipeline again: every stage reused. The Evaluator's reused verdict does
    # not say "no blessed model yet" (the resumed run's model has a verdict now), and the
    # Pusher's reused decision is "cached" in the summary as in `runs show`.
    again = _cli(*[a if a != "--run_id=resumed" else "--run_id=again" for a in args])
    assert again.returncode == 0, again.stderr
    stages = _summary(root, "again")
    evaluator, pusher = stages["Evaluator"], stages["Pusher"]
    assert evaluator["status"] == "cached", evaluator
    assert "no blessed model yet" not in evaluator["note"]
    assert "no model was blessed before it" in evaluator["note"], evaluator["note"]
    assert pusher["status"] == "cached" and pusher["note"].startswith("reused from run resumed")
    shown = _cli("runs", "show", "again", f"--pipeline_root={root}")
    assert shown.returncode == 0, shown.stderr
    executions = shown.stdout.split("Parameters", 1)[0]  # the Executions table
    (row,) = [line for line in executions.splitlines() if "│ Pusher " in line]
    assert "cached (from run resumed)" in row, row
    checks = shown.stdout.split("Model checks", 1)[1]
    (row,) = [line for line in checks.splitlines() if "│ Pusher " in line]
    assert "│ cached " in row, row


# 2. The module's own output goes to run.log: TFX's penguin module (Keras's progress bars
# with ANSI codes from model.fit's default verbose, in the tuner's trials and in training),
# every stage run.


def test_a_tfx_module_prints_nothing_of_its_own_on_the_terminal(tmp_path):
    root = str(tmp_path / "tfx")
    proc = _cli(
        f"--data={os.path.join(TFX_DIR, 'penguins_processed.csv')}",
        f"--module_file={os.path.join(TFX_DIR, 'penguin_utils_keras3.py')}",
        f"--pipeline_root={root}",
        "--run_id=tfx",
        "--tuner_max_trials=1",
        "--tuner_train_steps=2",
        "--tuner_eval_steps=1",
        "--train_steps=2",
        "--eval_steps=1",
        "--no_progress",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert not ANSI.search(proc.stdout), proc.stdout[:2000]
    assert proc.stdout.startswith("Run directory: "), proc.stdout[:2000]
    stages = _summary(root, "tfx")
    assert stages["Tuner"]["status"] == "ok" and stages["Trainer"]["status"] == "ok"
    with open(os.path.join(root, "runs", "tfx", "run.log"), errors="replace") as f:
        assert ANSI.search(f.read())  # Keras's progress bars: kept in the log
    # 3. TFX's module exports its own model, which records no label: the Evaluator skips
    # it, and the Pusher gives that reason, not --no_evaluator.
    assert stages["Evaluator"]["status"] == "skipped"
    pusher = stages["Pusher"]["note"]
    assert "not pushed: the Evaluator did not evaluate it: the model records no label" in pusher
    assert "--no_evaluator" not in pusher


# 3. Errors that name the real fix.


def test_a_keras_model_save_names_the_saved_model_export(tmp_path, root):
    source = _penguin_source()
    anchor = "        warm_start(model, fn_args.base_model)\n"
    assert anchor in source
    source = source.replace(
        anchor, anchor + '    model.save(fn_args.serving_model_dir, save_format="tf")\n'
    )
    module = _write(tmp_path, "saves.py", source)
    proc = _cli(
        f"--data={PENGUIN_CSV}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        "--run_id=saves",
        "--train_steps=2",
        "--eval_steps=1",
        "--no_tuner",
        *FAST,
    )
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert "tf.saved_model.save(model, fn_args.serving_model_dir)" in proc.stderr
    assert "model.export(fn_args.serving_model_dir)" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize(
    "flag, phrase",
    [
        (
            "--runner=DirectRuner",
            "--runner=DirectRuner is not a runner Beam knows; did you mean --runner=DirectRunner?",
        ),
        ("--modul_file=m.py", "Unknown flag '--modul_file=m.py'"),
    ],
)
def test_a_misspelled_runner_or_flag_names_the_closest_known_one(tmp_path, flag, phrase):
    proc = _cli(flag, "--no_progress", cwd=str(tmp_path))
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    sentence = one_sentence(proc.stderr)
    assert phrase in sentence, sentence
    if flag.startswith("--modul_file"):
        assert "did you mean --module_file? Else check its spelling" in sentence


def test_a_data_folder_with_other_files_suggests_a_glob(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.csv").write_text("x,y\n1,2\n")
    (folder / "README.md").write_text("# my data\n")
    proc = _cli(f"--data={folder}/", "--no_progress", cwd=str(tmp_path))
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    sentence = one_sentence(proc.stderr)
    assert f"--data '{folder}/*.csv'" in sentence, sentence
    assert "--data_format" not in sentence
    assert sorted(os.listdir(tmp_path)) == ["folder"]  # nothing written


def test_beam_options_in_a_config_file_are_passed_to_beam(tmp_path):
    config = tmp_path / "pipeline.yaml"
    # Beam's options are accepted: the run gets as far as its data (which is missing).
    config.write_text(
        f"data: {tmp_path / 'none.csv'}\nrunner: DirectRunner\ndirect_running_mode: in_memory\n"
    )
    proc = _cli(f"--config={config}", "--no_progress", cwd=str(tmp_path))
    assert proc.returncode == EXIT_USER_ERROR and "matches no file" in proc.stderr, proc.stderr
    # They reach Beam: a runner Beam does not know is named as one.
    config.write_text(f"data: {tmp_path / 'none.csv'}\nrunner: DirectRuner\n")
    proc = _cli(f"--config={config}", "--no_progress", cwd=str(tmp_path))
    assert "did you mean --runner=DirectRunner?" in proc.stderr, proc.stderr
    # A setting neither has is named with the closest one.
    config.write_text(f"data: {tmp_path / 'none.csv'}\nrunnr: DirectRunner\n")
    proc = _cli(f"--config={config}", "--no_progress", cwd=str(tmp_path))
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert "setting 'runnr', which is neither a beam_pipeline setting nor a Beam pipeline " in (
        proc.stderr
    )
    assert "did you mean 'runner'?" in proc.stderr


def test_a_slice_feature_that_is_no_feature_stops_the_run_before_transform(root):
    proc = _cli(
        f"--pipeline_root={root}",
        "--run_id=bad_slice",
        "--eval_slice_features=islnd",
        "--no_progress",
    )
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert "--eval_slice_features names 'islnd'" in proc.stderr
    assert "did you mean 'island'?" in proc.stderr
    stages = _summary(root, "bad_slice")
    assert "Schema" in stages and "Transform" not in stages, list(stages)


# 4. The command line itself.


def _help_entries(text: str) -> dict[str, str]:
    """--help's options: flag -> its help text (argparse puts it beside or under it)."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        match = re.match(r"^  (-\S+(?:, --\S+)?)(?: \S+)?(?:\s{2,}(.*))?$", line)
        if match and not line.startswith("   "):
            flag = match.group(1).split(", ")[-1]
            entries[flag] = match.group(2) or ""
        elif flag and line.startswith("    ") and line.strip():
            entries[flag] = (entries[flag] + " " + line.strip()).strip()
        elif not line.strip():
            flag = None
    return entries


def test_help_lists_the_runs_commands_and_every_flag_with_help_and_default(tmp_path):
    proc = _cli("--help", cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = proc.stdout
    assert "runs {list,show,lineage,diff,report}" in text
    assert "list | show RUN | lineage URI | diff RUN_A RUN_B | report RUN" in " ".join(text.split())
    entries = _help_entries(text)
    assert len(entries) > 50, entries
    assert not [flag for flag, help_text in entries.items() if not help_text]
    for flag, default in [
        ("--train_steps", "(default 100)"),
        ("--eval_steps", "(default 5)"),
        ("--tuner_train_steps", "(default 20)"),
        ("--tuner_parallel_trials", "(default 2)"),
    ]:
        assert default in entries[flag], (flag, entries[flag])
    assert "Do not train" in entries["--no_trainer"]
    version = _cli("--version", cwd=str(tmp_path))
    assert version.returncode == 0 and re.fullmatch(r"beam-pipeline \d+\.\d+\S*\n", version.stdout)


def test_the_installed_command_names_itself_in_its_usage(tmp_path):
    command = os.path.join(os.path.dirname(sys.executable), "beam-pipeline")
    for argv in (["--help"], ["runs", "--help"]):
        proc = subprocess.run(
            [command, *argv], capture_output=True, text=True, cwd=str(tmp_path), timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: beam-pipeline "), proc.stdout[:200]
        assert "python -m" not in proc.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A store holding three runs made through its API over real artifacts (a schema and
    statistics on disk): a and b alike, c with a failed Trainer; the Evaluator of a
    blessed its model and its Pusher pushed it."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from beam_pipeline.engine.history_entry import HISTORY_COLUMNS, declared_columns
    from beam_pipeline.engine.summary import StageReport, StageStatus
    from beam_pipeline.metadata import ArtifactSpec, MetadataStore, RunStatus
    from beam_pipeline.stages.graph import STAGE_GRAPH

    stages = {stage.name: stage for stage in STAGE_GRAPH}
    root = tmp_path_factory.mktemp("recorded")
    run_dir = root / "runs" / "a-run-directory-with-a-long-name-20261126-101052-9f8660"
    (run_dir / "schema").mkdir(parents=True)
    with open(os.path.join(TESTDATA, "schema_penguins.pbtxt")) as f:
        (run_dir / "schema" / "schema.pbtxt").write_text(f.read())
    with open(os.path.join(TESTDATA, "stats_small.pbtxt")) as f:
        stats = text_format.Parse(f.read(), statistics_pb2.DatasetFeatureStatisticsList())
    (run_dir / "statistics" / "train").mkdir(parents=True)
    (run_dir / "statistics" / "train" / "FeatureStats.pb").write_bytes(stats.SerializeToString())
    with MetadataStore.for_pipeline_root(str(root)) as store:
        for run_id in ("a", "b", "c"):
            # As the runner records them: the graph's history columns with the run, and
            # what each stage shows in the history with its execution.
            run = store.start_run(
                run_id,
                properties={
                    "data": "d" * 64,
                    "module": "m" * 64,
                    HISTORY_COLUMNS: declared_columns(STAGE_GRAPH),
                },
            )
            data = store.begin_execution(run, "ExampleGen+Statistics", {"splits": 2}, "k1", {})
            stats_spec = ArtifactSpec(str(run_dir / "statistics"), "Statistics")
            store.publish_outputs(data, {"Statistics": stats_spec})
            store.complete_execution(data)
            made = store.begin_execution(run, "Schema", {"infer": True}, "k2", {})
            store.publish_outputs(made, {"Schema": ArtifactSpec(str(run_dir / "schema"), "Schema")})
            store.complete_execution(made)
            trainer = store.begin_execution(run, "Trainer", {"trainer": {"steps": 10}}, "k3", {})
            if run_id == "c":
                store.fail_execution(
                    trainer, "run_fn in m.py:3 raised ValueError (bad); fix the module file."
                )
                store.finish_run(run, RunStatus.FAILED)
                continue
            for stage, details in [
                ("Trainer", {"metrics": {"loss": 0.5}}),
                ("Evaluator", {"blessed": True}),
                ("Pusher", {"pushed": True}),
            ]:
                row = StageReport(stage, StageStatus.OK, details=details)
                shown = stages[stage].history([row]).to_json()
                properties = {"reports": [row.to_json()], "history": shown}
                if stage == "Trainer":
                    store.complete_execution(trainer, properties=properties)
                    continue
                check = store.begin_execution(run, stage, {}, f"k-{stage}", {})
                store.complete_execution(check, properties=properties)
            store.finish_run(run, RunStatus.COMPLETE)
    return str(root), str(run_dir)


def _runs_cli(*argv: str) -> subprocess.CompletedProcess:
    return forked_cli(["runs", *argv], env=dict(os.environ, COLUMNS="100"), timeout=120)


def test_runs_show_fits_100_columns_with_whole_paths_and_a_failed_executions_error(recorded):
    root, run_dir = recorded
    proc = _runs_cli("show", "a", f"--pipeline_root={root}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert f"Artifacts under {run_dir}" in lines
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 100 for line in table), max(table, key=len)
    rows = "\n".join(table)
    assert "│ schema " in rows and "│ statistics " in rows  # each path whole, under it
    failed = _runs_cli("show", "c", f"--pipeline_root={root}")
    assert failed.returncode == 0, failed.stderr
    assert (
        "Error of #" in failed.stdout
        and "Trainer (failed): run_fn in m.py:3 raised ValueError (bad); fix the module file."
        in " ".join(failed.stdout.split())
    ), failed.stdout


def test_runs_list_limits_and_shows_blessed_and_pushed(recorded):
    root, _ = recorded
    proc = _runs_cli("list", f"--pipeline_root={root}", "--limit", "2")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "blessed" in proc.stdout and "pushed" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if re.match(r"│ [abc] ", line)]
    assert [r.split()[1] for r in rows] == ["c", "b"], proc.stdout  # newest first, 2 of 3
    cells = [c.strip() for c in rows[1].split("│")]
    # b: blessed and pushed (the Evaluator's metrics, "evaluation", between them)
    assert (cells[5], cells[7]) == ("yes", "yes"), cells
    listed = _runs_cli("list", f"--pipeline_root={root}", "--json")
    by_run = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert (by_run["a"]["blessed"], by_run["a"]["pushed"]) == (True, True)
    assert (by_run["c"]["blessed"], by_run["c"]["pushed"]) == (None, None)


def test_runs_diff_of_identical_runs_says_identical(recorded):
    root, _ = recorded
    proc = _runs_cli("diff", "a", "b", f"--pipeline_root={root}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Runs a and b are identical" in proc.stdout
    assert "Numeric features" not in proc.stdout  # no table of zeros
    other = _runs_cli("diff", "a", "c", f"--pipeline_root={root}")
    assert other.returncode == 0 and "identical" not in other.stdout
