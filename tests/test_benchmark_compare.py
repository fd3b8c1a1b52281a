"""benchmarks/compare.py --sittings on results files of its own making: which run of ours
each TFX run is compared with (the headline ratios are medians of these pairs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _result(folder, system: str, started: str, seconds: float) -> None:
    """A results file whose data stages take ``seconds``: ExampleGen a tenth, Transform
    the rest."""
    stages = dict.fromkeys(("Statistics", "Schema", "Validation"), 0.0)
    stages["ExampleGen"], stages["Transform"] = seconds / 10, seconds * 9 / 10
    doc = {
        "system": system,
        "workload": "taxi_1000000",
        "rows": 1000000,
        "mode": "in_memory" if system == "beam_pipeline" else None,
        "ok": True,
        "started": started,
        "stages_s": stages,
        "peak_tree_rss_mib": 1000.0,
    }
    (folder / f"{system}_{started}.json").write_text(json.dumps(doc))


def test_each_tfx_run_is_compared_with_our_first_run_after_it_not_the_nearest(tmp_path):
    # run_sitting.sh runs TFX, then ours: a run of ours that started before a TFX run
    # belongs to the sitting before, however near it is.
    _result(tmp_path, "beam_pipeline", "20261130-095800", 10.0)  # the sitting before's
    _result(tmp_path, "tfx_1.16", "20261130-100000", 100.0)
    _result(tmp_path, "beam_pipeline", "20261130-100500", 20.0)  # this sitting's, later
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "compare.py"), "--sittings"]
        + ["--results_dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "| 20261130-100000 / 20261130-100500 | 100.0 / 20.0 s = 5.00x |" in out.stdout, (
        out.stdout
    )
    assert "Transform: median 5.00x over 1 sittings" in out.stdout
