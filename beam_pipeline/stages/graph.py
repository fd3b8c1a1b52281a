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

import importlib
import importlib.util
import os
import sys
from typing import Any

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.stage import Stage
from beam_pipeline.stages.bulk_inferrer.stage import BulkInferrerStage
from beam_pipeline.stages.evaluator.stage import EvaluatorStage
from beam_pipeline.stages.example_gen.stage import ExampleGenStage
from beam_pipeline.stages.infra_validator.stage import InfraValidatorStage
from beam_pipeline.stages.pusher.stage import PusherStage
from beam_pipeline.stages.schema.stage import SchemaStage
from beam_pipeline.stages.trainer.stage import TrainerStage
from beam_pipeline.stages.transform.stage import TransformStage
from beam_pipeline.stages.tuner.stage import TunerStage
from beam_pipeline.stages.validation.stage import ValidationStage

__all__ = ["STAGE_GRAPH", "load_graph"]

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


def load_graph(spec: str) -> tuple[Any, ...]:
    """``--graph FILE.py:NAME`` (or ``module:NAME``): a stage graph of the user's own (the
    bundled stages plus stages of theirs), as :data:`~beam_pipeline.stages.graph.STAGE_GRAPH`.

    Raises:
      PipelineError: the file or module cannot be loaded, or has no such sequence of stages.
    """
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise PipelineError(
            f"--graph {spec} is not FILE.py:NAME or module:NAME; pass e.g. "
            "--graph=my_stages.py:GRAPH."
        )
    try:
        if where.endswith(".py"):
            where = os.path.abspath(where)
            module_name = "beam_pipeline_graph_" + os.path.basename(where)[:-3]
            loaded = sys.modules.get(module_name)
            if loaded is not None and getattr(loaded, "__file__", None) == where:
                return _stages(loaded, spec, where, name)  # loaded once per process
            loader_spec = importlib.util.spec_from_file_location(module_name, where)
            if loader_spec is None or not os.path.isfile(where):
                raise FileNotFoundError(where)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # its stages' classes pickle by this name
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except (ImportError, OSError) as e:
        raise PipelineError(
            f"--graph {spec}: {where} cannot be loaded ({e}); pass an existing Python file "
            "or an importable module."
        ) from e
    return _stages(module, spec, where, name)


def _stages(module: Any, spec: str, where: str, name: str) -> tuple[Stage, ...]:
    graph = getattr(module, name, None)
    if not isinstance(graph, (list, tuple)) or not all(isinstance(s, Stage) for s in graph):
        raise PipelineError(
            f"--graph {spec}: {where} has no sequence of stages named {name}; define e.g. "
            f"{name} = (*STAGE_GRAPH, MyStage())."
        )
    return tuple(graph)
