"""FnArgs, DataAccessor and the hyperparameters file on the penguin fixture (real tfx-bsl, TF)."""

from __future__ import annotations

import json

import conftest_trainer
import pytest

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.stages.trainer.training import build_training_job
from trainer import DataAccessor, FnArgs, TunerFnResult, load_hyperparameters, run_trainer

penguin_run_dir = conftest_trainer.penguin_run_dir

TRANSFORMED_FEATURES = {
    "bill_length_mm_xf",
    "bill_depth_mm_xf",
    "flipper_length_mm_xf",
    "body_mass_g_xf",
    "island_xf",
    "sex_xf",
}
# One row in three of the 344 goes to eval (conftest_trainer).
TRAIN_ROWS, EVAL_ROWS = 229, 115


def _schema(run_dir):
    import tensorflow_transform as tft

    return tft.TFTransformOutput(run_dir.path(Artifact.TRANSFORM_GRAPH)).transformed_metadata.schema


def test_tf_dataset_factory_gives_batched_features_and_label(penguin_run_dir):
    import tensorflow as tf
    from tfx_bsl.public import tfxio

    pattern = penguin_run_dir.path(Artifact.TRANSFORMED_EXAMPLES, "train", "*")
    dataset = DataAccessor().tf_dataset_factory(
        [pattern],
        tfxio.TensorFlowDatasetOptions(batch_size=16, label_key="species_xf"),
        _schema(penguin_run_dir),
    )
    features, label = next(iter(dataset))
    assert set(features) == TRANSFORMED_FEATURES
    assert features["bill_length_mm_xf"].dtype == tf.float32
    assert features["island_xf"].dtype == tf.int64
    assert features["bill_length_mm_xf"].shape == (16,)
    assert label.shape == (16,) and label.dtype == tf.int64
    assert set(label.numpy()) <= {0, 1, 2}


def test_one_epoch_reads_every_example_once(penguin_run_dir):
    from tfx_bsl.public import tfxio

    pattern = penguin_run_dir.path(Artifact.TRANSFORMED_EXAMPLES, "eval", "*.tfrecord.gz")
    dataset = DataAccessor().tf_dataset_factory(
        pattern,  # a single pattern string works as well as a list
        tfxio.TensorFlowDatasetOptions(batch_size=50, num_epochs=1, shuffle=False),
        _schema(penguin_run_dir),
    )
    assert sum(int(batch["species_xf"].shape[0]) for batch in dataset) == EVAL_ROWS


def test_record_batch_factory_gives_arrow_batches(penguin_run_dir):
    from tfx_bsl.public import tfxio

    pattern = penguin_run_dir.path(Artifact.TRANSFORMED_EXAMPLES, "train", "*")
    batches = list(
        DataAccessor().record_batch_factory(
            [pattern], tfxio.RecordBatchesOptions(batch_size=100, num_epochs=1, shuffle=False)
        )
    )
    assert sum(b.num_rows for b in batches) == TRAIN_ROWS
    assert set(batches[0].schema.names) == TRANSFORMED_FEATURES | {"species_xf"}


@pytest.mark.parametrize(
    "pattern, schema, match",
    [
        ("{root}/nowhere/*.gz", True, "matches no file"),
        ([], True, "empty list of file patterns"),
        ("{root}/transformed_examples/train/*", False, "without a schema"),
    ],
)
def test_data_accessor_errors(penguin_run_dir, pattern, schema, match):
    from tfx_bsl.public import tfxio

    if isinstance(pattern, str):
        pattern = pattern.format(root=penguin_run_dir.root)
    with pytest.raises(PipelineError, match=match):
        DataAccessor().tf_dataset_factory(
            pattern,
            tfxio.TensorFlowDatasetOptions(batch_size=4),
            _schema(penguin_run_dir) if schema else None,
        )


def test_fn_args_deprecated_twins_hold_the_same_values():
    args = FnArgs(schema_path="s.pbtxt", transform_graph_path="graph")
    assert (args.schema_file, args.transform_output) == ("s.pbtxt", "graph")
    old_names = FnArgs(schema_file="s.pbtxt", transform_output="graph")
    assert (old_names.schema_path, old_names.transform_graph_path) == ("s.pbtxt", "graph")
    with pytest.raises(ValueError, match="deprecated twin"):
        FnArgs(schema_path="a", schema_file="b")


def test_tuner_fn_result_is_tfx_shaped():
    result = TunerFnResult(tuner="t", fit_kwargs={"x": 1})
    assert result.tuner == "t" and result.fit_kwargs == {"x": 1}
    assert TunerFnResult._fields == ("tuner", "fit_kwargs")


