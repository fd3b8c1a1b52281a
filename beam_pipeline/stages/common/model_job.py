"""The launcher's half of :class:`trainer.job.ModelJob`: its fields from the config and run dir.

The Trainer and Tuner stages read the same inputs (:data:`MODEL_INPUTS`) and build their
jobs (``TrainingJob``, ``TuningJob``) from the same fields: the module file and its text
(read from the run's staged copy when there is one), the Transform stage's artifacts,
``--custom_config`` and the entry point; each stage adds its own folders and step counts.

Example::

    job = TuningJob(**model_job_fields(config, run_dir, "tuner", module_file, staged=staged),
                    tuner_dir=staging, train_steps=20, eval_steps=5)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import (
    ModelInputs,
    Schema,
    TransformedExamples,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.engine.stage import Input

if TYPE_CHECKING:  # for annotations only: staging a module imports zipfile
    from beam_pipeline.core.module_staging import StagedModule
    from beam_pipeline.engine.run_dir import RunDirectory

__all__ = ["MODEL_INPUTS", "model_inputs", "model_job_fields", "parse_custom_config"]

# The model stages read Transform's two outputs (one producing stage, so one key) and the
# schema, whose key the transform graph's already holds.
MODEL_INPUTS = (
    Input(TransformGraph, key="transform"),
    Input(TransformedExamples, key="transform"),
)


def model_inputs(inputs: Mapping[type[TypedArtifact], TypedArtifact]) -> ModelInputs:
    """The model stages' inputs as the jobs' :class:`ModelInputs`."""
    return ModelInputs(inputs[TransformGraph], inputs[TransformedExamples], inputs.get(Schema))


def model_job_fields(
    run_dir: RunDirectory,
    stage: str,
    module_file: str,
    *,
    custom_config: str,
    mixed_precision: bool,
    entry_point: Optional[str] = None,
    staged: Optional[StagedModule] = None,
    inputs: Optional[ModelInputs] = None,
) -> dict[str, Any]:
    """The :class:`trainer.job.ModelJob` fields of a run's model job, all but the step counts.

    Args:
      run_dir: the run directory holding the Transform stage's artifacts.
      stage: the stage asking ("trainer", "tuner"), named in errors.
      module_file: the module file.
      custom_config: ``--custom_config``, JSON text (the Trainer's setting).
      mixed_precision: ``--mixed_precision`` (the Trainer's setting).
      entry_point: the run_fn-like function or TrainSpec class to use.
      staged: the module file and its folder as staged in the run directory, which the
        workers load (None: they load ``module_file`` itself).
      inputs: the Transform stage's outputs and the schema (default: those published in
        ``run_dir``).

    Raises:
      PipelineError: a missing artifact or a bad --custom_config.
    """
    fields = (inputs or ModelInputs.in_run(run_dir)).job_fields(stage)
    parsed = parse_custom_config(custom_config)
    with fileio.open(staged.path if staged else module_file) as f:
        module_source = f.read()
    return dict(
        module_file=module_file,
        module_source=module_source,
        **fields,
        custom_config=parsed,
        entry_point=entry_point,
        staged=staged,
        mixed_precision=mixed_precision,
    )


def parse_custom_config(text: str) -> dict[str, Any]:
    """``--custom_config`` text -> the dict ``fn_args.custom_config`` receives.

    Raises:
      PipelineError: the text is not JSON, or not a JSON object.
    """
    try:
        parsed = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise PipelineError(
            f"--custom_config is not valid JSON ({e.msg} at column {e.colno}); pass a JSON "
            "object such as '{\"epochs\": 3}'."
        ) from None
    if not isinstance(parsed, dict):
        raise PipelineError(
            f"--custom_config is a JSON {type(parsed).__name__}, not an object; pass a JSON "
            "object such as '{\"epochs\": 3}'."
        )
    return parsed
