"""Loading the user's module file, with errors that name the file, the line and the fix.

Example::

    module = load_module("my_module.py")
    preprocessing_fn = get_preprocessing_fn(module, "my_module.py")
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import site
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.keras3 import use_keras_3

__all__ = [
    "load_module",
    "loaded_module",
    "get_preprocessing_fn",
    "error_place",
    "pickle_by_value",
    "installed_code_roots",
    "is_installed_code",
]


def _read(path: str) -> bytes:

    if not fileio.exists(path):
        raise PipelineError(
            f"Module file {path} does not exist; pass an existing Python file with --module_file."
        )
    with fileio.open(path, "rb") as f:
        return f.read()


def _module_name(display: str, sha256: str) -> str:
    """The ``sys.modules`` name of a module file: from the name it is shown by and its bytes."""
    return "user_module_" + hashlib.sha256(f"{display}\0{sha256}".encode()).hexdigest()[:16]


def loaded_module(display: str, sha256: str) -> Optional[types.ModuleType]:
    """The module :func:`load_module` already executed in this process for these bytes."""
    return sys.modules.get(_module_name(display, sha256))


def load_module(
    path: str, *, display: Optional[str] = None, folder: Optional[str] = None
) -> types.ModuleType:
    """Imports the module file at ``path``, once per process for the same name and bytes.

    The module is registered in ``sys.modules`` under a name made from ``display`` and the
    sha256 of its bytes: loading the same file again (the launcher's check, the Tuner and
    Trainer stages, the trials of an in-process runner) returns the module already
    executed instead of running the user's code again; an edited file is a new module.

    Args:
      path: the file to execute (the user's file, or a worker's copy of the staged one).
      display: the module file as the user named it (default: ``path``): the code is
        compiled under this name, so tracebacks and error places point at the user's
        file, not at a staged copy.
      folder: put on ``sys.path`` so the module's helper modules import (default: the
        folder of ``path``, as TFX's module files expect).

    Raises:
      PipelineError: the file is missing, has a syntax error, or raises on import (any
        exception, and also ``SystemExit`` or another ``BaseException`` but
        ``KeyboardInterrupt``, which would otherwise end the pipeline's process).
    """
    display = display or path
    source = _read(path)
    use_keras_3()  # tf.keras is Keras 3 for the module, whatever was imported first
    name = _module_name(display, hashlib.sha256(source).hexdigest())
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    try:
        code = compile(source, display, "exec")
    except SyntaxError as e:
        raise PipelineError(
            f"Module file {display}:{e.lineno} has a syntax error ({e.msg}); fix that line."
        ) from e
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    if folder is None and "://" not in path:
        folder = os.path.dirname(os.path.abspath(path))
    if folder and folder not in sys.path:
        sys.path.append(folder)  # module files may import their sibling files, as in TFX
    before = set(sys.modules)
    # Registered so pickling functions defined in the module works in this process.
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102  running the user's module is the point
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except SystemExit as e:
        sys.modules.pop(name, None)
        raise PipelineError(
            f"Module file {error_place(e, display, display)} called sys.exit({e.code!r}) "
            "while being imported, which would end the pipeline; remove that call or move it "
            'under `if __name__ == "__main__":`.'
        ) from e
    except BaseException as e:  # noqa: BLE001  any import-time error of user code
        sys.modules.pop(name, None)
        raise PipelineError(
            f"Module file {error_place(e, display, display)} raised {type(e).__name__}: {e} "
            "while being imported; fix the module so it imports cleanly."
        ) from e
    pickle_by_value(module)
    if folder:
        # Its helper modules too: tf.Transform's stages carry the preprocessing_fn, whose
        # globals may name them, to workers that do not have them on their sys.path. Only
        # the user's own code: a folder that also holds the interpreter's libraries (a
        # project beside its .venv, a module in /tmp with the venv under /tmp) would
        # otherwise mark TensorFlow itself, which no pickler can carry by value.
        inside = os.path.join(os.path.abspath(folder), "")
        for helper in set(sys.modules) - before - {name}:
            helper_file = getattr(sys.modules.get(helper), "__file__", None) or ""
            path = os.path.abspath(helper_file)
            if helper_file and path.startswith(inside) and not is_installed_code(path):
                pickle_by_value(sys.modules[helper])
    return module


def installed_code_roots() -> tuple[str, ...]:
    """The folders of the interpreter's own code: stdlib, site-packages, a virtualenv.

    A virtual environment's whole folder counts (``sys.prefix`` when it differs from
    ``sys.base_prefix``); a system interpreter's prefix does not (``/usr`` would swallow a
    project in ``/usr/src/app``), only its library folders. Each folder as given and
    resolved (a ``.venv`` that is a symlink is both), ending in a separator so a prefix
    test matches whole folder names only.
    """
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    if sys.prefix != sys.base_prefix:
        roots.add(sys.prefix)
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # an old virtualenv's site module has no getsitepackages
        pass
    if site.ENABLE_USER_SITE:
        roots.add(site.getusersitepackages())
    roots.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    resolved = {os.path.realpath(r) for r in roots}
    return tuple(sorted({os.path.join(os.path.abspath(r), "") for r in roots | resolved}))


def is_installed_code(path: str) -> bool:
    """Whether ``path`` lies in the interpreter's stdlib, site-packages or prefix folders
    (never the user's own code, whatever folder the module file sits in)."""
    roots = installed_code_roots()
    candidates = {os.path.abspath(path), os.path.realpath(path)}
    return any(c.startswith(roots) for c in candidates)


def pickle_by_value(module: types.ModuleType) -> None:
    """Makes Beam pickle the module's functions by value, not by import name.

    The module is imported under a generated name that worker processes (DirectRunner
    multi_processing, portable runners, Dataflow) cannot import; tf.Transform's stages carry
    the user's ``preprocessing_fn`` and must ship its code instead. Where Beam is not
    installed (a plain trainer process) nothing pickles with Beam, so there is nothing to
    register.
    """
    try:
        from apache_beam.internal.cloudpickle import cloudpickle
    except ImportError:
        return

    cloudpickle.register_pickle_by_value(module)


def error_place(exc: BaseException, filename: str, display: str) -> str:
    """``display:line`` for the line of the module file nearest to where ``exc`` was raised.

    A frame counts when its file is ``filename`` or ``display`` (:func:`load_module`
    compiles a staged copy under the user's name).
    """
    names = {os.path.abspath(filename), os.path.abspath(display)}
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.abspath(frame.filename) in names:
            return f"{display}:{frame.lineno}"
    return display


def get_preprocessing_fn(module: types.ModuleType, path: str) -> Callable:
    """The module's ``preprocessing_fn``.

    Raises:
      PipelineError: the module defines none.
    """
    fn = getattr(module, "preprocessing_fn", None)
    if not callable(fn):
        raise PipelineError(
            f"Module file {path} defines no preprocessing_fn(inputs); add one (the "
            "tf.Transform function) or run without a module file to skip the Transform stage."
        )
    return fn
