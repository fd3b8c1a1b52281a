"""``--mixed_precision``: a TrainSpec and a run_fn train in bfloat16 on CPU (float16 on a
GPU), a run_fn gets the policy's name, and the exported model still serves float32.

The trainings run in one process of their own (forked: tests/forked_launch.py): Keras's
dtype policy is global to a process (the flagless one runs first, on the default policy;
the flagged one must put it back).
"""

from __future__ import annotations

import json
import shutil

import conftest_trainer
import forked_launch
import pytest

from beam_pipeline.flags import parse_config
from trainer.fn_args import FnArgs
from trainer.job import ModelJob, common_fn_args

penguin_run_dir = conftest_trainer.penguin_run_dir

# Appended to a copy of the bundled module: a PenguinSpec that records, while the runner
# builds its model, the global policy, the one fn_args names, and its layers' policies.
_RECORDING_SPEC = """

import json as _json
import os as _os


class MixedSpec(PenguinSpec):
    def model(self, hp):
        model = super().model(hp)
        seen = {
            "global": keras.config.dtype_policy().name,
            "fn_args": self.fn_args.mixed_precision,
            "custom_config": self.fn_args.custom_config.get("mixed_precision"),
            "dense_layers": sorted(
                {layer.dtype_policy.name for layer in model.layers if "dense" in layer.name}
            ),
        }
        with open(_os.path.join(self.fn_args.model_run_dir, "policy.json"), "w") as f:
            _json.dump(seen, f)
        return model


def mixed_run_fn(fn_args):
    # The bundled run_fn (which never reads fn_args.mixed_precision), recording the same.
    global _build_model
    built, original = [], _build_model

    def recording(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    _build_model = recording
    try:
        seen = {
            "global": keras.config.dtype_policy().name,
            "fn_args": fn_args.mixed_precision,
            "custom_config": fn_args.custom_config.get("mixed_precision"),
        }
        run_fn(fn_args)
    finally:
        _build_model = original
    seen["dense_layers"] = sorted(
        {layer.dtype_policy.name for layer in built[0].layers if "dense" in layer.name}
    )
    with open(_os.path.join(fn_args.model_run_dir, "policy.json"), "w") as f:
        _json.dump(seen, f)
"""

