"""The batch tf.Example encoder: what tfx-bsl's encoder writes, framed as TensorFlow reads."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from transforms.example_encoding import encode_framed, frame_records
from transforms.tfrecords import _GzipRecordWriter

_INTS = [0, 1, 127, 128, 300, 2**35, 2**63 - 1, -1, -300, -(2**63)]
_TYPES = {"int": pa.int64(), "float": pa.float32(), "bytes": pa.binary()}


def _read_back(tmp_path, framed) -> list[bytes]:
    """The records as TensorFlow's reader reads them (it checks both CRCs of each record)."""
    import tensorflow as tf

    path = str(tmp_path / "data.tfrecord.gz")
    writer = _GzipRecordWriter(path)
    writer.write(framed)
    writer.close()
    records = [r.numpy() for r in tf.data.TFRecordDataset(path, "GZIP")]
    assert (framed.count, framed.payload_bytes) == (len(records), sum(map(len, records)))
    return records


def _tfx_bsl(batch) -> list[bytes]:
    from tfx_bsl.coders import example_coder

    return example_coder.RecordBatchToExamplesEncoder().encode(batch)


def _same_examples(ours: list[bytes], theirs: list[bytes]) -> None:
    """Equal as protos: a proto map fixes no order, and tfx-bsl's differs row to row."""
    import tensorflow as tf

    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = tf.train.Example.FromString(a), tf.train.Example.FromString(b)
        assert a == b, (i, a, b)


def _column(rng, kind: str, n: int, most: int, nulls: bool, large: bool):
    rows = []
    for _ in range(n):
        if nulls and rng.random() < 0.2:
            rows.append(None)
            continue
        k = int(rng.integers(0, most + 1))
        if kind == "int":
            rows.append([int(v) for v in rng.choice(_INTS, k)])
        elif kind == "float":
            values = rng.normal(size=k).astype(np.float32)
            values[rng.random(k) < 0.1] = np.nan
            rows.append(values.tolist())
        else:
            rows.append([rng.bytes(int(rng.integers(0, 150))) for _ in range(k)])
    list_type = pa.large_list if large else pa.list_
    value_type = pa.large_binary() if kind == "bytes" and large else _TYPES[kind]
    return pa.array(rows, list_type(value_type))


@pytest.mark.parametrize("seed", range(12))
def test_random_batches_encode_to_what_tfx_bsl_encodes(tmp_path, seed):
    """Any mix of int64, float32 and bytes lists: nulls, empty lists, several values, the
    int64 extremes, NaN, any bytes, long names, list and large_list, sliced batches."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    kinds = rng.choice(list(_TYPES), int(rng.integers(1, 7)))
    columns = [
        _column(rng, k, n, int(rng.integers(0, 4)), bool(rng.random() < 0.5), bool(seed % 2))
        for k in kinds
    ]
    names = [f"f{j}_" + "x" * int(rng.integers(0, 140)) for j in range(len(columns))]
    batch = pa.RecordBatch.from_arrays(columns, names)
    if seed % 3 == 0:
        start = int(rng.integers(0, n))
        batch = batch.slice(start, int(rng.integers(1, n - start + 1)))
    _same_examples(_read_back(tmp_path, encode_framed(batch)), _tfx_bsl(batch))


def test_the_wire_format_has_the_features_in_the_columns_order(tmp_path):
    """The bytes of one row, field by field (tfx-bsl's order would vary from row to row)."""
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([[1], None], pa.large_list(pa.int64())),
            pa.array([[1.5], []], pa.list_(pa.float32())),
            pa.array([[b"ab"], [b"", b"x"]], pa.large_list(pa.large_binary())),
        ],
        ["zz", "aa", "mm"],
    )
    rows = _read_back(tmp_path, encode_framed(batch))
    zz = "0a0b0a027a7a12051a030a0101"  # key "zz", int64_list, packed [1]
    aa = "0a0e0a026161120812060a040000c03f"  # float_list, packed [1.5]
    mm = "0a0c0a026d6d12060a040a026162"  # bytes_list ["ab"]
    assert rows[0].hex() == "0a2b" + zz + aa + mm
    # A null list: the feature, no kind; an empty list: the kind, no values.
    zz, aa = "0a060a027a7a1200", "0a080a02616112021200"
    mm = "0a0d0a026d6d12070a050a000a0178"
    assert rows[1].hex() == "0a21" + zz + aa + mm
    _same_examples(rows, _tfx_bsl(batch))


def test_a_null_list_has_no_values_whatever_arrow_keeps_behind_it(tmp_path):
    """Arrow lets a null list's offsets span values (here [3, 4]); they are not its."""
    offsets = pa.array([0, 2, 4, 5], pa.int32())
    null = pa.array([False, True, False])
    batch = pa.RecordBatch.from_arrays(
        [
            pa.ListArray.from_arrays(offsets, pa.array([1, 2, 3, 4, 5], pa.int64()), mask=null),
            pa.ListArray.from_arrays(offsets, pa.array([b"a", b"b", b"c", b"d", b"e"]), mask=null),
        ],
        ["i", "s"],
    )
    _same_examples(_read_back(tmp_path, encode_framed(batch)), _tfx_bsl(batch))


@pytest.mark.parametrize(
    "column",
    [
        # One row of many values among rows of one: padded, it would be mostly padding.
        pa.array([[7]] * 50 + [list(range(5000))], pa.list_(pa.int64())),
        pa.array([[b"a"]] * 50 + [[b"z" * 100_000]], pa.list_(pa.binary())),
        # A null inside a list: tfx-bsl's encoder writes it (as 0).
        pa.array([[1, None], [2]], pa.list_(pa.int64())),
    ],
    ids=["long-list", "long-string", "null-value"],
)
def test_batches_the_layout_does_not_take_are_encoded_as_tfx_bsl_does(tmp_path, column):
    batch = pa.RecordBatch.from_arrays([column, pa.array([[1.0]] * len(column))], ["a", "b"])
    batch = batch.cast(pa.schema([("a", column.type), ("b", pa.list_(pa.float32()))]))
    _same_examples(_read_back(tmp_path, encode_framed(batch)), _tfx_bsl(batch))


def test_a_wide_batch_is_laid_out_a_slice_of_rows_at_a_time(tmp_path, monkeypatch):
    """Past the layout's size, slices of rows (here 3: 100, 100 and 50 rows of 50 features,
    some named in UTF-8), which together are the batch."""
    from transforms import example_encoding

    columns, rows = 50, 250
    monkeypatch.setattr(example_encoding, "_LAYOUT_BYTES", 100 * columns * 64)
    values = pa.array([[i] for i in range(rows)], pa.list_(pa.int64()))
    names = [f"f{j}" if j % 7 else f"é{j}" for j in range(columns)]
    batch = pa.RecordBatch.from_arrays([values] * columns, names)
    _same_examples(_read_back(tmp_path, encode_framed(batch)), _tfx_bsl(batch))


def test_a_column_tfx_bsl_cannot_encode_fails_with_its_error():
    batch = pa.RecordBatch.from_arrays([pa.array([["a"]], pa.list_(pa.string()))], ["s"])
    with pytest.raises(RuntimeError, match='feature "s": Bad field type'):
        encode_framed(batch)


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_framed_records_are_read_back_as_they_were(tmp_path, n):
    records = [bytes([i % 256]) * (i % 300) for i in range(n)]
    assert _read_back(tmp_path, frame_records(records)) == records
