"""The input formats ExampleGen reads, and which one a run's files are.

:data:`FORMATS` is the plug-in point: an immutable table from ``DataFormat`` to the
:class:`~transforms.example_gen.input_format.InputFormat` that reads it. A new format is
an ``InputFormat`` subclass here (its names and its check of the files on the launcher)
whose ``read`` returns the PTransform of its own module, and one line in the table.
Beam is imported by those modules alone, when a job reads the files: the launcher's
checks (which format, the CSV header) import nothing of it, and a rerun that reuses
every stage needs nothing more (issue 45). Functions that choose a format take the table
as an argument (default :data:`FORMATS`), so a caller (or a test) can pass a table with
formats of its own instead of changing a global.

Example::

    data_format = detect_format(files, DataFormat.AUTO)        # from the file names
    header = FORMATS[data_format].read_columns(files, settings)
    read = FORMATS[data_format].read(files, header, splitter, settings)
"""

from __future__ import annotations

import enum
import posixpath
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DataFormat
from transforms.example_gen.compressed import COMPRESSION_SUFFIXES
from transforms.example_gen.csv_header import read_csv_header
from transforms.example_gen.input_files import basename
from transforms.example_gen.input_format import InputFormat
from transforms.example_gen.settings import ReadSettings

if TYPE_CHECKING:
    from transforms.example_gen.csv_input import ReadCsvExamples
    from transforms.example_gen.tfrecord_input import ReadTFRecordExamples

__all__ = ["FORMATS", "CsvInput", "TFRecordInput", "detect_format"]


class CsvInput(InputFormat):
    """CSV files (``.csv``, ``.tsv``, ``.txt``, optionally compressed) with a header row,
    read by :class:`~transforms.example_gen.csv_input.ReadCsvExamples`."""

    title = "CSV"
    suffix = ".csv"

    def claims(self, name: str) -> bool:
        return name.endswith((".csv", ".tsv", ".txt"))

    def read_columns(self, files: Sequence[str], settings: ReadSettings) -> tuple[str, ...]:
        return read_csv_header(files, settings.csv)

    def read(self, files, columns, splitter, settings) -> ReadCsvExamples:
        """:meth:`InputFormat.read` (the arguments' types are the base's)."""
        from transforms.example_gen.csv_input import ReadCsvExamples
        from transforms.example_gen.csv_typing import column_types_of_schema

        types = column_types_of_schema(settings.schema) if settings.schema is not None else None
        return ReadCsvExamples(files, columns, settings.csv, splitter, types)


class TFRecordInput(InputFormat):
    """TFRecord files of tf.Example (``*.tfrecord*``, ``.tfr``, ``.rio``; optionally gzip),
    read by :class:`~transforms.example_gen.tfrecord_input.ReadTFRecordExamples`."""

    title = "TFRecord"
    suffix = ".tfrecord"

    def claims(self, name: str) -> bool:
        return ".tfrecord" in name or name.endswith((".tfr", ".rio"))

    def read(self, files, columns, splitter, settings) -> ReadTFRecordExamples:
        """:meth:`InputFormat.read` (the arguments' types are the base's)."""
        from transforms.example_gen.tfrecord_input import ReadTFRecordExamples

        schema = settings.schema
        return ReadTFRecordExamples(
            files, splitter, schema.SerializeToString() if schema is not None else None
        )


# In the order detect_format asks them: the first format that claims a name has it.
FORMATS: Mapping[DataFormat, InputFormat] = types.MappingProxyType(
    {
        DataFormat.CSV: CsvInput(),
        DataFormat.TFRECORD: TFRecordInput(),
    }
)


def detect_format(
    files: Sequence[str],
    data_format: enum.Enum,
    formats: Mapping[enum.Enum, InputFormat] = FORMATS,
) -> enum.Enum:
    """The format of ``files``: ``data_format`` itself, or for AUTO the one their names say.

    Args:
      files: the input files.
      data_format: ``DataFormat.AUTO``, or a key of ``formats`` (``--data_format``).
      formats: the formats to choose from, in the order they are asked.

    Returns:
      The key of ``formats`` whose format the files are.

    Raises:
      PipelineError: files of several formats, or a name that says none.
    """
    if data_format is not DataFormat.AUTO:
        return data_format
    kinds, unclaimed, endings = set(), [], set()
    for f in files:
        name = basename(f).lower()
        compression = ""
        for suffix in COMPRESSION_SUFFIXES:
            if name.endswith(suffix):
                name, compression = name.removesuffix(suffix), suffix
        kind = next((key for key, fmt in formats.items() if fmt.claims(name)), None)
        if kind is None:
            unclaimed.append(f)
            continue
        kinds.add(kind)
        endings.add(posixpath.splitext(basename(f).removesuffix(compression))[1] + compression)
    if unclaimed and len(kinds) == 1 and len(endings) == 1:
        # A folder of data files and others (a README.md): the data files alone, by a glob.
        folder = unclaimed[0][: -len(basename(unclaimed[0]))]
        pattern = f"{folder}*{endings.pop()}"
        raise PipelineError(
            f"Input file {unclaimed[0]} is not {formats[kinds.pop()].title} by name, unlike "
            f"the other files beside it; read only those with a glob: --data '{pattern}'."
        )
    if unclaimed:
        names = " nor ".join(fmt.suffix for fmt in formats.values())
        flags = " or ".join(f"--data_format={key.value}" for key in formats)
        raise PipelineError(
            f"Input file {unclaimed[0]} is neither {names} by name; rename it or pass {flags}."
        )
    if len(kinds) > 1:
        mixed = " and ".join(fmt.title for key, fmt in formats.items() if key in kinds)
        raise PipelineError(
            f"--data mixes {mixed} files ({files[0]} ...); point --data at one kind."
        )
    return kinds.pop()
