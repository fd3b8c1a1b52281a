"""Validation of real statistics against an inferred schema: one table row per anomaly."""

from __future__ import annotations

import copy
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import TESTDATA, statistics_in_process
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from beam_pipeline.stages.schema.inference import infer_schema
from beam_pipeline.stages.validation.anomalies import (
    blocking_anomalies,
    format_anomalies,
    is_blocking,
)
from beam_pipeline.stages.validation.checks import validate_statistics
from transforms import statistics as st

INFO = anomalies_pb2.AnomalyInfo
GOLDEN_ANOMALIES = os.path.join(TESTDATA, "anomalies_eval.pbtxt")
N = 200

TYPES = {
    "age": pa.list_(pa.int64()),
    "color": pa.list_(pa.binary()),
    "score": pa.list_(pa.float32()),
    "tags": pa.large_list(pa.large_binary()),
}


def _base_rows() -> dict[str, list]:
    """Training rows: age and color always single-valued, score 20% missing, tags 1-3."""
    rng = np.random.default_rng(0)
    colors = [b"red", b"green", b"blue"]
    return {
        "age": [[int(v)] for v in rng.integers(18, 80, N)],
        "color": [[colors[i]] for i in rng.integers(0, 3, N)],
        "score": [None if i % 5 == 0 else [float(v)] for i, v in enumerate(rng.normal(size=N))],
        "tags": [[b"t%d" % t for t in rng.integers(0, 4, k)] for k in rng.integers(1, 4, N)],
    }


def _stats(rows: dict[str, list], name: str = "eval", types=None):
    """Real statistics of ``rows`` (GenerateStatistics' steps, in-process)."""
    types = {**TYPES, **(types or {})}
    batch = pa.RecordBatch.from_arrays(
        [pa.array(v, types.get(k, pa.list_(pa.int64()))) for k, v in rows.items()], names=list(rows)
    )
    return statistics_in_process([batch], name)


def _schema() -> schema_pb2.Schema:
    return infer_schema(_stats(_base_rows(), "train"))


def _edit(**changes):
    """Training rows with some columns replaced (None value: column dropped)."""
    rows = _base_rows()
    for name, change in changes.items():
        if change is None:
            del rows[name]
        else:
            rows[name] = change(rows.get(name))
    return rows


def _summary(anomalies) -> dict[str, tuple[str, list[str]]]:
    return {
        name: (INFO.Severity.Name(info.severity), [INFO.Type.Name(r.type) for r in info.reason])
        for name, info in anomalies.anomaly_info.items()
    }


CASES = [
    pytest.param(_edit(), {}, None, {}, id="clean"),
    pytest.param(
        _edit(score=None),
        {},
        None,
        {"score": ("ERROR", ["SCHEMA_MISSING_COLUMN"])},
        id="column_dropped",
    ),
    pytest.param(
        _edit(score=lambda r: [None] * N),
        {},
        None,
        {"score": ("ERROR", ["FEATURE_TYPE_NOT_PRESENT"])},
        id="column_all_missing",
    ),
    pytest.param(
        _edit(age=lambda r: [None if i < 3 else v for i, v in enumerate(r)]),
        {},
        None,
        {"age": ("ERROR", ["FEATURE_TYPE_LOW_FRACTION_PRESENT", "INVALID_FEATURE_SHAPE"])},
        id="required_feature_with_missing_values",
    ),
    pytest.param(
        _edit(age=lambda r: [[float(v[0]) + 0.5] for v in r]),
        {"age": pa.list_(pa.float32())},
        None,
        {"age": ("ERROR", ["UNEXPECTED_DATA_TYPE"])},
        id="int_became_float",
    ),
    pytest.param(
        _edit(color=lambda r: [[7] for _ in r]),
        {"color": pa.list_(pa.int64())},
        None,
        {"color": ("ERROR", ["UNEXPECTED_DATA_TYPE"])},
        id="bytes_became_int",
    ),
    pytest.param(
        _edit(color=lambda r: r[:-12] + [[b"purple"]] * 10 + [[b"teal"]] * 2),
        {},
        None,
        {"color": ("ERROR", ["ENUM_TYPE_UNEXPECTED_STRING_VALUES"])},
        id="unseen_strings",
    ),
    pytest.param(
        _edit(extra=lambda r: [[1]] * N),
        {},
        None,
        {"extra": ("ERROR", ["SCHEMA_NEW_COLUMN"])},
        id="new_column",
    ),
    pytest.param(_edit(extra=lambda r: [None] * N), {}, None, {}, id="new_column_without_values"),
    pytest.param(
        _edit(age=lambda r: [[1, 2]] + r[1:]),
        {},
        None,
        {"age": ("ERROR", ["INVALID_FEATURE_SHAPE"])},
        id="shape_feature_two_values",
    ),
    pytest.param(
        _edit(score=lambda r: [[1.0, 2.0]] + r[1:]),
        {},
        None,
        {"score": ("ERROR", ["FEATURE_TYPE_HIGH_NUMBER_VALUES"])},
        id="too_many_values",
    ),
    pytest.param(
        _edit(tags=lambda r: [[]] + r[1:]),
        {},
        None,
        {"tags": ("ERROR", ["FEATURE_TYPE_LOW_NUMBER_VALUES"])},
        id="too_few_values",
    ),
    pytest.param(
        _edit(score=lambda r: [None if i % 2 else v for i, v in enumerate(r)]),
        {},
        _base_rows(),
        {"score": ("WARNING", ["COMPARATOR_L_INFTY_HIGH"])},
        id="missing_fraction_jump_vs_baseline",
    ),
    pytest.param(
        # 20% missing as in the baseline, in other rows.
        _edit(score=lambda r: [None if i % 5 == 1 else [0.5] for i in range(N)]),
        {},
        _base_rows(),
        {},
        id="missing_fraction_same_as_baseline",
    ),
]


