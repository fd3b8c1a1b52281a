#!/usr/bin/env python3
"""The TFX comparison workload: the Chicago taxi data and TFX's own taxi module file.

Both come from the TFX 1.16 anchor venv (see benchmarks/anchors/README.md); nothing of
TFX is committed here.

  python benchmarks/taxi.py data N [--out_dir benchmarks/out/data]
      -> benchmarks/out/data/taxi_<N>/data.csv
      N = "sample" (or 15002) copies the 15k-row sample that ships in the tfx package as
      it is; any other N scales it with benchmarks/anchors/make_taxi_big.py (fixed
      seed 7, so the same N always gives the same file). The file sits alone in its
      folder because TFX's CsvExampleGen reads a folder.

  python benchmarks/taxi.py port [--out benchmarks/out/taxi_module_ported.py]
      -> a copy of tfx/examples/chicago_taxi_pipeline/taxi_utils_native_keras.py from the
      anchor venv where only import lines are rewritten so it runs without tfx (the
      product's promise: module files written for TFX run after changing only their
      imports). Prints every changed line; fails on a tfx import no rule covers.

The anchor venv is found from --anchor_venv, else $TFX_ANCHOR_VENV, else benchmarks/out/tfx-anchor
(made by ``sh benchmarks/anchors/setup_tfx_anchor.sh benchmarks/out/tfx-anchor``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
# The anchor scripts, copied from the project's shared anchors folder (anchors/README.md).
ANCHORS = os.environ.get("TFX_ANCHORS_DIR", os.path.join(HERE, "anchors"))
# The TFX 1.16 venv: sh benchmarks/anchors/setup_tfx_anchor.sh benchmarks/out/tfx-anchor
ANCHOR_VENV = os.environ.get("TFX_ANCHOR_VENV", os.path.join(HERE, "out", "tfx-anchor"))
SAMPLE_ROWS = 15002

TAXI_DATA = "tfx/examples/chicago_taxi_pipeline/data/simple/data.csv"
TAXI_MODULE = "tfx/examples/chicago_taxi_pipeline/taxi_utils_native_keras.py"

# Import rewrites, applied to whole import lines only. Everything not listed stays as it
# is (tensorflow, tensorflow_transform, tfx_bsl, absl ... all exist in this repo's env).
# TFX's trainer-facing names map onto this repo's ``trainer`` package.
_TRAINER_NAMES = {"FnArgs", "DataAccessor", "TunerFnResult"}
_TFX_FROM_MODULES = {
    "tfx.components.trainer.fn_args_utils",
    "tfx.components",
    "tfx.v1.components",
    "tfx.components.tuner.component",
}


def anchor_site_packages(anchor_venv: str | None = None) -> str:
    venv = anchor_venv or ANCHOR_VENV
    hits = sorted(
        glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "tfx", "__init__.py"))
    )
    if not hits:
        sys.exit(
            f"No tfx package in the anchor venv {venv!r}; run {ANCHORS}/setup_tfx_anchor.sh {venv} "
            "or pass --anchor_venv."
        )
    return os.path.dirname(os.path.dirname(hits[-1]))


def sample_csv(anchor_venv: str | None = None) -> str:
    return os.path.join(anchor_site_packages(anchor_venv), TAXI_DATA)


def prepare_data(rows: str, out_dir: str, anchor_venv: str | None = None) -> str:
    """Writes taxi_<rows>/data.csv under ``out_dir`` (kept if already there); returns it."""
    src = sample_csv(anchor_venv)
    n = SAMPLE_ROWS if rows in ("sample", str(SAMPLE_ROWS)) else int(rows)
    folder = os.path.join(out_dir, f"taxi_{n}")
    dst = os.path.join(folder, "data.csv")
    if os.path.exists(dst):
        return dst
    os.makedirs(folder, exist_ok=True)
    tmp = dst + ".tmp"  # renamed when complete, so a killed run leaves no partial data.csv
    if n == SAMPLE_ROWS:
        shutil.copyfile(src, tmp)
    else:
        subprocess.run(
            [sys.executable, os.path.join(ANCHORS, "make_taxi_big.py"), src, tmp, str(n)],
            check=True,
        )
    os.replace(tmp, dst)
    empty = empty_columns(dst)
    if empty:
        # TFX keeps an all-empty column (an empty tf.train.Feature), so the taxi module's
        # preprocessing_fn still finds it there; a pipeline that drops such a column will
        # fail with a KeyError on it: pick another N (the sample's pickup_census_tract has
        # one value in 15k rows, so N below ~100k often loses it).
        print(
            f"warning: {dst}: column(s) with no value at all: {', '.join(empty)}", file=sys.stderr
        )
    return dst


def empty_columns(path: str) -> list[str]:
    """Columns of a CSV file in which every field is empty."""
    import csv

    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        seen = [False] * len(head)
        for row in r:
            for i, v in enumerate(row):
                if v:
                    seen[i] = True
    return [h for h, s in zip(head, seen) if not s]


def _rewrite_import(line: str) -> str | None:
    """The rewritten line for a tfx import, or None when the line is not a tfx import."""
    m = re.match(r"^(\s*)from\s+(tfx(?:\.[\w.]+)?)\s+import\s+(.+?)\s*$", line)
    if m:
        indent, module, names = m.groups()
        parsed = [n.strip() for n in names.strip("()").split(",") if n.strip()]
        bare = [n.split(" as ")[0].strip() for n in parsed]
        if module in _TFX_FROM_MODULES and all(b in _TRAINER_NAMES for b in bare):
            return f"{indent}from trainer import {', '.join(parsed)}"
        raise SystemExit(f"No port rule for this tfx import: {line.strip()!r}")
    if re.match(r"^\s*import\s+tfx(\.|\s|$)", line):
        raise SystemExit(f"No port rule for this tfx import: {line.strip()!r}")
    return None


def port_module(out_path: str, anchor_venv: str | None = None) -> list[dict]:
    """Writes the ported taxi module; returns the changed lines."""
    src = os.path.join(anchor_site_packages(anchor_venv), TAXI_MODULE)
    with open(src) as f:
        lines = f.read().split("\n")
    changes = []
    for i, line in enumerate(lines):
        new = _rewrite_import(line)
        if new is not None and new != line:
            changes.append({"line": i + 1, "from": line, "to": new})
            lines[i] = new
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines))
    return changes


def check_port(path: str, python: str) -> tuple[bool, str]:
    """Imports the ported module with ``python`` (this repo's env); (ok, message)."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('taxi_ported', {path!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert callable(m.preprocessing_fn)\n"
        "print('ok')\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    if p.returncode == 0:
        return True, "imports fine"
    return False, (p.stderr.strip().splitlines() or ["?"])[-1]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--anchor_venv", default=None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="write taxi_<N>/data.csv")
    d.add_argument("rows", help='row count, or "sample" for the 15k sample as is')
    d.add_argument("--out_dir", default=os.path.join(OUT, "data"))
    p = sub.add_parser("port", help="write the import-ported taxi module")
    p.add_argument("--out", default=os.path.join(OUT, "taxi_module_ported.py"))
    p.add_argument(
        "--python",
        default=os.path.join(REPO, ".venv", "bin", "python"),
        help="interpreter of this repo's env, to check the port imports",
    )
    p.add_argument("--no_check", action="store_true")
    a = ap.parse_args()
    if a.cmd == "data":
        print(prepare_data(a.rows, a.out_dir, a.anchor_venv))
    else:
        changes = port_module(a.out, a.anchor_venv)
        for c in changes:
            print(f"line {c['line']}:\n  - {c['from']}\n  + {c['to']}")
        print(a.out)
        if not a.no_check:
            ok, msg = check_port(a.out, a.python)
            print(f"import check with {a.python}: {msg}")
            if not ok:
                sys.exit(1)
        print(json.dumps({"changed_lines": len(changes)}))


if __name__ == "__main__":
    main()
