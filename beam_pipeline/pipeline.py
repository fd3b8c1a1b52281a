"""The stage graph: checks, the data phase, the Transform phase, tuning and training.

A run has phases because tf.Transform must know the schema when it builds its graph:

1. *Data phase*, one Beam job: ExampleGen (read, type, split, write examples, reject bad
   rows) fused with Statistics (a streaming combine over the same RecordBatches, so the
   data is read once). Then, on the launcher (small protos): Schema inference and
   Validation of every split against the schema.
2. *Transform phase*, one Beam job: tf.Transform analyze (train) + transform (all splits).
3. *Model phase*: tuning and training, each a Beam job whose heavy work runs on workers.

Everything a run needs is checked before the first Beam job starts (flags, input files,
CSV header, module file, schema), and every artifact is published atomically. A rerun
with the same run id resumes: the stages an earlier attempt finished are kept, the rest
run (see :mod:`beam_pipeline.manifest`); one with other inputs or flags is refused.

Example::

    summary = run(parse_config(["--data=data.csv", "--module_file=m.py"]))
    print(summary.format())
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import TestOptions

from beam_pipeline.beam_options import create_pipeline, is_direct, parse_beam_args, run_pipeline
from beam_pipeline.config import PipelineConfig
from beam_pipeline.core.errors import EXIT_ANOMALIES, PipelineError, transform_error
from beam_pipeline.core.module_staging import StagedModule, bundle_module_file
from beam_pipeline.core.types import Artifact, DataFormat, Split
from beam_pipeline.core.user_module import get_preprocessing_fn
from beam_pipeline.fingerprint import file_digest, files_digest, json_digest
from beam_pipeline.manifest import RunManifest, Stage, run_identity, stage_key
from beam_pipeline.remote import JobInfo, check_remote_paths, wait_for_job
from beam_pipeline.run_dir import RunDirectory
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.runtime.preflight import start_worker_pool_check
from beam_pipeline.summary import RunSummary, StageReport, StageStatus, write_summary
from beam_pipeline.training_stage import run_training_stage
from beam_pipeline.tuning_stage import BEST_HYPERPARAMETERS_FILE, run_tuning_stage
from trainer import load_trainer_module
from transforms import example_gen as eg
from transforms.metrics import NAMESPACE

__all__ = ["run", "DataInputs", "build_data_pipeline", "build_transform_pipeline"]

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DataInputs:
    """The checked inputs of the data phase.

    Attributes:
      files: per split source (None = hash split), the input files.
      data_format: CSV or TFRecord.
      header: the CSV header (empty for TFRecord).
      fingerprint: a digest of the input files' content (not their paths or times) and of
        every setting that shapes the examples; the analyzer cache's dataset key.
    """

    files: tuple[tuple[Optional[Split], tuple[str, ...]], ...]
    data_format: DataFormat
    header: tuple[str, ...]
    fingerprint: str


def _check_data(config: PipelineConfig, csv_format: eg.CsvFormat) -> DataInputs:
    d = config.data
    if d.input_splits:
        # DataConfig checked that a train split is named.
        sources = tuple((split, tuple(eg.resolve_input_files(p))) for split, p in d.input_splits)
    else:
        sources = ((None, tuple(eg.resolve_input_files(d.data))),)
    all_files = [f for _, fs in sources for f in fs]
    data_format = eg.detect_format(all_files, d.data_format)
    header = eg.FORMATS[data_format].read_columns(all_files, eg.ReadSettings(csv=csv_format))
    # The content, not the files' names, sizes or times (see beam_pipeline.fingerprint);
    # with every setting that shapes the examples, its paths replaced by their content.
    settings = dataclasses.replace(
        d,
        data="",
        input_splits=tuple((split, "") for split, _ in d.input_splits),
        schema=file_digest(d.schema) if d.schema else None,
        ignore_anomalies=False,
    )
    fingerprint = json_digest(
        {
            "content": [
                [split.value if split else "", files_digest(files)] for split, files in sources
            ],
            "settings": repr(settings),
        }
    )
    return DataInputs(sources, data_format, header, fingerprint)


def _counter(result, name: str) -> int:
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))
    return int(sum(c.committed or 0 for c in found["counters"]))


def build_data_pipeline(
    p: beam.Pipeline,
    config: PipelineConfig,
    inputs: DataInputs,
    csv_format: eg.CsvFormat,
    user_schema,
    staging: Mapping[Artifact, str],
) -> None:
    """Wires the data phase (ExampleGen + Statistics) into ``p`` without running it.

    The orchestrator runs what this builds; tests build it on Dataflow with ``--dry_run``.

    Args:
      p: the pipeline to add the steps to.
      config: the run's configuration.
      inputs: the checked inputs.
      csv_format: delimiter and null values of CSV input.
      user_schema: the ``--schema`` proto, or None.
      staging: the staging folders of EXAMPLES, REJECTED and STATISTICS.
    """
    from transforms.statistics import GenerateStatistics, write_statistics

    splits = config.data.splits
    stats_path = {
        s: FileSystems.join(staging[Artifact.STATISTICS], s.value, "FeatureStats.pb")
        for s in splits
    }
    input_format = eg.FORMATS[inputs.data_format]
    settings = eg.ReadSettings(csv=csv_format, schema=user_schema)
    batch_sets, rejected_sets = [], []
    for split, files in inputs.files:
        splitter = eg.HashSplitter(
            buckets=config.data.split_buckets,
            partition_feature=config.data.partition_feature,
            fixed_split=split,
        )
        label = f"ExampleGen[{split.value}]" if split else "ExampleGen"
        result = p | label >> input_format.read(files, inputs.header, splitter, settings)
        batch_sets.append(result.batches)
        rejected_sets.append(result.rejected)
    batches = tuple(batch_sets) | "AllBatches" >> beam.Flatten()
    rejected = tuple(rejected_sets) | "AllRejected" >> beam.Flatten()
    _ = batches | "WriteExamples" >> eg.WriteSplitExamples(staging[Artifact.EXAMPLES], splits)
    _ = rejected | "WriteRejected" >> eg.WriteRejectedRows(staging[Artifact.REJECTED])
    for split in splits:
        _ = (
            batches
            | f"Select[{split.value}]"
            >> beam.FlatMap(lambda sb, s: [sb.batch] if sb.split is s else [], split)
            | f"Statistics[{split.value}]" >> GenerateStatistics(split.value)
            | f"WriteStatistics[{split.value}]" >> beam.Map(write_statistics, stats_path[split])
        )


def _job_note(job: JobInfo) -> str:
    """The job id and link for a stage's note; empty for a run on this machine."""
    if not job.job_id and not job.url and not job.note.startswith("dry run"):
        return ""
    text = f"{job.runner} job {job.job_id}" if job.job_id else job.runner
    return text + (f": {job.url}" if job.url else "") + (f" ({job.note})" if job.note else "")


