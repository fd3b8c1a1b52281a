"""The model checks' shared pieces: why a model was not evaluated, and each check's
verdict as the run history shows it.

The blessings read and write themselves
(:class:`~beam_pipeline.engine.artifacts.ModelBlessing`,
:class:`~beam_pipeline.engine.artifacts.InfraBlessing`).

Example::

    verdict(reports, "pushed")   # {"blessed": True, "failures": [], "pushed": True}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from beam_pipeline.engine.summary import StageReport

__all__ = ["NO_LABEL_FIX", "verdict"]

# Why the Evaluator skips a trained model, and the fix (the Pusher's note repeats it).
NO_LABEL_FIX = (
    "records no label; pass --eval_config (a TFMA EvalConfig naming model_specs.label_key) "
    "to evaluate and bless it"
)


def verdict(reports: Sequence[StageReport], *also: str) -> Optional[dict[str, Any]]:
    """A model check's verdict as the run history shows it (its
    :attr:`~beam_pipeline.engine.history_entry.HistoryEntry.verdict`): whether its first
    summary row blessed the model (None: it did not decide), the thresholds it missed,
    and the details ``also`` names; None without a row."""
    if not reports:
        return None
    details = reports[0].details
    found = {"blessed": details.get("blessed"), "failures": list(details.get("failures") or [])}
    found.update({name: details.get(name) for name in also})
    return found
