"""Which stages a run will reuse, known before anything runs or is written.

The runner looks each stage up as its inputs become ready
(:mod:`beam_pipeline.engine.runner`). A stage's cache key depends only on the keys of the
stages it reads and on its own parameters, never on what a rerun of them makes, so the
same look-ups can be made at the start of the run, in graph order: :func:`reused_stages`.
The run uses the answer to start only what a stage that will run needs: a rerun that
reuses every stage loads no module file (no TensorFlow), starts no worker pool and no fork
server (:func:`beam_pipeline.pipeline.run`).

The look-ahead stops at the first stage that will run: what follows a rerun stage is not
known here. It also stops where a key needs the module's code and nothing is remembered of
it (:meth:`~beam_pipeline.engine.user_code.UserCode.look_ahead`), or where a key cannot be
made (a missing input, a look-up in the store that fails): the run then starts everything
as if every later stage ran, and the runner itself says why a stage cannot run.

Example::

    reused, every_stage = reused_stages(graph, ctx, lookup)
    if not every_stage:
        ...  # load the module, start the fork server
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.engine.execution import Execution, cache_key, output_key
from beam_pipeline.engine.reuse import reusable
from beam_pipeline.engine.runner import resolve
from beam_pipeline.engine.stage import Stage, StageContext

__all__ = ["reused_stages"]

_LOG = logging.getLogger(__name__)


def reused_stages(
    graph: Sequence[Stage],
    ctx: StageContext,
    lookup: Callable[[str, str], Optional[Execution]],
    stage_options: Optional[Mapping[str, Any]] = None,
) -> tuple[frozenset[str], bool]:
    """The stages of ``graph`` (in dependency order) that an earlier execution will serve,
    up to the first that will run, and whether that is every stage.

    Args:
      graph: the run's stages.
      ctx: the run's context, its ``user_code`` a look-ahead view (nothing loaded).
      lookup: an earlier execution of a stage with a key, or None (read only).
      stage_options: a stage's own Beam options (``--stage_beam_args``), as the runner
        gives them.
    """
    stage_options = stage_options or {}
    available: dict[Any, tuple[Any, str]] = {}
    reused: list[str] = []
    for stage in graph:
        own = dataclasses.replace(
            ctx, options=stage_options.get(stage.name, ctx.options), stage=stage.name
        )
        try:
            _, built_from = resolve(stage, own, available)
            key = cache_key(stage.name, built_from)
            execution, _ = reusable(lookup(stage.name, key))
        except Exception as e:  # noqa: BLE001 - the runner meets it again and says why
            _LOG.info("Looking ahead stopped at %s (it is assumed to run): %r", stage.name, e)
            return frozenset(reused), False
        if execution is None:
            return frozenset(reused), False
        reused.append(stage.name)
        for artifact in execution.outputs:
            available[type(artifact)] = (artifact, output_key(key, artifact))
    return frozenset(reused), True
