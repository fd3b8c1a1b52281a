"""Writing batches of serialized records as sharded gzip TFRecord files.

Why not Beam's ``WriteToTFRecord``: it takes one element per record and frames each one
in Python, which becomes most of ExampleGen's time on large inputs. This sink takes
*lists* of records, or elements with an ``encode`` that makes them (ExampleGen's and
Transform's RecordBatches, encoded and framed a batch at a time by
:mod:`transforms.example_encoding`), and compresses each batch's framed records with one
call of ISA-L's deflate, a new file every ``SHARD_BYTES`` (shards scale with the data). It
keeps Beam's safety: each bundle writes its own temporary file,
and only the files of committed bundles (gathered after a combine, so outputs of failed
or retried attempts are never seen) are renamed to ``data-SSSSS-of-NNNNN.tfrecord.gz``;
leftovers of failed attempts are deleted.

:class:`ReadExampleBatches` is the reading side: gzip TFRecords of tf.Example to Arrow
RecordBatches typed by a schema, read in batches (ISA-L's inflate, :func:`_framed_batches`)
and parsed by TensorFlow's example parser into the RecordBatches tfx-bsl's decoder (the one TFXIO's
``TFExampleRecord`` uses) makes, or decoded by that decoder where the schema needs it
(``_fast_parse_spec``). Why not TFXIO's
``BeamSource``: it reads through Beam's ``ReadFromTFRecord``, which frames every record in
Python, a large share of a Transform's time on large inputs (figures in benchmarks/).
A read can also spill what it decoded (Arrow IPC) for a later read of the same files in
the job (``spill_dir``, ``spilled``): Transform's analysis and transform passes.

Example::

    serialized_lists | WriteTFRecordBatches("out/train")   # out/train/data-*.tfrecord.gz
    p | ReadExampleBatches(["out/train/data-00000-of-00001.tfrecord.gz"], schema)
"""

from __future__ import annotations

import collections
import functools
import pickle
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue
from isal import isal_zlib

from beam_pipeline.core.errors import PipelineError
from transforms.example_encoding import FramedRecords, frame_records
from transforms.metrics import NAMESPACE

__all__ = [
    "ReadExampleBatches",
    "SpilledBatches",
    "SHARD_BYTES",
    "SHARD_SUFFIX",
    "WriteTFRecordBatches",
]

SHARD_SUFFIX = ".tfrecord.gz"
# ISA-L's level 1: files as large as zlib's level 1 makes, several times faster to make
# (and much faster than zlib's default level 6, whose files are somewhat smaller); the
# examples are intermediate artifacts, rewritten by every run, so speed wins.
_GZIP_LEVEL = 1
# The target size of one output file, in bytes of serialized records (before gzip): large
# enough that opening a file costs nothing next to reading it, small enough that a 1M-row
# split is several files for several readers.
SHARD_BYTES = 64 << 20
# Batches decoded at once by ReadExampleBatches (one thread and decoder each), and elements
# encoded at once ahead of WriteTFRecordBatches's writing thread (one thread each).
_DECODERS = 2
_IN_FLIGHT = 2


class _GzipRecordWriter:
    """A gzip TFRecord file of blocks of framed records (:class:`FramedRecords`), read as
    TensorFlow's own are.

    Why not TensorFlow's ``TFRecordWriter``: it frames and compresses one record per Python
    call, which cost more than the encoding itself on a Transform's output; the records
    come framed a batch at a time (:mod:`transforms.example_encoding`), so writing is one
    deflate call per batch (it releases the GIL), and a data-stage worker needs no
    TensorFlow. The deflate is ISA-L's (python-isal), not zlib's: the same gzip format
    that every gzip reader (TensorFlow's too) reads, made about 4 times faster at the
    same level and size (benchmarks/bench_example_encoding.py).
    """

    def __init__(self, path: str):
        self._file = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._zip = isal_zlib.compressobj(_GZIP_LEVEL, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)

    def write(self, framed: FramedRecords) -> None:
        self._file.write(self._zip.compress(framed.data))

    def close(self) -> None:
        self._file.write(self._zip.flush())
        self._file.close()


