"""Whole runs of the CLI that train, tune or run several jobs (apart from test_cli.py so that
the two pytest-xdist processes share the long ones: a test file goes to one process)."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import PENGUIN_DIR
from test_cli import MODULE, _run_dir, _summary

from beam_pipeline import cli

pytestmark = pytest.mark.slow

def test_multi_processing_workers_run_the_user_module(tmp_path):
    # Worker processes cannot import the module file by its generated name: its functions
    # must travel by value (a regression: Transform failed with ModuleNotFoundError).
    root = str(tmp_path)
    args = ["--runner=DirectRunner", "--direct_running_mode=multi_processing"]
    code = cli.main(
        args + ["--direct_num_workers=2", f"--pipeline_root={root}", "--no_trainer", "--no_tuner"]
    )
    assert code == 0
    stages = _summary(_run_dir(root))
    assert stages["Transform"]["status"] == "ok"
    assert stages["Transform"]["rows_out"] == stages["ExampleGen"]["rows_out"]


def test_rerun_reuses_the_analyzer_cache_and_the_module_is_imported_once(tmp_path):
    # The module logs each import; it has a preprocessing_fn (the bundled one, from a helper
    # beside it) and no tuner_fn or run_fn, so the Tuner and Trainer stages load it, find
    # nothing to do and skip: the launcher's three loads (the run's check, Tuner, Trainer)
    # at no training cost.
    module_dir = tmp_path / "module"
    module_dir.mkdir()
    (module_dir / "bundled_penguin_helpers.py").write_bytes(open(MODULE, "rb").read())
    log = module_dir / "imports.log"
    (module_dir / "counted_module.py").write_text(
        "import os\n"
        "\n"
        "from bundled_penguin_helpers import preprocessing_fn  # noqa: F401\n"
        "\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
    )
    root = str(tmp_path / "root")
    args = [
        "--runner=DirectRunner",
        f"--pipeline_root={root}",
        f"--config={os.path.join(PENGUIN_DIR, 'pipeline.yaml')}",
        f"--module_file={module_dir / 'counted_module.py'}",
    ]
    assert cli.main(args + ["--run_id=first"]) == 0
    assert log.read_text().split() == [str(os.getpid())]  # once per run, not three times
    first_run = _summary(os.path.join(root, "runs", "first"))
    assert first_run["Tuner"]["status"] == first_run["Trainer"]["status"] == "skipped"
    # The same bytes at another path with another modification time: the cache's key is the
    # content (test_resume.py checks that changed bytes of the same size and time miss).
    copy = tmp_path / "copy" / "renamed.csv"
    copy.parent.mkdir()
    copy.write_bytes(open(os.path.join(PENGUIN_DIR, "penguins.csv"), "rb").read())
    os.utime(copy, (1_000_000_000, 1_000_000_000))
    # --no_cache: run every stage (the metadata store would reuse the first run's), so that
    # Transform's analyzer cache, a cache of its own, is what is tested.
    assert cli.main(args + [f"--data={copy}", "--run_id=second", "--no_cache"]) == 0
    first = first_run["Transform"]["details"]
    second = _summary(os.path.join(root, "runs", "second"))["Transform"]["details"]
    assert first["analyzer_cache"].startswith("written")
    assert second["analyzer_cache"] == "reused (no analyzer recomputed)"
    # The same file with the same bytes in the same process is not executed again (see
    # test_trainer_module_loader for an edited one).
    assert log.read_text().split() == [str(os.getpid())]


_CLASSIFY_RUN = """
import json, sys
import conftest_trainer
from beam_pipeline.core.types import Artifact
from beam_pipeline.run_dir import RunDirectory

run_dir = RunDirectory(sys.argv[1], sys.argv[2])
examples = conftest_trainer.read_raw_examples(run_dir, "eval")
accuracy = conftest_trainer.classify_accuracy(run_dir.path(Artifact.MODEL), examples)
print(json.dumps({"accuracy": accuracy, "n": len(examples)}))
"""


def test_default_run_trains_and_the_model_serves_raw_examples_in_a_fresh_process(
    tmp_path, monkeypatch, caplog
):
    import conftest_trainer

    root = str(tmp_path)
    args = ["--runner=DirectRunner", f"--pipeline_root={root}", "--run_id=full"]
    # sys.argv as `python -m beam_pipeline` has it: Beam reads it for options built without
    # flags, and would warn about --pipeline_root ("Did you mean ...?").
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *args])
    assert cli.main(args) == 0
    assert not [r.getMessage() for r in caplog.records if "nparseable" in r.getMessage()]
    stages = _summary(os.path.join(root, "runs", "full"))
    tuner, trainer = stages["Tuner"], stages["Trainer"]
    assert tuner["status"] == "ok"
    assert tuner["details"]["best_hyperparameters"]  # 4 trials, 2 at a time, by default
    assert trainer["status"] == "ok"
    assert trainer["artifact"] == os.path.join(root, "runs", "full", "model")
    assert "sparse_categorical_accuracy=" in trainer["note"]
    served = conftest_trainer.run_python(_CLASSIFY_RUN, root, "full")
    assert served["n"] == stages["ExampleGen"]["rows_out"]["eval"]
    assert served["accuracy"] >= 0.9  # 100 steps reach about 0.97 on the eval split