def _run_data_phase(
    config: PipelineConfig,
    inputs: DataInputs,
    csv_format: eg.CsvFormat,
    user_schema,
    run_dir: RunDirectory,
    options,
    summary: RunSummary,
) -> Optional[dict]:
    """ExampleGen + Statistics in one Beam job; returns split -> statistics proto.

    Returns None on a ``--dry_run``: the job graph is built and nothing runs.
    """
    from transforms.statistics import read_statistics

    splits = config.data.splits
    staging = {
        a: run_dir.new_staging(a)
        for a in (Artifact.EXAMPLES, Artifact.REJECTED, Artifact.STATISTICS)
    }
    started = time.time()
    try:
        p = create_pipeline(options)
        build_data_pipeline(p, config, inputs, csv_format, user_schema, staging)
        result = run_pipeline(p, "ExampleGen+Statistics", config.worker_start_timeout)
        job = wait_for_job(result, options, "ExampleGen+Statistics")
    except BaseException:
        for path in staging.values():
            run_dir.discard(path)
        raise
    if options.view_as(TestOptions).dry_run:
        for path in staging.values():
            run_dir.discard(path)
        summary.stages.append(
            StageReport(
                "ExampleGen",
                StageStatus.SKIPPED,
                note=_job_note(job),
                details={"job": job.to_json()},
            )
        )
        return None
    seconds = time.time() - started
    read = _counter(result, "example_gen.rows_read")
    rejected_n = _counter(result, "example_gen.rows_rejected")
    out = {s.value: _counter(result, f"example_gen.rows_out.{s.value}") for s in splits}
    if read != sum(out.values()) + rejected_n:
        raise RuntimeError(f"ExampleGen lost rows: read {read}, wrote {out}, rejected {rejected_n}")
    rejected_dir = run_dir.publish(Artifact.REJECTED, staging[Artifact.REJECTED])
    fraction = rejected_n / read if read else 0.0
    if read == 0 or fraction > config.data.max_rejected_fraction:
        for a in (Artifact.EXAMPLES, Artifact.STATISTICS):
            run_dir.discard(staging[a])
        summary.stages.append(
            StageReport(
                "ExampleGen",
                StageStatus.FAILED,
                {"all": read},
                out,
                rejected_n,
                seconds,
                rejected_dir,
            )
        )
        if read == 0:
            raise PipelineError(
                f"--data {config.data.data} holds no data rows; add rows below the header."
            )
        first = _first_rejected(rejected_dir)
        raise PipelineError(
            f"{rejected_n} of {read} input rows ({fraction:.2%}) were rejected, more than "
            f"--max_rejected_fraction={config.data.max_rejected_fraction} (first: {first}); fix "
            f"those rows (all listed in {rejected_dir}) or raise --max_rejected_fraction."
        )
    examples_dir = run_dir.publish(Artifact.EXAMPLES, staging[Artifact.EXAMPLES])
    stats_dir = run_dir.publish(Artifact.STATISTICS, staging[Artifact.STATISTICS])
    note = f"{rejected_n} rejected rows listed in {rejected_dir}" if rejected_n else ""
    note = "; ".join(n for n in (note, _job_note(job)) if n)
    summary.stages.append(
        StageReport(
            "ExampleGen",
            StageStatus.OK,
            {"all": read},
            out,
            rejected_n,
            seconds,
            examples_dir,
            note,
            details={"job": job.to_json()},
        )
    )
    summary.stages.append(
        StageReport(
            "Statistics",
            StageStatus.OK,
            out,
            {},
            0,
            0.0,
            stats_dir,
            "computed in ExampleGen's Beam job (same pass over the data)",
        )
    )
    return {
        s: read_statistics(run_dir.path(Artifact.STATISTICS, s.value, "FeatureStats.pb"))
        for s in splits
    }


