"""Schema inference from real statistics (GenerateStatistics over Arrow data), TFDV-style."""

from __future__ import annotations

import csv
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import PENGUIN_DIR, TESTDATA, statistics_in_process
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
from tensorflow_transform.tf_metadata import schema_utils

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import Schema
from beam_pipeline.stages.schema.inference import infer_schema, write_schema
from transforms import statistics as st

GOLDEN_PENGUINS = os.path.join(TESTDATA, "schema_penguins.pbtxt")


def _test_pipeline() -> test_pipeline.TestPipeline:
    """A TestPipeline on Beam's FnApiRunner (the DirectRunner minus its Prism attempt)."""
    return test_pipeline.TestPipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions([]))


def _stats(*batches: pa.RecordBatch, **options) -> statistics_pb2.DatasetFeatureStatisticsList:
    """Real statistics of ``batches`` (GenerateStatistics' steps, in-process)."""
    return statistics_in_process(batches, **options)


def _batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def _schema(text: str) -> schema_pb2.Schema:
    return text_format.Parse(text, schema_pb2.Schema())


def _penguin_batches() -> list[pa.RecordBatch]:
    """The bundled penguins CSV as ExampleGen types it: list<int64|float|binary>, NA = null."""
    table = pa_csv.read_csv(
        os.path.join(PENGUIN_DIR, "penguins.csv"),
        convert_options=pa_csv.ConvertOptions(null_values=["NA"], strings_can_be_null=True),
    )
    columns = []
    for column in table.columns:
        column = column.combine_chunks()
        if pa.types.is_string(column.type):
            values, value_type = column.cast(pa.binary()), pa.binary()
        elif pa.types.is_floating(column.type):
            values, value_type = column.cast(pa.float32()), pa.float32()
        else:
            values, value_type = column.cast(pa.int64()), pa.int64()
        rows = [None if v is None else [v] for v in values.to_pylist()]
        columns.append(pa.array(rows, pa.list_(value_type)))
    batch = pa.RecordBatch.from_arrays(columns, names=table.column_names)
    return [batch.slice(0, 150), batch.slice(150)]


I64 = pa.list_(pa.int64())
F32 = pa.list_(pa.float32())
BIN = pa.list_(pa.binary())


