"""Damaged TFRecord input ends in one sentence naming the file and the record, and the
summary has a row for the failed stage; a record that is not a tf.Example is rejected
with its number (through the CLI, on the DirectRunner)."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest

from beam_pipeline import cli

_RECORDS = 300


def _records() -> tuple[list[bytes], list[int]]:
    """Serialized tf.Examples, and the byte offset where each one's framing ends."""
    import tensorflow as tf
    from apache_beam.io.tfrecordio import _TFRecordUtil

    out, ends = io.BytesIO(), []
    records = []
    for i in range(_RECORDS):
        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i * 0.5])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
                }
            )
        )
        records.append(example.SerializeToString())
    for r in records:
        _TFRecordUtil.write_record(out, r)
        ends.append(out.tell())
    return records, ends


def _frame(records: list[bytes]) -> bytes:
    from apache_beam.io.tfrecordio import _TFRecordUtil

    out = io.BytesIO()
    for r in records:
        _TFRecordUtil.write_record(out, r)
    return out.getvalue()


def _run(tmp_path, data: str, *more: str) -> int:
    root = str(tmp_path / "root")
    args = [
        "--runner=DirectRunner",
        f"--data={data}",
        "--no_trainer",
        "--no_tuner",
        f"--pipeline_root={root}",
        "--run_id=r",
        *more,
    ]
    return cli.main(args)


def _summary(tmp_path) -> list[dict]:
    with open(tmp_path / "root" / "runs" / "r" / "summary.json") as f:
        return json.load(f)["stages"]


@pytest.mark.parametrize(
    "damage, mode",
    [
        ("truncated", "in_memory"),
        ("checksum", "in_memory"),
        ("truncated gzip", "in_memory"),
        # A worker process's error reaches the launcher as its traceback's text.
        ("checksum", "multi_processing"),
    ],
)
def test_a_damaged_tfrecord_file_names_the_file_and_the_record(tmp_path, capsys, damage, mode):
    records, ends = _records()
    data = _frame(records)
    cut = (ends[199] + ends[200]) // 2  # in the middle of record 201
    if damage == "truncated":
        path, content, what = tmp_path / "in.tfrecord", data[:cut], "ends in the middle of it"
    elif damage == "checksum":
        damaged = bytearray(data)
        damaged[cut] ^= 0xFF  # a byte of record 201's payload
        path, content, what = tmp_path / "in.tfrecord", bytes(damaged), "fails its checksum"
    else:
        # The gzip stream cut short: the records it still holds whole read fine.
        whole = gzip.compress(data)
        path, what = tmp_path / "in.tfrecord.gz", "ends in the middle of it"
        content = whole[: len(whole) * 2 // 3]
        number = 1 + sum(1 for e in ends if e <= len(_partial_gunzip(content)))
    path.write_bytes(content)
    if damage != "truncated gzip":
        number = 201
    assert 1 < number <= _RECORDS
    capsys.readouterr()
    workers = ["--direct_num_workers=2"] if mode == "multi_processing" else []
    assert _run(tmp_path, str(path), f"--direct_running_mode={mode}", *workers) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(
        f"error: Input file {path} is damaged at record {number}: the record {what}"
    ), err[0]
    assert f"({number - 1} records before it read fine)" in err[0]
    (row,) = _summary(tmp_path)
    assert row["stage"] == "ExampleGen" and row["status"] == "failed"
    assert row["note"].startswith(f"Input file {path} is damaged at record {number}")


def _partial_gunzip(data: bytes) -> bytes:
    import zlib

    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)


def test_a_record_that_is_not_an_example_is_rejected_with_its_number(tmp_path):
    records, _ = _records()
    records[41] = b"\xff\xfe not a tf.Example"
    path = tmp_path / "in.tfrecord"
    path.write_bytes(_frame(records))
    assert _run(tmp_path, str(path), "--max_rejected_fraction=0.1") == 0
    rejected = tmp_path / "root" / "runs" / "r" / "rejected"
    lines = [
        json.loads(line)
        for name in sorted(os.listdir(rejected))
        if name.startswith("rejected")
        for line in (rejected / name).read_text().splitlines()
    ]
    assert [(r["file"], r["line"]) for r in lines] == [(str(path), 42)]
    assert lines[0]["reason"].startswith("record 42 is not a valid tf.Example")
    example_gen = _summary(tmp_path)[0]
    assert example_gen["rows_rejected"] == 1
    assert sum(example_gen["rows_out"].values()) == _RECORDS - 1
