"""ExampleGen: input files -> typed Arrow RecordBatches per split -> tf.Examples.

Rows are read into ``pa.RecordBatch`` chunks (columns ``list<int64|float32|binary>``, a
null list for a missing value), assigned to splits by a deterministic hash, and written
as sharded gzip TFRecords of ``tf.train.Example`` per split. Rows that cannot be read
(wrong number of fields, a value that does not parse as its column's type, an
undecodable record) are never dropped silently: they come out as :class:`RejectedRow`.

The input format is a plug-in point (:mod:`.input_format`, :mod:`.formats`): CSV
(:mod:`.csv_input`) and TFRecord (:mod:`.tfrecord_input`) are two :class:`InputFormat` s
in the immutable table :data:`FORMATS`; what comes after reading (:mod:`.sinks`,
statistics) is the same for every format. One module per concern:

- :mod:`.input_files`: which files ``--data`` names; :mod:`.formats`: which format they are.
- :mod:`.compressed`: reading compressed input by its name.
- :mod:`.splitting`: the hash split.
- :mod:`.csv_header`, :mod:`.csv_rows`, :mod:`.csv_typing`, :mod:`.csv_ranges`,
  :mod:`.csv_input`: CSV's header check, row reading, column typing, the byte ranges a
  large file is read apart in, and the format itself.
- :mod:`.tfrecord_input`: tf.Example TFRecords.
- :mod:`.sinks`: the tf.Example and rejected-rows writers.

Encoding to tf.Example: :mod:`transforms.example_encoding` (a batch at a time, framed as
TFRecords; tfx-bsl's ``RecordBatchToExamplesEncoder`` for what its layout does not take).

Example::

    files = resolve_input_files("data/*.csv")
    data_format = detect_format(files, DataFormat.AUTO)
    settings = ReadSettings(csv=CsvFormat())
    header = FORMATS[data_format].read_columns(files, settings)
    with beam.Pipeline() as p:
        result = p | FORMATS[data_format].read(files, header, HashSplitter(), settings)
        result.batches | WriteSplitExamples(out_dir, splits=(Split.TRAIN, Split.EVAL))
        result.rejected | WriteRejectedRows(rejected_dir)
"""

import importlib
from typing import TYPE_CHECKING

# Each public name's module (in this package unless named in full). The package imports
# them on first use (PEP 562): the launcher's checks of the input (which files, which
# format, the CSV header) come from modules that import nothing of Beam, and a rerun that
# reuses every stage imports no more than those (issue 45); the readers and writers import
# Beam when a job uses them.
_HOMES = {
    "read_csv_header": "csv_header",
    "ReadCsvExamples": "csv_input",
    "ONE_READER_COUNTER": "csv_ranges",
    "RANGES_COUNTER": "csv_ranges",
    "CsvRange": "csv_ranges",
    "OneReader": "csv_ranges",
    "ColumnType": "csv_typing",
    "InferCsvColumnTypes": "csv_typing",
    "FORMATS": "formats",
    "CsvInput": "formats",
    "TFRecordInput": "formats",
    "detect_format": "formats",
    "resolve_input_files": "input_files",
    "ExampleGenResult": "input_format",
    "InputFormat": "input_format",
    "RejectedRow": "transforms.rows",
    "SplitBatch": "transforms.rows",
    "CsvFormat": "settings",
    "ReadSettings": "settings",
    "WriteRejectedRows": "sinks",
    "WriteSplitExamples": "sinks",
    "HashSplitter": "splitting",
    "split_batch": "splitting",
    "split_counters": "splitting",
    "ReadTFRecordExamples": "tfrecord_input",
}

if TYPE_CHECKING:
    from transforms.example_gen.csv_header import read_csv_header
    from transforms.example_gen.csv_input import ReadCsvExamples
    from transforms.example_gen.csv_ranges import (
        ONE_READER_COUNTER,
        RANGES_COUNTER,
        CsvRange,
        OneReader,
    )
    from transforms.example_gen.csv_typing import ColumnType, InferCsvColumnTypes
    from transforms.example_gen.formats import FORMATS, CsvInput, TFRecordInput, detect_format
    from transforms.example_gen.input_files import resolve_input_files
    from transforms.example_gen.input_format import ExampleGenResult, InputFormat
    from transforms.example_gen.settings import CsvFormat, ReadSettings
    from transforms.example_gen.sinks import WriteRejectedRows, WriteSplitExamples
    from transforms.example_gen.splitting import HashSplitter, split_batch, split_counters
    from transforms.example_gen.tfrecord_input import ReadTFRecordExamples
    from transforms.rows import RejectedRow, SplitBatch

__all__ = [
    "FORMATS",
    "ONE_READER_COUNTER",
    "RANGES_COUNTER",
    "ColumnType",
    "CsvFormat",
    "CsvInput",
    "CsvRange",
    "ExampleGenResult",
    "HashSplitter",
    "InferCsvColumnTypes",
    "InputFormat",
    "OneReader",
    "ReadCsvExamples",
    "ReadSettings",
    "ReadTFRecordExamples",
    "RejectedRow",
    "SplitBatch",
    "TFRecordInput",
    "WriteRejectedRows",
    "WriteSplitExamples",
    "detect_format",
    "read_csv_header",
    "resolve_input_files",
    "split_batch",
    "split_counters",
]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = home if home.startswith("transforms.") else f"{__name__}.{home}"
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
