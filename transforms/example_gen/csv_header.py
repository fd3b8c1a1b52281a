"""The header row of CSV input, read and checked on the launcher before any Beam work.

Example::

    header = read_csv_header(files, CsvFormat())   # ("id", "name", ...), shared by every file
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from typing import Optional

from beam_pipeline.core.errors import PipelineError
from transforms.example_gen.compressed import is_decompression_error, open_text
from transforms.example_gen.settings import CsvFormat

__all__ = ["read_csv_header"]


def read_csv_header(files: Sequence[str], fmt: CsvFormat) -> tuple[str, ...]:
    """The shared header row of the CSV files, checked before any Beam work.

    Raises:
      PipelineError: a file has no header, an empty or duplicated column name, headers
        differ between files, or a file is not UTF-8.
    """
    header: Optional[tuple[str, ...]] = None
    for path in files:
        try:
            with open_text(path) as f:
                first = next(csv.reader(f, delimiter=fmt.delimiter), None)
        except UnicodeDecodeError as e:
            raise PipelineError(
                f"Input file {path} is not UTF-8 text ({e.reason} at byte {e.start}); "
                "re-encode it as UTF-8."
            ) from e
        except csv.Error as e:
            raise PipelineError(
                f"Input file {path}:1 has no readable header row ({e}); fix the quoting of "
                "its first line."
            ) from e
        except Exception as e:
            if not is_decompression_error(e):
                raise
            raise PipelineError(
                f"Input file {path} cannot be decompressed as its name says ({e}); check the "
                "file, or rename it to match its compression."
            ) from e
        if not first or all(not c.strip() for c in first):
            raise PipelineError(
                f"Input file {path} has no header row; add a first line naming the columns."
            )
        if any("\n" in c or "\r" in c for c in first):
            raise PipelineError(
                f"Input file {path}:1 has no readable header row (a quote there is not closed "
                "before the line ends); fix the quoting of its first line."
            )
        names = tuple(c.strip() for c in first)
        if any(_looks_numeric(c) for c in names):
            raise PipelineError(
                f"Input file {path}:1 starts with data {list(names)[:4]}, not a header; add a "
                "first line naming the columns."
            )
        if "" in names:
            raise PipelineError(
                f"Input file {path}:1 has an empty column name (column "
                f"{names.index('') + 1}); name every column in the header."
            )
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PipelineError(
                f"Input file {path}:1 names column {dup[0]!r} twice; give columns unique names."
            )
        if header is not None and names != header:
            raise PipelineError(
                f"Input file {path} has header {list(names)} but {files[0]} has "
                f"{list(header)}; give all input files the same columns."
            )
        header = names
    assert header is not None
    return header


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True