def _first_rejected(rejected_dir: str) -> str:
    """The rejected row with the smallest (file, line), as 'file:line reason'."""
    first = None
    for m in FileSystems.match([FileSystems.join(rejected_dir, "rejected-*")])[0].metadata_list:
        with FileSystems.open(m.path) as f:
            for line in f:
                row = json.loads(line)
                key = (row["file"], row["line"])
                if first is None or key < first[0]:
                    first = (key, row["reason"])
    return f"{first[0][0]}:{first[0][1]} {first[1]}" if first else "none"


def _run_schema(config, stats, user_schema, run_dir, summary):
    from beam_pipeline.schema_gen import infer_schema, write_schema

    started = time.time()
    if user_schema is not None:
        schema, how = user_schema, f"from --schema {config.data.schema}"
    else:
        schema = infer_schema(
            stats[Split.TRAIN],
            infer_feature_shape=config.data.infer_feature_shape,
            max_string_domain_size=config.data.max_string_domain_size,
        )
        how = "inferred from the train statistics"
    with run_dir.stage(Artifact.SCHEMA) as tmp:
        write_schema(schema, FileSystems.join(tmp, "schema.pbtxt"))
    summary.stages.append(
        StageReport(
            "Schema",
            StageStatus.OK,
            seconds=time.time() - started,
            artifact=run_dir.path(Artifact.SCHEMA, "schema.pbtxt"),
            note=f"{len(schema.feature)} features, {how}",
        )
    )
    return schema


