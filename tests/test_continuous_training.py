"""Continuous training through the CLI: the BulkInferrer, drift checks, warm start.

- BulkInferrer: ``--infer_data`` scored with the run's blessed model, on the DirectRunner
  in both modes; PredictionLogs = rows scored, a bad row rejected, rows read = scored +
  rejected; a row the model refuses is rejected alone (not its batch); an offline
  Dataflow job graph holds Beam's RunInference step.
- Drift: the first run has no baseline and says so; an undrifted second run passes; a
  third whose ``island`` shares moved stops at Validation with feature, distance and
  threshold.
- Warm start: ``--warm_start latest_blessed`` trains from run 1's blessed model, which
  ``runs lineage`` shows as the Trainer's input; its first epoch's loss (TensorBoard's
  ``epoch_loss`` in ``model_run/train``) is near run 1's final loss, unlike a cold start's.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import os
import random
import re
import subprocess
import sys

import pytest

from beam_pipeline.config import BUNDLED_EXAMPLE_DIR

pytestmark = pytest.mark.slow

PENGUINS = os.path.join(BUNDLED_EXAMPLE_DIR, "penguins.csv")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """A run through the CLI's entry point in this process, its exit code and what it
    printed: these tests read the run's summary, artifacts and error sentences, not the
    process, and a fresh interpreter per run would import TensorFlow and Beam each time
    (the Trainer and the Beam workers run in processes of their own either way). ``runs``
    commands, light, stay a process of their own."""
    if argv[0] == "runs":
        return subprocess.run(
            [sys.executable, "-m", "beam_pipeline", *argv],
            capture_output=True,
            text=True,
            timeout=900,
        )
    from beam_pipeline import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--no_progress"])
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def _records(pattern: str) -> list[bytes]:
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, pattern
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _epoch_losses(root: str, run_id: str) -> list[float]:
    """The training loss of each epoch, as the Trainer's TensorBoard callback logged it in
    ``model_run/train`` (what ``runs report`` draws)."""
    import tensorflow as tf

    pattern = os.path.join(root, "runs", run_id, "model_run", "train", "events.out.tfevents.*")
    files = sorted(glob.glob(pattern))
    assert files, pattern
    losses = {}
    for events in files:
        for event in tf.compat.v1.train.summary_iterator(events):
            for value in event.summary.value:
                if value.tag == "epoch_loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    return [losses[step] for step in sorted(losses)]


def _rows() -> tuple[list[str], list[list[str]]]:
    with open(PENGUINS, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(pipeline root, new data file): the bundled run (blessed model) with 60 new rows and
    one short row to score."""
    tmp = tmp_path_factory.mktemp("ct")
    header, body = _rows()
    new = tmp / "new.csv"
    with open(new, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(body[:60])
        f.write("Adelie,Torgersen,39.1\n")  # line 62: too few fields
    root = str(tmp / "root")
    proc = _cli(
        f"--pipeline_root={root}",
        "--run_id=first",
        "--no_tuner",
        "--no_infra_validator",
        f"--infer_data={new}",
        "--max_rejected_fraction=0.05",  # the short row
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, str(new)


def _check_scored(root: str, run_id: str) -> dict:
    row = _summary(root, run_id)["BulkInferrer"]
    assert row["status"] == "ok", row
    d = row["details"]
    assert (d["rows_read"], d["rows_scored"], d["rows_rejected"]) == (61, 60, 1)
    assert row["rows_in"] == {"all": 61} and row["rows_out"] == {"scored": 60}
    run_dir = os.path.join(root, "runs", run_id)
    from tensorflow_serving.apis import prediction_log_pb2

    logs = [
        prediction_log_pb2.PredictionLog.FromString(r)
        for r in _records(os.path.join(run_dir, "inference_result", "prediction_logs-*.gz"))
    ]
    assert len(logs) == d["rows_scored"]
    log = logs[0].predict_log
    assert log.request.model_spec.signature_name == "serving_default"
    assert len(log.request.inputs["examples"].string_val) == 1
    assert [dim.size for dim in log.response.outputs["scores"].tensor_shape.dim] == [1, 3]
    (rejected_file,) = glob.glob(os.path.join(run_dir, "inference_rejected", "rejected-*"))
    with open(rejected_file) as f:
        rejected = [json.loads(line) for line in f]
    assert [(r["line"], r["text"]) for r in rejected] == [(62, "Adelie,Torgersen,39.1")]
    return d


def test_new_data_is_scored_by_the_runs_blessed_model(trained):
    root, _ = trained
    stages = _summary(root, "first")
    assert stages["Evaluator"]["details"]["blessed"] is True
    details = _check_scored(root, "first")
    assert details["model"] == os.path.join(root, "runs", "first", "model")


def test_multi_processing_scores_the_same_and_joins_predictions_to_examples(trained):
    import tensorflow as tf

    root, new = trained
    proc = _cli(
        f"--pipeline_root={root}",
        "--run_id=mp",
        "--no_tuner",
        "--no_infra_validator",
        f"--infer_data={new}",
        "--infer_model=latest_blessed",
        "--infer_max_batch_size=7",
        "--infer_output_examples",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
        "--max_rejected_fraction=0.05",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    details = _check_scored(root, "mp")
    assert details["model"] == os.path.join(root, "runs", "first", "model")
    joined = [
        tf.train.Example.FromString(r)
        for r in _records(os.path.join(root, "runs", "mp", "inferred_examples", "*.tfrecord.gz"))
    ]
    assert len(joined) == 60
    for example in joined:
        features = example.features.feature
        assert len(features["prediction_scores"].float_list.value) == 3
        assert features["island"].bytes_list.value  # the example's own features stay


def test_a_row_the_model_refuses_is_rejected_alone_not_its_batch(trained):
    """The handler scores a refused batch again row by row (real model, real TF)."""
    import tensorflow as tf

    from transforms.bulk_inferrer import SavedModelHandler, _Refused

    root, _ = trained
    good = _records(os.path.join(root, "runs", "first", "examples", "eval", "*.tfrecord.gz"))[:3]
    bad = tf.train.Example().SerializeToString()  # none of the features the model parses
    handler = SavedModelHandler(os.path.join(root, "runs", "first", "model"))
    model = handler.load_model()
    results = list(handler.run_inference([good[0], bad, good[1], good[2]], model))
    refused = [r for r in results if isinstance(r.inference, _Refused)]
    assert [r.example for r in refused] == [bad]
    assert refused[0].inference.reason.startswith("the model refused it: ")
    assert [r.example for r in results if r not in refused] == [good[0], good[1], good[2]]


def _schema_types(root: str, run_id: str = "first") -> dict:
    """Feature name -> schema_pb2 type of the run's schema."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    with open(os.path.join(root, "runs", run_id, "schema", "schema.pbtxt")) as f:
        schema = text_format.Parse(f.read(), schema_pb2.Schema())
    return {f.name: f.type for f in schema.feature}


def _example(row: dict, types: dict) -> bytes:
    """A CSV row as a tf.Example, typed by the schema here (not by the product's reader);
    columns the schema lacks as strings."""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2

    example = tf.train.Example()
    for name, text in row.items():
        feature = example.features.feature[name]
        kind = types.get(name, schema_pb2.BYTES)
        if kind == schema_pb2.FLOAT:
            feature.float_list.value.append(float(text))
        elif kind == schema_pb2.INT:
            feature.int64_list.value.append(int(text))
        else:
            feature.bytes_list.value.append(text.encode())
    return example.SerializeToString()


def _model_outputs(model_dir: str, examples: list) -> dict:
    """The model's serving_default outputs for ``examples``: loaded here, called directly."""
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    (alias,) = signature.structured_input_signature[1]
    return {k: v.numpy() for k, v in signature(**{alias: tf.constant(examples)}).items()}


def _keyed_rows(count: int, start: int = 0) -> list[dict]:
    """``count`` complete penguin rows (from ``start``), each with a ``row_id`` column first
    (not in the schema: a key to join the predictions back) and without the label."""
    header, body = _rows()
    complete = [r for r in body if "NA" not in r and "" not in r][start : start + count]
    return [
        {"row_id": str(i), **{h: v for h, v in zip(header, r) if h != "species"}}
        for i, r in enumerate(complete)
    ]


def _write_csv(path, rows: list[dict]) -> str:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _prediction_logs(root: str, run_id: str) -> list:
    from tensorflow_serving.apis import prediction_log_pb2

    pattern = os.path.join(root, "runs", run_id, "inference_result", "prediction_logs-*.gz")
    return [prediction_log_pb2.PredictionLog.FromString(r) for r in _records(pattern)]


@pytest.mark.parametrize("data_format", ["csv", "tfrecord"])
def test_every_prediction_is_the_models_own_for_its_row(trained, tmp_path, data_format):
    """A SavedModel folder (--infer_model) scores CSV or TFRecord rows; a key column the
    schema lacks rides along in each PredictionLog's example, and each log's scores are
    what the model, loaded here, gives that row."""
    import numpy as np
    import tensorflow as tf

    root, _ = trained
    model = os.path.join(root, "runs", "first", "model")
    types = _schema_types(root)
    rows = _keyed_rows(40)
    examples = [_example(r, types) for r in rows]
    if data_format == "csv":
        data = _write_csv(tmp_path / "keyed.csv", rows)
    else:
        data = str(tmp_path / "keyed.tfrecord")
        with tf.io.TFRecordWriter(data) as w:
            for example in examples:
                w.write(example)
    run_id = f"folder-{data_format}"
    proc = _cli(
        f"--pipeline_root={root}", f"--run_id={run_id}", "--no_tuner", "--no_trainer",
        f"--infer_data={data}", f"--infer_model={model}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = _summary(root, run_id)["BulkInferrer"]
    assert (row["status"], row["rows_out"], row["details"]["model"]) == (
        "ok", {"scored": 40}, model,
    )  # fmt: skip
    expected = _model_outputs(model, examples)
    scored = {}
    for log in _prediction_logs(root, run_id):
        (request,) = log.predict_log.request.inputs.values()
        example = tf.train.Example.FromString(request.string_val[0])
        row_id = int(example.features.feature["row_id"].bytes_list.value[0])
        assert row_id not in scored
        scored[row_id] = {
            name: tf.make_ndarray(tensor)[0]
            for name, tensor in log.predict_log.response.outputs.items()
        }
    assert sorted(scored) == list(range(40))
    for i, outputs in scored.items():
        assert outputs.keys() == expected.keys()
        for name, value in outputs.items():
            np.testing.assert_allclose(value, expected[name][i], rtol=1e-5, atol=1e-6)


def test_an_unchanged_rerun_reuses_its_scores_and_changed_data_is_scored_again(trained, tmp_path):
    root, _ = trained
    model = os.path.join(root, "runs", "first", "model")
    data = _write_csv(tmp_path / "again.csv", _keyed_rows(12, start=100))
    args = [
        f"--pipeline_root={root}", "--no_tuner", "--no_trainer",
        f"--infer_data={data}", f"--infer_model={model}",
    ]  # fmt: skip
    statuses = []
    for run_id, rows in (("score-a", None), ("score-b", None), ("score-c", 13)):
        if rows:  # the same file, one more row
            _write_csv(tmp_path / "again.csv", _keyed_rows(rows, start=100))
        proc = _cli(*args, f"--run_id={run_id}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        row = _summary(root, run_id)["BulkInferrer"]
        statuses.append((row["status"], row["rows_out"]))
    assert statuses == [
        ("ok", {"scored": 12}),
        ("cached", {"scored": 12}),
        ("ok", {"scored": 13}),
    ]
    assert len(_prediction_logs(root, "score-c")) == 13


_UNREACHABLE_EVAL_CONFIG = """
model_specs { label_key: "species_xf" preprocessing_function_names: "transform_features" }
slicing_specs {}
metrics_specs {
  metrics {
    class_name: "SparseCategoricalAccuracy"
    threshold { value_threshold { lower_bound { value: 1.01 } } }
  }
}
"""


def test_a_model_the_evaluator_did_not_bless_scores_nothing(trained, tmp_path):
    root, new = trained
    config = tmp_path / "eval_config.pbtxt"
    config.write_text(_UNREACHABLE_EVAL_CONFIG)
    proc = _cli(
        f"--pipeline_root={root}", "--run_id=unblessed", "--no_tuner", "--no_infra_validator",
        f"--eval_config={config}", "--no_eval_baseline", f"--infer_data={new}",
        "--max_rejected_fraction=0.05",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = _summary(root, "unblessed")
    assert stages["Evaluator"]["details"]["blessed"] is False
    row = stages["BulkInferrer"]
    assert row["status"] == "skipped"
    assert row["note"].startswith("not scored: this run's model is not blessed")
    assert not os.path.exists(os.path.join(root, "runs", "unblessed", "inference_result"))
    # Its Trainer reused run one's model: judged NOT blessed here, that model stays the
    # pipeline's latest blessed one (warm start and latest_blessed still find it).
    assert stages["Trainer"]["status"] == "cached", stages["Trainer"]
    from beam_pipeline.metadata.store import MetadataStore

    with MetadataStore.for_pipeline_root(root) as store:
        found = store.latest_blessed_model()
    assert found is not None and found.uri == os.path.join(root, "runs", "first", "model")


def _bad_infer_input(case: str, root: str, folder) -> tuple[list[str], str]:
    """(the flags, the expected sentence's pattern) of one bad BulkInferrer input."""
    import tensorflow as tf

    model = os.path.join(root, "runs", "first", "model")
    rows = _keyed_rows(8)
    if case == "a column the model needs is missing":
        data = _write_csv(folder / "no_island.csv", [
            {k: v for k, v in r.items() if k != "island"} for r in rows
        ])  # fmt: skip
        return [f"--infer_data={data}", f"--infer_model={model}"], re.escape(
            f"--infer_data {data} has no column island, which the model (--infer_model "
            f"{model}) reads from every example; add it to the data (its columns: row_id, "
            "bill_length_mm, bill_depth_mm, flipper_length_mm, body_mass_g, sex, year)."
        ) + "$"
    if case == "every row refused by the model":
        data = str(folder / "no_island.tfrecord")
        types = _schema_types(root)
        with tf.io.TFRecordWriter(data) as w:
            for r in rows:
                w.write(_example({k: v for k, v in r.items() if k != "island"}, types))
        return [f"--infer_data={data}", f"--infer_model={model}"], (
            r"8 of 8 rows of --infer_data \(100\.00%\) were rejected, more than "
            r"--max_rejected_fraction=0\.0 \(first: the model refused it: feature island "
            r"\(string\) is missing, and the model's serving signature requires it\); fix "
            r"those rows \(all listed in .*inference_rejected\) or raise "
            r"--max_rejected_fraction\.$"
        )
    garbage = folder / "garbage_model"
    garbage.mkdir()
    (garbage / "saved_model.pb").write_bytes(b"not a SavedModel")
    data = _write_csv(folder / "keyed.csv", rows)
    return [f"--infer_data={data}", f"--infer_model={garbage}"], (
        rf"--infer_model {re.escape(str(garbage))} cannot be loaded as a SavedModel from "
        rf"{re.escape(str(garbage))} \(.*\); pass --infer_model a folder "
        r"tf.saved_model.save wrote, blessed or latest_blessed\.$"
    )


@pytest.mark.parametrize(
    "case",
    [
        "a column the model needs is missing",
        "every row refused by the model",
        "a saved_model.pb that is not one",
    ],
)
def test_bad_infer_inputs_are_one_sentence(trained, tmp_path, case):
    root, _ = trained
    flags, sentence = _bad_infer_input(case, root, tmp_path)
    run_id = "bad-" + re.sub(r"\W+", "-", case)
    proc = _cli(f"--pipeline_root={root}", f"--run_id={run_id}", "--no_tuner", "--no_trainer",
                *flags)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert re.match(sentence, lines[0][len("error: ") :]), lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    run_dir = os.path.join(root, "runs", run_id)
    assert not os.path.exists(os.path.join(run_dir, "inference_result"))
    assert glob.glob(os.path.join(run_dir, ".staging", "*")) == []
    assert _summary(root, run_id)["BulkInferrer"]["status"] == "failed"


def test_dataflow_job_graph_holds_run_inference(tmp_path):
    """Built offline (--dry_run) from the stage's own builder, as test_runners does."""
    from beam_pipeline.core.types import DataFormat
    from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
    from beam_pipeline.stages.bulk_inferrer.artifacts import (
        InferenceRejectedRows,
        InferenceResult,
        InferredExamples,
    )
    from beam_pipeline.stages.bulk_inferrer.executor import InferInputs, build_inference_pipeline
    from transforms import example_gen as eg

    header, _ = _rows()
    inputs = InferInputs((PENGUINS,), DataFormat.CSV, tuple(header))
    staging = {
        a: str(tmp_path / a.FOLDER)
        for a in (InferenceResult, InferenceRejectedRows, InferredExamples)
    }
    p = create_pipeline(
        parse_beam_args(
            [
                "--runner=DataflowRunner",
                "--dry_run=True",
                "--project=placeholder-project",
                "--region=us-central1",
                "--temp_location=gs://placeholder-bucket/tmp",
            ]
        )
    )
    settings = eg.ReadSettings(csv=eg.CsvFormat(null_values=("", "NA")))
    build_inference_pipeline(p, inputs, settings, "gs://placeholder-bucket/model", 512, staging)
    p.run().wait_until_finish()
    names = {t.unique_name for t in p.runner.proto_pipeline.components.transforms.values()}
    for step in (
        "Read",
        "Score/RunInference",
        "Score/RunInference/BeamML_RunInference",
        "WritePredictionLogs",
        "WriteRejected",
        "WriteExamples",
    ):
        assert any(n == step or n.startswith(step + "/") for n in names), (step, sorted(names))


def test_warm_start_records_run_ones_blessed_model_as_the_trainers_input(trained):
    root, _ = trained
    proc = _cli(
        f"--pipeline_root={root}",
        "--run_id=warm",
        "--no_tuner",
        "--no_infra_validator",
        "--no_evaluator",
        "--warm_start=latest_blessed",
        "--train_steps=5",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # fn_args.base_model reached the module (the bundled run_fn loads its weights): five
    # steps from run 1's model keep its accuracy, which five steps from scratch do not reach.
    trainer_row = _summary(root, "warm")["Trainer"]
    assert trainer_row["details"]["metrics"]["sparse_categorical_accuracy"] >= 0.9, trainer_row
    # The summary line and summary.json say it warm-started, and from which model.
    first_model = os.path.join(root, "runs", "first", "model")
    by = "--warm_start=latest_blessed"
    assert trainer_row["details"]["warm_start"] == {"model": first_model, "by": by}
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("Trainer: ")]
    assert line.endswith(f"; warm-started from {first_model} ({by})"), line
    lineage = _cli("runs", "lineage", os.path.join(root, "runs", "warm", "model"),
                   f"--pipeline_root={root}", "--json")  # fmt: skip
    assert lineage.returncode == 0, lineage.stderr
    upstream = json.loads(lineage.stdout)["upstream"]
    trainer = next(e for e in upstream if e["stage"] == "Trainer" and e["run_id"] == "warm")
    assert trainer["inputs"]["Model"]["uri"] == first_model, trainer["inputs"]
    # Run 1's Trainer is upstream too: the warm-started model descends from it.
    assert any(e["stage"] == "Trainer" and e["run_id"] == "first" for e in upstream)
    # The same five steps from scratch: what run 2 would do if the base model were ignored.
    cold = _cli(
        f"--pipeline_root={root}",
        "--run_id=cold",
        "--no_tuner",
        "--no_infra_validator",
        "--no_evaluator",
        "--train_steps=5",
    )
    assert cold.returncode == 0, cold.stderr[-3000:]
    # Training resumes where run 1 stopped: run 2's first epoch's loss is near run 1's
    # final loss, far nearer than a cold start's first epoch.
    first, warm, scratch = (_epoch_losses(root, r) for r in ("first", "warm", "cold"))
    assert (len(first), len(warm), len(scratch)) == (10, 5, 5)  # 100 steps: 10 x 10; 5: 5 x 1
    assert abs(warm[0] - first[-1]) < abs(scratch[0] - first[-1]) / 4, (first, warm, scratch)


def _recorded_model(root, blessed: bool) -> str:
    """A model of ``root``'s pipeline recorded in its store as the runner records one (its
    folder published; the look-up is under test, not the model): its folder."""
    from beam_pipeline.core.types import PUBLISHED_MARKER
    from beam_pipeline.metadata import ArtifactSpec, MetadataStore, RunStatus

    model = os.path.join(root, "runs", "trained", "model")
    os.makedirs(model)
    open(os.path.join(model, PUBLISHED_MARKER), "w").close()
    with MetadataStore.for_pipeline_root(root) as store:
        run = store.start_run("trained")
        execution = store.begin_execution(run, "Trainer", {}, "k-trainer", {})
        made = store.publish_outputs(execution, {"model": ArtifactSpec(model, "Model")})
        store.complete_execution(execution)
        store.set_custom_property(made["model"].id, "blessed", blessed)
        store.finish_run(run, RunStatus.COMPLETE)
    return model


@pytest.mark.parametrize(
    "which, recorded, sentence",
    [
        ("latest_blessed", None, "--warm_start latest_blessed found no latest blessed model of "
         "this pipeline in the metadata store of {root}; run once without --warm_start first"),
        ("latest_blessed", "blessed", "--warm_start latest_blessed: the latest blessed model "
         "recorded for this pipeline in the metadata store, {model}, is gone from disk"),
        ("latest", "unblessed", "--warm_start latest: the latest model recorded for this "
         "pipeline in the metadata store, {model}, is gone from disk"),
    ],
    ids=["none-recorded", "blessed-moved-away", "latest-moved-away"],
)  # fmt: skip
def test_warm_start_without_a_model_is_one_sentence(tmp_path, which, recorded, sentence):
    """No model to warm start from: none recorded (run once without it), or the recorded
    ones moved away (put them back: running without --warm_start would not bring them)."""
    root = str(tmp_path / "root")
    model = _recorded_model(root, recorded == "blessed") if recorded else ""
    if model:
        os.rename(model, str(tmp_path / "moved"))
    proc = _cli(f"--pipeline_root={root}", "--no_tuner", f"--warm_start={which}")
    assert proc.returncode == 2
    (error,) = proc.stderr.splitlines()
    assert error.startswith("error: " + sentence.format(root=root, model=model)), error
    assert sorted(os.listdir(os.path.join(root, "runs"))) == (["trained"] if model else [])


def test_a_remote_runner_refuses_local_infer_data_and_model():
    from beam_pipeline.config import BulkInferrerConfig, DataConfig, PipelineConfig
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.runtime.runners import check_remote_paths

    options = parse_beam_args(["--runner=DataflowRunner", "--project=p", "--region=r"])
    for inferrer, flag in (
        (BulkInferrerConfig(data="/local/new/*.csv"), "--infer_data /local/new/"),
        (BulkInferrerConfig(data="gs://b/new/*.csv", model="/local/model"), "--infer_model /l"),
    ):
        config = PipelineConfig(
            data=DataConfig(data="gs://b/data/*.csv"),
            pipeline_root="gs://b/root",
            bulk_inferrer=inferrer,
        )
        with pytest.raises(PipelineError, match=f"^{re.escape(flag)}.* is on this machine's disk"):
            check_remote_paths(config, options)


def _spans(tmp_path) -> list[str]:
    """Three halves of penguins.csv: two samples of one distribution, then the second with
    two thirds of its islands moved to Torgersen (drift)."""
    header, body = _rows()
    random.Random(1).shuffle(body)
    drifted = [list(r) for r in body[1::2]]
    for i, row in enumerate(drifted):
        if i % 3:
            row[1] = "Torgersen"
    paths = []
    for i, rows in enumerate((body[::2], body[1::2], drifted), start=1):
        path = tmp_path / f"span{i}.csv"
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows([header, *rows])
        paths.append(str(path))
    return paths


def test_drift_stops_the_drifted_run_naming_feature_distance_and_threshold(tmp_path):
    root = str(tmp_path / "root")
    common = [f"--pipeline_root={root}", "--csv_null_values=,NA", "--no_trainer", "--no_tuner"]
    first, undrifted, drifted = _spans(tmp_path)

    proc = _cli(f"--data={first}", "--run_id=s1", "--drift_threshold=0.1", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "drift: no baseline" in _summary(root, "s1")["Validation"]["note"]

    proc = _cli(f"--data={undrifted}", "--run_id=s2", "--drift_threshold=0.1", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    note = _summary(root, "s2")["Validation"]["note"]
    assert "drift checked against " + os.path.join(root, "runs", "s1", "statistics") in note
    assert "Split 'train': no anomalies;" in note

    proc = _cli(f"--data={drifted}", "--run_id=s3", "--drift_threshold=0.1", *common)
    assert proc.returncode == 3, proc.stderr[-3000:]
    found = re.search(
        r"train island: The L-infinity distance between 'train' and the baseline 'train' is "
        r"([0-9.]+), above the threshold 0\.1",
        proc.stderr,
    )
    assert found, proc.stderr[-3000:]
    assert float(found.group(1)) > 0.3
    # Only island moved: no other feature is named.
    assert "split train: island (High L-infinity distance" in proc.stderr
    assert "split eval" not in proc.stderr

    # Without the flag nothing is compared: the drifted data passes.
    proc = _cli(f"--data={drifted}", "--run_id=s4", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _span_folders(tmp_path, sizes=(50, 60, 70)) -> str:
    """span-1/, span-2/, span-3/ with 50, 60 and 70 penguin rows; the {SPAN} pattern."""
    header, body = _rows()
    for span, n in enumerate(sizes, start=1):
        folder = tmp_path / "spans" / f"span-{span}"
        folder.mkdir(parents=True)
        with open(folder / "data.csv", "w", newline="") as f:
            csv.writer(f).writerows([header, *body[:n]])
    return str(tmp_path / "spans" / "span-{SPAN}" / "*.csv")


@pytest.mark.parametrize(
    "flags, spans, rows",
    [
        ([], "span 3", 70),
        (["--span_window=2"], "spans 2-3", 130),
        (["--spans=1:2"], "spans 1-2", 110),
    ],
)
def test_span_pattern_reads_the_latest_span_a_window_or_a_range(tmp_path, flags, spans, rows):
    pattern = _span_folders(tmp_path)
    root = str(tmp_path / "root")
    proc = _cli(
        f"--data={pattern}", f"--pipeline_root={root}", "--run_id=r", "--csv_null_values=,NA",
        "--no_trainer", "--no_tuner", *flags,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    example_gen = _summary(root, "r")["ExampleGen"]
    assert example_gen["rows_in"] == {"all": rows}
    assert example_gen["note"].startswith(spans)


def test_span_errors_are_one_sentence(tmp_path):
    from beam_pipeline.core.errors import PipelineError
    from transforms.example_gen.input_files import resolve_spans

    pattern = _span_folders(tmp_path)
    proc = _cli(f"--data={pattern}", f"--pipeline_root={tmp_path / 'root'}", "--spans=2:5")
    assert proc.returncode != 0
    # A range past the last span is named as such (it was a gap, and a range of two
    # billion spans a MemoryError): a gap inside the spans is tested in test_spans.py.
    assert (
        f"--spans=2:5 reaches past the spans --data '{pattern}' has (1, 2, 3); pass FIRST:LAST "
        "within them, e.g. --spans=1:3." in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "root").exists()  # refused before anything is written
    with pytest.raises(PipelineError, match="--span_window 4 asks for 4 spans but"):
        resolve_spans(pattern, 4)
    with pytest.raises(PipelineError, match="matches no span"):
        resolve_spans(str(tmp_path / "nothing-{SPAN}" / "*.csv"))
    (tmp_path / "spans" / "span-03").mkdir()
    (tmp_path / "spans" / "span-03" / "data.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError, match=r"two matches for span 3 \(03 and 3\)"):
        resolve_spans(pattern)
    odd = tmp_path / "odd" / "q-1"
    odd.mkdir(parents=True)
    (odd / "part-2.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError, match="reads spans 1 and 2 in its"):
        resolve_spans(str(tmp_path / "odd" / "q-{SPAN}" / "part-{SPAN}.csv"))


def test_schema_comparators_skew_blocks_and_numeric_drift_uses_jensen_shannon(tmp_path):
    """Thresholds written in the schema (tfmd FeatureComparator), no flag: island's skew
    (eval against train, L-infinity) and body_mass_g's drift (Jensen-Shannon)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    root = str(tmp_path / "root")
    first, undrifted, _ = _spans(tmp_path)
    common = [f"--pipeline_root={root}", "--csv_null_values=,NA", "--no_trainer", "--no_tuner"]
    proc = _cli(f"--data={first}", "--run_id=s1", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    schema = schema_pb2.Schema()
    with open(os.path.join(root, "runs", "s1", "schema", "schema.pbtxt")) as f:
        text_format.Parse(f.read(), schema)
    features = {f.name: f for f in schema.feature}
    features["island"].skew_comparator.infinity_norm.threshold = 0.001
    features["body_mass_g"].drift_comparator.jensen_shannon_divergence.threshold = 0.001
    path = tmp_path / "schema.pbtxt"
    path.write_text(text_format.MessageToString(schema))

    proc = _cli(f"--data={undrifted}", f"--schema={path}", "--run_id=s2", *common)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert re.search(
        r"eval island: The L-infinity distance between 'eval' and the baseline 'train' is "
        r"[0-9.]+, above the threshold 0\.001 \(train/eval skew\)",
        proc.stderr,
    ), proc.stderr[-3000:]
    assert re.search(
        r"train body_mass_g: The approximate Jensen-Shannon divergence between 'train' and the "
        r"baseline 'train' is [0-9.]+, above the threshold 0\.001 \(drift from the previous run\)",
        proc.stderr,
    ), proc.stderr[-3000:]
