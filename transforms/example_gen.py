"""ExampleGen: CSV or TFRecord files -> typed Arrow RecordBatches per split -> tf.Examples.

Rows are read into ``pa.RecordBatch`` chunks (columns ``list<int64|float32|binary>``, a
null list for a missing value), assigned to splits by a deterministic hash, and written
as sharded gzip TFRecords of ``tf.train.Example`` per split. Rows that cannot be read
(wrong number of fields, a value that does not parse as its column's type, an
undecodable record) are never dropped silently: they come out as :class:`RejectedRow`.

Example::

    files = resolve_input_files("data/*.csv")
    header = read_csv_header(files, CsvFormat())
    with beam.Pipeline() as p:
        result = p | ReadCsvExamples(files, header, CsvFormat(), splitter)
        result.batches | WriteSplitExamples(out_dir, splits=(Split.TRAIN, Split.EVAL))

Why not tfx-bsl's CSV decoder: ``tfx_bsl.coders.csv_decoder`` works on lines (it cannot
read quoted fields that contain newlines, which CSV allows), reports no file/line for a bad
row, and infers a column holding one stray word as a string column instead of rejecting
the row. Reading uses Python's C ``csv`` module per file (it tracks physical line
numbers), and all typing and parsing is vectorized with pyarrow compute per chunk.
Encoding to tf.Example uses tfx-bsl's C++ ``RecordBatchToExamplesEncoder``.
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import enum
import hashlib
import io
import json
import lzma
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES, DataFormat, Split
from transforms.metrics import NAMESPACE
from transforms.tfrecords import WriteTFRecordBatches

__all__ = [
    "ColumnType",
    "CsvFormat",
    "HashSplitter",
    "RejectedRow",
    "SplitBatch",
    "ExampleGenResult",
    "resolve_input_files",
    "detect_format",
    "read_csv_header",
    "InferCsvColumnTypes",
    "ReadCsvExamples",
    "ReadTFRecordExamples",
    "WriteSplitExamples",
    "WriteRejectedRows",
]

_CHUNK_ROWS = 8192
_INT_RE = r"^[+-]?\d{1,18}$"
_FLOAT_RE = (
    r"^[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])$"
)
# A numeric-looking column is numeric when at least this share of its present values
# parse as numbers; the other rows are rejected (with file, line and reason) instead of
# silently turning the whole column into strings.
_NUMERIC_MAJORITY = 0.95


class ColumnType(str, enum.Enum):
    INT = "int"
    FLOAT = "float"
    STRING = "string"

    @property
    def arrow_type(self) -> pa.DataType:
        return {"int": pa.int64(), "float": pa.float32(), "string": pa.binary()}[self.value]


@dataclasses.dataclass(frozen=True)
class CsvFormat:
    """How CSV files are read.

    Attributes:
      delimiter: the field separator.
      null_values: values meaning "missing" besides the empty field.
      max_field_bytes: a row with a longer field (UTF-8 bytes) is rejected, not read.
    """

    delimiter: str = ","
    null_values: tuple[str, ...] = ("",)
    max_field_bytes: int = DEFAULT_CSV_MAX_FIELD_BYTES

    def __post_init__(self):
        if len(self.delimiter) != 1:
            raise PipelineError(
                f"--csv_delimiter {self.delimiter!r} must be a single character; pass e.g. "
                "--csv_delimiter=';'."
            )


class RejectedRow(NamedTuple):
    """A row that could not become an example, with where it came from and why."""

    file: str
    line: int
    reason: str
    text: str

    def to_json(self) -> str:
        return json.dumps(self._asdict(), ensure_ascii=False)


class SplitBatch(NamedTuple):
    """Rows of one split as a typed Arrow RecordBatch."""

    split: Split
    batch: pa.RecordBatch


class ExampleGenResult(NamedTuple):
    """ExampleGen's outputs: typed rows per split, and the rows it refused."""

    batches: beam.PCollection  # [SplitBatch]
    rejected: beam.PCollection  # [RejectedRow]


