"""The shape of this project's imports (see docs/architecture.md).

The layers, from the bottom up: ``beam_pipeline.core`` (imports nothing of ours outside
itself), ``trainer`` (runs inside a worker and in plain processes: core only, and no Beam),
``transforms`` (Beam PTransforms: core and trainer), and the rest of ``beam_pipeline`` (the
orchestration, which may import everything below it). Inside the orchestration:
``beam_pipeline.engine`` (the run machinery) imports no stage; each stage has one home
(``beam_pipeline/stages/<stage>/`` or ``stages/<stage>.py``, its Beam side in
``transforms/<stage>``) that imports no sibling stage's home; no top-level module is named after
a stage; and a stage's declaration imports Beam and TensorFlow only inside the functions that
run them, so that ``--help`` and ``runs`` do not load them.

Every import counts, also the lazy ones inside functions and those under ``TYPE_CHECKING``,
so that a circle cannot hide in a function body.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys

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
# What a stage's declaration may import only inside a function: loading any of them takes
# seconds, and `--help`, `runs` and the flag parser import every declaration.
_HEAVY = (
    "apache_beam",
    "keras",
    "keras_tuner",
    "tensorflow",
    "tensorflow_model_analysis",
    "tensorflow_transform",
    "tfx_bsl",
)


def _layer(rel_path: str) -> str:
    if rel_path == os.path.join("beam_pipeline", "__init__.py"):
        return "package"
    if rel_path.startswith(os.path.join("beam_pipeline", "core") + os.sep):
        return "core"
    return (
        rel_path.split(os.sep)[0] if not rel_path.startswith("beam_pipeline") else ("orchestration")
    )


def _module_name(rel_path: str) -> str:
    return rel_path[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(source: str, rel_path: str) -> list[tuple[int, str, list[str], bool]]:
    """(line, module, names, runs at import time?) for every import statement.

    ``import a.b`` gives ``("a.b", [])``, ``from a import b, c`` ``("a", ["b", "c"])``,
    relative modules resolved. An import runs at import time unless it sits in a function
    body or under ``if TYPE_CHECKING:``.
    """
    module = _module_name(rel_path)
    package_parts = module.split(".")
    if not rel_path.endswith("__init__.py"):
        package_parts = package_parts[:-1]  # a relative import starts from the package
    found = []

    def visit(node: ast.AST, at_import: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, [], at_import) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package_parts[: len(package_parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            found.append((node.lineno, base, [a.name for a in node.names], at_import))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            at_import = False
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, at_import)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, at_import)

    visit(ast.parse(source), True)
    return found


def _imports(source: str, rel_path: str) -> list[tuple[int, str, bool]]:
    """(line, imported module, runs at import time?) for every import."""
    return [(line, base, at) for line, base, _, at in _statements(source, rel_path)]


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(rel_path: str, source: str) -> list[str]:
    """The imports of the file at ``rel_path`` (relative to the repo) its layer forbids."""
    layer = _layer(rel_path)
    bad = []
    for line, name, at_import in _imports(source, rel_path):
        ours = _matches(name, _OURS)
        if (
            (ours and not _matches(name, _ALLOWED[layer]))
            or _matches(name, _FORBIDDEN.get(layer, ()))
            or (at_import and _matches(name, _FORBIDDEN_AT_IMPORT.get(layer, ())))
        ):
            bad.append(f"{rel_path}:{line} ({layer}) imports {name}")
    return sorted(set(bad))


def _sources(root: str = REPO):
    for package in _OURS:
        for folder, _, files in os.walk(os.path.join(root, package)):
            if "examples" in os.path.relpath(folder, root).split(os.sep):
                continue  # user module files bundled as examples, not the product's layers
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), root)


def _read_all(root: str = REPO) -> dict[str, str]:
    """rel_path -> source of every module of ours."""
    out = {}
    for rel in _sources(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            out[rel] = f.read()
    return out


def _targets(name: str, modules: set[str]) -> str | None:
    """The module of ours an imported name loads: itself, or the module defining it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(
    sources: dict[str, str], ours: tuple[str, ...] = _OURS
) -> dict[str, dict[str, tuple[int, bool]]]:
    """module -> {imported module of ours -> (first line, any import at import time?)}.

    ``from pkg import sub`` where ``sub`` is a module counts as an import of ``pkg.sub``
    alone; ``from pkg import name`` as one of ``pkg`` (its ``__init__``), so a submodule
    that takes a name from its own package's ``__init__`` while that ``__init__`` imports
    it is a circle. The implicit import of a parent package is not an edge (a package
    importing its own submodules is the usual shape, not a circle).
    """
    modules = {_module_name(rel) for rel in sources}
    graph: dict[str, dict[str, tuple[int, bool]]] = {m: {} for m in modules}
    for rel, source in sources.items():
        module = _module_name(rel)
        for line, base, names, at_import in _statements(source, rel):
            imported = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            if not names or len(imported) < len(names):
                imported.append(base)  # a name defined in `base` itself
            for name in imported:
                target = _targets(name, modules)
                if not target or target == module or not _matches(target, ours):
                    continue
                first, any_at_import = graph[module].get(target, (line, False))
                graph[module][target] = (min(first, line), any_at_import or at_import)
    return graph


