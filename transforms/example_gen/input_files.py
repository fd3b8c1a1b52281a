"""The input files of ``--data``: a file, a folder (its non-hidden files) or a glob.

Example::

    files = resolve_input_files("data/*.csv")   # sorted paths; errors name --data
"""

from __future__ import annotations

# Beam's FileSystems, not beam_pipeline.core.fileio (tf.io.gfile): --data is a Beam glob
# (``**`` matches across folders, which gfile's glob does not), and one Beam listing gives
# every match's size, where gfile needs a call per file; Beam's IOs read the same patterns.
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.core.errors import PipelineError

__all__ = ["basename", "resolve_input_files"]

# Names (before the first dot, any case) of a folder's documentation files, never data.
_NOT_DATA = frozenset(
    ("readme", "license", "licence", "notice", "changelog", "changes", "copying", "authors")
)


def resolve_input_files(pattern: str) -> list[str]:
    """The input files of ``--data``: a file, a folder (its non-hidden files) or a glob.

    Raises:
      PipelineError: nothing matches, or every match is empty.
    """
    if not pattern:
        raise PipelineError("--data is empty; pass a CSV/TFRecord file, a folder or a glob.")
    glob = pattern
    if not any(ch in pattern for ch in "*?[") and _is_dir(pattern):
        glob = pattern.rstrip("/") + "/*"
    try:
        metadata = FileSystems.match([glob])[0].metadata_list
    except Exception as e:  # noqa: BLE001  Beam raises a bare BeamIOError for no match
        raise PipelineError(
            f"--data {pattern!r} cannot be listed ({e}); pass an existing file, folder or glob."
        ) from e
    files = sorted(
        m.path
        for m in metadata
        if not basename(m.path).startswith((".", "_")) and not _is_dir(m.path)
    )
    if not files:
        raise PipelineError(
            f"--data {pattern!r} matches no file; pass an existing CSV/TFRecord file, folder "
            "or glob."
        )
    if glob != pattern:
        # A folder's files are all read as data: a README or LICENSE beside the data (a
        # downloaded dataset's folder often has one) would be parsed as rows of it.
        notes = [f for f in files if basename(f).split(".", 1)[0].lower() in _NOT_DATA]
        if notes:
            # The glob names the data files' own ending when they share one (as the
            # format check's hint for other files beside the data does).
            endings = {basename(f).partition(".")[2] for f in files if f not in notes}
            ending = "." + endings.pop() if len(endings) == 1 and "" not in endings else ".csv"
            raise PipelineError(
                f"--data folder {pattern} holds {basename(notes[0])}, which is not data but "
                "would be read as data; move it out of the folder or pass a glob of the data "
                f"files: --data '{glob.rsplit('/', 1)[0]}/*{ending}'."
            )
    sizes = {m.path: m.size_in_bytes for m in metadata}
    empty = [f for f in files if sizes.get(f) == 0]
    if empty:
        raise PipelineError(
            f"Input file {empty[0]} is empty; remove it from --data or give it a header row "
            "and data."
        )
    return files


def basename(path: str) -> str:
    """The last part of a local path or URL."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def _is_dir(path: str) -> bool:
    import os

    if "://" not in path:
        return os.path.isdir(path)
    return FileSystems.exists(path.rstrip("/") + "/") and not FileSystems.exists(path)