@pytest.mark.parametrize("rows, types, baseline_rows, expected", CASES)
def test_anomaly_table(rows, types, baseline_rows, expected):
    baseline = None if baseline_rows is None else _stats(baseline_rows, "train")
    anomalies = validate_statistics(_stats(rows, types=types), _schema(), baseline)
    assert _summary(anomalies) == expected
    assert is_blocking(anomalies) == any(sev == "ERROR" for sev, _ in expected.values())
    assert anomalies.baseline == _schema()
    for name, info in anomalies.anomaly_info.items():
        assert list(info.path.step) == [name]
        assert info.short_description and info.description


def test_unseen_string_description_names_values_and_shares():
    rows = _edit(color=lambda r: r[:-12] + [[b"purple"]] * 10 + [[b"teal"]] * 2)
    info = validate_statistics(_stats(rows), _schema()).anomaly_info["color"]
    assert info.short_description == "Unexpected string values"
    assert info.description == (
        "Examples contain values missing from the schema: purple (~5%), teal (~1%)."
    )


def test_missing_fraction_jump_description_and_threshold():
    rows = _edit(score=lambda r: [None if i % 2 else v for i, v in enumerate(r)])
    # 20% of the rows miss score in the baseline; here every odd row (50%) and the
    # multiples of 5 inherited from the baseline rows that were kept.
    current = sum(1 for r in rows["score"] if r is None) / N
    stats, baseline = _stats(rows), _stats(_base_rows(), "train")
    info = validate_statistics(stats, _schema(), baseline).anomaly_info["score"]
    assert f"missing in {current:.1%} of the examples of 'eval'" in info.description
    assert "but in 20.0% of the baseline 'train'" in info.description
    # A threshold above the jump silences it.
    assert not validate_statistics(
        stats, _schema(), baseline, max_missing_fraction_jump=current - 0.2 + 0.01
    ).anomaly_info


@pytest.mark.parametrize(
    "min_domain_mass, unseen_rows, anomalous",
    [(0.9, 10, False), (0.9, 30, True), (1.0, 1, True)],
)
def test_min_domain_mass_tolerates_some_unseen_values(min_domain_mass, unseen_rows, anomalous):
    schema = _schema()
    color = next(f for f in schema.feature if f.name == "color")
    color.distribution_constraints.min_domain_mass = min_domain_mass
    rows = _edit(color=lambda r: r[:-unseen_rows] + [[b"purple"]] * unseen_rows)
    assert ("color" in validate_statistics(_stats(rows), schema).anomaly_info) == anomalous


