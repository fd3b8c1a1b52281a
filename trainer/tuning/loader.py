"""Loading a search's tuner: the module's ``tuner_fn``, or a config search space over a TrainSpec.

Runs in the launcher (whose tuner drives the oracle) and once per worker process (whose
tuner runs the trials). Either way the tuner's project folder is pointed at
``<tuner_dir>/<project_name>``, so every process reads and writes the same oracle state,
trial checkpoints and results.

Example::

    loaded = load_tuner(job, job.tuner_dir)       # TunerFnResult(tuner=..., fit_kwargs={...})
    loaded.tuner.oracle                            # what the launcher drives
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from trainer.data_accessor import DataAccessor
from trainer.fn_args import FnArgs, TunerFnResult
from trainer.job import common_fn_args
from trainer.module_loader import ModuleKind, error_place
from trainer.tuning.hypermodel import spec_tuner
from trainer.tuning.messages import TuningJob

if TYPE_CHECKING:
    import keras_tuner

__all__ = ["load_tuner", "load_tuner_with_path", "set_project_dir"]

_LOG = logging.getLogger(__name__)


def _fn_args(job: TuningJob, working_dir: str, strategy=None) -> FnArgs:
    accessor = DataAccessor(telemetry_descriptors=("beam_pipeline", "Tuner"))
    rule = job.early_stopping
    return common_fn_args(
        job,
        working_dir,
        strategy=strategy,
        data_accessor=accessor,
        early_stopping=rule.rule.value if rule.enabled else None,
    )


def load_tuner(job: TuningJob, working_dir: str, *, strategy=None) -> TunerFnResult:
    """Loads the module file and calls its ``tuner_fn`` with the tuning ``FnArgs``.

    The tuner's project folder is then set to ``<job.tuner_dir>/<project_name>`` whatever
    ``directory`` the module gave it, so every process reads and writes the same one.

    Args:
      job: the tuning job.
      working_dir: ``fn_args.working_dir``: the tuner folder on the launcher; a folder of
        its own per worker process (so a tuner created with ``overwrite=True`` clears only
        that folder, never the shared project).
      strategy: reaches ``fn_args.strategy``.

    Returns:
      the :class:`TunerFnResult` (``fit_kwargs`` as a dict).

    Raises:
      PipelineError: the module file fails to load, defines no ``tuner_fn``, or
        ``tuner_fn`` raises or returns something other than a tuner and fit_kwargs.
    """
    return load_tuner_with_path(job, working_dir, strategy)[0]


def load_tuner_with_path(
    job: TuningJob, working_dir: str, strategy=None
) -> tuple[TunerFnResult, str]:
    """:func:`load_tuner`, plus the path the module was executed from (for error places)."""
    import keras_tuner

    loaded = job.load_module()
    tuner_fn = getattr(loaded.module, "tuner_fn", None)
    if callable(tuner_fn) and job.search_space is not None:
        raise PipelineError(
            f"Module file {job.module_file} defines tuner_fn and the pipeline config declares "
            "a search_space; keep one of them."
        )
    if job.search_space is not None:
        if loaded.kind is not ModuleKind.SPEC:
            raise PipelineError(
                f"The pipeline config declares a search_space but module file "
                f"{job.module_file} trains with {loaded.kind.value}, not a TrainSpec subclass; "
                "define tuner_fn(fn_args) instead, or train with a TrainSpec."
            )
        fn_args = _fn_args(job, working_dir, strategy)
        result = spec_tuner(loaded.spec_class, job.search_space, fn_args)
        return result, str(loaded.module.__file__ or job.module_file)
    if not callable(tuner_fn):
        raise PipelineError(
            f"Module file {job.module_file} defines no tuner_fn(fn_args); add one that returns "
            "TunerFnResult(tuner=..., fit_kwargs=...), or pass --no_tuner."
        )
    try:
        result = tuner_fn(_fn_args(job, working_dir, strategy))
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001  user code: say where it failed
        where = error_place(e, loaded.module.__file__ or job.module_file, job.module_file)
        _LOG.exception("tuner_fn in %s failed.", job.module_file)
        raise PipelineError(
            f"tuner_fn in {where} raised {type(e).__name__} ({first_line(e)}); fix the module "
            "file (the full traceback is in the log)."
        ) from None
    tuner = getattr(result, "tuner", None)
    fit_kwargs = getattr(result, "fit_kwargs", None)
    if not isinstance(tuner, keras_tuner.engine.base_tuner.BaseTuner) or not isinstance(
        fit_kwargs, Mapping
    ):
        raise PipelineError(
            f"tuner_fn in {job.module_file} returned {type(result).__name__}, not "
            "TunerFnResult(tuner=<a keras_tuner tuner>, fit_kwargs=<dict>); return "
            "`TunerFnResult(tuner=tuner, fit_kwargs={...})` (from trainer import TunerFnResult)."
        )
    project_dir = fileio.join(job.tuner_dir, tuner.project_name)
    if os.path.normpath(str(tuner.project_dir)) != os.path.normpath(project_dir):
        set_project_dir(tuner, project_dir)
    return TunerFnResult(tuner=tuner, fit_kwargs=dict(fit_kwargs)), str(
        loaded.module.__file__ or job.module_file
    )


def set_project_dir(tuner: keras_tuner.engine.base_tuner.BaseTuner, project_dir: str) -> None:
    """Points the tuner and its oracle at ``project_dir`` (what their constructor does)."""
    directory, name = (
        posixpath.split(project_dir) if "://" in project_dir else os.path.split(project_dir)
    )
    tuner.directory = directory
    tuner.project_name = name
    tuner.oracle._set_project_dir(directory, name)  # pylint: disable=protected-access