@dataclasses.dataclass(frozen=True)
class HashSplitter:
    """Deterministic hash split: a row's split depends only on its content.

    The key is the whole raw row, or the ``partition_feature`` value so related rows stay
    together. blake2b (not Python's ``hash``, which is salted per process) makes the
    assignment identical on every runner, worker and run.

    Attributes:
      buckets: (split, bucket count) pairs, e.g. ((TRAIN, 2), (EVAL, 1)) for 2:1.
      partition_feature: the column whose value is hashed instead of the whole row.
      fixed_split: every row goes to this split (input already split by file pattern).
    """

    buckets: tuple[tuple[Split, int], ...] = ((Split.TRAIN, 2), (Split.EVAL, 1))
    partition_feature: Optional[str] = None
    fixed_split: Optional[Split] = None

    def __post_init__(self):
        if self.fixed_split is None:
            if not self.buckets or any(n <= 0 for _, n in self.buckets):
                given = ",".join(f"{s.value}={n}" for s, n in self.buckets)
                raise PipelineError(
                    f"--split_buckets={given} must give each split a positive bucket count; "
                    "pass e.g. --split_buckets=train=2,eval=1."
                )
            if len({s for s, _ in self.buckets}) != len(self.buckets):
                raise PipelineError(
                    "--split_buckets names a split twice; name each split once, e.g. "
                    "--split_buckets=train=2,eval=1."
                )

    @property
    def splits(self) -> tuple[Split, ...]:
        return (self.fixed_split,) if self.fixed_split else tuple(s for s, _ in self.buckets)

    def assign(self, keys: Sequence[bytes]) -> np.ndarray:
        """The split index (into ``splits``) of each key."""
        if self.fixed_split is not None:
            return np.zeros(len(keys), dtype=np.int64)
        total = sum(n for _, n in self.buckets)
        bounds = np.cumsum([n for _, n in self.buckets])
        hashes = np.fromiter(
            (
                int.from_bytes(hashlib.blake2b(k, digest_size=8).digest(), "little") % total
                for k in keys
            ),
            dtype=np.int64,
            count=len(keys),
        )
        return np.searchsorted(bounds, hashes, side="right")


# ---------------------------------------------------------------------------- input files


def resolve_input_files(pattern: str) -> list[str]:
    """The input files of ``--data``: a file, a folder (its non-hidden files) or a glob.

    Raises:
      PipelineError: nothing matches, or every match is empty.
    """
    if not pattern:
        raise PipelineError("--data is empty; pass a CSV/TFRecord file, a folder or a glob.")
    glob = pattern
    if not any(ch in pattern for ch in "*?[") and _is_dir(pattern):
        glob = pattern.rstrip("/") + "/*"
    try:
        metadata = FileSystems.match([glob])[0].metadata_list
    except Exception as e:  # noqa: BLE001  Beam raises a bare BeamIOError for no match
        raise PipelineError(
            f"--data {pattern!r} cannot be listed ({e}); pass an existing file, folder or glob."
        ) from e
    files = sorted(
        m.path
        for m in metadata
        if not _basename(m.path).startswith((".", "_")) and not _is_dir(m.path)
    )
    if not files:
        raise PipelineError(
            f"--data {pattern!r} matches no file; pass an existing CSV/TFRecord file, folder "
            "or glob."
        )
    sizes = {m.path: m.size_in_bytes for m in metadata}
    empty = [f for f in files if sizes.get(f) == 0]
    if empty:
        raise PipelineError(
            f"Input file {empty[0]} is empty; remove it from --data or give it a header row "
            "and data."
        )
    return files


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _is_dir(path: str) -> bool:
    import os

    if "://" not in path:
        return os.path.isdir(path)
    return FileSystems.exists(path.rstrip("/") + "/") and not FileSystems.exists(path)


def detect_format(files: Sequence[str], data_format: DataFormat) -> DataFormat:
    """CSV or TFRecord, from ``--data_format`` or the file names.

    Raises:
      PipelineError: files of both kinds, or a name that says neither.
    """
    if data_format is not DataFormat.AUTO:
        return data_format
    kinds = set()
    for f in files:
        name = _basename(f).lower()
        for suffix in _COMPRESSION_SUFFIXES:
            name = name.removesuffix(suffix)
        if name.endswith((".csv", ".tsv", ".txt")):
            kinds.add(DataFormat.CSV)
        elif ".tfrecord" in name or name.endswith((".tfr", ".rio")):
            kinds.add(DataFormat.TFRECORD)
        else:
            raise PipelineError(
                f"Input file {f} is neither .csv nor .tfrecord by name; rename it or pass "
                "--data_format=csv or --data_format=tfrecord."
            )
    if len(kinds) > 1:
        raise PipelineError(
            f"--data mixes CSV and TFRecord files ({files[0]} ...); point --data at one kind."
        )
    return kinds.pop()


# Compressed CSV input by file name suffix: the compressions Beam's FileSystems know
# (CompressionTypes.AUTO), plus ".gzip".
_COMPRESSION_SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".lzma", ".zst", ".zstd", ".deflate")


