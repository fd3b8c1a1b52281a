"""The run's typed configuration: its own settings plus one frozen section per stage.

Each stage declares its settings as a frozen Config dataclass
(:attr:`beam_pipeline.engine.stage.Stage.Config`, fields made by
:func:`beam_pipeline.core.settings.setting`) under a key (``config_key``, e.g.
``trainer``). A :class:`PipelineConfig` holds the run's own settings (root, run id,
module file, Beam flags, ...) and one instance of each stage's Config, read as an
attribute: ``config.trainer.train_steps``. A section not given is the stage's defaults.
Nothing here names a stage: the sections are whatever the stage declarations registered
(:func:`register_section`, called when a Stage subclass is defined).

Example::

    config = PipelineConfig(module_file="m.py", trainer=TrainerConfig(train_steps=10))
    config.trainer.train_steps          # 10
    config.replace(run_id="nightly")    # a copy with other settings
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import Setting, setting, settings_of

__all__ = [
    "PipelineConfig",
    "register_section",
    "section_classes",
    "identity_sections",
    "check_int",
    "check_seconds",
    "check_run_id",
]

# Stage config key -> its Config dataclass, as the stage declarations registered them.
_SECTIONS: dict[str, type] = {}
# The keys of the sections that are part of the run's identity.
_IDENTITY: set[str] = set()

# One path segment: a run id names a folder under <pipeline_root>/runs and nothing else.
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def register_section(key: str, cls: type, in_identity: bool = False) -> None:
    """Declares the Config dataclass of the stage section ``key`` (done by
    :class:`~beam_pipeline.engine.stage.Stage` for each subclass that has one);
    ``in_identity``: its settings are part of the run's identity."""
    known = _SECTIONS.get(key)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"two stages declare the config section {key!r}")
    _SECTIONS[key] = cls
    if in_identity:
        _IDENTITY.add(key)


def identity_sections() -> tuple[str, ...]:
    """The keys of the sections that are part of the run's identity, sorted."""
    return tuple(sorted(_IDENTITY))


def section_classes() -> dict[str, type]:
    """The registered sections: config key -> Config dataclass."""
    return dict(_SECTIONS)


def check_int(flag: str, value: object, minimum: int, why: str = "") -> None:
    """Refuses a value of an integer flag that is not a whole number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PipelineError(
            f"--{flag}={value!r} is out of range: pass a whole number of at least {minimum}{why}."
        )


def check_seconds(flag: str, value: object, example: str, unlimited: bool = False) -> None:
    """Refuses a number of seconds that is not a finite number above 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        tail = ", or leave it out for no limit" if unlimited else ""
        raise PipelineError(
            f"--{flag}={value} is not a positive number of seconds; pass e.g. "
            f"--{flag}={example}{tail}."
        )


def check_run_id(run_id: str) -> None:
    """Refuses a ``--run_id`` that is not one path segment of safe characters.

    Raises:
      PipelineError: ``run_id`` is empty, ``.``/``..``, holds a slash, or is an absolute
        path, any of which would write outside ``<pipeline_root>/runs/``.
    """
    if not isinstance(run_id, str) or not _RUN_ID_RE.fullmatch(run_id):
        raise PipelineError(
            f"--run_id={run_id!r} is not a run name: use 1 to 128 letters, digits, '.', '_' or "
            "'-' starting with a letter or digit (it names one folder under "
            "<pipeline_root>/runs), or leave it out for a timestamp."
        )


def _run_id(value: Any) -> str:
    # Given but empty is refused (left out, a timestamp is generated).
    text = str(value) if value is not None else ""
    check_run_id(text)
    return text


def _pipeline_name(value: Any) -> str:
    text = str(value) if value is not None else ""
    if len(text) > 255 or text != text.strip():
        raise PipelineError(
            f"--pipeline_name={text[:60]!r} is not a pipeline name: use at most 255 "
            "characters, without leading or trailing spaces."
        )
    return text


