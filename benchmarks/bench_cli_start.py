"""How long the commands that run no pipeline take: ``--help`` and ``runs list``.

They import only what they print (the stage declarations for ``--help``'s flags, the
metadata store for ``runs``), never Beam or TensorFlow; this times each as a whole process,
against another checkout of the project (the one before a change) in the same sitting,
alternating A B A B, and writes ``benchmarks/results/cli_start_<date>.json``.

Two ways Python finds the project's modules are timed: ``bytecode`` (each module's
compiled ``.pyc`` is there, as after ``pip install`` or any earlier command) and ``source``
(``PYTHONDONTWRITEBYTECODE=1`` with no ``.pyc`` of the checkouts' own, so every module of
theirs is compiled on each start, as in a container that never writes them).

Example::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/bench_cli_start.py --before /tmp/before \
        --pipeline_root <a root with runs> --repeats 9
    # after a store migration: the same runs, as the older checkout reads them
    ... --before_pipeline_root <a copy of that root made before the newer one opened it>
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _measure import run_from_checkout  # noqa: E402

REPO = os.path.dirname(HERE)


PACKAGES = ("beam_pipeline", "transforms", "trainer")


def _drop_bytecode(checkout: str) -> None:
    """Removes the checkout's own compiled modules (its packages' ``__pycache__`` folders)."""
    for package in PACKAGES:
        for root, dirs, _ in os.walk(os.path.join(checkout, package)):
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(root, "__pycache__"))
                dirs.remove("__pycache__")


def _time(checkout: str, args: list[str], bytecode: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``python -m beam_pipeline ARGS`` run from ``checkout``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc, wall, cpu = run_from_checkout(checkout, args, env)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(args)} exited {proc.returncode}")
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a checkout of the version to compare with")
    p.add_argument("--pipeline_root", required=True, help="a pipeline root with runs in it")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument(
        "--before_pipeline_root",
        default=None,
        help="the same runs in a store the older version reads (a store a newer version "
        "migrated is refused by an older one); default: --pipeline_root",
    )
    args = p.parse_args()
    roots = {
        REPO: os.path.abspath(args.pipeline_root),
        args.before: os.path.abspath(args.before_pipeline_root or args.pipeline_root),
    }
    commands = {
        "--help": lambda checkout: ["--help"],
        "runs list": lambda checkout: ["runs", "list", f"--pipeline_root={roots[checkout]}"],
    }
    results: dict[str, dict] = {}
    for mode in ("source", "bytecode"):
        for checkout in (REPO, args.before):
            _drop_bytecode(checkout)
        for name, argv in commands.items():
            # Warm-up: the file cache, and in bytecode mode each checkout's .pyc files.
            for checkout in (REPO, args.before):
                _time(checkout, argv(checkout), mode == "bytecode")
            runs: dict[str, list[tuple[float, float]]] = {"after": [], "before": []}
            for _ in range(args.repeats):
                runs["after"].append(_time(REPO, argv(REPO), mode == "bytecode"))
                runs["before"].append(_time(args.before, argv(args.before), mode == "bytecode"))
            found: dict = {
                version: {
                    "wall_s_median": round(statistics.median(w for w, _ in r), 4),
                    "cpu_s_median": round(statistics.median(c for _, c in r), 4),
                    "wall_s": [round(w, 4) for w, _ in r],
                }
                for version, r in runs.items()
            }
            ratios = [a[0] / b[0] for a, b in zip(runs["after"], runs["before"])]
            found["after_over_before_wall_median"] = round(statistics.median(ratios), 3)
            results[f"{name} ({mode})"] = found
    now = datetime.datetime.now(datetime.timezone.utc)
    out = {
        "benchmark": "cli_start",
        "date": now.isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "loadavg": list(os.getloadavg()),
        },
        "before": os.path.abspath(args.before),
        "pipeline_roots": {"after": roots[REPO], "before": roots[args.before]},
        "repeats": args.repeats,
        "results": results,
    }
    path = os.path.join(HERE, "results", f"cli_start_{now.strftime('%Y%m%d-%H%M')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(results, indent=2))
    print(path)


if __name__ == "__main__":
    main()