def _makedirs(path: str) -> None:
    # Beam's FileSystems in the job's steps, as its IOs do (fileio's gfile would import
    # TensorFlow into every data worker); mkdirs fails on a folder that exists.
    if not FileSystems.exists(path):
        try:
            FileSystems.mkdirs(path)
        except OSError:
            if not FileSystems.exists(path):  # not another bundle's mkdirs: a real error
                raise


class _WriteBundleFiles(beam.DoFn):
    """Writes the record lists of a bundle into temporary gzip TFRecord files, a new file
    after every ``shard_bytes`` bytes of records: shards scale with the data, so the
    stages that read them (one reader per file) read in parallel.

    The writing runs on a thread of its own, behind the steps before this one, and
    ``encode`` (element -> records or FramedRecords, when given) on ``_IN_FLIGHT`` threads
    ahead of it: compressing and most of encoding release the GIL, so on the
    DirectRunner, where a worker runs a bundle's fused steps one element at a time on one
    Python thread, they use the other cores while that thread makes the next element
    (tf.Transform's graphs, ExampleGen's parsing). The elements are written in the order
    they came; at most ``_IN_FLIGHT`` of them wait, so memory stays flat. An error of an
    encoding or the writing thread is raised by a later ``process`` or by
    ``finish_bundle``, so the bundle fails as usual.
    """

    def __init__(
        self,
        tmp_dir: str,
        shard_bytes: int,
        encode: Callable[[Any], Iterable[bytes]] | None = None,
    ):
        self._tmp_dir = tmp_dir
        self._shard_bytes = shard_bytes
        self._encode = encode

    def setup(self):
        self._behind = ThreadPoolExecutor(max_workers=1, thread_name_prefix="write")
        self._encoders = (
            ThreadPoolExecutor(max_workers=_IN_FLIGHT, thread_name_prefix="encode")
            if self._encode is not None
            else None
        )

    def start_bundle(self):
        self._writer = None
        self._path = None
        self._bytes = 0
        self._in_flight: collections.deque = collections.deque()  # write futures, in order
        self._closed: list[str] = []  # files the writing thread finished, not yet emitted

    def process(self, element):
        while len(self._in_flight) >= _IN_FLIGHT:
            self._in_flight.popleft().result()
        if self._encoders is not None:
            element = self._encoders.submit(self._encode, element)
        # One writing thread: the writes run in the order they are submitted.
        self._in_flight.append(self._behind.submit(self._write, element))
        # Files closed by the writing thread so far (list.pop is atomic under the GIL).
        while self._closed:
            yield self._closed.pop()

    def _write(self, element) -> None:
        records = element.result() if self._encoders is not None else element
        if self._writer is None:
            _makedirs(self._tmp_dir)
            self._path = FileSystems.join(self._tmp_dir, f"{uuid.uuid4().hex}{SHARD_SUFFIX}")
            self._writer = _GzipRecordWriter(self._path)
            self._bytes = 0
        if not isinstance(records, FramedRecords):
            records = frame_records(list(records))
        self._writer.write(records)
        self._bytes += records.payload_bytes
        if self._bytes >= self._shard_bytes:
            self._writer.close()
            self._writer = None
            self._closed.append(self._path)

    def finish_bundle(self):
        try:
            while self._in_flight:
                self._in_flight.popleft().result()
        finally:
            # After an error the later writes still ran (or failed alike); none is left
            # running into the next bundle's state.
            for later in self._in_flight:
                later.exception()
            self._in_flight.clear()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._closed.append(self._path)
        for path in self._closed:
            yield WindowedValue(path, GlobalWindow().max_timestamp(), [GlobalWindow()])
        self._closed = []

    def teardown(self):
        self._behind.shutdown(wait=True)
        if self._encoders is not None:
            self._encoders.shutdown(wait=True)


