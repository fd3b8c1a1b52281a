"""The Trainer stage on Beam: DirectRunner end to end, and the Dataflow job graph offline."""

from __future__ import annotations

import os
import re
import shutil

import conftest_trainer
import keras
import pytest

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import stage_module_file
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
from beam_pipeline.stages.trainer.training import build_training_job, run_training_stage
from trainer import RESULT_FILE, run_trainer
from transforms.trainer import TrainModel

penguin_run_dir = conftest_trainer.penguin_run_dir

# 100 steps of the bundled run_fn, seeded (the `trained` fixture). Measured unseeded on this
# machine over 6 runs (1 replica, 5 eval batches of 10): logged eval accuracy 0.96-1.0,
# served accuracy on the 115 eval rows 0.974-1.0; the margin is 3 examples of 50.
ACCURACY_FLOOR = 0.9
ACCELERATOR = "type:nvidia-l4;count:1;install-nvidia-driver"
ACCELERATOR_URN = "beam:resources:accelerator:v1"
MIN_RAM_URN = "beam:resources:min_ram_bytes:v1"


@pytest.fixture(scope="module")
def trained(penguin_run_dir, tmp_path_factory):
    """The Trainer stage run once on the DirectRunner (bundled run_fn, 100 steps)."""
    root = str(tmp_path_factory.mktemp("stage") / "root")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, root)
    config = conftest_trainer.penguin_config(
        train_steps=100, eval_steps=5, accelerator=ACCELERATOR, min_ram="2GB"
    )
    options = parse_beam_args(["--runner=DirectRunner"])
    # Initializers and the data accessor's shuffle seeded (the training runs in this
    # process on the in_memory DirectRunner); op determinism stays off, as it is global.
    keras.utils.set_random_seed(0)
    return config, run_dir, options, run_training_stage(config, run_dir, options)


@pytest.mark.slow
def test_stage_trains_and_publishes(trained):
    _, run_dir, _, report = trained
    model = run_dir.path(Artifact.MODEL)
    assert report.status is StageStatus.OK and report.artifact == model
    assert report.note.startswith("validation loss=")
    assert "sparse_categorical_accuracy=" in report.note
    assert report.note.endswith(f"model: {model}")
    assert report.details["num_replicas"] == 1
    assert report.details["metrics"]["sparse_categorical_accuracy"] >= ACCURACY_FLOOR
    assert report.details["counters"]["trainer.jobs"] == 1
    assert run_dir.is_published(Artifact.MODEL) and run_dir.is_published(Artifact.MODEL_RUN)
    model_run = run_dir.path(Artifact.MODEL_RUN)
    assert {"train", "validation", "backup", RESULT_FILE, PUBLISHED_MARKER} <= set(
        os.listdir(model_run)
    )
    assert not os.path.exists(os.path.join(model_run, "export"))  # moved to model/


@pytest.mark.slow
def test_exported_model_classifies_raw_examples(trained):
    # model/ alone, through its serving signature, on the raw eval split. (In this process:
    # test_cli_runs.py loads a Trainer stage's model/ in a fresh process, the default run's.)
    # The run's transform graph moved away: the model carries the tables and assets of the
    # one it applies.
    _, run_dir, _, _ = trained
    examples = conftest_trainer.read_raw_examples(run_dir)
    assert len(examples) == 115
    graph = run_dir.path(Artifact.TRANSFORM_GRAPH)
    os.rename(graph, f"{graph}.away")
    try:
        accuracy = conftest_trainer.classify_accuracy(run_dir.path(Artifact.MODEL), examples)
    finally:
        os.rename(f"{graph}.away", graph)
    assert accuracy >= ACCURACY_FLOOR


@pytest.mark.slow
def test_rerun_of_a_published_run_is_cached(trained):
    config, run_dir, options, report = trained
    again = run_training_stage(config, run_dir, options)
    assert again.status is StageStatus.CACHED
    assert again.details["metrics"] == report.details["metrics"]


@pytest.mark.slow
def test_base_model_warm_starts_the_spec(trained, penguin_run_dir, tmp_path):
    # PenguinSpec builds the same model as run_fn: with no training step at all, the
    # weights loaded from the earlier run's model/ classify as well as that model.
    _, trained_run_dir, _, _ = trained
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    config = conftest_trainer.penguin_config(
        train_steps=0, eval_steps=5, base_model=trained_run_dir.path(Artifact.MODEL)
    )
    result = run_trainer(build_training_job(config, run_dir, entry_point="PenguinSpec"))
    assert (result.start_step, result.final_step) == (0, 0)
    assert result.metrics["sparse_categorical_accuracy"] >= ACCURACY_FLOOR


