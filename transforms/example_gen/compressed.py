"""Input files as decompressed bytes or text, the compression chosen by the file's name.

Example::

    with open_text("data/part-0.csv.gz") as f:     # also .bz2, .xz, .lzma, .zst, .deflate
        header = next(csv.reader(f))
    try:
        ...
    except Exception as e:
        if is_decompression_error(e):
            ...  # corrupt or truncated compressed input
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError

__all__ = [
    "COMPRESSION_SUFFIXES",
    "input_size",
    "is_decompression_error",
    "open_binary",
    "open_input",
    "open_text",
]

# Compressed CSV input by file name suffix: the compressions Beam's FileSystems know
# (CompressionTypes.AUTO), plus ".gzip".
COMPRESSION_SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".lzma", ".zst", ".zstd", ".deflate")


def _decompressor_factory(path: str):
    """A function making a fresh decompressor object for ``path``'s suffix, or None."""
    name = path.lower()
    if name.endswith((".gz", ".gzip")):
        return lambda: zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    if name.endswith(".bz2"):
        return bz2.BZ2Decompressor
    if name.endswith((".xz", ".lzma")):
        return lzma.LZMADecompressor  # FORMAT_AUTO: .xz and legacy .lzma
    if name.endswith((".zst", ".zstd")):
        import zstandard

        return lambda: zstandard.ZstdDecompressor().decompressobj()
    if name.endswith(".deflate"):
        return zlib.decompressobj
    return None


class _ReadStream(io.RawIOBase):
    """A read-only ``io.RawIOBase`` over a file's raw bytes (``fileio.open``), decompressing.

    Hand-written instead of Beam's ``CompressedFile`` (what ``FileSystems.open`` returns for
    a compressed name) for two reasons: it lacks ``readable()``/``writable()``, which
    ``io.TextIOWrapper`` calls (``AttributeError: 'CompressedFile' object has no attribute
    'writable'``), and it returns a truncated gzip or xz file's first part as if it were
    the whole file, a silent loss of rows. Here the standard decompressors (and
    zstandard's) are fed the raw bytes; input that ends inside a compressed stream raises
    EOFError, and concatenated streams (multi-member gzip, zstd frames) are all read.
    """

    def __init__(self, handle, new_decompressor=None):
        super().__init__()
        self._handle = handle
        self._new = new_decompressor
        self._decompressor = new_decompressor() if new_decompressor else None
        self._out = memoryview(b"")  # decompressed bytes not yet read
        self._in_stream = False  # inside a compressed stream that has not ended yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._decompressor is None:
            data = self._handle.read(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        while not self._out:
            data = self._handle.read(1 << 16)
            if not data:
                if self._in_stream:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
                return 0
            pieces = []
            while data:
                if self._decompressor.eof:  # the next stream or frame of the same file
                    self._decompressor = self._new()
                pieces.append(self._decompressor.decompress(data))
                self._in_stream = not self._decompressor.eof
                data = self._decompressor.unused_data if self._decompressor.eof else b""
            self._out = memoryview(b"".join(pieces))
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]  # a view: no copy
        return n

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def is_decompression_error(e: BaseException) -> bool:
    """Whether ``e`` says that compressed input is corrupt or truncated."""
    if isinstance(e, (zlib.error, lzma.LZMAError, EOFError)):
        return True
    if isinstance(e, OSError) and e.errno is None:  # bz2: "Invalid data stream"
        return True
    return type(e).__name__ == "ZstdError"


def _gone(path: str) -> PipelineError:
    return PipelineError(
        f"Input file {path} was deleted or moved while the run read it (it was there when "
        "the run listed its input); keep the input files in place during a run, then rerun."
    )


def open_input(path: str):
    """Input file ``path``'s raw bytes (``fileio.open``).

    Raises:
      PipelineError: the file is gone: the run listed it, then it was deleted or moved (a
        span folder removed mid-run), named in one sentence, not a worker's traceback.
    """
    try:
        return fileio.open(path, "rb")
    except FileNotFoundError as e:
        raise _gone(path) from e


def input_size(path: str) -> int:
    """Input file ``path``'s size in bytes (raises as :func:`open_input`)."""
    try:
        return fileio.size(path)
    except FileNotFoundError as e:
        raise _gone(path) from e


def open_binary(path: str) -> io.BufferedReader:
    """``path`` (local, gs://, any filesystem of ``beam_pipeline.core.fileio``), decompressed
    (raises as :func:`open_input`)."""
    handle = open_input(path)  # raw bytes: gfile never decompresses
    return io.BufferedReader(_ReadStream(handle, _decompressor_factory(path)), 1 << 20)


def open_text(path: str) -> io.TextIOWrapper:
    # utf-8-sig drops a byte-order mark at the start of each file (spreadsheets' "CSV UTF-8"
    # exports write one; it would otherwise stay in the first column's name). Every file
    # has its own header, so every file is checked.
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", newline="")
