"""The user's code through the CLI: what is staged, what runs, and where its files go.

- Module staging stages the user's own code only: a module file whose folder also holds
  the interpreter's libraries (a project beside its ``.venv``) runs, and its archive holds
  the user's files only (no TensorFlow, no temporary files).
- Staged code is verified where it runs: a folder planted at a predictable temp path is
  never executed.
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


@pytest.mark.slow
def test_a_module_beside_its_venv_runs_and_stages_only_the_users_files(tmp_path):
    # A common layout: the project folder holds the module file and the virtualenv the
    # pipeline runs with (here the real one, linked in; sys.prefix is then inside the
    # project). TensorFlow, imported while the module loads, must not be pickled by value
    # (that failed with "excessively deep recursion") nor archived; neither must the
    # autograph temp files of a folder such as /tmp.
    project = tmp_path / "project"
    project.mkdir()
    os.symlink(os.path.realpath(sys.prefix), project / ".venv")
    shutil.copy(PENGUIN_MODULE, project / "m.py")
    (project / "__autograph_generated_filexyz.py").write_text("x = 1\n")
    python = str(project / ".venv" / "bin" / "python")
    root = tmp_path / "root"

    proc = _cli(
        [
            f"--module_file={project / 'm.py'}",
            *PENGUIN_DATA,
            f"--pipeline_root={root}",
            "--no_tuner",
            "--no_trainer",
        ],
        python=python,
    )

    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (archive,) = [
        os.path.join(d, f)
        for d, _, files in os.walk(os.path.join(_run_dir(root), "module"))
        for f in files
        if f == "module_folder.zip"
    ]
    with zipfile.ZipFile(archive) as z:
        assert z.namelist() == ["m.py"]


_PLANTED = """
import json
import os
import pathlib
open(os.environ["PLANTED_MARKER"], "w").write("the planted module ran")
"""


@pytest.mark.slow
def test_a_module_folder_planted_at_the_predictable_path_is_never_executed(request):
    # Another local user creates the folder the trainer's copy of the staged module would
    # be unpacked to (its name comes from the archive's sha256, which anyone can compute
    # from the module's files), with their code in it: the run must execute the real
    # module and never the planted one. The Trainer runs in a worker process (the launcher
    # has the module loaded already and would not load a copy).
    # Short paths: the worker's fork server puts its socket under the run's temporary
    # folder (<root>/tmp/run-*), and a socket's path may not be longer than 107 bytes.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="bp-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp_path, ignore_errors=True))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "planted_ran"
    module_dir = tmp_path / "user"
    module_dir.mkdir()
    module = module_dir / "m.py"
    shutil.copy(PENGUIN_MODULE, module)
    bundle = bundle_module_file(str(module))
    planted_code = module.read_text() + _PLANTED
    uid = os.getuid()
    for cache in ("beam_pipeline_modules", f"beam_pipeline_modules-{uid}"):
        for digest in (bundle.archive_sha256, bundle.sha256):
            planted = tmp / cache / digest
            planted.mkdir(parents=True)
            (planted / "m.py").write_text(planted_code)
            os.chmod(planted, 0o777)
        os.chmod(tmp / cache, 0o777)
    env = dict(os.environ, TMPDIR=str(tmp), PLANTED_MARKER=str(marker))

    proc = _cli(
        [
            f"--module_file={module}",
            *PENGUIN_DATA,
            f"--pipeline_root={tmp_path / 'root'}",
            "--no_tuner",
            "--train_steps=2",
            "--eval_steps=1",
            # The stages that load the module (Transform, Trainer); the later ones only
            # read the SavedModel.
            "--no_evaluator",
            "--no_infra_validator",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=1",
        ],
        env=env,
    )

    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "Trainer: ok" in proc.stdout, proc.stdout[-3000:]
    assert not marker.exists()


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_temporary_folder_it_was_given(tmp_path, request):
    # TensorFlow's autograph files, the tuner pool's log folders, unpacked modules: they
    # went to the shared /tmp and stayed there. Everything now goes to a folder of the
    # run's own under the pipeline root, removed when the run ends.
    # A short path: multiprocessing's fork server puts its socket under TMPDIR, and a
    # socket's path may not be longer than 107 bytes (pytest's own folders can be).
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bp-tmp-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    root = tmp_path / "root"
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = _cli(
        [
            f"--pipeline_root={root}",
            "--tuner_max_trials=2",
            "--tuner_train_steps=2",
            "--tuner_eval_steps=1",
            "--train_steps=2",
            "--eval_steps=1",
        ],
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert "Tuner: ok" in proc.stdout and "Trainer: ok" in proc.stdout, proc.stdout[-3000:]
    assert os.listdir(tmp) == []
    assert not os.path.exists(root / "tmp")
