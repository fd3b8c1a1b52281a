"""ExampleGen on real Beam: CSV/TFRecord reading, typing, rejection, deterministic splits."""

from __future__ import annotations

import ast
import bz2
import collections
import csv
import enum
import glob
import gzip
import json
import lzma
import os
import re
import types
import zlib

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to
from conftest import PENGUIN_DIR, TESTDATA, feature_value, make_pipeline, read_examples

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DataFormat, Split
from transforms import example_gen as eg
from transforms.example_gen.csv_input import _to_list_array
from transforms.example_gen.csv_ranges import CsvRange
from transforms.example_gen.csv_rows import RawChunk, ReadCsvFile, arrow_rows
from transforms.example_gen.csv_typing import (
    FLOAT_RE,
    INT_RE,
    INTEGRAL_RE,
    CountFileTypes,
    TypeCounts,
    _count_types,
    int64_mask,
)

MESSY = os.path.join(TESTDATA, "messy.csv")
PENGUINS = os.path.join(PENGUIN_DIR, "penguins.csv")


def _run_csv(path, fmt=None, splitter=None, beam_args=(), types=None):
    """Runs ReadCsvExamples; returns ({split: [row dicts]}, [RejectedRow])."""
    fmt = fmt or eg.CsvFormat()
    splitter = splitter or eg.HashSplitter()
    files = eg.resolve_input_files(path)
    header = eg.read_csv_header(files, fmt)
    rows, rejected = collections.defaultdict(list), []
    import tempfile

    out = tempfile.mkdtemp()
    with make_pipeline(*beam_args) as p:
        result = p | eg.ReadCsvExamples(files, header, fmt, splitter, types)
        _ = (
            result.batches
            | beam.Map(lambda sb: repr([sb.split.value, sb.batch.to_pylist()]))
            | "WriteRows" >> beam.io.WriteToText(os.path.join(out, "rows"))
        )
        _ = (
            result.rejected
            | "RejRepr" >> beam.Map(lambda r: repr(tuple(r)))
            | beam.io.WriteToText(os.path.join(out, "rej"))
        )
    for name in os.listdir(out):
        with open(os.path.join(out, name), encoding="utf-8") as f:
            for line in f:
                if name.startswith("rows"):
                    split, batch = ast.literal_eval(line)
                    rows[split].extend(batch)
                else:
                    rejected.append(eg.RejectedRow(*ast.literal_eval(line)))
    return rows, sorted(rejected, key=lambda r: r.line)


def _values(rows, column):
    return {r["id"][0] if r["id"] else None: (r[column][0] if r[column] else None) for r in rows}


def test_messy_csv_quoting_unicode_missing_and_rejections():
    rows, rejected = _run_csv(MESSY, splitter=eg.HashSplitter(fixed_split=Split.TRAIN))
    train = rows["train"]
    names = _values(train, "name")
    assert names[1] == b"Smith, John"  # quoted comma
    assert _values(train, "note")[2] == b"multi\nline note"  # quoted newline
    assert _values(train, "note")[3] == b'says "hi"'  # escaped quote
    assert _values(train, "city")[6] == "北京".encode()  # unicode
    assert _values(train, "city")[3] == "Kraków".encode()
    assert _values(train, "score")[2] is None  # empty field = missing
    assert _values(train, "count")[3] is None
    assert _values(train, "score")[1] == pytest.approx(3.5)
    # Row 4 has 4 fields (line 6); row 5's score is a word (line 7); row 7's 'NA' is not a
    # number and not a null value by default (line 10). Line numbers count the quoted newline.
    assert [(r.line, r.reason) for r in rejected] == [
        (6, "has 4 fields but the header has 6"),
        (7, "column 'score': 'not-a-number' is not float"),
        (10, "column 'score': 'NA' is not float"),
    ]
    assert all(r.file == MESSY for r in rejected)
    assert len(train) + len(rejected) == 47  # every data row is accounted for


