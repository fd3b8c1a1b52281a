"""Worker packaging: the Dockerfile against the lock file, and the sdist / wheel contents.

No Docker engine runs here, so the image is checked as text: the Beam SDK image, the Python
and CUDA versions against requirements.lock, the launching interpreter and TensorFlow's
build; the build context (.dockerignore) holds what the Dockerfile copies. The sdist (what
``--setup_file`` ships to workers) and the wheel (what ``pip install .`` and the image
install) are built from that same context and opened.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from conftest import REPO

PACKAGES = ("beam_pipeline", "transforms", "trainer")
EXAMPLE = ("penguins.csv", "penguin_module.py", "pipeline.yaml")
EXAMPLE_DIR = "beam_pipeline/examples/penguin"
MIGRATIONS_DIR = "beam_pipeline/metadata/migrations"


def _read(name: str) -> str:
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def _lock() -> dict[str, str]:
    pins = {}
    for line in _read("requirements.lock").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith("#"):
            pins[_normalize(name)] = version
    return pins


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def _stages() -> dict[str, str]:
    """Dockerfile stage name -> its text (FROM line included)."""
    stages, name, lines = {}, None, []
    for line in _read("Dockerfile").splitlines():
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            if name:
                stages[name] = "\n".join(lines)
            name, lines = match.group(2) or match.group(1), []
        if name:
            lines.append(line)
    stages[name] = "\n".join(lines)
    return stages


def _python_minor() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_dockerfile_beam_and_python_versions_match_the_lock_and_the_launcher():
    dockerfile = _read("Dockerfile")
    sdk_images = re.findall(r"apache/beam_python(\d+\.\d+)_sdk:([\w.]+)", dockerfile)
    assert sdk_images, "the Dockerfile names no Beam SDK image"
    # The lock was resolved for the interpreter running these tests (scripts/env.sh).
    assert set(sdk_images) == {(_python_minor(), _lock()["apache-beam"])}
    assert re.search(rf"PY=\$\{{PYTHON:-python{_python_minor()}\}}", _read("scripts/env.sh"))
    required = re.search(r'python_requires="([^"]+)"', _read("setup.py")).group(1)
    from packaging.specifiers import SpecifierSet

    assert _python_minor() in SpecifierSet(required)


def test_gpu_stage_matches_tensorflows_cuda_build_and_uses_the_beam_boot_entrypoint():
    import tensorflow as tf

    stages = _stages()
    assert set(stages) == {"beam_sdk", "gpu", "cpu"}
    assert list(stages)[-1] == "cpu"  # `docker build .` builds the CPU image
    gpu = stages["gpu"]
    cuda = re.match(r"FROM nvidia/cuda:(\d+\.\d+)\.\d+-cudnn-runtime-ubuntu", gpu)
    assert cuda, gpu.splitlines()[0]
    build = tf.sysconfig.get_build_info()
    assert build["cuda_version"].startswith(cuda.group(1) + ".")
    assert re.search(rf"\bpython{re.escape(_python_minor())}\b", gpu)
    assert "COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam" in gpu
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in gpu
    # Beam's boot would run the SDK in a fresh virtual environment that cannot see the
    # image's venv; this makes it use the image's Python.
    assert "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1" in gpu
    assert stages["cpu"].splitlines()[0].startswith("FROM beam_sdk")


def test_gpu_stage_has_what_xla_needs_ptxas_and_libdevice_of_tensorflows_cuda():
    """Keras 3 jit-compiles on GPU; XLA then needs ptxas and libdevice, which the CUDA
    runtime image lacks: the GPU stage installs NVIDIA's nvcc wheel of TensorFlow's CUDA
    version and points XLA (and PATH) at it, and the build checks both are there."""
    import tensorflow as tf

    gpu = _stages()["gpu"]
    nvcc = re.search(r"pip install nvidia-cuda-nvcc-cu12==(\d+)\.(\d+)\.\d+", gpu)
    assert nvcc, "the GPU stage does not install nvidia-cuda-nvcc-cu12 (ptxas, libdevice)"
    cuda = tf.sysconfig.get_build_info()["cuda_version"].split(".")[:2]
    assert list(nvcc.groups()) == cuda
    site = f"/opt/venv/lib/python{_python_minor()}/site-packages/nvidia/cuda_nvcc"
    assert f"XLA_FLAGS=--xla_gpu_cuda_data_dir={site}" in gpu
    assert f"PATH={site}/bin:$PATH" in gpu
    assert "ptxas --version" in gpu and "nvvm/libdevice/libdevice.10.bc" in gpu
    # Installed after the lock, before the project: in the image's venv.
    assert gpu.index("pip install -r requirements.lock") < nvcc.start()
    assert nvcc.start() < gpu.index("pip install --no-deps .")


@pytest.mark.parametrize("stage", ["gpu", "cpu"])
def test_each_image_installs_the_lock_then_the_project_without_dependencies(stage):
    text = _stages()[stage]
    lock = text.index("pip install -r requirements.lock")
    project = text.index("pip install --no-deps .")
    assert lock < project
    for package in PACKAGES:
        assert f"COPY {package} ./{package}" in text


def test_setup_py_pins_agree_with_the_lock():
    pins = dict(re.findall(r'"([A-Za-z0-9_.\-\[\]]+)==([\w.]+)"', _read("setup.py")))
    lock = _lock()
    assert pins
    for name, version in pins.items():
        assert lock.get(_normalize(name)) == version, (name, version, lock.get(_normalize(name)))


def _ignore_patterns() -> list[tuple[bool, str]]:
    out = []
    for line in _read(".dockerignore").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    return out


def _in_context(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for negated, pattern in patterns:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            included = negated
    return included


def _context_files() -> list[str]:
    """The files a ``docker build .`` would send, per .dockerignore."""
    patterns = _ignore_patterns()
    negations = [p for negated, p in patterns if negated]
    files = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        rel_dir = os.path.relpath(dirpath, REPO).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        # Descend only where something can be in the context (.venv, .git, benchmarks: no).
        dirnames[:] = [
            d
            for d in dirnames
            if _in_context(prefix + d, patterns)
            or any(n.startswith(prefix + d + "/") for n in negations)
        ]
        files += [prefix + f for f in filenames if _in_context(prefix + f, patterns)]
    return sorted(files)


def test_build_context_holds_what_the_dockerfile_copies_and_nothing_heavy():
    context = _context_files()
    copied = set(re.findall(r"^COPY (?!--from)(\S+) ", _read("Dockerfile"), re.MULTILINE))
    assert copied == {"requirements.lock", "setup.py", *PACKAGES}
    for source in copied:
        assert any(f == source or f.startswith(source + "/") for f in context), source
    for package in PACKAGES:
        assert f"{package}/__init__.py" in context
    assert all(f"{EXAMPLE_DIR}/{name}" in context for name in EXAMPLE)
    tops = {f.split("/")[0] for f in context}
    assert tops == {"requirements.lock", "setup.py", *PACKAGES}  # no .venv, tests, benchmarks
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist and the wheel, built from a copy of the Docker build context."""
    project = tmp_path_factory.mktemp("context")
    for rel in _context_files():
        dst = project / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(REPO, rel), dst)
    out = project / "dist"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    for command in (
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(out)],
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), "."],
    ):
        done = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def test_wheel_holds_the_three_packages_the_example_and_the_entry_point(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_text = z.read(entry_points).decode()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(PACKAGES)  # no tests, no benchmarks
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
    for name in EXAMPLE:
        assert f"{EXAMPLE_DIR}/{name}" in names
    # The metadata store's Alembic migrations are a folder of scripts, not a package:
    # setup.py's package_data must ship every one (a missing revision breaks every open).
    migrations = [
        os.path.relpath(os.path.join(folder, f), REPO).replace(os.sep, "/")
        for folder, _, files in os.walk(os.path.join(REPO, MIGRATIONS_DIR))
        for f in files
        if f.endswith((".py", ".mako"))
    ]
    assert f"{MIGRATIONS_DIR}/versions/0001_initial.py" in migrations
    assert set(migrations) <= set(names), set(migrations) - set(names)
    # The run report's template (package_data too: without it no report.html is written).
    assert "beam_pipeline/report/templates/report.html" in names
    # ... and the stages' templates of their report sections (stages/**/*.html).
    stage_templates = [
        os.path.relpath(os.path.join(folder, f), REPO).replace(os.sep, "/")
        for folder, _, files in os.walk(os.path.join(REPO, "beam_pipeline", "stages"))
        for f in files
        if f.endswith(".html")
    ]
    assert "beam_pipeline/stages/evaluator/report.html" in stage_templates
    assert set(stage_templates) <= set(names), set(stage_templates) - set(names)
    assert re.search(
        r"^\[console_scripts\]\s*\nbeam-pipeline\s*=\s*beam_pipeline\.cli:console_main",
        entry_text,
        re.M,
    )
    from beam_pipeline import cli

    assert callable(cli.console_main)
    # What pip installs from the wheel is what the lock pins.
    lock = _lock()
    requires = re.findall(
        r"^Requires-Dist: ([A-Za-z0-9_.\-]+)(?:\[\w+\])?==([\w.]+)", metadata, re.M
    )
    assert {_normalize(n): v for n, v in requires}.items() <= lock.items()
    assert ("apache-beam", lock["apache-beam"]) in {(_normalize(n), v) for n, v in requires}


def test_sdist_for_setup_file_holds_the_packages_and_the_example(built):
    sdist, _ = built
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert "setup.py" in names
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
    for name in EXAMPLE:
        assert f"{EXAMPLE_DIR}/{name}" in names
