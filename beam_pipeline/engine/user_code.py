"""The module file as a run sees it: its digest at once, its code only when a stage runs it.

Loading a module file imports what it imports (TensorFlow, tf.Transform, keras-tuner:
seconds), and a rerun that reuses every stage runs none of its code. So the run knows the
module by its digest (the file and its folder's Python files, which every stage that runs
user code has in its cache key) and loads it only when a stage needs its code:
:meth:`UserCode.preprocessing_fn`.

One cache key needs more than the digest: the Transform stage's holds the digest of what
``preprocessing_fn`` runs (:func:`~beam_pipeline.engine.code_digest.transform_code`), so that
an edited ``run_fn`` does not rerun Transform; that digest is computed from the loaded
function. It is remembered per module digest under the pipeline root
(``cache/transform_code/``): a later run of the same files (same path, same Python, same
project and library code: :func:`~beam_pipeline.engine.fingerprint.pipeline_code`) takes
it from there instead of loading the module. The module's code is what its files say, so
the remembered digest is the one a load would compute. The exception is a module whose
import-time values come from elsewhere (an environment variable, a data file it reads
while it is imported), which the module digest, and so the Trainer's and the Tuner's keys,
do not see either: as TFX, which keys a module by its files too.

Example::

    code = UserCode("m.py", digest, load=lambda: get_preprocessing_fn(...), root=root)
    code.transform_code()   # remembered, or the module loaded and its digest computed
    code.preprocessing_fn() # loads it (once)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Optional

from beam_pipeline.core import fileio

__all__ = ["NotLoaded", "UserCode"]

_LOG = logging.getLogger(__name__)

# The pipeline root's folder of remembered Transform code digests (one small file each).
MEMO_FOLDER = "transform_code"


class NotLoaded(Exception):
    """The look-ahead needed the module's code, which it does not load."""


def _not_loaded() -> None:
    raise NotLoaded()


class UserCode:
    """The run's module file: its digest, and its ``preprocessing_fn`` loaded on demand.

    Args:
      module_file: the module file as the user named it.
      digest: the digest of the module and its folder's Python files (the stages' key).
      load: loads the module (with every check a run makes of it) and returns its
        ``preprocessing_fn``; raises PipelineError when it does not load.
      pipeline_root: where the Transform code digest is remembered (None: nowhere).
    """

    def __init__(
        self,
        module_file: str,
        digest: Optional[str],
        load: Callable[[], Optional[Callable]],
        pipeline_root: Optional[str] = None,
    ):
        self.module_file = module_file
        self.digest = digest
        self._load = load
        self._root = pipeline_root
        self._lock = threading.Lock()  # two stages may ask at once (stages on threads)
        self._loaded = False
        self._fn: Optional[Callable] = None

    @classmethod
    def of(cls, preprocessing_fn: Optional[Callable], digest: Optional[str]) -> UserCode:
        """A module loaded already (the Python API's callers, tests)."""
        code = cls("", digest, lambda: preprocessing_fn)
        code.preprocessing_fn()
        return code

    @property
    def loaded(self) -> bool:
        """Whether the module has been loaded in this run."""
        return self._loaded

    def preprocessing_fn(self) -> Optional[Callable]:
        """The module's ``preprocessing_fn``, the module loaded on the first call.

        Raises:
          PipelineError: the module does not load (the sentence of its load).
        """
        with self._lock:
            if not self._loaded:
                self._fn = self._load()
                self._loaded = True
            return self._fn

    def transform_code(self) -> Optional[str]:
        """What the Transform stage's key holds of the module
        (:func:`~beam_pipeline.engine.code_digest.transform_code`): remembered for these
        files, else computed from the loaded module (and remembered).

        Raises:
          PipelineError: the module does not load.
          NotLoaded: a :meth:`look_ahead` view, and nothing is remembered.
        """
        memo = self._memo_path()
        if memo is not None and not self._loaded:
            found = _read_memo(memo)
            if found is not None:
                return found
        from beam_pipeline.engine.code_digest import transform_code

        code = transform_code(self.preprocessing_fn(), self.digest)
        if memo is not None and code is not None:
            try:
                fileio.makedirs(fileio.join(self._root, "cache", MEMO_FOLDER))
                fileio.write_atomic(memo, json.dumps({"transform_code": code}))
            except OSError as e:  # only a later rerun's speed depends on it
                _LOG.warning("Could not remember the Transform code digest in %s: %s", memo, e)
        return code

    def look_ahead(self) -> UserCode:
        """This module as the run's look-ahead sees it (which stages will be reused, before
        anything runs): what is remembered of it, never loaded (:class:`NotLoaded`
        instead); the module itself once it is loaded."""
        if self._loaded:
            return self
        return UserCode(self.module_file, self.digest, _not_loaded, self._root)

    def _memo_path(self) -> Optional[str]:
        if not self._root or not self.digest or not self.module_file:
            return None
        from beam_pipeline.engine.fingerprint import pipeline_code

        where = self.module_file if "://" in self.module_file else os.path.abspath(self.module_file)
        key = json.dumps([self.digest, where, sys.version_info[:2], pipeline_code()])
        name = hashlib.sha256(key.encode()).hexdigest()
        return fileio.join(self._root, "cache", MEMO_FOLDER, f"{name}.json")


def _read_memo(path: str) -> Optional[str]:
    """The remembered digest, or None (none yet, or a file that cannot be read: a miss)."""
    try:
        if not fileio.exists(path):
            return None
        with fileio.open(path) as f:
            value = json.load(f).get("transform_code")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
