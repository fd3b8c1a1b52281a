"""The run directory: where every artifact of one run lives, published atomically.

A stage writes its artifact into a private staging folder and publishes it by moving it
into place only when the whole artifact is written, so a stage that fails or is killed
leaves nothing a later run could mistake for a finished artifact. Paths go through
``tf.io.gfile`` so a ``gs://`` pipeline root works like a local one.

Example::

    run_dir = RunDirectory.create("pipeline_runs", run_id="")
    with run_dir.stage(Artifact.SCHEMA) as tmp:
        write_schema(os.path.join(tmp, "schema.pbtxt"))
    run_dir.path(Artifact.SCHEMA)   # now published
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import logging
import os
import posixpath
import uuid
from collections.abc import Iterator
from typing import Any

from beam_pipeline.errors import PipelineError

__all__ = ["Artifact", "RunDirectory", "PUBLISHED_MARKER"]

# Written last into every published artifact; on object stores (no atomic folder rename)
# its presence is what tells a finished artifact from a partly copied one.
PUBLISHED_MARKER = "_PUBLISHED"


class Artifact(str, enum.Enum):
    """Artifacts of a run, by folder name inside the run directory."""

    EXAMPLES = "examples"
    REJECTED = "rejected"
    STATISTICS = "statistics"
    SCHEMA = "schema"
    ANOMALIES = "anomalies"
    TRANSFORM_GRAPH = "transform_graph"
    TRANSFORMED_EXAMPLES = "transformed_examples"
    TUNER = "tuner"
    MODEL = "model"
    MODEL_RUN = "model_run"
    EVALUATION = "evaluation"


def _gfile():
    # Imported lazily: TensorFlow takes seconds to import and the CLI checks flags first.
    import tensorflow as tf

    return tf.io.gfile


def _join(*parts: str) -> str:
    # URLs (gs://...) always use "/"; local paths follow the OS.
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


class RunDirectory:
    """One run's folder: ``<pipeline_root>/runs/<run_id>/<artifact>/...``.

    Attributes:
      pipeline_root: the folder holding all runs and the shared caches.
      run_id: this run's name.
      root: this run's folder.
    """

    def __init__(self, pipeline_root: str, run_id: str):
        self.pipeline_root = pipeline_root
        self.run_id = run_id
        self.root = _join(pipeline_root, "runs", run_id)

    @classmethod
    def create(cls, pipeline_root: str, run_id: str = "") -> RunDirectory:
        """Creates the run folder; a fresh ``run_id`` is generated when empty."""
        if not run_id:
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_id = f"{stamp}-{uuid.uuid4().hex[:6]}"
        run_dir = cls(pipeline_root, run_id)
        _gfile().makedirs(run_dir.root)
        return run_dir

    def path(self, artifact: Artifact, *parts: str) -> str:
        """The published location of ``artifact`` (or a file inside it)."""
        return _join(self.root, artifact.value, *parts)

    def cache_path(self, name: str) -> str:
        """A cache folder shared by all runs under the pipeline root."""
        return _join(self.pipeline_root, "cache", name)

    def is_published(self, artifact: Artifact) -> bool:
        return _gfile().exists(self.path(artifact, PUBLISHED_MARKER))

    @contextlib.contextmanager
    def stage(self, artifact: Artifact) -> Iterator[str]:
        """Yields a staging folder for ``artifact``; publishes it when the block succeeds.

        On an exception the staging folder is deleted and nothing is published.

        Raises:
          PipelineError: the artifact is already published in this run directory.
        """
        staging = self.new_staging(artifact)
        try:
            yield staging
        except BaseException:
            self.discard(staging)
            raise
        self.publish(artifact, staging)

    def new_staging(self, artifact: Artifact) -> str:
        """A fresh, empty staging folder for ``artifact`` (publish or discard it later)."""
        if self.is_published(artifact):
            raise PipelineError(
                f"Artifact {artifact.value!r} already exists in run directory {self.root}; "
                "pass a new --run_id (or none) to start a fresh run."
            )
        staging = _join(self.root, ".staging", f"{artifact.value}-{uuid.uuid4().hex[:8]}")
        _gfile().makedirs(staging)
        return staging

    def publish(self, artifact: Artifact, staging: str) -> str:
        """Moves a finished staging folder into place and marks it published."""
        gfile = _gfile()
        final = self.path(artifact)
        with gfile.GFile(_join(staging, PUBLISHED_MARKER), "w") as f:
            f.write(datetime.datetime.now().isoformat())
        if gfile.exists(final):
            # A leftover of a killed publish on an object store: never marked, so not valid.
            gfile.rmtree(final)
        if "://" in final:
            # Object stores have no folder rename: copy the files, then the marker last.
            files = [f for f in _walk_files(staging) if not f.endswith(PUBLISHED_MARKER)]
            for src in files:
                dst = _join(final, posixpath.relpath(src, staging))
                gfile.makedirs(posixpath.dirname(dst))
                gfile.copy(src, dst, overwrite=True)
            gfile.copy(_join(staging, PUBLISHED_MARKER), _join(final, PUBLISHED_MARKER))
            gfile.rmtree(staging)
        else:
            gfile.rename(staging, final)
        return final

    def transform_graph(self, stage: str) -> str:
        """The published transform graph folder, for a model-phase stage.

        Raises:
          PipelineError: there is none (the Transform stage did not run in this run).
        """
        graph = self.path(Artifact.TRANSFORM_GRAPH)
        if not _gfile().exists(graph):
            raise PipelineError(
                f"The {stage} found no transform graph at {graph}; run the Transform stage in "
                "this run directory first."
            )
        return graph

    def transformed_example_files(self, split, stage: str) -> tuple[str, ...]:
        """The file pattern of a split's transformed examples, for a model-phase stage.

        Raises:
          PipelineError: there are none (the Transform stage did not run in this run).
        """
        pattern = self.path(Artifact.TRANSFORMED_EXAMPLES, split.value, "*.tfrecord.gz")
        if not _gfile().glob(pattern):
            raise PipelineError(
                f"The {stage} found no transformed {split.value} examples at {pattern}; run the "
                "Transform stage in this run directory first."
            )
        return (pattern,)

    def model_inputs(self, stage: str) -> dict[str, Any]:
        """What a model-phase stage's job reads, as the ``TrainingJob``/``TuningJob`` fields.

        ``transform_graph_path``, ``train_files`` and ``eval_files`` (checked, see
        :meth:`transform_graph` and :meth:`transformed_example_files`), and
        ``schema_path``: the raw schema, or None when this run has none.

        Raises:
          PipelineError: the Transform stage's artifacts are missing.
        """
        from beam_pipeline.config import Split

        schema_path = self.path(Artifact.SCHEMA, "schema.pbtxt")
        return {
            "transform_graph_path": self.transform_graph(stage),
            "train_files": self.transformed_example_files(Split.TRAIN, stage),
            "eval_files": self.transformed_example_files(Split.EVAL, stage),
            "schema_path": schema_path if _gfile().exists(schema_path) else None,
        }

    def remove_staging(self) -> None:
        """Deletes the run's staging area ``.staging/`` when the run ends, however it ends.

        Each stage publishes or discards its own staging folder, so nothing left there is
        an artifact (tf.Transform's temporary files are). Best effort: a folder that cannot
        be deleted is logged, never raised over the run's own outcome.
        """
        staging = _join(self.root, ".staging")
        try:
            if _gfile().exists(staging):
                _gfile().rmtree(staging)
        except Exception as e:  # noqa: BLE001  OSError or TensorFlow's OpError
            logging.getLogger(__name__).warning("Could not delete %s (%s).", staging, e)

    def discard(self, staging: str) -> None:
        """Deletes a staging folder (a failed or abandoned artifact)."""
        gfile = _gfile()
        if gfile.exists(staging):
            gfile.rmtree(staging)


def _walk_files(top: str) -> list[str]:
    gfile = _gfile()
    out = []
    for dirpath, _, files in gfile.walk(top):
        out.extend(_join(dirpath, f) for f in files)
    return out
