"""A published artifact damaged after its run is never reused: the stage is recomputed and
its summary row says which run's artifact changed (through the CLI, bundled penguins).

Each artifact's files (sizes, digests of the small ones) are recorded when it is published
and checked before a later run reuses it (beam_pipeline.engine.contents).
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from conftest import PENGUIN_DIR, read_examples

from beam_pipeline import cli

_ARGS = [
    "--runner=DirectRunner",
    f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
    "--csv_null_values=,NA",
    f"--module_file={os.path.join(PENGUIN_DIR, 'penguin_module.py')}",
    "--no_tuner",
    "--no_infra_validator",
]


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


@pytest.fixture(scope="module")
def trained_root(tmp_path_factory):
    """A pipeline root with run ``a``: the data stages and Transform (--no_trainer: each
    test that needs a model trains or evaluates it in its own run, so none is made here
    that no test reads)."""
    root = str(tmp_path_factory.mktemp("damaged"))
    assert cli.main([*_ARGS, "--no_trainer", f"--pipeline_root={root}", "--run_id=a"]) == 0
    return root


def test_a_rewritten_vocabulary_is_not_reused(trained_root, capsys):
    root = trained_root
    species = os.path.join(
        root, "runs", "a", "transform_graph", "transform_fn", "assets", "species"
    )
    with open(species) as f:
        names = f.read().splitlines()
    with open(species, "w") as f:  # the same three names, in another order
        f.write("\n".join(names[1:] + names[:1]) + "\n")
    capsys.readouterr()
    # The model is trained and evaluated (again, if another test's run trained one on run
    # a's artifacts): on the damaged vocabulary, evaluated against the raw labels, it would
    # be right about a fifth of the time.
    args = [*_ARGS, f"--pipeline_root={root}", "--run_id=c", "--no_cache=Trainer,Evaluator"]
    assert cli.main(args) == 0
    transform = _summary(root, "c")["Transform"]
    assert transform["status"] == "ok"
    assert transform["note"].startswith(
        "run a's transform_graph changed since it was published "
        "(transform_fn/assets/species's content changed); recomputed; "
    )
    assert "run a's transform_graph changed" in capsys.readouterr().out
    with open(
        os.path.join(root, "runs", "c", "transform_graph", "transform_fn", "assets", "species")
    ) as f:
        assert f.read().splitlines() == names
    evaluator = _summary(root, "c")["Evaluator"]
    assert evaluator["details"]["metrics"]["Overall"]["sparse_categorical_accuracy"] >= 0.9


def test_a_deleted_eval_split_is_not_reused(trained_root):
    root = trained_root
    eval_split = os.path.join(root, "runs", "a", "examples", "eval")
    (shard,) = (os.path.basename(p) for p in glob.glob(os.path.join(eval_split, "*")))
    # The rows the Evaluator must read: the eval split's, counted in its file.
    eval_rows = len(read_examples(os.path.join(eval_split, "*")))
    for name in os.listdir(eval_split):
        os.remove(os.path.join(eval_split, name))
    os.rmdir(eval_split)
    # The Evaluator reads the raw eval examples: it runs (again, with --no_cache, if
    # another test's run evaluated a model of run a's artifacts), on intact ones.
    args = [*_ARGS, f"--pipeline_root={root}", "--run_id=e", "--no_cache=Evaluator"]
    assert cli.main(args) == 0
    summary = _summary(root, "e")
    assert summary["ExampleGen"]["status"] == "ok"
    assert summary["ExampleGen"]["note"].startswith(
        f"run a's examples changed since it was published (eval/{shard} is missing); recomputed"
    )
    assert summary["Evaluator"]["status"] == "ok"
    assert summary["Evaluator"]["rows_in"] == {"eval": eval_rows}
    assert len(read_examples(os.path.join(root, "runs", "e", "examples", "eval", "*"))) == eval_rows


def test_a_truncated_examples_file_is_not_reused(tmp_path):
    root = str(tmp_path)
    args = [*_ARGS, "--no_trainer", f"--pipeline_root={root}"]
    # Run a publishes the examples (without --module_file: the data stages alone, no
    # Transform that run b could reuse).
    data_only = [a for a in args if not a.startswith("--module_file=")]
    assert cli.main([*data_only, "--run_id=a"]) == 0
    (shard,) = glob.glob(os.path.join(root, "runs", "a", "examples", "train", "*"))
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    # Transform reads the examples again (run a has no transform to reuse).
    assert cli.main([*args, "--run_id=b"]) == 0
    summary = _summary(root, "b")
    assert summary["ExampleGen"]["status"] == "ok"
    assert summary["ExampleGen"]["note"].startswith(
        f"run a's examples changed since it was published (train/{os.path.basename(shard)} "
        f"is {size // 2} bytes, not {size}); recomputed"
    )
    assert summary["ExampleGen"]["rows_out"] == {"train": 239, "eval": 105}
    assert summary["Transform"]["status"] == "ok"
    assert summary["Transform"]["rows_out"] == {"train": 239, "eval": 105}
    # A third run reuses run b's intact examples, saying nothing of run a's.
    assert cli.main([*args, "--run_id=c"]) == 0
    example_gen = _summary(root, "c")["ExampleGen"]
    assert example_gen["status"] == "cached" and example_gen["note"].startswith("reused from run b")
    assert "changed" not in example_gen["note"]


_VOCABULARY_MODULE = """
import tensorflow as tf
import tensorflow_transform as tft