@dataclasses.dataclass(frozen=True, init=False)
class PipelineConfig:
    """The whole run's configuration: the run's own settings and the stages' sections.

    Attributes:
      module_file: the user's module (``preprocessing_fn``, ``run_fn``, ``tuner_fn``).
      max_module_folder_mib: the most the Python files of the module file's folder, staged
        with it for the workers, may weigh.
      pipeline_root: folder (or gs:// path) holding run directories and caches.
      run_id: the run directory's name under ``pipeline_root/runs``; generated when empty.
      beam_args: the Beam flags, passed through to ``PipelineOptions``.
      worker_start_timeout: seconds a job on a portable, Flink, Spark or Dataflow runner
        may go without a live worker before it is cancelled and the run fails.
      metadata_url: the metadata store's SQLAlchemy URL; empty: the SQLite file
        ``<pipeline_root>/metadata.sqlite``.
      pipeline_name: the name the run is recorded under in the metadata store, and whose
        records alone it reads (runs, cache hits, models, baselines); empty: the pipeline
        root's absolute path.
      no_cache: the stages (by name) that run even when an earlier execution's outputs
        could be reused.
      stage_beam_args: per stage (by name), Beam flags added after ``beam_args`` for that
        stage's jobs only (later flags win), TFX's ``with_beam_pipeline_args``.
      graph: ``--graph``: the stage graph of the user's own (``FILE.py:NAME`` or
        ``module:NAME``) that runs instead of the bundled one; "": the bundled one.
      sections: (config key, the stage's Config) of each section given; the others are
        their stage's defaults. Read a section as an attribute (``config.trainer``).
    """

    module_file: Optional[str] = setting(
        None,
        flag="module_file",
        help="Python file with preprocessing_fn / run_fn / tuner_fn.",
        path=True,
        identity=False,  # by content: the run's identity holds its digest
    )
    max_module_folder_mib: float = setting(
        20.0,
        flag="max_module_folder_mib",
        help="Most MiB of Python files in the module file's folder, staged for the workers.",
        kind="float",
        identity=False,
    )
    pipeline_root: str = setting(
        "pipeline_runs",
        flag="pipeline_root",
        help="Folder (or gs:// path) for runs and caches.",
        path=True,
        worker_path=True,
        identity=False,
    )
    run_id: str = setting(
        "",
        flag="run_id",
        help="Name of the run directory (default: timestamp).",
        parse=_run_id,
        identity=False,
    )
    beam_args: tuple[str, ...] = ()
    worker_start_timeout: float = setting(
        120.0,
        flag="worker_start_timeout",
        help="Seconds a job may go without a live worker before it fails.",
        kind="float",
        identity=False,
    )
    metadata_url: str = setting(
        "",
        flag="metadata_url",
        help="SQLAlchemy URL of the metadata store (default: SQLite "
        "<pipeline_root>/metadata.sqlite; e.g. postgresql+psycopg://user@host/db).",
        identity=False,
    )
    pipeline_name: str = setting(
        "",
        flag="pipeline_name",
        help="Name of the pipeline in the metadata store: its runs, cached stages, models and "
        "baselines are looked up under it (default: the pipeline root's absolute path; give "
        "the same name to several roots to share them on purpose).",
        parse=_pipeline_name,
        identity=False,
    )
    no_cache: tuple[str, ...] = setting(
        (),
        flag="no_cache",
        help="Run these stages (comma-separated, e.g. Tuner,Trainer; all of them without a "
        "value) even when an earlier run's outputs could be reused.",
        kind="optional",
        const="all",
        identity=False,
    )
    stage_beam_args: tuple[tuple[str, tuple[str, ...]], ...] = setting(
        (),
        flag="stage_beam_args",
        help="A Beam flag for one stage's jobs only, after the run's (later flags win), e.g. "
        "--stage_beam_args=Trainer:--machine_type=a2-highgpu-1g; repeat it for more. In "
        "--config: stage_beam_args: {Trainer: [--machine_type=a2-highgpu-1g]}.",
        kind="append",
        metavar="STAGE:--FLAG=VALUE",
        identity=False,  # in the run's identity when given (engine.manifest)
    )
    graph: str = ""
    sections: tuple[tuple[str, Any], ...] = ()

    def __init__(self, **kwargs: Any):
        own = {f.name for f in dataclasses.fields(PipelineConfig)}
        sections = dict(kwargs.pop("sections", ()))
        for key in [k for k in kwargs if k not in own]:
            sections[key] = kwargs.pop(key)
        for f in dataclasses.fields(PipelineConfig):
            if f.name == "sections":
                continue
            value = kwargs.pop(f.name) if f.name in kwargs else f.default
            object.__setattr__(self, f.name, value)
        for key, section in sections.items():
            cls = _SECTIONS.get(key)
            if cls is not None and not isinstance(section, cls):
                raise TypeError(f"config section {key!r} must be a {cls.__name__}")
        object.__setattr__(self, "sections", tuple(sorted(sections.items())))
        self._check()

    def __getattr__(self, name: str) -> Any:
        # Only called when normal look-up fails: a stage's section by its key.
        if name.startswith("__"):
            raise AttributeError(name)
        for key, section in self.__dict__.get("sections", ()):
            if key == name:
                return section
        cls = _SECTIONS.get(name)
        if cls is None:
            raise AttributeError(
                f"PipelineConfig has no setting or stage section {name!r} (sections: "
                f"{', '.join(sorted(_SECTIONS)) or 'none declared'})"
            )
        return cls()

    def replace(self, **changes: Any) -> PipelineConfig:
        """A copy with ``changes`` (run settings, or whole sections by key)."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(PipelineConfig)}
        return PipelineConfig(**{**current, **changes})

    def section(self, key: str) -> Any:
        """The stage section ``key`` (its defaults when not given)."""
        return getattr(self, key)

    def settings(self) -> Iterator[tuple[str, str, Setting, Any]]:
        """(section key, field, Setting, value) of every declared setting: the run's own
        (section key "") and each registered section's."""
        for name, s in settings_of(PipelineConfig):
            yield "", name, s, getattr(self, name)
        for key in sorted(_SECTIONS):
            section = self.section(key)
            for name, s in settings_of(type(section), key):
                yield key, name, s, getattr(section, name)

    def _check(self) -> None:
        if self.run_id:  # empty: a timestamp is generated
            check_run_id(self.run_id)
        mib = self.max_module_folder_mib
        if isinstance(mib, bool) or not isinstance(mib, (int, float)) or not 0 < mib < math.inf:
            raise PipelineError(
                f"--max_module_folder_mib={mib!r} is out of range: pass a number of MiB above 0."
            )
        check_seconds("worker_start_timeout", self.worker_start_timeout, "120")
