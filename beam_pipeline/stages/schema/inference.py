"""Schema inference from statistics, as TFDV's ``infer_schema`` and TFX's SchemaGen do.

For each feature of the (single) dataset in a ``DatasetFeatureStatisticsList``:

* ``type``: INT, FLOAT or BYTES (STRING statistics become BYTES).
* ``presence``: ``{min_fraction: 1.0 min_count: 1}`` for a feature never missing;
  ``{min_count: 1}`` for one present in at least half of the examples; ``{min_count: 0}``
  (optional, no minimum) for a rarer one. TFDV gives every present feature
  ``min_count: 1``, which turns sampling noise into a blocking anomaly: a column filled in
  1 row of 10,000 is absent from most eval splits by chance. At half or more, a split of
  30 or more examples with none of them has a chance below 1e-9 at the train rate, so its
  absence is a real change (a dropped or emptied column) and still blocks; a rarer
  feature whose present fraction drops by more than 0.1 is still reported, as a warning,
  by the comparison with the train split (see :mod:`beam_pipeline.stages.validation.checks`).
* ``value_count``: ``{min: k max: k}`` when every present row has exactly k >= 1 values,
  ``{min: 1}`` when every present row has at least one value, nothing otherwise.
* ``shape {dim {size: 1}}`` instead of ``value_count`` when ``infer_feature_shape`` and the
  feature is never missing and always has exactly one value: tf.Transform then gives a
  dense ``[batch, 1]`` tensor; every other feature stays VarLen (a SparseTensor), exactly
  as TFX's SchemaGen.
* A string domain (schema-level ``string_domain`` named after the feature, referenced by
  the feature's ``domain``) for a STRING feature with at most ``max_string_domain_size``
  distinct values, all valid UTF-8, each seen in at least two rows on average (ids and
  free text get none). The values come from the rank histogram, which lists
  every distinct value while there are no more of them than its size (1000 by default in
  ``GenerateStatistics``); when it does not list them all, no domain is inferred.

A feature that is missing in every row (``num_non_missing == 0``) is kept, optional
(``presence {min_count: 0}``), with the type its statistics carry (BYTES for a CSV column
that is always empty), so module files that read it still run.

An inferred string domain tolerates 1% of values outside it
(``distribution_constraints {min_domain_mass: 0.99}``): rare categories that one split has
and the train split lacks are reported, not blocking; a real shift still blocks.

Example::

    schema = infer_schema(Statistics(uri).read(Split.TRAIN))
    write_schema(schema, "schema/schema.pbtxt")    # Schema(folder).read() reads it back

It runs on the launcher, between the data phase (which computed the statistics) and the
Transform (which needs the schema to build its graph): a proto in, a proto out, no Beam.
"""

from __future__ import annotations

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from beam_pipeline.core import fileio
from beam_pipeline.stages.common.feature_stats import (
    common_stats,
    feature_name,
    single_dataset,
    string_values,
)

__all__ = ["infer_schema", "write_schema"]

_StatsType = statistics_pb2.FeatureNameStatistics.Type
_SCHEMA_TYPE = {
    _StatsType.INT: schema_pb2.INT,
    _StatsType.FLOAT: schema_pb2.FLOAT,
    _StatsType.STRING: schema_pb2.BYTES,
    _StatsType.BYTES: schema_pb2.BYTES,
}
# Labels GenerateStatistics (and TFDV) show instead of values that are not text.
_PLACEHOLDER_LABELS = frozenset({"__BYTES_VALUE__", "__LARGE_BYTES__"})


def _check_max_string_domain_size(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"max_string_domain_size must be an integer >= 0, got {value!r}.")


