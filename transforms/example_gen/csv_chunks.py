"""The typing pass over a large CSV file in byte chunks, on many workers at once.

:class:`~transforms.example_gen.csv_typing.CountFileTypes` reads a file in order, in one
worker, to find its column types and its line starts (:mod:`.csv_ranges`). Once the
parsing pass is spread over workers, that pass is what is left in series, and it keeps
more workers from being proportionally faster (benchmarks/bench_scaling.py).
Here a file of at least two ranges is cut at fixed byte offsets, one chunk per
``range_bytes``, and every chunk is typed and scanned on whichever worker gets it:

- :class:`PlanChunks`: a file -> its :class:`Chunk` s (files too small to split, or
  compressed, go on ``whole``, to the in-order pass);
- :class:`ScanChunk`: each end of a chunk moves forward to the next line start (the byte
  after the first ``\\n`` at or past the offset), so neighbours agree on every cut without
  talking; the chunk is typed with pyarrow, as a whole file is, and scanned with a
  :class:`LineScanner` that assumes it starts outside quotes; it reports its newlines and
  whether its quotes are odd in number;
- :class:`PlanChunkedFile`, after a GroupByKey on the file: a cut is a real line start
  exactly when an even number of quotes precedes it (an escaped quote is doubled), and
  then each chunk's own scan saw what a scan of the whole file sees there. When every cut
  is one and no chunk found a reason to keep the file whole, the chunks are the file's
  ranges, each beginning at line 2 + the newlines before it, and their counts are the
  file's. Otherwise the file is typed again, whole and in order, by the in-order pass in
  that step: a file that cannot be split is read as before, after a wasted parallel pass.

Why not Beam's splittable text reads: see :mod:`.csv_ranges` (a text range can tell
neither a quoted newline from a line end nor its first line's number).

Example::

    planned = files | beam.ParDo(PlanChunks(fmt.range_bytes)).with_outputs("whole", main="chunks")
    scanned = (
        planned.chunks
        | beam.Reshuffle()
        | beam.ParDo(ScanChunk(header, fmt, count_types=True))
        | beam.GroupByKey()
        | beam.ParDo(PlanChunkedFile(header, fmt, True)).with_outputs("ranges", main="counts"))
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa

from transforms.example_gen.compressed import input_size, open_input
from transforms.example_gen.csv_ranges import (
    CsvRange,
    LineScanner,
    OneReader,
    RangeCounters,
    ScanCsvRanges,
    is_splittable_name,
)
from transforms.example_gen.csv_typing import (
    CountFileTypes,
    TypeCounts,
    add_counts,
    count_stream_types,
)
from transforms.example_gen.settings import CsvFormat
from transforms.metrics import NAMESPACE

__all__ = [
    "RESCANNED_COUNTER",
    "Chunk",
    "ChunkScan",
    "PlanChunkedFile",
    "PlanChunks",
    "ScanChunk",
    "chunk_file",
    "next_line_start",
]

# Files whose chunks could not be its ranges (a cut inside quotes, a reason to keep it
# whole, bytes only Python's reader reads), so the in-order pass read them again.
RESCANNED_COUNTER = "example_gen.csv_chunks_rescanned"

# No split points from a chunk's own scanner: the chunk is one range.
_NO_POINTS = 1 << 62


class Chunk(NamedTuple):
    """Bytes ``[lo, hi)`` of ``file`` (``size`` bytes), nominally: :class:`ScanChunk`
    moves both ends to the next line start. Chunk 0 (``lo`` 0) also holds the header."""

    file: str
    index: int
    lo: int
    hi: int
    size: int


class ChunkScan(NamedTuple):
    """What :class:`ScanChunk` found in one chunk: its real bytes ``[start, end)`` (line
    starts; chunk 0 starts after the header), the newlines in them, whether they hold an
    odd number of quotes, a reason to keep the file whole, and the per-column type
    counts (None: only Python's lenient reader reads these bytes; or no typing asked)."""

    index: int
    start: int
    end: int
    newlines: int
    odd_quotes: bool
    unsafe: Optional[OneReader]
    counts: Optional[list[TypeCounts]]


def chunk_file(path: str, size: int, range_bytes: int) -> list[Chunk]:
    """``size`` bytes cut into chunks of at least ``range_bytes`` (one per whole range)."""
    count = max(1, size // max(1, range_bytes))
    bounds = [size * i // count for i in range(count + 1)]
    return [Chunk(path, i, bounds[i], bounds[i + 1], size) for i in range(count)]


def next_line_start(f, offset: int, size: int) -> int:
    """The first line start at or after ``offset`` (> 0) in binary file ``f``: the byte
    after the first ``\\n`` at or after ``offset - 1``; ``size`` when none follows."""
    if offset >= size:
        return size
    pos = offset - 1
    f.seek(pos)
    while block := f.read(64 << 10):
        i = block.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(block)
    return size


class PlanChunks(beam.DoFn):
    """A file -> its :class:`Chunk` s when it is uncompressed and at least two ranges long;
    otherwise the path itself on ``whole`` (the in-order pass reads it)."""

    def __init__(self, range_bytes: int):
        self._range_bytes = range_bytes

    def process(self, path: str) -> Iterator:
        size = input_size(path) if is_splittable_name(path) else 0
        if size < 2 * self._range_bytes:
            yield beam.pvalue.TaggedOutput("whole", path)
            return
        yield from chunk_file(path, size, self._range_bytes)


class ScanChunk(beam.DoFn):
    """A :class:`Chunk` -> ``(file, ChunkScan)``: its line-start ends, scan and type counts.

    ``count_types`` False: the scan alone (a user's schema gives the types).
    """

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat, count_types: bool):
        self._header = header
        self._fmt = fmt
        self._count_types = count_types

    def process(self, chunk: Chunk) -> Iterator[tuple[str, ChunkScan]]:
        with open_input(chunk.file) as f:
            end = next_line_start(f, chunk.hi, chunk.size)
            # Chunk 0 is read from the file's first byte: the scan sees the header as the
            # in-order scan does (a byte-order mark, quotes), and pyarrow skips it.
            start = 0 if chunk.index == 0 else next_line_start(f, chunk.lo, chunk.size)
            f.seek(start)
            data = f.read(max(0, end - start))
        header_newlines = 0
        if chunk.index == 0:
            header_newlines = 1 if b"\n" in data else 0
            body_start = data.index(b"\n") + 1 if header_newlines else len(data)
        else:
            body_start = 0
        scanner = LineScanner(_NO_POINTS, self._fmt.delimiter, start=start)
        scanner.feed(data)
        counts = None
        if self._count_types:
            try:
                counts = count_stream_types(
                    io.BytesIO(data), self._header, self._fmt, skip_header=chunk.index == 0
                )
            except (pa.ArrowInvalid, UnicodeDecodeError):
                counts = None  # the in-order pass's Python reader reads (or names) it
        yield (
            chunk.file,
            ChunkScan(
                index=chunk.index,
                start=start + body_start,
                end=start + len(data),
                newlines=scanner.newlines - header_newlines,
                odd_quotes=scanner.odd_quotes,
                unsafe=scanner.unsafe,
                counts=counts,
            ),
        )


def _refusal(scans: Sequence[ChunkScan], count_types: bool) -> Optional[str]:
    """Why these chunk scans cannot be the file's ranges (None: they can)."""
    if [s.index for s in scans] != list(range(len(scans))):
        return "chunks missing"
    odd = False
    for prev, scan in zip([None, *scans], scans):
        if prev is not None and prev.end != scan.start:
            return "chunks not contiguous (did the file change while it was read?)"
        if odd:
            return "a cut inside quotes"
        if scan.unsafe is not None:
            return scan.unsafe.value
        if count_types and scan.counts is None:
            return "only Python's reader reads it"
        odd ^= scan.odd_quotes
    return None


class PlanChunkedFile(beam.DoFn):
    """``(file, [ChunkScan])`` -> the file's type counts (main output, when typing) and its
    :class:`CsvRange` s (``ranges``); or, when the chunks cannot be its ranges, whatever
    the in-order pass gives for the file (read again, whole)."""

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat, count_types: bool):
        self._header = header
        self._fmt = fmt
        self._count_types = count_types
        self._plans = RangeCounters()
        self._rescanned = beam.metrics.Metrics.counter(NAMESPACE, RESCANNED_COUNTER)
        self._in_order = (
            CountFileTypes(header, fmt)
            if count_types
            else ScanCsvRanges(fmt.range_bytes, fmt.delimiter)
        )

    def process(self, item: tuple[str, list[ChunkScan]]) -> Iterator:
        path, scans = item
        scans = sorted(scans, key=lambda s: s.index)
        if _refusal(scans, self._count_types) is not None:
            self._rescanned.inc()
            yield from self._in_order.process(path)
            return
        if self._count_types:
            counts = [TypeCounts(0, 0, 0) for _ in self._header]
            for scan in scans:
                counts = add_counts(counts, scan.counts)
            yield counts
        ranges, line = [], 2
        for scan in scans:
            if scan.end > scan.start:
                ranges.append(CsvRange(path, scan.start, scan.end, line))
            line += scan.newlines
        if len(ranges) > 1:
            self._plans.ranges.inc(len(ranges))
        for part in ranges or [CsvRange(path)]:
            yield beam.pvalue.TaggedOutput("ranges", part)
