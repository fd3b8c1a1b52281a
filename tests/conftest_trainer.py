"""A small run directory for the trainer tests, built with real tf.Transform.

It has the layout the data stages write (``schema/schema.pbtxt``, ``transform_graph/``,
``examples/{train,eval}/*.tfrecord.gz``, ``transformed_examples/{train,eval}/*.tfrecord.gz``),
made from the bundled ``penguins.csv`` (``NA`` = missing) and the bundled module's
``preprocessing_fn``: tf.Transform analyzes the train split on the DirectRunner, the saved
transform graph then transforms both splits in plain TensorFlow.

Test modules use the session fixture by binding it to a module name (one build is shared)::

    import conftest_trainer

    penguin_run_dir = conftest_trainer.penguin_run_dir

    def test_x(penguin_run_dir): ...

``build_penguin_run_dir(root)`` is also callable from a plain process (the subprocess tests).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from beam_pipeline.config import BUNDLED_EXAMPLE_DIR, PipelineConfig  # noqa: E402
from beam_pipeline.core.types import Artifact  # noqa: E402
from beam_pipeline.run_dir import RunDirectory  # noqa: E402

__all__ = [
    "PENGUIN_MODULE",
    "PENGUIN_CSV",
    "RUN_ID",
    "build_penguin_run_dir",
    "penguin_run_dir",
    "read_raw_examples",
    "copy_run_dir",
    "penguin_config",
    "classify_accuracy",
    "run_python",
]

PENGUIN_MODULE = os.path.join(BUNDLED_EXAMPLE_DIR, "penguin_module.py")
PENGUIN_CSV = os.path.join(BUNDLED_EXAMPLE_DIR, "penguins.csv")
RUN_ID = "fixture"
# One row in three goes to eval: 115 eval rows, 229 train rows.
_EVAL_EVERY = 3

_STRING = ("species", "island", "sex")
_FLOAT = ("bill_length_mm", "bill_depth_mm")
_INT = ("flipper_length_mm", "body_mass_g", "year")
_OPTIONAL = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex")


def _raw_feature_spec():
    import tensorflow as tf

    spec = {}
    for name in _STRING + _FLOAT + _INT:
        dtype = tf.string if name in _STRING else tf.float32 if name in _FLOAT else tf.int64
        # As the data stages' schema inference does: required single values get shape [1],
        # optional ones stay variable-length (sparse in tf.Transform).
        spec[name] = (
            tf.io.VarLenFeature(dtype) if name in _OPTIONAL else tf.io.FixedLenFeature([1], dtype)
        )
    return spec


def _row_to_example(row):
    import tensorflow as tf

    feature = {}
    for name, value in row.items():
        if value in ("", "NA"):
            continue
        if name in _STRING:
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        elif name in _FLOAT:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(value)]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _row_to_instance(row):
    """A tf.Transform instance dict: a list of values per feature, empty when missing."""
    inst = {}
    for name, value in row.items():
        if value in ("", "NA"):
            inst[name] = []
        elif name in _STRING:
            inst[name] = [value.encode()]
        else:
            inst[name] = [float(value) if name in _FLOAT else int(value)]
    return inst


def _write_gzip_records(path, records):
    import tensorflow as tf

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for r in records:
            w.write(r)


def _transformed_example(features, i):
    import tensorflow as tf

    feature = {}
    for name, values in features.items():
        v = values[i]
        if v.dtype.kind == "f":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def build_penguin_run_dir(pipeline_root: str, run_id: str = RUN_ID) -> RunDirectory:
    """Writes a run directory with the data stages' artifacts for the penguin data.

    Returns:
      the :class:`RunDirectory` (``<pipeline_root>/runs/<run_id>``).
    """
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from google.protobuf import text_format
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    from beam_pipeline.beam_options import create_pipeline
    from beam_pipeline.examples.penguin import penguin_module

    run_dir = RunDirectory.create(pipeline_root, run_id)
    with open(PENGUIN_CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    examples = [_row_to_example(r) for r in rows]
    splits = {
        "train": [e for i, e in enumerate(examples) if i % _EVAL_EVERY],
        "eval": [e for i, e in enumerate(examples) if not i % _EVAL_EVERY],
    }
    raw_spec = _raw_feature_spec()
    raw_schema = schema_utils.schema_from_feature_spec(raw_spec)
    os.makedirs(run_dir.path(Artifact.SCHEMA))
    with open(run_dir.path(Artifact.SCHEMA, "schema.pbtxt"), "w") as f:
        f.write(text_format.MessageToString(raw_schema))
    for split, exs in splits.items():
        _write_gzip_records(
            run_dir.path(Artifact.EXAMPLES, split, "data-00000-of-00001.tfrecord.gz"),
            [e.SerializeToString() for e in exs],
        )

    # tf.Transform analysis of the train split (instance dicts keep this small and quick).
    instances = [_row_to_instance(r) for i, r in enumerate(rows) if i % _EVAL_EVERY]
    metadata = dataset_metadata.DatasetMetadata(raw_schema)
    tmp = tempfile.mkdtemp(prefix="tft-tmp-")
    options = PipelineOptions(["--runner=DirectRunner"])
    with create_pipeline(options) as p, tft_beam.Context(temp_dir=tmp, force_tf_compat_v1=False):
        data = p | "Instances" >> beam.Create(instances)
        transform_fn = (data, metadata) | tft_beam.AnalyzeDataset(penguin_module.preprocessing_fn)
        _ = transform_fn | tft_beam.WriteTransformFn(run_dir.path(Artifact.TRANSFORM_GRAPH))
    # Like the Transform stage, no raw metadata is written beside the graph (TFX writes
    # transform_graph/metadata/); the trainer's export falls back to schema.pbtxt.
    shutil.rmtree(tmp, ignore_errors=True)

    tft_output = tft.TFTransformOutput(run_dir.path(Artifact.TRANSFORM_GRAPH))
    for split, exs in splits.items():
        parsed = tf.io.parse_example([e.SerializeToString() for e in exs], raw_spec)
        out = {k: v.numpy() for k, v in tft_output.transform_raw_features(parsed).items()}
        _write_gzip_records(
            run_dir.path(Artifact.TRANSFORMED_EXAMPLES, split, "data-00000-of-00001.tfrecord.gz"),
            [_transformed_example(out, i) for i in range(len(exs))],
        )
    return run_dir


def step_hints(proto) -> dict[str, dict[str, bytes]]:
    """Transform name -> its environment's resource hints, for each transform with one."""
    components = proto.components
    return {
        t.unique_name: dict(components.environments[t.environment_id].resource_hints)
        for t in components.transforms.values()
        if t.environment_id
    }