@pytest.mark.parametrize(
    "column, kwargs, expected",
    [
        pytest.param(
            pa.array([[1], [2], [3]], I64),
            {},
            'feature { name: "f" type: INT presence { min_fraction: 1.0 min_count: 1 } '
            "shape { dim { size: 1 } } }",
            id="required_single_int_gets_shape",
        ),
        pytest.param(
            pa.array([[1], [2], [3]], I64),
            {"infer_feature_shape": False},
            'feature { name: "f" type: INT presence { min_fraction: 1.0 min_count: 1 } '
            "value_count { min: 1 max: 1 } }",
            id="no_shape_inference_keeps_value_count",
        ),
        pytest.param(
            pa.array([[1.0], None, [2.5]], F32),
            {},
            'feature { name: "f" type: FLOAT presence { min_count: 1 } '
            "value_count { min: 1 max: 1 } }",
            id="optional_single_float_stays_varlen",
        ),
        pytest.param(
            pa.array([[1, 2], [3, 4]], I64),
            {},
            'feature { name: "f" type: INT presence { min_fraction: 1.0 min_count: 1 } '
            "value_count { min: 2 max: 2 } }",
            id="fixed_two_values",
        ),
        pytest.param(
            pa.array([[1], [1, 2, 3]], I64),
            {},
            'feature { name: "f" type: INT presence { min_fraction: 1.0 min_count: 1 } '
            "value_count { min: 1 } }",
            id="variable_length",
        ),
        pytest.param(
            pa.array([[1], []], I64),
            {},
            'feature { name: "f" type: INT presence { min_fraction: 1.0 min_count: 1 } }',
            id="empty_lists_no_value_count",
        ),
        pytest.param(
            pa.array([[b"b"], [b"a"], [b"b"], [b"a"]], BIN),
            {},
            'string_domain { name: "f" value: "a" value: "b" } '
            'feature { name: "f" type: BYTES domain: "f" '
            "presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } "
            "distribution_constraints { min_domain_mass: 0.99 } }",
            id="small_string_domain",
        ),
        pytest.param(
            pa.array([["é"], None, ["x"], ["x"], ["é"]], pa.large_list(pa.large_string())),
            {},
            'string_domain { name: "f" value: "x" value: "é" } '
            'feature { name: "f" type: BYTES domain: "f" presence { min_count: 1 } '
            "value_count { min: 1 max: 1 } distribution_constraints { min_domain_mass: 0.99 } }",
            id="large_string_optional_with_domain",
        ),
        pytest.param(
            pa.array([[b"a"], [b"b"], [b"c"], [b"a"]], BIN),
            {},
            'feature { name: "f" type: BYTES presence { min_fraction: 1.0 min_count: 1 } '
            "shape { dim { size: 1 } } }",
            id="mostly_unique_values_no_domain",
        ),
        pytest.param(
            pa.array([[b"a"], [b"b"], [b"c"]], BIN),
            {"max_string_domain_size": 2},
            'feature { name: "f" type: BYTES presence { min_fraction: 1.0 min_count: 1 } '
            "shape { dim { size: 1 } } }",
            id="too_many_values_for_a_domain",
        ),
        pytest.param(
            pa.array([[b"\xff"], [b"a"]], BIN),
            {},
            'feature { name: "f" type: BYTES presence { min_fraction: 1.0 min_count: 1 } '
            "shape { dim { size: 1 } } }",
            id="invalid_utf8_no_domain",
        ),
        pytest.param(
            pa.array([[b"a" * 2000], [b"a"]], BIN),
            {},
            'feature { name: "f" type: BYTES presence { min_fraction: 1.0 min_count: 1 } '
            "shape { dim { size: 1 } } }",
            id="large_values_no_domain",
        ),
        pytest.param(
            pa.array([None, None], I64),
            {},
            'feature { name: "f" type: INT presence { min_count: 0 } }',
            id="always_missing_is_kept_optional",
        ),
        pytest.param(
            pa.array([[1], None, [2], None, [3]], I64),
            {},
            'feature { name: "f" type: INT presence { min_count: 1 } '
            "value_count { min: 1 max: 1 } }",
            id="present_in_most_rows_keeps_a_minimum",
        ),
        pytest.param(
            pa.array([[1], None, None, [3], None], I64),
            {},
            'feature { name: "f" type: INT presence { min_count: 0 } '
            "value_count { min: 1 max: 1 } }",
            id="present_in_under_half_is_optional",
        ),
    ],
)
def test_infer_schema_table(column, kwargs, expected):
    schema = infer_schema(_stats(_batch(f=column)), **kwargs)
    assert schema == _schema(expected), text_format.MessageToString(schema)


def test_string_domain_lists_every_value_beyond_num_top_values():
    values = [f"v{i:02d}".encode() for i in range(60)]
    column = pa.array([[v] for v in values * 3], BIN)
    schema = infer_schema(_stats(_batch(f=column), num_top_values=5))
    (domain,) = schema.string_domain
    assert list(domain.value) == sorted(v.decode() for v in values)


def test_no_domain_when_the_rank_histogram_is_incomplete():
    column = pa.array([[f"v{i}".encode()] for i in range(50)], BIN)
    stats = _stats(_batch(f=column), num_rank_histogram_buckets=10)
    assert infer_schema(stats).string_domain == []


def test_penguins_golden_schema():
    schema = infer_schema(_stats(*_penguin_batches()))
    with open(GOLDEN_PENGUINS, encoding="utf-8") as f:
        golden = _schema(f.read())
    assert text_format.MessageToString(schema) == text_format.MessageToString(golden)


