"""The direction of imports between this project's layers (see docs/architecture.md).

From the bottom up: ``beam_pipeline.core`` (imports nothing of ours outside itself),
``trainer`` (runs inside a worker and in plain processes: core only, and no Beam),
``transforms`` (Beam PTransforms: core and trainer), and the rest of ``beam_pipeline``
(the orchestration, which may import everything below it). Every import counts, also the
lazy ones inside functions, so a cycle cannot hide in a function body.
"""

from __future__ import annotations

import ast
import os

import pytest
from conftest import REPO

# What each layer may import of ours (prefixes of module names).
_ALLOWED = {
    "core": ("beam_pipeline.core",),
    "trainer": ("beam_pipeline.core", "trainer"),
    "transforms": ("beam_pipeline.core", "trainer", "transforms"),
    "orchestration": ("beam_pipeline", "trainer", "transforms"),
    "package": (),  # beam_pipeline/__init__.py: importing any layer must stay free
}
_OURS = ("beam_pipeline", "trainer", "transforms")
# Third-party packages a layer must not import: trainer nowhere, core not at import time
# (core's user_module registers a loaded module with Beam's pickler where Beam is
# installed, inside a function that does nothing without it).
_FORBIDDEN = {"trainer": ("apache_beam",)}
_FORBIDDEN_AT_IMPORT = {"core": ("apache_beam",)}


def _layer(rel_path: str) -> str:
    if rel_path == os.path.join("beam_pipeline", "__init__.py"):
        return "package"
    if rel_path.startswith(os.path.join("beam_pipeline", "core") + os.sep):
        return "core"
    return (
        rel_path.split(os.sep)[0] if not rel_path.startswith("beam_pipeline") else ("orchestration")
    )


def _imports(source: str, module: str) -> list[tuple[int, str, bool]]:
    """(line, imported module, at import time?) for every import, relative ones resolved."""
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([base] if base else []))
            found.append((node.lineno, base, id(node) in top))
    return found


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(rel_path: str, source: str) -> list[str]:
    """The imports of the file at ``rel_path`` (relative to the repo) its layer forbids."""
    layer = _layer(rel_path)
    module = rel_path[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
    bad = []
    for line, name, at_import in _imports(source, module):
        ours = _matches(name, _OURS)
        if (
            (ours and not _matches(name, _ALLOWED[layer]))
            or _matches(name, _FORBIDDEN.get(layer, ()))
            or (at_import and _matches(name, _FORBIDDEN_AT_IMPORT.get(layer, ())))
        ):
            bad.append(f"{rel_path}:{line} ({layer}) imports {name}")
    return bad


def _sources():
    for package in _OURS:
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            if "examples" in os.path.relpath(folder, REPO).split(os.sep):
                continue  # user module files bundled as examples, not the product's layers
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), REPO)


def test_every_import_points_down():
    bad = []
    for rel in _sources():
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            bad += violations(rel, f.read())
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "rel_path, source, expected",
    [
        (os.path.join("trainer", "x.py"), "from beam_pipeline.config import Split\n", 1),
        (os.path.join("trainer", "x.py"), "def f():\n    import apache_beam\n", 1),
        (os.path.join("trainer", "x.py"), "from beam_pipeline.core import fileio\n", 0),
        (os.path.join("transforms", "x.py"), "from trainer.fn_args import FnArgs\n", 0),
        (os.path.join("transforms", "x.py"), "from beam_pipeline import pipeline\n", 1),
        (os.path.join("beam_pipeline", "core", "x.py"), "from transforms import x\n", 1),
        (os.path.join("beam_pipeline", "core", "x.py"), "import apache_beam as beam\n", 1),
        (os.path.join("beam_pipeline", "core", "x.py"), "def f():\n    import apache_beam\n", 0),
        (os.path.join("beam_pipeline", "core", "x.py"), "from . import fileio\n", 0),
        (os.path.join("beam_pipeline", "core", "x.py"), "from .. import config\n", 1),
        (os.path.join("beam_pipeline", "__init__.py"), "from beam_pipeline import cli\n", 1),
        (os.path.join("beam_pipeline", "cli.py"), "from transforms import x\n", 0),
    ],
)
def test_the_check_tells_a_wrong_import(rel_path, source, expected):
    assert len(violations(rel_path, source)) == expected