def test_null_values_make_na_missing():
    rows, rejected = _run_csv(
        MESSY,
        fmt=eg.CsvFormat(null_values=("NA",)),
        splitter=eg.HashSplitter(fixed_split=Split.TRAIN),
    )
    assert [r.line for r in rejected] == [6, 7]
    assert _values(rows["train"], "score")[7] is None


def test_column_types_from_inference():
    rows, _ = _run_csv(PENGUINS, fmt=eg.CsvFormat(null_values=("NA",)))
    batch_schema = {}
    for split_rows in rows.values():
        for r in split_rows:
            for k, v in r.items():
                if v:
                    batch_schema[k] = type(v[0]).__name__
    assert batch_schema == {
        "species": "bytes",
        "island": "bytes",
        "bill_length_mm": "float",
        "bill_depth_mm": "float",
        "flipper_length_mm": "int",
        "body_mass_g": "int",
        "sex": "bytes",
        "year": "int",
    }


def test_split_is_deterministic_across_worker_counts_and_close_to_2_to_1():
    fmt = eg.CsvFormat(null_values=("NA",))
    a, _ = _run_csv(PENGUINS, fmt=fmt)
    b, _ = _run_csv(
        PENGUINS,
        fmt=fmt,
        beam_args=("--direct_running_mode=multi_processing", "--direct_num_workers=2"),
    )

    def key(rows):
        return {s: sorted(repr(r) for r in rs) for s, rs in rows.items()}

    assert key(a) == key(b)
    n_train, n_eval = len(a["train"]), len(a["eval"])
    assert n_train + n_eval == 344
    assert 0.55 < n_train / 344 < 0.78  # 2:1 buckets, hash noise on 344 rows


def test_partition_feature_keeps_groups_together():
    splitter = eg.HashSplitter(partition_feature="island")
    rows, _ = _run_csv(PENGUINS, fmt=eg.CsvFormat(null_values=("NA",)), splitter=splitter)
    islands = {s: {r["island"][0] for r in rs} for s, rs in rows.items()}
    assert not (islands.get("train", set()) & islands.get("eval", set()))
    assert sum(len(v) for v in islands.values()) == 3


def test_schema_types_override_inference():
    types = {c: eg.ColumnType.STRING for c in ("id", "name", "score", "count", "city", "note")}
    rows, rejected = _run_csv(MESSY, splitter=eg.HashSplitter(fixed_split=Split.TRAIN), types=types)
    assert [r.line for r in rejected] == [6]  # only the short row: every value is a string
    assert _values(rows["train"], "score")[b"5"] == b"not-a-number"  # ids are strings too


def test_write_and_read_back_tfrecord_round_trip(tmp_path):
    fmt = eg.CsvFormat(null_values=("NA",))
    files = eg.resolve_input_files(PENGUINS)
    header = eg.read_csv_header(files, fmt)
    out = str(tmp_path / "examples")
    with make_pipeline() as p:
        result = p | eg.ReadCsvExamples(files, header, fmt, eg.HashSplitter())
        _ = result.batches | eg.WriteSplitExamples(out, (Split.TRAIN, Split.EVAL))
    train = read_examples(os.path.join(out, "train", "*.tfrecord.gz"))
    evals = read_examples(os.path.join(out, "eval", "*.tfrecord.gz"))
    assert len(train) + len(evals) == 344
    with open(PENGUINS, encoding="utf-8") as f:
        first = next(r for r in csv.DictReader(f) if r["sex"] == "NA")
    written = [
        e
        for e in train + evals
        if feature_value(e, "sex") is None and feature_value(e, "bill_length_mm") is not None
    ]
    assert written, "rows with missing sex keep their other features"
    assert {feature_value(e, "year") for e in train + evals} == {2007, 2008, 2009}
    assert first["species"] in {feature_value(e, "species").decode() for e in written}

    # Reading the written TFRecords back (TFRecord input) gives the same rows per split.
    tf_files = eg.resolve_input_files(os.path.join(out, "train", "*"))
    assert eg.detect_format(tf_files, DataFormat.AUTO) is DataFormat.TFRECORD
    with make_pipeline() as p:
        result = p | eg.ReadTFRecordExamples(tf_files, eg.HashSplitter(fixed_split=Split.TRAIN))
        counts = result.batches | beam.Map(lambda sb: sb.batch.num_rows) | beam.CombineGlobally(sum)
        assert_that(counts, equal_to([len(train)]))


