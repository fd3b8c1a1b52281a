"""The batched TFRecord sink: every record once, shard names, empty splits, no leftovers."""

from __future__ import annotations

import gzip
import os
import zlib

import apache_beam as beam
import pytest
from conftest import make_pipeline

from transforms.example_encoding import frame_records
from transforms.tfrecords import WriteTFRecordBatches, _GzipRecordWriter


def _read(pattern):
    import glob

    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    return files, [r.numpy() for f in files for r in tf.data.TFRecordDataset(f, "GZIP")]


@pytest.mark.parametrize("n_lists, per_list", [(0, 0), (1, 3), (40, 25)])
def test_every_record_is_written_once(tmp_path, n_lists, per_list):
    out = str(tmp_path / "split")
    lists = [[f"{i}-{j}".encode() for j in range(per_list)] for i in range(n_lists)]
    with make_pipeline() as p:
        _ = p | beam.Create(lists) | WriteTFRecordBatches(out)
    files, records = _read(os.path.join(out, "*.tfrecord.gz"))
    assert sorted(records) == sorted(r for rs in lists for r in rs)
    assert files, "an empty split still gets one (empty) file so readers' globs match"
    n = len(files)
    assert [os.path.basename(f) for f in files] == [
        f"data-{i:05d}-of-{n:05d}.tfrecord.gz" for i in range(n)
    ]
    # No temporary folder (bundle files before finalization) is left behind.
    assert sorted(os.listdir(out)) == sorted(os.path.basename(f) for f in files)


def _encode_int(i: int) -> list[bytes]:
    return [f"{i}-{j}".encode() * 20 for j in range(50)]


def _encode_failing_at_7(i: int) -> list[bytes]:
    if i == 7:
        raise ValueError("element 7 cannot be encoded")
    return _encode_int(i)


def test_encode_runs_on_the_sinks_threads_and_every_record_lands_in_some_shard(tmp_path):
    """With ``encode``, the sink takes any element, encodes and writes it on threads of its own;
    a small shard size makes the writing thread close files mid-bundle, which must all be kept."""
    out = str(tmp_path / "split")
    with make_pipeline() as p:
        _ = p | beam.Create(range(60)) | WriteTFRecordBatches(out, 20_000, encode=_encode_int)
    files, records = _read(os.path.join(out, "*.tfrecord.gz"))
    assert sorted(records) == sorted(r for i in range(60) for r in _encode_int(i))
    # 60 elements of ~4.5 kB of records with a 20 kB shard size: at least 12 files.
    assert len(files) >= 12, files


def test_an_error_on_the_writing_thread_fails_the_job_and_publishes_no_file(tmp_path):
    out = str(tmp_path / "split")
    with pytest.raises(Exception, match="element 7 cannot be encoded"):
        with make_pipeline() as p:
            _ = p | beam.Create(range(20)) | WriteTFRecordBatches(out, encode=_encode_failing_at_7)
    assert not os.path.exists(out) or not [f for f in os.listdir(out) if f.startswith("data-")]


@pytest.mark.parametrize("n", [0, 3, 20_000])
def test_the_writer_without_tensorflow_writes_what_tensorflow_reads(tmp_path, n):
    """What a data worker that never imported TensorFlow writes (past several 1 MiB
    flushes at 20,000 records of ~100 bytes; nothing at all at 0)."""
    records = [f"{i:06d}".encode() * (1 + i % 30) for i in range(n)]
    path = str(tmp_path / "data.tfrecord.gz")
    writer = _GzipRecordWriter(path)
    for start in range(0, n, 7000):  # several blocks
        writer.write(frame_records(records[start : start + 7000]))
    writer.close()
    assert _read(path)[1] == records


