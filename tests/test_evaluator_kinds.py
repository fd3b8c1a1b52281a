"""The Evaluator's default EvalConfig for each kind of model the trainer exports: a metric
per kind, a model with no threshold to check blessed saying why (TFMA alone
refuses it, and no later run could have a baseline), a NOT-blessed verdict naming why.
Through the CLI with a regression module of the test's own and with the bundled module on
a one-class label; the kinds themselves from the model's facts."""

from __future__ import annotations

import csv
import os
import random

import pytest
from conftest import PENGUIN_DIR
from tensorflow_model_analysis.proto import config_pb2
from test_cli import MODULE, _summary

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.stages.evaluator import evaluation as evaluator
from beam_pipeline.stages.evaluator.evaluation import ModelFacts, ModelKind

_SIGNATURES = ("serving_default", "transform_features")
_REGRESSION_METRICS = ["MeanSquaredError", "MeanAbsoluteError", "CalibrationPlot"]


def _facts(width, label_dtype):
    outputs = {"outputs": (None, width)}
    return ModelFacts(_SIGNATURES, "y_xf", outputs, ("x_xf", "y_xf"), label_dtype)


# An integer label is binary only where its values (a vocabulary's class domain, else the
# raw label's range in the statistics or schema) stay within {0, 1}: diamonds' price,
# passed through as INT, is a regression label (TFMA's binary metrics refuse it mid-job).
@pytest.mark.parametrize(
    "width, label_dtype, classes, values, kind, metrics, thresholds",
    [
        (3, "int", 3, None, ModelKind.MULTI_CLASS, ["SparseCategoricalAccuracy"], 1),
        (2, "int", None, None, ModelKind.MULTI_CLASS, ["SparseCategoricalAccuracy"], 1),
        (1, "int", 2, None, ModelKind.BINARY, ["BinaryAccuracy", "AUC"], 1),
        (1, "int", None, (0, 1), ModelKind.BINARY, ["BinaryAccuracy", "AUC"], 1),
        (1, "int", None, (0, 0), ModelKind.BINARY, ["BinaryAccuracy", "AUC"], 1),
        (1, "int", None, (326, 18823), ModelKind.REGRESSION, _REGRESSION_METRICS, 1),
        (1, "int", None, (-1, 1), ModelKind.REGRESSION, _REGRESSION_METRICS, 1),
        (1, "int", 5, None, ModelKind.REGRESSION, ["MeanSquaredError", "MeanAbsoluteError"], 1),
        (
            1,
            "float",
            None,
            None,
            ModelKind.REGRESSION,
            ["MeanSquaredError", "MeanAbsoluteError"],
            1,
        ),
        (1, None, None, None, ModelKind.REGRESSION, ["MeanSquaredError", "MeanAbsoluteError"], 1),
        (1, "int", 1, None, ModelKind.ONE_CLASS, ["SparseCategoricalAccuracy"], 0),
    ],
)
def test_the_default_config_has_a_metric_for_each_kind_of_model(
    width, label_dtype, classes, values, kind, metrics, thresholds
):
    facts = _facts(width, label_dtype)
    assert evaluator.model_kind(facts, classes, values) is kind
    config = evaluator.build_eval_config(
        None, "model", None, facts=facts, label_classes=classes, label_values=values
    )
    names = [m.class_name for spec in config.metrics_specs for m in spec.metrics]
    assert names == ["ExampleCount", *metrics]
    # Every default threshold blocks on the Overall slice alone, never on every slice.
    checked = [m for s in config.metrics_specs for m in s.metrics if m.per_slice_thresholds]
    assert len(checked) == thresholds
    for metric in checked:
        assert not metric.HasField("threshold")
        assert [list(p.slicing_specs) for p in metric.per_slice_thresholds] == [
            [config_pb2.SlicingSpec()]
        ]
        change = metric.per_slice_thresholds[0].threshold.change_threshold
        assert abs(change.relative.value) == evaluator.DEFAULT_TOLERANCE
        assert not change.HasField("absolute")


def test_an_integer_label_of_unknown_values_stops_before_the_job_with_its_fix():
    with pytest.raises(PipelineError, match="cannot tell whether the model's integer label "):
        evaluator.build_eval_config(None, "model", None, facts=_facts(1, "int"))


def _regression_data(path, rows=240):
    rng = random.Random(0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "y"])
        for _ in range(rows):
            x1, x2 = rng.uniform(-2, 2), rng.uniform(-2, 2)
            w.writerow([f"{x1:.4f}", f"{x2:.4f}", f"{3 * x1 - 2 * x2 + 1 + rng.gauss(0, 0.1):.4f}"])


