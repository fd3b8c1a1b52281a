"""Splittable CSV reads: byte ranges at real line starts, exact line numbers, one reader
where splitting is unsafe; and output shards that scale with the data. Real Beam, tiny
files and tiny range sizes so that a file of a few hundred bytes splits."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import apache_beam as beam
import pytest
from conftest import make_pipeline

from beam_pipeline.runtime.jobs import counter
from beam_pipeline.stages.example_gen.executor import reading_note
from transforms import example_gen as eg
from transforms.example_gen.csv_chunks import (
    RESCANNED_COUNTER,
    PlanChunkedFile,
    ScanChunk,
    chunk_file,
)
from transforms.example_gen.csv_ranges import LineScanner, ScanCsvRanges, plan_ranges
from transforms.example_gen.csv_typing import ColumnType, CountFileTypes
from transforms.tfrecords import WriteTFRecordBatches

ROWS = 60
RANGE_BYTES = 120  # rows are ~13 bytes: about 9 lines a range, 6 or 7 ranges


def _good_lines() -> list[str]:
    return ["id,x,s"] + [f"{i},{i * 3 + 10},n{i:03d}" for i in range(ROWS)]


def _in_order(path, fmt, header=("id", "x", "s")):
    """The in-order typing pass over a whole file: (type counts, ranges)."""
    outs = list(CountFileTypes(header, fmt).process(path))
    return outs[0], [o.value for o in outs[1:]]


def _chunked(path, fmt, header=("id", "x", "s")):
    """The chunked typing pass (csv_chunks) run by hand: (type counts, ranges, rescanned)."""
    chunks = chunk_file(path, os.path.getsize(path), fmt.range_bytes)
    scans = [scan for c in chunks for _, scan in ScanChunk(header, fmt, True).process(c)]
    outs = list(PlanChunkedFile(header, fmt, True).process((path, scans[::-1])))
    rescanned = not all(s.unsafe is None and s.counts is not None for s in scans)
    return outs[0], [o.value for o in outs[1:]], rescanned


def _ranges(path, fmt) -> list[eg.CsvRange]:
    """The ranges the pipeline reads a file in (chunked: the file is 2+ ranges long)."""
    return _chunked(path, fmt)[1]


@pytest.fixture(scope="module")
def split_csv(tmp_path_factory):
    """A CSV whose bad rows sit on both sides of a split point: (path, split line)."""
    path = str(tmp_path_factory.mktemp("ranges") / "data.csv")
    lines = _good_lines()
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    # The third range's first line; bad rows keep every line's length, so the split
    # points stay where they are.
    split = _ranges(path, eg.CsvFormat(range_bytes=RANGE_BYTES))[2].first_line
    before, at = split - 1, split
    lines[before - 1] = lines[before - 1].replace(",", ";", 1)  # 2 fields, not 3
    i = at - 2
    lines[at - 1] = lines[at - 1].replace(f",{i * 3 + 10},", "," + "x" * len(str(i * 3 + 10)) + ",")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, split


def _read(path, fmt, *beam_args, types=None):
    """ReadCsvExamples on real Beam: (sorted (split, id) rows, sorted rejected, result)."""
    out = tempfile.mkdtemp(dir=os.path.dirname(path))
    files = [path]
    header = eg.read_csv_header(files, fmt)
    p = make_pipeline(*beam_args)
    result = p | eg.ReadCsvExamples(files, header, fmt, eg.HashSplitter(), types)
    _ = (
        result.batches
        | beam.FlatMap(
            lambda sb: [json.dumps([sb.split.value, r]) for r in sb.batch["id"].to_pylist()]
        )
        | "WriteRows" >> beam.io.WriteToText(os.path.join(out, "rows"))
    )
    _ = (
        result.rejected
        | beam.Map(eg.RejectedRow.to_json)
        | "WriteRejected" >> beam.io.WriteToText(os.path.join(out, "rejected"))
    )
    # Per batch read: the reading process, whether TensorFlow was imported in it by then
    # (reading needs none of it), and whether it is a fork of the pool's fork server
    # (beam_pipeline.runtime.forked_sdk_worker: its preload, pool_zygote, imported
    # TensorFlow once there, so such a worker says nothing about the readers).
    _ = (
        result.batches
        | beam.Map(
            lambda _: json.dumps(
                [
                    os.getpid(),
                    "tensorflow" in __import__("sys").modules,
                    "beam_pipeline.runtime.pool_zygote" in __import__("sys").modules,
                ]
            )
        )
        | "WriteTF" >> beam.io.WriteToText(os.path.join(out, "tf"))
    )
    run = p.run()
    run.wait_until_finish()

    def lines(name):
        found = []
        for fn in glob.glob(os.path.join(out, name + "*")):
            with open(fn) as f:
                found += [json.loads(line) for line in f]
        return found

    rows = sorted((s, ids[0]) for s, ids in lines("rows"))
    rejected = sorted((r["line"], r["reason"], r["text"]) for r in lines("rejected"))
    run.readers = {tuple(r) for r in lines("tf")}  # (pid, imported tensorflow, forked)
    return rows, rejected, run


@pytest.mark.parametrize("typing_pass", [_in_order, _chunked])
def test_split_points_are_line_starts_with_their_numbers(split_csv, typing_pass):
    path, _ = split_csv
    data = open(path, "rb").read()
    ranges = typing_pass(path, eg.CsvFormat(range_bytes=RANGE_BYTES))[1]
    assert len(ranges) >= 5
    assert ranges[0].start == data.index(b"\n") + 1 and ranges[0].first_line == 2
    assert ranges[-1].end == len(data)
    for a, b in zip(ranges, ranges[1:]):
        assert a.end == b.start  # contiguous: every byte is read once
        assert data[b.start - 1 : b.start] == b"\n"
        assert data[: b.start].count(b"\n") + 1 == b.first_line
    # Fed in blocks of any size, the scan finds the same points (state carried across).
    whole = LineScanner(RANGE_BYTES, ",")
    whole.feed(data)
    for size in (1, 7, 64):
        pieces = LineScanner(RANGE_BYTES, ",")
        for i in range(0, len(data), size):
            pieces.feed(data[i : i + size])
        assert pieces.points == whole.points and pieces.unsafe is None


@pytest.mark.parametrize(
    "mode, workers, schema",
    [
        ("in_memory", 1, False),
        ("in_memory", 1, True),
        # One worker process reads as in_memory does (one reader, every range in turn);
        # two are where a range's rows and rejections come from another process.
        ("multi_processing", 2, False),
    ],
)
def test_split_reads_keep_exact_lines_and_count_every_row(split_csv, mode, workers, schema):
    path, split = split_csv
    fmt = eg.CsvFormat(range_bytes=RANGE_BYTES)
    types = {"id": ColumnType.INT, "x": ColumnType.INT, "s": ColumnType.STRING} if schema else None
    rows, rejected, run = _read(
        path,
        fmt,
        f"--direct_running_mode={mode}",
        f"--direct_num_workers={workers}",
        types=types,
    )
    # The bad rows on both sides of the split point, with their exact lines.
    i, j = split - 3, split - 2  # the rows' ids (line = id + 2)
    assert rejected == [
        (split - 1, "has 2 fields but the header has 3", f"{i};{i * 3 + 10},n{i:03d}"),
        (
            split,
            f"column 'x': {'x' * len(str(j * 3 + 10))!r} is not int",
            f"{j},{'x' * len(str(j * 3 + 10))},n{j:03d}",
        ),
    ]
    assert sorted(r for _, r in rows) == [k for k in range(ROWS) if k not in (i, j)]
    read = counter(run, "example_gen.rows_read")
    out = sum(counter(run, f"example_gen.rows_out.{s}") for s in ("train", "eval"))
    assert (read, out, counter(run, "example_gen.rows_rejected")) == (ROWS, ROWS - 2, 2)
    assert counter(run, eg.RANGES_COUNTER) == len(_ranges(path, fmt)) >= 5
    assert reading_note(run) == f"CSV read apart in {counter(run, eg.RANGES_COUNTER)} byte ranges"


# The multi_processing read in a process of its own: no fork server is warm there (no pool
# and no CLI run started one: forked_sdk_worker), so its workers are Beam's fresh
# interpreters, whose imports are the readers' own. In the test process an earlier test
# may have warmed the server, whose forks have TensorFlow from its preload.
_FRESH_READ = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[2])
    import test_csv_ranges as t
    from transforms import example_gen as eg
    fmt = eg.CsvFormat(range_bytes=t.RANGE_BYTES)
    workers = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    rows, _, run = t._read(sys.argv[1], fmt, *workers)
    print(json.dumps([os.getpid(), len(rows), sorted(run.readers)]))
    """
)