def _finalize(paths: list[str], out_dir: str, tmp_dir: str) -> list[str]:
    """Renames committed temporary files to their shard names; removes the rest."""
    paths = sorted(paths)
    _makedirs(out_dir)
    if not paths:
        # An empty split still gets one (empty) file so readers' globs match.
        empty = FileSystems.join(out_dir, f"data-00000-of-00001{SHARD_SUFFIX}")
        _GzipRecordWriter(empty).close()
        paths, final = [], [empty]
    else:
        final = [
            FileSystems.join(out_dir, f"data-{i:05d}-of-{len(paths):05d}{SHARD_SUFFIX}")
            for i in range(len(paths))
        ]
    if paths:
        FileSystems.rename(paths, final)
    # Files of failed or retried bundles, then the folder itself where folders exist.
    leftovers = FileSystems.match([FileSystems.join(tmp_dir, "*")])[0].metadata_list
    if leftovers:
        FileSystems.delete([m.path for m in leftovers])
    if FileSystems.exists(tmp_dir):
        FileSystems.delete([tmp_dir])
    return final


class WriteTFRecordBatches(beam.PTransform[beam.PCollection, beam.PCollection]):
    """Writes lists of serialized records to ``<out_dir>/data-*.tfrecord.gz``.

    Returns a PCollection with one element: the list of files written. A file holds about
    ``shard_bytes`` bytes of records (uncompressed), or what one bundle wrote if less.
    With ``encode`` (a picklable callable: element -> serialized records), the elements are
    anything it takes, e.g. RecordBatches, encoded on the writing thread.
    """

    def __init__(
        self,
        out_dir: str,
        shard_bytes: int = SHARD_BYTES,
        encode: Callable[[Any], Iterable[bytes]] | None = None,
    ):
        super().__init__()
        self._encode = encode
        self._out_dir = out_dir
        self._tmp_dir = FileSystems.join(out_dir, f".tmp-{uuid.uuid4().hex[:8]}")
        self._shard_bytes = shard_bytes

    def expand(self, record_lists):
        return (
            record_lists
            | "WriteBundles"
            >> beam.ParDo(_WriteBundleFiles(self._tmp_dir, self._shard_bytes, self._encode))
            | "Gather" >> beam.combiners.ToList()
            | "Finalize" >> beam.Map(_finalize, self._out_dir, self._tmp_dir)
        )


# Bytes of a gzip TFRecord file read (compressed) per step of _framed_batches, and the
# most bytes inflated from it at once.
_READ_CHUNK = 4 << 20
_INFLATE_STEP = 64 << 20


def _damaged(path: str, what: str) -> PipelineError:
    """The sentence for an examples file that cannot be read: the files are a run's own
    (ExampleGen's), so writing them again is the fix; a resume alone would reuse them."""
    return PipelineError(
        f"Examples file {path} is damaged: {what}; write the examples again with "
        "--no_cache=ExampleGen (the same --run_id resumes the run)."
    )


