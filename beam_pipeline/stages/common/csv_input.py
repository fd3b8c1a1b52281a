"""How the run's CSV files are read: the ``--csv_*`` settings as ``transforms.example_gen``'s
``CsvFormat``. ExampleGen reads ``--data`` with it, the BulkInferrer ``--infer_data``.

Example::

    header = read_csv_header(files, csv_format(config))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beam_pipeline.engine.config import PipelineConfig

if TYPE_CHECKING:  # the Beam side is imported where a file is read
    from transforms.example_gen import CsvFormat

__all__ = ["csv_format"]


def csv_format(config: PipelineConfig) -> CsvFormat:
    """The run's CSV format (delimiter, null values, largest field) from its settings."""
    from transforms import example_gen as eg

    d = config.data
    return eg.CsvFormat(d.csv_delimiter, d.csv_null_values, d.csv_max_field_bytes)
