#!/usr/bin/env python3
"""A taxi scoring model that both BulkInferrers load: TFX 1.16's and beam-pipeline's.

Usage (in the venv that setup_tfx_anchor.sh makes):
  python taxi_infer_model.py --examples 'DIR/*.gz' --out MODEL_DIR

Why a model of its own: the taxi module's Trainer fails under Keras 3 in TFX 1.16, and
tfx-bsl's RunInference loads a SavedModel through TF1's session loader
(``tf.compat.v1.saved_model.loader.load``), which does not restore beam-pipeline's Keras 3
exports (nor a Keras 3 model saved with tf.saved_model.save: "Could not find variable
embedding/embeddings"). This one is a small Keras 2 (tf_keras) model (numeric features, hashed-string embeddings, two
hidden layers, a sigmoid "big tip" score) with fixed random weights (seed 7; a throughput
benchmark needs no training) wrapped in a ``tf.Module`` whose ``serving_default`` takes
serialized tf.Examples (parsed inside the signature), saved with ``tf.saved_model.save``.
Each feature's type (int64/float/bytes) is read from the first examples of ``--examples``,
so the model parses what ExampleGen wrote. Before writing, it checks that TF1's session
loader restores it and that both loaders give the same scores.
"""
import argparse
import glob
import os
import shutil

import numpy as np
import tensorflow as tf
import tf_keras as keras  # Keras 2: Keras 3's variables share names, which TF1's loader cannot restore

NUMERIC = [
    'fare', 'trip_miles', 'trip_seconds', 'pickup_latitude', 'pickup_longitude',
    'dropoff_latitude', 'dropoff_longitude', 'trip_start_hour', 'trip_start_day',
    'trip_start_month', 'pickup_community_area', 'dropoff_community_area',
]
STRINGS = ['payment_type', 'company']
BUCKETS = 64


def feature_kinds(pattern):
    """{feature: 'int64_list' | 'float_list' | 'bytes_list'} from the first 2000 examples."""
    files = sorted(glob.glob(pattern))
    assert files, pattern
    kinds = {}
    for i, record in enumerate(tf.data.TFRecordDataset(files[:1], compression_type='GZIP')):
        if i >= 2000:
            break
        example = tf.train.Example.FromString(record.numpy())
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof('kind')
            if kind:
                kinds.setdefault(name, kind)
    return kinds


def build(kinds):
    dtype = {'int64_list': tf.int64, 'float_list': tf.float32, 'bytes_list': tf.string}
    spec = {n: tf.io.VarLenFeature(dtype[kinds[n]]) for n in NUMERIC + STRINGS}

    keras.utils.set_random_seed(7)
    numeric_in = keras.Input((len(NUMERIC),), name='numeric')
    string_in = [keras.Input((1,), dtype='int64', name=n) for n in STRINGS]
    x = keras.layers.Normalization(axis=-1, mean=0.0, variance=1e4)(numeric_in)
    embedded = [keras.layers.Flatten()(keras.layers.Embedding(BUCKETS, 8)(s)) for s in string_in]
    x = keras.layers.Concatenate()([x, *embedded])
    x = keras.layers.Dense(64, activation='relu')(x)
    x = keras.layers.Dense(32, activation='relu')(x)
    out = keras.layers.Dense(1, activation='sigmoid')(x)
    keras_model = keras.Model([numeric_in, *string_in], out)

    def first(sparse, default, rows):
        # A missing feature (absent or an empty list) is the default; the first value otherwise.
        dense = tf.sparse.to_dense(tf.sparse.reset_shape(sparse, [rows, tf.maximum(sparse.dense_shape[1], 1)]), default_value=default)
        return dense[:, 0]

    class Scorer(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = keras_model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='examples')])
        def serve(self, examples):
            rows = tf.shape(examples, out_type=tf.int64)[0]
            parsed = tf.io.parse_example(examples, spec)
            numeric = tf.stack([tf.cast(first(parsed[n], tf.zeros([], parsed[n].dtype), rows), tf.float32) for n in NUMERIC], axis=1)
            strings = [tf.strings.to_hash_bucket_fast(first(parsed[n], '', rows), BUCKETS)[:, None] for n in STRINGS]
            return {'scores': self.model([numeric, *strings])}

    return Scorer()


def check(model_dir, records):
    """TF1's session loader (tfx-bsl's) and tf.saved_model.load give the same scores."""
    batch = tf.constant(records)
    v2 = tf.saved_model.load(model_dir).signatures['serving_default'](examples=batch)['scores'].numpy()
    with tf.compat.v1.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as s:
        meta = tf.compat.v1.saved_model.loader.load(s, ['serve'], model_dir)
        sig = meta.signature_def['serving_default']
        v1 = s.run(sig.outputs['scores'].name, {sig.inputs['examples'].name: records})
    assert v1.shape == (len(records), 1), v1.shape
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    return v1


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--examples', required=True, help="glob of gzip tf.Example TFRecords")
    p.add_argument('--out', required=True)
    a = p.parse_args()
    kinds = feature_kinds(a.examples)
    missing = [n for n in NUMERIC + STRINGS if n not in kinds]
    assert not missing, f'no values of {missing} in the first examples'
    scorer = build(kinds)
    tmp = a.out + '.tmp'
    shutil.rmtree(tmp, ignore_errors=True)
    tf.saved_model.save(scorer, tmp, signatures={'serving_default': scorer.serve})
    files = sorted(glob.glob(a.examples))
    records = [r.numpy() for r, _ in zip(tf.data.TFRecordDataset(files[:1], compression_type='GZIP'), range(256))]
    scores = check(tmp, records)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f'{a.out}: TF1 session loader OK; scores of 256 examples in [{scores.min():.3f}, {scores.max():.3f}]')


if __name__ == '__main__':
    main()
