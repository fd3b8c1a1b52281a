"""TFX's own module files run as TFX wrote them: one Keras for tuner and trainer, anywhere.

``tests/testdata/penguin_tfx/`` holds TFX 1.16's penguin Keras module files
(``penguin_utils_keras.py`` + ``penguin_utils_base.py``, from the tfx 1.16.0 wheel, only
their ``tfx`` imports ported) and the data they were written for (TFX's
``penguins_processed.csv``). ``penguin_utils_keras.py`` builds its model with ``from
tensorflow import keras`` and ``tf.keras``; ``penguin_utils_keras3.py`` is the same file
with ``import keras``. Both tune (TFX's 6-trial RandomSearch) and train through the CLI
on the DirectRunner (the tuner's default worker pool; here) and on the portable runner
with an external worker pool (``tests/test_tfx_portable.py``), and the served model
classifies the penguins.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import textwrap

import pytest
from conftest import TESTDATA

from beam_pipeline import cli

TFX_DIR = os.path.join(TESTDATA, "penguin_tfx")
TFX_CSV = os.path.join(TFX_DIR, "penguins_processed.csv")
# TFX 1.16's penguin pipeline's EvalConfig, in TFMA's text format.
TFX_EVAL_CONFIG = os.path.join(TFX_DIR, "eval_config.pbtxt")
MODULES = {
    "tf.keras": os.path.join(TFX_DIR, "penguin_utils_keras.py"),
    "import keras": os.path.join(TFX_DIR, "penguin_utils_keras3.py"),
}

# The served model's accuracy on the 334 rows, after TRAIN_STEPS steps. TFX's module file
# sets no seed (it is kept as TFX wrote it), so its search may pick either learning rate.
# At TFX's own 100 steps the slow one (0.001, 3 layers) served 0.796 in a CI run and 0.916
# in another; at 500 steps (one more second of training) it served 0.991 in 3 runs with
# those hyperparameters fixed (--hyperparameters), and the fast one (0.01, 3 layers) 0.997
# in 2; whole tuned runs at 100 steps served 0.967-0.991 (5 runs). The floor is the
# issue's 0.9: 0.09 under the lowest at 500 steps, and far over the 0.44 that always
# answering the commonest species scores.
TRAIN_STEPS = 500
ACCURACY_FLOOR = 0.9

_KERAS_WAYS = textwrap.dedent(
    """
    import keras
    import tensorflow as tf
    from tensorflow import keras as tf_keras_import
    from tensorflow.keras import layers


    def models():
        def one(k, dense):
            inputs = k.Input((2,), name="x")
            return k.Model(inputs, dense(1)(inputs))

        return {
            "import keras": one(keras, keras.layers.Dense),
            "tf.keras": one(tf.keras, tf.keras.layers.Dense),
            "from tensorflow import keras": one(tf_keras_import, tf_keras_import.layers.Dense),
            "from tensorflow.keras import layers": one(keras, layers.Dense),
        }
    """
)


def _keras_modules() -> dict:
    return {n: m for n, m in sys.modules.items() if n.split(".")[:2] == ["tensorflow", "keras"]}


@pytest.fixture
def keras_modules_restored():
    """The ``tensorflow.keras*`` modules as they were before the test: one imported during
    it (resolved in a state the test made) is dropped, one it replaced is put back."""
    before = _keras_modules()
    yield
    for name in set(_keras_modules()) - set(before):
        del sys.modules[name]
    sys.modules.update(before)


def test_tf_keras_is_keras_3_in_a_module_even_after_tf_transform_chose_keras_2(
    tmp_path, monkeypatch, keras_modules_restored
):
    """The state importing tensorflow_transform first leaves: tf.keras resolved to tf_keras."""
    import keras
    import keras_tuner
    import tensorflow as tf
    from tensorflow.python.util import lazy_loader

    from beam_pipeline.core.user_module import load_module

    # What tensorflow_transform's import does (keras_lib.py): set the variable, then
    # resolve tf.keras (here from a fresh loader, as in a process that did it first).
    # Process-wide state, put back when the test ends (monkeypatch, keras_modules_restored)
    # so that later tests in this process get the tf.keras they had.
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.setattr(tf, "keras", lazy_loader.KerasLazyLoader(tf.__dict__))
    monkeypatch.delitem(sys.modules, "tensorflow.keras", raising=False)
    assert tf.keras.layers.Dense.__module__.startswith("tf_keras"), "not the bad state"

    module_file = tmp_path / "ways.py"
    module_file.write_text(_KERAS_WAYS)
    built = load_module(str(module_file)).models()
    for way, model in built.items():
        assert isinstance(model, keras.Model), (way, type(model))
    # keras-tuner's own check of a built model accepts it.
    tuner = keras_tuner.RandomSearch(
        lambda hp: built["tf.keras"], objective="loss", max_trials=1, directory=str(tmp_path)
    )
    assert tuner.hypermodel.build(keras_tuner.HyperParameters()) is built["tf.keras"]


def _serve_accuracy(model_dir: str) -> dict:
    """The served model's accuracy on every penguin row: its ``serving_default`` signature
    on serialized raw tf.Examples, as a server calls it. (In this process: the
    InfraValidator of the same run already served the model from a fresh ``python -I``
    process, and a fresh interpreter here cost 7 s of TensorFlow imports per test.)"""
    import numpy as np
    import tensorflow as tf

    with open(TFX_CSV, newline="") as f:
        rows = list(csv.DictReader(f))

    def example(row):
        features = {
            k: tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
            for k, v in row.items()
            if k != "species"
        }
        return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()

    served = tf.saved_model.load(model_dir).signatures["serving_default"]
    logits = served(examples=tf.constant([example(r) for r in rows]))["outputs"].numpy()
    truth = np.array([int(r["species"]) for r in rows])
    return {"n": len(rows), "accuracy": float(np.mean(logits.argmax(1) == truth))}


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def _tune_and_train(root: str, run_id: str, module: str, *flags: str, monkeypatch) -> dict:
    args = [
        f"--data={TFX_CSV}",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        f"--run_id={run_id}",
        f"--train_steps={TRAIN_STEPS}",
        *flags,
    ]
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *args])  # as `python -m` has it
    assert cli.main(args) == 0
    return _summary(root, run_id)


# Each Keras way and each runner once (a whole tuned run takes a minute or so): TFX's own
# tf.keras file on the portable runner, whose remote workers load it the hard way; the
# `import keras` copy on the DirectRunner's pool. The other two pairs passed in 5 runs
# measured by hand (figures above); the Keras switch is the same code on every runner.
@pytest.mark.slow
@pytest.mark.parametrize("keras_way", ["import keras"])
def test_tfx_penguin_module_tunes_and_trains_on_the_direct_runners_pool(
    keras_way, tmp_path_factory, monkeypatch
):
    root = str(tmp_path_factory.getbasetemp() / "tfx_direct")  # shared analyzer cache
    serving = os.path.join(root, "serving")
    # Every stage: the model checks with the EvalConfig TFX's penguin pipeline gives its
    # Evaluator (TFX's module exports its own model, which records no label).
    checks = [f"--eval_config={TFX_EVAL_CONFIG}", f"--push_destination={serving}"]
    run_id = keras_way.replace(" ", "_")
    stages = _tune_and_train(root, run_id, MODULES[keras_way], *checks, monkeypatch=monkeypatch)
    tuner, trainer = stages["Tuner"], stages["Trainer"]
    assert tuner["status"] == "ok", tuner["note"]
    assert tuner["details"]["trials"] == 6 and tuner["details"]["completed"] == 6
    # The default pool ran them: --tuner_parallel_trials (2) processes, at most one a core.
    assert tuner["details"]["local_pool_workers"] == min(2, os.cpu_count() or 1)
    assert trainer["status"] == "ok", trainer["note"]
    served = _serve_accuracy(trainer["artifact"])
    print(f"served {keras_way}: {served}, best {tuner['details']['best_hyperparameters']}")
    assert served["n"] == 334
    assert served["accuracy"] >= ACCURACY_FLOOR, served
    # TFMA computed the label with the model's transform_features signature, on every eval
    # row; the first model of the root is judged on the 0.6 value threshold alone (the
    # served accuracy above is on every row and at least that floor).
    evaluation = stages["Evaluator"]
    assert evaluation["status"] == "ok" and evaluation["details"]["blessed"] is True, evaluation
    overall = evaluation["details"]["metrics"]["Overall"]
    assert overall["example_count"] == stages["ExampleGen"]["rows_out"]["eval"]
    assert overall["sparse_categorical_accuracy"] >= 0.6
    infra = stages["InfraValidator"]
    assert infra["status"] == "ok" and infra["details"]["blessed"] is True, infra
    model = trainer["artifact"]
    assert os.path.exists(os.path.join(model, "assets.extra", "tf_serving_warmup_requests"))
    pusher = stages["Pusher"]
    assert pusher["status"] == "ok" and pusher["artifact"] == os.path.join(serving, "1"), pusher
    assert os.path.exists(os.path.join(serving, "1", "saved_model.pb"))


# Run in a fork of the fork server, where trials and run_fn run: what AutoGraph decides for
# tf.Transform's functions that a TFX module's serving signature calls.
_AUTOGRAPH_DECIDES = """
import json
import tensorflow_transform as tft
from tensorflow.python.autograph.impl import conversion
from tensorflow_transform.output_wrapper import TransformFeaturesLayer

called = [TransformFeaturesLayer.call, tft.TFTransformOutput.transform_raw_features]
with open({path!r}, "w") as f:
    json.dump([conversion.is_allowlisted(fn) for fn in called], f)
"""


def test_user_code_processes_leave_tf_transform_unconverted_by_autograph(tmp_path):
    # TFX's make_serving_signatures calls tf.Transform's layer in a tf.function: AutoGraph
    # transpiled tf.Transform's code from source in every process that exported, most of
    # the export's CPU. Allowlisted: called as written, as TensorFlow's own functions are.
    from beam_pipeline.core.forked import start_forked

    path = tmp_path / "allowlisted.json"
    process = start_forked(exec, (_AUTOGRAPH_DECIDES.format(path=str(path)), {}))
    process.join(timeout=120)
    assert process.exitcode == 0
    assert json.loads(path.read_text()) == [True, True]
