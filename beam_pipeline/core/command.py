"""The command's name as the user typed it, for usage lines and messages that quote it."""

from __future__ import annotations

import os
import sys

__all__ = ["command_name"]


def command_name() -> str:
    """How the user ran us: ``beam-pipeline`` (the installed command) or ``python -m
    beam_pipeline``, for the usage line and the messages that quote a command."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "beam-pipeline":
        return "beam-pipeline"
    return "python -m beam_pipeline"
