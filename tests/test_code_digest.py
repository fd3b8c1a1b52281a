"""Transform's cache key holds only the code preprocessing_fn runs
(beam_pipeline.engine.code_digest): a changed run_fn keeps it, a changed preprocessing_fn, helper
function, helper module or constant it reads changes it, and what cannot be fingerprinted falls back
to the module."""

from __future__ import annotations

import hashlib
import sys
import time

import pytest

from beam_pipeline.core.user_module import get_preprocessing_fn
from beam_pipeline.engine.code_digest import function_digest, transform_code
from beam_pipeline.engine.fingerprint import file_digest
from trainer import load_trainer_module

HELPER = "digest_helper_mod"
FROM_HELPER = "digest_from_helper_mod"

MODULE = f"""
import tensorflow_transform as tft
import {HELPER}
from {FROM_HELPER} import clip

FEATURES = ["a", "b"]


def _scaled(x, factor=2.0):
    return tft.scale_to_z_score(x) * factor


class _Offset:
    OFFSET = 1.0

    def apply(self, x):
        return x + self.OFFSET


def preprocessing_fn(inputs):
    out = {{f: _scaled(clip(inputs[f])) for f in FEATURES}}
    out["c"] = {HELPER}.double(inputs["c"])
    out["b2"] = _Offset().apply(inputs["b"])
    return out


def run_fn(fn_args):
    return fn_args.serving_model_dir
"""
HELPER_SRC = "def double(x):\n    return x * 2\n"
FROM_HELPER_SRC = "def clip(x):\n    return x\n"

# (what is edited, old text, new text, whether Transform's key must change)
EDITS = [
    ("run_fn's body", "return fn_args.serving_model_dir", "return None", False),
    (
        "a comment above preprocessing_fn",
        "def preprocessing_fn",
        "# note\n\ndef preprocessing_fn",
        False,
    ),  # noqa: E501
    ("preprocessing_fn's body", 'out["c"] =', 'out["d"] =', True),
    ("a helper function it calls", "* factor", "* factor + 1", True),
    ("a default of that helper", "factor=2.0", "factor=3.0", True),
    ("a class it uses", "OFFSET = 1.0", "OFFSET = 2.0", True),
    ("a module-level constant it reads", '["a", "b"]', '["a", "b", "e"]', True),
]


