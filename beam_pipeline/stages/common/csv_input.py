"""How the run's CSV files are read: the ``--csv_*`` settings as ``transforms.example_gen``'s
``CsvFormat``. ExampleGen reads ``--data`` with it, the BulkInferrer ``--infer_data``.

Example::

    header = read_csv_header(files, csv_format(config.data))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the Beam side is imported where a file is read
    from transforms.example_gen import CsvFormat

__all__ = ["csv_format"]


def csv_format(data: Any) -> CsvFormat:
    """The run's CSV format (delimiter, null values, largest field) from ExampleGen's
    settings (``config.data``)."""
    from transforms import example_gen as eg

    return eg.CsvFormat(data.csv_delimiter, data.csv_null_values, data.csv_max_field_bytes)
