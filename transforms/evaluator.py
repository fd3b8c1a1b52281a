"""Model evaluation as a Beam job: TensorFlow Model Analysis over serialized tf.Examples.

The Evaluator's data-parallel part. TFMA (the library TFX's Evaluator runs) does the work:
its extractors run the model on the workers (batched inference through the SavedModel's
signatures, the label computed by the model's ``preprocessing_function_names``), its
evaluators compute the sliced metrics and check the EvalConfig's value and change
thresholds, and its writers write the evaluation artifact that ``tfma.load_eval_result``
and ``tfma.load_validation_result`` read. Here: reading the examples as tfx-bsl Arrow
RecordBatches (as TFMA's own ``run_model_analysis`` does) and wiring those steps into the
caller's pipeline, so the evaluation runs on the run's runner like every other stage.

Example::

    with beam.Pipeline(options=options) as p:
        _ = p | "Evaluate" >> EvaluateModel(
            "run/examples/eval/*.tfrecord.gz", eval_config,
            candidate="run/model", baseline=None, output_path="run/.staging/evaluation-x")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import apache_beam as beam

if TYPE_CHECKING:
    from tensorflow_model_analysis.proto import config_pb2

__all__ = ["EvaluateModel", "CANDIDATE", "BASELINE"]

# TFMA's model names when a baseline is compared (its model_specs carry these names).
CANDIDATE = "candidate"
BASELINE = "baseline"


class EvaluateModel(beam.PTransform[beam.pvalue.PBegin, beam.pvalue.PDone]):
    """Reads tf.Examples, runs TFMA's extract-evaluate-write on them (one labelled step each).

    Args:
      file_pattern: the eval split's (gzip) TFRecord files of serialized tf.Examples.
      eval_config: a complete TFMA ``EvalConfig``; with a baseline its ``model_specs`` are
        named ``candidate`` and ``baseline`` (the baseline's ``is_baseline`` set).
      candidate: the candidate SavedModel folder.
      baseline: the baseline SavedModel folder, or None (no change thresholds then).
      output_path: where TFMA writes metrics, plots, validations and the config.
    """

    def __init__(
        self,
        file_pattern: str,
        eval_config: config_pb2.EvalConfig,
        *,
        candidate: str,
        baseline: Optional[str],
        output_path: str,
    ):
        super().__init__()
        import tensorflow_model_analysis as tfma

        self._file_pattern = file_pattern
        self._eval_config = eval_config
        self._output_path = output_path
        if baseline is None:
            # One model: TFMA matches the single model spec whatever its name.
            self._models = tfma.default_eval_shared_model(
                eval_saved_model_path=candidate, eval_config=eval_config
            )
        else:
            self._models = [
                tfma.default_eval_shared_model(
                    eval_saved_model_path=path, model_name=name, eval_config=eval_config
                )
                for name, path in ((CANDIDATE, candidate), (BASELINE, baseline))
            ]

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.PDone:
        import tensorflow_model_analysis as tfma
        from tfx_bsl.public import tfxio

        examples = tfxio.TFExampleRecord(
            file_pattern=self._file_pattern,
            raw_record_column_name=tfma.ARROW_INPUT_COLUMN,
            telemetry_descriptors=["beam_pipeline", "Evaluator"],
        )
        return (
            pbegin
            | "ReadExamples" >> examples.BeamSource()
            | "ExtractEvaluateAndWrite"
            >> tfma.ExtractEvaluateAndWriteResults(
                eval_config=self._eval_config,
                eval_shared_model=self._models,
                output_path=self._output_path,
            )
        )
