"""Data safety of a run directory: the summary, content-keyed caches, resume and refusal."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from conftest import PENGUIN_DIR

from beam_pipeline.config import DataConfig, PipelineConfig
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.summary import (
    SUMMARY_FILE,
    RunSummary,
    StageReport,
    StageStatus,
    write_summary,
)
from beam_pipeline.stages.graph import STAGE_GRAPH
from trainer import RESULT_FILE


def _summary(run_dir: str, *stages: str) -> RunSummary:
    return RunSummary(
        run_dir, [StageReport(s, StageStatus.OK, rows_out={"train": 2}) for s in stages]
    )


def test_summary_is_written_whole_and_an_empty_one_never_replaces_it(tmp_path):
    run_dir = str(tmp_path)
    path = write_summary(_summary(run_dir, "ExampleGen", "Statistics"))
    assert path == os.path.join(run_dir, SUMMARY_FILE)
    with open(path) as f:
        written = json.load(f)
    assert [s["stage"] for s in written["stages"]] == ["ExampleGen", "Statistics"]
    assert StageReport.from_json(written["stages"][0]).rows_out == {"train": 2}
    before = open(path, "rb").read()
    # A later attempt that failed before its first stage must not blank the summary.
    assert write_summary(RunSummary(run_dir), after_error=True) is None
    assert open(path, "rb").read() == before
    assert os.listdir(run_dir) == [SUMMARY_FILE]  # no temporary file left behind


def test_a_summary_that_cannot_be_written_never_hides_the_runs_own_error(tmp_path, caplog):
    run_dir = str(tmp_path)
    os.mkdir(os.path.join(run_dir, SUMMARY_FILE))  # the rename onto it fails, as a full disk
    with pytest.raises(PipelineError, match=r"summary\.json could not be written \(.*\); free"):
        write_summary(_summary(run_dir, "ExampleGen"))
    # After the run's error: logged only, so the caller re-raises its own error.
    assert write_summary(_summary(run_dir, "ExampleGen"), after_error=True) is None
    assert "could not be written" in caplog.text
    assert os.listdir(run_dir) == [SUMMARY_FILE]  # the temporary files were removed


def _fingerprint(data: str) -> str:
    from beam_pipeline.stages.example_gen.executor import check_data
    from transforms.example_gen import CsvFormat

    config = PipelineConfig(data=DataConfig(data=data, csv_null_values=("", "NA")))
    return check_data(config, CsvFormat(",", ("", "NA"))).fingerprint


def test_data_fingerprint_follows_the_content_not_path_size_or_mtime(tmp_path):
    # The analyzer cache's dataset key (and the run's identity) is this fingerprint.
    first = tmp_path / "a" / "penguins.csv"
    other = tmp_path / "b" / "copy.csv"
    for path in (first, other):
        path.parent.mkdir()
        shutil.copyfile(os.path.join(PENGUIN_DIR, "penguins.csv"), path)
    os.utime(other, (1_000_000_000, 1_000_000_000))
    assert _fingerprint(str(first)) == _fingerprint(str(other))  # a hit: same bytes

    # Changed in place with the same size and modification time (cp -p, a restore).
    before = os.stat(other)
    text = other.read_bytes()
    changed = text.replace(b"39.1,18.7,181,3750", b"91.3,18.7,181,3750", 1)
    assert changed != text and len(changed) == len(text)
    other.write_bytes(changed)
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(other)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert _fingerprint(str(other)) != _fingerprint(str(first))  # a miss


# ------------------------------------------------------------------ kill and resume

TRAIN_STEPS = 120
CHECKPOINT_EVERY = 30
# A TrainSpec that checkpoints every CHECKPOINT_EVERY steps (a kill lands between them).
_RESUMABLE_MODULE = f"""
from beam_pipeline.examples.penguin.penguin_module import PenguinSpec, preprocessing_fn  # noqa


class ResumableSpec(PenguinSpec):
    checkpoint_every = {CHECKPOINT_EVERY}
