"""The Evaluator (TFMA), the InfraValidator (a sandbox process) and the Pusher, on a real
trained penguin model: one training of the bundled run_fn shared by every test here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import conftest_trainer
import keras
import pytest
from conftest import TESTDATA, free_port, worker_pool_process
from test_tfx_modules import TFX_EVAL_CONFIG

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.artifacts import (
    EvaluationResult,
    ModelBlessing,
    Schema,
    ThresholdFailure,
)
from beam_pipeline.runtime.options import parse_beam_args
from beam_pipeline.stages.evaluator import evaluation as evaluator
from beam_pipeline.stages.infra_validator.checks import WARMUP_FILE, describe, validate_model
from beam_pipeline.stages.pusher.push import next_version, push_model
from beam_pipeline.stages.trainer.training import run_training_stage

penguin_run_dir = conftest_trainer.penguin_run_dir


@pytest.fixture(scope="module")
def model(penguin_run_dir, tmp_path_factory):
    """(run directory, model folder): the bundled run_fn, 100 seeded steps."""
    root = str(tmp_path_factory.mktemp("evaluator") / "root")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, root)
    keras.utils.set_random_seed(0)
    config = conftest_trainer.penguin_config(train_steps=100, eval_steps=5)
    report = run_training_stage(config, run_dir, parse_beam_args(["--runner=DirectRunner"]))
    assert report.status.value == "ok", report
    return run_dir, run_dir.path(Artifact.MODEL)


def _schema(run_dir):
    return Schema(run_dir.path(Artifact.SCHEMA)).read()


def _evaluate(run_dir, model_dir, config, out, baseline=None):
    return evaluator.run_evaluation(
        config,
        model_dir,
        baseline,
        run_dir.path(Artifact.EXAMPLES, "eval", "*.tfrecord.gz"),
        out,
        parse_beam_args(["--runner=DirectRunner"]),
    )


def test_export_records_the_label_and_a_transform_features_signature(model):
    facts = evaluator.model_facts(model[1])
    assert facts.signatures == ("serving_default", "transform_features")
    assert facts.label_key == "species_xf"  # the one transformed feature the model does not read
    assert "species_xf" in facts.transformed_features
    assert facts.outputs == {"scores": (None, 3)}


def test_default_config_slices_by_island_blesses_and_tfma_reads_the_artifact(model, tmp_path):
    import tensorflow_model_analysis as tfma

    run_dir, model_dir = model
    config = evaluator.build_eval_config(None, model_dir, _schema(run_dir), ("island",))
    assert config.model_specs[0].preprocessing_function_names == ["transform_features"]
    out = str(tmp_path / "evaluation")
    result = _evaluate(run_dir, model_dir, config, out)
    # 100 seeded steps: 0.99 overall accuracy (0.974-1.0 unseeded over 6 runs in
    # test_trainer_stage), far above the default 0.6 bar.
    assert result.blessed and result.failures == () and result.baseline is None
    assert set(result.metrics) == {"Overall", "island:Biscoe", "island:Dream", "island:Torgersen"}
    assert result.metrics["Overall"]["example_count"] == 115  # the fixture's eval rows
    per_island = sum(
        result.metrics[f"island:{i}"]["example_count"] for i in ("Biscoe", "Dream", "Torgersen")
    )
    assert per_island == 115
    assert result.metrics["Overall"]["sparse_categorical_accuracy"] >= 0.9
    loaded = tfma.load_eval_result(out)
    slices = {tfma.slicer.stringify_slice_key(k) for k, _ in loaded.slicing_metrics}
    assert slices == set(result.metrics)
    assert tfma.load_validation_result(out).validation_ok
    ModelBlessing(str(tmp_path / "blessing")).write(result)
    assert os.path.exists(tmp_path / "blessing" / "BLESSED")
    assert ModelBlessing(str(tmp_path / "blessing")).read() == result


_STRICT = """
model_specs { label_key: "species_xf" preprocessing_function_names: "transform_features" }
slicing_specs {}
metrics_specs {
  metrics {
    class_name: "SparseCategoricalAccuracy"
    threshold {
      change_threshold { direction: HIGHER_IS_BETTER absolute { value: 0.05 } }
    }
  }
  metrics {
    class_name: "ExampleCount"
    threshold { value_threshold { lower_bound { value: 1000 } } }
  }
}
"""


def test_value_and_change_thresholds_fail_against_a_baseline(model, tmp_path):
    # The baseline is the same model: a change threshold asking for +0.05 accuracy fails
    # by exactly that (the diff is 0), and 115 examples fail a bound of 1000.
    run_dir, model_dir = model
    path = tmp_path / "strict.pbtxt"
    path.write_text(_STRICT)
    config = evaluator.build_eval_config(str(path), model_dir, _schema(run_dir))
    baseline = str(tmp_path / "baseline")
    shutil.copytree(model_dir, baseline)
    result = _evaluate(run_dir, model_dir, config, str(tmp_path / "evaluation"), baseline)
    assert not result.blessed
    failed = {(f.metric, f.slice): f for f in result.failures}
    assert set(failed) == {
        ("sparse_categorical_accuracy vs baseline", "Overall"),
        ("example_count", "Overall"),
    }
    # In plain words, against the baseline's value: the candidate's accuracy, the bound
    # it needed (the baseline's + 0.05), and by how much it missed (the whole 0.05).
    change = failed[("sparse_categorical_accuracy vs baseline", "Overall")]
    accuracy = result.metrics["Overall"]["sparse_categorical_accuracy"]
    assert change.value == pytest.approx(accuracy)
    assert change.bound == (
        f">= {accuracy + 0.05:.4g}, at least 0.05 above the baseline's {accuracy:.4g} "
        "(higher is better) (it is the same as the baseline's)"
    )
    assert change.by == pytest.approx(0.05)
    assert failed[("example_count", "Overall")].value == 115
    assert failed[("example_count", "Overall")].bound == ">= 1000"
    assert failed[("example_count", "Overall")].by == 1000 - 115


def test_without_a_baseline_change_thresholds_are_dropped(model, tmp_path):
    path = tmp_path / "strict.pbtxt"
    path.write_text(_STRICT)
    config = evaluator.build_eval_config(str(path), model[1], _schema(model[0]))
    ran = evaluator._with_baseline(config, None)  # what TFMA runs without a baseline
    thresholds = [m.threshold for m in ran.metrics_specs[0].metrics]
    assert not any(t.HasField("change_threshold") for t in thresholds)
    assert thresholds[1].value_threshold.lower_bound.value == 1000
    assert len(config.metrics_specs) == 1  # it counts its examples: nothing added
    # TFX's penguin pipeline's config asks for accuracy alone: ExampleCount is added, in
    # a spec of its own without a threshold, so that the summary counts the rows.
    tfx = evaluator.build_eval_config(TFX_EVAL_CONFIG, model[1], _schema(model[0]))
    assert [[m.class_name for m in s.metrics] for s in tfx.metrics_specs] == [
        ["SparseCategoricalAccuracy"],
        ["ExampleCount"],
    ]
    assert not tfx.metrics_specs[1].metrics[0].HasField("threshold")


@pytest.mark.parametrize(
    "text, match",
    [
        ("model_specs { label_key: ", r"--eval_config .*bad.pbtxt does not parse as a TFMA"),
        ('{"modelSpecs": [{"labelKey": 3', r"does not parse as a TFMA EvalConfig"),
        (
            'model_specs { label_key: "species_xf" preprocessing_function_names: '
            '"transform_features" } metrics_specs { metrics { class_name: "Accurasy" } }',
            r"names metric 'Accurasy', which neither TFMA nor Keras defines",
        ),
        (
            'model_specs { label_key: "species_xf" preprocessing_function_names: '
            '"transform_features" } slicing_specs { feature_keys: "continent" }',
            r"slices on feature 'continent', which the data does not have; slice on one of",
        ),
        (
            'model_specs { label_key: "kind" preprocessing_function_names: "transform_features" }',
            r"gives label_key 'kind', which the model cannot produce; set it to one of the "
            r"transformed features: .*species_xf",
        ),
        (
            'model_specs { label_key: "species" preprocessing_function_names: "transform" }',
            r"names preprocessing function 'transform', which the model does not have",
        ),
    ],
)
def test_bad_eval_configs_are_refused_before_the_job(model, tmp_path, text, match):
    path = tmp_path / "bad.pbtxt"
    path.write_text(text)
    with pytest.raises(PipelineError, match=match):
        evaluator.build_eval_config(str(path), model[1], _schema(model[0]))


def test_a_slice_feature_that_does_not_exist_is_refused(model):
    with pytest.raises(PipelineError, match=r"--eval_slice_features slices on feature 'planet'"):
        evaluator.build_eval_config(None, model[1], _schema(model[0]), ("planet",))


def test_infra_validator_sends_tf_serving_requests_to_an_endpoint(model, tmp_path, monkeypatch):
    # The sandbox (the default) is checked on the README's first command's run in
    # test_cli_runs.py: blessed, its latencies per batch size and the warm-up file it writes.
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    run_dir, model_dir = model
    served = str(tmp_path / "model")
    shutil.copytree(model_dir, served)
    examples = conftest_trainer.read_raw_examples(run_dir, "eval")
    # Given relative, as the default pipeline root's paths are.
    monkeypatch.chdir(tmp_path)

    # --serving_endpoint: the requests sent over TF Serving's gRPC API, to
    # a stand-in server (tests/testdata/tf_serving_standin.py: TF Serving cannot be
    # installed here) that loads the model with TensorFlow in its own process.
    assert not os.path.exists(os.path.join(served, WARMUP_FILE))
    port = free_port()
    standin = [sys.executable, os.path.join(TESTDATA, "tf_serving_standin.py"), "penguin"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with worker_pool_process([*standin, served, str(port)], tmp_path / "standin.log", env=env):
        endpoint = f"localhost:{port}"
        result = validate_model(
            "model", examples, repeats=3, endpoint=endpoint, model_name="penguin"
        )
        assert result.blessed, result.problems
        assert result.endpoint == endpoint and result.load_seconds is None
        assert sorted(result.latency_ms) == [1, 8, 32]
        assert all(0 < v["p50"] <= v["p99"] for v in result.latency_ms.values())
        # The warm-up file TF Serving replays: PredictionLogs of PredictRequests.
        records = list(tf.data.TFRecordDataset(os.path.join(served, WARMUP_FILE)))
        sizes = []
        for r in records:
            request = prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
            assert request.model_spec.signature_name == "serving_default"
            sizes.append(tf.make_ndarray(request.inputs["examples"]).shape[0])
        assert sizes == [1, 8, 32]
        assert describe(result).startswith(f"served by {endpoint}; batch 1: p50 ")
        # A name the server does not serve: every request fails with the server's answer.
        wrong = validate_model("model", examples, repeats=1, endpoint=endpoint, model_name="x")
        assert not wrong.blessed and len(wrong.problems) == 3
        assert wrong.problems[0] == (
            f"a request of 1 examples to {endpoint} failed: NOT_FOUND: "
            "Servable not found for request: Latest(x)"
        )


def test_infra_validator_fails_a_model_that_does_not_load_or_take_examples(tmp_path):
    import tensorflow as tf

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    result = validate_model(str(broken), [b"x"], repeats=1)
    assert not result.blessed
    assert result.problems[0].startswith("the model does not load: ")
    assert "saved_model.pb does not parse (DecodeError" in result.problems[0]
    assert not os.path.exists(broken / WARMUP_FILE)

    class Floats(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2}

    floats = str(tmp_path / "floats")
    module = Floats()
    tf.saved_model.save(module, floats, signatures={"serving_default": module.serve})
    result = validate_model(floats, [b"x"], repeats=1)
    assert not result.blessed
    assert "does not take serialized tf.Examples" in result.problems[0]
    # A model exported by other code records no label: the default EvalConfig cannot be
    # derived, and says what to pass instead (the Evaluator stage skips with that advice).
    assert evaluator.model_facts(floats).label_key is None
    with pytest.raises(
        PipelineError, match=r"records no label for the Evaluator; pass --eval_config"
    ):
        evaluator.build_eval_config(None, floats, None)


def test_a_request_that_ends_the_sandbox_process_leaves_the_model_unblessed(tmp_path):
    """The sandbox is a process of its own (a fork of the fork server): a model whose
    request aborts the process (TensorFlow's Abort op, as a crash in a custom kernel would)
    ends that process, not the caller, and is not blessed, the signal named."""
    import tensorflow as tf

    class Aborts(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            ends = tf.raw_ops.Abort(error_msg="a request of this model ends its server")
            with tf.control_dependencies([ends]):
                return {"y": tf.zeros(tf.shape(examples), tf.float32)}

    model, module = str(tmp_path / "model"), Aborts()
    tf.saved_model.save(module, model, signatures={"serving_default": module.serve})
    result = validate_model(model, [b"x"], repeats=1)
    assert not result.blessed
    assert result.problems == (
        "the sandbox process failed: The InfraValidator's sandbox was ended by signal 6 "
        "(SIGABRT) before it returned (a crash in native code, or a signal sent to it); see "
        "the run's log for its last lines.",
    )
    assert not os.path.exists(os.path.join(model, WARMUP_FILE))


def test_the_sandbox_names_non_finite_and_misshapen_outputs(tmp_path):
    """A model that answers NaN in bfloat16 (NumPy does not count bfloat16 as floating) and
    a scalar for a batch: not blessed, each output named per request size."""
    import tensorflow as tf

    class Bad(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            n = tf.shape(examples)[0]
            nan = tf.cast(tf.fill([n, 1], float("nan")), tf.bfloat16)
            return {"nan": nan, "scalar": tf.cast(n, tf.float32)}

    model, module = str(tmp_path / "model"), Bad()
    tf.saved_model.save(module, model, signatures={"serving_default": module.serve})
    result = validate_model(model, [b"x"], repeats=1)
    assert not result.blessed
    assert set(result.problems) == {
        problem
        for n in (1, 8, 32)
        for problem in (
            f"output nan of the {n}-example request is not finite",
            f"output scalar of the {n}-example request has shape [], declared []",
        )
    }
    assert not os.path.exists(os.path.join(model, WARMUP_FILE))


def test_pusher_writes_increasing_versions_atomically(model, tmp_path):
    destination = str(tmp_path / "serving" / "penguin")
    assert next_version(destination) == 1
    first = push_model(model[1], destination)
    second = push_model(model[1], destination)
    assert [os.path.basename(first), os.path.basename(second)] == ["1", "2"]
    assert sorted(os.listdir(destination)) == ["1", "2"]  # no partial folder left behind
    assert os.path.exists(os.path.join(second, "saved_model.pb"))
    os.makedirs(os.path.join(destination, "10"))
    assert next_version(destination) == 11


def test_on_an_object_store_the_pusher_copies_the_graph_after_the_variables(model):
    """gs:// has no folder rename: files appear one by one, so the graph files, which make
    a folder a loadable SavedModel, are copied last (a server that looks early fails to
    load the version and retries instead of reading half its variables)."""
    from beam_pipeline.stages.pusher.push import _files, _graph_last

    files = _files(model[1])
    ordered = [os.path.basename(f) for f in _graph_last(files)]
    assert sorted(_graph_last(files)) == sorted(files)
    graph = {"saved_model.pb", "fingerprint.pb"}
    assert graph <= set(ordered) and set(ordered[-len(graph) :]) == graph
    assert any(name.startswith("variables.data") for name in ordered[: -len(graph)])


def test_pusher_refuses_a_destination_it_cannot_write(model, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PipelineError, match=r"--push_destination .*file/models is not writable"):
        push_model(model[1], str(blocker / "models"))


def test_blessing_json_names_the_failed_threshold(tmp_path):
    failure = ThresholdFailure("accuracy", "Overall", 0.25, ">= 0.6", 0.35)
    result = EvaluationResult(False, (failure,), None, {"Overall": {"accuracy": 0.25}})
    ModelBlessing(str(tmp_path)).write(result)
    assert os.path.exists(tmp_path / "NOT_BLESSED")
    saved = json.loads((tmp_path / "blessing.json").read_text())
    assert saved["failures"] == [
        {"metric": "accuracy", "slice": "Overall", "value": 0.25, "bound": ">= 0.6", "by": 0.35}
    ]
    assert failure.describe() == "accuracy on Overall = 0.25, needs >= 0.6, misses it by 0.35"
    assert ModelBlessing(str(tmp_path)).read().failures == (failure,)
    # The summary's table: counts whole (a 1M-row taxi run showed 3.334e+05), rates to 4
    # significant digits.
    from beam_pipeline.stages.evaluator.executor import metrics_table

    table = metrics_table({"Overall": {"example_count": 333447.0, "binary_accuracy": 0.768512}})
    assert table.split("\n")[1].split() == ["Overall", "0.7685", "333447"]


def _pusher_ctx(tmp_path, **pusher):
    from beam_pipeline.config import PipelineConfig, PusherConfig
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.engine.stage import StageContext

    config = PipelineConfig(pipeline_root=str(tmp_path / "root"), pusher=PusherConfig(**pusher))
    run_dir = RunDirectory.create(config.pipeline_root, "r")
    return StageContext(config, None, run_dir, {})


def test_pusher_stage_pushes_only_a_model_blessed_by_both(model, tmp_path):
    from beam_pipeline.engine.artifacts import InfraBlessing, InfraResult, Model, PushedModel
    from beam_pipeline.engine.stage import Outputs
    from beam_pipeline.stages.pusher.stage import EXIT_NOT_BLESSED, PusherStage

    destination = str(tmp_path / "serving")
    ctx = _pusher_ctx(tmp_path, destination=destination, require_blessing=True)
    failure = ThresholdFailure("accuracy", "Overall", 0.25, ">= 0.6")
    verdicts = {}
    for name, blessed in (("yes", True), ("no", False)):
        verdicts[name] = ModelBlessing(str(tmp_path / name))
        verdicts[name].write(EvaluationResult(blessed, () if blessed else (failure,), None, {}))
    infra = str(tmp_path / "infra")
    InfraBlessing(infra).write(InfraResult(True, (), 1.0, {1: {"p50": 1.0, "p99": 2.0}}))
    stage = PusherStage()
    for blessing, pushed in (("no", False), ("yes", True)):
        out = Outputs(ctx.run_dir, {PushedModel: str(tmp_path / f"out-{blessing}")})
        inputs = {Model: Model(model[1]), ModelBlessing: verdicts[blessing]}
        inputs[InfraBlessing] = InfraBlessing(infra)
        result = stage.run(ctx, inputs, out)
        assert result.outputs[0].properties["pushed"] is pushed
        if not pushed:
            assert result.reports[0].note == (
                "not pushed: the Evaluator did not bless it (accuracy on Overall = 0.25, "
                "needs >= 0.6)"
            )
            with pytest.raises(PipelineError, match="not blessed, so it was not pushed") as e:
                stage.check(ctx, result.outcome)  # --require_blessing
            assert e.value.exit_code == EXIT_NOT_BLESSED
        else:
            assert result.reports[0].note == f"pushed to {destination}/1 (version 1)"
            stage.check(ctx, result.outcome)
    assert os.listdir(destination) == ["1"]


_PUSHER = """
import os, sys, time
from beam_pipeline.stages.pusher.push import push_model

model, destination, ready, start = sys.argv[1:5]
open(ready, "w").close()  # imported: only the copies are left
while not os.path.exists(start):
    time.sleep(0.001)
print(" ".join(os.path.basename(push_model(model, destination)) for _ in range(3)))
"""


def test_pushes_to_one_destination_at_the_same_time_each_get_their_own_version(tmp_path):
    """Six launchers push three times each at once: every push is a whole version of its
    own (before, two could count the same next version and one failed as unwritable)."""
    model = tmp_path / "model"
    for i in range(40):  # files enough that copies overlap
        (model / "variables").mkdir(parents=True, exist_ok=True)
        (model / "variables" / f"part-{i}").write_bytes(bytes([i]) * 4096)
    (model / "saved_model.pb").write_bytes(b"pb")
    destination = str(tmp_path / "serving" / "penguin")
    start = str(tmp_path / "start")
    ready = [str(tmp_path / f"ready-{i}") for i in range(6)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PUSHER, str(model), destination, r, start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    # Released together once all six have imported and wait (a process that is still
    # importing when the others push would not overlap them).
    while not all(os.path.exists(r) for r in ready):
        if any(proc.poll() is not None for proc in procs):
            break  # one failed before it was ready: its error is asserted below
        time.sleep(0.01)
    open(start, "w").close()
    pushed = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        pushed.extend(out.split())
    assert sorted(pushed, key=int) == [str(v) for v in range(1, 19)]
    assert sorted(os.listdir(destination), key=int) == [str(v) for v in range(1, 19)]
    for version in os.listdir(destination):  # each one whole
        assert len(os.listdir(os.path.join(destination, version, "variables"))) == 40
