"""The stage graph: every stage of a run, in dependency order.

Adding a stage is one module (a :class:`beam_pipeline.engine.stage.Stage` subclass declaring
its inputs, outputs and parameters) and one line here, after the stages whose outputs it
reads. The runner (:func:`beam_pipeline.engine.runner.run_stages`) hands each stage the
artifacts of the earlier ones by type, and starts each as soon as the stages it reads have
ended: stages that do not read each other's outputs (the Evaluator and the
InfraValidator) run at the same time. The order here is the tie-break (which starts first,
the summary's order) and the order of the stages whose check may stop the run (Schema,
Validation, Pusher: every later stage waits for them).
"""

from __future__ import annotations

from beam_pipeline.engine.stage import Stage
from beam_pipeline.stages.bulk_inferrer import BulkInferrerStage
from beam_pipeline.stages.evaluator.stage import EvaluatorStage
from beam_pipeline.stages.example_gen import ExampleGenStage
from beam_pipeline.stages.infra_validator.stage import InfraValidatorStage
from beam_pipeline.stages.pusher.stage import PusherStage
from beam_pipeline.stages.schema.stage import SchemaStage
from beam_pipeline.stages.trainer.stage import TrainerStage
from beam_pipeline.stages.transform.stage import TransformStage
from beam_pipeline.stages.tuner.stage import TunerStage
from beam_pipeline.stages.validation.stage import ValidationStage

__all__ = ["STAGE_GRAPH"]

STAGE_GRAPH: tuple[Stage, ...] = (
    ExampleGenStage(),  # input files -> Examples, RejectedRows, Statistics
    SchemaStage(),  # Statistics -> Schema
    ValidationStage(),  # Statistics, Schema -> Anomalies (may stop the run)
    TransformStage(),  # Examples, Schema -> TransformGraph, TransformedExamples
    TunerStage(),  # TransformGraph, TransformedExamples, Schema -> Hyperparameters
    TrainerStage(),  # TransformGraph, TransformedExamples, Schema, Hyperparameters -> Model
    EvaluatorStage(),  # Model, Examples, Schema -> ModelEvaluation, ModelBlessing
    InfraValidatorStage(),  # Model, Examples -> InfraBlessing (+ the model's warm-up file)
    PusherStage(),  # Model, ModelBlessing, InfraBlessing -> PushedModel
    BulkInferrerStage(),  # Model, ModelBlessing, Schema, --infer_data -> InferenceResult
)
