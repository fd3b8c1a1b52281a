"""The user's code through the CLI: what is staged, what runs, and where its files go.

- Module staging stages the user's own code only: a module file whose folder also holds
  the interpreter's libraries (a project beside its ``.venv``) runs, and its archive holds
  the user's files only (no TensorFlow, no temporary files).
- Staged code is verified where it runs: a module folder planted where the workers unpack
  the staged module (the run's own temporary folder, and the shared one) is never executed.
- A run leaves nothing in the temporary folder it was given.

(tests/test_user_code.py: exits, crashes and timeouts in the user's code.)
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest
from conftest import PENGUIN_DIR, REPO

from beam_pipeline.core.module_staging import bundle_module_file

PENGUIN_MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")
# A user's module file needs its data named (only the bundled module has a default).
PENGUIN_DATA = [f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}", "--csv_null_values=,NA"]


def _cli(args, python=sys.executable, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` in a fresh process, as a user runs it."""
    return subprocess.run(
        [python, "-m", "beam_pipeline", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env if env is not None else dict(os.environ),
        timeout=timeout,
    )


def _run_dir(root) -> str:
    runs = os.path.join(root, "runs")
    (name,) = os.listdir(runs)
    return os.path.join(runs, name)


def _tree(folder) -> dict[str, bytes]:
    """Every path under ``folder`` (folders end in /), with each file's bytes."""
    tree = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs:
            tree[os.path.relpath(os.path.join(d, name), folder) + "/"] = b""
        for name in files:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                tree[os.path.relpath(path, folder)] = f.read()
    return tree


_PLANTED = """
import json
import os
import pathlib
open(os.environ["PLANTED_MARKER"], "w").write("the planted module ran")
"""

# Appended to the user's module: its preprocessing_fn, which tf.Transform traces in the
# launcher during the run (before the Tuner's and Trainer's workers unpack the staged
# module), plants a module folder where those workers look: under the run's own temporary
# folder (tempfile's, <root>/tmp/run-*, which the workers inherit as TMPDIR), at the path
# named by the archive's sha256, writable by others as another user's folder would be.
# Each planted path is listed in PLANTED_LOG, so the test knows the plant happened.
_PLANTER = """

_user_preprocessing_fn = preprocessing_fn


def preprocessing_fn(inputs):
    import tempfile

    cache = os.path.join(tempfile.gettempdir(), f"beam_pipeline_modules-{os.getuid()}")
    for digest in os.environ["PLANT_DIGESTS"].split(","):
        planted = os.path.join(cache, digest)
        if not os.path.exists(planted):
            os.makedirs(planted)
            with open(os.environ["PLANTED_SOURCE"]) as f, open(f"{planted}/m.py", "w") as m:
                m.write(f.read())
            os.chmod(planted, 0o777)
            os.chmod(cache, 0o777)
            with open(os.environ["PLANTED_LOG"], "a") as log:
                log.write(planted + "\\n")
    return _user_preprocessing_fn(inputs)
"""


@pytest.fixture(scope="module")
def run():
    """One run of the whole pipeline that each test below reads (a run each cost three
    pipelines): the module file beside its project's venv, run by that venv's python, with
    a temporary folder of its own (TMPDIR) in which another user planted folders at the
    predictable unpack paths of the staged module; the DirectRunner's worker processes
    (multi_processing), so the Trainer loads the staged module in a worker, not in the
    launcher. Yields (the process, the pipeline root, TMPDIR, the planted marker,
    TMPDIR's tree before the run)."""
    # Short paths: multiprocessing's fork server puts its socket under TMPDIR and the
    # worker's under the run's temporary folder (<root>/tmp/run-*), and a socket's path may
    # not be longer than 107 bytes (pytest's own folders can be).
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="bp-", dir="/tmp"))
    project = tmp_path / "project"
    project.mkdir()
    module = project / "m.py"
    with open(PENGUIN_MODULE) as f:
        penguin = f.read()
    module.write_text(penguin + _PLANTER)
    # The archive the run stages (its sha256 names the unpack folder): the user's files
    # only, which the module-beside-its-venv test checks the run's archive holds.
    bundle = bundle_module_file(str(module))
    # A common layout: the project folder holds the module file and the virtualenv the
    # pipeline runs with (here the real one, linked in; sys.prefix is then inside the
    # project), and a folder such as /tmp the autograph temp files of TensorFlow.
    os.symlink(os.path.realpath(sys.prefix), project / ".venv")
    (project / "__autograph_generated_filexyz.py").write_text("x = 1\n")
    python = str(project / ".venv" / "bin" / "python")

    # Another local user creates the folders the worker's copy of the staged module would
    # be unpacked to (named by the archive's sha256, which anyone can compute from the
    # module's files), with their code in them.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "planted_ran"
    planted_code = penguin + _PLANTED
    (tmp_path / "planted_m.py").write_text(planted_code)
    uid = os.getuid()
    for cache in ("beam_pipeline_modules", f"beam_pipeline_modules-{uid}"):
        for digest in (bundle.archive_sha256, bundle.sha256):
            planted = tmp / cache / digest
            planted.mkdir(parents=True)
            (planted / "m.py").write_text(planted_code)
            os.chmod(planted, 0o777)
        os.chmod(tmp / cache, 0o777)
    before = _tree(tmp)
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        PLANTED_MARKER=str(marker),
        PLANT_DIGESTS=f"{bundle.archive_sha256},{bundle.sha256}",
        PLANTED_SOURCE=str(tmp_path / "planted_m.py"),
        PLANTED_LOG=str(tmp_path / "planted.log"),
    )
    root = tmp_path / "root"

    proc = _cli(
        [
            f"--module_file={module}",
            *PENGUIN_DATA,
            f"--pipeline_root={root}",
            # Every stage, the tuner's pool of trial workers included: what each writes
            # to a temporary folder must go to the run's own.
            "--tuner_max_trials=2",
            "--tuner_train_steps=2",
            "--tuner_eval_steps=1",
            "--train_steps=2",
            "--eval_steps=1",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=1",
        ],
        python=python,
        env=env,
    )
    yield proc, root, tmp, marker, before, tmp_path / "planted.log"
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_a_module_beside_its_venv_runs_and_stages_only_the_users_files(run):
    # TensorFlow, imported while the module loads, must not be pickled by value (that
    # failed with "excessively deep recursion") nor archived; neither must the autograph
    # temp files of a folder such as /tmp.
    proc, root, *_ = run
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (archive,) = [
        os.path.join(d, f)
        for d, _, files in os.walk(os.path.join(_run_dir(root), "module"))
        for f in files
        if f == "module_folder.zip"
    ]
    with zipfile.ZipFile(archive) as z:
        assert z.namelist() == ["m.py"]


