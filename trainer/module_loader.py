"""Loads a user's module file and finds its training entry point, with errors a user can act on.

A module file trains a model in one of two ways: a TFX-style ``run_fn(fn_args)``, or one
subclass of :class:`trainer.TrainSpec` (the runner owns the loop). ``trainer_fn``
(tf.estimator) is refused: tf.estimator is gone from TensorFlow 2.16+. The launcher checks
the module with :func:`check_trainer_module` before any Beam work starts; the worker loads it
again with :func:`load_trainer_module` (from the source carried in the job when the file is
not on the worker's disk). Files are executed by :func:`beam_pipeline.core.user_module.load_module`,
the same loader the Transform stage uses.

Example::

    kind = check_trainer_module("penguin_module.py")      # ModuleKind.RUN_FN
    module = load_trainer_module("penguin_module.py")
    module.run_fn(fn_args)
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import os
import posixpath
import tempfile
import types
from collections.abc import Callable
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import StagedModule, fetch_module_folder, fetch_staged_module
from beam_pipeline.core.user_module import error_place, load_module, loaded_module
from trainer.spec import TrainSpec

__all__ = [
    "ModuleKind",
    "TrainerModule",
    "check_trainer_module",
    "check_no_misspelled_run_fn",
    "load_trainer_module",
    "error_place",
]


class ModuleKind(str, enum.Enum):
    """How a module file trains a model."""

    RUN_FN = "run_fn"
    SPEC = "spec"
    NONE = "none"


@dataclasses.dataclass(frozen=True)
class TrainerModule:
    """A loaded module file and its training entry point.

    Attributes:
      path: the module file as the user named it (used in messages).
      module: the executed Python module.
      kind: RUN_FN, SPEC or NONE (no training entry point).
      run_fn: the ``run_fn`` when kind is RUN_FN.
      spec_class: the TrainSpec subclass when kind is SPEC.
    """

    path: str
    module: types.ModuleType
    kind: ModuleKind
    run_fn: Optional[Callable] = None
    spec_class: Optional[type[TrainSpec]] = None


def _tfx_import_line(source: str) -> Optional[int]:
    """The first line of ``source`` that imports tfx, or None (also for unparsable source)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n.split(".")[0] == "tfx" for n in names):
            return node.lineno
    return None


def _execute(display: str, path: str, folder: Optional[str] = None) -> types.ModuleType:
    """Imports the file with the runner's module loader; a tfx import gets its own advice."""
    try:
        return load_module(path, display=display, folder=folder)
    except PipelineError as e:
        if "No module named 'tfx" not in str(e):
            raise

        with fileio.open(path) as f:
            line = _tfx_import_line(f.read())
        where = f"{display}:{line}" if line else display
        raise PipelineError(
            f"Module file {where} imports tfx, which beam-pipeline does not use; "
            "replace tfx.components.FnArgs/DataAccessor/TunerFnResult with "
            "`from trainer import FnArgs, DataAccessor, TunerFnResult`, and `from tfx "
            "import v1 as tfx` with `from trainer import tfx_v1 as tfx` (only the import "
            "lines need to change)."
        ) from None


def _spec_classes(module: types.ModuleType) -> dict[str, type[TrainSpec]]:
    return {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, TrainSpec)
        and obj.__module__ == module.__name__
        and not inspect.isabstract(obj)
    }


def _check_run_fn(display: str, run_fn: object) -> Callable:
    if not callable(run_fn):
        raise PipelineError(
            f"Module file {display} has a run_fn that is not a function; define "
            "`def run_fn(fn_args):` there."
        )
    try:
        inspect.signature(run_fn).bind(None)
    except TypeError:
        line = getattr(getattr(run_fn, "__code__", None), "co_firstlineno", "?")
        raise PipelineError(
            f"run_fn in {display}:{line} must take exactly one argument; change it to "
            "`def run_fn(fn_args):`."
        ) from None
    except ValueError:  # a builtin without a signature: let the call decide.
        pass
    return run_fn  # type: ignore[return-value]


def _resolve(display: str, module: types.ModuleType, entry_point: Optional[str]) -> TrainerModule:
    specs = _spec_classes(module)
    if entry_point:
        obj = getattr(module, entry_point, None)
        if obj is None:
            raise PipelineError(
                f"Module file {display} has no {entry_point!r} to train with; name its "
                "run_fn or one of its TrainSpec subclasses as the entry point."
            )
        if inspect.isclass(obj) and issubclass(obj, TrainSpec):
            return TrainerModule(display, module, ModuleKind.SPEC, spec_class=obj)
        return TrainerModule(display, module, ModuleKind.RUN_FN, run_fn=_check_run_fn(display, obj))
    if hasattr(module, "run_fn"):
        # run_fn wins when both are defined: it is what a TFX module file means.
        run_fn = _check_run_fn(display, module.run_fn)
        return TrainerModule(display, module, ModuleKind.RUN_FN, run_fn=run_fn)
    if len(specs) > 1:
        raise PipelineError(
            f"Module file {display} defines several TrainSpec subclasses ({', '.join(specs)}) "
            "and no run_fn; keep one, or pass the one to use as the trainer entry point."
        )
    if specs:
        (spec_class,) = specs.values()
        return TrainerModule(display, module, ModuleKind.SPEC, spec_class=spec_class)
    if hasattr(module, "trainer_fn"):
        raise PipelineError(
            f"Module file {display} defines trainer_fn, which needs tf.estimator, and "
            "tf.estimator was removed in TensorFlow 2.16; rewrite it as run_fn(fn_args) that "
            "trains a Keras model and saves it to fn_args.serving_model_dir."
        )
    return TrainerModule(display, module, ModuleKind.NONE)


