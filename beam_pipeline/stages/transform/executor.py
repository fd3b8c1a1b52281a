"""The Transform stage's work: tf.Transform analyzes the train split and transforms every split.

One Beam job (inside a ``tft_beam.Context``) writes the transform graph and the transformed
examples; tf.Transform's analyzer cache, shared by the runs under one pipeline root and
keyed by the examples' content fingerprint, lets a rerun on the same data skip the
analysis. With a ``{SPAN}`` input the cache has one dataset key per span (TFX's Transform
keys it per input the same way): a window that moved by a span analyzes the new span only.
The raw data's metadata is written beside the graph, as TFX's Transform does.

Example::

    p = create_pipeline(options)
    build_transform_pipeline(p, examples, schema, preprocessing_fn, module_path,
                             fingerprint, cache_dir, graph_dir, examples_dir)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, transform_error
from beam_pipeline.core.launcher_exit import exit_refused
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import (
    Examples,
    Schema,
    TransformedExamples,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.engine.stage import Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

if TYPE_CHECKING:
    import apache_beam as beam

    from beam_pipeline.stages.transform.analyzer_cache import AnalyzerCache

__all__ = ["build_transform_pipeline", "run", "span_datasets"]


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
    train_datasets: Optional[Mapping[str, str]] = None,
) -> str:
    """Wires the Transform phase into ``p`` without running it (inside a tft_beam.Context).

    Returns the job's spill folder (the decoded train split, :class:`TransformExamples`),
    to delete when the job has ended.

    Args:
      p: the pipeline to add the steps to.
      examples: split -> file pattern of the data phase's examples.
      schema: the raw data schema.
      preprocessing_fn: the module's tf.Transform function.
      module_path: the module file (for messages).
      fingerprint: the data fingerprint keying the analyzer cache.
      cache_dir: the analyzer cache folder, or None.
      graph_dir / examples_dir: where the transform graph and transformed examples go.
      train_datasets: with a ``{SPAN}`` input, each span's analyzer-cache dataset key ->
        its train examples (:func:`span_datasets`).

    Raises:
      PipelineError: ``preprocessing_fn`` raised while tf.Transform traced it.
    """
    import tensorflow_transform.beam as tft_beam

    from transforms.transform import TransformExamples, WriteTransformedExamples

    transform = TransformExamples(
        examples, schema, preprocessing_fn, cache_dir, fingerprint, train_datasets=train_datasets
    )
    # tf.Transform traces the user's function here, in the launcher.
    with exit_refused(
        f"preprocessing_fn in {module_path}, traced by tf.Transform,",
        "remove that call (the function returns its outputs; raise an exception to stop)",
    ):
        try:
            result = p | "Transform" >> transform
        except PipelineError:
            raise
        except Exception as e:  # noqa: BLE001  an error of the user's function
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
    return transform.spill_dir


def span_datasets(examples: Examples) -> dict[str, str]:
    """With a ``{SPAN}`` input: one analyzer-cache dataset key per span (its number and
    its content key, ``stages.common.span_cache``) -> the span's train examples; else {}."""
    keys = examples.properties.get("span_keys") or {}
    return {
        f"span{span}-{key[:16]}": fileio.join(
            examples.uri, Split.TRAIN.value, f"span-{span}-*.tfrecord.gz"
        )
        for span, key in sorted(keys.items(), key=lambda item: int(item[0]))
    }


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's ``run`` hook: the Transform job, its analyzer cache and its report."""
    if ctx.preprocessing_fn is None:
        # Nothing to transform, so nothing later can run either.
        report = StageReport("Transform", StageStatus.SKIPPED, note="no --module_file")
        return StageResult([report], halt=True)
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    from beam_pipeline.runtime.jobs import announce_job, counter, job_note
    from beam_pipeline.runtime.options import create_pipeline, run_pipeline
    from beam_pipeline.runtime.runners import wait_for_job
    from transforms.transform import dataset_cache_key

    config, run_dir = ctx.config, ctx.run_dir
    examples = inputs[Examples]
    splits = examples.split_names
    fingerprint = examples.properties["fingerprint"]
    schema = inputs[Schema].read()
    graph_tmp = out.folder(TransformGraph)
    examples_tmp = out.folder(TransformedExamples)
    datasets = span_datasets(examples)
    cache = None
    if config.transform.analyzer_cache:
        from beam_pipeline.stages.transform.analyzer_cache import AnalyzerCache

        cache = AnalyzerCache(
            run_dir.cache_path("transform"),
            list(datasets) or [dataset_cache_key(fingerprint).key],
        )
    spill_dir = None
    try:
        # The job reads and writes a private copy of the cache entry, published only
        # when the job succeeded: a killed job never leaves a partial one to be read.
        cache_dir = cache.open() if cache is not None else None
        with tft_beam.Context(temp_dir=fileio.join(run_dir.root, ".staging", "tft-tmp")):
            p = create_pipeline(ctx.options)
            spill_dir = build_transform_pipeline(
                p,
                {s: examples.file_pattern(s) for s in splits},
                schema,
                ctx.preprocessing_fn,
                config.module_file,
                fingerprint,
                cache_dir,
                graph_tmp,
                examples_tmp,
                datasets,
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
    finally:
        # The decoded train split, as large as the data: now, not with the rest of
        # .staging when the run ends, after the training.
        if spill_dir is not None:
            run_dir.discard(spill_dir)
    rows = {s.value: counter(beam_result, f"transform.rows_out.{s.value}") for s in splits}
    cache_note = "off"
    details: dict = {}
    if cache is not None and datasets:
        cache_note, details = _span_cache_note(cache, datasets)
    elif cache is not None:
        (key,) = cache.keys
        before, after = cache.before.get(key), cache.after.get(key)
        if not before and not after:
            cache_note = _NOTHING_CACHED
        elif not before:
            cache_note = f"written to {cache.cache_dir}"
        elif cache.reused(key):
            cache_note = "reused (no analyzer recomputed)"
        else:
            cache_note = f"partly reused ({len(after - before)} entries added)"
    reused = cache is not None and all(map(cache.reused, cache.keys))
    if reused and not _has_analyzers(ctx.preprocessing_fn, schema):
        # Every entry the job left as it was served the analyzers, or a preprocessing_fn
        # without any (the entries are another module's): their files cannot tell, a
        # trace can.
        cache_note, details = _NOTHING_CACHED, dict.fromkeys(details, [])
    if cache is not None and cache.removed:
        removed = "; ".join(cache.removed.values())
        cache_note = f"{cache_note} (a damaged entry removed: {removed})"
    graph = out.artifact(TransformGraph)
    transformed = out.artifact(
        TransformedExamples, split_names=[s.value for s in splits], rows=rows
    )
    shown = cache_note
    if "reused" in cache_note and "Transform" in config.no_cache:
        # --no_cache reruns the stage; the analyzer cache is tf.Transform's own, with its
        # own switch: said, so that "reused" after --no_cache is not read as a stage reused.
        shown += "; --no_cache reran Transform, not its analyzers: --no_analyzer_cache does"
    note = (
        f"transformed examples in {transformed.uri}",
        f"analyzer cache {shown}",
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
        details={"analyzer_cache": cache_note, **details, "job": job.to_json()},
    )
    return StageResult([report], outputs=(graph, transformed))


# A preprocessing_fn without analyzers: tf.Transform writes no cache entry.
_NOTHING_CACHED = "unused: the preprocessing_fn has no analyzers"


def _has_analyzers(preprocessing_fn: Callable, schema) -> bool:
    """Whether ``preprocessing_fn`` calls a tf.Transform analyzer (one more trace of it, as
    ``tft.get_analyze_input_columns`` makes; that function's answer, the analyzers' input
    columns, would be empty for an analyzer of constants)."""
    from tensorflow_transform import analyzer_nodes, impl_helper
    from tfx_bsl.public import tfxio

    specs = tfxio.TFExampleRecord("unused", schema=schema).TensorAdapter().OriginalTypeSpecs()
    graph, _, _ = impl_helper.trace_preprocessing_function(
        preprocessing_fn, specs, use_tf_compat_v1=False
    )
    return bool(graph.get_collection(analyzer_nodes.TENSOR_REPLACEMENTS))


def _span_cache_note(cache: AnalyzerCache, datasets: Mapping[str, str]) -> tuple[str, dict]:
    """The analyzer cache's note with one dataset per span: the spans whose entries the job
    added files to were analyzed; those whose entry it left as it was were reused. Read
    from the entries themselves, not from the spans tf.Transform planned to read: with
    every span's analyzers cached it still reads the newest span (and computes nothing),
    and without analyzers it reads every span and caches nothing."""
    from beam_pipeline.stages.common.span_cache import span_label

    def span(key: str) -> int:
        return int(key[len("span") :].split("-", 1)[0])

    reused = [span(k) for k in datasets if cache.reused(k)]
    computed = [span(k) for k in datasets if cache.after.get(k, frozenset()) - cache.before[k]]
    parts = []
    if reused:
        parts.append(f"{span_label(reused)} reused (not analyzed again)")
    if computed:
        parts.append(f"{span_label(computed)} analyzed and written to {cache.cache_dir}")
    details = {"analyzer_cache_spans_reused": reused, "analyzer_cache_spans_analyzed": computed}
    return "; ".join(parts) or _NOTHING_CACHED, details