def test_tf_transform_reads_required_features_dense_and_optional_ones_sparse():
    schema = infer_schema(_stats(*_penguin_batches()))
    spec = schema_utils.schema_as_feature_spec(schema).feature_spec
    assert spec["species"] == tf.io.FixedLenFeature([1], tf.string)
    assert spec["year"] == tf.io.FixedLenFeature([1], tf.int64)
    assert spec["body_mass_g"] == tf.io.VarLenFeature(tf.int64)
    assert spec["bill_length_mm"] == tf.io.VarLenFeature(tf.float32)
    assert spec["sex"] == tf.io.VarLenFeature(tf.string)


def test_infer_schema_of_statistics_computed_in_a_pipeline():
    batches = _penguin_batches()
    with open(GOLDEN_PENGUINS, encoding="utf-8") as f:
        golden = _schema(f.read())
    with _test_pipeline() as p:
        schemas = (
            p
            | beam.Create(batches)
            | "Stats" >> st.GenerateStatistics("train")
            | "Schema" >> beam.Map(infer_schema)
        )
        assert_that(schemas, equal_to([golden]))


def test_penguin_presence_matches_the_csv():
    # The schema's presence follows the data: find the NAs with the csv module.
    with open(os.path.join(PENGUIN_DIR, "penguins.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    schema = infer_schema(_stats(*_penguin_batches()))
    assert sorted(f.name for f in schema.feature) == sorted(rows[0])
    for feature in schema.feature:
        has_na = any(row[feature.name] == "NA" for row in rows)
        assert (feature.presence.min_fraction == 1.0) == (not has_na), feature.name
        assert feature.HasField("shape") == (not has_na), feature.name
        if feature.type == schema_pb2.BYTES:
            (domain,) = [d for d in schema.string_domain if d.name == feature.domain]
            assert list(domain.value) == sorted({row[feature.name] for row in rows} - {"NA"}), (
                feature.name
            )


def test_write_and_read_schema_round_trip(tmp_path):
    schema = infer_schema(_stats(*_penguin_batches()))
    path = str(tmp_path / "schema" / "schema.pbtxt")
    write_schema(schema, path)
    with open(path, encoding="utf-8") as f:
        assert text_format.Parse(f.read(), schema_pb2.Schema()) == schema
    assert Schema.read_file(path) == schema
    assert Schema(str(tmp_path / "schema")).read() == schema


def test_read_schema_errors_name_the_file(tmp_path):
    bad = tmp_path / "schema.pbtxt"
    bad.write_text('feature { name: "x" type: NOT_A_TYPE }\n')
    with pytest.raises(PipelineError, match=f"Schema file {bad} is not a valid text-format"):
        Schema.read_file(str(bad))
    missing = str(tmp_path / "missing.pbtxt")
    with pytest.raises(PipelineError, match=f"Schema file {missing} does not exist"):
        Schema.read_file(missing)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: infer_schema(schema_pb2.Schema()),
            TypeError,
            "infer_schema takes a DatasetFeatureStatisticsList",
        ),
        (
            lambda: infer_schema(statistics_pb2.DatasetFeatureStatisticsList()),
            ValueError,
            "exactly one dataset .* got 0",
        ),
        (
            lambda: infer_schema(_stats(_batch(f=pa.array([[1]], I64))), max_string_domain_size=-1),
            ValueError,
            "max_string_domain_size must be an integer >= 0",
        ),
        (
            lambda: infer_schema(
                _stats(_batch(f=pa.array([[1]], I64))), max_string_domain_size="10"
            ),
            ValueError,
            "max_string_domain_size must be an integer >= 0",
        ),
        (lambda: write_schema("schema", "x.pbtxt"), TypeError, "write_schema takes a Schema"),
    ],
    ids=["wrong_proto", "no_dataset", "negative_domain_size", "string_domain_size", "write_type"],
)
def test_argument_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