def circles(graph: dict[str, dict[str, tuple[int, bool]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def _describe_circle(component: list[str], graph, modules: dict[str, str]) -> str:
    members = set(component)
    lines = [f"circle of {len(component)} modules: {', '.join(component)}"]
    for m in component:
        for target, (line, _) in sorted(graph[m].items()):
            if target in members:
                lines.append(f"  {modules[m]}:{line} {m} -> {target}")
    return "\n".join(lines)


def stage_names(graph_source: str) -> list[str]:
    """The stages stages/graph.py lists: the ``beam_pipeline.stages.<stage>`` it imports."""
    names = set()
    for node in ast.walk(ast.parse(graph_source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "beam_pipeline.stages."
        ):
            names.add(node.module.split(".")[2])
    return sorted(names)


def _stage_names() -> list[str]:
    with open(os.path.join(REPO, "beam_pipeline", "stages", "graph.py"), encoding="utf-8") as f:
        names = stage_names(f.read())
    assert "trainer" in names and "example_gen" in names, names  # the parse found them
    return names


def home(module: str, stages: list[str]) -> str | None:
    """The stage home a module belongs to, as ``<package>.<stage>``, or None.

    ``beam_pipeline.stages.<x>`` (a folder or a module, other than ``common`` and ``graph``)
    and ``transforms.<x>`` where ``x`` is a stage of the graph.
    """
    parts = module.split(".")
    if parts[:2] == ["beam_pipeline", "stages"] and len(parts) > 2:
        if parts[2] in ("common", "graph"):
            return None
        return f"beam_pipeline.stages.{parts[2]}"
    if parts[0] == "transforms" and len(parts) > 1 and parts[1] in stages:
        return f"transforms.{parts[1]}"
    return None


def sibling_imports(graph, stages: list[str], modules: dict[str, str]) -> list[str]:
    """Imports from one stage home into another home of the same side."""
    bad = []
    for module, targets in graph.items():
        mine = home(module, stages)
        if mine is None:
            continue
        for target, (line, _) in targets.items():
            theirs = home(target, stages)
            if theirs and theirs != mine and theirs.split(".")[0] == mine.split(".")[0]:
                bad.append(f"{modules[module]}:{line} ({mine}) imports {target} ({theirs})")
    return sorted(bad)


def _declarations(sources: dict[str, str]) -> list[str]:
    """The stage declaration modules: stages/*/stage.py, stages/*.py (and the graph)."""
    stages_dir = os.path.join("beam_pipeline", "stages")
    out = []
    for rel in sources:
        folder, name = os.path.split(rel)
        if folder == stages_dir and name != "__init__.py":
            out.append(rel)
        elif os.path.dirname(folder) == stages_dir and name == "stage.py":
            out.append(rel)
    return sorted(out)


def heavy_at_import(rel_path: str, source: str) -> list[str]:
    """The imports of _HEAVY packages in ``source`` that run when the module is imported."""
    return [
        f"{rel_path}:{line} imports {name} at import time"
        for line, name, at_import in _imports(source, rel_path)
        if at_import and _matches(name, _HEAVY)
    ]


# -- the tests on the tree ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tree():
    sources = _read_all()
    modules = {_module_name(rel): rel for rel in sources}
    return sources, modules, import_graph(sources)


def test_every_import_points_down(tree):
    sources, _, _ = tree
    bad = [v for rel, source in sources.items() for v in violations(rel, source)]
    assert not bad, "\n".join(bad)


def test_no_import_circle(tree):
    _, modules, graph = tree
    found = circles(graph)
    assert not found, "\n".join(_describe_circle(c, graph, modules) for c in found)


# The orchestration's modules above the run machinery, the Beam runtime and the store.
_ABOVE_THE_MACHINERY = tuple(
    f"beam_pipeline.{m}"
    for m in ("cli", "flags", "history", "pipeline", "progress", "report", "shadowing", "stages")
)


@pytest.mark.parametrize(
    "package", ["beam_pipeline.engine", "beam_pipeline.runtime", "beam_pipeline.metadata"]
)
def test_the_machinery_imports_no_stage_and_nothing_above_it(tree, package):
    _, modules, graph = tree
    bad = [
        f"{modules[m]}:{line} {m} imports {target}"
        for m, targets in graph.items()
        if _matches(m, (package,))
        for target, (line, _) in targets.items()
        if _matches(target, _ABOVE_THE_MACHINERY)
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_stage_imports_what_runs_or_renders_the_stages(tree):
    # The run, the CLI, the history and the report sit above the stages (the report renders
    # each stage's sections): a stage importing one of them is an arrow back up. The SVG
    # plots a stage's section draws are core's (beam_pipeline.core.svg).
    _, modules, graph = tree
    above = tuple(m for m in _ABOVE_THE_MACHINERY if m != "beam_pipeline.stages")
    bad = [
        f"{modules[m]}:{line} {m} imports {target}"
        for m, targets in graph.items()
        if _matches(m, ("beam_pipeline.stages",))
        for target, (line, _) in targets.items()
        if _matches(target, above)
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_stage_imports_a_sibling_stage(tree):
    _, modules, graph = tree
    bad = sibling_imports(graph, _stage_names(), modules)
    assert not bad, "\n".join(bad)


def stage_imports(module: str, graph, stages: list[str], modules: dict[str, str]) -> list[str]:
    """The imports of a stage's home (either side) by ``module``."""
    return sorted(
        f"{modules[module]}:{line} imports {target} ({home(target, stages)})"
        for target, (line, _) in graph.get(module, {}).items()
        if home(target, stages)
    )


def test_the_run_imports_no_stage(tree):
    # pipeline.py runs any graph (--graph too): what a stage needs for the whole run comes
    # from the stage's own hooks (prepare, input_data, start), not from the run's code.
    _, modules, graph = tree
    bad = stage_imports("beam_pipeline.pipeline", graph, _stage_names(), modules)
    assert not bad, "\n".join(bad)


def test_the_check_tells_a_run_that_imports_a_stage():
    sources = {
        _p("beam_pipeline", "pipeline.py"): (
            "from beam_pipeline.stages.graph import STAGE_GRAPH\n"
            "from transforms import example_gen as eg\n"
            "def run():\n    from beam_pipeline.stages.tuner.stage import TunerStage\n"
        ),
        _p("beam_pipeline", "stages", "graph.py"): "",
        _p("beam_pipeline", "stages", "tuner", "stage.py"): "",
        _p("transforms", "example_gen", "__init__.py"): "",
    }
    modules = {_module_name(rel): rel for rel in sources}
    bad = stage_imports(
        "beam_pipeline.pipeline", import_graph(sources), ["example_gen", "tuner"], modules
    )
    assert [b.split(" ")[0] for b in bad] == [
        _p("beam_pipeline", "pipeline.py") + ":2",
        _p("beam_pipeline", "pipeline.py") + ":4",
    ]


def test_the_stage_context_carries_nothing_stage_specific():
    # What one stage reads for the run is its own (ctx.prepared, ctx.started): no field of
    # the context every stage gets is named after a stage, its settings or its artifacts,
    # and none is an untyped value (Beam's options aside: not imported there).
    import dataclasses
    import re

    from beam_pipeline.engine.stage import StageContext
    from beam_pipeline.stages.graph import STAGE_GRAPH

    words = set()
    for stage in STAGE_GRAPH:
        words.update(re.findall(r"[a-z]+", stage.name.lower()))
        words.update((stage.config_key or "").split("_"))
        words.update(artifact.FOLDER for artifact in stage.outputs)
    words.discard("")
    assert {"data", "schema", "tuner", "examples"} <= words, words
    fields = {f.name: f.type for f in dataclasses.fields(StageContext)}
    named = [name for name in fields if {name, *name.split("_")} & words]
    assert not named, f"StageContext fields named after a stage's data: {named}"
    untyped = [name for name, kind in fields.items() if kind == "Any" and name != "options"]
    assert not untyped, f"StageContext fields typed Any: {untyped}"


def cross_reads(rel_path: str, source: str, sections, own, declared) -> list[str]:
    """The reads of another stage's settings section in ``source`` that the stage does not
    declare: ``<...>config.<key>`` (``config``, ``ctx.config``, ``jobs.config``...) where
    ``key`` is one of ``sections`` but not ``own``, allowed as ``"<key>.<field>"`` or a
    whole ``"<key>"`` in ``declared`` (its :attr:`Stage.reads`)."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in sections and node.attr != own):
            continue
        base = node.value
        name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
        if not name.endswith("config"):
            continue
        parent = parents.get(node)
        field = parent.attr if isinstance(parent, ast.Attribute) else None
        if node.attr in declared or (field and f"{node.attr}.{field}" in declared):
            continue
        what = f"{node.attr}.{field}" if field else node.attr
        bad.append(f"{rel_path}:{node.lineno} reads {what}")
    return bad


def _stage_folders():
    """(stage, its home's folder) of each stage of the bundled graph."""
    import sys as _sys

    from beam_pipeline.stages.graph import STAGE_GRAPH

    for stage in STAGE_GRAPH:
        yield stage, os.path.dirname(_sys.modules[type(stage).__module__].__file__)


def test_a_stage_reads_only_its_own_settings_and_the_runs(tree):
    # What a stage takes from another stage's settings is declared (Stage.reads), never read
    # in passing: a stage's folder reads its own section and the run's settings; the shared
    # helpers in stages/common read none (they take the values).
    from beam_pipeline.engine.config import section_classes

    sources, _, _ = tree
    stages = list(_stage_folders())  # importing the graph registers its sections
    sections = section_classes()
    assert {"evaluator", "trainer", "data"} <= set(sections), sections
    bad = []
    checked = {os.path.join("beam_pipeline", "stages", "common"): (None, ())}
    for stage, folder in stages:
        checked[os.path.relpath(folder, REPO)] = (stage.config_key, stage.reads)
        for name in stage.reads:  # each declared read names a setting of a section
            key, _, field = name.partition(".")
            assert key in sections and key != stage.config_key, (stage.name, name)
            if field:
                assert field in {f.name for f in dataclasses.fields(sections[key])}, name
    for folder, (own, declared) in checked.items():
        for rel in sorted(r for r in sources if os.path.dirname(r) == folder):
            bad += cross_reads(rel, sources[rel], sections, own, declared)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "source, declared, expected",
    [
        ("x = ctx.config.evaluator.eval_split\n", (), ["x.py:1 reads evaluator.eval_split"]),
        ("x = ctx.config.evaluator.eval_split\n", ("evaluator.eval_split",), []),
        (
            "x = config.evaluator.enabled\n",
            ("evaluator.eval_split",),
            ["x.py:1 reads evaluator.enabled"],
        ),
        ("e = jobs.config.trainer\n", ("trainer.entry_point",), ["x.py:1 reads trainer"]),
        ("e = config.data\nf(e.csv_delimiter)\n", ("data",), []),
        ("x = ctx.config.pusher.destination\n", (), []),  # its own section
        ("x = config.module_file\n", (), []),  # the run's setting
        ("x = eval_config.metrics_specs\n", (), []),  # no section
    ],
)
def test_the_check_tells_an_undeclared_cross_read(source, declared, expected):
    sections = {"evaluator": None, "trainer": None, "data": None, "pusher": None}
    assert cross_reads("x.py", source, sections, "pusher", declared) == expected


def named_after_a_stage(names: list[str], stages: list[str]) -> list[str]:
    """The module names among ``names`` that a stage's own: ``<stage>``, ``<stage>_stage``,
    ``<stage>s``."""
    return sorted(n for n in names if any(n in (s, f"{s}_stage", f"{s}s") for s in stages))


def test_no_top_level_module_is_named_after_a_stage():
    folder = os.path.join(REPO, "beam_pipeline")
    names = [
        entry.removesuffix(".py")
        for entry in os.listdir(folder)
        if entry.endswith(".py") or os.path.isdir(os.path.join(folder, entry))
    ]
    bad = named_after_a_stage(names, _stage_names())
    assert not bad, f"beam_pipeline/ has modules named after a stage: {bad}"


@pytest.mark.parametrize(
    "names, expected",
    [
        (["cli", "evaluator", "pusher_stage", "stages"], ["evaluator", "pusher_stage"]),
        (["cli", "config", "engine", "runtime"], []),
    ],
)
def test_the_check_tells_a_stage_named_module(names, expected):
    assert named_after_a_stage(names, ["evaluator", "pusher", "trainer"]) == expected


def test_stage_declarations_import_beam_and_tensorflow_only_inside_functions(tree):
    sources, _, _ = tree
    declarations = _declarations(sources)
    assert os.path.join("beam_pipeline", "stages", "tuner", "stage.py") in declarations
    bad = [v for rel in declarations for v in heavy_at_import(rel, sources[rel])]
    assert not bad, "\n".join(bad)


def test_importing_the_stage_graph_loads_no_beam_or_tensorflow():
    # The AST rule above sees a declaration's own imports; this sees what the modules it
    # imports at the top bring in, the way `--help` and `runs` import the graph.
    code = (
        "import sys; import beam_pipeline.stages.graph; "
        f"print(sorted(m for m in {_HEAVY!r} if m in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_help_imports_the_stage_declarations_and_none_of_their_work():
    # TFX's split: a stage's declaration (stage.py, with its settings and artifact types)
    # is what --help reads for its flags; the work (executor.py, report.py, the engine's
    # run machinery, the console, the runtime) loads only when a run needs it.
    code = (
        "import contextlib, io, sys\n"
        "from beam_pipeline import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        cli.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    loaded = out.stdout.split()
    ours = [m for m in loaded if m.split(".")[0] in ("beam_pipeline", "transforms", "trainer")]
    assert "beam_pipeline.stages.tuner.stage" in ours, ours  # the declarations are read
    declaration_parts = {"stage", "settings", "artifacts"}
    engine_parts = {"artifacts", "config", "events", "stage"}
    work = [
        m
        for m in ours
        if m.split(".")[0] != "beam_pipeline"
        or m.startswith(("beam_pipeline.runtime", "beam_pipeline.metadata"))
        or m.startswith(("beam_pipeline.report", "beam_pipeline.history"))
        or m in ("beam_pipeline.console", "beam_pipeline.progress", "beam_pipeline.pipeline")
        or (m.startswith("beam_pipeline.engine.") and m.split(".")[2] not in engine_parts)
        or (
            m.startswith("beam_pipeline.stages.")
            and m.count(".") == 3
            and m.split(".")[2] != "common"
            and m.split(".")[3] not in declaration_parts
        )
    ]
    assert not work, work
    assert not [m for m in _HEAVY if m in loaded]


# -- the checks tell a wrong shape -------------------------------------------------------


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
        (os.path.join("beam_pipeline", "core", "__init__.py"), "from . import fileio\n", 0),
        (os.path.join("beam_pipeline", "core", "__init__.py"), "from .. import config\n", 1),
        (os.path.join("beam_pipeline", "__init__.py"), "from beam_pipeline import cli\n", 1),
        (os.path.join("beam_pipeline", "cli.py"), "from transforms import x\n", 0),
    ],
)
def test_the_check_tells_a_wrong_import(rel_path, source, expected):
    assert len(violations(rel_path, source)) == expected


def _p(*parts: str) -> str:
    return os.path.join(*parts)


@pytest.mark.parametrize(
    "sources, expected",
    [
        # Two modules importing each other, one of them inside a function.
        (
            {_p("a", "x.py"): "import a.y\n", _p("a", "y.py"): "def f():\n    from a import x\n"},
            [["a.x", "a.y"]],
        ),
        # Under TYPE_CHECKING counts too.
        (
            {
                _p("a", "x.py"): "from a.y import Y\n",
                _p("a", "y.py"): "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from a.x import X\n",
            },
            [["a.x", "a.y"]],
        ),
        # A submodule taking a name from its package's __init__, which imports it.
        (
            {
                _p("a", "__init__.py"): "from a.x import f\nG = 1\n",
                _p("a", "x.py"): "from a import G\ndef f(): pass\n",
            },
            [["a", "a.x"]],
        ),
        # ... but importing a sibling submodule through the package is no circle.
        (
            {
                _p("a", "__init__.py"): "from a.x import f\n",
                _p("a", "x.py"): "from a import y\ndef f(): pass\n",
                _p("a", "y.py"): "",
            },
            [],
        ),
        # A relative import in a package's __init__ starts from the package itself.
        (
            {
                _p("a", "__init__.py"): "from .x import f\n",
                _p("a", "x.py"): "from . import y\n",
                _p("a", "y.py"): "from . import x\n",
            },
            [["a.x", "a.y"]],
        ),
        # A chain is no circle.
        ({_p("a", "x.py"): "import a.y\n", _p("a", "y.py"): "import os\n"}, []),
    ],
)
def test_the_check_tells_a_circle(sources, expected):
    assert circles(import_graph(sources, ours=("a",))) == expected


def test_the_check_tells_a_sibling_stage_import():
    sources = {
        _p("beam_pipeline", "stages", "pusher", "stage.py"): (
            "def f():\n    from beam_pipeline.stages.evaluator.stage import g\n"
        ),
        _p("beam_pipeline", "stages", "evaluator", "stage.py"): (
            "from beam_pipeline.stages.common.x import h\n"
            "from beam_pipeline.stages.evaluator import evaluation\n"
        ),
        _p("beam_pipeline", "stages", "evaluator", "evaluation.py"): "",
        _p("beam_pipeline", "stages", "common", "x.py"): "",
        _p("transforms", "bulk_inferrer.py"): "from transforms.example_gen.x import R\n",
        _p("transforms", "example_gen", "x.py"): "from transforms.metrics import N\n",
        _p("transforms", "metrics.py"): "",
    }
    modules = {_module_name(rel): rel for rel in sources}
    stages = ["bulk_inferrer", "evaluator", "example_gen", "pusher"]
    bad = sibling_imports(import_graph(sources), stages, modules)
    assert [b.split(" ")[0] for b in bad] == [
        _p("beam_pipeline", "stages", "pusher", "stage.py") + ":2",
        _p("transforms", "bulk_inferrer.py") + ":1",
    ]


def test_the_stage_names_come_from_the_graph():
    source = (
        "from beam_pipeline.engine.stage import Stage\n"
        "from beam_pipeline.stages.tuner.stage import TunerStage\n"
        "from beam_pipeline.stages.example_gen.stage import ExampleGenStage\n"
    )
    assert stage_names(source) == ["example_gen", "tuner"]


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import apache_beam as beam\n", 1),
        ("import tensorflow.compat.v1\n", 1),
        ("try:\n    import keras\nexcept ImportError:\n    pass\n", 1),
        ("class C:\n    from tfx_bsl.public import tfxio\n", 1),
        ("def f():\n    import apache_beam as beam\n", 0),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tensorflow\n", 0),
        ("import tensorflow_metadata\n", 0),
    ],
)
def test_the_check_tells_a_heavy_import(source, expected):
    assert len(heavy_at_import("x.py", source)) == expected


# -- the report knows no stage -------------------------------------------------------------


def _stage_words() -> set[str]:
    """What names a bundled stage: its name (and the summary rows a combined name joins)
    and the class names of the artifact types it reads and writes."""
    from beam_pipeline.stages.graph import STAGE_GRAPH

    words = set()
    for stage in STAGE_GRAPH:
        words.update([stage.name, *stage.name.split("+")])
        words.update(t.__name__ for t in (*stage.outputs, *(i.type for i in stage.inputs)))
    return words


def stage_mentions(rel_path: str, text: str, words: set[str]) -> list[str]:
    """Each whole-word, case-sensitive occurrence of ``words`` in ``text``."""
    return [
        f"{rel_path}:{text.count(chr(10), 0, m.start()) + 1} names {m.group(0)}"
        for word in sorted(words)
        for m in re.finditer(rf"(?<![\w+]){re.escape(word)}(?![\w+])", text)
    ]


def report_imports_of_stages(graph, modules: dict[str, str], stages: list[str]) -> list[str]:
    """Imports from the report package of a stage home or an artifact type's module."""
    return sorted(
        f"{modules[m]}:{line} {m} imports {target}"
        for m, targets in graph.items()
        if _matches(m, ("beam_pipeline.report",))
        for target, (line, _) in targets.items()
        if home(target, stages) or _matches(target, ("beam_pipeline.engine.artifacts",))
    )


def test_the_report_names_no_stage(tree):
    # The report renders what each stage of the graph returns from its report_sections
    # hook (beam_pipeline/engine/report_sections.py): it imports no stage's code or
    # artifact type (the graph alone, stages/graph.py), and neither its modules nor its
    # template name a stage or an artifact type, so that a stage's section lives with the
    # stage and a new stage needs no edit here.
    sources, modules, graph = tree
    bad = report_imports_of_stages(graph, modules, _stage_names())
    folder = os.path.join(REPO, "beam_pipeline", "report")
    words = _stage_words()
    assert {"Evaluator", "ExampleGen", "Statistics", "ModelBlessing"} <= words, words
    for parent, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith((".py", ".html")):
                path = os.path.join(parent, name)
                with open(path, encoding="utf-8") as f:
                    bad += stage_mentions(os.path.relpath(path, REPO), f.read(), words)
    assert not bad, "\n".join(bad)


def test_the_report_check_tells_a_stage_named_or_imported():
    words = {"Evaluator", "ExampleGen", "ModelBlessing"}
    text = "x = 1\nif row == 'Evaluator':  # the ExampleGen+Statistics row\n    pass\n"
    assert stage_mentions("r.py", text, words) == ["r.py:2 names Evaluator"]
    sources = {
        _p("beam_pipeline", "report", "data.py"): (
            "from beam_pipeline.engine.artifacts import ModelBlessing\n"
            "from beam_pipeline.engine.report_sections import ReportView\n"
            "def f():\n    from beam_pipeline.stages.evaluator.report import g\n"
            "    from beam_pipeline.stages.graph import STAGE_GRAPH\n"
        ),
        _p("beam_pipeline", "engine", "artifacts.py"): "",
        _p("beam_pipeline", "engine", "report_sections.py"): "",
        _p("beam_pipeline", "stages", "evaluator", "report.py"): "",
        _p("beam_pipeline", "stages", "graph.py"): "",
    }
    modules = {_module_name(rel): rel for rel in sources}
    bad = report_imports_of_stages(import_graph(sources), modules, ["evaluator"])
    assert [b.split(" ", 1)[1] for b in bad] == [
        "beam_pipeline.report.data imports beam_pipeline.engine.artifacts",
        "beam_pipeline.report.data imports beam_pipeline.stages.evaluator.report",
    ]