def read_raw_examples(run_dir: RunDirectory, split: str = "eval") -> list[bytes]:
    """The serialized raw tf.Examples of one split."""
    import glob

    import tensorflow as tf

    files = sorted(glob.glob(run_dir.path(Artifact.EXAMPLES, split, "*.tfrecord.gz")))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def copy_run_dir(src: RunDirectory, pipeline_root: str, run_id: str = RUN_ID) -> RunDirectory:
    """A copy of the data artifacts of ``src`` under another pipeline root (a fresh run)."""
    dst = RunDirectory.create(pipeline_root, run_id)
    for artifact in (
        Artifact.SCHEMA,
        Artifact.EXAMPLES,
        Artifact.TRANSFORM_GRAPH,
        Artifact.TRANSFORMED_EXAMPLES,
    ):
        shutil.copytree(src.path(artifact), dst.path(artifact))
    return dst


@pytest.fixture(scope="session")
def penguin_run_dir(tmp_path_factory) -> RunDirectory:
    """The penguin data artifacts, built once per test session (read-only: copy to train).

    Each test module binds this fixture under its own name, which pytest treats as separate
    fixtures; they share one build through a fixed folder of the session's temp dir.
    """
    root = tmp_path_factory.getbasetemp() / "penguin_data"
    built = root / "BUILT"
    if not built.exists():
        shutil.rmtree(root, ignore_errors=True)
        build_penguin_run_dir(str(root))
        built.write_text("")
    return RunDirectory(str(root), RUN_ID)


def penguin_config(module_file: str = PENGUIN_MODULE, **trainer_kwargs) -> PipelineConfig:
    """A PipelineConfig for ``module_file`` with the given TrainerConfig fields."""
    import dataclasses

    from beam_pipeline.config import TrainerConfig

    return PipelineConfig(
        module_file=module_file,
        trainer=dataclasses.replace(TrainerConfig(), **trainer_kwargs),
    )


def classify_accuracy(model_dir: str, raw_examples: list[bytes]) -> float:
    """Accuracy of a serving SavedModel on raw tf.Examples (species from its own vocabulary).

    Uses only the SavedModel folder: its ``serving_default`` signature and the ``species``
    vocabulary asset it carries, so it checks what a serving system would see.
    """
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(model_dir)
    scores = loaded.signatures["serving_default"](examples=tf.constant(raw_examples))["scores"]
    with open(os.path.join(model_dir, "assets", "species"), "rb") as f:
        vocabulary = f.read().split(b"\n")
    truth = [
        vocabulary.index(
            tf.train.Example.FromString(r).features.feature["species"].bytes_list.value[0]
        )
        for r in raw_examples
    ]
    return float(np.mean(np.argmax(scores.numpy(), axis=1) == np.array(truth)))


def run_python(code: str, *args: str, timeout: float = 240) -> dict:
    """Runs ``code`` in a fresh Python process (repo and tests importable).

    Returns:
      the JSON object printed on the last line of its standard output.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