# A TFX-style module for a one-output regressor: a float label, a linear model, the
# serving model exported by trainer.export_serving_model (which records the label).
_REGRESSION_MODULE = """
import keras
import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

from trainer import FnArgs, export_serving_model

FEATURES = ["x1", "x2"]


def preprocessing_fn(inputs):
    out = {k + "_xf": tf.cast(tf.squeeze(inputs[k], axis=1), tf.float32) for k in FEATURES}
    out["y_xf"] = tf.cast(tf.squeeze(inputs["y"], axis=1), tf.float32)
    return out


def run_fn(fn_args: FnArgs) -> None:
    keras.utils.set_random_seed(0)
    output = tft.TFTransformOutput(fn_args.transform_output)

    def dataset(files):
        options = tfxio.TensorFlowDatasetOptions(batch_size=16, label_key="y_xf")
        return fn_args.data_accessor.tf_dataset_factory(
            files, options, output.transformed_metadata.schema
        )

    inputs = {k + "_xf": keras.Input(shape=(1,), name=k + "_xf") for k in FEATURES}
    y = keras.layers.Dense(1)(keras.layers.Concatenate()(list(inputs.values())))
    model = keras.Model(inputs, y)
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    model.fit(
        dataset(fn_args.train_files),
        steps_per_epoch=fn_args.train_steps,
        epochs=1,
        validation_data=dataset(fn_args.eval_files),
        validation_steps=fn_args.eval_steps,
        verbose=0,
    )
    export_serving_model(model, output, fn_args.serving_model_dir, raw_label_keys=["y"])
"""


def _cli(args, capsys) -> str:
    """The standard output of a successful CLI run, in this process (the Trainer runs in
    its own either way)."""
    from beam_pipeline import cli

    capsys.readouterr()
    code = cli.main(["--runner=DirectRunner", *args])
    out, err = capsys.readouterr()
    assert code == 0, err[-4000:]
    return out


@pytest.mark.slow
def test_a_regression_model_is_blessed_first_and_then_judged_against_its_baseline(tmp_path, capsys):
    # Before: "Evaluator: NOT blessed:  (no blessed model yet: ...)", an empty reason,
    # failures [], TFMA's missing_thresholds, and no later run could ever have a baseline.
    _regression_data(tmp_path / "linear.csv")
    (tmp_path / "linear_module.py").write_text(_REGRESSION_MODULE)
    common = [
        f"--data={tmp_path / 'linear.csv'}",
        f"--module_file={tmp_path / 'linear_module.py'}",
        f"--pipeline_root={tmp_path / 'root'}",
        "--no_tuner",
        "--no_infra_validator",
        "--eval_steps=2",
    ]
    out = _cli([*common, "--run_id=first", "--train_steps=200"], capsys)
    first = _summary(str(tmp_path / "root" / "runs" / "first"))["Evaluator"]
    assert first["status"] == "ok"
    assert first["details"]["blessed"] is True, first["note"]
    assert first["details"]["model_kind"] == "regression"
    assert first["details"]["reason"] == evaluator.NO_BASELINE_TO_CHECK
    assert first["note"].startswith(
        f"blessed: {evaluator.NO_BASELINE_TO_CHECK} (no model was blessed before it"
    )
    assert f"Evaluator: blessed: {evaluator.NO_BASELINE_TO_CHECK}" in out
    overall = first["details"]["metrics"]["Overall"]
    assert {"mean_squared_error", "mean_absolute_error", "example_count"} <= set(overall)
    assert overall["mean_squared_error"] < 0.5  # y = 3 x1 - 2 x2 + 1 + noise, learned
    assert os.path.exists(tmp_path / "root" / "runs" / "first" / "blessing" / "BLESSED")

    # A worse model (one step from its initial weights) has the first as its baseline:
    # the mean squared error may not rise, and the verdict says by how much it did.
    _cli([*common, "--run_id=worse", "--train_steps=1"], capsys)
    worse = _summary(str(tmp_path / "root" / "runs" / "worse"))["Evaluator"]
    assert worse["details"]["baseline"] == str(tmp_path / "root" / "runs" / "first" / "model")
    assert worse["details"]["blessed"] is False
    assert worse["note"].startswith("NOT blessed: mean_squared_error vs baseline on Overall = ")
    assert worse["details"]["reason"] and worse["details"]["failures"]


@pytest.mark.slow
def test_the_bundled_module_on_a_label_with_one_class_is_blessed_with_no_thresholds(
    tmp_path, capsys
):
    with open(os.path.join(PENGUIN_DIR, "penguins.csv"), newline="") as f:
        rows = list(csv.reader(f))
    one_class = [rows[0]] + [r for r in rows[1:] if r[0] == "Adelie"]
    with open(tmp_path / "adelie.csv", "w", newline="") as f:
        csv.writer(f).writerows(one_class)
    _cli(
        [
            f"--data={tmp_path / 'adelie.csv'}",
            f"--module_file={MODULE}",
            f"--pipeline_root={tmp_path / 'root'}",
            "--run_id=one",
            "--csv_null_values=NA",
            "--no_tuner",
            "--no_infra_validator",
            "--train_steps=10",
            "--eval_steps=2",
        ],
        capsys,
    )
    evaluation = _summary(str(tmp_path / "root" / "runs" / "one"))["Evaluator"]
    assert evaluation["details"]["model_kind"] == "one-class"
    assert evaluation["details"]["blessed"] is True, evaluation["note"]
    assert evaluation["note"].startswith("blessed: no thresholds")
    assert evaluation["details"]["metrics"]["Overall"]["sparse_categorical_accuracy"] == 1.0
