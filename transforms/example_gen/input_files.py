"""The input files of ``--data``: a file, a folder (its non-hidden files) or a glob.

Example::

    files = resolve_input_files("data/*.csv")   # sorted paths; errors name --data
"""

from __future__ import annotations

from typing import Optional

# Beam's FileSystems, not beam_pipeline.core.fileio (tf.io.gfile): --data is a Beam glob
# (``**`` matches across folders, which gfile's glob does not), and one Beam listing gives
# every match's size, where gfile needs a call per file; Beam's IOs read the same patterns.
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.core.errors import PipelineError

__all__ = ["SPAN", "basename", "resolve_input_files", "resolve_spans"]

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


# --- spans: ``{SPAN}`` in --data, as TFX's ExampleGen input_config ------------------------

SPAN = "{SPAN}"


def resolve_spans(
    pattern: str, window: int = 1, span_range: Optional[tuple[int, int]] = None
) -> dict[int, list[str]]:
    """The files of the spans ``pattern`` selects: the ``window`` latest spans (default the
    latest one), or every span of ``span_range`` (both ends included).

    ``{SPAN}`` stands for a span number (digits) wherever it appears in the pattern, a
    folder's name or a file's; each occurrence of one path must read the same number.

    Returns:
      span -> its files (sorted), in ascending span order.

    Raises:
      PipelineError: no span matches, two spellings of one span (``span-1`` and
        ``span-01``), the occurrences of one path disagree, or a span of the window or
        range is missing (a gap).
    """
    import re

    try:
        files = resolve_input_files(pattern.replace(SPAN, "*"))
    except PipelineError:
        files = []
    parts = [re.escape(p).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
             for p in pattern.split(SPAN)]  # fmt: skip
    regex = re.compile("(\\d+)".join(parts) + "$")
    spans: dict[int, set[str]] = {}
    by_span: dict[int, list[str]] = {}
    for path in files:
        found = regex.search(path)
        if found is None:
            continue  # the glob's * matched more than digits
        numbers = set(found.groups())
        if len({int(n) for n in numbers}) > 1:
            raise PipelineError(
                f"--data {pattern!r}: {path} reads spans {' and '.join(sorted(numbers))} in "
                "its {SPAN} places; one path must name one span."
            )
        text = found.group(1)
        spans.setdefault(int(text), set()).add(text)
        by_span.setdefault(int(text), []).append(path)
    if not by_span:
        raise PipelineError(
            f"--data {pattern!r} matches no span: no file has digits where {SPAN} is; check "
            "the pattern against the folders."
        )
    for span, texts in spans.items():
        if len(texts) > 1:
            raise PipelineError(
                f"--data {pattern!r} has two matches for span {span} "
                f"({' and '.join(sorted(texts))}); keep one spelling of each span."
            )
    if span_range is not None:
        wanted = list(range(span_range[0], span_range[1] + 1))
    else:
        latest = max(by_span)
        wanted = list(range(latest - window + 1, latest + 1))
    missing = [s for s in wanted if s not in by_span]
    if span_range is None and wanted[0] < min(by_span):
        raise PipelineError(
            f"--span_window {window} asks for {window} spans but --data {pattern!r} has "
            f"{len(by_span)}; lower --span_window."
        )
    if missing:
        have = ", ".join(str(s) for s in sorted(by_span))
        raise PipelineError(
            f"--data {pattern!r} has no span {missing[0]} (spans found: {have}), a gap in "
            f"spans {wanted[0]} to {wanted[-1]}; add it, or pick spans that exist with "
            "--spans A:B or --span_window."
        )
    return {s: sorted(by_span[s]) for s in wanted}
