"""Module files: how each one trains, and the one-sentence error each bad one gets."""

from __future__ import annotations

import dataclasses

import conftest_trainer
import pytest

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.stages.trainer.training import build_training_job, run_training_stage
from trainer import ModuleKind, check_trainer_module, load_trainer_module, run_trainer

penguin_run_dir = conftest_trainer.penguin_run_dir

_SPEC = """
import keras
from trainer import TrainSpec

class {name}(TrainSpec):
    def model(self, hp):
        return keras.Sequential([keras.layers.Dense(1)])

    def loss(self, hp):
        return "mse"
"""


@pytest.mark.parametrize(
    "source, kind",
    [
        ("def run_fn(fn_args):\n    pass\n", ModuleKind.RUN_FN),
        (_SPEC.format(name="MySpec"), ModuleKind.SPEC),
        # run_fn wins over a spec: it is what a TFX module file means.
        (_SPEC.format(name="MySpec") + "\ndef run_fn(fn_args):\n    pass\n", ModuleKind.RUN_FN),
        ("def preprocessing_fn(inputs):\n    return inputs\n", ModuleKind.NONE),
        # An imported TrainSpec (the base class itself) is not the module's spec.
        ("from trainer import TrainSpec\n", ModuleKind.NONE),
    ],
)
def test_module_kinds(tmp_path, source, kind):
    path = tmp_path / "module.py"
    path.write_text(source)
    assert check_trainer_module(str(path)) is kind


@pytest.mark.parametrize(
    "source, match",
    [
        ("x = 1\ndef run_fn(fn_args:\n    pass\n", r"module\.py:2 has a syntax error"),
        (
            "import tensorflow as tf\n\ndef trainer_fn(trainer_fn_args, schema):\n    pass\n",
            r"defines trainer_fn, which needs tf\.estimator.*TensorFlow 2\.16.*run_fn\(fn_args\)",
        ),
        (
            "x = 1\nfrom tfx import v1 as tfx\n",
            r"module\.py:2 imports tfx.*from trainer import tfx_v1 as tfx",
        ),
        ("def run_fn():\n    pass\n", r"run_fn in .*module\.py:1 must take exactly one argument"),
        ("run_fn = 3\n", "has a run_fn that is not a function"),
        ("\n\nraise RuntimeError('boom')\n", r"module\.py:3 raised RuntimeError: boom"),
        (
            _SPEC.format(name="SpecA") + _SPEC.format(name="SpecB"),
            r"several TrainSpec subclasses \(SpecA, SpecB\)",
        ),
    ],
    ids=["syntax", "trainer_fn", "tfx_import", "arity", "not_callable", "raises", "two_specs"],
)
def test_bad_module_files(tmp_path, source, match):
    path = tmp_path / "module.py"
    path.write_text(source)
    with pytest.raises(PipelineError, match=match):
        check_trainer_module(str(path))


def test_a_module_file_is_executed_once_per_content(tmp_path):
    log = tmp_path / "imports.log"
    path = tmp_path / "module.py"
    source = f"with open({str(log)!r}, 'a') as f:\n    f.write('x')\n"
    source += "\ndef run_fn(fn_args):\n    pass\n"
    path.write_text(source)
    first = load_trainer_module(str(path)).module
    assert check_trainer_module(str(path)) is ModuleKind.RUN_FN
    assert load_trainer_module(str(path)).module is first and log.read_text() == "x"
    path.write_text(source + "# edited\n")  # new bytes: a new module
    assert load_trainer_module(str(path)).module is not first and log.read_text() == "xx"
    path.write_text(source + "raise ValueError('once')\n")  # a failed import is not kept
    for _ in range(2):
        with pytest.raises(PipelineError, match=r"module\.py:6 raised ValueError: once"):
            load_trainer_module(str(path))
    assert log.read_text() == "xxxx"


def test_missing_run_fn_is_an_error_when_training_is_required(tmp_path):
    path = tmp_path / "module.py"
    path.write_text("def preprocessing_fn(inputs):\n    return inputs\n")
    with pytest.raises(PipelineError, match=r"defines no run_fn\(fn_args\) and no TrainSpec"):
        check_trainer_module(str(path), required=True)