_SCRIPT = """
import json, os, sys
import keras
import tensorflow as tf
import conftest_trainer
from beam_pipeline.flags import parse_config
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.stages.trainer.training import build_training_job
from trainer import run_trainer

module, cases = sys.argv[1], json.loads(sys.argv[2])
out = {}
for case, root, flags, entry_point in cases:
    run_dir = RunDirectory(root, conftest_trainer.RUN_ID)
    config = parse_config([f"--module_file={module}", "--data=unused.csv", *flags])
    job = build_training_job(config, run_dir, entry_point=entry_point)
    keras.utils.set_random_seed(0)
    result = run_trainer(job)
    assert result.error is None, result.error
    serve = tf.saved_model.load(result.serving_model_dir).signatures["serving_default"]
    raw = conftest_trainer.read_raw_examples(run_dir)
    outputs = serve(examples=tf.constant(raw[:8]))
    (name, spec), = serve.structured_input_signature[1].items()
    with open(os.path.join(job.model_run_dir, "policy.json")) as f:
        policy = json.load(f)
    out[case] = {
        "policy": policy,
        "after": keras.config.dtype_policy().name,
        "input": [name, spec.dtype.name],
        "outputs": {k: v.dtype.name for k, v in outputs.items()},
        "accuracy": conftest_trainer.classify_accuracy(result.serving_model_dir, raw),
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def module_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed_module")
    module = folder / "penguin_module.py"
    shutil.copy(conftest_trainer.PENGUIN_MODULE, module)
    module.write_text(module.read_text() + _RECORDING_SPEC)
    return str(module)


@pytest.fixture(scope="module")
def trained(penguin_run_dir, tmp_path_factory, module_file) -> dict:
    """Both runs in one process of their own, the flagless one first (the process's policy is
    Keras's default float32 when it starts) and one training step (its test reads only
    the policies); the flagged one then trains 100 steps, as the accuracy floor needs."""
    tmp = tmp_path_factory.mktemp("mixed_runs")
    cases = []
    for case, flags, entry_point in [
        ("without", ["--train_steps=1", "--eval_steps=1"], "MixedSpec"),
        ("mixed", ["--train_steps=100", "--eval_steps=2", "--mixed_precision"], "MixedSpec"),
        ("run_fn", ["--train_steps=2", "--eval_steps=1", "--mixed_precision"], "mixed_run_fn"),
    ]:
        root = str(tmp / case)
        conftest_trainer.copy_run_dir(penguin_run_dir, root)
        cases.append((case, root, flags, entry_point))
    return forked_launch.run_code(
        _SCRIPT, module_file, json.dumps(cases), log_dir=str(tmp / "launch"), timeout=300
    )


@pytest.mark.slow
def test_a_trainspec_trains_in_bfloat16_on_cpu_and_serves_float32(trained):
    out = trained["mixed"]
    assert out["policy"] == {
        "global": "mixed_bfloat16",
        "fn_args": "mixed_bfloat16",
        "custom_config": "mixed_bfloat16",
        "dense_layers": ["mixed_bfloat16"],
    }
    assert out["after"] == "float32"  # the runner put the process's policy back
    # Serialized tf.Examples in, float32 out: what a server expected of the float32 model.
    assert out["input"] == ["examples", "string"]
    assert out["outputs"] and set(out["outputs"].values()) == {"float32"}
    assert out["accuracy"] >= 0.9


@pytest.mark.slow
def test_a_run_fn_that_ignores_the_flag_still_trains_in_bfloat16_and_serves_float32(trained):
    """The runner sets Keras's global policy around run_fn (the bundled one never reads
    fn_args.mixed_precision), and puts the process's back after."""
    out = trained["run_fn"]
    assert out["policy"] == {
        "global": "mixed_bfloat16",
        "fn_args": "mixed_bfloat16",
        "custom_config": "mixed_bfloat16",
        "dense_layers": ["mixed_bfloat16"],
    }
    assert out["after"] == "float32"
    assert out["outputs"] and set(out["outputs"].values()) == {"float32"}


@pytest.mark.slow
def test_without_the_flag_the_model_is_float32(trained):
    out = trained["without"]
    assert out["policy"] == {
        "global": "float32",
        "fn_args": None,
        "custom_config": None,
        "dense_layers": ["float32"],
    }


def _job(**fields) -> ModelJob:
    return ModelJob(
        module_file="m.py",
        module_source="",
        train_files=("t*",),
        eval_files=("e*",),
        transform_graph_path="tg",
        schema_path=None,
        train_steps=1,
        eval_steps=1,
        **fields,
    )


def test_a_run_fn_gets_the_policy_in_fn_args_and_a_tfx_module_in_custom_config():
    import tensorflow as tf

    policy = "mixed_float16" if tf.config.list_logical_devices("GPU") else "mixed_bfloat16"
    fn_args = common_fn_args(_job(mixed_precision=True, custom_config={"a": 1}), "w")
    assert fn_args.mixed_precision == policy
    assert fn_args.custom_config == {"a": 1, "mixed_precision": policy}
    plain = common_fn_args(_job(), "w")
    assert (plain.mixed_precision, plain.custom_config) == (None, {})
    assert FnArgs().mixed_precision is None


def test_the_flag_is_off_by_default_and_reaches_the_trainer_config():
    base = ["--data=x.csv", "--module_file=m.py"]
    assert parse_config(base).trainer.mixed_precision is False
    assert parse_config([*base, "--mixed_precision"]).trainer.mixed_precision is True