def _framed_batches(path: str, batch_size: int):
    """The serialized records of a gzip TFRecord file, ``batch_size`` at a time, as 1-D
    ``tf.string`` tensors (what ``TFRecordDataset(...).batch(batch_size)`` yields).

    Why not TensorFlow's reader: it gunzips with zlib and frames and checks each record in
    C++, then builds the batch one record at a time; inflating with ISA-L (about twice
    zlib's speed), finding the records in Python and cutting a batch out of its bytes with
    one ``tf.strings.substr`` takes about 30% less CPU on files of taxi examples, a quarter
    less with the parse that follows (benchmarks/bench_read_examples.py). Each record's
    length is checked against its header's CRC32C as TensorFlow's reader does, a batch at a
    time; its data's CRC32C is not, because gzip's CRC-32 of the whole member (which the
    inflate checks at the member's end) already covers every record's bytes. Memory stays
    at about one chunk and one batch of records; concatenated gzip members are read in
    order.
    """
    import struct

    import numpy as np
    import tensorflow as tf

    from transforms.example_encoding import _header

    unpack = struct.Struct("<Q").unpack_from
    # The batch being gathered starts at buf's first byte (what came before is cut off).
    buf = bytearray()
    pos = 0  # where the next record's header starts in buf
    # This batch's records: where their data starts in buf. Their lengths follow from it
    # (a record takes 16 bytes and its data), so the loop below, which runs once per
    # record holding the GIL, keeps one list: it is a fair part of a read's Python time.
    starts: list[int] = []
    done = 0  # records of the batches before this one

    def check(at: np.ndarray, length: np.ndarray, record: int) -> None:
        """The headers at ``at`` (offsets in buf; the first is record ``record`` of the
        file) against the CRC32C of their lengths."""
        raw = np.frombuffer(buf, dtype=np.uint8, count=int(at[-1]) + 12)
        headers = raw[at[:, None] + np.arange(12)]
        expected = _header(length)
        if not np.array_equal(headers, expected):
            bad = record + int(np.flatnonzero((headers != expected).any(axis=1))[0])
            raise _damaged(path, f"the header of record {bad} fails its checksum")

    def batch():
        at = np.array(starts, dtype=np.int64)
        length = np.diff(at, append=pos + 12) - 16
        check(at - 12, length, done)
        blob = tf.constant(bytes(memoryview(buf)[:pos]))
        return tf.strings.substr(blob, at, length)

    append = starts.append
    for piece in _inflated(path):
        buf += piece
        end = len(buf)
        left = batch_size - len(starts)  # records this batch still takes
        while end - pos >= 12:
            (length,) = unpack(buf, pos)
            following = pos + 16 + length
            if following > end:
                # A record not all here yet: its header is checked now, so that bytes that
                # are not a record's header are not taken for a length to wait for.
                check(np.array([pos]), np.array([length]), done + len(starts))
                break
            append(pos + 12)
            pos = following
            left -= 1
            if not left:
                yield batch()
                del buf[:pos]
                end -= pos
                done += len(starts)
                pos = 0
                starts.clear()  # batch() copied them
                left = batch_size
    if pos != len(buf):
        raise _damaged(path, f"it ends inside record {done + len(starts)} (a truncated copy?)")
    if starts:
        yield batch()


def _inflated(path: str):
    """The gunzipped bytes of a file, in pieces of at most ``_INFLATE_STEP`` bytes (a chunk of
    very compressible data would inflate to many times its size in one piece)."""
    new = functools.partial(isal_zlib.decompressobj, 16 + isal_zlib.MAX_WBITS)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        inflate = new()
        read_any = False
        while chunk := f.read(_READ_CHUNK):
            read_any = True
            while chunk:
                if inflate.eof:  # the next gzip member
                    inflate = new()
                try:
                    yield inflate.decompress(chunk, _INFLATE_STEP)
                except isal_zlib.error as e:
                    raise _damaged(path, f"it cannot be read as gzip ({e})") from None
                chunk = inflate.unused_data if inflate.eof else inflate.unconsumed_tail
        if read_any and not inflate.eof:
            raise _damaged(
                path, "its gzip data ends early (a truncated copy?) or is followed by other bytes"
            )


