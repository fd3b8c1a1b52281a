"""The CSV input format: CSV files -> typed Arrow RecordBatches per split, rejected rows.

Reading is two passes over the files: the typing pass (:mod:`.csv_typing`) decides each
column's type unless the user's schema gives them, and finds the byte ranges a large file
can be read apart in (:mod:`.csv_ranges`; with a schema, a scan does that alone); the
parsing pass reads the ranges, spread over workers, with line numbers (:mod:`.csv_rows`),
parses them with those types, rejects what does not parse and splits the rest by hash.
Reading twice keeps memory flat: nothing waits in memory for the types to be known.

Why not tfx-bsl's CSV decoder: ``tfx_bsl.coders.csv_decoder`` works on lines (it cannot
read quoted fields that contain newlines, which CSV allows), reports no file/line for a bad
row, and infers a column holding one stray word as a string column instead of rejecting
the row. Reading uses Python's C ``csv`` module per file (it tracks physical line
numbers), or pyarrow's C++ reader for a byte range both read alike (:mod:`.csv_rows`), and
all typing and parsing is vectorized with pyarrow compute per chunk.

Example::

    header = read_csv_header(files, CsvFormat())
    with beam.Pipeline() as p:
        result = p | ReadCsvExamples(files, header, CsvFormat(), HashSplitter())
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.core.errors import PipelineError
from transforms.example_gen.csv_chunks import PlanChunkedFile, PlanChunks, ScanChunk
from transforms.example_gen.csv_ranges import ScanCsvRanges
from transforms.example_gen.csv_rows import RawChunk, ReadCsvFile
from transforms.example_gen.csv_typing import (
    FLOAT_RE,
    INTEGRAL_RE,
    ColumnType,
    CountFileTypes,
    InferCsvColumnTypes,
    int64_mask,
    string_array,
)
from transforms.example_gen.input_format import ExampleGenResult
from transforms.example_gen.settings import CsvFormat
from transforms.example_gen.splitting import HashSplitter, split_batch, split_counters
from transforms.metrics import NAMESPACE
from transforms.rows import RejectedRow

__all__ = ["ReadCsvExamples"]


class _ParseChunk(beam.DoFn):
    """Types a raw chunk, rejects unparseable rows, and splits the rest by hash."""

    def __init__(self, header: tuple[str, ...], fmt: CsvFormat, splitter: HashSplitter):
        self._header = header
        self._fmt = fmt
        self._splitter = splitter
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_rejected")
        self._written = split_counters(splitter)

    def process(self, chunk: RawChunk, types: dict[str, ColumnType]) -> Iterator:
        n = len(chunk.lines)
        bad = np.zeros(n, dtype=bool)
        reasons: dict[int, str] = {}
        parsed = []
        for name, values in zip(self._header, chunk.columns):
            ctype = types[name]
            raw, arr, missing = string_array(values, self._fmt.null_values)
            present = pc.invert(missing)
            if ctype is ColumnType.STRING:
                parsed.append((raw, missing))
                continue
            ok = (
                int64_mask(arr)
                if ctype is ColumnType.INT
                else pc.match_substring_regex(arr, FLOAT_RE)
            )
            wrong = np.asarray(pc.and_(present, pc.invert(ok)).to_numpy(zero_copy_only=False))
            if wrong.any():
                for i in np.flatnonzero(wrong):
                    reasons.setdefault(int(i), _not_of_type(name, values[i].as_py(), ctype))
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
        yield from split_batch(batch, keys, self._splitter, self._written)


def _not_of_type(name: str, value: str, ctype: ColumnType) -> str:
    """Why a value of column ``name`` (typed ``ctype``) is rejected."""
    if ctype is ColumnType.INT and re.fullmatch(INTEGRAL_RE, value.strip()):
        return f"column {name!r}: {value!r} is beyond int64 (-2^63..2^63-1)"
    return f"column {name!r}: {value!r} is not {ctype.value}"


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
        files = pbegin | "ListFiles" >> beam.Create(self._files)
        count_types = self._column_types is None
        # Large files: typed and scanned in chunks on many workers (csv_chunks); the
        # others (small or compressed) in one pass each, in order.
        planned = files | "PlanChunks" >> beam.ParDo(
            PlanChunks(self._fmt.range_bytes)
        ).with_outputs("whole", main="chunks")
        chunked = (
            planned.chunks
            | "SpreadChunks" >> beam.Reshuffle()
            | "ScanChunks" >> beam.ParDo(ScanChunk(self._header, self._fmt, count_types))
            | "ChunksByFile" >> beam.GroupByKey()
            | "PlanRanges"
            >> beam.ParDo(PlanChunkedFile(self._header, self._fmt, count_types)).with_outputs(
                "ranges", main="counts"
            )
        )
        if not count_types:
            types = pbegin | "SchemaTypes" >> beam.Create([self._column_types])
            whole = planned.whole | "ScanLines" >> beam.ParDo(
                ScanCsvRanges(self._fmt.range_bytes, self._fmt.delimiter)
            ).with_outputs("ranges")
        else:
            whole = planned.whole | "CountTypes" >> beam.ParDo(
                CountFileTypes(self._header, self._fmt)
            ).with_outputs("ranges", main="counts")
            types = (
                (whole.counts, chunked.counts)
                | "AllCounts" >> beam.Flatten()
                | "InferTypes" >> beam.CombineGlobally(InferCsvColumnTypes(self._header))
            )
        ranges = (whole.ranges, chunked.ranges) | "AllRanges" >> beam.Flatten()
        reader = ReadCsvFile(self._header, self._fmt, self._splitter.partition_feature)
        read = (
            ranges
            # Each range is one element: spread them over the workers (see csv_ranges).
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(reader).with_outputs("rejected", main="rows")
        )
        parsed = read.rows | "Parse" >> beam.ParDo(
            _ParseChunk(self._header, self._fmt, self._splitter),
            types=beam.pvalue.AsSingleton(types),
        ).with_outputs("rejected", main="batches")
        rejected = (read.rejected, parsed.rejected) | "AllRejected" >> beam.Flatten()
        return ExampleGenResult(parsed.batches, rejected)
