"""A stage's unexpected error, ended like any other: one sentence, exit 2.

The runner (:mod:`beam_pipeline.engine.runner`) raises what a stage raised. A user error
(a :class:`PipelineError`, or one :func:`~beam_pipeline.core.errors.user_error` words: a
full disk, the user's code raising on a worker) reaches the CLI as it always did; any
other exception of any stage (a bug here or in a library, TFMA refusing a label) becomes
one sentence naming the stage and the root of the error, with the traceback in the run's
log, so that the run ends with exit 2, its summary and its report written, whichever
stage raised it.

Example::

    error = unexpected_error(stage, ctx, ValueError("label must be within [0, 1]"))
    str(error)  # "Evaluator stopped on an unexpected error (ValueError: label must ..."
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core.errors import PipelineError, first_line, user_error

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage, StageContext

__all__ = ["unexpected_error"]

# The longest part of an unexpected error's message quoted in its sentence.
_MAX_QUOTE = 300


def is_interrupt(error: BaseException) -> bool:
    """Whether ``error`` is a Ctrl-C (or a stop signal the CLI raises as one), also when
    re-raised wrapped: Beam's DoFn invoker re-raises a KeyboardInterrupt without arguments
    as a RuntimeError ("KeyboardInterrupt [while running 'X']") chained to it."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt) or str(error).startswith("KeyboardInterrupt"):
            return True
        error = error.__cause__ or error.__context__
    return False


def unexpected_error(
    stage: Stage, ctx: StageContext, error: BaseException
) -> Optional[PipelineError]:
    """The sentence the run raises for a stage's unexpected error (a bug here or in a
    library: TFMA refusing a label, say), its traceback kept in the run's log; None for a
    user error (a :class:`PipelineError`, or one that
    :func:`~beam_pipeline.core.errors.user_error` finds, which the CLI words as before) and
    for an interrupt. So every stage's failure ends the same way (exit 2, the summary and
    the report written), whichever stage raised it."""
    if not isinstance(error, Exception) or isinstance(error, PipelineError) or is_interrupt(error):
        return None
    root = ctx.config.pipeline_root if ctx.config is not None else None
    if root is not None and user_error(error, root) is not None:
        return None
    # Beam and TFMA wrap a worker's error (once as the cause, once while handling it):
    # the root of the chain says what happened.
    cause, seen = error, {id(error)}
    while True:
        found = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
        if found is None or id(found) in seen:
            break
        cause = found
        seen.add(id(found))
    quoted = f"{type(cause).__name__}: {_STEP_TEXT.sub('', first_line(cause)).strip()}"
    if len(quoted) > _MAX_QUOTE:
        quoted = quoted[: _MAX_QUOTE - 3] + "..."
    name = stage.name.split("+", 1)[0]
    run_id = ctx.run_dir.run_id if ctx.run_dir is not None else None
    resume = f" with --run_id={run_id}" if run_id else ""
    sentence = PipelineError(
        f"{name} stopped on an unexpected error ({quoted}); its traceback is in the run's "
        "full log: fix the input it names if that is the cause, else report it as a bug "
        f"with that log; then rerun{resume} to resume."
    )
    sentence.__cause__ = error
    return sentence


# Beam's in-process runner appends the step it ran to an error it re-raises.
_STEP_TEXT = re.compile(r" ?\[while running '[^']*'\]")
