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
import logging
import posixpath
from collections.abc import Iterator

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact

__all__ = ["RunDirectory"]


def _folder(artifact: Artifact | str) -> str:
    """An artifact's folder name: a core artifact (:class:`Artifact`) or a stage's own
    (a string: a stage declared outside this package names its artifacts' folders)."""
    return artifact.value if isinstance(artifact, Artifact) else str(artifact)


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
        self.root = fileio.join(pipeline_root, "runs", run_id)

    @classmethod
    def create(cls, pipeline_root: str, run_id: str = "") -> RunDirectory:
        """Creates the run folder; a fresh ``run_id`` is generated when empty."""
        if not run_id:
            import datetime  # lazily: `--help` imports this module, not this
            import uuid

            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_id = f"{stamp}-{uuid.uuid4().hex[:6]}"
        run_dir = cls(pipeline_root, run_id)
        fileio.makedirs(run_dir.root)
        return run_dir

    def path(self, artifact: Artifact | str, *parts: str) -> str:
        """The published location of ``artifact`` (or a file inside it)."""
        return fileio.join(self.root, _folder(artifact), *parts)

    def cache_path(self, name: str) -> str:
        """A cache folder shared by all runs under the pipeline root."""
        return fileio.join(self.pipeline_root, "cache", name)

    def is_published(self, artifact: Artifact | str) -> bool:
        return fileio.exists(self.path(artifact, PUBLISHED_MARKER))

    @contextlib.contextmanager
    def stage(self, artifact: Artifact | str) -> Iterator[str]:
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

    def new_staging(self, artifact: Artifact | str) -> str:
        """A fresh, empty staging folder for ``artifact`` (publish or discard it later)."""
        if self.is_published(artifact):
            raise PipelineError(
                f"Artifact {_folder(artifact)!r} already exists in run directory {self.root}; "
                "pass a new --run_id (or none) to start a fresh run."
            )
        import uuid

        staging = fileio.join(self.root, ".staging", f"{_folder(artifact)}-{uuid.uuid4().hex[:8]}")
        fileio.makedirs(staging)
        return staging

    def publish(self, artifact: Artifact | str, staging: str) -> str:
        """Moves a finished staging folder into place and marks it published."""
        import datetime

        final = self.path(artifact)
        with fileio.open(fileio.join(staging, PUBLISHED_MARKER), "w") as f:
            f.write(datetime.datetime.now().isoformat())
        if fileio.exists(final):
            # A leftover of a killed publish on an object store: never marked, so not valid.
            fileio.rmtree(final)
        if "://" in final:
            # Object stores have no folder rename: copy the files, then the marker last.
            files = [f for f in _walk_files(staging) if not f.endswith(PUBLISHED_MARKER)]
            for src in files:
                dst = fileio.join(final, posixpath.relpath(src, staging))
                fileio.makedirs(posixpath.dirname(dst))
                fileio.copy(src, dst, overwrite=True)
            marker = PUBLISHED_MARKER
            fileio.copy(fileio.join(staging, marker), fileio.join(final, marker))
            fileio.rmtree(staging)
        else:
            fileio.rename(staging, final)
        return final

    def remove_staging(self) -> None:
        """Deletes the run's staging area ``.staging/`` when the run ends, however it ends.

        Each stage publishes or discards its own staging folder, so nothing left there is
        an artifact (tf.Transform's temporary files are). Best effort: a folder that cannot
        be deleted is logged, never raised over the run's own outcome.
        """
        staging = fileio.join(self.root, ".staging")
        try:
            if fileio.exists(staging):
                fileio.rmtree(staging)
        except Exception as e:  # noqa: BLE001  OSError or TensorFlow's OpError
            logging.getLogger(__name__).warning("Could not delete %s (%s).", staging, e)

    def discard(self, staging: str) -> None:
        """Deletes a staging folder (a failed or abandoned artifact).

        Stages call it while their own error propagates, so a folder that cannot be
        deleted is logged, never raised over that error (:meth:`remove_staging` tries
        again when the run ends).
        """
        try:
            if fileio.exists(staging):
                fileio.rmtree(staging)
        except Exception as e:  # noqa: BLE001  OSError or TensorFlow's OpError
            logging.getLogger(__name__).warning("Could not delete %s (%s).", staging, e)


def _walk_files(top: str) -> list[str]:
    out = []
    for dirpath, _, files in fileio.walk(top):
        out.extend(fileio.join(dirpath, f) for f in files)
    return out