def _decompressor_factory(path: str):
    """A function making a fresh decompressor object for ``path``'s suffix, or None."""
    name = path.lower()
    if name.endswith((".gz", ".gzip")):
        return lambda: zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    if name.endswith(".bz2"):
        return bz2.BZ2Decompressor
    if name.endswith((".xz", ".lzma")):
        return lzma.LZMADecompressor  # FORMAT_AUTO: .xz and legacy .lzma
    if name.endswith((".zst", ".zstd")):
        import zstandard

        return lambda: zstandard.ZstdDecompressor().decompressobj()
    if name.endswith(".deflate"):
        return zlib.decompressobj
    return None


class _ReadStream(io.RawIOBase):
    """A read-only ``io.RawIOBase`` over a ``FileSystems.open`` handle, decompressing.

    Hand-written instead of Beam's ``CompressedFile`` (what ``FileSystems.open`` returns for
    a compressed name) for two reasons: it lacks ``readable()``/``writable()``, which
    ``io.TextIOWrapper`` calls (``AttributeError: 'CompressedFile' object has no attribute
    'writable'``), and it returns a truncated gzip or xz file's first part as if it were
    the whole file, a silent loss of rows. Here the standard decompressors (and
    zstandard's) are fed the raw bytes; input that ends inside a compressed stream raises
    EOFError, and concatenated streams (multi-member gzip, zstd frames) are all read.
    """

    def __init__(self, handle, new_decompressor=None):
        super().__init__()
        self._handle = handle
        self._new = new_decompressor
        self._decompressor = new_decompressor() if new_decompressor else None
        self._out = memoryview(b"")  # decompressed bytes not yet read
        self._in_stream = False  # inside a compressed stream that has not ended yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._decompressor is None:
            data = self._handle.read(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        while not self._out:
            data = self._handle.read(1 << 16)
            if not data:
                if self._in_stream:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
                return 0
            pieces = []
            while data:
                if self._decompressor.eof:  # the next stream or frame of the same file
                    self._decompressor = self._new()
                pieces.append(self._decompressor.decompress(data))
                self._in_stream = not self._decompressor.eof
                data = self._decompressor.unused_data if self._decompressor.eof else b""
            self._out = memoryview(b"".join(pieces))
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]  # a view: no copy
        return n

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def _is_decompression_error(e: BaseException) -> bool:
    """Whether ``e`` says that compressed input is corrupt or truncated."""
    if isinstance(e, (zlib.error, lzma.LZMAError, EOFError)):
        return True
    if isinstance(e, OSError) and e.errno is None:  # bz2: "Invalid data stream"
        return True
    return type(e).__name__ == "ZstdError"


def _open_binary(path: str) -> io.BufferedReader:
    """``path`` (local, gs://, any Beam filesystem) as decompressed bytes."""
    from apache_beam.io.filesystem import CompressionTypes

    handle = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return io.BufferedReader(_ReadStream(handle, _decompressor_factory(path)), 1 << 20)


def _open_text(path: str) -> io.TextIOWrapper:
    # utf-8-sig drops a byte-order mark at the start of each file (spreadsheets' "CSV UTF-8"
    # exports write one; it would otherwise stay in the first column's name). Every file
    # has its own header, so every file is checked.
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8-sig", newline="")


def read_csv_header(files: Sequence[str], fmt: CsvFormat) -> tuple[str, ...]:
    """The shared header row of the CSV files, checked before any Beam work.

    Raises:
      PipelineError: a file has no header, an empty or duplicated column name, headers
        differ between files, or a file is not UTF-8.
    """
    header: Optional[tuple[str, ...]] = None
    for path in files:
        try:
            with _open_text(path) as f:
                first = next(csv.reader(f, delimiter=fmt.delimiter), None)
        except UnicodeDecodeError as e:
            raise PipelineError(
                f"Input file {path} is not UTF-8 text ({e.reason} at byte {e.start}); "
                "re-encode it as UTF-8."
            ) from e
        except csv.Error as e:
            raise PipelineError(
                f"Input file {path}:1 has no readable header row ({e}); fix the quoting of "
                "its first line."
            ) from e
        except Exception as e:
            if not _is_decompression_error(e):
                raise
            raise PipelineError(
                f"Input file {path} cannot be decompressed as its name says ({e}); check the "
                "file, or rename it to match its compression."
            ) from e
        if not first or all(not c.strip() for c in first):
            raise PipelineError(
                f"Input file {path} has no header row; add a first line naming the columns."
            )
        if any("\n" in c or "\r" in c for c in first):
            raise PipelineError(
                f"Input file {path}:1 has no readable header row (a quote there is not closed "
                "before the line ends); fix the quoting of its first line."
            )
        names = tuple(c.strip() for c in first)
        if any(_looks_numeric(c) for c in names):
            raise PipelineError(
                f"Input file {path}:1 starts with data {list(names)[:4]}, not a header; add a "
                "first line naming the columns."
            )
        if "" in names:
            raise PipelineError(
                f"Input file {path}:1 has an empty column name (column "
                f"{names.index('') + 1}); name every column in the header."
            )
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PipelineError(
                f"Input file {path}:1 names column {dup[0]!r} twice; give columns unique names."
            )
        if header is not None and names != header:
            raise PipelineError(
                f"Input file {path} has header {list(names)} but {files[0]} has "
                f"{list(header)}; give all input files the same columns."
            )
        header = names
    assert header is not None
    return header


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- CSV reading


