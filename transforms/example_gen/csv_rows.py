"""CSV rows as column-major string chunks with their physical line numbers.

:class:`ReadCsvFile` reads one file with Python's C ``csv`` module (it handles quoted
newlines and tracks physical line numbers), or a byte range that pyarrow's C++ reader
reads alike with that reader (:func:`arrow_rows`), into :class:`RawChunk` s of up to
``CHUNK_ROWS`` well-formed rows, and rejects rows of the wrong width or with an oversized
field, with file, line and reason. Typing the strings is :mod:`.csv_typing`'s concern.

Example::

    for out in ReadCsvFile(header, CsvFormat(), partition_feature=None).process(path):
        ...  # RawChunk, or TaggedOutput("rejected", RejectedRow)
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.core.errors import PipelineError
from transforms.example_gen.compressed import (
    is_decompression_error,
    open_binary,
    open_input,
    open_text,
)
from transforms.example_gen.csv_ranges import CsvRange
from transforms.example_gen.input_format import CHUNK_ROWS
from transforms.example_gen.settings import CsvFormat
from transforms.metrics import NAMESPACE
from transforms.rows import RejectedRow

__all__ = ["RawChunk", "ReadCsvFile", "arrow_rows", "as_strings", "oversized_fields"]


class RawChunk(NamedTuple):
    """Up to CHUNK_ROWS well-formed rows of one file, column-major, as Arrow strings."""

    file: str
    lines: list[int]
    columns: list[pa.Array]
    keys: list[bytes]


# Python's csv module refuses fields over 128 KiB by default, and after that error it cannot
# resume inside a quoted field. Its limit (a process-wide setting of the csv module) is
# raised to what a C long holds everywhere; --csv_max_field_bytes is enforced per row on
# the parsed fields instead, so an oversized row is rejected and the file read on.
_CSV_MODULE_FIELD_LIMIT = 2**31 - 1
_NL, _CR = 10, 13


def _allow_long_csv_fields() -> None:
    if csv.field_size_limit() < _CSV_MODULE_FIELD_LIMIT:
        csv.field_size_limit(_CSV_MODULE_FIELD_LIMIT)


def oversized_fields(columns: Sequence[pa.Array], limit: int) -> dict[int, int]:
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


def _range_bytes(part: CsvRange) -> bytes:
    """Bytes ``[start, end)`` of an uncompressed file; they begin at a line start."""
    with open_input(part.file) as f:
        f.seek(part.start)
        data = f.read(part.end - part.start)
    if len(data) != part.end - part.start:
        raise PipelineError(
            f"Input file {part.file} is shorter than when it was scanned (bytes "
            f"{part.start}-{part.end}); do not change input files while a run reads them."
        )
    return data


def _line_of_bad_utf8(part: CsvRange) -> int:
    """The line (counted by newlines) of the first byte of ``part`` that is not UTF-8.

    The error path only: the text reader decodes ahead of the rows it has read by its
    buffer, so its line count is some hundreds of lines short of the bad byte.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = part.first_line  # the line of the next byte
    with open_binary(part.file) if part.end is None else io.BytesIO(_range_bytes(part)) as f:
        while True:
            block = f.read(1 << 20)
            held = len(decoder.getstate()[0])  # a character's first bytes: no newline
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                return line + block.count(b"\n", 0, max(0, e.start - held))
            if not block:
                return line
            line += block.count(b"\n")


def as_strings(header: Sequence[str]):
    """pyarrow CSV options that keep every field as its text ("" stays "", never null)."""
    import pyarrow.csv as pa_csv

    return pa_csv.ConvertOptions(
        column_types={h: pa.string() for h in header},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )


def arrow_rows(data: bytes, header: Sequence[str], delim: str, first_line: int):
    """``(line numbers, pa.Table of strings)`` of the rows in ``data`` (bytes that begin at
    line ``first_line``'s start), read by pyarrow's C++ reader; None where that reader
    might not read them exactly as Python's ``csv`` module does.

    Why both readers: Python's reader (the general path) keeps physical line numbers
    through quoted newlines and reads lenient quoting, but it builds a Python list per row.
    Bytes with no quote, no NUL and no carriage return outside a CRLF are read the same by
    both (fields are the text between delimiters; a line is a row; an empty line is none),
    and their line numbers are where the newlines are, so pyarrow reads those. Anything
    else, or a row of the wrong width or text that is not UTF-8 (pyarrow refuses the whole
    range), is left to Python's reader, which rejects or names it with its line.
    """
    import pyarrow.csv as pa_csv

    if (
        not delim.isascii()
        or delim in '"\r\n'
        or b'"' in data
        or b"\x00" in data
        or data.count(b"\r") != data.count(b"\r\n")
    ):
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == _NL)
    starts = np.concatenate([[0], ends + 1])
    ends = np.append(ends, len(data))  # the last line, empty when the data ends in \n
    lengths = ends - starts
    if len(data):
        # A CRLF's \r is part of the line end (every \r here is one's).
        lengths = lengths - ((lengths > 0) & (buf[ends - 1] == _CR))
    lines = first_line + np.flatnonzero(lengths > 0)
    try:
        table = pa_csv.read_csv(
            pa.BufferReader(data),
            read_options=pa_csv.ReadOptions(column_names=list(header), block_size=8 << 20),
            parse_options=pa_csv.ParseOptions(delimiter=delim, quote_char=False),
            convert_options=as_strings(header),
        )
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(lines):
        return None
    return lines.tolist(), table