def _run_validation(config, stats, schema, run_dir, summary) -> Optional[str]:
    """Validates every split; returns the blocking-anomalies error message, or None.

    The caller raises it (exit code 3) unless ``--ignore_anomalies``; it is returned, not
    raised, so that the finished stage can be recorded for a resume first.
    """
    from beam_pipeline.anomalies import blocking_anomalies, format_anomalies, is_blocking
    from beam_pipeline.validation import validate_statistics

    started = time.time()
    texts, by_split = [], {}
    with run_dir.stage(Artifact.ANOMALIES) as tmp:
        for split, split_stats in stats.items():
            baseline = stats[Split.TRAIN] if split is not Split.TRAIN else None
            anomalies = validate_statistics(split_stats, schema, baseline_stats=baseline)
            by_split[split.value] = anomalies
            path = FileSystems.join(tmp, split.value, "SchemaDiff.pb")
            FileSystems.mkdirs(FileSystems.join(tmp, split.value))
            with FileSystems.create(path) as f:
                f.write(anomalies.SerializeToString())
            texts.append(format_anomalies(split.value, anomalies))
        text = "\n".join(t for t in texts if t.strip())
        with FileSystems.create(FileSystems.join(tmp, "summary.txt")) as f:
            f.write((text or "no anomalies").encode("utf-8") + b"\n")
    artifact = run_dir.path(Artifact.ANOMALIES)
    blocking = any(is_blocking(a) for a in by_split.values())
    status = StageStatus.FAILED if blocking and not config.data.ignore_anomalies else StageStatus.OK
    summary.stages.append(
        StageReport(
            "Validation",
            status,
            seconds=time.time() - started,
            artifact=artifact,
            note=text.replace("\n", "; ") or "no anomalies",
        )
    )
    if not blocking:
        return None
    return (
        f"Validation found blocking anomalies in {blocking_anomalies(by_split)} (details in "
        f"{artifact}/summary.txt); fix the data or the --schema, or pass --ignore_anomalies "
        "to go on."
    )


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


