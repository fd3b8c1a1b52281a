"""What ExampleGen's readers are told besides the files: CSV options and the user's schema.

Example::

    settings = ReadSettings(csv=CsvFormat(delimiter=";", null_values=("", "NA")))
    FORMATS[DataFormat.CSV].read(files, header, HashSplitter(), settings)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tensorflow_metadata.proto.v0 import schema_pb2

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES

__all__ = ["CsvFormat", "ReadSettings"]


@dataclasses.dataclass(frozen=True)
class CsvFormat:
    """How CSV files are read.

    Attributes:
      delimiter: the field separator.
      null_values: values meaning "missing" besides the empty field.
      max_field_bytes: a row with a longer field (UTF-8 bytes) is rejected, not read.
      range_bytes: an uncompressed file is read in ranges of about this many bytes, by
        as many readers, when it can be split at line starts (see ``csv_ranges``).
    """

    delimiter: str = ","
    null_values: tuple[str, ...] = ("",)
    max_field_bytes: int = DEFAULT_CSV_MAX_FIELD_BYTES
    range_bytes: int = 4 << 20

    def __post_init__(self):
        if len(self.delimiter) != 1:
            raise PipelineError(
                f"--csv_delimiter {self.delimiter!r} must be a single character; pass e.g. "
                "--csv_delimiter=';'."
            )


@dataclasses.dataclass(frozen=True)
class ReadSettings:
    """The settings every input format's reader receives (each uses what concerns it).

    Attributes:
      csv: how CSV files are read.
      schema: the user's ``--schema``, or None: its feature types are used instead of types
        inferred from the data.
    """

    csv: CsvFormat = CsvFormat()
    schema: Optional[schema_pb2.Schema] = None
