"""The Pusher's work (TFX's ``executor.py``): whether the model may be pushed (blessed by
the Evaluator and the InfraValidator), the copy
(:func:`beam_pipeline.stages.pusher.push.push_model`: ``<destination>/<version>/``, atomic)
and ``pushed_model/pushed.json``, whose artifact the runner records in the metadata store
with the push's destination and version.

Imported only when the stage runs: the declaration (``stage.py``) stays light for ``--help``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import (
    InfraBlessing,
    Model,
    ModelBlessing,
    PushedModel,
    TypedArtifact,
)
from beam_pipeline.engine.stage import Outputs, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.blessings import NO_LABEL_FIX

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage

__all__ = ["PUSHED_FILE", "run"]

PUSHED_FILE = "pushed.json"


def _why_not(inputs: Mapping[type[TypedArtifact], TypedArtifact], ctx: StageContext) -> str:
    """Why the model may not be pushed ('' when it may)."""
    blessing = inputs.get(ModelBlessing)
    if blessing is None and not ctx.config.evaluator.enabled:
        return "the Evaluator did not run (--no_evaluator)"
    if blessing is None:
        # The Evaluator's one other reason to skip a trained model (stages/evaluator/executor.py).
        return f"the Evaluator did not evaluate it: the model {NO_LABEL_FIX}"
    verdict = blessing.read()
    if verdict is None or not verdict.blessed:
        return f"the Evaluator did not bless it ({verdict.why() if verdict else 'no verdict'})"
    infra = inputs.get(InfraBlessing)
    if infra is None:
        return "the InfraValidator did not run (--no_infra_validator)"
    served = infra.read()
    if served is None or not served.blessed:
        problems = "; ".join(served.problems) if served else "no verdict"
        return f"the InfraValidator did not bless it ({problems})"
    return ""


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's run: Model + blessings -> PushedModel (a record of the push, or of why
    the model was not pushed)."""
    from beam_pipeline.stages.pusher.push import push_model

    destination = ctx.config.pusher.destination
    why_not = _why_not(inputs, ctx)
    record: dict[str, Any] = {"pushed": False, "destination": destination or None}
    if why_not:
        record["reason"] = why_not
        note = f"not pushed: {why_not}"
    elif not destination:
        record["reason"] = "no --push_destination"
        note = "blessed; not pushed: no --push_destination"
    else:
        model = inputs[Model]
        pushed = push_model(model.uri, destination)
        version = int(pushed.rstrip("/").rsplit("/", 1)[-1])
        record.update(pushed=True, uri=pushed, version=version)
        note = f"pushed to {pushed} (version {version})"
    fileio.write_file(fileio.join(out.folder(PushedModel), PUSHED_FILE), json.dumps(record))
    status = StageStatus.OK if record["pushed"] else StageStatus.SKIPPED
    report = StageReport(
        "Pusher", status, artifact=record.get("uri"), note=note, details=dict(record)
    )
    artifact = out.artifact(
        PushedModel,
        pushed=record["pushed"],
        destination=destination or None,
        version=record.get("version"),
    )
    return StageResult([report], outputs=(artifact,), outcome={"blessed": not why_not})
