"""The Transform stage: tf.Transform analyzes the train split and transforms every split.

One Beam job (inside a ``tft_beam.Context``) writes the transform graph and the transformed
examples; tf.Transform's analyzer cache, shared by the runs under one pipeline root and
keyed by the examples' content fingerprint, lets a rerun on the same data skip the
analysis. The raw data's metadata is written beside the graph, as TFX's Transform does.

Example::

    p = create_pipeline(options)
    build_transform_pipeline(p, examples, schema, preprocessing_fn, module_path,
                             fingerprint, cache_dir, graph_dir, examples_dir)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, transform_error
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import (
    Examples,
    Schema,
    TransformedExamples,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

if TYPE_CHECKING:
    import apache_beam as beam

__all__ = ["TransformConfig", "build_transform_pipeline", "TransformStage"]


def build_transform_pipeline(
    p: beam.Pipeline,
    examples: Mapping[Split, str],
    schema,
    preprocessing_fn: Callable,
    module_path: str,
    fingerprint: str,
    cache_dir: Optional[str],
    graph_dir: str,
    examples_dir: str,
) -> None:
    """Wires the Transform phase into ``p`` without running it (inside a tft_beam.Context).

    Args:
      p: the pipeline to add the steps to.
      examples: split -> file pattern of the data phase's examples.
      schema: the raw data schema.
      preprocessing_fn: the module's tf.Transform function.
      module_path: the module file (for messages).
      fingerprint: the data fingerprint keying the analyzer cache.
      cache_dir: the analyzer cache folder, or None.
      graph_dir / examples_dir: where the transform graph and transformed examples go.

    Raises:
      PipelineError: ``preprocessing_fn`` raised while tf.Transform traced it.
    """
    import tensorflow_transform.beam as tft_beam

    from transforms.transform import TransformExamples, WriteTransformedExamples

    transform = TransformExamples(examples, schema, preprocessing_fn, cache_dir, fingerprint)
    try:
        result = p | "Transform" >> transform
    except Exception as e:  # noqa: BLE001  tf.Transform traces the user's function here
        raise PipelineError(
            f"preprocessing_fn in {module_path} raised {type(e).__name__}: {e}; fix the "
            "function (its inputs are the features of schema.pbtxt, optional ones as "
            "SparseTensor)."
        ) from e
    _ = result.transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(graph_dir)
    for split in examples:
        _ = result.transformed[split] | f"Write[{split.value}]" >> WriteTransformedExamples(
            examples_dir, split
        )
    if result.analyzer_cache is not None:
        _ = result.analyzer_cache | "WriteCache" >> tft_beam.analyzer_cache.WriteAnalysisCacheToFS(
            p, cache_dir
        )


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """tf.Transform settings."""

    analyzer_cache: bool = setting(
        True,
        flag="analyzer_cache",
        help="Do not reuse or write tf.Transform's analyzer cache.",
        kind="switch",
    )


class TransformStage(Stage):
    """Examples + Schema -> TransformGraph + TransformedExamples (needs a module file)."""

    name = "Transform"
    Config = TransformConfig
    config_key = "transform"
    in_run_identity = True
    worker_modules = ("transforms.transform",)
    inputs = (Input(Examples, key="examples"), Input(Schema, key="schema"))
    outputs = (TransformGraph, TransformedExamples)

    def parameters(self, ctx: StageContext) -> dict:
        # Only the code preprocessing_fn runs: a changed run_fn does not rerun Transform.
        return {"preprocessing_fn": ctx.transform_code}

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        if ctx.preprocessing_fn is None:
            # Nothing to transform, so nothing later can run either.
            report = StageReport("Transform", StageStatus.SKIPPED, note="no --module_file")
            return StageResult([report], halt=True)
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

        from beam_pipeline.runtime.jobs import announce_job, counter, job_note
        from beam_pipeline.runtime.options import create_pipeline, run_pipeline
        from beam_pipeline.runtime.runners import wait_for_job
        from beam_pipeline.stages.common.schema_file import read_schema
        from transforms.transform import dataset_cache_key

        config, run_dir = ctx.config, ctx.run_dir
        examples = inputs[Examples]
        splits = examples.split_names
        fingerprint = examples.properties["fingerprint"]
        schema = read_schema(inputs[Schema].file)
        graph_tmp = out.folder(TransformGraph)
        examples_tmp = out.folder(TransformedExamples)
        cache = None
        if config.transform.analyzer_cache:
            from beam_pipeline.stages.transform.analyzer_cache import AnalyzerCache

            cache = AnalyzerCache(
                run_dir.cache_path("transform"), dataset_cache_key(fingerprint).key
            )
        try:
            # The job reads and writes a private copy of the cache entry, published only
            # when the job succeeded: a killed job never leaves a partial one to be read.
            cache_dir = cache.open() if cache is not None else None
            with tft_beam.Context(temp_dir=fileio.join(run_dir.root, ".staging", "tft-tmp")):
                p = create_pipeline(ctx.options)
                build_transform_pipeline(
                    p,
                    {s: examples.file_pattern(s) for s in splits},
                    schema,
                    ctx.preprocessing_fn,
                    config.module_file,
                    fingerprint,
                    cache_dir,
                    graph_tmp,
                    examples_tmp,
                )
                beam_result = run_pipeline(p, "Transform", config.worker_start_timeout)
                announce_job(ctx, beam_result)
                job = wait_for_job(beam_result, ctx.options, "Transform")
            if cache is not None:
                cache.publish()
            # The raw data's metadata beside the graph, as TFX's Transform writes it, so
            # tft.TFTransformOutput(...).raw_feature_spec() works for ported module files.
            metadata_io.write_metadata(
                dataset_metadata.DatasetMetadata(schema), fileio.join(graph_tmp, "metadata")
            )
        except BaseException as e:
            if cache is not None:
                cache.discard()
            # An op of preprocessing_fn that failed on the data, on any runner: one sentence
            # naming the module file and TensorFlow's message, not Beam's traceback.
            error = transform_error(e, config.module_file)
            if error is not None:
                raise error from None
            raise
        rows = {s.value: counter(beam_result, f"transform.rows_out.{s.value}") for s in splits}
        cache_note = "off"
        if cache is not None:
            if not cache.before:
                cache_note = f"written to {cache.cache_dir}"
            elif not cache.after or cache.after == cache.before:
                cache_note = "reused (no analyzer recomputed)"
            else:
                cache_note = f"partly reused ({len(cache.after - cache.before)} entries added)"
            if cache.removed:
                cache_note = f"{cache_note} (a damaged entry removed: {cache.removed})"
        graph = out.artifact(TransformGraph)
        transformed = out.artifact(
            TransformedExamples, split_names=[s.value for s in splits], rows=rows
        )
        note = (
            f"transformed examples in {transformed.uri}",
            f"analyzer cache {cache_note}",
            job_note(job),
        )
        report = StageReport(
            "Transform",
            StageStatus.OK,
            {},
            rows,
            0,
            0.0,
            graph.uri,
            "; ".join(n for n in note if n),
            details={"analyzer_cache": cache_note, "job": job.to_json()},
        )
        return StageResult([report], outputs=(graph, transformed))