"""
# |resumed - uninterrupted| eval accuracy (5 eval batches, the same data and transform):
# 0.0, 0.0 and 0.02 in 3 runs (the first at 240 steps); the tolerance, about 5 of the 105
# eval examples, keeps a margin for a resume that sees the batches in another order.
ACCURACY_TOLERANCE = 0.05


def _cli_args(root: str, module: str) -> list[str]:
    return [
        "--runner=DirectRunner",
        f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        "--trainer_entry_point=ResumableSpec",
        f"--train_steps={TRAIN_STEPS}",
        "--no_tuner",
        # The model checks after the Trainer are not what this file tests (test_evaluator).
        "--no_evaluator",
        "--no_infra_validator",
        f"--pipeline_root={root}",
        "--run_id=killed",
    ]


def _launch(args: list[str], log_dir: str):
    """``python -m beam_pipeline ARGS`` in a process of its own (its own process group: the
    kill takes Beam's workers too), forked with the ML stack imported (tests/forked_launch.py):
    what is tested is a killed run and its rerun, not a fresh interpreter's start."""
    import forked_launch
    from conftest import REPO

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return forked_launch.launch_cli(args, REPO, env, log_dir)


def _kill_group_when(proc, ready, what: str) -> None:
    """SIGKILLs the CLI's whole process group as soon as ``ready()`` is true."""
    import signal
    import time

    deadline = time.time() + 600
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"ended before {what}: {proc.stderr[-3000:]}")
        assert time.time() < deadline, f"no {what} within 600 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)


def _staging(run: str, artifact: str):
    import glob

    return lambda: bool(glob.glob(os.path.join(run, ".staging", f"{artifact}-*")))


def _published(run: str) -> dict[str, int]:
    """Published artifact -> the mtime of its marker (a republished one gets a new one)."""
    out = {}
    for name in sorted(os.listdir(run)) if os.path.isdir(run) else []:
        marker = os.path.join(run, name, "_PUBLISHED")
        if os.path.exists(marker):
            out[name] = os.stat(marker).st_mtime_ns
    return out


