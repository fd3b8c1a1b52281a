"""Typed artifacts: what a stage reads and writes, as a URI plus properties.

Each type names the run-directory folder it is published in (``core.types.Artifact``) and
the properties a later stage, the summary or a metadata store needs without opening it
(split names, row counts, the data's content fingerprint, a file name inside it). Stages
declare their inputs and outputs by these types (see :mod:`beam_pipeline.engine`); the
runner hands each stage the artifacts its upstream stages produced, instead of the stage
finding them by folder layout. An artifact is JSON-able, so a run's manifest (and the
metadata store) can record it and give it back on a resume.

The types several stages read are all here, and each reads itself (``Schema.read()``,
``Statistics.read(split)``, ``ModelBlessing.read()``, ``InfraBlessing.read()``),
importing what it parses with only when called: every command imports this module. A
type only its own stage reads lives in that stage's home (docs/add-a-stage.md).

Example::

    examples = Examples(run_dir.path(Artifact.EXAMPLES), {"split_names": ["train", "eval"]})
    examples.file_pattern(Split.TRAIN)    # .../examples/train/*.tfrecord.gz
    TypedArtifact.from_json(examples.to_json()) == examples    # True
    inputs[Schema].read().feature[0].name    # a stage's input schema, parsed
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact, Split

# The readers' return types, for annotations only: --help imports this module, and the
# readers import what they parse with when they run.
if TYPE_CHECKING:
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

__all__ = [
    "TypedArtifact",
    "Examples",
    "RejectedRows",
    "Statistics",
    "Schema",
    "Anomalies",
    "TransformGraph",
    "TransformedExamples",
    "Hyperparameters",
    "Model",
    "ModelRun",
    "ModelEvaluation",
    "ModelBlessing",
    "InfraBlessing",
    "PushedModel",
    "ModelInputs",
    "EvaluationResult",
    "ThresholdFailure",
    "InfraResult",
    "artifact_types",
    "SCHEMA_FILE",
]

SCHEMA_FILE = "schema.pbtxt"

# Type name -> type, filled as each type is declared (TypedArtifact.__init_subclass__).
_TYPES: dict[str, type[TypedArtifact]] = {}
_EXAMPLE_FILES = "*.tfrecord.gz"


@dataclasses.dataclass(frozen=True)
class TypedArtifact:
    """One artifact: where it is published and what is known about it.

    Attributes:
      uri: its published folder (local path or URL).
      properties: JSON values describing it (each type documents its own).
    """

    FOLDER: ClassVar[Artifact | str]
    # Files (relative paths) a later stage adds to the published folder by design, which
    # the reuse check (beam_pipeline.engine.contents) leaves out.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ()
    # Whether every file is digested when published (and checked before a reuse), whatever
    # its size: for what decides results and is small beside the data (the transform graph,
    # the model), where a large file edited at the same size must not be reused. The other
    # artifacts digest their files up to contents.SMALL_FILE_BYTES and record the sizes of
    # larger ones (the example shards: see beam_pipeline.engine.contents).
    DIGEST_EVERY_FILE: ClassVar[bool] = False

    uri: str
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __init_subclass__(cls, **kwargs: Any):
        # Every type with a folder can be rebuilt from a record by its name
        # (from_json), wherever it is declared (a stage may declare its own).
        super().__init_subclass__(**kwargs)
        if "FOLDER" in cls.__dict__:
            known = _TYPES.get(cls.__name__)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise ValueError(f"two artifact types are named {cls.__name__}")
            _TYPES[cls.__name__] = cls

    @classmethod
    def folder_name(cls) -> str:
        """The run-directory folder this type is published in."""
        return cls.FOLDER.value if isinstance(cls.FOLDER, Artifact) else str(cls.FOLDER)

    @property
    def type_name(self) -> str:
        return type(self).__name__

    def is_published(self) -> bool:
        """Whether the artifact is complete in place (its publication marker is there)."""
        return fileio.exists(fileio.join(self.uri, PUBLISHED_MARKER))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "uri": self.uri, "properties": dict(self.properties)}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> TypedArtifact:
        """The inverse of :meth:`to_json`.

        Raises:
          KeyError: an unknown type name (a record of another version).
        """
        cls = _TYPES[d["type"]]
        return cls(d["uri"], dict(d.get("properties") or {}))


class _Splits(TypedArtifact):
    """An artifact per split, which lists them in its property ``split_names``."""

    @property
    def split_names(self) -> tuple[Split, ...]:
        # In Split's order (train first), however the producing job listed them.
        return tuple(
            sorted(
                (Split(s) for s in self.properties.get("split_names", ())), key=list(Split).index
            )
        )


class _SplitFiles(_Splits):
    """Examples of several splits: ``<uri>/<split>/*.tfrecord.gz``.

    Properties: ``split_names`` (list), ``rows`` (split -> row count, where counted).
    """

    def file_pattern(self, split: Split) -> str:
        return fileio.join(self.uri, split.value, _EXAMPLE_FILES)


class Examples(_SplitFiles):
    """ExampleGen's gzip TFRecords of tf.Examples; ``fingerprint``: the input's content digest
    with ExampleGen's settings (the analyzer cache's dataset key)."""

    FOLDER = Artifact.EXAMPLES


class RejectedRows(TypedArtifact):
    """The input rows ExampleGen refused, one JSON object per row (file, line, reason)."""

    FOLDER = Artifact.REJECTED


class Statistics(_Splits):
    """One DatasetFeatureStatisticsList per split: ``<uri>/<split>/FeatureStats.pb``."""

    FOLDER = Artifact.STATISTICS

    def path(self, split: Split) -> str:
        return fileio.join(self.uri, split.value, "FeatureStats.pb")

    def read(self, split: Split) -> statistics_pb2.DatasetFeatureStatisticsList:
        """The statistics of ``split`` (:meth:`read_file` of its ``FeatureStats.pb``)."""
        return self.read_file(self.path(split))

    @staticmethod
    def read_file(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
        """A binary ``DatasetFeatureStatisticsList`` file (``transforms.statistics_files``
        writes it, as TFX's StatisticsGen; TFDV's ``load_stats_binary`` reads it too).

        Raises:
          PipelineError: the file does not exist or does not hold such a proto.
        """
        from tensorflow_metadata.proto.v0 import statistics_pb2

        if not fileio.exists(path):
            raise PipelineError(
                f"Statistics file {path} does not exist; run the statistics stage first or "
                "pass the path of an existing FeatureStats.pb file."
            )
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        try:
            stats.ParseFromString(fileio.read_file(path, binary=True))
        except Exception as err:  # noqa: BLE001  protobuf raises DecodeError or a RuntimeError
            raise PipelineError(
                f"Statistics file {path} is not a binary DatasetFeatureStatisticsList ({err}); "
                "delete it and run the statistics stage again."
            ) from err
        return stats


class Schema(TypedArtifact):
    """The raw data's schema, ``<uri>/schema.pbtxt``; ``features``: how many it declares."""

    FOLDER = Artifact.SCHEMA

    @property
    def file(self) -> str:
        return fileio.join(self.uri, SCHEMA_FILE)

    def read(self) -> schema_pb2.Schema:
        """The schema (:meth:`read_file` of its ``schema.pbtxt``)."""
        return self.read_file(self.file)

    @staticmethod
    def read_file(path: str) -> schema_pb2.Schema:
        """A text-proto tensorflow_metadata Schema (``schema.pbtxt``, the user's ``--schema``).

        Raises:
          PipelineError: the file does not exist or is not a text-format Schema.
        """
        from google.protobuf import text_format
        from tensorflow_metadata.proto.v0 import schema_pb2

        if not fileio.exists(path):
            raise PipelineError(
                f"Schema file {path} does not exist; pass the path of an existing schema.pbtxt "
                "or let the pipeline infer one."
            )
        try:
            return text_format.Parse(fileio.read_file(path), schema_pb2.Schema())
        except text_format.ParseError as err:
            raise PipelineError(
                f"Schema file {path} is not a valid text-format tensorflow_metadata Schema "
                f"({err}); fix that line or delete the file to infer the schema again."
            ) from err


class Anomalies(TypedArtifact):
    """Per split ``<split>/SchemaDiff.pb`` (tfmd Anomalies) and ``summary.txt``."""

    FOLDER = Artifact.ANOMALIES


class TransformGraph(TypedArtifact):
    """tf.Transform's output folder (``tft.TFTransformOutput`` reads it)."""

    FOLDER = Artifact.TRANSFORM_GRAPH
    DIGEST_EVERY_FILE = True  # its vocabularies map tokens as the model learned them


class TransformedExamples(_SplitFiles):
    """The transformed examples of every split."""

    FOLDER = Artifact.TRANSFORMED_EXAMPLES


class Hyperparameters(TypedArtifact):
    """The tuner's folder; ``file``: the best trial's ``HyperParameters`` config in it."""

    FOLDER = Artifact.TUNER

    @property
    def file(self) -> str:
        return fileio.join(self.uri, self.properties["file"])


class Model(TypedArtifact):
    """The serving SavedModel."""

    FOLDER = Artifact.MODEL
    DIGEST_EVERY_FILE = True
    # The InfraValidator writes TF Serving's warm-up requests into the model it checked
    # (assets.extra holds files the server reads beside the graph, not part of it).
    ADDED_LATER = ("assets.extra/tf_serving_warmup_requests",)


class ModelRun(TypedArtifact):
    """The trainer's working folder: checkpoints, TensorBoard logs, its result."""

    FOLDER = Artifact.MODEL_RUN


class ModelEvaluation(TypedArtifact):
    """TFMA's output folder (``tfma.load_eval_result`` / ``load_validation_result`` read it)."""

    FOLDER = Artifact.EVALUATION


@dataclasses.dataclass(frozen=True)
class ThresholdFailure:
    """A threshold a model failed on one slice."""

    metric: str
    slice: str
    value: float
    bound: str
    # How far the value is on the wrong side of the bound (absolute thresholds; None for
    # a relative change threshold or a missing slice, and in blessings written before it).
    by: Optional[float] = None

    def describe(self) -> str:
        short = f", misses it by {self.by:.4g}" if self.by is not None else ""
        return f"{self.metric} on {self.slice} = {self.value:.4g}, needs {self.bound}{short}"


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    """What the Evaluator decided and measured (a :class:`ModelBlessing`'s content).

    Attributes:
      blessed: every threshold passed on every slice.
      failures: the thresholds that failed.
      baseline: the baseline model folder, or None (judged on value thresholds alone).
      metrics: slice name -> metric name -> value (the candidate's).
      reason: why, in words: "" when ``failures`` say it (or every threshold passed),
        the Evaluator's ``NO_THRESHOLDS`` when there was none to check, else TFMA's own
        verdict.
    """

    blessed: bool
    failures: tuple[ThresholdFailure, ...]
    baseline: Optional[str]
    metrics: dict[str, dict[str, float]]
    reason: str = ""

    def why(self) -> str:
        """The verdict's reason in words (never empty for a model that is not blessed)."""
        if self.failures:
            return "; ".join(f.describe() for f in self.failures)
        if self.reason:
            return self.reason
        return "every threshold passed" if self.blessed else "TFMA's validation failed"


class ModelBlessing(TypedArtifact):
    """The Evaluator's verdict: ``BLESSED`` or ``NOT_BLESSED`` and ``blessing.json`` (an
    :class:`EvaluationResult`), as TFX's blessing; properties ``blessed`` (bool) and
    ``baseline`` (the baseline model's folder or None)."""

    FOLDER = Artifact.BLESSING
    FILE = "blessing.json"

    def write(self, result: EvaluationResult) -> None:
        """Writes ``BLESSED``/``NOT_BLESSED`` and ``blessing.json`` into its folder."""
        marker = "BLESSED" if result.blessed else "NOT_BLESSED"
        fileio.write_file(fileio.join(self.uri, marker), "")
        text = json.dumps(dataclasses.asdict(result), indent=1) + "\n"
        fileio.write_file(fileio.join(self.uri, self.FILE), text)

    def read(self) -> Optional[EvaluationResult]:
        """The verdict written into its folder, or None if there is none."""
        d = _read_json(self.uri, self.FILE)
        if d is None:
            return None
        failures = tuple(ThresholdFailure(**f) for f in d.pop("failures"))
        return EvaluationResult(failures=failures, **d)


@dataclasses.dataclass(frozen=True)
class InfraResult:
    """The serving check's verdict and measurements (an :class:`InfraBlessing`'s content).

    Attributes:
      blessed: the model loaded in time and answered every request well.
      problems: why not, one line each (the loader's or the request's message).
      load_seconds: time to load the SavedModel in the sandbox.
      latency_ms: batch size -> {"p50": ms, "p99": ms} over the repeats of that request.
      endpoint: the TF Serving server that answered (``--serving_endpoint``), or None for
        the sandbox (then ``load_seconds`` is the sandbox's load time).
    """

    blessed: bool
    problems: tuple[str, ...]
    load_seconds: Optional[float]
    latency_ms: dict[int, dict[str, float]]
    endpoint: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class InfraBlessing(TypedArtifact):
    """The InfraValidator's verdict: ``INFRA_BLESSED`` or ``INFRA_NOT_BLESSED`` and
    ``infra_validation.json`` (an :class:`InfraResult`: load time, p50/p99 latency per batch
    size, problems); property ``blessed``."""

    FOLDER = Artifact.INFRA_BLESSING
    FILE = "infra_validation.json"

    def write(self, result: InfraResult) -> None:
        """Writes ``INFRA_BLESSED``/``INFRA_NOT_BLESSED`` and ``infra_validation.json``."""
        marker = "INFRA_BLESSED" if result.blessed else "INFRA_NOT_BLESSED"
        fileio.write_file(fileio.join(self.uri, marker), "")
        fileio.write_file(fileio.join(self.uri, self.FILE), json.dumps(result.to_json(), indent=1))

    def read(self) -> Optional[InfraResult]:
        """The verdict written into its folder, or None if there is none."""
        d = _read_json(self.uri, self.FILE)
        if d is None:
            return None
        latency = {int(k): v for k, v in d.pop("latency_ms").items()}
        return InfraResult(problems=tuple(d.pop("problems")), latency_ms=latency, **d)


def _read_json(folder: str, name: str) -> Optional[dict[str, Any]]:
    path = fileio.join(folder, name)
    return json.loads(fileio.read_file(path)) if fileio.exists(path) else None


class PushedModel(TypedArtifact):
    """The Pusher's record, ``pushed.json``: where the model went and as which version
    (or why it was not pushed); properties ``pushed`` (bool), ``destination``, ``version``."""

    FOLDER = Artifact.PUSHED_MODEL


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """What a model-phase stage (Tuner, Trainer) reads: Transform's outputs and the schema.

    Attributes:
      transform_graph: tf.Transform's output.
      transformed_examples: the transformed train and eval examples.
      schema: the raw data's schema, or None when the run has none.
    """

    transform_graph: TransformGraph
    transformed_examples: TransformedExamples
    schema: Optional[Schema] = None

    @classmethod
    def in_run(cls, run_dir) -> ModelInputs:
        """The artifacts a run directory holds where the stages publish them.

        For callers outside the stage runner (tests, tools); a run's stages get theirs from
        the stages that produced them.
        """
        schema = Schema(run_dir.path(Artifact.SCHEMA))
        return cls(
            TransformGraph(run_dir.path(Artifact.TRANSFORM_GRAPH)),
            TransformedExamples(run_dir.path(Artifact.TRANSFORMED_EXAMPLES)),
            schema if fileio.exists(schema.file) else None,
        )

    def job_fields(self, stage: str) -> dict[str, Any]:
        """The ``TrainingJob``/``TuningJob`` fields, each input checked to exist.

        ``transform_graph_path``, ``train_files``, ``eval_files`` and ``schema_path``.

        Raises:
          PipelineError: the transform graph or a split's transformed examples are missing
            (the Transform stage did not run in this run directory).
        """
        graph = self.transform_graph.uri
        if not fileio.exists(graph):
            raise PipelineError(
                f"The {stage} found no transform graph at {graph}; run the Transform stage in "
                "this run directory first."
            )
        files = {}
        for split in (Split.TRAIN, Split.EVAL):
            pattern = self.transformed_examples.file_pattern(split)
            if not fileio.glob(pattern):
                raise PipelineError(
                    f"The {stage} found no transformed {split.value} examples at {pattern}; run "
                    "the Transform stage in this run directory first."
                )
            files[split] = (pattern,)
        return {
            "transform_graph_path": graph,
            "train_files": files[Split.TRAIN],
            "eval_files": files[Split.EVAL],
            "schema_path": self.schema.file if self.schema is not None else None,
        }


def artifact_types() -> dict[str, type[TypedArtifact]]:
    """Every artifact type declared so far: type name -> type."""
    return dict(_TYPES)