def test_csv_readers_in_worker_processes_never_import_tensorflow(split_csv):
    path, _ = split_csv
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_READ, path, os.path.dirname(os.path.abspath(__file__))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    launcher, rows, readers = json.loads(done.stdout.splitlines()[-1])
    assert rows == ROWS - 2
    # Read in worker processes, none of them a fork of a fork server (whose TensorFlow
    # would hide the readers'), and none of them imported TensorFlow.
    assert readers and launcher not in {pid for pid, _, _ in readers}, readers
    assert {(tf, forked) for _, tf, forked in readers} == {(False, False)}, readers


def test_the_split_is_the_same_whether_a_file_is_read_whole_or_in_ranges(split_csv):
    path, _ = split_csv
    whole = _read(path, eg.CsvFormat())
    assert counter(whole[2], eg.RANGES_COUNTER) == 0
    assert whole[:2] == _read(path, eg.CsvFormat(range_bytes=RANGE_BYTES))[:2]


def test_a_file_with_a_quoted_newline_stays_one_reader_and_the_summary_says_why(tmp_path):
    lines = _good_lines()
    lines[30] = '29,97,"two\nlines"'  # line 31 spans two physical lines
    lines[40] = "39;bad,n039"  # so this row is on line 42, not 41
    path = str(tmp_path / "quoted.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    fmt = eg.CsvFormat(range_bytes=RANGE_BYTES)
    assert _ranges(path, fmt) == [eg.CsvRange(path)]
    rows, rejected, run = _read(path, fmt)
    assert rejected == [(42, "has 2 fields but the header has 3", "39;bad,n039")]
    assert len(rows) == ROWS - 1
    assert counter(run, eg.ONE_READER_COUNTER + "quoted_newline") == 1
    assert counter(run, eg.RANGES_COUNTER) == 0
    assert counter(run, RESCANNED_COUNTER) == 1  # its chunks were typed, then it was whole
    assert reading_note(run) == (
        "1 CSV file read by one reader: a quoted field spans lines (a newline inside quotes)"
    )


def _quoted_lines() -> list[str]:
    """Rows whose string column is quoted, with delimiters and doubled quotes inside (no
    newline): chunk cuts fall inside quoted fields; a float column with one bad value."""
    lines = ["id,x,s"]
    for i in range(ROWS):
        x = "oops" if i == 17 else f"{i * 0.5:.1f}"
        lines.append(f'{i},{x},"a, ""quoted"" {i:03d}, b"')
    return lines


def test_chunks_type_a_file_as_the_in_order_pass_does_and_cut_at_line_starts(tmp_path):
    path = str(tmp_path / "quoted.csv")
    with open(path, "w") as f:
        f.write("\n".join(_quoted_lines()) + "\n")
    data = open(path, "rb").read()
    fmt = eg.CsvFormat(range_bytes=RANGE_BYTES)
    counts, ranges, rescanned = _chunked(path, fmt)
    assert not rescanned and len(ranges) == len(data) // RANGE_BYTES >= 10
    # Some nominal cuts fall inside a quoted field: the cut moved to the next line start.
    cuts = [c.lo for c in chunk_file(path, len(data), RANGE_BYTES)[1:]]
    assert any(data[:c].count(b'"') % 2 for c in cuts)
    assert counts == _in_order(path, fmt)[0]  # the same votes: x is FLOAT, 1 bad value
    assert ranges[0].start == data.index(b"\n") + 1 and ranges[0].first_line == 2
    assert ranges[-1].end == len(data)
    for a, b in zip(ranges, ranges[1:]):
        assert a.end == b.start and data[b.start - 1 : b.start] == b"\n"
        assert data[: b.start].count(b"\n") + 1 == b.first_line
    rows, rejected, run = _read(path, fmt)
    # The rejected row's text is its fields joined by the delimiter.
    assert rejected == [(19, "column 'x': 'oops' is not float", '17,oops,a, "quoted" 017, b')]
    assert len(rows) == ROWS - 1 and counter(run, RESCANNED_COUNTER) == 0
    assert counter(run, eg.RANGES_COUNTER) == len(ranges)


def test_a_cut_inside_a_field_that_spans_lines_sends_the_file_to_the_in_order_pass(tmp_path):
    lines = _good_lines()
    # A quoted field of 40 short lines (~240 bytes) covers at least one nominal cut.
    lines[20] = '19,67,"' + "\n".join(f"l{k:02d}" for k in range(40)) + '"'
    lines[50] = "49;bad,n049"  # after the long field: line 51 + 39 = 90
    path = str(tmp_path / "spans.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    data = open(path, "rb").read()
    fmt = eg.CsvFormat(range_bytes=RANGE_BYTES)
    field = (data.index(b'"'), data.rindex(b'"'))
    cuts = [c.lo for c in chunk_file(path, len(data), RANGE_BYTES)[1:]]
    assert any(field[0] < c < field[1] for c in cuts)
    counts, ranges, rescanned = _chunked(path, fmt)
    assert rescanned and (counts, ranges) == _in_order(path, fmt) == (counts, [eg.CsvRange(path)])
    rows, rejected, run = _read(path, fmt)
    assert rejected == [(90, "has 2 fields but the header has 3", "49;bad,n049")]
    assert len(rows) == ROWS - 1
    assert counter(run, RESCANNED_COUNTER) == 1
    assert counter(run, eg.ONE_READER_COUNTER + "quoted_newline") == 1


def test_small_and_compressed_files_are_typed_whole_large_ones_in_chunks(tmp_path):
    from transforms.example_gen.csv_chunks import PlanChunks

    big, small, packed = (str(tmp_path / n) for n in ("big.csv", "small.csv", "big.csv.gz"))
    for path, size in ((big, 1000), (small, 200), (packed, 1000)):
        with open(path, "wb") as f:
            f.write(b"a\n" + b"1\n" * (size // 2 - 1))
    plan = PlanChunks(RANGE_BYTES)
    chunks = list(plan.process(big))
    assert [(c.lo, c.hi) for c in chunks] == [(125 * i, 125 * (i + 1)) for i in range(8)]
    assert [o.value for o in plan.process(small)] == [small]  # under two ranges
    assert [o.value for o in plan.process(packed)] == [packed]


@pytest.mark.parametrize(
    "text, why",
    [
        (b'a,b\n1,"x\n2",3\n', eg.OneReader.QUOTED_NEWLINE),
        (b"a,b\r1,2\r3,4\r", eg.OneReader.LONE_CARRIAGE_RETURN),
        (b'a,b\n1,x"y\n2,3\n', eg.OneReader.LENIENT_QUOTING),
        # Fine: doubled quotes, quoted delimiters, CRLF line ends, a quoted header after
        # a byte-order mark.
        (b'\xef\xbb\xbf"a",b\r\n1,"x"",y"\r\n2,""\r\n', None),
    ],
)
def test_what_keeps_a_file_whole(tmp_path, text, why):
    path = str(tmp_path / "f.csv")
    with open(path, "wb") as f:
        f.write(text)
    scanner = LineScanner(1, ",")
    scanner.feed(text)
    ranges, reason = plan_ranges(path, scanner)
    assert reason is why
    assert (ranges == [eg.CsvRange(path)]) is (why is not None)
    assert [o.value for o in ScanCsvRanges(1, ",").process(path)] == ranges


def test_output_shards_scale_with_the_data(tmp_path):
    records = [[b"%06d" % (i * 10 + k) + b"x" * 94 for k in range(10)] for i in range(30)]
    with make_pipeline() as p:
        _ = p | beam.Create(records) | WriteTFRecordBatches(str(tmp_path), shard_bytes=1000)
    import tensorflow as tf

    files = sorted(glob.glob(str(tmp_path / "data-*")))
    assert len(files) == 30  # 1000 bytes of records a file: one list of ten 100-byte records
    read = [r for fn in files for r in tf.data.TFRecordDataset(fn, "GZIP").as_numpy_iterator()]
    assert sorted(read) == sorted(r for rs in records for r in rs)
