"""A small run directory for the trainer tests, made by the pipeline's own data stages.

It holds what a run gives its Trainer (``schema/schema.pbtxt``, ``transform_graph/`` with
the raw data's ``metadata/``, ``examples/{train,eval}/*.tfrecord.gz``,
``transformed_examples/{train,eval}/*.tfrecord.gz``), made from the bundled
``penguins.csv`` (``NA`` = missing) and the bundled module's ``preprocessing_fn`` by
ExampleGen, Statistics, Schema, Validation and Transform on the DirectRunner.

Test modules use the session fixture by binding it to a module name (one build is shared)::

    import conftest_trainer

    penguin_run_dir = conftest_trainer.penguin_run_dir

    def test_x(penguin_run_dir): ...

``build_penguin_run_dir(root)`` is also callable from a plain process (the subprocess tests).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from beam_pipeline.config import BUNDLED_EXAMPLE_DIR, PipelineConfig  # noqa: E402
from beam_pipeline.core.types import Artifact  # noqa: E402
from beam_pipeline.engine.run_dir import RunDirectory  # noqa: E402

__all__ = [
    "PENGUIN_MODULE",
    "PENGUIN_CSV",
    "RUN_ID",
    "build_penguin_run_dir",
    "penguin_run_dir",
    "read_raw_examples",
    "copy_run_dir",
    "penguin_config",
    "classify_accuracy",
    "run_python",
]

PENGUIN_MODULE = os.path.join(BUNDLED_EXAMPLE_DIR, "penguin_module.py")
PENGUIN_CSV = os.path.join(BUNDLED_EXAMPLE_DIR, "penguins.csv")
RUN_ID = "fixture"
# One row in three goes to eval: 115 eval rows, 229 train rows.
_EVAL_EVERY = 3


def build_penguin_run_dir(pipeline_root: str, run_id: str = RUN_ID) -> RunDirectory:
    """Writes a run directory with the data stages' artifacts for the penguin data.

    The product's own stages make them (ExampleGen, Statistics, Schema, Validation and
    Transform, through :func:`beam_pipeline.pipeline.run` with tuning and training off),
    so the trainer tests read what a real run gives its Trainer. The input is split
    beforehand (``input_splits``) so that the split is fixed: one row in three to eval.

    Returns:
      the :class:`RunDirectory` (``<pipeline_root>/runs/<run_id>``).
    """
    from beam_pipeline.config import DataConfig, TrainerConfig, TunerConfig
    from beam_pipeline.core.types import Split
    from beam_pipeline.pipeline import run

    with open(PENGUIN_CSV, newline="") as f:
        header, *rows = f.read().splitlines(keepends=True)
    inputs = os.path.join(pipeline_root, "input")
    os.makedirs(inputs, exist_ok=True)
    paths = {}
    for split, keep in ((Split.TRAIN, bool), (Split.EVAL, lambda r: not r)):
        paths[split] = os.path.join(inputs, f"{split.value}.csv")
        with open(paths[split], "w", newline="") as f:
            f.writelines([header] + [r for i, r in enumerate(rows) if keep(i % _EVAL_EVERY)])
    config = PipelineConfig(
        data=DataConfig(input_splits=tuple(paths.items()), csv_null_values=("", "NA")),
        module_file=PENGUIN_MODULE,
        trainer=TrainerConfig(enabled=False),
        tuner=TunerConfig(enabled=False),
        pipeline_root=pipeline_root,
        run_id=run_id,
        beam_args=("--runner=DirectRunner",),
    )
    run(config)
    return RunDirectory(pipeline_root, run_id)


def step_hints(proto) -> dict[str, dict[str, bytes]]:
    """Transform name -> its environment's resource hints, for each transform with one."""
    components = proto.components
    return {
        t.unique_name: dict(components.environments[t.environment_id].resource_hints)
        for t in components.transforms.values()
        if t.environment_id
    }


def read_raw_examples(run_dir: RunDirectory, split: str = "eval") -> list[bytes]:
    """The serialized raw tf.Examples of one split."""
    import glob

    import tensorflow as tf

    files = sorted(glob.glob(run_dir.path(Artifact.EXAMPLES, split, "*.tfrecord.gz")))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def copy_run_dir(src: RunDirectory, pipeline_root: str, run_id: str = RUN_ID) -> RunDirectory:
    """A copy of the data artifacts of ``src`` under another pipeline root (a fresh run)."""
    dst = RunDirectory.create(pipeline_root, run_id)
    for artifact in (
        Artifact.SCHEMA,
        Artifact.EXAMPLES,
        Artifact.TRANSFORM_GRAPH,
        Artifact.TRANSFORMED_EXAMPLES,
    ):
        shutil.copytree(src.path(artifact), dst.path(artifact))
    return dst


@pytest.fixture(scope="session")
def penguin_run_dir(tmp_path_factory) -> RunDirectory:
    """The penguin data artifacts, built once per test session (read-only: copy to train).

    Each test module binds this fixture under its own name, which pytest treats as separate
    fixtures; they share one build through a fixed folder of the session's temp dir.
    """
    import fcntl

    # Under pytest-xdist each test process has its own temp dir, in one folder per session
    # (pytest-xdist's documented way to share a session fixture): the first process to
    # get there builds, the other waits on the lock and reads (one build, not one each).
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    root = shared / "penguin_data"
    built = root / "BUILT"
    with open(shared / "penguin_data.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            shutil.rmtree(root, ignore_errors=True)
            build_penguin_run_dir(str(root))
            built.write_text("")
    return RunDirectory(str(root), RUN_ID)


def penguin_config(module_file: str = PENGUIN_MODULE, **trainer_kwargs) -> PipelineConfig:
    """A PipelineConfig for ``module_file`` with the given TrainerConfig fields."""
    import dataclasses

    from beam_pipeline.config import TrainerConfig

    return PipelineConfig(
        module_file=module_file,
        trainer=dataclasses.replace(TrainerConfig(), **trainer_kwargs),
    )


def classify_accuracy(model_dir: str, raw_examples: list[bytes]) -> float:
    """Accuracy of a serving SavedModel on raw tf.Examples (species from its own vocabulary).

    Uses only the SavedModel folder: its ``serving_default`` signature and the ``species``
    vocabulary asset it carries, so it checks what a serving system would see.
    """
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(model_dir)
    scores = loaded.signatures["serving_default"](examples=tf.constant(raw_examples))["scores"]
    with open(os.path.join(model_dir, "assets", "species"), "rb") as f:
        vocabulary = f.read().split(b"\n")
    truth = [
        vocabulary.index(
            tf.train.Example.FromString(r).features.feature["species"].bytes_list.value[0]
        )
        for r in raw_examples
    ]
    return float(np.mean(np.argmax(scores.numpy(), axis=1) == np.array(truth)))


def run_python(code: str, *args: str, timeout: float = 240, env: dict | None = None) -> dict:
    """Runs ``code`` in a fresh Python process (repo and tests importable), with ``env``
    added to this process's environment.

    Returns:
      the JSON object printed on the last line of its standard output.
    """
    # An existing PYTHONPATH is kept after ours (a machine whose packages come that way).
    path = [REPO, os.path.join(REPO, "tests"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(p for p in path if p))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    return last_json(proc.returncode, proc.stdout, proc.stderr)


def last_json(returncode: int, stdout: str, stderr: str) -> dict:
    """The JSON object a finished test process printed last; fails the test unless it
    exited with 0 (its standard error's end in the message)."""
    assert returncode == 0, f"subprocess failed ({returncode}):\n{stderr[-4000:]}"
    return json.loads(stdout.strip().splitlines()[-1])