def test_read_example_batches_matches_tfxio_beam_source(tmp_path):
    """Our C++-batched reader gives the rows, types and Arrow schema TFXIO's source gives."""
    from apache_beam.testing.util import assert_that, equal_to
    from conftest import PENGUIN_DIR
    from tfx_bsl.public import tfxio

    from beam_pipeline.core.types import Split
    from beam_pipeline.stages.schema.inference import infer_schema
    from transforms import example_gen as eg
    from transforms.statistics import GenerateStatistics
    from transforms.tfrecords import ReadExampleBatches

    fmt = eg.CsvFormat(null_values=("NA",))
    files = eg.resolve_input_files(os.path.join(PENGUIN_DIR, "penguins.csv"))
    header = eg.read_csv_header(files, fmt)
    out, stats_path = str(tmp_path / "ex"), str(tmp_path / "stats.pb")
    splitter = eg.HashSplitter(fixed_split=Split.TRAIN)
    with make_pipeline() as p:
        result = p | eg.ReadCsvExamples(files, header, fmt, splitter)
        _ = result.batches | eg.WriteSplitExamples(out, (Split.TRAIN,))
        _ = (
            result.batches
            | beam.Map(lambda sb: sb.batch)
            | GenerateStatistics("train")
            | beam.Map(lambda s: open(stats_path, "wb").write(s.SerializeToString()))
        )
    from tensorflow_metadata.proto.v0 import statistics_pb2

    with open(stats_path, "rb") as f:
        schema = infer_schema(statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read()))
    pattern = os.path.join(out, "train", "*.tfrecord.gz")
    import glob

    expected_schema = tfxio.TFExampleRecord(pattern, schema=schema).ArrowSchema()

    def rows(batch):
        assert batch.schema.equals(expected_schema), (batch.schema, expected_schema)
        return [repr(sorted(r.items())) for r in batch.to_pylist()]

    with make_pipeline() as p:
        ours = (
            p
            | "Ours" >> ReadExampleBatches(sorted(glob.glob(pattern)), schema, batch_size=50)
            | "OurRows" >> beam.FlatMap(rows)
        )
        theirs = (
            p
            | "TFXIO" >> tfxio.TFExampleRecord(pattern, schema=schema).BeamSource()
            | "TheirRows" >> beam.FlatMap(rows)
        )
        assert_that(
            ours | "CountOurs" >> beam.combiners.Count.Globally(), equal_to([344]), label="all rows"
        )
        # Every row comes out of both readers equally often.
        balanced = (
            (
                ours | "TagOurs" >> beam.Map(lambda r: (r, 1)),
                theirs | "TagTheirs" >> beam.Map(lambda r: (r, -1)),
            )
            | beam.Flatten()
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv: kv[1] == 0)
            | beam.CombineGlobally(all)
        )
        assert_that(balanced, equal_to([True]), label="same rows")