# Every compression Beam's FileSystems decompress by file name; docs/data-input.md names these.
_COMPRESSORS = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "lzma": lambda b: lzma.compress(b, format=lzma.FORMAT_ALONE),
    "zst": lambda b: __import__("zstandard").ZstdCompressor().compress(b),
    "deflate": zlib.compress,
}


def _without_file(outputs):
    """ReadCsvFile's outputs with the file name left out (it differs by suffix)."""
    out = []
    for o in outputs:
        if isinstance(o, beam.pvalue.TaggedOutput):
            out.append(("rejected", o.value._replace(file="")))
        else:
            out.append(("rows", o.lines, o.columns, o.keys))
    return out


@pytest.mark.parametrize("suffix", sorted(_COMPRESSORS))
def test_compressed_csv_reads_exactly_like_the_plain_file(tmp_path, suffix):
    with open(MESSY, "rb") as f:
        raw = f.read()
    path = tmp_path / f"messy.csv.{suffix}"
    path.write_bytes(_COMPRESSORS[suffix](raw))
    files = eg.resolve_input_files(str(path))
    assert eg.detect_format(files, DataFormat.AUTO) is DataFormat.CSV
    fmt = eg.CsvFormat()
    header = eg.read_csv_header(files, fmt)
    assert header == eg.read_csv_header([MESSY], fmt)
    # Both passes: the row reader (quoted newlines, line numbers, rejections) and the typing
    # pass (pyarrow's reader over the decompressed stream).
    reader = ReadCsvFile(header, fmt, None)
    got = _without_file(reader.process(files[0]))
    assert got == _without_file(reader.process(MESSY))
    assert [o[1].line for o in got if o[0] == "rejected"] == [6]
    count = CountFileTypes(header, fmt)
    (counts, *ranges), (plain_counts, *plain_ranges) = count.process(files[0]), count.process(MESSY)
    assert counts == plain_counts
    # Both are read whole: one is compressed, the other has quoted newlines.
    assert [o.value for o in ranges] == [CsvRange(files[0])]
    assert [o.value for o in plain_ranges] == [CsvRange(MESSY)]


# Range bodies (after the header "id,x,s\r\n") that pyarrow's reader reads: CRLF and LF
# lines, empty lines of both kinds, spaces kept, an oversized field, non-ASCII text and no
# final newline; and those it leaves to Python's reader.
_PLAIN_BODY = "1,10,a\r\n\r\n2, 20 ,b\n\n3,,\r\n4,40," + "y" * 30 + "\n5,50,é€\n6,60,last"
_PYTHONS_BODIES = {
    "quoted field": '1,"10",a\n2,20,b\n',
    "quoted newline": '1,10,"a\nb"\n2,20,b\n',
    "lone carriage return": "1,10,a\r2,20,b\n",
    "NUL byte": "1,10,a\x00\n2,20,b\n",
    "wrong width": "1,10\n2,20,b\n",
    "whitespace line": "1,10,a\n  \n2,20,b\n",
}