@pytest.mark.slow
def test_a_module_folder_planted_at_the_predictable_path_is_never_executed(run):
    # The run must execute the real module and never the planted one. The Trainer runs in
    # a worker process (the launcher has the module loaded already and would not load a
    # copy), as do the tuner's trials: both unpack the staged module under the run's own
    # temporary folder, where the module planted folders of others' mode during Transform.
    proc, root, _, marker, _, planted_log = run
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "Tuner: ok" in proc.stdout and "Trainer: ok" in proc.stdout, proc.stdout[-3000:]
    planted = planted_log.read_text().split()
    assert len(planted) == 2, planted  # both digests' folders, before any worker unpacked
    assert all(p.startswith(f"{root}/tmp/run-") for p in planted), planted
    assert not marker.exists(), "a planted module folder was executed"


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_temporary_folder_it_was_given(run):
    # TensorFlow's autograph files, the tuner pool's log folders, unpacked modules: they
    # went to the shared /tmp and stayed there. Everything now goes to a folder of the
    # run's own under the pipeline root, removed when the run ends: TMPDIR holds what it
    # held before the run (the planted folders), byte for byte, and nothing else.
    proc, root, tmp, _, before, _ = run
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert "Tuner: ok" in proc.stdout and "Trainer: ok" in proc.stdout, proc.stdout[-3000:]
    assert _tree(tmp) == before
    assert not os.path.exists(root / "tmp")


_PLANTS = ["writable by others", "a link to another folder", "another user's"]


@pytest.mark.parametrize("plant", _PLANTS)
def test_a_worker_never_unpacks_into_a_folder_it_does_not_own_alone(tmp_path, plant):
    """What a worker does in a run (fetch_module_folder and fetch_staged_module under the
    run's temporary folder, run_temp_dir's), with the folder it would unpack into planted
    first, the staged module's digests in it holding other code."""
    from beam_pipeline.core.module_staging import fetch_module_folder, fetch_staged_module
    from beam_pipeline.runtime.scratch import run_temp_dir

    (tmp_path / "project").mkdir()
    module = tmp_path / "project" / "m.py"
    module.write_text("REAL = True\n")
    staged = bundle_module_file(str(module)).stage(str(tmp_path / "run"))
    with run_temp_dir(str(tmp_path / "root")) as tmp:
        cache = os.path.join(tmp, f"beam_pipeline_modules-{os.getuid()}")
        planted = tmp_path / "planted" if plant == "a link to another folder" else cache
        for digest in (staged.sha256, staged.folder_sha256):
            os.makedirs(os.path.join(planted, digest))
            with open(os.path.join(planted, digest, "m.py"), "w") as f:
                f.write("REAL = False\n")
        if plant == "writable by others":
            os.chmod(cache, 0o777)
        elif plant == "a link to another folder":
            os.chmod(planted, 0o700)
            os.symlink(planted, cache)
        elif os.geteuid() == 0:  # another user's: only root can give a folder away
            os.chown(cache, 65534, 65534)
            os.chmod(cache, 0o755)
        else:
            pytest.skip("giving a folder to another user needs root")
        folder = fetch_module_folder(staged.folder_archive, staged.folder_sha256)
        copy = fetch_staged_module(staged.path, staged.sha256)
        for path in (os.path.join(folder, "m.py"), copy):
            # Not under the planted folder (its path and a separator: the private folder
            # the worker makes instead may start with the same name).
            inside = os.path.realpath(planted) + os.sep
            assert not os.path.realpath(path).startswith(inside), path
            with open(path) as f:
                assert f.read() == "REAL = True\n"
