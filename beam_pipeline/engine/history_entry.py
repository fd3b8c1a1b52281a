"""What one execution of a stage shows in the run history (``runs list|show|diff``).

A stage says it with :meth:`beam_pipeline.engine.stage.Stage.history`, from its summary
rows; the runner keeps the answer as JSON with the execution (its ``history`` property in
the metadata store), and :mod:`beam_pipeline.history` draws what is kept, stage by stage in
the order they ran, without importing any stage: the ``runs`` commands stay as fast as the
store is to read, and a stage of a user's own shows in them like a bundled one.

Example (a stage that counts examples and shows the count as a ``runs list`` column)::

    def history(self, reports):
        return HistoryEntry(columns={"counted": reports[0].details.get("total")})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

__all__ = ["HISTORY", "HISTORY_COLUMNS", "HistoryEntry", "declared_columns"]

# The execution property holding its :meth:`HistoryEntry.to_json`, and the run property
# holding its graph's declared columns (:func:`declared_columns`).
HISTORY = "history"
HISTORY_COLUMNS = "history_columns"


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """What an execution contributes to the run history; every part is optional.

    Attributes:
      columns: name -> JSON value: a column each of ``runs list`` (a mapping is shown as
        ``key=value`` lines, a boolean as yes/no, None as ``-``), and a key each of its
        ``--json`` rows and of ``runs show --json``.
      facts: name -> JSON value: keys of the run's ``--json`` row that are no column.
      lines: sentences ``runs show`` prints under the run's first line.
      verdict: the stage is a model check: a row of ``runs show``'s "Model checks" (its
        status and note are its first summary row's), and these keys in its ``--json``;
        a ``failures`` list of missed thresholds (``metric``, ``slice``, ``value``,
        ``bound``, ``by``) is also drawn as "Failed thresholds". None: no check.
      compared: section -> (name -> JSON value): ``runs diff`` shows each section of the
        two runs key by key (a model's ``metrics``, a search's best ``hyperparameters``).
    """

    columns: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    lines: Sequence[str] = ()
    verdict: Optional[Mapping[str, Any]] = None
    compared: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as kept with the execution (its empty parts left out)."""
        kept: dict[str, Any] = {}
        for name in ("columns", "facts", "compared"):
            if getattr(self, name):
                kept[name] = dict(getattr(self, name))
        if self.lines:
            kept["lines"] = list(self.lines)
        if self.verdict is not None:
            kept["verdict"] = dict(self.verdict)
        return kept


def declared_columns(graph: Sequence[Any]) -> dict[str, Any]:
    """The ``runs list`` columns the stages of ``graph`` declare
    (:attr:`~beam_pipeline.engine.stage.Stage.history_columns`), in the graph's order, each
    with its value where its stage recorded none; kept with the run as it starts."""
    return {name: empty for stage in graph for name, empty in stage.history_columns.items()}