class ReadCsvFile(beam.DoFn):
    """Reads one CSV file, or one range of it, into column-major string chunks; rejects
    rows of wrong width.

    Takes a :class:`CsvRange` (or a path: the whole file). Outputs RawChunk on the main
    output and RejectedRow on ``rejected``.
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

    def process(self, part: CsvRange | str) -> Iterator:
        if isinstance(part, str):
            part = CsvRange(part)
        if part.end is None:
            yield from self._python_rows(part, open_text(part.file))
            return
        data = _range_bytes(part)
        fast = arrow_rows(data, self._header, self._fmt.delimiter, part.first_line)
        if fast is None:
            text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")
            yield from self._python_rows(part, text)
            return
        lines, table = fast
        for i in range(0, table.num_rows, CHUNK_ROWS):
            rows = table.slice(i, CHUNK_ROWS)
            columns = [c.combine_chunks() for c in rows.columns]
            yield from self._chunk(part.file, lines[i : i + CHUNK_ROWS], columns)

    def _python_rows(self, part: CsvRange, text) -> Iterator:
        """The rows of ``text`` (the range's text) read with Python's ``csv`` module."""
        path = part.file
        width = len(self._header)
        delim = self._fmt.delimiter
        lines: list[int] = []
        rows: list[list[str]] = []
        _allow_long_csv_fields()
        # Physical line numbers: the reader counts lines from the range's first one.
        first = part.first_line - 1
        last_line = part.first_line
        try:
            with text as f:
                reader = csv.reader(f, delimiter=delim, strict=False)
                if part.end is None:
                    next(reader, None)  # header, checked by read_csv_header
                last_line = first + reader.line_num
                for row in reader:
                    start = last_line + 1
                    last_line = first + reader.line_num
                    if len(row) == width:
                        lines.append(start)
                        rows.append(row)
                        if len(rows) >= CHUNK_ROWS:
                            yield from self._chunk(path, lines, _columns(rows))
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
                f"Input file {path}:{_line_of_bad_utf8(part)} is not UTF-8 ({e.reason}); "
                "re-encode it as UTF-8."
            ) from e
        except Exception as e:
            if not is_decompression_error(e):
                raise
            raise PipelineError(
                f"Input file {path} near line {last_line} cannot be decompressed as its name "
                f"says ({e}); check the file (a truncated copy?) or rename it to match its "
                "compression."
            ) from e
        if rows:
            yield from self._chunk(path, lines, _columns(rows))

    def _chunk(self, path: str, lines: list[int], columns: list[pa.Array]) -> Iterator:
        """Yields the rows with an oversized field as rejected, then the others' chunk."""
        self._read.inc(len(lines))
        delim = self._fmt.delimiter
        limit = self._fmt.max_field_bytes
        oversized = oversized_fields(columns, limit)
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
                        delim.join(_clip(c[i].as_py(), limit) for c in columns),
                    ),
                )
            keep = np.ones(len(lines), dtype=bool)
            keep[list(oversized)] = False
            if not keep.any():
                return
            columns = [c.filter(pa.array(keep)) for c in columns]
            lines = [n for n, k in zip(lines, keep) if k]
        if self._typing_pass:
            keys = []
        elif self._key_col is None:
            # The whole row's text, its fields joined as they were read (the hash split's key).
            joined = pc.binary_join_element_wise(*columns, delim)
            keys = joined.cast(pa.binary()).to_pylist()
        else:
            keys = columns[self._key_col].cast(pa.binary()).to_pylist()
        yield RawChunk(path, lines, columns, keys)


def _columns(rows: list[list[str]]) -> list[pa.Array]:
    """Row-major Python rows -> one Arrow string array per column."""
    return [pa.array(c, type=pa.string()) for c in zip(*rows)]
