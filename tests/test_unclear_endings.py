"""Endings that used to be unclear, each now one sentence with the fix (through the CLI).

A full disk is a small tmpfs, mounted for the test where the test runs as root (the only
way to fill a disk on purpose without filling the machine's); elsewhere those tests are
skipped, saying why.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import uuid

import pytest
from conftest import PENGUIN_DIR, TESTDATA, forked_cli, service_missing

from beam_pipeline import cli

_PENGUINS = os.path.join(PENGUIN_DIR, "penguins.csv")


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def test_a_data_folder_holding_a_readme_is_refused_not_read_as_data(tmp_path, capsys):
    folder = tmp_path / "dataset"
    folder.mkdir()
    shutil.copy(_PENGUINS, folder / "penguins.csv")
    (folder / "README.txt").write_text("Palmer penguins, from the palmerpenguins package.\n")
    code = cli.main([f"--data={folder}", f"--pipeline_root={tmp_path / 'root'}"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --data folder {folder} holds README.txt, which is not data but would be read "
        f"as data; move it out of the folder or pass a glob of the data files: "
        f"--data '{folder}/*.csv'."
    )
    # The glob it suggests reads the data alone.
    root = str(tmp_path / "root")
    args = [f"--data={folder}/*.csv", "--csv_null_values=,NA", f"--pipeline_root={root}"]
    assert cli.main([*args, "--no_trainer"]) == 0


def test_a_failed_transform_has_its_row_in_the_summary(tmp_path, capsys):
    module_file = os.path.join(TESTDATA, "failing_preprocessing_module.py")
    root = str(tmp_path)
    args = [
        f"--data={os.path.join(TESTDATA, 'penguin_tfx', 'penguins_processed.csv')}",
        f"--module_file={module_file}",
        f"--pipeline_root={root}",
        "--run_id=failing",
    ]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    stages = _summary(root, "failing")
    assert list(stages) == ["ExampleGen", "Statistics", "Schema", "Validation", "Transform"]
    transform = stages["Transform"]
    assert transform["status"] == "failed" and transform["seconds"] > 0
    assert f"error: {transform['note']}" == err[-1]
    assert transform["note"].startswith(f"preprocessing_fn of {module_file} failed on the data")


@contextlib.contextmanager
def _small_disk(tmp_path, size: str):
    """A tmpfs of ``size`` at a fresh folder (root only: else the test is skipped)."""
    where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    if os.geteuid() != 0:
        service_missing("mounting a small tmpfs (a disk to fill) needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        service_missing(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield str(where)
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture(scope="module")
def data_run(tmp_path_factory):
    """A pipeline root with run ``a`` of the bundled module, --no_tuner --no_trainer: the
    data stages and Transform (its analyzer cache written): (root, the run's arguments
    less --module_file and --run_id)."""
    root = str(tmp_path_factory.mktemp("data_run") / "root")
    args = [f"--data={_PENGUINS}", "--csv_null_values=,NA", "--no_tuner", "--no_trainer"]
    args.append(f"--pipeline_root={root}")
    module = os.path.join(PENGUIN_DIR, "penguin_module.py")
    assert cli.main([*args, f"--module_file={module}", "--run_id=a"]) == 0
    return root, args


def test_a_full_push_destination_says_so_and_leaves_nothing(data_run, tmp_path, capsys):
    # Run r in data_run's root: its data stages and Transform are run a's (reused); the
    # model is trained, checked and pushed.
    root, data_args = data_run
    args = [
        *(a for a in data_args if a != "--no_trainer"),
        f"--module_file={os.path.join(PENGUIN_DIR, 'penguin_module.py')}",
        "--run_id=r",
    ]
    # Room for none of the SavedModel's files but the smallest.
    with _small_disk(tmp_path, "64k") as destination:
        capsys.readouterr()
        assert cli.main([*args, f"--push_destination={destination}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"error: --push_destination {destination} is full (")
        assert err[0].endswith(
            "); free space there or pick another destination and rerun with the same "
            "--run_id: the model stays blessed and only the Pusher runs again."
        )
        assert os.listdir(destination) == []  # no .1.partial-* copy left
        assert _summary(root, "r")["Pusher"]["status"] == "failed"


def test_a_full_pipeline_root_is_one_sentence_and_leaves_no_partial_file(tmp_path):
    """The run's log and summary cannot be written either: no "--- Logging error ---"
    per record, no 0-byte summary.json.tmp-*. (A real process: the log handlers and
    descriptor 2 are the CLI's own: forked, conftest.forked_cli.)"""
    # 160 KiB: room for the store and the first files, not for the whole run.
    with _small_disk(tmp_path, "160k") as root:
        proc = forked_cli(
            [
                f"--data={_PENGUINS}",
                "--csv_null_values=,NA",
                "--no_trainer",
                "--no_tuner",
                f"--pipeline_root={root}",
                "--run_id=full",
            ],
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
            timeout=600,
        )
        assert proc.returncode == 2, proc.stderr[-3000:]
        err = proc.stderr.strip().splitlines()
        assert "Logging error" not in proc.stderr
        assert len(err) == 1, err[:20]
        assert err[0].startswith("error: ") and "No space left on device" in err[0], err[0]
        assert "free space there" in err[0]
        assert glob.glob(os.path.join(root, "**", "*.tmp-*"), recursive=True) == []


def test_runs_show_says_a_tuner_turned_off_was_skipped(data_run, capsys):
    root, _ = data_run
    capsys.readouterr()
    assert cli.main(["runs", "show", "a", "--json", f"--pipeline_root={root}"]) == 0
    shown = json.loads(capsys.readouterr().out)
    statuses = {e["stage"]: e["status"] for e in shown["executions"]}
    assert statuses["Tuner"] == "skipped" and statuses["Trainer"] == "skipped"
    assert statuses["Transform"] == "complete"


def test_a_transform_adding_to_the_analyzer_cache_keeps_stderr_empty(data_run, tmp_path, capsys):
    """tf.Transform rewrites the cache entry's METADATA when a changed preprocessing_fn adds
    analyzers to it; Beam's sink announces the rewrite as a warning, which is the log's.
    (Run b, in the root of run a above: its entry is the one added to.)"""
    module = os.path.join(PENGUIN_DIR, "penguin_module.py")
    with open(module) as f:
        text = f.read()
    anchor = "    return outputs\n\n\n# ---"
    assert anchor in text
    changed = tmp_path / "more_analyzers.py"
    added = '    outputs["year_xf"] = _dense(tft.scale_by_min_max(_to_float(inputs["year"])), 0.0)'
    changed.write_text(text.replace(anchor, f"{added}\n{anchor}"))
    root, args = data_run
    capsys.readouterr()
    assert cli.main([*args, f"--module_file={changed}", "--run_id=b"]) == 0
    assert capsys.readouterr().err == ""
    note = _summary(root, "b")["Transform"]["details"]["analyzer_cache"]
    assert note == "partly reused (1 entries added)"
