"""User code that runs in the launcher (``preprocessing_fn``, traced there by tf.Transform,
and a ``--graph`` stage's ``run``) cannot end the run by ending the process: an
``os._exit`` or ``sys.exit`` there fails the run in one sentence naming the code, exit 2,
its summary written, its staging folders removed, the store's record ended.

Each run is a forked CLI process: a regression would end the process, which must not be
the test's own.
"""

from __future__ import annotations

import glob
import json
import os
import textwrap

import pytest
from conftest import PENGUIN_DIR, REPO

_PENGUINS = os.path.join(PENGUIN_DIR, "penguins.csv")
_MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")

# A stage of the user's own right after ExampleGen, with an output (a staging folder).
_GRAPH = """
import os, sys
from beam_pipeline.engine import Input, Stage
from beam_pipeline.engine.artifacts import Examples, TypedArtifact
from beam_pipeline.stages.graph import STAGE_GRAPH

class Marks(TypedArtifact):
    FOLDER = "marks"

class Quits(Stage):
    name = "Quits"
    inputs = (Input(Examples, key="examples"),)
    outputs = (Marks,)

    def run(self, ctx, inputs, out):
        open(os.path.join(out.folder(Marks), "half.txt"), "w").close()
        {call}

GRAPH = (STAGE_GRAPH[0], Quits(), *STAGE_GRAPH[1:])
"""


def _quitting_module(tmp_path, call: str) -> str:
    """The bundled module whose preprocessing_fn makes ``call`` first."""
    with open(_MODULE) as f:
        source = f.read()
    head = "def preprocessing_fn(inputs):\n"
    assert head in source
    path = tmp_path / "quitting_module.py"
    path.write_text(source.replace(head, f"{head}    import os, sys\n    {call}\n", 1))
    return str(path)


def _quitting_graph(tmp_path, call: str) -> str:
    path = tmp_path / "quitting_graph.py"
    path.write_text(textwrap.dedent(_GRAPH).replace("{call}", call))
    return f"{path}:GRAPH"


@pytest.mark.parametrize(
    ("where", "call", "sentence"),
    [
        (
            "preprocessing_fn",
            "os._exit(0)",
            "preprocessing_fn in {module}, traced by tf.Transform, called os._exit(0) in the "
            "launcher, which would end the run with no summary and its staging folders left "
            "behind; remove that call (the function returns its outputs; raise an exception "
            "to stop).",
        ),
        (
            "stage",
            "os._exit(0)",
            "stage Quits's run called os._exit(0) in the launcher, which would end the run "
            "with no summary and its staging folders left behind; return its StageResult or "
            "raise.",
        ),
        (
            "stage",
            "sys.exit(0)",
            "stage Quits's run called sys.exit(0) in the launcher, which would end the run "
            "with no summary and its staging folders left behind; return its StageResult or "
            "raise.",
        ),
    ],
)
def test_an_exit_call_in_user_code_in_the_launcher_fails_the_run_in_one_sentence(
    tmp_path, where, call, sentence
):
    import forked_launch

    from beam_pipeline.metadata.records import RunStatus
    from beam_pipeline.metadata.store import MetadataStore

    root = str(tmp_path / "root")
    args = [
        "--runner=DirectRunner", f"--data={_PENGUINS}", "--csv_null_values=,NA",
        "--no_tuner", "--no_trainer", "--no_progress", f"--pipeline_root={root}", "--run_id=r",
    ]  # fmt: skip
    module = _quitting_module(tmp_path, call) if where == "preprocessing_fn" else None
    if module:
        args.append(f"--module_file={module}")
    else:
        args.append(f"--graph={_quitting_graph(tmp_path, call)}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = forked_launch.launch_cli(args, REPO, env, str(tmp_path / "logs"))
    assert proc.wait(600) == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"error: {sentence.format(module=module)}"]
    run = os.path.join(root, "runs", "r")
    assert glob.glob(os.path.join(run, ".staging", "*")) == []
    assert not os.path.exists(os.path.join(run, "marks"))
    with open(os.path.join(run, "summary.json")) as f:
        rows = {s["stage"]: s for s in json.load(f)["stages"]}
    failed = "Transform" if where == "preprocessing_fn" else "Quits"
    assert rows[failed]["status"] == "failed"
    with MetadataStore.for_pipeline_root(root) as store:
        assert {r.run_id: r.status for r in store.list_runs()} == {"r": RunStatus.FAILED}


def test_an_exit_call_is_named_after_the_block_of_its_own_thread():
    """Two stages of a --graph run at once on two threads (a stage beside Schema): an
    os._exit in the one that began first names it, not the one that began last, and the
    other ends untouched."""
    import threading

    from beam_pipeline.core.launcher_exit import LauncherExit, exit_refused

    real = os._exit
    second_in, first_done = threading.Event(), threading.Event()
    ended: dict[str, object] = {}

    def second() -> None:
        try:
            with exit_refused("stage Second's run", "fix it"):
                second_in.set()
                first_done.wait(60)
            ended["second"] = "ok"
        except BaseException as e:  # noqa: BLE001  what the block raised, checked below
            ended["second"] = e

    thread = threading.Thread(target=second)
    with pytest.raises(LauncherExit) as raised:
        with exit_refused("stage First's run", "return its StageResult or raise"):
            thread.start()
            assert second_in.wait(60)
            try:
                os._exit(0)
            finally:
                first_done.set()
    thread.join(60)
    assert str(raised.value).startswith("stage First's run called os._exit(0) in the launcher")
    assert ended == {"second": "ok"}
    assert os._exit is real
