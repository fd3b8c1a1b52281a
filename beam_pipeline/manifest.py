"""The run manifest: a run's identity and, per finished stage, what it was built from.

``<run_dir>/manifest.json`` is written when a run directory is created and again each time
a stage finishes. It holds:

- ``identity``: what the run's results depend on: the input data's content digest (with
  ExampleGen's settings), the module file's content digest and that of the Python files
  beside it (its helpers, staged for the workers with it), and every other flag of ours
  that shapes an artifact (files such as ``--hyperparameters`` by their content). Not in
  it: ``--pipeline_root``, ``--run_id``, ``--ignore_anomalies`` (it decides whether the run
  goes on, not what any artifact holds) and Beam's own flags (the runner, its workers).
- ``stages``: per finished stage, its artifacts, ``built_from`` (the digests and settings
  it was made from: upstream stages' keys, the data, the module, its parameters), ``key``
  (the digest of ``built_from``, a cache key) and its summary rows.

A rerun with the same ``--run_id`` resumes: :meth:`RunManifest.open` refuses it, before
anything is written, when its identity differs from the recorded one; a stage whose record
matches and whose artifacts are all still published is reported ``cached``; the first
stage that is not is rerun, and what it and the stages after it had published is removed
first (the trainer's checkpoints excepted when only the trainer itself reruns: training
resumes from them).

Example::

    manifest = RunManifest.open(run_dir, run_identity(config, inputs.fingerprint, module))
    reports = manifest.cached(Stage.SCHEMA, built_from)
    if reports is None:
        manifest.invalidate(Stage.SCHEMA)
        ...  # run the stage
        manifest.record(Stage.SCHEMA, built_from, [report])
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.config import PipelineConfig
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.fingerprint import file_digest, folder_digest, json_digest
from beam_pipeline.run_dir import RunDirectory
from beam_pipeline.summary import StageReport, StageStatus

__all__ = [
    "MANIFEST_FILE",
    "Stage",
    "STAGE_ARTIFACTS",
    "RunManifest",
    "run_identity",
    "stage_key",
]

MANIFEST_FILE = "manifest.json"
_FORMAT = 1


class Stage(str, enum.Enum):
    """The units a run resumes by, in the order they run."""

    DATA = "ExampleGen+Statistics"
    SCHEMA = "Schema"
    VALIDATION = "Validation"
    TRANSFORM = "Transform"
    TUNER = "Tuner"
    TRAINER = "Trainer"


STAGE_ARTIFACTS: Mapping[Stage, tuple[Artifact, ...]] = {
    Stage.DATA: (Artifact.EXAMPLES, Artifact.REJECTED, Artifact.STATISTICS),
    Stage.SCHEMA: (Artifact.SCHEMA,),
    Stage.VALIDATION: (Artifact.ANOMALIES,),
    Stage.TRANSFORM: (Artifact.TRANSFORM_GRAPH, Artifact.TRANSFORMED_EXAMPLES),
    Stage.TUNER: (Artifact.TUNER,),
    Stage.TRAINER: (Artifact.MODEL, Artifact.MODEL_RUN),
}
_ORDER = list(Stage)


def _plain(value: Any) -> Any:
    """Config values as JSON: enums by value, tuples as lists, other objects by repr."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def run_identity(
    config: PipelineConfig,
    data_fingerprint: str,
    module_digest: Optional[str],
    module_folder_digest: Optional[str] = None,
) -> dict[str, Any]:
    """What a run's results depend on (see the module docstring), as a JSON object.

    Args:
      config: the run's configuration.
      data_fingerprint: the input's content digest with ExampleGen's settings
        (``DataInputs.fingerprint``).
      module_digest: the module file's SHA-256, or None without a module file.
      module_folder_digest: the SHA-256 of the module's folder's Python files as staged
        for the workers (``ModuleBundle.archive_sha256``: its helper modules).
    """
    trainer = dataclasses.replace(
        config.trainer,
        hyperparameters=(
            file_digest(config.trainer.hyperparameters) if config.trainer.hyperparameters else None
        ),
        base_model=folder_digest(config.trainer.base_model) if config.trainer.base_model else None,
    )
    return {
        "data": data_fingerprint,
        "module_file": module_digest,
        "module_folder": module_folder_digest,
        "transform": _plain(config.transform),
        "trainer": _plain(trainer),
        "tuner": _plain(config.tuner),
    }