class _RawChunk(NamedTuple):
    """Up to _CHUNK_ROWS well-formed rows of one file, column-major, as Arrow strings."""

    file: str
    lines: list[int]
    columns: list[pa.Array]
    keys: list[bytes]


# Python's csv module refuses fields over 128 KiB by default, and after that error it cannot
# resume inside a quoted field. Its limit (a process-wide setting of the csv module) is
# raised to what a C long holds everywhere; --csv_max_field_bytes is enforced per row on
# the parsed fields instead, so an oversized row is rejected and the file read on.
_CSV_MODULE_FIELD_LIMIT = 2**31 - 1


def _allow_long_csv_fields() -> None:
    if csv.field_size_limit() < _CSV_MODULE_FIELD_LIMIT:
        csv.field_size_limit(_CSV_MODULE_FIELD_LIMIT)


def _oversized_fields(columns: Sequence[pa.Array], limit: int) -> dict[int, int]:
    """Row index -> UTF-8 bytes of its first field longer than ``limit`` (vectorized)."""
    out: dict[int, int] = {}
    for col in columns:
        lengths = pc.binary_length(col)
        if len(col) and pc.max(lengths).as_py() > limit:
            sizes = lengths.to_numpy(zero_copy_only=False)
            for i in np.flatnonzero(sizes > limit):
                out.setdefault(int(i), int(sizes[i]))
    return out


def _clip(field: str, limit: int) -> str:
    # An oversized field would make the rejected-rows file as large as the field itself.
    return field if len(field.encode("utf-8")) <= limit else field[:200] + "…"