@pytest.mark.slow
def test_user_error_on_the_worker_fails_the_stage_with_its_message(penguin_run_dir, tmp_path):
    module = tmp_path / "broken_module.py"
    module.write_text("def run_fn(fn_args):\n    raise KeyError('species_xf')\n")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    options = parse_beam_args(["--runner=DirectRunner"])
    with pytest.raises(PipelineError, match=r"broken_module\.py:2 raised KeyError"):
        run_training_stage(conftest_trainer.penguin_config(str(module)), run_dir, options)
    assert not run_dir.is_published(Artifact.MODEL)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_a_staged_module_imports_its_helpers_and_its_errors_name_the_users_file(
    penguin_run_dir, tmp_path, mode
):
    """The worker loads the staged copy of the module's folder (the user's folder is
    deleted once staged): the helper module beside the module file imports there, and the
    run_fn's error names the user's file and line, not the staged copy."""
    folder = tmp_path / "user"
    folder.mkdir()
    helper = f"train_helpers_{mode}"
    (folder / f"{helper}.py").write_text("MISSING = 'species_xf'\n")
    module = folder / "helped_module.py"
    module.write_text(
        f"import {helper}\n\n\ndef run_fn(fn_args):\n    raise KeyError({helper}.MISSING)\n"
    )
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    staged = stage_module_file(str(module), run_dir.root)
    shutil.rmtree(folder)
    options = parse_beam_args(
        ["--runner=DirectRunner", f"--direct_running_mode={mode}", "--direct_num_workers=1"]
    )
    with pytest.raises(PipelineError) as raised:
        run_training_stage(
            conftest_trainer.penguin_config(str(module)), run_dir, options, staged=staged
        )
    assert re.search(rf"^run_fn in {re.escape(str(module))}:5 raised KeyError", str(raised.value))
    assert "species_xf" in str(raised.value) and "/module/" not in str(raised.value)
    assert not run_dir.is_published(Artifact.MODEL)


_TRAIN_MULTI_PROCESSING = """
import json, sys
import conftest_trainer
from beam_pipeline.runtime.options import parse_beam_args
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import stage_module_file
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.stages.trainer.training import run_training_stage

run_dir = RunDirectory(sys.argv[1], conftest_trainer.RUN_ID)
options = parse_beam_args(
    ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=1"]
)
try:
    run_training_stage(conftest_trainer.penguin_config(sys.argv[2]), run_dir, options)
    error = None
except PipelineError as e:
    error = str(e)
print(json.dumps({"error": error, "published": run_dir.is_published(Artifact.MODEL)}))
"""


@pytest.mark.slow
def test_a_training_worker_killed_for_memory_fails_the_stage(penguin_run_dir, tmp_path):
    """Beam's FnApiRunner would wait for the dead worker forever; the stage says why instead.

    In a process of its own with a time limit, so that a hang fails this test, not the
    whole suite (forked with the ML stack imported: tests/forked_launch.py).
    """
    import forked_launch

    module = tmp_path / "oom_module.py"
    module.write_text(
        "import os, signal\n\ndef run_fn(fn_args):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = str(tmp_path / "root")
    conftest_trainer.copy_run_dir(penguin_run_dir, root)
    out = forked_launch.run_code(
        _TRAIN_MULTI_PROCESSING, root, str(module), log_dir=str(tmp_path / "launch"), timeout=180
    )
    # run_fn runs in a process of its own (trainer.isolation), which is what was killed.
    assert out["error"] == (
        f"run_fn in {module} was killed by signal 9 before it returned (out of memory, most "
        "likely); give it more memory, or make the model or its batches smaller."
    )
    assert out["published"] is False


@pytest.mark.parametrize(
    "hints, match",
    [
        ({"min_ram": "lots"}, "--trainer_min_ram 'lots' is not a valid Beam resource hint"),
        ({"accelerator": 3}, "--trainer_accelerator 3 is not a valid Beam resource hint"),
    ],
)
def test_bad_resource_hints(penguin_run_dir, hints, match):
    job = build_training_job(conftest_trainer.penguin_config(), penguin_run_dir)
    with pytest.raises(PipelineError, match=match):
        TrainModel(job, **hints)


def test_dataflow_job_graph_puts_the_hints_on_the_training_step_only(penguin_run_dir):
    import apache_beam as beam

    # Placeholders: --dry_run builds the job without credentials (bucket names need 3+
    # characters, or Beam goes looking for a default bucket online).
    options = parse_beam_args(
        [
            "--runner=DataflowRunner",
            "--dry_run=True",
            "--project=placeholder-project",
            "--region=us-central1",
            "--temp_location=gs://placeholder-bucket/tmp",
        ]
    )
    job = build_training_job(conftest_trainer.penguin_config(), penguin_run_dir)
    examples = penguin_run_dir.path(Artifact.TRANSFORMED_EXAMPLES, "train", "*")
    p = create_pipeline(options)
    _ = (
        p
        | "ReadExamples" >> beam.io.ReadFromTFRecord(examples)
        | "CountExamples" >> beam.combiners.Count.Globally()
    )
    _ = p | "TrainModel" >> TrainModel(job, accelerator=ACCELERATOR, min_ram="16GB")
    p.run().wait_until_finish()  # dry run: the job is built, nothing is submitted

    for proto in (p.to_runner_api(), p.runner.proto_pipeline):  # ours, and what Dataflow gets
        hints = conftest_trainer.step_hints(proto)
        assert hints["TrainModel/Train"] == {
            ACCELERATOR_URN: ACCELERATOR.encode(),
            MIN_RAM_URN: b"16000000000",
        }
        data_steps = {name: h for name, h in hints.items() if name != "TrainModel/Train"}
        assert any(name.startswith("ReadExamples") for name in data_steps)
        assert all(h == {} for h in data_steps.values()), data_steps