def _difference(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What differs between two identities, in words, for the refusal's message."""
    if recorded.get("data") != current.get("data"):
        return "the input data's content or ExampleGen's settings"
    if recorded.get("module_file") != current.get("module_file"):
        return "the module file's content"
    if recorded.get("module_folder") != current.get("module_folder"):
        return "the Python files beside the module file (its helper modules)"
    for section in ("transform", "trainer", "tuner"):
        old, new = recorded.get(section) or {}, current.get(section) or {}
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                return f"the {section} setting {name!r}"
    return "the manifest's format"


def stage_key(stage: Stage, built_from: Mapping[str, Any]) -> str:
    """A stage's cache key: the digest of its name and what it is built from."""
    return json_digest({"stage": stage.value, "built_from": built_from})


class RunManifest:
    """``<run_dir>/manifest.json``: read on a rerun, rewritten atomically on each change.

    Attributes:
      run_dir: the run directory.
      identity: the run's identity (see :func:`run_identity`).
      stages: per finished stage (by :class:`Stage` value), its record.
      resumed: True when the run directory existed already (a rerun).
    """

    def __init__(self, run_dir: RunDirectory, identity: dict[str, Any], stages=None, resumed=False):
        self.run_dir = run_dir
        self.identity = identity
        self.stages: dict[str, dict[str, Any]] = dict(stages or {})
        self.resumed = resumed

    @property
    def path(self) -> str:
        return fileio.join(self.run_dir.root, MANIFEST_FILE)

    @classmethod
    def open(
        cls, pipeline_root: str, run_id: str, identity: dict[str, Any]
    ) -> tuple[RunDirectory, RunManifest]:
        """Creates a run directory with its manifest, or reopens one to resume it.

        Nothing is written before the checks: a refused rerun leaves the earlier run's files
        as they were.

        Raises:
          PipelineError: the run directory exists and was started with another identity,
            or holds published artifacts but no manifest (made by an older version).
        """
        if run_id:
            run_dir = RunDirectory(pipeline_root, run_id)
            path = fileio.join(run_dir.root, MANIFEST_FILE)
            if fileio.exists(path):
                with fileio.open(path) as f:
                    recorded = json.load(f)
                if recorded.get("format") != _FORMAT or recorded.get("identity") != identity:
                    what = _difference(recorded.get("identity") or {}, identity)
                    raise PipelineError(
                        f"Run directory {run_dir.root} was started with other inputs ({what} "
                        "differs); rerun with that run's data, module file and flags to resume "
                        "it, or pass a new --run_id (or none) to start a fresh run."
                    )
                # What a killed attempt was writing: never published, never to be read.
                run_dir.remove_staging()
                return run_dir, cls(run_dir, identity, recorded.get("stages"), resumed=True)
            published = [a.value for a in Artifact if run_dir.is_published(a)]
            if published:
                raise PipelineError(
                    f"Run directory {run_dir.root} holds artifacts ({', '.join(published)}) but "
                    f"no {MANIFEST_FILE} to check a resume against (an older version made it); "
                    "pass a new --run_id (or none) to start a fresh run."
                )
        run_dir = RunDirectory.create(pipeline_root, run_id)
        run_dir.remove_staging()  # left by an attempt killed before it wrote its manifest
        manifest = cls(run_dir, identity)
        manifest._write()
        return run_dir, manifest

    def has(self, stage: Stage) -> bool:
        """Whether ``stage`` finished in an earlier attempt (its artifacts not checked)."""
        return stage.value in self.stages

    def cached(self, stage: Stage, built_from: Mapping[str, Any]) -> Optional[list[StageReport]]:
        """The stage's summary rows, as CACHED, when an earlier attempt of this run finished it.

        A hit needs the stage's record with the same key and each of its artifacts still
        published; anything else is a miss (None), never an error.
        """
        record = self.stages.get(stage.value)
        if record is None or record.get("key") != stage_key(stage, built_from):
            return None
        if not all(self.run_dir.is_published(Artifact(a)) for a in record.get("artifacts", [])):
            return None
        reports = []
        for row in record.get("reports", []):
            report = StageReport.from_json(row)
            report.seconds = 0.0
            if report.status is StageStatus.SKIPPED:  # decided again the same way
                reports.append(report)
                continue
            report.status = StageStatus.CACHED
            note = f"kept from an earlier attempt of run {self.run_dir.run_id}"
            report.note = f"{note}; {report.note}" if report.note else note
            report.details = dict(report.details, cached_from=record.get("finished"))
            reports.append(report)
        return reports

    def record(
        self,
        stage: Stage,
        built_from: Mapping[str, Any],
        reports: Sequence[StageReport],
        outcome: Optional[Mapping[str, Any]] = None,
        artifacts: Optional[Sequence[Artifact]] = None,
    ) -> str:
        """Records a finished stage (its artifacts published); returns its key.

        Args:
          stage: the stage.
          built_from: what it was made from (see the module docstring).
          reports: its summary rows, shown again (as cached) by a resume.
          outcome: facts a resume needs besides the artifacts (e.g. Validation's
            blocking-anomalies message).
          artifacts: what it published (default: all of the stage's; none for a skipped
            stage, which is recorded too, so that what follows it is kept on a resume).
        """
        key = stage_key(stage, built_from)
        self.stages[stage.value] = {
            "key": key,
            "built_from": dict(built_from),
            "artifacts": [
                a.value for a in (STAGE_ARTIFACTS[stage] if artifacts is None else artifacts)
            ],
            "reports": [r.to_json() for r in reports],
            "outcome": dict(outcome or {}),
            "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        self._write()
        return key

    def invalidate(self, stage: Stage) -> None:
        """Forgets ``stage`` and every later one and removes what they had published.

        The trainer's own ``model_run/`` (its checkpoints) is kept when the trainer itself
        is the stage that reruns: training resumes from it. It goes when an earlier stage
        reruns, since its checkpoints belong to that stage's earlier output.
        """
        later = _ORDER[_ORDER.index(stage) :]
        for each in later:
            self.stages.pop(each.value, None)
            for artifact in STAGE_ARTIFACTS[each]:
                if each is stage is Stage.TRAINER:
                    continue
                path = self.run_dir.path(artifact)
                if fileio.exists(path):
                    fileio.rmtree(path)
        self._write()

    def _write(self) -> None:
        body = {
            "format": _FORMAT,
            "run_id": self.run_dir.run_id,
            "identity": self.identity,
            "stages": self.stages,
        }
        fileio.write_atomic(self.path, json.dumps(body, indent=2, default=str))
