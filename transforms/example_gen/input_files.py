"""The input files of ``--data``: a file, a folder (its non-hidden files) or a glob.

Example::

    files = resolve_input_files("data/*.csv")   # sorted paths; errors name --data
"""

from __future__ import annotations

import datetime
import os
import re
from typing import NamedTuple, Optional

from beam_pipeline.core.errors import PipelineError

__all__ = [
    "SPAN",
    "VERSION",
    "SpanFiles",
    "basename",
    "has_span_spec",
    "resolve_input_files",
    "resolve_spans",
]

# Names (before the first dot, any case) of a folder's documentation files, never data.
_NOT_DATA = frozenset(
    ("readme", "license", "licence", "notice", "changelog", "changes", "copying", "authors")
)


def resolve_input_files(pattern: str, flag: str = "data") -> list[str]:
    """The input files of ``--data`` (or of the setting ``flag``, which errors name): a
    file, a folder (its non-hidden files) or a glob.

    Raises:
      PipelineError: nothing matches, or every match is empty.
    """
    if not pattern:
        raise PipelineError(f"--{flag} is empty; pass a CSV/TFRecord file, a folder or a glob.")
    glob, files, sizes = _listed(pattern, flag=flag)
    if not files:
        raise PipelineError(
            f"--{flag} {pattern!r} matches no file; pass an existing CSV/TFRecord file, folder "
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
                f"--{flag} folder {pattern} holds {basename(notes[0])}, which is not data but "
                "would be read as data; move it out of the folder or pass a glob of the data "
                f"files: --{flag} '{glob.rsplit('/', 1)[0]}/*{ending}'."
            )
    _check_not_empty(files, sizes, flag)
    return files


def _listed(
    pattern: str, glob: Optional[str] = None, flag: str = "data"
) -> tuple[str, list[str], dict[str, int]]:
    """The glob listed (``glob``; when None, ``pattern``, or its files when it names a
    folder), the files it matches (sorted, hidden ones and folders left out), and every
    match's size.

    Raises:
      PipelineError: the pattern cannot be listed (the folder probe included: a file system
        Beam has no client for, or cannot reach, fails there first).
    """
    try:
        if glob is None:
            folder = not any(ch in pattern for ch in "*?[") and _is_dir(pattern)
            glob = pattern.rstrip("/") + "/*" if folder else pattern
        matched = _match(glob)
    except Exception as e:  # noqa: BLE001  Beam raises a bare BeamIOError for no match
        raise PipelineError(
            f"--{flag} {pattern!r} cannot be listed ({e}); pass an existing file, folder or glob."
        ) from e
    files = sorted(
        path
        for path, _ in matched
        if not basename(path).startswith((".", "_")) and not _is_dir(path)
    )
    return glob, files, dict(matched)


# --data is a Beam glob (``**`` matches across folders, which tf.io.gfile's glob does not),
# read by Beam's IOs with Beam's FileSystems. A local one is matched here as Beam's
# LocalFileSystem matches it (FileSystem.match: the folder above the first wildcard walked,
# every path tested against translate_pattern's expression), without importing Beam, which
# a rerun that reuses every stage otherwise imports for this check alone (issue 45);
# tests/test_input_files.py compares the two. Other schemes (gs://...) are Beam's.


def _match(glob: str) -> list[tuple[str, int]]:
    """(path, size) of every file ``glob`` matches, as Beam's ``FileSystems.match``."""
    if "://" in glob:
        from apache_beam.io.filesystems import FileSystems

        return [(m.path, m.size_in_bytes) for m in FileSystems.match([glob])[0].metadata_list]
    if glob.endswith(("/", "\\")):
        glob += "*"
    prefix = re.match(r"^[^[*?]*", glob).group(0)
    if prefix == glob:  # no wildcard: the path itself
        return [(glob, os.path.getsize(glob))] if os.path.exists(glob) else []
    folder = os.path.dirname(prefix)
    if not os.path.exists(folder):
        return []
    matches = re.compile(_beam_glob_regex(glob)).match
    found = []
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            try:
                size = os.path.getsize(path)
            except OSError:  # gone since it was listed
                continue
            if matches(path):
                found.append((path, size))
    return found


def _beam_glob_regex(glob: str) -> str:
    """The regular expression of Beam's ``FileSystem.translate_pattern``: fnmatch's, except
    that ``*`` stays within a folder and ``**`` crosses folders."""
    i, n, out = 0, len(glob), ""
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if i < n and glob[i] == "*":
                out += ".*"
                i += 1
            else:
                out += r"[^/\\]*"
        elif c == "?":
            out += "."
        elif c == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out += r"\["
            else:
                chars = glob[i:j].replace("\\", "\\\\")
                i = j + 1
                if chars[0] == "!":
                    chars = "^" + chars[1:]
                elif chars[0] == "^":
                    chars = "\\" + chars
                out += f"[{chars}]"
        else:
            out += re.escape(c)
    return r"(?ms)" + out + r"\Z"