def test_schema_edits_change_what_is_checked():
    schema = _schema()
    features = {f.name: f for f in schema.feature}
    features["score"].deprecated = True  # a deprecated feature is not checked
    features["tags"].ClearField("presence")  # an optional feature may be absent
    features["color"].domain = "no_such_domain"
    rows = _edit(score=None, tags=None)
    assert _summary(validate_statistics(_stats(rows), schema)) == {
        "color": ("ERROR", ["INVALID_DOMAIN_SPECIFICATION"])
    }


def test_empty_split_is_blocking_data_missing():
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    stats.datasets.add(name="eval", num_examples=0)
    anomalies = validate_statistics(stats, _schema())
    assert anomalies.data_missing
    assert anomalies.dataset_anomaly_info.reason[0].type == INFO.DATASET_LOW_NUM_EXAMPLES
    assert is_blocking(anomalies)
    assert format_anomalies("eval", anomalies).splitlines()[1].startswith("  ERROR   (split)")


def test_golden_anomalies():
    rows = _edit(
        color=lambda r: r[:-12] + [[b"purple"]] * 10 + [[b"teal"]] * 2,
        score=None,
        extra=lambda r: [[b"x"]] * N,
    )
    anomalies = validate_statistics(_stats(rows, types={"extra": pa.list_(pa.binary())}), _schema())
    with open(GOLDEN_ANOMALIES, encoding="utf-8") as f:
        golden = text_format.Parse(f.read(), anomalies_pb2.Anomalies())
    assert text_format.MessageToString(anomalies) == text_format.MessageToString(golden)


def test_format_anomalies_one_line_per_feature():
    rows = _edit(color=lambda r: r[:-12] + [[b"purple"]] * 10 + [[b"teal"]] * 2, score=None)
    text = format_anomalies(
        "eval", validate_statistics(_stats(rows), _schema(), _stats(_base_rows(), "train"))
    )
    lines = text.splitlines()
    assert lines[0] == "Split 'eval': 2 anomalous feature(s), 2 blocking."
    assert lines[1].startswith("  ERROR   color: Unexpected string values: ")
    assert "purple (~5%)" in lines[1] and lines[1].endswith("[ENUM_TYPE_UNEXPECTED_STRING_VALUES]")
    # score: dropped (ERROR) and, against the baseline, 100% missing instead of 20% (WARNING).
    assert lines[2].startswith("  ERROR   score: Multiple errors: ")
    assert lines[2].endswith("[SCHEMA_MISSING_COLUMN,COMPARATOR_L_INFTY_HIGH]")
    assert len(lines) == 3
    assert format_anomalies("train", anomalies_pb2.Anomalies()) == "Split 'train': no anomalies."


def test_blocking_anomalies_names_only_the_splits_that_block():
    # The run's exit-3 message: train is clean, eval has unseen strings and a dropped column,
    # test has only a warning (missing values jump against train).
    schema, train = _schema(), _stats(_base_rows(), "train")
    bad_eval = _edit(color=lambda r: r[:-12] + [[b"purple"]] * 10 + [[b"teal"]] * 2, score=None)
    warn_only = _edit(score=lambda r: [None if i % 2 else v for i, v in enumerate(r)])
    by_split = {
        "train": validate_statistics(train, schema),
        "eval": validate_statistics(_stats(bad_eval), schema, train),
        "test": validate_statistics(_stats(warn_only, "test"), schema, train),
    }
    assert not is_blocking(by_split["train"]) and not is_blocking(by_split["test"])
    assert blocking_anomalies(by_split) == (
        "split eval: color (Unexpected string values), score (Multiple errors)"
    )
    assert blocking_anomalies({"train": by_split["train"]}) == ""


@pytest.mark.parametrize(
    "severities, blocking",
    [([], False), (["WARNING"], False), (["WARNING", "ERROR"], True), (["ERROR"], True)],
)
def test_is_blocking(severities, blocking):
    anomalies = anomalies_pb2.Anomalies()
    for i, severity in enumerate(severities):
        anomalies.anomaly_info[f"f{i}"].severity = INFO.Severity.Value(severity)
    assert is_blocking(anomalies) == blocking


def _test_pipeline() -> test_pipeline.TestPipeline:
    """A TestPipeline on Beam's FnApiRunner (the DirectRunner minus its Prism attempt)."""
    return test_pipeline.TestPipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions([]))


def _batch(rows):
    return pa.RecordBatch.from_arrays(
        [pa.array(v, TYPES.get(k, pa.list_(pa.int64()))) for k, v in rows.items()], names=list(rows)
    )


