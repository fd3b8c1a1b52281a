"""A full disk or a folder that cannot be written ends the run with one sentence, exit 2.

The read-only ``--pipeline_root`` is a real one (mode 0555; as root, whom file modes do
not stop, the test drops CAP_DAC_OVERRIDE from its own thread for the call). The full
disk is the kernel's own: a Beam job's worker writes to ``/dev/full``, which fails every
write with ENOSPC, as a full disk does (mounting a small tmpfs would need root).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os

import apache_beam as beam
import pytest
from conftest import PENGUIN_DIR, make_pipeline

from beam_pipeline import cli
from beam_pipeline.core.errors import EXIT_USER_ERROR, filesystem_error, user_error

_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


@contextlib.contextmanager
def _file_modes_apply():
    """File modes stop this thread even when it runs as root (Linux capabilities)."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    assert libc.capget(ctypes.byref(header), data) == 0, ctypes.get_errno()
    saved = data[0].effective
    data[0].effective &= ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH))
    assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()


def test_read_only_pipeline_root_is_one_sentence_and_exit_2(tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o555)
    args = [
        f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
        "--csv_null_values=NA",
        f"--pipeline_root={root}",
        "--run_id=ro",
    ]
    try:
        with _file_modes_apply():
            code = cli.main(args)
    finally:
        root.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert code == EXIT_USER_ERROR
    assert err.splitlines() == [
        f"error: Cannot write {root}/runs (Permission denied); make it writable or pass another "
        "--pipeline_root."
    ]
    assert os.listdir(root) == []


def _write_to_full_disk(_):
    with open("/dev/full", "w") as f:  # every write fails with ENOSPC, as on a full disk
        f.write("x")


def test_full_disk_on_a_worker_is_one_sentence_without_beams_traceback(tmp_path, caplog):
    quiet = cli._HandledWorkerErrors()
    quiet.pipeline_root = str(tmp_path)
    beam_errors = logging.getLogger("apache_beam.runners.common")
    beam_errors.addFilter(quiet)
    try:
        with pytest.raises(Exception) as raised:  # the runner's own wrapping of the OSError
            with make_pipeline() as p:
                _ = p | beam.Create([1]) | "Write" >> beam.Map(_write_to_full_disk)
    finally:
        beam_errors.removeFilter(quiet)
    error = user_error(raised.value, str(tmp_path))
    assert str(error) == (
        f"Writing the run under --pipeline_root {tmp_path} failed (No space left on device); "
        "free space there or pass another --pipeline_root."
    )
    assert error.exit_code == EXIT_USER_ERROR
    assert not [r for r in caplog.records if r.name == "apache_beam.runners.common"]


@pytest.mark.parametrize(
    "text, expected",
    [
        # What multi_processing and portable runners re-raise: the worker's error as text.
        (
            "OSError: [Errno 30] Read-only file system: '/r/runs/a/x.gz' [while running 'W']",
            "Cannot write /r/runs/a/x.gz (Read-only file system); make it writable or pass "
            "another --pipeline_root.",
        ),
        # TensorFlow's file API (the run directory's moves and folders).
        (
            "/r/runs/a/.staging; No space left on device",
            "Cannot write /r/runs/a/.staging (No space left on device); free space there or "
            "pass another --pipeline_root.",
        ),
        # A path outside the pipeline root (an input file) is named with its own advice.
        (
            "PermissionError: [Errno 13] Permission denied: '/data/in.csv'",
            "Cannot use /data/in.csv (Permission denied); check that path's permissions.",
        ),
        ("ValueError: [Errno 2] No such file: '/r/x'", None),  # not a filesystem-room error
        ("KeyError: 'species'", None),
    ],
)
def test_filesystem_errors_reported_as_text_by_runners(text, expected):
    error = filesystem_error(RuntimeError(text), "/r")
    assert (str(error) if error else None) == expected


def test_local_files_go_through_python_as_gfile_would_treat_them(tmp_path):
    """fileio on local paths: Python's own functions, with gfile's meaning (no TensorFlow)."""
    import subprocess
    import sys

    code = f"""
import os, sys
from beam_pipeline.core import fileio
root = {str(tmp_path)!r}
fileio.write_file(os.path.join(root, "a", "text.txt"), "one\\r\\ntwo\\n€")
assert fileio.read_file(os.path.join(root, "a", "text.txt")) == "one\\r\\ntwo\\n€"  # as written
fileio.write_file(os.path.join(root, "a", ".hidden"), b"x")
assert fileio.glob(os.path.join(root, "a", "*")) == [
    os.path.join(root, "a", ".hidden"), os.path.join(root, "a", "text.txt")]
assert sorted(fileio.listdir(os.path.join(root, "a"))) == [".hidden", "text.txt"]
assert sorted(f for _, _, files in fileio.walk(root) for f in files) == [".hidden", "text.txt"]
fileio.write_atomic(os.path.join(root, "a", "text.txt"), "new")
assert fileio.read_file(os.path.join(root, "a", "text.txt")) == "new"
assert sorted(fileio.listdir(os.path.join(root, "a"))) == [".hidden", "text.txt"]  # no tmp
fileio.remove(os.path.join(root, "a", ".hidden"))
try:
    fileio.read_file(os.path.join(root, "nope.txt"))
except OSError:
    pass
else:
    raise AssertionError("a missing local file must raise OSError")
# A folder moved into place (publishing), never over one that exists; a folder deleted.
fileio.write_file(os.path.join(root, "b", "x.txt"), "x")
fileio.rename(os.path.join(root, "a"), os.path.join(root, "c"))
try:
    fileio.rename(os.path.join(root, "c"), os.path.join(root, "b"))
except FileExistsError:
    pass
else:
    raise AssertionError("a rename over an existing folder must be refused")
assert fileio.read_file(os.path.join(root, "c", "text.txt")) == "new"
fileio.rmtree(os.path.join(root, "c"))
assert sorted(os.listdir(root)) == ["b"]
print("tensorflow" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False"]