def _check_not_empty(files: list[str], sizes: dict[str, int], flag: str = "data") -> None:
    empty = [f for f in files if sizes.get(f) == 0]
    if empty:
        raise PipelineError(
            f"Input file {empty[0]} is empty; remove it from --{flag} or give it a header row "
            "and data."
        )


def basename(path: str) -> str:
    """The last part of a local path or URL."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def _is_dir(path: str) -> bool:
    if "://" not in path:
        return os.path.isdir(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path.rstrip("/") + "/") and not FileSystems.exists(path)


# --- spans: ``{SPAN}``, ``{VERSION}``, ``{YYYY}{MM}{DD}`` in --data, as TFX's ExampleGen ------

SPAN = "{SPAN}"
VERSION = "{VERSION}"
_DATE = ("{YYYY}", "{MM}", "{DD}")
# What each spec matches (TFX's: digits; a date's parts their fixed widths).
_SPEC_REGEX = {SPAN: r"(\d+)", VERSION: r"(\d+)", "{YYYY}": r"(\d{4})", "{MM}": r"(\d{2})"}
_SPEC_REGEX["{DD}"] = r"(\d{2})"
_SPECS = re.compile("|".join(re.escape(spec) for spec in _SPEC_REGEX))
_EPOCH = datetime.date(1970, 1, 1)
_WHAT = {SPAN: "spans", VERSION: "versions", "{YYYY}": "years", "{MM}": "months"}
_WHAT["{DD}"] = "days"


class SpanFiles(NamedTuple):
    """One span's input: its files (sorted) and the version read (None: no ``{VERSION}``)."""

    files: list[str]
    version: Optional[int] = None


def has_span_spec(pattern: str) -> bool:
    """Whether ``--data`` names spans (``{SPAN}`` or a ``{YYYY}{MM}{DD}`` date)."""
    return SPAN in pattern or any(spec in pattern for spec in _DATE)


def _check_specs(pattern: str) -> None:
    """TFX's rules for the specs of one pattern, as one-sentence errors."""
    dates = [spec for spec in _DATE if spec in pattern]
    if dates and len(dates) < len(_DATE):
        missing = "".join(spec for spec in _DATE if spec not in pattern)
        raise PipelineError(
            f"--data {pattern!r} has {''.join(dates)} but not {missing}; a date span needs "
            "{YYYY}, {MM} and {DD}."
        )
    if dates and SPAN in pattern:
        raise PipelineError(
            f"--data {pattern!r} has both {SPAN} and a date ({{YYYY}}{{MM}}{{DD}}); a span is "
            "one or the other, keep one."
        )
    if VERSION in pattern and not (dates or SPAN in pattern):
        raise PipelineError(
            f"--data {pattern!r} has {VERSION} but no {SPAN} or {{YYYY}}{{MM}}{{DD}}; a version "
            "is a version of a span, add one."
        )


def _span_of(pattern: str, path: str, values: dict[str, set[str]]) -> tuple[int, str]:
    """(the span number, its spelling) of a matched path: ``{SPAN}``'s number, or the days
    from 1970-01-01 to its date (TFX's span of a date)."""
    for spec, texts in values.items():
        if len({int(t) for t in texts}) > 1:
            raise PipelineError(
                f"--data {pattern!r}: {path} reads {_WHAT[spec]} {' and '.join(sorted(texts))} "
                f"in its {spec} places; one path must name one span and version."
            )
    if SPAN in values:
        text = min(values[SPAN])
        return int(text), text
    year, month, day = (min(values[spec]) for spec in _DATE)
    try:
        date = datetime.date(int(year), int(month), int(day))
    except ValueError:
        raise PipelineError(
            f"--data {pattern!r}: {path} reads the date {year}-{month}-{day}, which is not a "
            "date; rename the folder or file, or narrow the pattern."
        ) from None
    if date < _EPOCH:
        raise PipelineError(
            f"--data {pattern!r}: {path} reads the date {date}, before 1970-01-01 (span 0); "
            "rename it or narrow the pattern."
        )
    return (date - _EPOCH).days, f"{year}{month}{day}"