@pytest.mark.parametrize("body", [_PLAIN_BODY, *_PYTHONS_BODIES.values()])
def test_a_range_reads_as_the_whole_file_does_whichever_reader_reads_it(tmp_path, body):
    # A byte range of a file is read by pyarrow's C++ reader where that reads it exactly as
    # Python's csv module does, and by Python's otherwise; a whole file always by Python's.
    path = str(tmp_path / "data.csv")
    head = b"id,x,s\r\n"
    with open(path, "wb") as f:
        f.write(head + body.encode())
    header = ("id", "x", "s")
    fmt = eg.CsvFormat(max_field_bytes=20)
    reader = ReadCsvFile(header, fmt, None)
    part = CsvRange(path, len(head), os.path.getsize(path), 2)
    ranged = _without_file(reader.process(part))
    assert ranged == _without_file(reader.process(path))
    fast = arrow_rows(body.encode(), header, ",", 2)
    if body is _PLAIN_BODY:
        assert fast is not None
        assert [o[1] for o in ranged if o[0] == "rows"] == [[2, 4, 6, 8, 9]]
        assert [o[1].line for o in ranged if o[0] == "rejected"] == [7]
        assert ranged[1][3] == [
            b"1,10,a",
            b"2, 20 ,b",
            b"3,,",
            b"5,50,\xc3\xa9\xe2\x82\xac",
            b"6,60,last",
        ]
    else:
        assert fast is None


_NUMBER_TEXTS = {
    "short integers": ["0", "-7", "+12", " 42 ", "123456789012345678", ""],
    "int64's bounds": ["9223372036854775807", "-9223372036854775808", "5"],
    "beyond int64": ["9223372036854775808", "-9223372036854775809", "12"],
    "19 digits beyond int64": ["9223372036854775808", "12"],
    "20 digits": ["00000000000000000001", "3"],
    "numbers": ["1.5", "-2", "1e5", "inf", "-NaN", ".5", "7."],
    "words": ["x", "12a", "--1", "1e", "", "0x1F"],
}


@pytest.mark.parametrize("texts", list(_NUMBER_TEXTS.values()), ids=list(_NUMBER_TEXTS))
def test_type_counts_are_what_the_patterns_say_of_each_value(texts):
    # The typing pass counts per column the present values that are int64 integers, numbers
    # and integers beyond int64, in arrow's kernels with shortcuts (short text, a column of
    # integers only); each count must be what the patterns say of each value one by one.
    def full(pattern, v):
        return re.fullmatch(pattern.strip("^$"), v, re.ASCII) is not None

    present = [v.strip() for v in texts if v.strip()]
    ints = [v for v in present if full(INT_RE, v) and -(2**63) <= int(v) < 2**63]
    integral = [v for v in present if full(INTEGRAL_RE, v)]
    floats = [v for v in present if full(FLOAT_RE, v)]
    want = TypeCounts(len(present), len(ints), len(floats), len(integral) - len(ints))
    assert _count_types([pa.array(texts)], ("",)) == [want]
    mask = int64_mask(pa.array(present)).to_pylist()
    assert [v for v, ok in zip(present, mask) if ok] == ints


@pytest.mark.parametrize("how", ["whole", "gz", "range"])
def test_a_byte_that_is_not_utf8_is_named_by_its_line(tmp_path, how):
    # The text reader decodes thousands of bytes ahead of the rows it has read: the line it
    # had reached is hundreds of lines before the bad byte.
    lines = [b"id,text"] + [b"%d,row %d" % (i, i) for i in range(5000)]
    lines[3000] = b"2999,caf\xe9"  # line 3001, Latin-1
    raw = b"\n".join(lines) + b"\n"
    path = tmp_path / ("data.csv.gz" if how == "gz" else "data.csv")
    path.write_bytes(gzip.compress(raw) if how == "gz" else raw)
    header = ("id", "text")
    part = CsvRange(str(path), 8, len(raw), 2) if how == "range" else CsvRange(str(path))
    with pytest.raises(PipelineError, match=r"data\.csv(\.gz)?:3001 is not UTF-8 .*re-encode"):
        list(ReadCsvFile(header, eg.CsvFormat(), None).process(part))