class _DecodeFile(beam.DoFn):
    """One gzip TFRecord file of tf.Examples -> RecordBatches of up to ``batch_size`` rows.

    A thread of its own reads and gunzips ahead (:func:`_framed_batches`); each batch of
    records is then decoded on a thread of this DoFn's pool, ``_DECODERS`` batches at a
    time, while the steps after this one (tf.Transform's TensorFlow graphs) work on the
    current one, and the batches come out in the file's order. Where the schema allows
    (:func:`_fast_parse_spec`), TensorFlow's parser decodes them (one function, traced once
    per DoFn instance: tracing one per file, as a ``tf.data`` map does, cost more than
    reading a small file) and only the assembly of the Arrow arrays (numpy, no object per
    value) runs in Python; else tfx-bsl's decoder does, one per thread (a decoder is not
    thread-safe). Inflating, parsing and decoding release the GIL.
    """

    def __init__(self, schema_bytes: bytes, batch_size: int, spill_dir: str | None = None):
        self._schema_bytes = schema_bytes
        self._batch_size = batch_size
        self._spill_dir = spill_dir
        self._files_decoded = beam.metrics.Metrics.counter(NAMESPACE, "read.files_decoded")
        self._files_from_spill = beam.metrics.Metrics.counter(NAMESPACE, "read.files_from_spill")

    def setup(self):
        self._local = threading.local()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read")
        self._ahead = ThreadPoolExecutor(max_workers=_DECODERS, thread_name_prefix="decode")
        self._fast = _fast_parse_spec(self._schema_bytes)
        if self._fast is not None:
            import tensorflow as tf

            spec, self._arrow_schema = self._fast
            self._parse_records = tf.function(
                _parse_fn(spec), input_signature=[tf.TensorSpec([None], tf.string)]
            ).get_concrete_function()

    def process(self, path: str, spilled=None):
        """``spilled``: the side input of an earlier read's spill (file -> its spill file);
        a file it names is read from there, already decoded."""
        if spilled and path in spilled:
            self._files_from_spill.inc()
            yield from _read_spill(spilled[path])
            return
        self._files_decoded.inc()
        if self._spill_dir is None:
            yield from self._decoded(path)
        else:
            writer = _SpillWriter(
                FileSystems.join(self._spill_dir, f"{uuid.uuid4().hex}{SPILL_SUFFIX}")
            )
            try:
                for batch in self._decoded(path):
                    writer.write(batch)
                    yield batch
            finally:  # also when a later step failed, which ends this generator
                writer.close()
            yield beam.pvalue.TaggedOutput(SPILLED, (path, writer.path))

    def _decoded(self, path: str):
        batches = _framed_batches(path, self._batch_size)
        decode = self._decode if self._fast is None else self._parse
        pending: collections.deque = collections.deque()

        def decode_next(records):
            # The one reading thread takes the batches in the file's order.
            records = records.result()
            return None if records is None else decode(records)

        def submit() -> None:
            pending.append(
                self._ahead.submit(decode_next, self._reader.submit(next, batches, None))
            )

        for _ in range(_DECODERS):
            submit()
        while pending:
            batch = pending.popleft().result()
            if batch is None:  # the file's end: the later ones are ends too
                for later in pending:
                    later.result()
                break
            submit()
            yield batch

    def _parse(self, records):
        """One RecordBatch of serialized tf.Examples, by TensorFlow's parser."""

        num_rows, parsed = self._parse_records(records)
        num_rows = int(num_rows)
        columns = [
            _list_array(f, num_rows, [t.numpy() for t in parsed[f.name]])
            for f in self._arrow_schema
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self._arrow_schema)

    def _decode(self, records):
        """One RecordBatch of serialized tf.Examples (on a decoding thread, its decoder)."""
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            from tfx_bsl.coders import example_coder

            decoder = self._local.decoder = example_coder.ExamplesToRecordBatchDecoder(
                self._schema_bytes
            )
        return decoder.DecodeBatch(list(records.numpy()))

    def teardown(self):
        self._reader.shutdown(wait=True)
        self._ahead.shutdown(wait=True)