@pytest.mark.parametrize("with_baseline", [False, True], ids=["no_baseline", "baseline"])
def test_validate_statistics_computed_in_a_pipeline(with_baseline):
    schema = _schema()
    train_rows = _base_rows()
    eval_rows = _edit(
        score=lambda r: [None if i % 2 else v for i, v in enumerate(r)],
        color=lambda r: r[:-5] + [[b"purple"]] * 5,
    )
    expected = validate_statistics(
        _stats(eval_rows), schema, _stats(train_rows, "train") if with_baseline else None
    )
    assert ("score" in expected.anomaly_info) == with_baseline
    with _test_pipeline() as p:
        train = (
            p
            | "Train" >> beam.Create([_batch(train_rows)])
            | "TrainStats" >> st.GenerateStatistics("train")
        )
        evaluation = (
            p
            | "Eval" >> beam.Create([_batch(eval_rows)])
            | "EvalStats" >> st.GenerateStatistics("eval")
        )
        baseline = beam.pvalue.AsSingleton(train) if with_baseline else None
        anomalies = evaluation | "Validate" >> beam.Map(validate_statistics, schema, baseline)
        assert_that(anomalies, equal_to([expected]))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: validate_statistics(_stats(_base_rows()), "schema"),
            TypeError,
            "validate_statistics takes a Schema",
        ),
        (
            lambda: validate_statistics(schema_pb2.Schema(), schema_pb2.Schema()),
            TypeError,
            "takes a DatasetFeatureStatisticsList as stats",
        ),
        (
            lambda: validate_statistics(_two_datasets(), schema_pb2.Schema()),
            ValueError,
            "exactly one dataset .* got 2",
        ),
        (
            lambda: validate_statistics(
                _stats(_base_rows()), schema_pb2.Schema(), max_missing_fraction_jump=1.5
            ),
            ValueError,
            r"max_missing_fraction_jump must be in \[0, 1\]",
        ),
    ],
    ids=["schema_type", "stats_type", "two_datasets", "jump_range"],
)
def test_argument_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def _two_datasets():
    stats = copy.deepcopy(_stats(_base_rows()))
    stats.datasets.add(name="other")
    return stats


def test_a_rare_feature_absent_from_a_split_by_chance_does_not_block():
    """A column filled in 0.01% of the rows: the train split has 2 of 20,000, the eval
    split (10,000 rows) none, as sampling gives most of the time; a column present in
    60% of the train rows and emptied in eval still blocks."""
    rng = np.random.default_rng(7)
    train_n, eval_n = 20_000, 10_000
    rare_rows = {int(i) for i in rng.choice(train_n, 2, replace=False)}
    train = {
        "age": [[int(v)] for v in rng.integers(18, 80, train_n)],
        "coupon": [[b"X1"] if i in rare_rows else None for i in range(train_n)],
        "score": [[0.5] if v < 0.6 else None for v in rng.random(train_n)],
    }
    evaluation = {
        "age": [[int(v)] for v in rng.integers(18, 80, eval_n)],
        "coupon": [None] * eval_n,
        "score": [[0.5] if v < 0.6 else None for v in rng.random(eval_n)],
    }
    types = {"coupon": pa.list_(pa.binary()), "score": pa.list_(pa.float32())}
    train_stats = _stats(train, "train", types)
    schema = infer_schema(train_stats)
    presence = {f.name: f.presence for f in schema.feature}
    assert str(presence["coupon"]).split() == ["min_count:", "0"]  # optional, no minimum
    assert str(presence["score"]).split() == ["min_count:", "1"]
    assert presence["age"].min_fraction == 1.0 and presence["age"].min_count == 1

    anomalies = validate_statistics(_stats(evaluation, "eval", types), schema, train_stats)
    assert not is_blocking(anomalies), _summary(anomalies)
    assert "coupon" not in anomalies.anomaly_info

    evaluation["score"] = [None] * eval_n  # a real change: the column was emptied
    anomalies = validate_statistics(_stats(evaluation, "eval", types), schema, train_stats)
    severity, reasons = _summary(anomalies)["score"]
    assert severity == "ERROR" and "FEATURE_TYPE_NOT_PRESENT" in reasons
    assert blocking_anomalies({"eval": anomalies}).startswith("split eval: score")