def infer_schema(
    stats: statistics_pb2.DatasetFeatureStatisticsList,
    infer_feature_shape: bool = True,
    max_string_domain_size: int = 100,
) -> schema_pb2.Schema:
    """Infers a schema from the statistics of one split, as TFDV's ``infer_schema``.

    Args:
      stats: statistics with exactly one dataset (e.g. from ``GenerateStatistics``).
      infer_feature_shape: give required single-valued features ``shape {dim {size: 1}}``
        so that tf.Transform feeds them as dense tensors.
      max_string_domain_size: largest number of distinct values of a STRING feature that
        gets a string domain.

    Returns:
      The schema; features in the statistics' order.

    Raises:
      TypeError: ``stats`` is not a DatasetFeatureStatisticsList.
      ValueError: ``stats`` does not hold exactly one dataset, or
        ``max_string_domain_size`` is negative.
    """
    dataset = single_dataset(stats, "stats", "infer_schema")
    _check_max_string_domain_size(max_string_domain_size)
    schema = schema_pb2.Schema()
    for feature_stats in dataset.features:
        schema_type = _SCHEMA_TYPE.get(feature_stats.type)
        common = common_stats(feature_stats)
        if schema_type is None:
            continue  # STRUCT features
        name = feature_name(feature_stats)
        feature = schema.feature.add(name=name, type=schema_type)
        if common.num_non_missing == 0:
            # A column that is empty in every row stays in the schema, optional, as TFX
            # keeps it: module files that read it (e.g. TFX's taxi module) must still run.
            feature.presence.min_count = 0
            continue
        required = common.num_missing == 0
        if required:
            feature.presence.min_fraction = 1.0
        present = common.num_non_missing / (common.num_non_missing + common.num_missing)
        feature.presence.min_count = 1 if present >= _MIN_FRACTION_FOR_MIN_COUNT else 0
        if common.min_num_values > 0:
            if common.min_num_values == common.max_num_values:
                feature.value_count.min = common.min_num_values
                feature.value_count.max = common.max_num_values
            else:
                feature.value_count.min = 1
        if (
            infer_feature_shape
            and required
            and common.min_num_values == 1
            and common.max_num_values == 1
        ):
            feature.shape.dim.add(size=1)  # shape and value_count are one oneof
        domain = _inferred_string_domain(feature_stats, max_string_domain_size)
        if domain is not None:
            schema.string_domain.add(name=name, value=domain)
            feature.domain = name
            feature.distribution_constraints.min_domain_mass = _MIN_DOMAIN_MASS
    return schema


# A feature present in at least this share of the train examples must be present in every
# split (presence.min_count 1); a rarer one is optional with no minimum (see the module
# docstring for why).
_MIN_FRACTION_FOR_MIN_COUNT = 0.5

# The share of a split's values that must fall inside an inferred string domain.
_MIN_DOMAIN_MASS = 0.99

# A string domain is inferred only when values repeat: on average every value in at least
# this many rows.
_MIN_ROWS_PER_DOMAIN_VALUE = 2


def _inferred_string_domain(
    feature_stats: statistics_pb2.FeatureNameStatistics, max_size: int
) -> list[str] | None:
    if feature_stats.type != _StatsType.STRING:
        return None
    string_stats = feature_stats.string_stats
    values = string_values(feature_stats)
    if (
        not values
        or string_stats.invalid_utf8_count > 0
        or len(values) > max_size
        or string_stats.unique > len(values)  # the histogram does not list every value
        # Ids and free text (values mostly unique) are no category: a domain learned from
        # them would flag nearly every new row of another split as an unseen value.
        or len(values) * _MIN_ROWS_PER_DOMAIN_VALUE > string_stats.common_stats.num_non_missing
        or _PLACEHOLDER_LABELS.intersection(values)
    ):
        return None
    return sorted(values)


def write_schema(schema: schema_pb2.Schema, path: str) -> None:
    """Writes ``schema`` as a text proto (``schema.pbtxt``, as TFX's SchemaGen does), which
    :meth:`beam_pipeline.engine.artifacts.Schema.read` reads.

    Args:
      schema: the schema to write.
      path: the file to create or overwrite; its folder is created when missing;
        ``gs://`` paths work.

    Raises:
      TypeError: ``schema`` is not a tensorflow_metadata Schema.
    """
    if not isinstance(schema, schema_pb2.Schema):
        raise TypeError(f"write_schema takes a Schema, got {type(schema).__name__}.")
    fileio.write_file(path, text_format.MessageToString(schema))