@pytest.mark.parametrize("suffix", sorted(_COMPRESSORS))
def test_truncated_compressed_csv_fails_instead_of_losing_rows(tmp_path, suffix):
    # A copy cut short (a failed download) used to read as a shorter file, with no error,
    # for gzip and xz (Beam's CompressedFile stops quietly where the bytes end).
    raw = b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(20000))
    data = _COMPRESSORS[suffix](raw)
    path = tmp_path / f"cut.csv.{suffix}"
    path.write_bytes(data[: len(data) * 3 // 5])
    fmt = eg.CsvFormat()
    with pytest.raises(PipelineError, match=r"cut\.csv\..* cannot be decompressed as its name"):
        header = eg.read_csv_header([str(path)], fmt)  # a cut in the first block fails here
        list(ReadCsvFile(header, fmt, None).process(str(path)))


def test_concatenated_gzip_members_are_all_read(tmp_path):
    # `cat a.csv.gz b.gz > all.csv.gz` is a valid gzip file of both parts.
    path = tmp_path / "all.csv.gz"
    path.write_bytes(gzip.compress(b"id\n1\n2\n") + gzip.compress(b"3\n4\n"))
    header = eg.read_csv_header([str(path)], eg.CsvFormat())
    (chunk,) = ReadCsvFile(header, eg.CsvFormat(), None).process(str(path))
    assert chunk.columns[0].to_pylist() == ["1", "2", "3", "4"]


def test_byte_order_mark_is_removed_from_every_file(tmp_path):
    # Spreadsheets' "CSV UTF-8" export starts each file with a BOM; one file is gzip too.
    with open(MESSY, "rb") as f:
        raw = f.read()
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbf" + raw)
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + raw))
    files = eg.resolve_input_files(str(tmp_path))
    assert eg.read_csv_header(files, eg.CsvFormat())[0] == "id"
    only_train = eg.HashSplitter(fixed_split=Split.TRAIN)
    rows, rejected = _run_csv(str(tmp_path), splitter=only_train)
    train = rows["train"]
    assert {tuple(r) for r in train} == {("id", "name", "score", "count", "city", "note")}
    one_file = _values(_run_csv(MESSY, splitter=only_train)[0]["train"], "id")
    assert sorted(r["id"][0] for r in train) == sorted(2 * list(one_file))
    assert sorted((os.path.basename(r.file), r.line) for r in rejected) == [
        (name, line) for name in ("a.csv", "b.csv.gz") for line in (6, 7, 10)
    ]


def test_row_with_an_oversized_field_is_rejected_and_the_file_read_on(tmp_path):
    # A lowered limit keeps the file small; sizes are UTF-8 bytes, not characters.
    path = tmp_path / "big.csv"
    path.write_text(
        "id,text,n\n"
        '1,"short, with a comma\nand a newline",10\n'  # lines 2-3
        f'2,"{"x" * 2000}",20\n'  # line 4: 2000 bytes
        f'3,"{"€" * 400}",30\n'  # line 5: 400 characters, 1200 bytes
        f'4,"{"y" * 400},\n{"z" * 499}",40\n'  # lines 6-7: 901 bytes, under the limit
        "5,plain,50\n",  # line 8
        encoding="utf-8",
    )
    fmt = eg.CsvFormat(max_field_bytes=1000)
    rows, rejected = _run_csv(str(path), fmt=fmt, splitter=eg.HashSplitter(fixed_split=Split.TRAIN))
    assert [(r.line, r.reason) for r in rejected] == [
        (4, "field of 2000 bytes at line 4 exceeds --csv_max_field_bytes=1000"),
        (5, "field of 1200 bytes at line 5 exceeds --csv_max_field_bytes=1000"),
    ]
    assert all(len(r.text) < 300 for r in rejected)  # the field is clipped in the artifact
    train = rows["train"]
    assert _values(train, "n") == {1: 10, 4: 40, 5: 50}  # still an int column
    assert len(_values(train, "text")[4]) == 901
    assert _values(train, "text")[1] == b"short, with a comma\nand a newline"


