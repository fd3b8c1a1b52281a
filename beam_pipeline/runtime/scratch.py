"""A run's own temporary folder: what its processes write to ``tempfile`` stays there.

TensorFlow's autograph writes every function it converts as a
``__autograph_generated_file*.py`` through :mod:`tempfile` (about ten a run, never
removed), the local worker pool keeps its processes' logs in a temporary folder, the
workers unpack the staged module there: without this, each run left files in the shared
``/tmp``. :func:`run_temp_dir` makes one private folder (mode 0700) per run, under
``<pipeline_root>/tmp/`` for a local root (so even a killed run leaves nothing outside
the pipeline root), points ``TMPDIR`` and :data:`tempfile.tempdir` at it for the
launcher and every process it starts from then on, and removes it when the run ends.

Example::

    with run_temp_dir(config.pipeline_root):
        ...   # tempfile.gettempdir() is the run's own folder here
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import shutil
import tempfile
from collections.abc import Iterator

from beam_pipeline.core import fileio
from beam_pipeline.core.forked import SYSTEM_TMPDIR

__all__ = ["TEMP_DIR", "run_temp_dir"]

# The pipeline root's folder of the runs' temporary folders.
TEMP_DIR = "tmp"


@contextlib.contextmanager
def run_temp_dir(pipeline_root: str) -> Iterator[str]:
    """A private temporary folder for one run, ``TMPDIR`` while it lasts; then removed.

    Args:
      pipeline_root: a local root holds the folder (``<root>/tmp/run-*``); for a remote
        one it is made in the system's temporary folder.
    """
    # multiprocessing's own temporary folder (its fork server's socket lives there, and
    # the server outlives the run) stays where it was: in the system's.
    multiprocessing.util.get_temp_dir()
    parent = None
    if not fileio.is_remote(pipeline_root):
        # Absolute: processes started with another working directory (the InfraValidator's
        # sandbox) read TMPDIR too.
        parent = os.path.abspath(os.path.join(pipeline_root, TEMP_DIR))
        os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="run-", dir=parent)
    saved_env, saved = os.environ.get("TMPDIR"), tempfile.tempdir
    system = os.environ.get(SYSTEM_TMPDIR)
    if system is None:  # processes started during the run keep multiprocessing's there
        os.environ[SYSTEM_TMPDIR] = tempfile.gettempdir()
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = saved
        if system is None:
            os.environ.pop(SYSTEM_TMPDIR, None)
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(folder, ignore_errors=True)
        if parent is not None:
            with contextlib.suppress(OSError):
                os.rmdir(parent)  # only when no other run uses it
