"""The BulkInferrer's artifact types, apart from the declaration so that its executor (which
writes them) need not import the declaration that imports it."""

from __future__ import annotations

from beam_pipeline.engine.artifacts import TypedArtifact

__all__ = ["InferenceResult", "InferredExamples", "InferenceRejectedRows"]


class InferenceResult(TypedArtifact):
    """The BulkInferrer's PredictionLog TFRecords, ``prediction_logs-*.gz`` (TFX's
    ``InferenceResult``); properties ``rows`` (scored), ``model`` (the model's folder)."""

    FOLDER = "inference_result"


class InferredExamples(TypedArtifact):
    """The scored examples with each prediction output joined as a feature
    ``prediction_<output>`` (TFX's ``output_example_spec``), ``examples-*.tfrecord.gz``."""

    FOLDER = "inferred_examples"


class InferenceRejectedRows(TypedArtifact):
    """The rows the BulkInferrer could not score, one JSON object per row (file, line,
    reason), as ExampleGen's rejected rows; property ``rows``."""

    FOLDER = "inference_rejected"
