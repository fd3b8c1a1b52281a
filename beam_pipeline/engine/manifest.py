"""The run manifest: a run's identity and, per finished stage, what it was built from.

``<run_dir>/manifest.json`` is written when a run directory is created and again each time
a stage finishes. It holds:

- ``identity``: what the run's results depend on: the input data's content digest (with
  ExampleGen's settings), the module file's content digest and that of the Python files
  beside it (its helpers, staged for the workers with it), and every other flag of ours
  that shapes an artifact (files such as ``--hyperparameters`` by their content). Not in
  it: ``--pipeline_root``, ``--run_id``, ``--ignore_anomalies`` (it decides whether the run
  goes on, not what any artifact holds) and the run's Beam flags (the runner, its
  workers). The per-stage Beam flags (``stage_beam_args``) are in it when given: a resume
  runs the remaining stages where the run was set up to run them.
- ``stages``: per finished stage (an :class:`~beam_pipeline.engine.execution.Execution`),
  its input and output artifacts (typed, with their properties), ``built_from`` (the
  digests and settings it was made from: upstream stages' keys, the data, the module, its
  parameters), ``key`` (the digest of ``built_from``, a cache key), its summary rows and
  outcome.

A rerun with the same ``--run_id`` resumes: :meth:`RunManifest.open` refuses it, before
anything is written, when its identity differs from the recorded one. The manifest is then
the first place the stage runner's records
(:class:`~beam_pipeline.engine.run_records.RunRecords`) look a stage up in: a stage whose
record has the same key and whose outputs are all still published is reported ``cached``;
a stage that is not is rerun, and what it and the stages that depend on it had published
is removed first (the trainer's checkpoints excepted when only the trainer itself reruns:
training resumes from them); see :mod:`beam_pipeline.engine.runner`.

Example::

    run_dir, manifest = RunManifest.open(root, run_id, run_identity(config, data, module))
    records = RunRecords(manifest, store, run, data)   # the manifest, then the store
    run_stages(STAGE_GRAPH, ctx, records, summary)
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.secrets import mask_json
from beam_pipeline.core.settings import settings_of
from beam_pipeline.engine.artifacts import artifact_types
from beam_pipeline.engine.config import PipelineConfig, identity_sections
from beam_pipeline.engine.execution import Execution
from beam_pipeline.engine.fingerprint import file_digest, folder_digest
from beam_pipeline.engine.run_dir import RunDirectory

__all__ = ["MANIFEST_FILE", "RunManifest", "run_identity"]

MANIFEST_FILE = "manifest.json"
_FORMAT = 1


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
    identity: dict[str, Any] = {
        "data": data_fingerprint,
        "module_file": module_digest,
        "module_folder": module_folder_digest,
    }
    for key in identity_sections():
        section = config.section(key)
        values = {}
        for name, s in settings_of(type(section)):
            if not s.identity:
                continue
            value = getattr(section, name)
            if value and s.digest == "file":
                value = file_digest(value)
            elif value and s.digest == "folder":
                value = folder_digest(value)
            if s.secret_keys and isinstance(value, str):
                value = mask_json(value)  # recorded: manifest.json, the store's parameters
            values[name] = _plain(value)
        identity[key] = values
    if config.stage_beam_args:  # only then: the runs before it keep their identity
        identity["stage_beam_args"] = {s: list(flags) for s, flags in config.stage_beam_args}
    return identity


def _difference(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What differs between two identities, in words, for the refusal's message."""
    if recorded.get("data") != current.get("data"):
        return "the input data's content or ExampleGen's settings"
    if recorded.get("module_file") != current.get("module_file"):
        return "the module file's content"
    if recorded.get("module_folder") != current.get("module_folder"):
        return "the Python files beside the module file (its helper modules)"
    if recorded.get("stage_beam_args") != current.get("stage_beam_args"):
        return "the per-stage Beam flags (stage_beam_args)"
    for section in sorted(set(recorded) | set(current)):
        if section in ("data", "module_file", "module_folder", "stage_beam_args"):
            continue
        old, new = recorded.get(section) or {}, current.get(section) or {}
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                return f"the {section} setting {name!r}"
    return "the manifest's format"


class RunManifest:
    """``<run_dir>/manifest.json``: read on a rerun, rewritten atomically on each change.

    Attributes:
      run_dir: the run directory.
      identity: the run's identity (see :func:`run_identity`).
      stages: per finished stage (by name), its record.
      resumed: True when the run directory existed already (a rerun).
    """

    def __init__(self, run_dir: RunDirectory, identity: dict[str, Any], stages=None, resumed=False):
        self.run_dir = run_dir
        self.identity = identity
        self.stages: dict[str, dict[str, Any]] = dict(stages or {})
        self.resumed = resumed
        # The stages' names in graph order (set by whoever runs the graph): the manifest
        # lists them so, whatever order stages running at once ended in.
        self.order: list[str] = []

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
            folders = sorted({t.folder_name() for t in artifact_types().values()})
            published = [f for f in folders if run_dir.is_published(f)]
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

    def has(self, stage: str) -> bool:
        """Whether ``stage`` finished in an earlier attempt (its artifacts not checked)."""
        return stage in self.stages

    def lookup(self, stage: str, key: str) -> Optional[Execution]:
        """The stage's execution in an earlier attempt of this run, when its key is ``key``.

        Anything else is a miss (None), never an error: no record, another key, or a record
        without typed outputs (written by an older version). The runner checks that its
        outputs are still published.
        """
        record = self.stages.get(stage)
        if record is None or record.get("key") != key or "outputs" not in record:
            return None
        return Execution.from_json(stage, key, self.run_dir.run_id, record)

    def forget(self, stages: Sequence[str]) -> None:
        """Drops the records of ``stages`` (they rerun) and rewrites the manifest."""
        for stage in stages:
            self.stages.pop(stage, None)
        self._write()

    def record(self, execution: Execution) -> None:
        """Records a finished stage (its outputs published) and rewrites the manifest.

        A skipped stage is recorded too (without outputs), so that what follows it is kept
        on a resume.
        """
        kept = execution.to_json()
        self.stages[execution.stage] = {
            "key": execution.key,
            "built_from": kept.pop("built_from"),
            "artifacts": [a.folder_name() for a in execution.outputs],
            **kept,
        }
        # In graph order, whatever order stages running at once ended in.
        order = {name: i for i, name in enumerate(self.order)}
        self.stages = dict(sorted(self.stages.items(), key=lambda kv: order.get(kv[0], len(order))))
        self._write()

    def _write(self) -> None:
        body = {
            "format": _FORMAT,
            "run_id": self.run_dir.run_id,
            "identity": self.identity,
            "stages": self.stages,
        }
        fileio.write_atomic(self.path, json.dumps(body, indent=2, default=str))
