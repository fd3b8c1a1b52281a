"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, a page
missing from the nav or an anchor that does not exist fails it), its flag reference is the
parser's, the README stays a front page, and the getting-started tutorial runs exactly as
its page writes it (the files and commands are read from ``docs/getting-started.md``)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

DOCS = os.path.join(REPO, "docs")
TUTORIAL = os.path.join(DOCS, "getting-started.md")


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        (value,) = entry.values()
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _mkdocs_config() -> dict:
    with open(os.path.join(REPO, "mkdocs.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_the_site_builds_with_strict_checks(tmp_path):
    try:
        import material  # noqa: F401  (mkdocs-material: the theme)
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("mkdocs is not installed: run sh scripts/env.sh (requirements-docs.txt)")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),  # Material's notice about its future
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every page of the nav was built, and every page of docs/ is in the nav.
    pages = _nav_pages(_mkdocs_config()["nav"])
    on_disk = sorted(os.path.relpath(p, DOCS) for p in glob.glob(os.path.join(DOCS, "*.md")))
    assert sorted(pages) == on_disk
    for page in pages:
        name = "" if page == "index.md" else page[: -len(".md")]
        assert (site / name / "index.html").exists(), page
    # The flag reference was generated at build time: every flag of the parser is on it.
    from beam_pipeline.flags import build_parser

    html = (site / "flags" / "index.html").read_text(encoding="utf-8")
    assert "flags: generated" not in html
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option != "-h" and option != "--help":
                assert f"<code>{option}</code>" in html, option
    # The home page's stage table was generated from the graph: every stage has its row.
    from beam_pipeline.stages.graph import STAGE_GRAPH

    home = (site / "index.html").read_text(encoding="utf-8")
    assert "stages: generated" not in home
    for stage in STAGE_GRAPH:
        assert f"<td>{stage.name}</td>" in home, stage.name


def test_the_flag_reference_shows_each_flags_default_and_meaning():
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    try:
        import docs_flags
    finally:
        sys.path.pop(0)
    rows = {
        line.split(" | ")[0].lstrip("| "): line
        for line in docs_flags.flag_tables().splitlines()
        if line.startswith("| `")
    }
    assert rows["`--train_steps`"].split(" | ")[1] == "`100`"
    assert rows["`--split_buckets`"].split(" | ")[1] == "`train=2,eval=1`"
    assert rows["`--pipeline_root`"].split(" | ")[1] == "`pipeline_runs`"
    assert "One of `rolling`, `rounds`, `search_job`." in rows["`--tuner_schedule`"]
    # A flag without help text takes its config field's docstring.
    assert "field separator" in rows["`--csv_delimiter`"]


def test_the_readme_is_a_front_page_and_nothing_outside_benchmarks_is_dated():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert len(readme.splitlines()) <= 250
    # The README's two commands, as CI (.ci/run) and a fresh clone run them.
    assert "sh scripts/env.sh && .venv/bin/python -m beam_pipeline --runner=DirectRunner" in readme
    assert "sh scripts/env.sh && .venv/bin/python -m pytest" in readme
    # Its links to the docs and the benchmarks lead to files that exist.
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme):
        assert os.path.exists(os.path.join(REPO, target)), target
    dated = re.compile(
        r"\b20\d\d-\d\d-\d\d\b|load average|\b\d+-core machine|measured (?:here|on)"
        r"|\bcommit [0-9a-f]{7}|\b[0-9a-f]{7}\^"
    )
    for path in ["README.md", *glob.glob(os.path.join("docs", "*.md"), root_dir=REPO)]:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                assert not dated.search(line), f"{path}:{number}: {line.strip()}"


def test_the_readmes_module_is_the_tutorials():
    """The README shows the getting-started page's module file, which the test below runs."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## Your data and your module in five minutes", 1)[1]
    module = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert module == _tutorial()[0]["my_module.py"]


def _tutorial() -> tuple[dict[str, str], list[str]]:
    """The getting-started page's files (blocks with a title) and commands (sh blocks
    after ``<!-- test: run -->``), in the page's order."""
    with open(TUTORIAL, encoding="utf-8") as f:
        page = f.read()
    files = dict(re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', page, re.M | re.S))
    commands = re.findall(r"^<!-- test: run -->\n```sh\n(.*?)^```$", page, re.M | re.S)
    return files, commands


@pytest.mark.slow
def test_the_getting_started_page_runs_as_written(tmp_path):
    files, commands = _tutorial()
    assert set(files) == {"churn.csv", "my_module.py"}
    assert len(commands) == 3, commands
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # A user's shell with the venv activated: its bin first on PATH, the page's folder.
    # COLUMNS: a wide terminal, so that `runs list`'s table prints whole run ids.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    env = dict(os.environ, PATH=path, COLUMNS="250", NO_MKDOCS_2_WARNING="1")
    outputs = []
    for command in commands:
        proc = subprocess.run(
            ["bash", "-c", "set -e\n" + command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        outputs.append(proc.stdout)
    runs = sorted(glob.glob(str(tmp_path / "pipeline_runs" / "runs" / "*")))
    assert len(runs) == 2, runs
    statuses = []
    for run in runs:
        with open(os.path.join(run, "summary.json")) as f:
            statuses.append({s["stage"]: s["status"] for s in json.load(f)["stages"]})
    # Step 2: the data stages alone (no module file: Transform and later do not run).
    assert [statuses[0][s] for s in ("ExampleGen", "Statistics", "Schema", "Validation")] == [
        "ok"
    ] * 4
    # Step 4: every stage, the module's tuner_fn and run_fn included.
    for stage in ("Transform", "Tuner", "Trainer", "Evaluator", "InfraValidator"):
        assert statuses[1][stage] == "ok", statuses[1]
    assert os.path.exists(os.path.join(runs[1], "model", "saved_model.pb"))
    with open(os.path.join(runs[1], "tuner", "trials.json")) as f:
        assert len(json.load(f)["trials"]) == 2  # --tuner_max_trials=2
    # Step 5: both runs in the history.
    for run in runs:
        assert os.path.basename(run) in outputs[2]


def test_the_bad_input_table_names_every_corpus_row_with_its_ending():
    """docs/bad-input.md and the suite's corpus (tests/bad_input_corpus.py) cannot drift
    apart: each row of the corpus is named on exactly one line of the table, whose "how it
    ends" gives the row's exit code and what it leaves, and each name there is a row."""
    from bad_input_corpus import CASES, DOCS_LINK, Left, docs_rows

    corpus = {case.id: case for case in CASES}
    named = {}
    for case_cell, ending, tested_by in docs_rows():
        for row in DOCS_LINK.findall(tested_by):
            assert row in corpus, f"docs/bad-input.md names corpus row {row!r}, which is not one"
            assert row not in named, f"docs/bad-input.md names corpus row {row!r} twice"
            named[row] = (case_cell, ending)
    for case in CASES:
        if case.pending:  # not fixed yet: the fix writes its line
            assert case.id not in named, f"{case.id} is still pending but in the docs table"
            continue
        assert case.id in named, f"corpus row {case.id!r} is not in docs/bad-input.md's table"
        case_cell, ending = named[case.id]
        assert ending.startswith(f"exit {case.exit}"), (case.id, case_cell, ending)
        leaves = "leaves: nothing" if case.left is Left.NOTHING else "leaves: the run's record"
        assert leaves in ending, (case.id, case_cell, ending)
