"""The type of each CSV column (INT, FLOAT or STRING), from the data or a user's schema.

Without ``--schema``, a first pass over the files counts per column how many present
values parse as integers and as numbers (:class:`CountFileTypes`, pyarrow's C++ reader;
the same read finds the file's byte ranges, :mod:`.csv_ranges`), and
:class:`InferCsvColumnTypes` sums the counts and decides; with ``--schema``,
:func:`column_types_of_schema` takes its types. The parsing pass (:mod:`.csv_input`)
then parses with those types and the same patterns (:data:`INT_RE`, :data:`FLOAT_RE`).

Example::

    counted = (
        p
        | beam.Create(files)
        | beam.ParDo(CountFileTypes(header, fmt)).with_outputs("ranges", main="counts"))
    types = counted.counts | beam.CombineGlobally(InferCsvColumnTypes(header))
    # types: {column: ColumnType}; counted.ranges: the CsvRanges to read
"""

from __future__ import annotations

import enum
import io
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_metadata.proto.v0 import schema_pb2

from transforms.example_gen.compressed import is_decompression_error, open_binary
from transforms.example_gen.csv_ranges import (
    LineScanner,
    OneReader,
    RangeCounters,
    ScanningStream,
    emit_ranges,
    is_splittable_name,
)
from transforms.example_gen.csv_rows import RawChunk, ReadCsvFile, as_strings, oversized_fields
from transforms.example_gen.settings import CsvFormat

__all__ = [
    "FLOAT_RE",
    "INTEGRAL_RE",
    "INT_RE",
    "ColumnType",
    "CountFileTypes",
    "InferCsvColumnTypes",
    "TypeCounts",
    "add_counts",
    "column_types_of_schema",
    "count_stream_types",
    "int64_mask",
    "string_array",
]

# Integer text of up to 19 digits: every int64 has at most 19; the 19-digit ones beyond
# int64 are told apart by :func:`int64_mask` (a regex cannot compare with a bound).
INT_RE = r"^[+-]?\d{1,19}$"
# Integer text of any length: the values above 2^63-1 or below -2^63 are the ones that match
# this and not :func:`int64_mask`.
INTEGRAL_RE = r"^[+-]?\d+$"
_INT64_MAX_DIGITS = str(2**63 - 1)
_INT64_MIN_DIGITS = str(2**63)
FLOAT_RE = (
    r"^[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])$"
)
# A numeric-looking column is numeric when at least this share of its present values
# parse as numbers; the other rows are rejected (with file, line and reason) instead of
# silently turning the whole column into strings.
_NUMERIC_MAJORITY = 0.95


class ColumnType(str, enum.Enum):
    """A CSV column's type; ``arrow_type`` is the type of its values in a RecordBatch."""

    INT = "int"
    FLOAT = "float"
    STRING = "string"

    @property
    def arrow_type(self) -> pa.DataType:
        return {"int": pa.int64(), "float": pa.float32(), "string": pa.binary()}[self.value]


def column_types_of_schema(schema: schema_pb2.Schema) -> dict[str, ColumnType]:
    """The column types a user's ``--schema`` gives (INT, FLOAT, BYTES features)."""
    kinds = {
        schema_pb2.INT: ColumnType.INT,
        schema_pb2.FLOAT: ColumnType.FLOAT,
        schema_pb2.BYTES: ColumnType.STRING,
    }
    return {f.name: kinds[f.type] for f in schema.feature if f.type in kinds}


