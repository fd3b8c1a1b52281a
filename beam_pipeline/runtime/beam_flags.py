"""The run's Beam flags, read without importing Beam while the run may still do nothing.

Importing Beam costs about a CPU second and a half, most of a rerun that reuses every stage
(issue 45), and such a rerun needs nothing of Beam: its checks only ask which runner and
which DirectRunner mode the flags name. So where every Beam flag given is one of
:data:`_LIGHT` (``--runner=DirectRunner``, ``--direct_running_mode=in_memory``,
``--direct_num_workers=2``) in the ``--flag=value`` form, with a value Beam takes
(:func:`light_values`), the run holds :class:`DeferredOptions`: :func:`option`,
:func:`is_direct` and :func:`is_multi_processing` answer from the flags themselves, and
Beam's ``PipelineOptions`` are built (by
:func:`beam_pipeline.runtime.options.parse_beam_args`) only when something asks them for
more; the stage runner hands a stage that runs the built options (:func:`resolved`). Any
other flag, or another spelling, goes through Beam's own parser at once, so a flag is
refused exactly as strictly either way: what is read here is only what Beam accepts.
Nothing here imports Beam or :mod:`beam_pipeline.runtime.options` (which imports this).

Example::

    given = light_values(["--runner=DirectRunner"])    # {"runner": "DirectRunner"}
    options = DeferredOptions(["--runner=DirectRunner"], given, parse_beam_args)
    is_direct(options)                                 # True; Beam not imported
    options.view_as(po.DirectOptions)                  # Beam's options, built once
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

__all__ = [
    "DIRECT_NAMES",
    "DeferredOptions",
    "is_direct",
    "is_multi_processing",
    "light_values",
    "option",
    "resolved",
]

# The runner names that mean Beam's DirectRunner (what is_direct answers True for).
DIRECT_NAMES = frozenset({None, "", "DirectRunner", "direct", "SwitchingDirectRunner"})


def _direct_runner(value: str) -> str:
    if value not in DIRECT_NAMES:
        raise ValueError(value)  # another runner: Beam checks it (check_runner)
    return value


def _mode(value: str) -> str:
    # Beam's choices, less multi_threading, which parse_beam_args refuses with a sentence.
    if value not in ("in_memory", "multi_processing"):
        raise ValueError(value)
    return value


# Beam options the launcher reads before it knows whether anything will run:
# name -> (Beam's options class, the check of a value given on the command line as Beam's
# parser makes it, or None where a given value is left to Beam; Beam's default).
# tests/test_beam_flags.py compares every entry with Beam's own parser.
_LIGHT: dict[str, tuple[str, Optional[Callable[[str], Any]], Any]] = {
    "runner": ("StandardOptions", _direct_runner, None),
    "direct_running_mode": ("DirectOptions", _mode, "in_memory"),
    "direct_num_workers": ("DirectOptions", int, 1),
    "environment_type": ("PortableOptions", None, None),
    "environment_config": ("PortableOptions", None, None),
    "job_endpoint": ("PortableOptions", None, None),
    "sdk_container_image": ("WorkerOptions", None, None),
    "dry_run": ("TestOptions", None, False),
}


def light_values(args: Sequence[str]) -> Optional[dict[str, Any]]:
    """The values of ``args`` when each is ``--name=value`` with a name of :data:`_LIGHT`
    that has a check and a value it passes (later flags win, as in Beam's parser); None
    otherwise (Beam's parser must read them)."""
    given: dict[str, Any] = {}
    for arg in args:
        if not arg.startswith("--") or "=" not in arg:
            return None
        name, value = arg[2:].split("=", 1)
        check = _LIGHT.get(name, (None, None, None))[1]
        if check is None:
            return None
        try:
            given[name] = check(value)
        except ValueError:
            return None
    return given


_OWN = frozenset({"_args", "_given", "_build", "_lock", "_built"})


class DeferredOptions:
    """Beam's ``PipelineOptions`` of flags :func:`light_values` reads, built on first use.

    :func:`option` answers the options of :data:`_LIGHT` without building them; anything
    else (``view_as``, ``get_all_options``, a copy) builds them once with ``build``
    (:func:`beam_pipeline.runtime.options.parse_beam_args`) and asks them.

    Args:
      args: the Beam flags.
      given: what :func:`light_values` read of them (not None).
      build: makes Beam's options of ``args``.
    """

    def __init__(
        self, args: Sequence[str], given: dict[str, Any], build: Callable[[Sequence[str]], Any]
    ) -> None:
        self._args = tuple(args)
        self._given = dict(given)
        self._build = build
        self._lock = threading.Lock()  # stages on threads may ask at once
        self._built: Any = None

    @property
    def built(self) -> bool:
        """Whether Beam's options have been built (Beam imported) for these flags."""
        return self._built is not None

    def get(self, name: str) -> Any:
        """A :data:`_LIGHT` option's value: the flag's, else Beam's default."""
        return self._given.get(name, _LIGHT[name][2])

    def options(self):
        """Beam's ``PipelineOptions`` of these flags (built once)."""
        with self._lock:
            if self._built is None:
                self._built = self._build(self._args)
            return self._built

    def view_as(self, cls):
        return self.options().view_as(cls)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in _OWN:  # copy's and pickle's probes; __init__'s
            raise AttributeError(name)
        return getattr(self.options(), name)

    def __deepcopy__(self, memo):
        import copy

        return copy.deepcopy(self.options(), memo)

    def __reduce__(self):
        return (DeferredOptions, (self._args, self._given, self._build))

    def __repr__(self) -> str:
        return f"DeferredOptions({list(self._args)!r})"


def resolved(options):
    """Beam's own ``PipelineOptions`` for ``options`` (built if they are deferred)."""
    return options.options() if isinstance(options, DeferredOptions) else options


def option(options, view: str, name: str) -> Any:
    """``options.view_as(<Beam's options class view>).<name>``, without Beam for the
    options of :data:`_LIGHT` while ``options`` are deferred."""
    if isinstance(options, DeferredOptions) and name in _LIGHT and not options.built:
        return options.get(name)
    from apache_beam.options import pipeline_options as po

    return getattr(options.view_as(getattr(po, view)), name, None)


def is_direct(options) -> bool:
    """Whether ``options`` run on Beam's DirectRunner."""
    return option(options, "StandardOptions", "runner") in DIRECT_NAMES


def is_multi_processing(options) -> bool:
    """Whether ``options`` run on the DirectRunner's worker processes (multi_processing)."""
    mode = option(options, "DirectOptions", "direct_running_mode")
    return is_direct(options) and mode == "multi_processing"
