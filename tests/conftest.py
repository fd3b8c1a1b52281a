"""Shared test helpers: pipelines on the real DirectRunner and readers of artifacts."""

from __future__ import annotations

import glob
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(REPO, "tests", "testdata")
PENGUIN_DIR = os.path.join(REPO, "beam_pipeline", "examples", "penguin")


def make_pipeline(*beam_args: str):
    """A Beam pipeline on the DirectRunner (FnApiRunner, no Prism attempt)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.beam_options import create_pipeline

    return create_pipeline(PipelineOptions(list(beam_args)))


def read_examples(pattern: str) -> list:
    """All tf.train.Examples in the gzip TFRecord files matching ``pattern``."""
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, f"no files match {pattern}"
    out = []
    for f in files:
        for record in tf.data.TFRecordDataset(f, compression_type="GZIP"):
            out.append(tf.train.Example.FromString(record.numpy()))
    return out


def feature_value(example, name: str):
    """The single value of ``name`` in ``example`` (None if missing)."""
    f = example.features.feature.get(name)
    if f is None:
        return None
    kind = f.WhichOneof("kind")
    values = list(getattr(f, kind).value) if kind else []
    return values[0] if values else None


@pytest.fixture
def tmp_root(tmp_path):
    return str(tmp_path)