def test_ten_megabyte_field_is_read_and_one_over_the_default_limit_rejected(tmp_path):
    # At the default --csv_max_field_bytes (16 MiB): a 10 MB quoted field with commas and
    # newlines is data (Python's csv module alone stops at 128 KiB); 17 MiB is rejected.
    ten_mb = "a,b\n" * 2_500_000
    path = tmp_path / "huge.csv"
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'id,text\n1,"{ten_mb}"\n2,"{"c" * (17 << 20)}"\n3,end\n')
    header = eg.read_csv_header([str(path)], eg.CsvFormat())
    out = list(ReadCsvFile(header, eg.CsvFormat(), None).process(str(path)))
    rejected = [o.value for o in out if isinstance(o, beam.pvalue.TaggedOutput)]
    chunks = [o for o in out if isinstance(o, RawChunk)]
    expected = f"field of {17 << 20} bytes at line 2500003 exceeds --csv_max_field_bytes=16777216"
    assert [(r.line, r.reason) for r in rejected] == [(2_500_003, expected)]
    assert len(chunks) == 1 and chunks[0].lines == [2, 2_500_004]
    assert chunks[0].columns[1].to_pylist() == [ten_mb, "end"]


def test_bad_tfrecord_is_rejected_not_dropped(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "data.tfrecord")
    good = tf.train.Example(
        features=tf.train.Features(
            feature={"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}
        )
    ).SerializeToString()
    with tf.io.TFRecordWriter(path) as w:
        w.write(good)
        w.write(b"\x08\x96\x01 not a proto")
        w.write(good)
    with make_pipeline() as p:
        result = p | eg.ReadTFRecordExamples([path], eg.HashSplitter(fixed_split=Split.TRAIN))
        rows = result.batches | beam.Map(lambda sb: sb.batch.num_rows) | beam.CombineGlobally(sum)
        assert_that(rows, equal_to([2]), label="good rows")
        # Named by its number in the file (the rejected rows' "line"), from 1.
        reasons = result.rejected | beam.Map(lambda r: (r.line, r.reason.split(" (")[0]))
        expected = [(2, "record 2 is not a valid tf.Example")]
        assert_that(reasons, equal_to(expected), label="rejected")


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "is empty"),
        ("1,2,3\n4,5,6\n", "not a header"),
        ("a,,c\n1,2,3\n", "empty column name"),
        ("a,b,a\n1,2,3\n", "names column 'a' twice"),
        (b"name,city\nM\xfcller,K\xf6ln\n", r"data\.csv is not UTF-8 text .*re-encode it"),
        (b"\x1f\x8b\x08\x00 not really gzip", r"data\.csv\.gz cannot be decompressed as its"),
        ('a,"b\n1,2\n', r"data\.csv:1 has no readable header row .*fix the quoting"),
    ],
)
def test_bad_headers(tmp_path, content, match):
    path = tmp_path / ("data.csv.gz" if "gz" in match else "data.csv")
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(PipelineError, match=match):
        eg.read_csv_header(eg.resolve_input_files(str(path)), eg.CsvFormat())


def test_headers_must_agree(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "b.csv").write_text("x,z\n1,2\n")
    files = eg.resolve_input_files(str(tmp_path))
    with pytest.raises(PipelineError, match="give all input files the same columns"):
        eg.read_csv_header(files, eg.CsvFormat())


def test_missing_input_and_unknown_format(tmp_path):
    with pytest.raises(PipelineError, match="matches no file"):
        eg.resolve_input_files(str(tmp_path / "nope*.csv"))
    (tmp_path / "data.parquet").write_text("x")
    with pytest.raises(PipelineError, match="--data_format=csv"):
        eg.detect_format(eg.resolve_input_files(str(tmp_path)), DataFormat.AUTO)