def _checkpoint_step(run: str) -> int:
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(os.path.join(run, "model_run", "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """One run killed during each stage in turn, each time rerun with the same --run_id."""
    import time

    tmp = tmp_path_factory.mktemp("killed")
    module = tmp / "resumable_module.py"
    module.write_text(_RESUMABLE_MODULE)
    root = str(tmp / "root")
    run = os.path.join(root, "runs", "killed")
    args = _cli_args(root, str(module))
    seen = {"launch_seconds": []}

    def attempt(ready, what):
        started = time.time()
        _kill_group_when(_launch(args, str(tmp / "launches")), ready, what)
        seen["launch_seconds"].append(round(time.time() - started, 1))
        seen[what] = _published(run)

    data_phase = ("examples", "rejected", "statistics", "schema", "anomalies")
    attempt(_staging(run, "examples"), "data")
    attempt(_staging(run, "transform_graph"), "transform")
    # Killed once a checkpoint is written (training goes on past it).
    checkpoint = os.path.join(run, "model_run", "checkpoints", "checkpoint")
    attempt(lambda: os.path.exists(checkpoint), "training")
    seen["killed_at_step"] = _checkpoint_step(run)
    seen["result_after_kill"] = os.path.exists(os.path.join(run, "model_run", RESULT_FILE))
    # Killed while the SavedModel is being written, after the last training step.
    export = os.path.join(run, "model_run", "export")
    attempt(lambda: os.path.exists(export), "export")
    seen["step_at_export"] = _checkpoint_step(run)

    # The last attempt runs to the end; in this process, which has TensorFlow imported.
    from beam_pipeline import cli

    started = time.time()
    assert cli.main(args) == 0
    seen["launch_seconds"].append(round(time.time() - started, 1))
    seen["final"] = _published(run)
    seen["data_phase"] = data_phase
    seen["run"], seen["args"], seen["module"] = run, args, module
    with open(os.path.join(run, SUMMARY_FILE)) as f:
        seen["summary"] = {s["stage"]: s for s in json.load(f)["stages"]}
    print("kill-and-resume launches (s):", seen["launch_seconds"])
    seen["uninterrupted"] = _train_uninterrupted(run, str(tmp / "reference"), str(module))
    return seen


def _train_uninterrupted(run: str, root: str, module: str) -> dict:
    """The same training on a copy of the run's data artifacts, never interrupted."""
    import conftest_trainer

    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.stages.trainer.training import build_training_job
    from trainer import run_trainer

    source = RunDirectory(os.path.dirname(os.path.dirname(run)), os.path.basename(run))
    copy = conftest_trainer.copy_run_dir(source, root, "uninterrupted")
    config = conftest_trainer.penguin_config(module, train_steps=TRAIN_STEPS)
    job = build_training_job(config, copy, entry_point="ResumableSpec")
    result = run_trainer(job)
    assert (result.start_step, result.final_step) == (0, TRAIN_STEPS) and not result.reused
    # Run again once finished: nothing is redone (the SavedModel is not even rewritten).
    saved_model = os.path.join(result.serving_model_dir, "saved_model.pb")
    mtime = os.stat(saved_model).st_mtime_ns
    again = run_trainer(job)
    assert again.reused and (again.start_step, again.final_step) == (0, TRAIN_STEPS)
    assert again.metrics == result.metrics
    assert os.stat(saved_model).st_mtime_ns == mtime
    return dict(result.metrics)


# The rows of the killed run's last attempt that its flags decide.
_DECIDED = {
    "ExampleGen": "cached",
    "Statistics": "cached",
    "Schema": "cached",
    "Validation": "cached",
    "Transform": "cached",
    "Tuner": "skipped",
    "Trainer": "ok",
    "Evaluator": "skipped",  # --no_evaluator --no_infra_validator: nothing to push
    "InfraValidator": "skipped",
    "Pusher": "skipped",
    "BulkInferrer": "skipped",
}


@pytest.mark.slow
def test_each_kill_keeps_what_was_published_and_the_rerun_finishes(killed_run):
    seen, data_phase = killed_run, killed_run["data_phase"]
    assert seen["data"] == {}  # killed in the data stage: nothing published
    assert sorted(seen["transform"]) == sorted(data_phase)
    # Each later attempt kept (did not republish) what the one before had published.
    for before, after in (("transform", "training"), ("training", "export")):
        assert {a: seen[after][a] for a in seen[before]} == seen[before]
    assert "transform_graph" in seen["training"] and "model" not in seen["training"]
    assert "model" not in seen["export"] and "model_run" not in seen["export"]
    assert {a: seen["final"][a] for a in seen["export"]} == seen["export"]
    assert {"model", "model_run"} <= set(seen["final"])
    statuses = {stage: s["status"] for stage, s in seen["summary"].items()}
    # Every stage of the graph has its row (the first one two); those this run's flags
    # decide:
    assert list(statuses) == ["ExampleGen", "Statistics", *(s.name for s in STAGE_GRAPH[1:])]
    assert {stage: statuses[stage] for stage in _DECIDED} == _DECIDED
    assert not os.path.exists(os.path.join(seen["run"], ".staging"))


@pytest.mark.slow
def test_each_killed_execution_is_abandoned_in_the_metadata_store(killed_run):
    """A kill leaves the stage it interrupted recorded as running, never complete; the
    attempt after it records that execution abandoned (with why), then records the stage
    again and completes it."""
    from beam_pipeline.metadata import ExecutionStatus, MetadataStore, RunStatus

    root = os.path.dirname(os.path.dirname(killed_run["run"]))
    with MetadataStore.for_pipeline_root(str(root)) as store:
        (run,) = store.list_runs()
        executions = store.run_executions("killed")
    by_stage: dict[str, list[str]] = {}
    for execution in executions:
        by_stage.setdefault(execution.stage, []).append(execution.status.value)
    killed = {
        "ExampleGen+Statistics": ["abandoned", "complete"],  # killed in the data stage
        "Transform": ["abandoned", "complete"],  # killed in Transform
        "Trainer": ["abandoned", "abandoned", "complete"],  # killed in training, in export
    }
    # Every other stage once, complete (a skipped one is recorded too).
    assert by_stage == {s.name: killed.get(s.name, ["complete"]) for s in STAGE_GRAPH}
    abandoned = [e for e in executions if e.status is ExecutionStatus.ABANDONED]
    assert len(abandoned) == 4
    assert all(e.end_time is not None and e.outputs == {} for e in abandoned)
    assert all(e.error.startswith("its launcher stopped during it") for e in abandoned)
    assert (run.run_id, run.status) == ("killed", RunStatus.COMPLETE)


@pytest.mark.slow
def test_training_resumed_from_its_checkpoint_to_an_uninterrupted_runs_quality(killed_run):
    import tensorflow as tf

    trainer = killed_run["summary"]["Trainer"]["details"]
    # Killed (SIGKILL, as a preempted worker) once a checkpoint was on disk: at a
    # checkpoint's step, with no training result written.
    assert 0 < killed_run["killed_at_step"] < TRAIN_STEPS
    assert killed_run["killed_at_step"] % CHECKPOINT_EVERY == 0
    assert killed_run["result_after_kill"] is False
    assert killed_run["step_at_export"] == TRAIN_STEPS
    # The last attempt restored the checkpoint the export-time kill left: no step redone.
    assert trainer["start_step"] == TRAIN_STEPS > 0 and trainer["final_step"] == TRAIN_STEPS
    # The attempt killed during export had resumed where the training-time kill left off:
    # TensorBoard's per-attempt event files start at that checkpoint's epoch.
    logs = os.path.join(killed_run["run"], "model_run", "train")
    firsts = []
    for name in sorted(os.listdir(logs)):
        steps = [
            e.step
            for r in tf.data.TFRecordDataset(os.path.join(logs, name))
            for e in [tf.compat.v1.Event.FromString(r.numpy())]
            if any(v.tag == "epoch_loss" for v in e.summary.value)
        ]
        firsts.append(min(steps) if steps else None)
    # (An attempt killed before its first epoch ended logged none; the last one trained
    # no step, so logged none.)
    logged = [f for f in firsts if f is not None]
    assert logged[-1] == killed_run["killed_at_step"] // CHECKPOINT_EVERY >= 1, firsts
    resumed = trainer["metrics"]["sparse_categorical_accuracy"]
    uninterrupted = killed_run["uninterrupted"]["sparse_categorical_accuracy"]
    print(f"eval accuracy: resumed {resumed:.4f}, uninterrupted {uninterrupted:.4f}")
    assert abs(resumed - uninterrupted) <= ACCURACY_TOLERANCE, (resumed, uninterrupted)


def _tree(run: str) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, files in os.walk(run):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), run)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, edit, match",
    [
        ("--train_steps=241", None, r"the trainer setting 'train_steps' differs"),
        ("--data", (b"39.1,18.7", b"39.2,18.7"), r"the input data's content .* differs"),
        ("--module_file", (b"every = ", b"every="), r"the module file's content differs"),
        ("--split_buckets=train=3,eval=1", None, r"ExampleGen's settings differs"),
    ],
    ids=["flag", "data", "module", "data-setting"],
)
def test_a_rerun_with_other_inputs_is_refused_and_touches_nothing(
    killed_run, tmp_path, capsys, flag, edit, match
):
    from beam_pipeline import cli
    from beam_pipeline.core.errors import EXIT_USER_ERROR

    before = _tree(killed_run["run"])
    summary = open(os.path.join(killed_run["run"], SUMMARY_FILE), "rb").read()
    if edit:  # the same file name, other content
        source = {"--data": os.path.join(PENGUIN_DIR, "penguins.csv")}.get(
            flag, str(killed_run["module"])
        )
        data = open(source, "rb").read()
        assert edit[0] in data
        changed = tmp_path / os.path.basename(source)
        changed.write_bytes(data.replace(*edit, 1))
        flag = f"{flag}={changed}"
    args = [*killed_run["args"], flag]
    assert cli.main(args) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Run directory ") and len(err.splitlines()) == 1, err
    assert re.search(match, err) and "pass a new --run_id" in err, err
    assert _tree(killed_run["run"]) == before
    assert open(os.path.join(killed_run["run"], SUMMARY_FILE), "rb").read() == summary


