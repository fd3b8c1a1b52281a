"""Byte ranges of a CSV file that workers can read apart, cut at real line starts.

A large CSV file is read by many workers when that is safe: while the typing pass reads a
file anyway, :class:`LineScanner` watches its bytes and records split points, each the
byte offset of a real line start with that line's number, about every ``range_bytes``
bytes; :func:`plan_ranges` turns them into :class:`CsvRange` s that
:class:`~transforms.example_gen.csv_rows.ReadCsvFile` reads apart, numbering rows from
the range's first line, so the rejected-rows artifact keeps exact ``file:line``. (A file
of two ranges or more is typed and scanned in chunks on many workers instead, and cut the
same way: :mod:`.csv_chunks`; this in-order pass reads the others, and a file whose chunks
cannot be its ranges.)

A file stays one reader (a single whole-file range, as before) when splitting it is not
safe or not possible, for a :class:`OneReader` reason: a quoted newline (a field spanning
lines: a newline is a line start only outside quotes, and a byte range cannot know which
it is), a carriage return without a newline (Python's reader ends a line there, so
counting ``\\n`` would number lines wrongly), compression (no seeking into the stream),
or quoting only Python's lenient reader accepts. Each reason is a Beam counter the stage
summary reports.

Why not ``beam.io.textio``'s ranges (``ReadFromText`` and its ``OffsetRangeTracker``): a
text range starts at any byte and skips to the next ``\\n``, so it can neither tell a
quoted newline from a line end nor know how many lines precede it (the line numbers the
rejected-rows artifact promises). The typing pass knows both, so the ranges are cut where
it saw line starts and spread over workers with ``beam.Reshuffle``; every range is one
element, so any runner (Dataflow included) balances them like any other elements.

Example::

    scanner = LineScanner(range_bytes=4 << 20, delimiter=",")
    for block in blocks_of(path):
        scanner.feed(block)
    ranges = plan_ranges(path, scanner)   # [CsvRange(path, start, end, first_line), ...]
"""

from __future__ import annotations

import enum
import io
from typing import NamedTuple, Optional

import apache_beam as beam
import numpy as np

from transforms.example_gen.compressed import COMPRESSION_SUFFIXES, open_binary
from transforms.metrics import NAMESPACE

__all__ = [
    "CsvRange",
    "LineScanner",
    "OneReader",
    "RangeCounters",
    "ScanCsvRanges",
    "ScanningStream",
    "emit_ranges",
    "is_splittable_name",
    "plan_ranges",
]

# Counters: ranges of the files read apart (a file read apart in 5 ranges adds 5), and
# per OneReader reason the files that reason kept whole.
RANGES_COUNTER = "example_gen.csv_ranges"
ONE_READER_COUNTER = "example_gen.csv_one_reader."

_NL, _CR, _QUOTE = 10, 13, 34


class OneReader(str, enum.Enum):
    """Why a CSV file is read whole by one reader; the value ends a counter's name."""

    QUOTED_NEWLINE = "quoted_newline"
    LONE_CARRIAGE_RETURN = "lone_carriage_return"
    COMPRESSED = "compressed"
    LENIENT_QUOTING = "lenient_quoting"

    @property
    def why(self) -> str:
        """The reason in words, for the stage summary."""
        return {
            "quoted_newline": "a quoted field spans lines (a newline inside quotes)",
            "lone_carriage_return": "a carriage return without a newline ends a line",
            "compressed": "it is compressed (no reading from the middle)",
            "lenient_quoting": "a quote inside an unquoted field (lenient quoting)",
        }[self.value]


class CsvRange(NamedTuple):
    """What one reader reads: bytes ``[start, end)`` of ``file``, which begin at line
    ``first_line``; ``end`` None means the whole file, header included."""

    file: str
    start: int = 0
    end: Optional[int] = None
    first_line: int = 1


def is_splittable_name(path: str) -> bool:
    """Whether a file of this name can be read from the middle (it is not compressed)."""
    return not path.lower().endswith(COMPRESSION_SUFFIXES)