def string_array(
    values: list[str] | pa.Array, null_values: tuple[str, ...]
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(raw strings, whitespace-trimmed strings, is-missing mask) of one raw column.

    Numbers are parsed from the trimmed text; string values keep their raw text.
    """
    raw = values if isinstance(values, pa.Array) else pa.array(values, type=pa.string())
    trimmed = pc.utf8_trim_whitespace(raw)
    missing = pc.is_in(trimmed, value_set=pa.array(list(null_values) + [""], type=pa.string()))
    return raw, trimmed, missing


def int64_mask(trimmed: pa.Array) -> pa.Array:
    """Which values of ``trimmed`` (strings) are integers that fit int64.

    A 19-digit number may be beyond int64's range: it is compared with the bound as text
    (equal lengths of digits compare as the numbers do), in arrow's kernels, not per value.
    Where every value is shorter than 19 bytes none can be, and that comparison (most of
    the cost) is skipped.
    """
    ok = pc.match_substring_regex(trimmed, INT_RE)
    if not _may_have_19_digits(trimmed):
        return ok
    digits = pc.replace_substring_regex(trimmed, r"^[+-]", "")
    negative = pc.starts_with(trimmed, "-")
    long = pc.equal(pc.utf8_length(digits), 19)
    bound = pc.if_else(negative, _INT64_MIN_DIGITS, _INT64_MAX_DIGITS)
    beyond = pc.and_(long, pc.greater(digits, bound))
    return pc.and_(ok, pc.invert(beyond))


def _may_have_19_digits(values: pa.Array) -> bool:
    """Whether a value is 19 bytes or longer (shorter text holds at most 18 digits)."""
    return len(values) > 0 and pc.max(pc.binary_length(values)).as_py() >= 19


class TypeCounts(NamedTuple):
    """Per column: present values, those that are int64 integers, numbers, and integers
    beyond int64 (``big_ints``: they also count as numbers)."""

    present: int
    ints: int
    floats: int
    big_ints: int = 0


def _count_types(columns, null_values: tuple[str, ...]) -> list[TypeCounts]:
    """Per column: present values, and how many of them parse as int and as float."""
    out = []
    for values in columns:
        _, trimmed, missing = string_array(values, null_values)
        present = trimmed.filter(pc.invert(missing))
        if not len(present):
            out.append(TypeCounts(0, 0, 0))
            continue
        n = len(present)
        ints = pc.sum(int64_mask(present)).as_py()
        if ints == n:
            # Every int64 integer is also a number, and none is beyond int64.
            out.append(TypeCounts(n, n, n, 0))
            continue
        floats = pc.sum(pc.match_substring_regex(present, FLOAT_RE)).as_py()
        # Text shorter than 19 bytes that is integral is an int64 integer (int64_mask).
        integral = (
            pc.sum(pc.match_substring_regex(present, INTEGRAL_RE)).as_py()
            if _may_have_19_digits(present)
            else ints
        )
        out.append(TypeCounts(n, ints, floats, integral - ints))
    return out


def add_counts(a: list[TypeCounts], b: list[TypeCounts]) -> list[TypeCounts]:
    return [TypeCounts(*(x + y for x, y in zip(ca, cb))) for ca, cb in zip(a, b)]


def count_stream_types(
    f, header: tuple[str, ...], fmt: CsvFormat, skip_header: bool
) -> list[TypeCounts]:
    """Per-column type counts of the CSV rows in binary stream ``f`` (pyarrow's reader).

    ``skip_header``: the stream starts with the header line. Rows of the wrong width are
    skipped, and rows with an oversized field do not vote (the parsing pass rejects both
    with their line).

    Raises:
      pyarrow.ArrowInvalid, UnicodeDecodeError: what only Python's lenient reader reads,
        or bytes that are not UTF-8 (the caller falls back to Python's reader).
    """
    import pyarrow.csv as pa_csv

    counts = [TypeCounts(0, 0, 0) for _ in header]
    reader = pa_csv.open_csv(
        f,
        read_options=pa_csv.ReadOptions(
            skip_rows=1 if skip_header else 0, column_names=list(header), block_size=8 << 20
        ),
        parse_options=pa_csv.ParseOptions(
            delimiter=fmt.delimiter,
            newlines_in_values=True,
            invalid_row_handler=lambda row: "skip",
        ),
        convert_options=as_strings(header),
    )
    for batch in reader:
        columns = batch.columns
        # Rows the parsing pass rejects for an oversized field do not vote.
        oversized = oversized_fields(columns, fmt.max_field_bytes)
        if oversized:
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[list(oversized)] = False
            columns = [c.filter(pa.array(keep)) for c in columns]
        counts = add_counts(counts, _count_types(columns, fmt.null_values))
    return counts


class CountFileTypes(beam.DoFn):
    """The typing pass over one CSV file: per-column type counts, and the file's ranges.

    The main output is the counts; ``ranges`` gets the :class:`CsvRange` s the file is read
    in (:mod:`.csv_ranges`): the same read of the file finds its line starts.

    It uses pyarrow's multi-threaded C++ CSV reader (several times faster than Python's
    ``csv``): this pass needs no line numbers, and rows of the wrong width are skipped here
    (the parsing pass rejects them with their line). A file pyarrow cannot parse (e.g. a
    stray quote that Python's lenient reader accepts) is counted with Python's reader.
    """

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat):
        self._header = header
        self._fmt = fmt
        self._plans = RangeCounters()

    def process(self, path: str) -> Iterator:
        counts = [TypeCounts(0, 0, 0) for _ in self._header]
        scanner = (
            LineScanner(self._fmt.range_bytes, self._fmt.delimiter)
            if is_splittable_name(path)
            else None
        )
        try:
            with open_binary(path) as binary:
                f = (
                    io.BufferedReader(ScanningStream(binary, scanner), 1 << 20)
                    if scanner
                    else binary
                )
                counts = count_stream_types(f, self._header, self._fmt, skip_header=True)
                if scanner:
                    f.raw.drain()
        except Exception as e:  # noqa: BLE001  filtered just below
            if not isinstance(e, (pa.ArrowInvalid, UnicodeDecodeError)):
                if not is_decompression_error(e):
                    raise
            # Python's reader parses what pyarrow could not, or names the line where the
            # file is not UTF-8 or stops decompressing.
            counts = [TypeCounts(0, 0, 0) for _ in self._header]
            python_reader = ReadCsvFile(self._header, self._fmt, None, typing_pass=True)
            for chunk in python_reader.process(path):
                if isinstance(chunk, RawChunk):
                    counts = add_counts(counts, _count_types(chunk.columns, self._fmt.null_values))
            if scanner:  # pyarrow refused it: only Python's lenient reader reads it
                scanner.unsafe = scanner.unsafe or OneReader.LENIENT_QUOTING
        yield counts
        yield from emit_ranges(path, scanner, self._plans)


class InferCsvColumnTypes(beam.CombineFn):
    """Sums per-column type counts and decides each column's type.

    ``extract_output`` gives ``{column: ColumnType}``: INT when every present value is an
    integer that fits int64, FLOAT when every one is a number, also INT/FLOAT when at least
    95% are (those rows are later rejected with their line), STRING otherwise. A column of
    integers with one beyond int64 (-2^63..2^63-1) is STRING: its values are kept exactly as
    text (ids), where float32 would merge them. A column with no present value is STRING.
    """

    def __init__(self, header: tuple[str, ...]):
        self._header = header

    def create_accumulator(self):
        return [TypeCounts(0, 0, 0) for _ in self._header]

    def add_input(self, acc, counts: list[TypeCounts]):
        return add_counts(acc, counts)

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for acc in accs:
            out = add_counts(out, acc)
        return out

    def extract_output(self, acc) -> dict[str, ColumnType]:
        return {name: _decide_type(c) for name, c in zip(self._header, acc)}


def _decide_type(c: TypeCounts) -> ColumnType:
    if c.present == 0:
        return ColumnType.STRING
    integral = c.ints + c.big_ints
    if c.big_ints and integral >= _NUMERIC_MAJORITY * c.present and c.floats == integral:
        # Integers beyond int64, no decimals: ids, kept exactly as strings.
        return ColumnType.STRING
    if c.ints == c.present or (c.ints >= _NUMERIC_MAJORITY * c.present and c.floats == c.ints):
        return ColumnType.INT
    if c.floats >= _NUMERIC_MAJORITY * c.present:
        return ColumnType.FLOAT
    return ColumnType.STRING
