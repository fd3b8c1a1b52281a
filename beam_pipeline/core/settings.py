"""Settings: a config dataclass field that carries its own flag, help, YAML key and parser.

A stage's Config (and the run's own :class:`~beam_pipeline.config.PipelineConfig`) declares
each setting once, as a field made by :func:`setting`. The command line's flags, the YAML
keys of ``--config``, ``--help`` with its defaults, the check of paths remote workers must
reach, the run's identity and the flag reference in the docs are all read from these
declarations (:mod:`beam_pipeline.flags`), so a setting is never written twice.

Example::

    @dataclasses.dataclass(frozen=True)
    class PusherConfig:
        destination: str = setting(
            "", flag="push_destination", help="Folder or gs:// path for <version>/ folders.",
            path=True,
        )

    for name, s in settings_of(PusherConfig):   # ('destination', Setting(flag=...))
        ...
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

__all__ = [
    "Setting",
    "setting",
    "settings_of",
    "field_default",
    "expected_type",
    "type_name",
    "SETTING",
]

# The key of a field's metadata that holds its Setting.
SETTING = "beam_pipeline.setting"


@dataclasses.dataclass(frozen=True)
class Setting:
    """How one config field is set from the command line and a YAML file.

    Attributes:
      flag: the flag's name without ``--``; also the YAML key.
      help: one line for ``--help`` (the default is appended from the field).
      kind: how the flag reads its value: ``str``, ``int``, ``float``, ``switch`` (a
        boolean: ``--flag`` when the default is False, ``--no_<flag>`` when it is True),
        ``choice`` (one of ``choices``), ``list`` (comma-separated, a YAML list too),
        ``optional`` (``--flag`` alone means ``const``), ``append`` (repeatable), or
        ``yaml`` (a YAML mapping only, no flag).
      parse: turns the flag's text (or the YAML value) into the field's value and checks
        it; raises PipelineError with the fix. None: the ``kind``'s own conversion.
      choices: the allowed values of a ``choice``.
      const: the value of an ``optional`` flag given without one.
      path: a local path in a YAML file is read relative to the file.
      worker_path: a path the Beam workers read: a remote runner's workers cannot reach a
        local one, which is refused before the run starts.
      identity: part of the run's identity (a rerun with another value is another run);
        False for settings that change no result (a timeout).
      digest: ``file`` or ``folder``: the run's identity holds the content digest of the
        path, not only the path.
      secret_keys: a JSON object whose secret-looking keys' values are masked wherever the
        setting is recorded (:func:`beam_pipeline.core.secrets.mask_json`).
      metavar: the value's name in ``--help``.
      keywords: values of a path setting that name no path (``blessed``).
      takes: what a YAML file or the Python API may give besides the ``kind``'s own type
        (:func:`expected_type`), e.g. ``dict`` for ``train: 2`` mappings that ``parse``
        reads.
    """

    flag: str
    help: str
    kind: str = "str"
    parse: Optional[Callable[[Any], Any]] = None
    choices: tuple[str, ...] = ()
    const: Any = None
    path: bool = False
    worker_path: bool = False
    identity: bool = True
    digest: Optional[str] = None
    secret_keys: bool = False
    metavar: Optional[str] = None
    keywords: tuple[str, ...] = ()
    takes: tuple[type, ...] = ()


# What each kind of setting takes from a YAML file or the Python API: (types, the words
# that say so). A flag's text is the kind's too (a number's text is converted); a switch
# takes only true/false: the text "false" would be truthy.
_TAKES: dict[str, tuple[tuple[type, ...], str]] = {
    "switch": ((bool,), "true or false"),
    "int": ((int, str), "a whole number"),
    "float": ((int, float, str), "a number"),
    "str": ((str, os.PathLike), "text"),
    "choice": ((str, enum.Enum), "one of {choices}"),
    "list": ((str, list, tuple), "text or a list of text"),
}


def type_name(value: Any) -> str:
    """How a value's type is named to a user (``text``, ``a number``, ``a list``)."""
    if value is None:
        return "no value"
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


# What YAML reads from an unquoted scalar meant as text: a number, a date.
_YAML_SCALARS_NOT_TEXT = (int, float, datetime.date)


def expected_type(s: Setting, value: Any, optional: bool = False, yaml: bool = False) -> str:
    """What setting ``s`` takes when ``value`` is not of that type, else "".

    The one check of a setting's type, from its declaration (its ``kind``, ``takes`` and
    whether the field is Optional), for the command line, ``--config`` and the Python API
    alike; ranges are checked by the Config dataclasses themselves. ``yaml``: the value is
    a YAML file's, and the fix says how to write it there.

    Example::

        expected_type(Setting("tuner", "", kind="switch"), "no")
        # 'text; it takes true or false'
    """
    if s.kind not in _TAKES or (value is None and optional):
        return ""  # optional/append/yaml settings: their own parser checks the value
    types, words = _TAKES[s.kind]
    ok = isinstance(value, types + s.takes) and not (
        isinstance(value, bool) and bool not in types + s.takes
    )
    if ok and s.kind == "list" and isinstance(value, (list, tuple)):
        ok = all(isinstance(v, str) for v in value)
    if ok and s.kind == "choice" and s.parse is None and value not in s.choices:
        ok = False  # (a choice's own parser names its choices itself)
    if ok:
        return ""
    words = words.format(choices=", ".join(s.choices))
    if yaml and s.kind == "switch" and isinstance(value, str):
        words += ", unquoted"
    elif yaml and s.kind in ("str", "choice", "list") and isinstance(value, _YAML_SCALARS_NOT_TEXT):
        # A number or a date YAML read where text was meant ("run_id: 20240101"): quoting it
        # is the fix. Not for a setting that takes no text: quoting would not help there.
        words += ", quoted"
    return f"{type_name(value)}; it takes {words}"


def setting(
    default: Any = dataclasses.MISSING,
    *,
    flag: str,
    help: str,  # noqa: A002 - argparse's word for it
    default_factory: Any = dataclasses.MISSING,
    **options: Any,
) -> Any:
    """A dataclass field declared as a setting (see :class:`Setting` for ``options``)."""
    meta = {SETTING: Setting(flag=flag, help=help, **options)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def settings_of(cls: type, section: str = "") -> Iterator[tuple[str, Setting]]:
    """(field name, Setting) of each field of the dataclass ``cls`` declared a setting;
    ``section``: the config key ``cls`` is the section of, the flag of a setting declared
    without one (a stage's switch, ``--no_<section>``)."""
    for f in dataclasses.fields(cls):
        s = f.metadata.get(SETTING)
        if s is not None:
            yield f.name, s if s.flag or not section else dataclasses.replace(s, flag=section)


def field_default(cls: type, name: str) -> Any:
    """The default value of field ``name`` of the dataclass ``cls``."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None
