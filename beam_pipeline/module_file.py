"""Loading the user's module file, with errors that name the file, the line and the fix.

Example::

    module = load_module("my_module.py")
    preprocessing_fn = get_preprocessing_fn(module, "my_module.py")
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import types
import uuid
from collections.abc import Callable

from beam_pipeline.errors import PipelineError
from beam_pipeline.keras3 import use_keras_3

__all__ = ["load_module", "get_preprocessing_fn", "error_place", "pickle_by_value"]


def _read(path: str) -> bytes:
    import tensorflow as tf  # gfile reads gs:// as well as local paths

    if not tf.io.gfile.exists(path):
        raise PipelineError(
            f"Module file {path} does not exist; pass an existing Python file with --module_file."
        )
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def load_module(path: str) -> types.ModuleType:
    """Imports the module file at ``path`` under a unique name.

    Raises:
      PipelineError: the file is missing, has a syntax error, or raises on import.
    """
    source = _read(path)
    use_keras_3()  # tf.keras is Keras 3 for the module, whatever was imported first
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise PipelineError(
            f"Module file {path}:{e.lineno} has a syntax error ({e.msg}); fix that line."
        ) from e
    name = f"user_module_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    # Registered so pickling functions defined in the module works in this process.
    sys.modules[name] = module
    directory = os.path.dirname(os.path.abspath(path)) if "://" not in path else None
    if directory and directory not in sys.path:
        sys.path.append(directory)  # module files may import their sibling files, as in TFX
    try:
        exec(code, module.__dict__)  # noqa: S102  running the user's module is the point
    except Exception as e:  # noqa: BLE001  any import-time error of user code
        raise PipelineError(
            f"Module file {error_place(e, path, path)} raised {type(e).__name__}: {e} while "
            "being imported; fix the module so it imports cleanly."
        ) from e
    pickle_by_value(module)
    return module


def pickle_by_value(module: types.ModuleType) -> None:
    """Makes Beam pickle the module's functions by value, not by import name.

    The module is imported under a generated name that worker processes (DirectRunner
    multi_processing, portable runners, Dataflow) cannot import; tf.Transform's stages carry
    the user's ``preprocessing_fn`` and must ship its code instead.
    """
    from apache_beam.internal.cloudpickle import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def error_place(exc: BaseException, filename: str, display: str) -> str:
    """``display:line`` for the line of ``filename`` nearest to where ``exc`` was raised."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.abspath(frame.filename) == os.path.abspath(filename):
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
