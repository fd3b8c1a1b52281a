"""The bad-input corpus (tests/bad_input_corpus.py), one row per case of docs/bad-input.md
that stops before any Beam job: each runs the CLI in this process and must end as its row
says (the exit code, one sentence matching the row's phrase, what is left under the
pipeline root). tests/test_docs.py checks that the docs table names every row."""

from __future__ import annotations

import json
import os

import pytest
from bad_input_corpus import CASES, Case, Left
from conftest import one_sentence

from beam_pipeline import cli

# What a failed run's record holds (Left.RECORD): no artifact, no staging, no cache.
_RECORD_FILES = {"summary.json", "manifest.json", "run.log", "report.html"}


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case.pending)] if case.pending else []
        yield pytest.param(case, id=case.id, marks=marks)


def _write(folder, files) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _assert_left(root, left: Left, sentence: str) -> None:
    if left is Left.NOTHING:
        assert not root.exists(), sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        return
    assert sorted(p.name for p in root.iterdir()) == ["metadata.sqlite", "runs"]
    (run,) = (root / "runs").iterdir()
    assert {p.name for p in run.iterdir()} == _RECORD_FILES
    stages = json.loads((run / "summary.json").read_text())["stages"]
    assert stages[-1]["status"] == "failed" and stages[-1]["note"] == sentence, stages
    assert all(s["artifact"] is None for s in stages), stages


@pytest.mark.parametrize("case", _params())
def test_bad_input(tmp_path, capsys, monkeypatch, case: Case):
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, case.files)
    root = tmp_path / "root"
    argv = [*case.argv(str(folder)), f"--pipeline_root={root}"]
    if case.args[0] != "runs":
        argv.append("--no_progress")
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    cwd = os.getcwd()
    os.chdir(folder)  # a relative default (pipeline_runs/) would land here, and be seen
    try:
        code = cli.main(argv)
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert code == case.exit, err
    sentence = one_sentence(err)
    if case.phrase:
        assert case.pattern(str(folder)).search(sentence), sentence
    _assert_left(root, case.left, sentence)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        {name.split("/")[0] for name in case.files}
    ), "the run wrote beside its input"