def _example(i: int) -> bytes:
    import tensorflow as tf

    feature = {"i": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_batches_are_decoded_on_several_threads_and_come_out_in_the_files_order(tmp_path):
    """With tfx-bsl's decoder (a schema with tensor representations), the reader decodes two
    batches at a time, each with its own decoder, and yields them in the file's order; the
    last, short batch included."""
    import threading

    from tensorflow_metadata.proto.v0 import schema_pb2

    from transforms import tfrecords

    path = str(tmp_path / "data.tfrecord.gz")
    writer = _GzipRecordWriter(path)
    writer.write(frame_records([_example(i) for i in range(1003)]))
    writer.close()
    schema = schema_pb2.Schema()
    schema.feature.add(name="i", type=schema_pb2.INT)
    # A tensor representation of its own: one that TensorFlow's parser is not used for.
    group = schema.tensor_representation_group[""].tensor_representation["i"]
    group.varlen_sparse_tensor.column_name = "i"
    decode = tfrecords._DecodeFile(schema.SerializeToString(), batch_size=10)
    decode.setup()
    threads, decoders = set(), set()
    real = decode._decode

    def recording(records):  # notes which thread and decoder made each batch
        batch = real(records)
        threads.add(threading.get_ident())
        decoders.add(id(decode._local.decoder))
        return batch

    decode._decode = recording
    try:
        batches = list(decode.process(path))
    finally:
        decode.teardown()
    assert [b.num_rows for b in batches] == [10] * 100 + [3]
    assert [v for b in batches for v in b.column("i").to_pylist()] == [[i] for i in range(1003)]
    assert tfrecords._DECODERS == 2 and len(threads) == len(decoders) == 2


def _encode_tagged(i: int) -> list[bytes]:
    return [f"{i:03d}-{j}".encode() for j in range(30)]


def test_elements_encoded_on_several_threads_are_written_in_the_order_they_came(tmp_path):
    """Encoding runs two elements at a time ahead of the one writing thread; each file holds
    its elements' records in the order the bundle gave them (no reordering by whichever
    encoding finished first)."""
    out = str(tmp_path / "split")
    with make_pipeline() as p:
        _ = p | beam.Create(range(200)) | WriteTFRecordBatches(out, 50_000, encode=_encode_tagged)
    files, records = _read(os.path.join(out, "*.tfrecord.gz"))
    assert sorted(records) == sorted(r for i in range(200) for r in _encode_tagged(i))
    import tensorflow as tf

    for f in files:
        in_file = [r.numpy().decode() for r in tf.data.TFRecordDataset(f, "GZIP")]
        elements = [int(r.split("-")[0]) for r in in_file[::30]]
        assert elements == sorted(elements), f
        assert in_file == [r.decode() for i in elements for r in _encode_tagged(i)], f


def _mixed_example(i: int) -> bytes:
    """Features absent, single, several values; empty and non-UTF-8 strings; extremes."""
    import tensorflow as tf

    feature = {}
    if i % 3:
        feature["i"] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=[i, -(2**63), 2**63 - 1][: 1 + i % 4])
        )
    if i % 5:
        feature["f"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[i / 7, float("nan"), -0.0][: i % 4 or 1])
        )
    if i % 7:
        value = [b"", b"\xff\x00bytes", f"s{i}".encode() * (i % 9)][: 1 + i % 3]
        feature["s"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
    feature["unknown"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.parametrize("n, batch_size", [(0, 10), (1, 10), (1003, 64)])
def test_tensorflow_parser_gives_the_batches_of_tfx_bsl_decoder(
    tmp_path, monkeypatch, n, batch_size
):
    """Where the schema allows it, the reader parses with TensorFlow; its RecordBatches
    equal tfx-bsl's decoder's, batch by batch: types, nulls for absent features, several
    values per row, strings of any bytes, features not in the schema left. The parser is
    traced once for every file a DoFn reads (a trace per file cost more than a small file)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.coders import example_coder

    from transforms import tfrecords

    records = [_mixed_example(i) for i in range(n)]
    path = str(tmp_path / "data.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for record in records:
            w.write(record)
    traces = []
    parse_fn = tfrecords._parse_fn

    def counted_parse_fn(spec):  # the Python body runs once per trace
        parse = parse_fn(spec)
        return lambda serialized: traces.append(1) or parse(serialized)

    monkeypatch.setattr(tfrecords, "_parse_fn", counted_parse_fn)
    schema = schema_pb2.Schema()
    schema.feature.add(name="i", type=schema_pb2.INT)
    schema.feature.add(name="f", type=schema_pb2.FLOAT)
    schema.feature.add(name="s", type=schema_pb2.BYTES)
    decode = tfrecords._DecodeFile(schema.SerializeToString(), batch_size=batch_size)
    decode.setup()
    try:
        assert decode._fast is not None, "this schema is parsed by TensorFlow"
        ours = list(decode.process(path))
        assert [b.num_rows for b in decode.process(path)] == [b.num_rows for b in ours]
    finally:
        decode.teardown()
    decoder = example_coder.ExamplesToRecordBatchDecoder(schema.SerializeToString())
    theirs = [decoder.DecodeBatch(records[i : i + batch_size]) for i in range(0, n, batch_size)]
    assert [b.num_rows for b in ours] == [b.num_rows for b in theirs]
    assert len(traces) == 1, "the second file traced the parser again"
    for a, b in zip(ours, theirs):
        assert a.schema.equals(b.schema), (a.schema, b.schema)
        # NaN != NaN in Arrow's equality: compare the float column's bits.
        for name in ("i", "s"):
            assert a.column(name).equals(b.column(name)), name
        fa, fb = a.column("f"), b.column("f")
        assert fa.is_null().equals(fb.is_null()) and fa.offsets.equals(fb.offsets)
        assert np.array_equal(
            fa.flatten().to_numpy().view(np.uint32), fb.flatten().to_numpy().view(np.uint32)
        )


def _tf_batches(path: str, batch_size: int) -> list[list[bytes]]:
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP").batch(batch_size)
    return [list(b.numpy()) for b in dataset]


def _our_batches(path: str, batch_size: int) -> list[list[bytes]]:
    from transforms.tfrecords import _framed_batches

    return [list(b.numpy()) for b in _framed_batches(path, batch_size)]


@pytest.mark.parametrize("batch_size", [1, 7, 5000])
@pytest.mark.parametrize("chunk", [997, "first member"])
def test_the_reader_gives_tensorflow_readers_batches(tmp_path, monkeypatch, batch_size, chunk):
    """Records of 0 bytes to several chunks long, chunks that end inside headers and
    records (or exactly at the end of a gzip member), inflated a few KB at a time, two gzip
    members in one file (two writers' output, concatenated): the same batches of the same
    records as TensorFlow's reader."""
    from transforms import tfrecords

    monkeypatch.setattr(tfrecords, "_INFLATE_STEP", 4096)
    records = [bytes([i % 251]) * (i * 37 % 2100) for i in range(400)] + [b"x" * 50_000]
    parts = []
    for half in (records[:150], records[150:]):
        path = str(tmp_path / f"part{len(parts)}.gz")
        writer = _GzipRecordWriter(path)
        writer.write(frame_records(half))
        writer.close()
        parts.append(open(path, "rb").read())
    path = str(tmp_path / "data.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    monkeypatch.setattr(tfrecords, "_READ_CHUNK", len(parts[0]) if chunk != 997 else chunk)
    ours = _our_batches(path, batch_size)
    assert ours == _tf_batches(path, batch_size)
    assert [r for b in ours for r in b] == records


def test_the_reader_reads_an_empty_file_and_an_empty_gzip_as_no_records(tmp_path):
    empty = tmp_path / "empty.gz"
    empty.write_bytes(b"")
    no_records = str(tmp_path / "none.gz")
    _GzipRecordWriter(no_records).close()
    for path in (str(empty), no_records):
        assert _our_batches(path, 10) == [] == _tf_batches(path, 10)


def _framed_file(tmp_path, records, corrupt=None) -> tuple[str, bytes]:
    framed = frame_records(records)
    data = bytearray(framed.data.tobytes())
    if corrupt is not None:
        data[corrupt] ^= 0xFF
    path = str(tmp_path / "data.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(bytes(data)))
    return path, bytes(data)


_DAMAGED = r"Examples file \S*data\.tfrecord\.gz is damaged: "
_FIX = r"; write the examples again with --no_cache=ExampleGen"


def test_a_truncated_or_corrupt_file_fails_naming_the_file_and_the_fix(tmp_path):
    from beam_pipeline.core.errors import PipelineError

    records = [f"record {i}".encode() * 20 for i in range(300)]
    path, _ = _framed_file(tmp_path, records)
    whole = open(path, "rb").read()

    def fails(content: bytes, what: str) -> None:
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(PipelineError, match=_DAMAGED + what + ".*" + _FIX):
            _our_batches(path, 50)

    # Cut inside the gzip data, or followed by bytes that are not gzip.
    fails(whole[: len(whole) // 2], "its gzip data ends early")
    fails(whole + b"\0junk\0\0\0", "its gzip data ends early .* or is followed by other bytes")
    # A complete gzip member whose records end inside one.
    fails(gzip.compress(frame_records(records).data.tobytes()[:-5]), "it ends inside record 299")
    # A flipped byte in a record's data (stored, not deflated, so the inflate goes on):
    # gzip's CRC-32 of the member catches it, where TensorFlow's reader checks the record's.
    data = frame_records(records).data.tobytes()
    stored = zlib.compressobj(0, zlib.DEFLATED, 31)
    member = bytearray(stored.compress(data) + stored.flush())
    member[len(member) // 2] ^= 1
    fails(bytes(member), r"it cannot be read as gzip \(.*checksum")
    # Not gzip at all.
    fails(b"id,value\n1,2\n", r"it cannot be read as gzip")


def test_a_record_header_that_fails_its_crc_fails_naming_the_record(tmp_path):
    from beam_pipeline.core.errors import PipelineError

    records = [f"record {i}".encode() for i in range(100)]
    header_57 = sum(len(r) + 16 for r in records[:57]) + 9  # a byte of its length's CRC
    path, _ = _framed_file(tmp_path, records, corrupt=header_57)
    with pytest.raises(
        PipelineError, match=_DAMAGED + "the header of record 57 fails its checksum"
    ):
        _our_batches(path, 10)


def test_a_gzip_file_that_is_not_tfrecords_fails_at_its_first_header(tmp_path, monkeypatch):
    """Its first bytes would make a length of petabytes: the header is checked before the
    reader waits for that much (it would have buffered the whole file, then failed)."""
    from beam_pipeline.core.errors import PipelineError
    from transforms import tfrecords

    monkeypatch.setattr(tfrecords, "_READ_CHUNK", 1000)
    path = str(tmp_path / "data.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(b"id,name,value\n" + b"1,a,2.5\n" * 200_000))
    batches = tfrecords._framed_batches(path, 10)
    with pytest.raises(PipelineError, match=_DAMAGED + "the header of record 0 fails its checksum"):
        next(batches)


def test_a_damaged_file_read_in_a_beam_job_ends_in_the_readers_sentence(tmp_path):
    """What the CLI shows: the sentence of the worker's PipelineError, through Beam."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    from beam_pipeline.core.errors import user_error
    from transforms.tfrecords import ReadExampleBatches

    path, _ = _framed_file(tmp_path, [_example(i) for i in range(100)])
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    schema = schema_pb2.Schema()
    schema.feature.add(name="i", type=schema_pb2.INT)
    with pytest.raises(Exception) as raised:
        with make_pipeline() as p:
            _ = p | ReadExampleBatches([path], schema, batch_size=10)
    error = user_error(raised.value, str(tmp_path))
    assert error is not None and str(error).startswith(f"Examples file {path} is damaged: ")
