"""The common base of ExampleGen's input formats: what a format reads into, and its API.

An input format (:class:`InputFormat`) says which files are its by name, checks them on
the launcher before any Beam work, and gives the PTransform that reads them into typed
Arrow RecordBatches per split (:class:`SplitBatch`) plus the rows it refused
(:class:`RejectedRow`), as :class:`ExampleGenResult`. Everything after reading (the
tf.Example sinks, statistics) is the same for every format. The formats ExampleGen knows
are the immutable table :data:`transforms.example_gen.formats.FORMATS`; a new format is
one module with an ``InputFormat`` subclass plus one line in that table (and its name in
``DataFormat`` for ``--data_format``), as tfx-bsl keeps one TFXIO per format on a common
base.

Example::

    class JsonLinesInput(InputFormat):
        title, suffix = "JSON lines", ".jsonl"

        def claims(self, name):
            return name.endswith(".jsonl")

        def read(self, files, columns, splitter, settings):
            return ReadJsonLines(files, splitter)  # a PTransform -> ExampleGenResult
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from transforms.example_gen.settings import ReadSettings

if TYPE_CHECKING:  # Beam (and Arrow) by the formats' readers, not by the launcher's checks
    import apache_beam as beam

    from transforms.example_gen.splitting import HashSplitter

__all__ = ["CHUNK_ROWS", "ExampleGenResult", "InputFormat"]

# Rows per RecordBatch a reader emits (CSV chunks, TFRecord batches).
CHUNK_ROWS = 8192


class ExampleGenResult(NamedTuple):
    """ExampleGen's outputs: typed rows per split, and the rows it refused."""

    batches: beam.PCollection  # [SplitBatch]
    rejected: beam.PCollection  # [RejectedRow]


class InputFormat(abc.ABC):
    """One input format of ExampleGen (a plug-in: see the module docstring).

    Attributes:
      title: the format's name in messages, e.g. ``"CSV"``.
      suffix: the file name ending messages name, e.g. ``".csv"``.
    """

    title: ClassVar[str]
    suffix: ClassVar[str]

    @abc.abstractmethod
    def claims(self, name: str) -> bool:
        """Whether a file of this name is of this format.

        Args:
          name: the file's base name, lower case, compression suffixes (``.gz``, ...) removed.
        """

    def read_columns(self, files: Sequence[str], settings: ReadSettings) -> tuple[str, ...]:
        """Checks ``files`` on the launcher, before any Beam work; their column names.

        The default checks nothing and returns ``()``: the format names its features
        itself (e.g. tf.Example). CSV reads and checks the header row here.

        Raises:
          PipelineError: the files cannot be read as this format.
        """
        del files, settings
        return ()

    @abc.abstractmethod
    def read(
        self,
        files: Sequence[str],
        columns: tuple[str, ...],
        splitter: HashSplitter,
        settings: ReadSettings,
    ) -> beam.PTransform[beam.pvalue.PBegin, ExampleGenResult]:
        """The PTransform that reads ``files`` into typed batches per split.

        Args:
          files: the input files (from :func:`resolve_input_files`).
          columns: what :meth:`read_columns` returned for them.
          splitter: assigns each row to a split.
          settings: the reading settings (CSV options, the user's schema).

        Raises:
          PipelineError: a setting does not fit these files (e.g. an unknown
            ``--partition_feature``).
        """
