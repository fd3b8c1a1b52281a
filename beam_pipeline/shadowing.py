"""Start-up check: the working directory must not shadow this project's packages.

``python -m beam_pipeline`` puts the working directory first on ``sys.path``, so a folder
named ``trainer`` or ``transforms`` there (a package, or even a plain folder, which Python
takes as a namespace package before an editable install's finder is asked), or a
``trainer.py``, would be imported instead of this project's package of that name: the
user's code would run in its place and the CLI die later with an ImportError traceback.
:func:`check_shadowing` finds that out before anything imports them, from where Python's
import system *would* load each package (``importlib.util.find_spec``, which imports
nothing of a top-level name).

``beam_pipeline`` itself cannot be checked here: when a folder shadows it, Python runs
that folder instead of this code. The installed ``beam-pipeline`` command does not put
the working directory on ``sys.path`` and is not affected.

Example::

    check_shadowing()  # raises PipelineError naming the folder, before importing trainer
"""

from __future__ import annotations

import importlib.util
import os
from typing import Optional

from beam_pipeline.core.errors import PipelineError

__all__ = ["PACKAGES", "check_shadowing"]

# This project's top-level packages, installed side by side.
PACKAGES = ("beam_pipeline", "trainer", "transforms")


def _found_at(name: str) -> Optional[str]:
    """Where Python would import ``name`` from: its folder or file; None if nowhere."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package, regular or namespace
        return os.path.abspath(list(spec.submodule_search_locations)[0])
    return os.path.abspath(spec.origin) if spec.origin else None


def check_shadowing() -> None:
    """Refuses to start when another ``trainer``/``transforms`` would be imported than ours.

    Raises:
      PipelineError: one sentence naming the folder (or file) that shadows the package and
        the fix (run from another folder, or rename it).
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in PACKAGES:
        found = _found_at(name)
        ours = os.path.join(root, name)
        if found is None or os.path.realpath(found) == os.path.realpath(ours):
            continue
        raise PipelineError(
            f"{found} shadows beam-pipeline's own '{name}' package (python -m puts the "
            "working directory first on sys.path); run from another folder, rename that "
            "one, or run the installed beam-pipeline command instead of python -m."
        )