class _ReadCsvFile(beam.DoFn):
    """Reads one CSV file into column-major string chunks; rejects rows of wrong width.

    Outputs _RawChunk on the main output and RejectedRow on ``rejected``.
    """

    def __init__(
        self,
        header: tuple[str, ...],
        fmt: CsvFormat,
        partition_feature: Optional[str],
        typing_pass: bool = False,
    ):
        self._header = header
        self._fmt = fmt
        self._key_col = header.index(partition_feature) if partition_feature else None
        # The typing pass reads the same rows again: it neither counts them nor keys them.
        self._typing_pass = typing_pass
        prefix = "example_gen.typing_pass." if typing_pass else "example_gen."
        self._read = beam.metrics.Metrics.counter(NAMESPACE, prefix + "rows_read")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, prefix + "rows_rejected")

    def process(self, path: str) -> Iterator:
        width = len(self._header)
        delim = self._fmt.delimiter
        key_col = self._key_col
        lines: list[int] = []
        rows: list[list[str]] = []
        _allow_long_csv_fields()
        try:
            with _open_text(path) as f:
                reader = csv.reader(f, delimiter=delim, strict=False)
                next(reader, None)  # header, checked by read_csv_header
                last_line = reader.line_num
                for row in reader:
                    start = last_line + 1
                    last_line = reader.line_num
                    if len(row) == width:
                        lines.append(start)
                        rows.append(row)
                        if len(rows) >= _CHUNK_ROWS:
                            yield from self._chunk(path, lines, rows, key_col, delim)
                            lines, rows = [], []
                    elif row:  # a blank line is no row
                        self._read.inc()
                        self._rejected.inc()
                        yield beam.pvalue.TaggedOutput(
                            "rejected",
                            RejectedRow(
                                path,
                                start,
                                f"has {len(row)} fields but the header has {width}",
                                delim.join(row),
                            ),
                        )
        except csv.Error as e:
            raise PipelineError(
                f"Input file {path}:{last_line} is not valid CSV ({e}); fix the quoting there."
            ) from e
        except UnicodeDecodeError as e:
            raise PipelineError(
                f"Input file {path} near line {last_line} is not UTF-8 ({e.reason}); re-encode "
                "it as UTF-8."
            ) from e
        except Exception as e:
            if not _is_decompression_error(e):
                raise
            raise PipelineError(
                f"Input file {path} near line {last_line} cannot be decompressed as its name "
                f"says ({e}); check the file (a truncated copy?) or rename it to match its "
                "compression."
            ) from e
        if rows:
            yield from self._chunk(path, lines, rows, key_col, delim)

    def _chunk(self, path, lines, rows, key_col, delim) -> Iterator:
        """Yields the rows with an oversized field as rejected, then the others' chunk."""
        self._read.inc(len(rows))
        columns = [pa.array(c, type=pa.string()) for c in zip(*rows)]
        limit = self._fmt.max_field_bytes
        oversized = _oversized_fields(columns, limit)
        if oversized:
            for i, size in sorted(oversized.items()):
                self._rejected.inc()
                yield beam.pvalue.TaggedOutput(
                    "rejected",
                    RejectedRow(
                        path,
                        lines[i],
                        f"field of {size} bytes at line {lines[i]} exceeds "
                        f"--csv_max_field_bytes={limit}",
                        delim.join(_clip(f, limit) for f in rows[i]),
                    ),
                )
            keep = np.ones(len(rows), dtype=bool)
            keep[list(oversized)] = False
            if not keep.any():
                return
            columns = [c.filter(pa.array(keep)) for c in columns]
            lines = [n for n, k in zip(lines, keep) if k]
            rows = [r for r, k in zip(rows, keep) if k]
        if self._typing_pass:
            keys = []
        elif key_col is None:
            keys = [delim.join(r).encode("utf-8") for r in rows]
        else:
            keys = [r[key_col].encode("utf-8") for r in rows]
        yield _RawChunk(path, lines, columns, keys)