def test_partition_feature_must_be_a_column():
    with pytest.raises(PipelineError, match="is not a column"):
        eg.ReadCsvExamples(
            [MESSY], ("id", "name"), eg.CsvFormat(), eg.HashSplitter(partition_feature="x")
        )


def test_hash_assignment_matches_an_independent_blake2b_computation():
    # A change of hash function would silently move rows between splits across versions.
    import hashlib

    keys = [b"a", b"b", b"penguin", b"", "ü".encode()] + [str(i).encode() for i in range(200)]
    expected = []
    for k in keys:
        bucket = int.from_bytes(hashlib.blake2b(k, digest_size=8).digest(), "little") % 3
        expected.append(0 if bucket < 2 else 1)
    assert eg.HashSplitter().assign(keys).tolist() == expected
    assert 0 < sum(expected) < len(expected)


def test_list_arrays_have_null_for_missing():
    arr = pa.array(["1", "", "3"])
    out = _to_list_array(arr, pa.array([False, True, False]), eg.ColumnType.INT)
    assert out.to_pylist() == [[1], None, [3]]


# ----------------------------------------------------- a third input format, as a plug-in


class _TestFormat(str, enum.Enum):
    """The test's own format key: a plug-in needs no change to DataFormat to be read."""

    JSONL = "jsonl"


class _ReadJsonLinesFile(beam.DoFn):
    """One JSON-lines file (integer values only) -> a RecordBatch split by hash."""

    def __init__(self, columns, splitter):
        self._columns = columns
        self._splitter = splitter
        self._written = eg.split_counters(splitter)

    def process(self, path):
        rows, keys = [], []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    yield beam.pvalue.TaggedOutput(
                        "rejected", eg.RejectedRow(path, number, f"not JSON ({e})", line.strip())
                    )
                    continue
                keys.append(line.encode("utf-8"))
        arrays = [pa.array([[r[c]] for r in rows], pa.list_(pa.int64())) for c in self._columns]
        batch = pa.RecordBatch.from_arrays(arrays, names=list(self._columns))
        yield from eg.split_batch(batch, keys, self._splitter, self._written)


class _ReadJsonLines(beam.PTransform):
    def __init__(self, files, columns, splitter):
        super().__init__()
        self._files, self._columns, self._splitter = list(files), columns, splitter

    def expand(self, pbegin):
        read = (
            pbegin
            | "ListFiles" >> beam.Create(self._files)
            | "Read"
            >> beam.ParDo(_ReadJsonLinesFile(self._columns, self._splitter)).with_outputs(
                "rejected", main="batches"
            )
        )
        return eg.ExampleGenResult(read.batches, read.rejected)


class _JsonLinesInput(eg.InputFormat):
    title = "JSON lines"
    suffix = ".jsonl"

    def claims(self, name):
        return name.endswith(".jsonl")

    def read_columns(self, files, settings):
        with open(files[0], encoding="utf-8") as f:
            return tuple(json.loads(f.readline()))

    def read(self, files, columns, splitter, settings):
        return _ReadJsonLines(files, columns, splitter)