def preprocessing_fn(inputs):
    token = inputs["token"]
    if isinstance(token, tf.sparse.SparseTensor):
        token = tf.sparse.to_dense(token, default_value=b"")
    return {"token_id": tft.compute_and_apply_vocabulary(token, vocab_filename="token")}
"""


def test_a_vocabulary_over_1_mib_edited_at_the_same_size_is_not_reused(tmp_path):
    """The transform graph is digested whole when published: its vocabulary of the train
    split's distinct 500-character tokens (over 1 MiB, the size up to which every file of
    any artifact is digested) with two tokens swapped, the same size, is not reused by the
    next run."""
    rng = __import__("random").Random(7)
    data = tmp_path / "tokens.csv"
    with open(data, "w") as f:
        f.write("token,x\n")
        for i in range(3600):
            f.write("".join(rng.choice("abcdefghij") for _ in range(500)) + f",{i}\n")
    module = tmp_path / "module.py"
    module.write_text(_VOCABULARY_MODULE)
    root = str(tmp_path / "root")
    args = [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        f"--data={data}",
        f"--module_file={module}",
        "--no_tuner",
        "--no_trainer",
        f"--pipeline_root={root}",
    ]
    assert cli.main([*args, "--run_id=a"]) == 0
    vocabulary = os.path.join(
        root, "runs", "a", "transform_graph", "transform_fn", "assets", "token"
    )
    size = os.path.getsize(vocabulary)
    assert size > 1 << 20
    with open(vocabulary) as f:
        tokens = f.read().splitlines()
    with open(vocabulary, "w") as f:  # two tokens swapped: another mapping, the same size
        f.write("\n".join([tokens[1], tokens[0], *tokens[2:]]) + "\n")
    assert os.path.getsize(vocabulary) == size

    assert cli.main([*args, "--run_id=b"]) == 0
    transform = _summary(root, "b")["Transform"]
    assert transform["status"] == "ok"
    assert transform["note"].startswith(
        "run a's transform_graph changed since it was published "
        "(transform_fn/assets/token's content changed); recomputed"
    ), transform["note"]
    rebuilt = os.path.join(root, "runs", "b", "transform_graph", "transform_fn", "assets", "token")
    with open(rebuilt) as f:
        assert f.read().splitlines() == tokens