def _run_transform(
    config, inputs, preprocessing_fn, module_path, schema, run_dir, options, summary
):
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    from transforms.transform import dataset_cache_key

    splits = config.data.splits
    graph_tmp = run_dir.new_staging(Artifact.TRANSFORM_GRAPH)
    examples_tmp = run_dir.new_staging(Artifact.TRANSFORMED_EXAMPLES)
    cache_dir = run_dir.cache_path("transform") if config.transform.analyzer_cache else None
    cache_before = _cache_entries(cache_dir, dataset_cache_key(inputs.fingerprint).key)
    started = time.time()
    try:
        with tft_beam.Context(temp_dir=FileSystems.join(run_dir.root, ".staging", "tft-tmp")):
            p = create_pipeline(options)
            examples = {
                s: run_dir.path(Artifact.EXAMPLES, s.value, "*.tfrecord.gz") for s in splits
            }
            build_transform_pipeline(
                p,
                examples,
                schema,
                preprocessing_fn,
                module_path,
                inputs.fingerprint,
                cache_dir,
                graph_tmp,
                examples_tmp,
            )
            beam_result = run_pipeline(p, "Transform", config.worker_start_timeout)
            job = wait_for_job(beam_result, options, "Transform")
        # The raw data's metadata beside the graph, as TFX's Transform writes it, so
        # tft.TFTransformOutput(...).raw_feature_spec() works for ported module files.
        metadata_io.write_metadata(
            dataset_metadata.DatasetMetadata(schema), FileSystems.join(graph_tmp, "metadata")
        )
    except BaseException as e:
        run_dir.discard(graph_tmp)
        run_dir.discard(examples_tmp)
        # An op of preprocessing_fn that failed on the data, on any runner: one sentence
        # naming the module file and TensorFlow's message, not Beam's traceback.
        error = transform_error(e, config.module_file or module_path)
        if error is not None:
            raise error from None
        raise
    graph_dir = run_dir.publish(Artifact.TRANSFORM_GRAPH, graph_tmp)
    run_dir.publish(Artifact.TRANSFORMED_EXAMPLES, examples_tmp)
    out = {s.value: _counter(beam_result, f"transform.rows_out.{s.value}") for s in splits}
    cache_note = "off"
    if cache_dir is not None:
        cache_after = _cache_entries(cache_dir, dataset_cache_key(inputs.fingerprint).key)
        if not cache_before:
            cache_note = f"written to {cache_dir}"
        elif cache_after == cache_before:
            cache_note = "reused (no analyzer recomputed)"
        else:
            cache_note = f"partly reused ({len(cache_after - cache_before)} entries added)"
    summary.stages.append(
        StageReport(
            "Transform",
            StageStatus.OK,
            {},
            out,
            0,
            time.time() - started,
            graph_dir,
            "; ".join(
                n
                for n in (
                    f"transformed examples in {run_dir.path(Artifact.TRANSFORMED_EXAMPLES)}",
                    f"analyzer cache {cache_note}",
                    _job_note(job),
                )
                if n
            ),
            details={"analyzer_cache": cache_note, "job": job.to_json()},
        )
    )


def _cache_entries(cache_dir: Optional[str], key: str) -> set[str]:
    """The files of one dataset key in tf.Transform's analyzer cache."""
    if cache_dir is None:
        return set()
    match = FileSystems.match([FileSystems.join(cache_dir, f"{key}*", "*")])[0]
    return {m.path for m in match.metadata_list}


