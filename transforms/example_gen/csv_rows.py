"""CSV rows as column-major string chunks with their physical line numbers.

:class:`ReadCsvFile` reads one file with Python's C ``csv`` module (it handles quoted
newlines and tracks physical line numbers) into :class:`RawChunk` s of up to
``CHUNK_ROWS`` well-formed rows, and rejects rows of the wrong width or with an oversized
field, with file, line and reason. Typing the strings is :mod:`.csv_typing`'s concern.

Example::

    for out in ReadCsvFile(header, CsvFormat(), partition_feature=None).process(path):
        ...  # RawChunk, or TaggedOutput("rejected", RejectedRow)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.core.errors import PipelineError
from transforms.example_gen.compressed import is_decompression_error, open_input, open_text
from transforms.example_gen.csv_ranges import CsvRange
from transforms.example_gen.input_format import CHUNK_ROWS
from transforms.example_gen.settings import CsvFormat
from transforms.metrics import NAMESPACE
from transforms.rows import RejectedRow

__all__ = ["RawChunk", "ReadCsvFile", "oversized_fields"]


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


def _open_range(part: CsvRange):
    """The text of a range: a whole file (decompressed, a byte-order mark dropped), or
    bytes ``[start, end)`` of an uncompressed one, which begin at a line start."""
    if part.end is None:
        return open_text(part.file)
    with open_input(part.file) as f:
        f.seek(part.start)
        data = f.read(part.end - part.start)
    if len(data) != part.end - part.start:
        raise PipelineError(
            f"Input file {part.file} is shorter than when it was scanned (bytes "
            f"{part.start}-{part.end}); do not change input files while a run reads them."
        )
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")


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
        path = part.file
        width = len(self._header)
        delim = self._fmt.delimiter
        key_col = self._key_col
        lines: list[int] = []
        rows: list[list[str]] = []
        _allow_long_csv_fields()
        # Physical line numbers: the reader counts lines from the range's first one.
        first = part.first_line - 1
        last_line = part.first_line
        try:
            with _open_range(part) as f:
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
            if not is_decompression_error(e):
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
        yield RawChunk(path, lines, columns, keys)
