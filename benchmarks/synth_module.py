"""Module file for the dataset of make_dataset.py: a ``preprocessing_fn`` doing what real
ones do (mean imputation and z-scores, bucketizing, vocabularies of low- and
high-cardinality strings, a bag of words over free text, a date feature, the label).

Works whether a feature arrives dense (``[batch, 1]``, a required column under
``infer_feature_shape``) or sparse (a column with missing values).
"""

import tensorflow as tf
import tensorflow_transform as tft

_FLOAT_KEYS = ["age", "income", "rating"]
_LOW_CARD_KEYS = ["country", "device", "plan"]
_LABEL_KEY = "label"


def _dense(x, default):
    """A rank-1 tensor of ``x`` (one value per row), missing values set to ``default``."""
    if isinstance(x, tf.sparse.SparseTensor):
        x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
    return tf.reshape(x, [-1])


def _map_values(x, fn):
    """``fn`` applied to the values of ``x``, dense or sparse."""
    if isinstance(x, tf.sparse.SparseTensor):
        return tf.SparseTensor(x.indices, fn(x.values), x.dense_shape)
    return fn(x)


def _z_mean_imputed(x, fn=None):
    """z-score over the present values; missing values get 0, the mean (mean imputation
    with a single analyzer pass)."""
    x = _map_values(
        x, lambda v: tf.cast(v, tf.float32) if fn is None else fn(tf.cast(v, tf.float32))
    )
    return _dense(tft.scale_to_z_score(x), 0.0)


def preprocessing_fn(inputs):
    out = {}
    for key in _FLOAT_KEYS:
        out[key + "_z"] = _z_mean_imputed(inputs[key])
    out["income_log_z"] = _z_mean_imputed(inputs["income"], tf.math.log1p)
    out["num_purchases_z"] = _z_mean_imputed(inputs["num_purchases"], tf.math.log1p)
    out["tenure_bucket"] = tft.bucketize(tf.cast(_dense(inputs["tenure_days"], 0), tf.float32), 10)

    for key in _LOW_CARD_KEYS:
        out[key + "_id"] = tft.compute_and_apply_vocabulary(
            _dense(inputs[key], ""), num_oov_buckets=1
        )
    # High cardinality: a capped vocabulary, the rest hashed into OOV buckets.
    out["user_id_id"] = tft.compute_and_apply_vocabulary(
        _dense(inputs["user_id"], ""), top_k=20_000, num_oov_buckets=100
    )

    date = _dense(inputs["signup_date"], "2015-01-01")
    out["signup_month"] = tf.strings.to_number(tf.strings.substr(date, 5, 2), tf.int64)
    out["signup_year"] = tf.strings.to_number(tf.strings.substr(date, 0, 4), tf.int64)

    comment = tf.strings.lower(_dense(inputs["comment"], ""))
    words = tf.strings.split(tf.strings.regex_replace(comment, r"[^a-z' ]", " ")).to_sparse()
    out["comment_words"] = tft.compute_and_apply_vocabulary(words, top_k=500, num_oov_buckets=1)
    out["comment_len_z"] = tft.scale_to_z_score(tf.cast(tf.strings.length(comment), tf.float32))

    out[_LABEL_KEY] = tf.cast(_dense(inputs[_LABEL_KEY], 0), tf.int64)
    return out
