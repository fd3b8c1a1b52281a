"""benchmarks/gpu_watch.py's process kinds, on the process tree of a real bundled run
(pids and command lines as /proc showed them): the launcher forks the fork server from
itself and the server forks the tuner's and trainer's processes, so all of them carry the
launcher's command line, and only their place in the tree tells them apart."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))

import gpu_watch  # noqa: E402

_LAUNCHER = ".venv/bin/python -m beam_pipeline --pipeline_root=/tmp/r --no_evaluator"
_CHILD = "fork-server child (tuner pool worker, trainer or forked SDK worker)"


def _tree(root_cmdline=None):
    tree = {
        6638: (6636, _LAUNCHER),
        6643: (
            6638,
            "/x/.venv/bin/python -B -c from multiprocessing.resource_tracker import main;main(7)",
        ),
        6644: (6638, _LAUNCHER),  # the fork server
        6645: (6644, _LAUNCHER),  # tuner pool workers
        6652: (6644, _LAUNCHER),
        7276: (6644, _LAUNCHER),  # the trainer's process
        7300: (7276, "/x/nvidia/cuda_nvcc/bin/ptxas -arch=sm_90"),
        7400: (6638, "/x/python /x/beam_pipeline/stages/infra_validator/sandbox.py --model m"),
    }
    if root_cmdline:
        tree[6636] = (1, root_cmdline)
    return tree


def test_kinds_by_place_in_the_tree():
    tree = _tree()
    kinds = {pid: gpu_watch.kind(pid, 6638, tree) for pid in tree}
    assert kinds == {
        6638: "launcher",
        6643: "resource tracker",
        6644: "fork server",
        6645: _CHILD,
        6652: _CHILD,
        7276: _CHILD,
        7300: "/x/nvidia/cuda_nvcc/bin/ptxas",
        7400: "InfraValidator sandbox",
    }
    assert gpu_watch.kind(99, 6638, tree) == "not this run"


def test_launcher_under_a_timeout():
    tree = _tree("timeout 150 .venv/bin/python -m beam_pipeline --pipeline_root=/tmp/r")
    assert gpu_watch.kind(6636, 6636, tree) == "timeout (the launcher's wrapper)"
    assert gpu_watch.kind(6638, 6636, tree) == "launcher"
    assert gpu_watch.kind(6644, 6636, tree) == "fork server"
    assert gpu_watch.kind(6652, 6636, tree) == _CHILD