# The module file's other entry points: never a misspelled run_fn (tuner_fn is as close to
# run_fn as run_function is).
_OTHER_ENTRY_POINTS = {"preprocessing_fn", "tuner_fn", "stats_options_updater_fn", "trainer_fn"}


def check_no_misspelled_run_fn(loaded: TrainerModule) -> None:
    """Refuses a module with no training entry point but a function whose name looks like
    a misspelled ``run_fn`` (run_function, runfn, run_fm): it would silently train nothing.

    Raises:
      PipelineError: naming the function and the fix.
    """
    near = _near_run_fn(loaded.module) if loaded.kind is ModuleKind.NONE else None
    if near:
        raise PipelineError(
            f"Module file {loaded.path} defines {near}() but no run_fn; did you mean run_fn? "
            f"Rename it to run_fn, or pass --trainer_entry_point={near} to train with it."
        )


def _near_run_fn(module: types.ModuleType) -> Optional[str]:
    """The module's public function whose name is closest to ``run_fn``, if close."""
    import difflib

    names = [
        name
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
        and name not in _OTHER_ENTRY_POINTS
    ]
    close = difflib.get_close_matches("run_fn", names, n=1, cutoff=0.65)
    return close[0] if close else None


def load_trainer_module(
    module_file: str,
    *,
    source: Optional[str] = None,
    entry_point: Optional[str] = None,
    staged: Optional[StagedModule] = None,
) -> TrainerModule:
    """Executes a module file and finds how it trains.

    A module file already executed in this process with the same bytes is not executed
    again (see :func:`beam_pipeline.core.user_module.load_module`).

    Args:
      module_file: the module file's path as the user gave it.
      source: the file's text, used when ``module_file`` is not readable here (a worker
        that does not share the launcher's disk): it is written to a temporary file of the
        same name and loaded from there.
      entry_point: the name of the ``run_fn``-like function or TrainSpec subclass to use;
        by default ``run_fn``, else the module's only TrainSpec subclass.
      staged: the run's staged copy (on a worker): the module is executed from a local
        copy of the staged module folder, which goes on ``sys.path`` so its helper modules
        import, and is compiled under ``module_file`` so tracebacks name the user's file.

    Returns:
      the loaded :class:`TrainerModule`; its kind is NONE when there is nothing to train.

    Raises:
      PipelineError: the file is missing, has a syntax error, fails to import, defines
        only ``trainer_fn``, has a ``run_fn`` with the wrong signature, or several specs.
    """

    if staged is not None:
        module = loaded_module(module_file, staged.sha256)
        if module is None:
            module = _execute(module_file, *_staged_copy(staged))
        return _resolve(module_file, module, entry_point)
    path = module_file
    if source is not None and not fileio.exists(module_file):
        folder = tempfile.mkdtemp(prefix="beam_pipeline_module_")
        path = os.path.join(folder, os.path.basename(module_file))
        with open(path, "w") as f:
            f.write(source)
    module = _execute(module_file, path)
    return _resolve(module_file, module, entry_point)


def _staged_copy(staged: StagedModule) -> tuple[str, Optional[str]]:
    """(the module file to execute, the folder to put on sys.path) for a staged module."""
    if not staged.folder_archive:
        return fetch_staged_module(staged.path, staged.sha256), None
    folder = fetch_module_folder(staged.folder_archive, staged.folder_sha256)
    return os.path.join(folder, posixpath.basename(staged.path)), folder


def check_trainer_module(
    module_file: str,
    *,
    required: bool = False,
    entry_point: Optional[str] = None,
    staged: Optional[StagedModule] = None,
) -> ModuleKind:
    """Loads and checks a module file before any Beam work; returns how it trains.

    Args:
      module_file: the module file's path.
      required: raise when the module has no training entry point (the user asked for
        training explicitly); otherwise NONE means "run the data stages only".
      entry_point, staged: as in :func:`load_trainer_module`.

    Raises:
      PipelineError: as :func:`load_trainer_module`, or no entry point when ``required``.
    """
    kind = load_trainer_module(module_file, entry_point=entry_point, staged=staged).kind
    if required and kind is ModuleKind.NONE:
        raise PipelineError(
            f"Module file {module_file} defines no run_fn(fn_args) and no TrainSpec subclass; "
            "add one to train a model, or leave out the trainer flags to run the data "
            "stages only."
        )
    return kind