# A run_fn that records what it received and saves the smallest model that serves.
_RECORDING_MODULE = """
import json, os
import tensorflow as tf

def run_fn(fn_args):
    seen = {
        name: getattr(fn_args, name)
        for name in ("working_dir", "train_files", "eval_files", "train_steps", "eval_steps",
                     "schema_path", "schema_file", "transform_graph_path", "transform_output",
                     "serving_model_dir", "eval_model_dir", "model_run_dir", "base_model",
                     "hyperparameters", "custom_config")
    }
    seen["num_examples"] = dict(fn_args.num_examples)
    seen["replicas"] = fn_args.strategy.num_replicas_in_sync
    seen["accessor"] = type(fn_args.data_accessor).__name__
    with open(os.path.join(fn_args.model_run_dir, "seen.json"), "w") as f:
        json.dump(seen, f)
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x}, input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, fn_args.serving_model_dir,
                        signatures={"serving_default": module.f})
    return {"custom_metric": 0.5}
"""


def test_run_fn_receives_tfx_fn_args_from_the_run_directory(penguin_run_dir, tmp_path):
    module = tmp_path / "recording_module.py"
    module.write_text(_RECORDING_MODULE)
    hp_file = tmp_path / "hp.json"
    hp_file.write_text(json.dumps({"learning_rate": 0.01, "num_layers": 2}))
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    config = conftest_trainer.penguin_config(
        str(module),
        train_steps=7,
        eval_steps=3,
        hyperparameters=str(hp_file),
        custom_config='{"a": [1, 2]}',
    )

    result = run_trainer(build_training_job(config, run_dir))

    seen = json.loads((tmp_path / "root/runs/fixture/model_run/seen.json").read_text())
    model_run = run_dir.path(Artifact.MODEL_RUN)
    assert seen["train_steps"] == 7 and seen["eval_steps"] == 3
    assert seen["working_dir"] == seen["model_run_dir"] == model_run
    assert seen["train_files"] == [
        run_dir.path(Artifact.TRANSFORMED_EXAMPLES, "train", "*.tfrecord.gz")
    ]
    assert (
        seen["schema_path"] == seen["schema_file"] == run_dir.path(Artifact.SCHEMA, "schema.pbtxt")
    )
    assert (
        seen["transform_graph_path"]
        == seen["transform_output"]
        == run_dir.path(Artifact.TRANSFORM_GRAPH)
    )
    assert seen["custom_config"] == {"a": [1, 2]}
    assert seen["hyperparameters"]["values"] == {"learning_rate": 0.01, "num_layers": 2}
    assert seen["num_examples"] == {"train": TRAIN_ROWS, "eval": EVAL_ROWS}
    assert seen["base_model"] is None and seen["replicas"] == 1
    assert seen["accessor"] == "DataAccessor"
    assert result.metrics == {"custom_metric": 0.5}  # a dict run_fn returns is the metrics
    assert result.module_kind == "run_fn" and not result.reused


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"space": [{"class_name": "Nope", "config": {}}], "values": {}}', "not a Keras Tuner"),
    ],
)
def test_bad_hyperparameters_files(tmp_path, content, match):
    path = tmp_path / "hp.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PipelineError, match=match):
        load_hyperparameters(str(path))


def test_hyperparameters_file_accepts_a_tuner_config(tmp_path):
    import keras_tuner

    hp = keras_tuner.HyperParameters()
    hp.Choice("learning_rate", [1e-2, 1e-3], default=1e-3)
    path = tmp_path / "best_hyperparameters.json"
    path.write_text(json.dumps(hp.get_config()))
    loaded = keras_tuner.HyperParameters.from_config(load_hyperparameters(str(path)))
    assert loaded.get("learning_rate") == 1e-3


def _transformed(run_dir, split: str) -> list[dict]:
    import glob

    import tensorflow as tf
    import tensorflow_transform as tft

    spec = tft.TFTransformOutput(run_dir.path(Artifact.TRANSFORM_GRAPH)).transformed_feature_spec()
    files = sorted(glob.glob(run_dir.path(Artifact.TRANSFORMED_EXAMPLES, split, "*.tfrecord.gz")))
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    parsed = tf.io.parse_example(records, spec)
    return [
        {k: tf.reshape(v[i], [-1]).numpy().tolist() for k, v in parsed.items()}
        for i in range(len(records))
    ]


def _raw_through_the_graph(run_dir, split: str) -> list[dict]:
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(run_dir.path(Artifact.TRANSFORM_GRAPH))
    records = conftest_trainer.read_raw_examples(run_dir, split)
    raw = tf.io.parse_example(records, output.raw_feature_spec())
    out = output.transform_raw_features(raw, drop_unused_features=True)
    return [
        {k: tf.reshape(v[i], [-1]).numpy().tolist() for k, v in out.items()}
        for i in range(len(records))
    ]


@pytest.mark.parametrize("split,rows", [("train", TRAIN_ROWS), ("eval", EVAL_ROWS)])
def test_each_splits_transformed_examples_are_its_own_rows_in_order(penguin_run_dir, split, rows):
    # Both splits go through one tf.Transform step (one load of the graph), each batch
    # tagged with its split: each split's file must hold that split's rows, in its order.
    got = _transformed(penguin_run_dir, split)
    want = _raw_through_the_graph(penguin_run_dir, split)
    assert len(got) == len(want) == rows
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for key in g:
            assert g[key] == pytest.approx(w[key], rel=1e-6), key