@pytest.mark.slow
def test_a_finished_run_rerun_with_the_same_content_elsewhere_keeps_every_stage(
    killed_run, tmp_path
):
    from beam_pipeline import cli

    # The same bytes under another name and time: the identity is the content.
    copy = tmp_path / "copy.csv"
    copy.write_bytes(open(os.path.join(PENGUIN_DIR, "penguins.csv"), "rb").read())
    os.utime(copy, (1_000_000_000, 1_000_000_000))
    published = _published(killed_run["run"])
    assert cli.main([*killed_run["args"], f"--data={copy}"]) == 0
    assert _published(killed_run["run"]) == published
    with open(os.path.join(killed_run["run"], SUMMARY_FILE)) as f:
        statuses = {s["stage"]: s["status"] for s in json.load(f)["stages"]}
    assert set(statuses.values()) == {"cached", "skipped"} and statuses["Trainer"] == "cached"


def test_a_staging_folder_that_cannot_be_deleted_is_logged_not_raised(
    tmp_path, monkeypatch, caplog
):
    """A failed stage discards its staging folder while its own error propagates: a
    delete that fails (a process still writing there) must not replace that error."""
    from beam_pipeline.core import fileio
    from beam_pipeline.core.types import Artifact
    from beam_pipeline.engine.run_dir import RunDirectory

    run_dir = RunDirectory(str(tmp_path), "r1")
    staging = run_dir.new_staging(Artifact.TUNER)

    def refuse(path):  # what rmtree raised while a trial still wrote there
        raise OSError(39, "Directory not empty", path)

    monkeypatch.setattr(fileio, "rmtree", refuse)
    run_dir.discard(staging)
    assert os.path.isdir(staging)
    assert f"Could not delete {staging} ([Errno 39] Directory not empty" in caplog.text
    monkeypatch.undo()
    run_dir.remove_staging()  # the run's end tries again
    assert not os.path.exists(os.path.dirname(staging))