class LineScanner:
    """Finds real line starts in a CSV file's bytes fed in order, and whether it has any
    newline inside quotes.

    With ``"`` as the quote character (CSV's, and the only one ``CsvFormat`` reads), a
    newline is inside a quoted field exactly when an odd number of quotes precede it (an
    escaped quote is doubled, so it never changes the parity), provided every quote that
    opens a field (an even number before it) starts the field: follows a delimiter, a line
    end or a closing quote. A quote inside an unquoted field (``ab"c``, which Python's
    lenient reader keeps as a character) breaks that count, so such a file stays one
    reader. The scan is a few numpy passes per block.
    """

    def __init__(self, range_bytes: int, delimiter: str, start: int = 0):
        self._range_bytes = range_bytes
        self._field_starts = np.array([ord(delimiter), _NL, _CR, _QUOTE], dtype=np.uint8)
        # The file offset of the next byte: bytes seen, plus ``start`` for a scan that
        # begins at a line start in the middle of the file (:mod:`.csv_chunks`).
        self.offset = start
        self.newlines = 0  # "\n" seen
        self._odd = False  # an odd number of quotes seen so far
        self._last = _NL  # the byte before the block (file start: a line start)
        self.header_end: Optional[int] = None  # offset of line 2
        self.points: list[tuple[int, int]] = []  # (offset, line) after header_end
        self.unsafe: Optional[OneReader] = None

    @property
    def odd_quotes(self) -> bool:
        """An odd number of quotes in the bytes fed so far (the end is inside quotes)."""
        return self._odd

    def feed(self, block: bytes) -> None:
        if self.unsafe is None and block:
            self._scan(np.frombuffer(block, dtype=np.uint8))
        self.offset += len(block)

    def _mark(self, reason: OneReader) -> None:
        self.unsafe = self.unsafe or reason  # the first reason found is the one said

    def _scan(self, a: np.ndarray) -> None:
        prev = np.empty_like(a)
        prev[0] = self._last
        prev[1:] = a[:-1]
        is_quote = a == _QUOTE
        quotes = np.cumsum(is_quote, dtype=np.int64) + self._odd  # quotes up to each byte
        q = np.flatnonzero(is_quote)
        if len(q):
            opening = quotes[q] % 2 == 1  # even before it: it opens a quoted field
            bad = opening & ~np.isin(prev[q], self._field_starts)
            if self.offset == 0 and bad.any():  # a byte-order mark before the header
                bad &= ~((q == 3) & (a[:3].tobytes() == b"\xef\xbb\xbf"))
            if bad.any():
                self._mark(OneReader.LENIENT_QUOTING)
        nl = np.flatnonzero(a == _NL)
        if len(nl) and (quotes[nl] % 2 == 1).any():
            self._mark(OneReader.QUOTED_NEWLINE)
        cr = np.flatnonzero(a == _CR)
        if len(cr):
            after = np.append(a, _NL)[cr + 1]  # a block's last "\r" is checked with the next
            if (after != _NL).any():
                self._mark(OneReader.LONE_CARRIAGE_RETURN)
        if self._last == _CR and a[0] != _NL:
            self._mark(OneReader.LONE_CARRIAGE_RETURN)
        self._odd = bool(quotes[-1] % 2)
        self._last = int(a[-1])
        if self.unsafe is None and len(nl):
            starts = nl + 1 + self.offset  # offsets of the lines after these newlines
            if self.header_end is None:
                self.header_end = int(starts[0])
            last = self.points[-1][0] if self.points else self.header_end
            while True:
                i = int(np.searchsorted(starts, last + self._range_bytes))
                if i >= len(starts):
                    break
                last = int(starts[i])
                # Line numbers start at 1: the line after the k-th newline is line k + 1.
                self.points.append((last, self.newlines + i + 2))
        self.newlines += len(nl)


def plan_ranges(
    path: str, scanner: Optional[LineScanner]
) -> tuple[list[CsvRange], Optional[OneReader]]:
    """The ranges ``path`` is read in, and why it is one reader (None when it is split or
    when one range is all it needs). ``scanner`` has seen all of the file's bytes, or is
    None when the file was not scanned (compressed)."""
    if scanner is None:
        return [CsvRange(path)], OneReader.COMPRESSED
    if scanner.unsafe is not None:
        return [CsvRange(path)], scanner.unsafe
    if not scanner.points:  # small: one range is all it needs
        return [CsvRange(path)], None
    first = (scanner.header_end, 2)
    cuts = [first, *scanner.points]
    ends = [offset for offset, _ in scanner.points] + [scanner.offset]
    return [CsvRange(path, start, end, line) for (start, line), end in zip(cuts, ends)], None


class ScanningStream(io.RawIOBase):
    """A binary stream that shows every block read through it to a :class:`LineScanner`.

    Hand-written so that the typing pass (pyarrow's CSV reader, which takes a file object)
    and the scan share one read of the file.
    """

    def __init__(self, raw, scanner: LineScanner):
        super().__init__()
        self._raw = raw
        self._scanner = scanner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._raw.read(len(buffer))
        self._scanner.feed(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        """Reads (and scans) what the reader left unread."""
        while True:
            data = self._raw.read(1 << 20)
            if not data:
                return
            self._scanner.feed(data)


class RangeCounters:
    """The Beam counters of how files are read: ranges, and files kept whole by reason."""

    def __init__(self):
        counter = beam.metrics.Metrics.counter
        self.ranges = counter(NAMESPACE, RANGES_COUNTER)
        self.one_reader = {r: counter(NAMESPACE, ONE_READER_COUNTER + r.value) for r in OneReader}


def emit_ranges(path: str, scanner: Optional[LineScanner], counters: RangeCounters):
    """Yields the file's ranges as ``ranges`` outputs and counts how it is read."""
    ranges, reason = plan_ranges(path, scanner)
    if reason is not None:
        counters.one_reader[reason].inc()
    elif len(ranges) > 1:
        counters.ranges.inc(len(ranges))
    for part in ranges:
        yield beam.pvalue.TaggedOutput("ranges", part)


class ScanCsvRanges(beam.DoFn):
    """One CSV file -> the :class:`CsvRange` s it is read in (on ``ranges``).

    The scan alone, for when the column types need no typing pass (a user's schema):
    :class:`~transforms.example_gen.csv_typing.CountFileTypes` scans while it types.
    """

    def __init__(self, range_bytes: int, delimiter: str):
        self._range_bytes = range_bytes
        self._delimiter = delimiter
        self._counters = RangeCounters()

    def process(self, path: str):
        scanner = None
        if is_splittable_name(path):
            scanner = LineScanner(self._range_bytes, self._delimiter)
            with open_binary(path) as f:
                while block := f.read(8 << 20):
                    scanner.feed(block)
        yield from emit_ranges(path, scanner, self._counters)