def _fast_parse_spec(schema_bytes: bytes):
    """The ``tf.io.parse_example`` features that give exactly the RecordBatches of tfx-bsl's
    decoder for this schema, with its Arrow schema; None where only that decoder does.

    TensorFlow's parser reads each record's wire format once, takes only the schema's
    features and runs on tf.data's threads; tfx-bsl's decoder builds every record as a full
    protobuf first, which made it the largest single cost of a Transform (about three times
    the parser's CPU on the taxi data, ``benchmarks/bench_transform.py --profile``). The
    parser cannot tell a feature absent from a record from one present with no values: both
    come out as a null list here, as absence does from tfx-bsl. tf.Transform's tensors
    (sparse and ragged features) treat the two alike; a schema whose tensor
    representations could tell them apart (a dense tensor with a default value), or with
    sparse, weighted or struct features, keeps tfx-bsl's decoder.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.coders import example_coder

    schema = schema_pb2.Schema.FromString(schema_bytes)
    if schema.tensor_representation_group or schema.sparse_feature or schema.weighted_feature:
        return None
    import tensorflow as tf

    dtypes = {
        pa.large_list(pa.int64()): tf.int64,
        pa.large_list(pa.float32()): tf.float32,
        pa.large_list(pa.large_binary()): tf.string,
    }
    arrow_schema = example_coder.ExamplesToRecordBatchDecoder(schema_bytes).ArrowSchema()
    if not all(field.type in dtypes for field in arrow_schema):
        return None
    spec = {field.name: tf.io.VarLenFeature(dtypes[field.type]) for field in arrow_schema}
    return spec, arrow_schema


def _parse_fn(spec):
    """serialized records -> (their count, per feature: the row of each value and the
    values; strings as their lengths and one joined string, so that no Python object is
    made per value)."""
    import tensorflow as tf

    def parse(serialized):
        out = {}
        for name, sparse in tf.io.parse_example(serialized, spec).items():
            rows = sparse.indices[:, 0]
            if sparse.dtype == tf.string:
                out[name] = (
                    rows,
                    tf.strings.length(sparse.values),
                    tf.strings.reduce_join(sparse.values),
                )
            else:
                out[name] = (rows, sparse.values)
        return tf.shape(serialized, out_type=tf.int64)[0], out

    return parse


def _list_array(field, num_rows: int, parsed):
    """One feature's parsed values -> the LargeListArray tfx-bsl's decoder makes."""
    import numpy as np

    rows = parsed[0]
    counts = np.bincount(rows, minlength=num_rows)
    offsets = np.zeros(num_rows + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    present = counts > 0
    nulls = int(num_rows - np.count_nonzero(present))
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    if len(parsed) == 3:  # strings: lengths and the joined bytes
        lengths, joined = parsed[1], parsed[2]
        value_offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=value_offsets[1:])
        values = pa.Array.from_buffers(
            pa.large_binary(),
            len(lengths),
            [None, pa.py_buffer(value_offsets), pa.py_buffer(joined)],
        )
    else:
        values = pa.array(parsed[1], type=field.type.value_type)
    return pa.Array.from_buffers(
        field.type, num_rows, [validity, pa.py_buffer(offsets)], nulls, children=[values]
    )


class RecordBatchCoder(beam.coders.Coder):
    """pa.RecordBatch elements: pickled, as Beam's fallback coder does, and sized by their
    buffers. Beam's runners estimate the size of sampled elements of every PCollection
    for its metrics by encoding them; with the fallback coder that pickled (copied) most
    batches of a small job a few times over, on the thread that runs the steps, about a
    gigabyte for a 1M-row Transform. Registered for ``pa.RecordBatch`` (Beam's own way to
    give a type a coder), so every PCollection typed so uses it."""

    def encode(self, value: pa.RecordBatch) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return pickle.loads(encoded)

    def estimate_size(self, value: pa.RecordBatch) -> int:
        return value.nbytes

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return pa.RecordBatch


beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)


class SpilledBatches(NamedTuple):
    """What :class:`ReadExampleBatches` with a ``spill_dir`` gives: the batches, and one
    ``(file, spill file)`` pair per file read (the ``spilled`` of a later read)."""

    batches: beam.PCollection
    spilled: beam.PCollection


class ReadExampleBatches(beam.PTransform[beam.pvalue.PBegin, beam.PCollection]):
    """Reads gzip TFRecord files of tf.Example as RecordBatches typed by ``schema``.

    The batches have the Arrow schema of ``tfxio.TFExampleRecord(..., schema=schema)``, so
    its ``TensorAdapterConfig`` describes them (tf.Transform's input).

    Args:
      files: the files, or ``(key, path)`` pairs with ``tag``.
      schema: the examples' schema.
      batch_size: rows per RecordBatch.
      tag: with ``files`` given as ``(key, path)`` pairs, each batch of a file goes out as
        ``tag(batch, key)`` (a column naming its split, say): one read of several inputs,
        where a ``Flatten`` of one read each would make the runner hold every read's
        batches until the step after it can run.
      spill_dir: also write each file's batches, as read, to an Arrow IPC file (LZ4) in
        this folder; the read then gives :class:`SpilledBatches`. For a job that reads the
        same files twice, one pass after the other (tf.Transform's analysis, then its
        transform): decoding and spilling taxi examples takes about nine times the CPU
        of reading the spill back (benchmarks/bench_read_examples.py --spill), and the
        batches wait on disk, not in the runner's memory. The folder is the caller's to
        delete once the later read is done.
      spilled: a later read's ``SpilledBatches.spilled``: a file it names is read from its
        spill file.
    """

    def __init__(
        self,
        files,
        schema,
        batch_size: int = 4096,
        tag=None,
        spill_dir: str | None = None,
        spilled: beam.PCollection | None = None,
    ):
        super().__init__()
        if not files:
            raise ValueError("ReadExampleBatches needs at least one file.")
        self._files = list(files)
        self._schema_bytes = schema.SerializeToString()
        self._batch_size = batch_size
        self._tag = tag
        self._spill_dir = spill_dir
        self._spilled = spilled

    def expand(self, pbegin):
        if self._tag is None:
            decode = _DecodeFile(self._schema_bytes, self._batch_size, self._spill_dir)
        else:
            decode = _DecodeTaggedFile(
                self._schema_bytes, self._batch_size, self._tag, self._spill_dir
            )
        side = {} if self._spilled is None else {"spilled": beam.pvalue.AsDict(self._spilled)}
        read = pbegin | "ListFiles" >> beam.Create(self._files)
        if self._spill_dir is None:
            return read | "Decode" >> beam.ParDo(decode, **side).with_output_types(pa.RecordBatch)
        outputs = read | "Decode" >> beam.ParDo(decode, **side).with_output_types(
            pa.RecordBatch, **{SPILLED: tuple[str, Optional[str]]}
        ).with_outputs(SPILLED, main="batches")
        return SpilledBatches(outputs.batches, outputs[SPILLED])


# The tagged output of a spilling read, and its files' suffix.
SPILLED = "spilled"
SPILL_SUFFIX = ".arrow"


class _SpillWriter:
    """One file's RecordBatches as an Arrow IPC stream, LZ4 compressed (about half the
    bytes of the plain stream for a few times its small CPU cost: the spill of a large
    dataset is written to the pipeline's temporary location, perhaps over a network).
    ``path`` is None until a batch is written: a file without rows spills nothing."""

    def __init__(self, path: str):
        self._target = path
        self.path: str | None = None
        self._file = None
        self._writer = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            _makedirs(FileSystems.split(self._target)[0])
            self._file = FileSystems.create(
                self._target, compression_type=CompressionTypes.UNCOMPRESSED
            )
            self.path = self._target
            options = pa.ipc.IpcWriteOptions(compression="lz4")
            self._writer = pa.ipc.new_stream(self._file, batch.schema, options=options)
        self._writer.write_batch(batch)

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            finally:  # a full disk fails the stream's end: the file is closed still
                self._file.close()


def _read_spill(path: str | None):
    """The RecordBatches of a spill file (:class:`_SpillWriter`), one at a time."""
    if path is None:
        return
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        yield from pa.ipc.open_stream(f)


class _DecodeTaggedFile(_DecodeFile):
    """A ``(key, path)`` pair's batches, each as ``tag(batch, key)``."""

    def __init__(self, schema_bytes: bytes, batch_size: int, tag, spill_dir=None):
        super().__init__(schema_bytes, batch_size, spill_dir)
        self._tag = tag

    def process(self, key_and_path, spilled=None):
        key, path = key_and_path
        for batch in super().process(path, spilled):
            yield batch if isinstance(batch, beam.pvalue.TaggedOutput) else self._tag(batch, key)