def test_one_transform_job_loads_the_transform_graph_once_and_pickles_no_batch(
    penguin_run_dir, tmp_path, monkeypatch
):
    """Also: no RecordBatch is pickled on its way from the reader to the writer. Beam sizes
    sampled elements of every PCollection for its metrics by encoding them; the batches'
    PCollections are typed, so tfrecords.RecordBatchCoder sizes them by their buffers."""
    import pickle

    import apache_beam as beam
    import pyarrow as pa
    import tensorflow_transform.beam as tft_beam
    from apache_beam.coders import coders
    from apache_beam.metrics.metric import MetricsFilter
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from beam_pipeline.core.types import Split
    from beam_pipeline.core.user_module import get_preprocessing_fn, load_module
    from transforms.transform import TransformExamples, WriteTransformedExamples

    pickled = []  # per pickling by Beam's coders: was it a RecordBatch

    class CountingPickle:
        HIGHEST_PROTOCOL, loads = pickle.HIGHEST_PROTOCOL, staticmethod(pickle.loads)

        @staticmethod
        def dumps(value, *args, **kwargs):
            pickled.append(isinstance(value, pa.RecordBatch))
            return pickle.dumps(value, *args, **kwargs)

    monkeypatch.setattr(coders, "pickle", CountingPickle)
    schema = schema_pb2.Schema()
    with open(penguin_run_dir.path(Artifact.SCHEMA, "schema.pbtxt")) as f:
        text_format.Parse(f.read(), schema)
    preprocessing_fn = get_preprocessing_fn(
        load_module(conftest_trainer.PENGUIN_MODULE), conftest_trainer.PENGUIN_MODULE
    )
    examples = {
        split: penguin_run_dir.path(Artifact.EXAMPLES, split.value, "*.tfrecord.gz")
        for split in (Split.TRAIN, Split.EVAL)
    }
    p = beam.Pipeline(runner="DirectRunner", argv=["--direct_running_mode=in_memory"])
    with tft_beam.Context(temp_dir=str(tmp_path / "tft")):
        result = p | TransformExamples(examples, schema, preprocessing_fn)
        for split, batches in result.transformed.items():
            _ = batches | f"Write[{split.value}]" >> WriteTransformedExamples(str(tmp_path), split)
    job = p.run()
    job.wait_until_finish()
    assert pickled and not any(pickled), "RecordBatches were pickled (sized by Beam's fallback)"
    loads = job.metrics().query(MetricsFilter().with_name("graph_load_seconds"))["distributions"]
    # One load for the analysis's phase, one for the transform of both splits (a step
    # per split loaded it once more for each).
    assert sum(d.committed.count for d in loads) == 2


def test_a_feature_named_like_the_transforms_split_column_is_transformed_as_any_other(tmp_path):
    # Each batch's split travels through tf.Transform in a passthrough column: an input
    # column and an output of that very name (__beam_pipeline_split__) failed the
    # Transform (tf.Transform's "passthrough_keys overlap with schema keys", blamed on the
    # preprocessing_fn; an AssertionError in its record batch encoder).
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from beam_pipeline.core.types import Split
    from transforms.transform import TransformExamples, WriteTransformedExamples

    name = "__beam_pipeline_split__"
    rows = {Split.TRAIN: [(i, float(i)) for i in range(1, 8)], Split.EVAL: [(100, 1.0), (200, 2.0)]}
    examples = {}
    for split, values in rows.items():
        path = tmp_path / "examples" / split.value / "data.tfrecord.gz"
        path.parent.mkdir(parents=True)
        with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
            for tag, v in values:
                example = tf.train.Example()
                example.features.feature[name].int64_list.value.append(tag)
                example.features.feature["v"].float_list.value.append(v)
                writer.write(example.SerializeToString())
        examples[split] = str(path.parent / "*.tfrecord.gz")
    schema = text_format.Parse(
        f'feature {{ name: "{name}" type: INT presence {{ min_fraction: 1 }}'
        " shape { dim { size: 1 } } }"
        ' feature { name: "v" type: FLOAT presence { min_fraction: 1 } shape { dim { size: 1 } } }',
        schema_pb2.Schema(),
    )

    def preprocessing_fn(inputs):
        return {name: inputs[name] * 10, "v_z": tft.scale_to_z_score(inputs["v"])}

    out = tmp_path / "transformed"
    with beam.Pipeline(runner="DirectRunner", argv=["--direct_running_mode=in_memory"]) as p:
        with tft_beam.Context(temp_dir=str(tmp_path / "tft")):
            result = p | TransformExamples(examples, schema, preprocessing_fn)
            for split, batches in result.transformed.items():
                _ = batches | f"Write[{split.value}]" >> WriteTransformedExamples(str(out), split)
    for split, values in rows.items():
        files = sorted((out / split.value).glob("*"))
        got = [
            tf.train.Example.FromString(r.numpy())
            for r in tf.data.TFRecordDataset([str(f) for f in files], compression_type="GZIP")
        ]
        assert [sorted(e.features.feature) for e in got] == [[name, "v_z"]] * len(values)
        assert [e.features.feature[name].int64_list.value[0] for e in got] == [
            tag * 10 for tag, _ in values
        ]