def test_a_format_passed_in_as_a_plug_in_flows_through_example_gen(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text('{"x": 1, "y": 10}\n{"x": 2, "y": 20}\nnot json\n')
    (data / "b.jsonl.gz").write_bytes(gzip.compress(b'{"x": 3, "y": 30}\n'))
    # The shipped table does not know the format; a table passed in does.
    files = eg.resolve_input_files(str(data))
    with pytest.raises(PipelineError, match=r"neither \.csv nor \.tfrecord by name"):
        eg.detect_format(files, DataFormat.AUTO)
    formats = types.MappingProxyType({**eg.FORMATS, _TestFormat.JSONL: _JsonLinesInput()})
    with pytest.raises(PipelineError, match="--data mixes CSV and JSON lines files"):
        eg.detect_format([MESSY, files[0]], DataFormat.AUTO, formats)
    key = eg.detect_format(files, DataFormat.AUTO, formats)
    assert key is _TestFormat.JSONL
    plain = files[:1]  # the test's reader does not decompress: it reads a.jsonl only
    settings = eg.ReadSettings()
    columns = formats[key].read_columns(plain, settings)
    assert columns == ("x", "y")
    out, rejected = str(tmp_path / "examples"), str(tmp_path / "rejected")
    with make_pipeline() as p:
        result = p | formats[key].read(plain, columns, eg.HashSplitter(), settings)
        _ = result.batches | eg.WriteSplitExamples(out, (Split.TRAIN, Split.EVAL))
        _ = result.rejected | eg.WriteRejectedRows(rejected)
    written = read_examples(os.path.join(out, "*", "*.tfrecord.gz"))
    assert sorted((feature_value(e, "x"), feature_value(e, "y")) for e in written) == [
        (1, 10),
        (2, 20),
    ]
    with open(glob.glob(os.path.join(rejected, "rejected-*.jsonl"))[0], encoding="utf-8") as f:
        (row,) = [json.loads(line) for line in f]
    assert (os.path.basename(row["file"]), row["line"], row["text"]) == ("a.jsonl", 3, "not json")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@pytest.fixture(scope="module")
def wide_int_run(tmp_path_factory):
    """One data-only run through the CLI over 200 rows: 19-digit ids, int64's bounds, and
    a column with one value above 2^63-1; its examples and train statistics."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from beam_pipeline import cli

    tmp = tmp_path_factory.mktemp("wide_ints")
    lines = ["account_id,edge,big"]
    for i in range(200):
        edge = (_INT64_MIN, _INT64_MAX, 0)[i % 3]
        lines.append(f"{1234567890123456789 + i},{edge},{2**63 if i == 7 else i}")
    (tmp / "ids.csv").write_text("\n".join(lines) + "\n")
    root = tmp / "root"
    args = ["--runner=DirectRunner", f"--data={tmp / 'ids.csv'}", "--no_trainer", "--no_tuner"]
    assert cli.main([*args, f"--pipeline_root={root}", "--run_id=r"]) == 0
    run = root / "runs" / "r"
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (run / "statistics" / "train" / "FeatureStats.pb").read_bytes()
    )
    features = {f.path.step[0]: f for f in stats.datasets[0].features}
    return read_examples(str(run / "examples" / "*" / "*.gz")), features


_BIG = {str(2**63).encode()} | {str(i).encode() for i in range(200) if i != 7}


@pytest.mark.parametrize(
    "column, kind, values, stats_type, stats_range",
    [
        # 19-digit ids: 200 distinct exact int64s (they were one float32 value).
        ("account_id", "int64_list", {1234567890123456789 + i for i in range(200)}, "INT", None),
        # int64's whole range, both bounds exact, and the statistics over it.
        ("edge", "int64_list", {_INT64_MIN, _INT64_MAX, 0}, "INT", (_INT64_MIN, _INT64_MAX)),
        # A value above 2^63-1: the column is a string column, every value its exact text.
        ("big", "bytes_list", _BIG, "STRING", None),
    ],
)
def test_integers_keep_their_exact_value_up_to_int64_and_beyond_are_strings(
    wide_int_run, column, kind, values, stats_type, stats_range
):
    from tensorflow_metadata.proto.v0 import statistics_pb2

    examples, features = wide_int_run
    assert len(examples) == 200
    assert {e.features.feature[column].WhichOneof("kind") for e in examples} == {kind}
    assert {feature_value(e, column) for e in examples} == values
    stats = features[column]
    assert statistics_pb2.FeatureNameStatistics.Type.Name(stats.type) == stats_type
    if stats_range:
        assert (stats.num_stats.min, stats.num_stats.max) == tuple(map(float, stats_range))