def _default_tuner_pool(config: PipelineConfig, options) -> Optional[LocalWorkerPool]:
    """Worker processes for the trials when the user left the DirectRunner's mode unset.

    Trials are heavy elements: by default they run ``--tuner_parallel_trials`` at a time
    (at most one per core) in worker processes, although the data stages run in_memory. A
    ``--direct_running_mode`` the user gives decides instead (see ``run_tuning_stage``).
    """
    if (
        not config.tuner.enabled
        or not is_direct(options)
        or config.tuner.parallel_trials < 2
        or any(a.startswith("--direct_running_mode") for a in config.beam_args)
    ):
        return None
    cores = os.cpu_count() or 1
    workers = max(1, min(config.tuner.parallel_trials, cores))
    return LocalWorkerPool(workers, threads_per_worker=max(1, cores // workers))


def run(config: PipelineConfig) -> RunSummary:
    """Runs the whole pipeline described by ``config``.

    Raises:
      PipelineError: bad flags, inputs, module file, or data; the message says the fix.
    """
    from beam_pipeline.schema_gen import read_schema

    options = parse_beam_args(config.beam_args)
    # First, before any file or job is created: remote workers cannot use local paths.
    check_remote_paths(config, options)
    # A local EXTERNAL worker pool must start a worker that imports this project; checked
    # while the inputs and the module file are checked, and waited for before anything is
    # created (beam_pipeline.runtime.preflight).
    pool_checked = start_worker_pool_check(options, config.worker_start_timeout)
    csv_format = eg.CsvFormat(
        config.data.csv_delimiter, config.data.csv_null_values, config.data.csv_max_field_bytes
    )
    inputs = _check_data(config, csv_format)
    preprocessing_fn = None
    tunes = False
    bundle = None
    if config.module_file:
        # Loaded once here, before any Beam work: a syntax error, a trainer_fn or a bad
        # run_fn signature stops the run now, not after the data stages.
        user_module = load_trainer_module(
            config.module_file, entry_point=config.trainer.entry_point
        )
        preprocessing_fn = get_preprocessing_fn(user_module.module, config.module_file)
        tunes = callable(getattr(user_module.module, "tuner_fn", None)) or bool(
            config.tuner.search_space
        )
        # Read (and its folder's size checked) before the run directory exists.
        bundle = bundle_module_file(config.module_file, config.max_module_folder_mib)
    user_schema = read_schema(config.data.schema) if config.data.schema else None

    pool_checked()
    # What the module's workers run: the module file and its folder's Python files.
    module_digest = bundle.archive_sha256 if bundle is not None else None
    identity = run_identity(
        config, inputs.fingerprint, bundle.sha256 if bundle else None, module_digest
    )
    # A rerun of a --run_id resumes it, or is refused before anything is written.
    run_dir, manifest = RunManifest.open(config.pipeline_root, config.run_id, identity)
    summary = RunSummary(run_dir.root)
    # The model phase's workers load the module and its folder's Python files staged
    # beside the artifacts, named by their sha256 (<run_dir>/module/<sha256>/...), not the
    # user's copies, which may change or be out of their reach.
    staged = bundle.stage(run_dir.root) if bundle is not None else None
    tuner_pool = contextlib.ExitStack()
    try:
        # The tuner's worker processes import TensorFlow (seconds each) while the data
        # stages run, instead of after them; they are stopped before training.
        pool = None
        if tunes and not manifest.has(Stage.TUNER):
            pool = _default_tuner_pool(config, options)
        if pool is not None:
            tuner_pool.enter_context(pool)
        _run_stages(
            config,
            staged,
            inputs,
            csv_format,
            user_schema,
            preprocessing_fn,
            module_digest,
            run_dir,
            manifest,
            options,
            summary,
            tuner_pool,
            pool,
        )
    except BaseException:
        tuner_pool.close()
        run_dir.remove_staging()
        # The run's own error is what the user must see: a summary that cannot be written
        # now (a full disk) is logged, not raised over it.
        write_summary(summary, after_error=True)
        raise
    tuner_pool.close()
    run_dir.remove_staging()
    write_summary(summary)
    return summary


def _run_stages(
    config: PipelineConfig,
    staged: Optional[StagedModule],
    inputs: DataInputs,
    csv_format: eg.CsvFormat,
    user_schema,
    preprocessing_fn: Optional[Callable],
    module_digest: Optional[str],
    run_dir: RunDirectory,
    manifest: RunManifest,
    options,
    summary: RunSummary,
    tuner_pool: contextlib.ExitStack,
    pool: Optional[LocalWorkerPool],
) -> None:
    """Runs the stages in order; each one an earlier attempt of this run finished is kept.

    A stage is looked up in the run's manifest by what it is built from (the chain of
    upstream keys, the module, its settings); the first miss and every stage after it run.
    """
    from beam_pipeline.schema_gen import read_schema
    from transforms.statistics import read_statistics

    def stage(kind: Stage, built_from: dict) -> tuple[str, bool]:
        """(the stage's key, whether it was kept); a kept stage's rows join the summary."""
        reports = manifest.cached(kind, built_from)
        if reports is not None:
            summary.stages.extend(reports)
            return stage_key(kind, built_from), True
        manifest.invalidate(kind)
        return stage_key(kind, built_from), False

    def record(kind: Stage, built_from: dict, first: int, **outcome) -> None:
        reports = summary.stages[first:]
        skipped = all(r.status is StageStatus.SKIPPED for r in reports)
        manifest.record(
            kind, built_from, reports, outcome=outcome, artifacts=() if skipped else None
        )

    splits = config.data.splits
    built_from = {"data": inputs.fingerprint}
    data_key, kept = stage(Stage.DATA, built_from)
    if kept:
        stats = {
            s: read_statistics(run_dir.path(Artifact.STATISTICS, s.value, "FeatureStats.pb"))
            for s in splits
        }
    else:
        first = len(summary.stages)
        stats = _run_data_phase(config, inputs, csv_format, user_schema, run_dir, options, summary)
        if stats is None:  # --dry_run: the later phases need the data phase's output
            return
        record(Stage.DATA, built_from, first)

    built_from = {
        "statistics": data_key,
        "schema_file": file_digest(config.data.schema) if config.data.schema else None,
        "infer_feature_shape": config.data.infer_feature_shape,
        "max_string_domain_size": config.data.max_string_domain_size,
    }
    schema_key, kept = stage(Stage.SCHEMA, built_from)
    if kept:
        schema = read_schema(run_dir.path(Artifact.SCHEMA, "schema.pbtxt"))
    else:
        first = len(summary.stages)
        schema = _run_schema(config, stats, user_schema, run_dir, summary)
        record(Stage.SCHEMA, built_from, first)

    built_from = {"statistics": data_key, "schema": schema_key}
    _, kept = stage(Stage.VALIDATION, built_from)
    if kept:
        blocking = manifest.stages[Stage.VALIDATION.value]["outcome"].get("blocking_error")
    else:
        first = len(summary.stages)
        blocking = _run_validation(config, stats, schema, run_dir, summary)
        record(Stage.VALIDATION, built_from, first, blocking_error=blocking)
    if blocking and not config.data.ignore_anomalies:
        raise PipelineError(blocking, exit_code=EXIT_ANOMALIES)

    if preprocessing_fn is None:
        summary.stages.append(
            StageReport("Transform", StageStatus.SKIPPED, note="no --module_file")
        )
        return
    built_from = {"examples": data_key, "schema": schema_key, "module_file": module_digest}
    transform_key, kept = stage(Stage.TRANSFORM, built_from)
    if not kept:
        first = len(summary.stages)
        _run_transform(
            config,
            inputs,
            preprocessing_fn,
            config.module_file,
            schema,
            run_dir,
            options,
            summary,
        )
        record(Stage.TRANSFORM, built_from, first)

    built_from = {
        "transform": transform_key,
        "module_file": module_digest,
        "tuner": manifest.identity["tuner"],
    }
    tuner_key, kept = stage(Stage.TUNER, built_from)
    best_hyperparameters = None
    if kept:
        best = run_dir.path(Artifact.TUNER, BEST_HYPERPARAMETERS_FILE)
        best_hyperparameters = best if FileSystems.exists(best) else None
    else:
        with tuner_pool:
            tuner_report, best_hyperparameters = run_tuning_stage(
                config,
                run_dir,
                options,
                worker_pool=pool,
                search_space=config.tuner.search_space,
                staged=staged,
            )
        summary.stages.append(tuner_report)
        if tuner_report.status is not StageStatus.FAILED:
            record(Stage.TUNER, built_from, len(summary.stages) - 1)
    if best_hyperparameters is None:
        tuner_key = None  # nothing tuned: the trainer does not depend on this stage

    built_from = {
        "transform": transform_key,
        "schema": schema_key,
        "tuner": tuner_key,
        "module_file": module_digest,
        "trainer": manifest.identity["trainer"],
    }
    _, kept = stage(Stage.TRAINER, built_from)
    if not kept:
        report = run_training_stage(
            config,
            run_dir,
            options,
            best_hyperparameters,
            entry_point=config.trainer.entry_point,
            staged=staged,
        )
        summary.stages.append(report)
        if report.status is not StageStatus.FAILED:
            record(Stage.TRAINER, built_from, len(summary.stages) - 1)