def test_missing_module_file():
    with pytest.raises(PipelineError, match="does not exist"):
        check_trainer_module("/nowhere/module.py")


def test_entry_point_picks_the_spec_of_the_bundled_module():
    assert check_trainer_module(conftest_trainer.PENGUIN_MODULE) is ModuleKind.RUN_FN
    loaded = load_trainer_module(conftest_trainer.PENGUIN_MODULE, entry_point="PenguinSpec")
    assert loaded.kind is ModuleKind.SPEC and loaded.spec_class.__name__ == "PenguinSpec"
    with pytest.raises(PipelineError, match="has no 'Nope' to train with"):
        load_trainer_module(conftest_trainer.PENGUIN_MODULE, entry_point="Nope")


def test_worker_loads_the_module_from_its_source_when_the_path_is_not_there():
    source = "def run_fn(fn_args):\n    return 'from source'\n"
    loaded = load_trainer_module("/launcher/only/module.py", source=source)
    assert loaded.kind is ModuleKind.RUN_FN and loaded.run_fn(None) == "from source"


def test_stage_skips_a_module_without_training(tmp_path, penguin_run_dir):
    path = tmp_path / "module.py"
    path.write_text("def preprocessing_fn(inputs):\n    return inputs\n")
    config = conftest_trainer.penguin_config(str(path))
    report = run_training_stage(config, penguin_run_dir, options=None)
    assert report.status is StageStatus.SKIPPED
    assert "defines no run_fn or TrainSpec subclass: the data stages and Transform ran" in (
        report.note
    )


# Module files whose training code fails after loading: the runner names file:line and fix.
_RAISES = "import tensorflow as tf\n\ndef run_fn(fn_args):\n    raise ValueError('bad shape')\n"
_NO_MODEL = "def run_fn(fn_args):\n    pass\n"
_NO_SIGNATURE = """
import tensorflow as tf

def run_fn(fn_args):
    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, fn_args.serving_model_dir)
"""


@pytest.mark.parametrize(
    "source, match",
    [
        (_RAISES, r"run_fn in .*module\.py:4 raised ValueError \(bad shape\); fix the module"),
        (_NO_MODEL, "wrote no SavedModel to fn_args.serving_model_dir"),
        (_NO_SIGNATURE, "has no 'serving_default' signature"),
    ],
    ids=["raises", "no_model", "no_signature"],
)
def test_training_code_errors(penguin_run_dir, tmp_path, source, match):
    path = tmp_path / "module.py"
    path.write_text(source)
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    job = build_training_job(conftest_trainer.penguin_config(str(path)), run_dir)
    with pytest.raises(PipelineError, match=match):
        run_trainer(job)
    assert not (tmp_path / "root/runs/fixture/model_run/training_result.json").exists()


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("custom_config", "[1]", "not an object"),
        ("custom_config", "{oops", "--custom_config is not valid JSON"),
        ("base_model", "/nowhere", "--base_model /nowhere is not a SavedModel folder"),
        ("eval_steps", 0, "--eval_steps=0 is out of range"),  # refused by TrainerConfig
    ],
)
def test_bad_trainer_settings(penguin_run_dir, field, value, match):
    with pytest.raises(PipelineError, match=match):
        build_training_job(conftest_trainer.penguin_config(**{field: value}), penguin_run_dir)


def test_missing_transform_output(tmp_path):
    from beam_pipeline.engine.run_dir import RunDirectory

    run_dir = RunDirectory.create(str(tmp_path), "empty")
    with pytest.raises(PipelineError, match="no transform graph.*run the Transform stage"):
        build_training_job(conftest_trainer.penguin_config(), run_dir)


def test_job_carries_the_module_source(penguin_run_dir):
    job = build_training_job(conftest_trainer.penguin_config(), penguin_run_dir)
    with open(conftest_trainer.PENGUIN_MODULE) as f:
        assert job.module_source == f.read()
    assert job.serving_model_dir == penguin_run_dir.path(Artifact.MODEL_RUN, "export")
    assert dataclasses.replace(job, logical_cpus=2).logical_cpus == 2