def resolve_spans(
    pattern: str, window: int = 1, span_range: Optional[tuple[int, int]] = None
) -> dict[int, SpanFiles]:
    """The files of the spans ``pattern`` selects: the ``window`` latest spans (default the
    latest one), or every span of ``span_range`` (both ends included).

    As TFX's ExampleGen ``input_config``: ``{SPAN}`` stands for a span number (digits);
    ``{YYYY}{MM}{DD}`` for a date, whose span is its number of days since 1970-01-01;
    ``{VERSION}`` (with one of them) for a version of a span, of which the latest is read.
    A spec may appear in a folder's name and a file's: each occurrence in one path must
    read the same number.

    Returns:
      span -> its files and version, in ascending span order.

    Raises:
      PipelineError: a bad pattern, no span matches, two spellings of one span or version
        (``span-1`` and ``span-01``), the occurrences of one path disagree, a date that is
        not one, or a span of the window or range is missing (a gap).
    """
    _check_specs(pattern)
    try:
        _, files, sizes = _listed(pattern, _SPECS.sub("*", pattern))
    except PipelineError:
        files, sizes = [], {}  # no match: said below, naming the spec
    specs: list[str] = []
    parts = []
    for piece in re.split(f"({_SPECS.pattern})", pattern):
        if piece in _SPEC_REGEX:
            specs.append(piece)
            parts.append(_SPEC_REGEX[piece])
        else:
            text = re.escape(piece).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
            parts.append(text.replace(r"\?", "[^/]"))
    regex = re.compile("".join(parts) + "$")
    spellings: dict[int, set[str]] = {}
    by_span: dict[int, dict[int, list[str]]] = {}
    version_spellings: dict[tuple[int, int], set[str]] = {}
    for path in files:
        found = regex.search(path)
        if found is None:
            continue  # the glob's * matched more than digits
        values: dict[str, set[str]] = {}
        for spec, text in zip(specs, found.groups(), strict=True):
            values.setdefault(spec, set()).add(text)
        span, text = _span_of(pattern, path, values)
        spellings.setdefault(span, set()).add(text)
        version = -1
        if VERSION in values:
            version_text = min(values[VERSION])
            version = int(version_text)
            version_spellings.setdefault((span, version), set()).add(version_text)
        by_span.setdefault(span, {}).setdefault(version, []).append(path)
    if not by_span:
        where = SPAN if SPAN in pattern else "{YYYY}{MM}{DD}"
        raise PipelineError(
            f"--data {pattern!r} matches no span: no file has digits where {where} is; check "
            "the pattern against the folders."
        )
    for span, texts in spellings.items():
        if len(texts) > 1:
            raise PipelineError(
                f"--data {pattern!r} has two matches for span {span} "
                f"({' and '.join(sorted(texts))}); keep one spelling of each span."
            )
    for (span, version), texts in version_spellings.items():
        if len(texts) > 1:
            raise PipelineError(
                f"--data {pattern!r} has two matches for version {version} of span {span} "
                f"({' and '.join(sorted(texts))}); keep one spelling of each version."
            )
    wanted = _wanted_spans(pattern, sorted(by_span), window, span_range)
    out = {}
    for span in wanted:
        version = max(by_span[span])  # TFX reads a span's latest version
        out[span] = SpanFiles(sorted(by_span[span][version]), None if version < 0 else version)
    # Every span's files, not only those read: an empty file is a broken upload, named
    # as --data without spans names it (it was taken for "no span" once).
    _check_not_empty([f for v in by_span.values() for fs in v.values() for f in fs], sizes)
    return out


def _wanted_spans(
    pattern: str, spans: list[int], window: int, span_range: Optional[tuple[int, int]]
) -> list[int]:
    """The spans of the window or range, from the sorted ``spans`` that exist.

    A range is never made into a list before it is checked against the spans that exist:
    ``--spans 0:2000000000`` is as cheap to refuse as ``--spans 0:3``.

    Raises:
      PipelineError: the window is wider than the spans there are, the range reaches past
        them, or a span inside it is missing (a gap).
    """
    if span_range is not None:
        first, last = span_range
        if first < spans[0] or last > spans[-1]:
            raise PipelineError(
                f"--spans={first}:{last} reaches past the spans --data {pattern!r} has "
                f"({_shown(spans)}); pass FIRST:LAST within them, e.g. "
                f"--spans={spans[0]}:{spans[-1]}."
            )
    else:
        if window > len(spans):
            raise PipelineError(
                f"--span_window {window} asks for {window} spans but --data {pattern!r} has "
                f"{len(spans)}; lower --span_window."
            )
        first, last = spans[-1] - window + 1, spans[-1]
    inside = [s for s in spans if first <= s <= last]
    if len(inside) < last - first + 1:
        missing = next(
            want for s, want in zip([*inside, None], range(first, last + 2)) if s != want
        )
        raise PipelineError(
            f"--data {pattern!r} has no span {missing} (spans found: {_shown(spans)}), a gap "
            f"in spans {first} to {last}; add it, or pick spans that exist with --spans A:B or "
            "--span_window."
        )
    return inside


def _shown(spans: list[int]) -> str:
    """The spans found, for a message: all of them, or the first and last few."""
    if len(spans) <= 12:
        return ", ".join(str(s) for s in spans)
    return ", ".join(str(s) for s in spans[:5]) + ", …, " + ", ".join(str(s) for s in spans[-5:])
