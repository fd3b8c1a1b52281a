"""The run's metadata store as a stage opens it (the baseline look-up, the warm start's
model, the previous run's statistics), by the run's own rule
(:func:`beam_pipeline.metadata.open_for_pipeline`).

Example::

    with open_store(ctx) as store:
        found = store.latest_blessed_model() if store is not None else None
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import StageContext
    from beam_pipeline.metadata import MetadataStore

__all__ = ["open_store"]


@contextlib.contextmanager
def open_store(ctx: StageContext) -> Iterator[Optional[MetadataStore]]:
    """The run's metadata store (as the run opened it), or None where the run has none (a
    remote pipeline root without ``--metadata_url``); closed on leaving."""
    # SQLAlchemy is imported when a stage runs, not when the stage graph is imported.
    from beam_pipeline.metadata import open_for_pipeline

    config = ctx.config
    store = open_for_pipeline(
        config.pipeline_root, config.metadata_url or None, pipeline_name=config.pipeline_name
    )
    if store is None:
        yield None
        return
    with store:
        yield store