@pytest.fixture
def module_dir(tmp_path):
    (tmp_path / f"{HELPER}.py").write_text(HELPER_SRC)
    (tmp_path / f"{FROM_HELPER}.py").write_text(FROM_HELPER_SRC)
    yield tmp_path
    for name in (HELPER, FROM_HELPER):
        sys.modules.pop(name, None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def _key(folder, source):
    """Transform's key part for the module ``source`` in ``folder``, loaded as a run does."""
    path, fn = _load(folder, source)
    return transform_code(fn, file_digest(str(path)))


def _load(folder, source):
    """The module ``source`` written in ``folder`` and loaded as a run does: (path, its
    preprocessing_fn)."""
    for name in (HELPER, FROM_HELPER):  # helper files are re-imported, as by a new launch
        sys.modules.pop(name, None)
    path = folder / "module.py"
    # A fresh load like a new launch's: the loader keeps a module per content, so a
    # trailing comment (which does not count, see EDITS) makes the bytes new.
    path.write_text(f"{source}\n# load {time.monotonic_ns()}\n")
    return path, get_preprocessing_fn(load_trainer_module(str(path)).module, str(path))


@pytest.mark.parametrize("what, old, new, reruns", EDITS, ids=[e[0] for e in EDITS])
def test_transform_key_changes_only_with_the_code_preprocessing_fn_runs(
    module_dir, what, old, new, reruns
):
    before = _key(module_dir, MODULE)
    assert before.startswith("function ")
    assert _key(module_dir, MODULE) == before  # stable for the same code
    assert old in MODULE
    after = _key(module_dir, MODULE.replace(old, new))
    assert (after != before) is reruns, what


def _stage_keys(folder, source):
    """The cache keys of Transform and Trainer (built from the same inputs) for ``source``:
    the stages' own parameters, as the runner builds them into keys."""
    from beam_pipeline.engine import StageContext
    from beam_pipeline.engine.execution import cache_key
    from beam_pipeline.engine.user_code import UserCode
    from beam_pipeline.stages.trainer.stage import TrainerStage
    from beam_pipeline.stages.transform.stage import TransformStage

    _, fn = _load(folder, source)
    digest = hashlib.sha256(source.encode()).hexdigest()
    ctx = StageContext(
        config=None, options=None, run_dir=None, identity={"trainer": {"train_steps": 10}},
        user_code=UserCode.of(fn, digest), module_digest=digest,
    )  # fmt: skip
    inputs = {"examples": "k-examples", "schema": "k-schema", "transform": "k-transform"}
    return (
        cache_key("Transform", {**inputs, **TransformStage().parameters(ctx)}),
        cache_key("Trainer", {**inputs, **TrainerStage().parameters(ctx)}),
    )


def test_a_changed_run_fn_reruns_the_trainer_but_not_transform(module_dir):
    transform, trainer = _stage_keys(module_dir, MODULE)
    edited = MODULE.replace("return fn_args.serving_model_dir", "return None")
    assert _stage_keys(module_dir, edited)[0] == transform
    assert _stage_keys(module_dir, edited)[1] != trainer
    edited = MODULE.replace('out["c"] =', 'out["d"] =')  # preprocessing_fn: both rerun
    assert _stage_keys(module_dir, edited)[0] != transform
    assert _stage_keys(module_dir, MODULE) == (transform, trainer)  # the same code: hits


@pytest.mark.parametrize("helper", [HELPER, FROM_HELPER])
def test_an_edited_helper_module_in_the_folder_changes_the_key(module_dir, helper):
    before = _key(module_dir, MODULE)
    path = module_dir / f"{helper}.py"
    path.write_text(path.read_text().replace("return x", "return x + 0"))
    assert _key(module_dir, MODULE) != before


def test_what_cannot_be_fingerprinted_falls_back_to_the_whole_module(module_dir):
    source = MODULE.replace(
        "FEATURES = [", "import threading\nLOCK = threading.Lock()\nFEATURES = ["
    ).replace("def preprocessing_fn(inputs):\n", "def preprocessing_fn(inputs):\n    LOCK\n")
    key = _key(module_dir, source)
    assert key == f"module {file_digest(str(module_dir / 'module.py'))}"
    assert function_digest(len) is None  # not a Python function: no code to hash


def test_the_bundled_module_keys_on_its_preprocessing_fn():
    from conftest import PENGUIN_DIR

    path = f"{PENGUIN_DIR}/penguin_module.py"
    fn = get_preprocessing_fn(load_trainer_module(path).module, path)
    assert function_digest(fn) is not None


def test_the_look_ahead_takes_transform_s_key_remembered_for_the_same_files_only(
    module_dir, tmp_path
):
    """A rerun's look-ahead (issue 45) does not load the module: Transform's key part comes
    from a run that loaded these very files (same digest, path, Python and code), and any
    other digest is not known without loading (the look-ahead then stops)."""
    from beam_pipeline.engine.user_code import NotLoaded, UserCode

    path, fn = _load(module_dir, MODULE)
    digest = file_digest(str(path))
    loads = []

    def load():
        loads.append(str(path))
        return fn

    root = str(tmp_path / "root")
    expected = transform_code(fn, digest)
    assert UserCode(str(path), digest, load, root).transform_code() == expected
    assert len(loads) == 1  # the run that ran Transform loaded it
    assert UserCode(str(path), digest, load, root).look_ahead().transform_code() == expected
    for other in (
        UserCode(str(path), "another digest", load, root),
        UserCode(str(path), digest, load, str(tmp_path / "other root")),
    ):
        with pytest.raises(NotLoaded):
            other.look_ahead().transform_code()
    assert len(loads) == 1  # the look-ahead never loads it
