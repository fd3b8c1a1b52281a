"""tf.Transform's unweighted vocabularies counted per batch (transforms/transform.py's
_VocabularyAccumulate) against tf.Transform's own step, on real tf.Transform and Beam:
the same vocabularies and frequencies, and tf.Transform's analyzer cache read by it."""

from __future__ import annotations

import contextlib
import os

# Several batches (desired_batch_size), ties in count broken by the token, a token seen
# once, a multi-valued feature, a weighted vocabulary (tf.Transform's step either way).
ROWS = [
    {"s": t, "m": [t, "x", t], "w": float(i % 3)}
    for i, t in enumerate(["b", "a", "c", "a", "b", "d", "a", "c", "b", "e"] * 7 + ["z"])
]


def _preprocessing_fn(inputs):
    import tensorflow_transform as tft

    s, m = inputs["s"], inputs["m"]
    tft.vocabulary(s, vocab_filename="freq", store_frequency=True)
    tft.vocabulary(m, vocab_filename="multi", store_frequency=True)
    tft.vocabulary(s, vocab_filename="weighted", weights=inputs["w"], store_frequency=True)
    return {"w": inputs["w"]}


@contextlib.contextmanager
def _tf_transforms_own_step():
    """tf.Transform's vocabulary step registered for a while, in place of whichever is."""
    from tensorflow_transform import analyzer_nodes
    from tensorflow_transform.beam import analyzer_impls, common

    import transforms.transform  # noqa: F401 - registers this package's step

    register = common.register_ptransform(analyzer_nodes.VocabularyAccumulate)
    registered = common._PTRANSFORM_BY_OPERATION_DEF_SUBCLASS[analyzer_nodes.VocabularyAccumulate]
    before, _ = registered.get_ptransform(None)
    register(analyzer_impls._VocabularyAccumulateImpl)
    try:
        yield
    finally:
        register(before)


def _analyze(tmp_path, name, datasets, cache_in=None, cached=()):
    """Analyzes ``datasets`` (key -> rows) with the analyzer cache, those ``cached`` read
    from ``cache_in``: (every vocabulary file's lines, the folder the cache was written
    to, the labels of the job's steps)."""
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    import transforms.transform  # noqa: F401 - registers this package's step

    metadata = dataset_metadata.DatasetMetadata(
        schema_utils.schema_from_feature_spec(
            {
                "s": tf.io.FixedLenFeature([], tf.string),
                "m": tf.io.VarLenFeature(tf.string),
                "w": tf.io.FixedLenFeature([], tf.float32),
            }
        )
    )
    out, cache_out = tmp_path / name, str(tmp_path / f"{name}-cache")
    keys = {k: tft_beam.analyzer_cache.DatasetKey(k) for k in datasets}
    p = beam.Pipeline(runner="DirectRunner", argv=["--direct_running_mode=in_memory"])
    with tft_beam.Context(temp_dir=str(tmp_path / f"{name}-tmp"), desired_batch_size=16):
        data = {
            keys[k]: None if k in cached else p | f"Rows[{k}]" >> beam.Create(rows)
            for k, rows in datasets.items()
        }
        cache = p | tft_beam.analyzer_cache.ReadAnalysisCacheFromFS(
            cache_in or str(tmp_path / f"{name}-no-cache"), [keys[k] for k in cached]
        )
        transform_fn, cache_written = (data, cache, metadata) | tft_beam.AnalyzeDatasetWithCache(
            _preprocessing_fn
        )
        _ = transform_fn | tft_beam.WriteTransformFn(str(out))
        _ = cache_written | tft_beam.analyzer_cache.WriteAnalysisCacheToFS(
            p, cache_out, list(keys.values())
        )
    labels = _labels(p)
    p.run().wait_until_finish()
    assets = out / "transform_fn" / "assets"
    return (
        {f: (assets / f).read_bytes().decode().splitlines() for f in sorted(os.listdir(assets))},
        cache_out,
        labels,
    )


def _labels(p) -> list[str]:
    labels, stack = [], [p.transforms_stack[0]]
    while stack:
        node = stack.pop()
        labels.append(node.full_label)
        stack.extend(node.parts)
    return labels


def test_unweighted_vocabularies_and_their_frequencies_are_tf_transforms(tmp_path):
    both = {"a": ROWS[:40], "b": ROWS[40:]}
    with _tf_transforms_own_step():
        theirs, their_cache, their_labels = _analyze(tmp_path, "theirs", both)
    # This package's step analyzes b, and reads a's analysis from tf.Transform's cache.
    ours, _, our_labels = _analyze(tmp_path, "ours", both, their_cache, cached=["a"])
    assert ours == theirs
    assert ours["freq"][:3] == ["21 b", "21 a", "14 c"] and ours["freq"][-1] == "1 z"
    # The job counted each batch's tokens first, where tf.Transform's step counts each one.
    assert any(label.endswith("CountTokensPerBatch") for label in our_labels)
    assert not any(label.endswith("CountTokensPerBatch") for label in their_labels)