def _string_array(
    values: list[str] | pa.Array, null_values: tuple[str, ...]
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(raw strings, whitespace-trimmed strings, is-missing mask) of one raw column.

    Numbers are parsed from the trimmed text; string values keep their raw text.
    """
    raw = values if isinstance(values, pa.Array) else pa.array(values, type=pa.string())
    trimmed = pc.utf8_trim_whitespace(raw)
    missing = pc.is_in(trimmed, value_set=pa.array(list(null_values) + [""], type=pa.string()))
    return raw, trimmed, missing


class _TypeCounts(NamedTuple):
    present: int
    ints: int
    floats: int


def _count_types(columns, null_values: tuple[str, ...]) -> list[_TypeCounts]:
    """Per column: present values, and how many of them parse as int and as float."""
    out = []
    for values in columns:
        _, trimmed, missing = _string_array(values, null_values)
        present = trimmed.filter(pc.invert(missing))
        if not len(present):
            out.append(_TypeCounts(0, 0, 0))
            continue
        out.append(
            _TypeCounts(
                len(present),
                pc.sum(pc.match_substring_regex(present, _INT_RE)).as_py(),
                pc.sum(pc.match_substring_regex(present, _FLOAT_RE)).as_py(),
            )
        )
    return out


def _add_counts(a: list[_TypeCounts], b: list[_TypeCounts]) -> list[_TypeCounts]:
    return [_TypeCounts(*(x + y for x, y in zip(ca, cb))) for ca, cb in zip(a, b)]


class _CountFileTypes(beam.DoFn):
    """The typing pass over one CSV file: per-column type counts.

    It uses pyarrow's multi-threaded C++ CSV reader (several times faster than Python's
    ``csv``): this pass needs no line numbers, and rows of the wrong width are skipped here
    (the parsing pass rejects them with their line). A file pyarrow cannot parse (e.g. a
    stray quote that Python's lenient reader accepts) is counted with Python's reader.
    """

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat):
        self._header = header
        self._fmt = fmt

    def process(self, path: str) -> Iterator[list[_TypeCounts]]:
        import pyarrow.csv as pa_csv

        counts = [_TypeCounts(0, 0, 0) for _ in self._header]
        try:
            with _open_binary(path) as f:
                reader = pa_csv.open_csv(
                    f,
                    read_options=pa_csv.ReadOptions(
                        skip_rows=1, column_names=list(self._header), block_size=8 << 20
                    ),
                    parse_options=pa_csv.ParseOptions(
                        delimiter=self._fmt.delimiter,
                        newlines_in_values=True,
                        invalid_row_handler=lambda row: "skip",
                    ),
                    convert_options=pa_csv.ConvertOptions(
                        column_types={h: pa.string() for h in self._header},
                        strings_can_be_null=False,
                        quoted_strings_can_be_null=False,
                    ),
                )
                for batch in reader:
                    columns = batch.columns
                    # Rows the parsing pass rejects for an oversized field do not vote.
                    oversized = _oversized_fields(columns, self._fmt.max_field_bytes)
                    if oversized:
                        keep = np.ones(batch.num_rows, dtype=bool)
                        keep[list(oversized)] = False
                        columns = [c.filter(pa.array(keep)) for c in columns]
                    counts = _add_counts(counts, _count_types(columns, self._fmt.null_values))
        except Exception as e:  # noqa: BLE001  filtered just below
            if not isinstance(e, (pa.ArrowInvalid, UnicodeDecodeError)):
                if not _is_decompression_error(e):
                    raise
            # Python's reader parses what pyarrow could not, or names the line where the
            # file is not UTF-8 or stops decompressing.
            counts = [_TypeCounts(0, 0, 0) for _ in self._header]
            python_reader = _ReadCsvFile(self._header, self._fmt, None, typing_pass=True)
            for chunk in python_reader.process(path):
                if isinstance(chunk, _RawChunk):
                    counts = _add_counts(counts, _count_types(chunk.columns, self._fmt.null_values))
        yield counts


class InferCsvColumnTypes(beam.CombineFn):
    """Sums per-column type counts and decides each column's type.

    ``extract_output`` gives ``{column: ColumnType}``: INT when every present value is an
    integer, FLOAT when every one is a number, also INT/FLOAT when at least 95% are (those
    rows are later rejected with their line), STRING otherwise. A column with no present
    value is STRING.
    """

    def __init__(self, header: tuple[str, ...]):
        self._header = header

    def create_accumulator(self):
        return [_TypeCounts(0, 0, 0) for _ in self._header]

    def add_input(self, acc, counts: list[_TypeCounts]):
        return _add_counts(acc, counts)

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for acc in accs:
            out = _add_counts(out, acc)
        return out

    def extract_output(self, acc) -> dict[str, ColumnType]:
        return {name: _decide_type(c) for name, c in zip(self._header, acc)}


def _decide_type(c: _TypeCounts) -> ColumnType:
    if c.present == 0:
        return ColumnType.STRING
    if c.ints == c.present or (c.ints >= _NUMERIC_MAJORITY * c.present and c.floats == c.ints):
        return ColumnType.INT
    if c.floats >= _NUMERIC_MAJORITY * c.present:
        return ColumnType.FLOAT
    return ColumnType.STRING


class _ParseChunk(beam.DoFn):
    """Types a raw chunk, rejects unparseable rows, and splits the rest by hash."""

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat, splitter: HashSplitter):
        self._header = header
        self._fmt = fmt
        self._splitter = splitter
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_rejected")
        self._written = {
            s: beam.metrics.Metrics.counter(NAMESPACE, f"example_gen.rows_out.{s.value}")
            for s in splitter.splits
        }

    def process(self, chunk: _RawChunk, types: dict[str, ColumnType]) -> Iterator:
        n = len(chunk.lines)
        bad = np.zeros(n, dtype=bool)
        reasons: dict[int, str] = {}
        parsed = []
        for name, values in zip(self._header, chunk.columns):
            ctype = types[name]
            raw, arr, missing = _string_array(values, self._fmt.null_values)
            present = pc.invert(missing)
            if ctype is ColumnType.STRING:
                parsed.append((raw, missing))
                continue
            ok = pc.match_substring_regex(arr, _INT_RE if ctype is ColumnType.INT else _FLOAT_RE)
            wrong = np.asarray(pc.and_(present, pc.invert(ok)).to_numpy(zero_copy_only=False))
            if wrong.any():
                for i in np.flatnonzero(wrong):
                    reasons.setdefault(
                        int(i), f"column {name!r}: {values[i].as_py()!r} is not {ctype.value}"
                    )
                bad |= wrong
            parsed.append((pc.if_else(pc.and_(present, ok), arr, None), missing))
        keep = ~bad
        for i in sorted(reasons):
            self._rejected.inc()
            row = self._fmt.delimiter.join(col[i].as_py() for col in chunk.columns)
            yield beam.pvalue.TaggedOutput(
                "rejected", RejectedRow(chunk.file, chunk.lines[i], reasons[i], row)
            )
        if not keep.any():
            return
        keep_arr = pa.array(keep)
        arrays = []
        for name, (arr, missing) in zip(self._header, parsed):
            arrays.append(
                _to_list_array(arr.filter(keep_arr), missing.filter(keep_arr), types[name])
            )
        batch = pa.RecordBatch.from_arrays(arrays, names=list(self._header))
        keys = [k for k, kept in zip(chunk.keys, keep) if kept]
        yield from _split_batch(batch, keys, self._splitter, self._written)


def _to_list_array(arr: pa.Array, missing: pa.Array, ctype: ColumnType) -> pa.Array:
    """A list<T> column: one value per present row, a null list where missing."""
    missing_np = np.asarray(missing.to_numpy(zero_copy_only=False), dtype=bool)
    values = arr.filter(pc.invert(missing))
    if ctype is ColumnType.STRING:
        values = values.cast(pa.binary())
    else:
        values = pc.cast(values, ctype.arrow_type)
    offsets = np.concatenate([[0], np.cumsum(~missing_np)]).astype(np.int32)
    return pa.ListArray.from_arrays(
        pa.array(offsets), values, mask=pa.array(missing_np) if missing_np.any() else None
    )


def _split_batch(batch, keys, splitter: HashSplitter, counters) -> Iterator[SplitBatch]:
    assignment = splitter.assign(keys)
    for idx, split in enumerate(splitter.splits):
        mask = assignment == idx
        count = int(mask.sum())
        if count:
            counters[split].inc(count)
            yield SplitBatch(split, batch.filter(pa.array(mask)) if count < len(mask) else batch)


class ReadCsvExamples(beam.PTransform[beam.pvalue.PBegin, ExampleGenResult]):
    """Reads CSV files into typed RecordBatches per split plus rejected rows.

    Column types come from ``column_types`` (e.g. a user schema) or from a first pass over
    the files (:class:`InferCsvColumnTypes`); the second pass parses with them. Reading
    twice keeps memory flat: nothing waits in memory for the types to be known.
    """

    def __init__(
        self,
        files: Sequence[str],
        header: tuple[str, ...],
        fmt: CsvFormat,
        splitter: HashSplitter,
        column_types: Optional[dict[str, ColumnType]] = None,
    ):
        super().__init__()
        if splitter.partition_feature and splitter.partition_feature not in header:
            raise PipelineError(
                f"--partition_feature {splitter.partition_feature!r} is not a column of "
                f"{files[0]} (columns: {', '.join(header)}); pass one of those columns."
            )
        if column_types is not None:
            missing = [h for h in header if h not in column_types]
            if missing:
                raise PipelineError(
                    f"Column {missing[0]!r} of {files[0]} is not in the --schema; add it to "
                    "the schema or remove the column."
                )
        self._files = list(files)
        self._header = header
        self._fmt = fmt
        self._splitter = splitter
        self._column_types = column_types

    def expand(self, pbegin):
        reader = _ReadCsvFile(self._header, self._fmt, self._splitter.partition_feature)
        read = (
            pbegin
            | "ListFiles" >> beam.Create(self._files)
            | "ReadFiles" >> beam.ParDo(reader).with_outputs("rejected", main="rows")
        )
        if self._column_types is not None:
            types = pbegin | "SchemaTypes" >> beam.Create([self._column_types])
        else:
            types = (
                pbegin
                | "ListFilesForTypes" >> beam.Create(self._files)
                | "CountTypes" >> beam.ParDo(_CountFileTypes(self._header, self._fmt))
                | "InferTypes" >> beam.CombineGlobally(InferCsvColumnTypes(self._header))
            )
        parsed = read.rows | "Parse" >> beam.ParDo(
            _ParseChunk(self._header, self._fmt, self._splitter),
            types=beam.pvalue.AsSingleton(types),
        ).with_outputs("rejected", main="batches")
        rejected = (read.rejected, parsed.rejected) | "AllRejected" >> beam.Flatten()
        return ExampleGenResult(parsed.batches, rejected)


# ---------------------------------------------------------------------------- TFRecord


class _DecodeExamples(beam.DoFn):
    """Decodes serialized tf.Examples with tfx-bsl; rejects records that do not decode."""

    def __init__(self, splitter: HashSplitter, schema_bytes: Optional[bytes]):
        self._splitter = splitter
        self._schema_bytes = schema_bytes
        self._read = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_read")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_rejected")
        self._written = {
            s: beam.metrics.Metrics.counter(NAMESPACE, f"example_gen.rows_out.{s.value}")
            for s in splitter.splits
        }

    def setup(self):
        from tfx_bsl.coders import example_coder

        self._decoder = (
            example_coder.ExamplesToRecordBatchDecoder(self._schema_bytes)
            if self._schema_bytes
            else example_coder.ExamplesToRecordBatchDecoder()
        )

    def process(self, element: tuple[str, list[bytes]]) -> Iterator:
        path, records = element
        self._read.inc(len(records))
        try:
            batch = self._decoder.DecodeBatch(records)
        except Exception:  # noqa: BLE001  find the bad records one by one
            good = []
            for _i, r in enumerate(records):
                try:
                    self._decoder.DecodeBatch([r])
                    good.append(r)
                except Exception as e:  # noqa: BLE001
                    self._rejected.inc()
                    yield beam.pvalue.TaggedOutput(
                        "rejected",
                        RejectedRow(
                            path, -1, f"record is not a valid tf.Example ({e})", r[:200].hex()
                        ),
                    )
            if not good:
                return
            records = good
            batch = self._decoder.DecodeBatch(records)
        if self._splitter.partition_feature:
            col = batch.column(batch.schema.get_field_index(self._splitter.partition_feature))
            keys = [json.dumps(v).encode() for v in col.to_pylist()]
        else:
            keys = records
        yield from _split_batch(batch, keys, self._splitter, self._written)


class ReadTFRecordExamples(beam.PTransform[beam.pvalue.PBegin, ExampleGenResult]):
    """Reads (optionally gzip) TFRecord files of tf.Example into RecordBatches per split."""

    def __init__(self, files: Sequence[str], splitter: HashSplitter, schema_bytes=None):
        super().__init__()
        self._files = list(files)
        self._splitter = splitter
        self._schema_bytes = schema_bytes

    def expand(self, pbegin):
        decoded = (
            pbegin
            | "ListFiles" >> beam.Create(self._files)
            | "ReadRecords" >> beam.io.ReadAllFromTFRecord(with_filename=True)
            | "Batch" >> beam.GroupIntoBatches(_CHUNK_ROWS)
            | "Decode"
            >> beam.ParDo(_DecodeExamples(self._splitter, self._schema_bytes)).with_outputs(
                "rejected", main="batches"
            )
        )
        return ExampleGenResult(decoded.batches, decoded.rejected)


# ---------------------------------------------------------------------------- writing


class _EncodeExamples(beam.DoFn):
    """RecordBatch -> list of serialized tf.Examples (tfx-bsl's C++ encoder)."""

    def process(self, batch: pa.RecordBatch) -> Iterator[list[bytes]]:
        from tfx_bsl.coders import example_coder

        # The encoder takes its feature types from the batch, so one per batch schema.
        yield example_coder.RecordBatchToExamplesEncoder().encode(batch)


class WriteSplitExamples(beam.PTransform[beam.PCollection[SplitBatch], beam.pvalue.PDone]):
    """Writes each split as sharded gzip TFRecords ``<out_dir>/<split>/data-*.tfrecord.gz``."""

    def __init__(self, out_dir: str, splits: Sequence[Split]):
        super().__init__()
        self._out_dir = out_dir
        self._splits = tuple(splits)

    def expand(self, batches):
        parts = batches | "BySplit" >> beam.Partition(
            lambda sb, n, order: order.index(sb.split), len(self._splits), self._splits
        )
        for split, part in zip(self._splits, parts):
            _ = (
                part
                | f"Batch[{split.value}]" >> beam.Map(lambda sb: sb.batch)
                | f"Encode[{split.value}]" >> beam.ParDo(_EncodeExamples())
                | f"Write[{split.value}]"
                >> WriteTFRecordBatches(FileSystems.join(self._out_dir, split.value))
            )
        return beam.pvalue.PDone(batches.pipeline)


class WriteRejectedRows(beam.PTransform[beam.PCollection[RejectedRow], beam.pvalue.PDone]):
    """Writes rejected rows as JSON lines ``<out_dir>/rejected-*.jsonl`` (file, line, reason)."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, rejected):
        _ = (
            rejected
            | "ToJson" >> beam.Map(RejectedRow.to_json)
            | "Write"
            >> beam.io.WriteToText(
                FileSystems.join(self._out_dir, "rejected"), file_name_suffix=".jsonl"
            )
        )
        return beam.pvalue.PDone(rejected.pipeline)
