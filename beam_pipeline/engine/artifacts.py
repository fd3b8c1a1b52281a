"""Typed artifacts: what a stage reads and writes, as a URI plus properties.

Each type names the run-directory folder it is published in (``core.types.Artifact``) and
the properties a later stage, the summary or a metadata store needs without opening it
(split names, row counts, the data's content fingerprint, a file name inside it). Stages
declare their inputs and outputs by these types (see :mod:`beam_pipeline.engine`); the
runner hands each stage the artifacts its upstream stages produced, instead of the stage
finding them by folder layout. An artifact is JSON-able, so a run's manifest (and the
metadata store) can record it and give it back on a resume.

Example::

    examples = Examples(run_dir.path(Artifact.EXAMPLES), {"split_names": ["train", "eval"]})
    examples.file_pattern(Split.TRAIN)    # .../examples/train/*.tfrecord.gz
    TypedArtifact.from_json(examples.to_json()) == examples    # True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact, Split

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


class _SplitFiles(TypedArtifact):
    """Examples of several splits: ``<uri>/<split>/*.tfrecord.gz``.

    Properties: ``split_names`` (list), ``rows`` (split -> row count, where counted).
    """

    @property
    def split_names(self) -> tuple[Split, ...]:
        # In Split's order (train first), however the producing job listed them.
        return tuple(
            sorted(
                (Split(s) for s in self.properties.get("split_names", ())), key=list(Split).index
            )
        )

    def file_pattern(self, split: Split) -> str:
        return fileio.join(self.uri, split.value, _EXAMPLE_FILES)


class Examples(_SplitFiles):
    """ExampleGen's gzip TFRecords of tf.Examples; ``fingerprint``: the input's content digest
    with ExampleGen's settings (the analyzer cache's dataset key)."""

    FOLDER = Artifact.EXAMPLES


class RejectedRows(TypedArtifact):
    """The input rows ExampleGen refused, one JSON object per row (file, line, reason)."""

    FOLDER = Artifact.REJECTED


class Statistics(TypedArtifact):
    """One DatasetFeatureStatisticsList per split: ``<uri>/<split>/FeatureStats.pb``."""

    FOLDER = Artifact.STATISTICS

    @property
    def split_names(self) -> tuple[Split, ...]:
        # In Split's order (train first), however the producing job listed them.
        return tuple(
            sorted(
                (Split(s) for s in self.properties.get("split_names", ())), key=list(Split).index
            )
        )

    def path(self, split: Split) -> str:
        return fileio.join(self.uri, split.value, "FeatureStats.pb")


class Schema(TypedArtifact):
    """The raw data's schema, ``<uri>/schema.pbtxt``; ``features``: how many it declares."""

    FOLDER = Artifact.SCHEMA

    @property
    def file(self) -> str:
        return fileio.join(self.uri, SCHEMA_FILE)


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


class ModelBlessing(TypedArtifact):
    """The Evaluator's verdict: ``BLESSED`` or ``NOT_BLESSED`` and ``blessing.json``;
    properties ``blessed`` (bool) and ``baseline`` (the baseline model's folder or None)."""

    FOLDER = Artifact.BLESSING


class InfraBlessing(TypedArtifact):
    """The InfraValidator's verdict: ``INFRA_BLESSED`` or ``INFRA_NOT_BLESSED`` and
    ``infra_validation.json`` (load time, p50/p99 latency per batch size, problems);
    property ``blessed``."""

    FOLDER = Artifact.INFRA_BLESSING


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
