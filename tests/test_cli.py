"""End to end: the CLI on the DirectRunner, every artifact read back with its own reader."""

from __future__ import annotations

import gc
import glob
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import (
    PENGUIN_DIR,
    PENGUIN_FEATURES,
    REPO,
    TESTDATA,
    feature_value,
    read_examples,
)

from beam_pipeline import cli
from beam_pipeline.config import TunerSchedule
from beam_pipeline.core.errors import EXIT_ANOMALIES, EXIT_USER_ERROR
from beam_pipeline.stages.graph import STAGE_GRAPH

pytestmark = pytest.mark.slow

MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")

# The graph's stages in order, and the summary's rows (the first stage gives two); from
# the graph, so that a new stage edits no list here. --no_tuner --no_trainer skips the
# Tuner and every stage after it (no model to check, push or score).
STAGES = [s.name for s in STAGE_GRAPH]
ROWS = ["ExampleGen", "Statistics", *STAGES[1:]]
MODEL_STAGES = STAGES[STAGES.index("Tuner") :]


def _run_dir(root):
    runs = glob.glob(os.path.join(root, "runs", "*"))
    assert len(runs) == 1, runs
    return runs[0]


def _published(run_dir):
    return sorted(
        name
        for name in os.listdir(run_dir)
        if os.path.exists(os.path.join(run_dir, name, "_PUBLISHED"))
    )


def _summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


# The bundled data stages on the DirectRunner's multi_processing mode: a worker process
# cannot import the module file by its generated name, so its functions must travel by value
# (a regression: Transform failed with ModuleNotFoundError); every test of the bundled run
# below checks what they produced. One worker process is enough for that (2 take longer on
# a small machine); ExampleGen and Statistics split over 2
# workers are checked in test_example_gen.py, test_statistics.py and test_csv_ranges.py.
BUNDLED_ARGS = [
    "--runner=DirectRunner",
    "--direct_running_mode=multi_processing",
    "--direct_num_workers=1",
    "--no_trainer",
    "--no_tuner",
]


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bundled"))
    code = cli.main([*BUNDLED_ARGS, f"--pipeline_root={root}"])
    assert code == 0
    return _run_dir(root)


def test_bundled_run_publishes_every_data_artifact(bundled_run):
    assert _published(bundled_run) == [
        "anomalies",
        "examples",
        "rejected",
        "schema",
        "statistics",
        "transform_graph",
        "transformed_examples",
    ]
    assert not os.path.exists(os.path.join(bundled_run, ".staging"))
    stages = _summary(bundled_run)
    assert list(stages) == ROWS
    assert {n: s["status"] for n, s in stages.items()} == {
        n: "skipped" if n in MODEL_STAGES else "ok" for n in ROWS
    }
    eg = stages["ExampleGen"]
    assert eg["rows_in"] == {"all": 344}
    assert sum(eg["rows_out"].values()) == 344 and eg["rows_rejected"] == 0


def test_examples_statistics_and_summary_agree(bundled_run):
    from beam_pipeline.engine.artifacts import Statistics

    rows_out = _summary(bundled_run)["ExampleGen"]["rows_out"]
    for split in ("train", "eval"):
        examples = read_examples(os.path.join(bundled_run, "examples", split, "*.tfrecord.gz"))
        stats = Statistics.read_file(
            os.path.join(bundled_run, "statistics", split, "FeatureStats.pb")
        )
        dataset = stats.datasets[0]
        assert len(examples) == rows_out[split] == dataset.num_examples
        by_name = {f.path.step[0]: f for f in dataset.features}
        # 'sex' is NA in 11 of the 344 rows: missing in stats exactly as in the examples.
        # tfx-bsl writes a missing value as a feature with no value list (decoded as null).
        missing_sex = sum(1 for e in examples if feature_value(e, "sex") is None)
        assert by_name["sex"].string_stats.common_stats.num_missing == missing_sex
        years = [e.features.feature["year"].int64_list.value[0] for e in examples]
        assert by_name["year"].num_stats.min == min(years)
        assert by_name["year"].num_stats.max == max(years)


def test_schema_is_inferred_with_presence_and_domains(bundled_run):
    from tensorflow_metadata.proto.v0 import schema_pb2

    from beam_pipeline.engine.artifacts import Schema

    schema = Schema.read_file(os.path.join(bundled_run, "schema", "schema.pbtxt"))
    features = {f.name: f for f in schema.feature}
    assert set(features) == set(PENGUIN_FEATURES)
    assert features["species"].type == schema_pb2.BYTES
    assert features["species"].presence.min_fraction == 1.0
    assert features["bill_length_mm"].type == schema_pb2.FLOAT
    assert features["body_mass_g"].type == schema_pb2.INT
    assert features["sex"].presence.min_fraction < 1.0  # NA in some rows: optional
    domains = {d.name: set(d.value) for d in schema.string_domain}
    assert domains[features["island"].domain] == {"Biscoe", "Dream", "Torgersen"}


def test_transform_output_opens_and_transformed_examples_are_complete(bundled_run):
    import tensorflow_transform as tft

    tf_output = tft.TFTransformOutput(os.path.join(bundled_run, "transform_graph"))
    assert (
        tf_output.vocabulary_by_name("species")
        and len(tf_output.vocabulary_by_name("species")) == 3
    )
    assert set(tf_output.raw_feature_spec()) >= {"species", "island", "sex"}
    feature_spec = tf_output.transformed_feature_spec()
    assert "species_xf" in feature_spec and "body_mass_g_xf" in feature_spec
    rows_out = _summary(bundled_run)["ExampleGen"]["rows_out"]
    for split in ("train", "eval"):
        xf = read_examples(os.path.join(bundled_run, "transformed_examples", split, "*.gz"))
        assert len(xf) == rows_out[split]
        # Every example has every transformed feature: missing values were imputed.
        assert all(set(e.features.feature) == set(feature_spec) for e in xf)
    train = read_examples(os.path.join(bundled_run, "transformed_examples", "train", "*.gz"))
    z = [e.features.feature["body_mass_g_xf"].float_list.value[0] for e in train]
    assert abs(sum(z) / len(z)) < 0.05  # z-scored over the train split


@pytest.mark.parametrize(
    "source, said",
    [
        ("import sys\nsys.exit(3)\n", r"module\.py:2 called sys\.exit\(3\) while being imported"),
        ("x = 1\nexit()\n", r"module\.py:2 called sys\.exit\(None\) while being imported"),
        ("raise SystemExit('bye')\n", r"module\.py:1 called sys\.exit\('bye'\)"),
        (
            "class Stop(BaseException):\n    pass\n\n\nraise Stop('halt')\n",
            r"module\.py:5 raised Stop: halt while being imported",
        ),
    ],
    ids=["sys.exit", "exit", "SystemExit", "BaseException"],
)
def test_a_module_that_exits_at_import_is_a_user_error_not_the_end_of_the_cli(
    tmp_path, capsys, source, said
):
    module = tmp_path / "module.py"
    module.write_text(source)
    root = tmp_path / "root"
    data = os.path.join(PENGUIN_DIR, "penguins.csv")
    args = [f"--data={data}", f"--module_file={module}", f"--pipeline_root={root}"]
    assert cli.main(args) == EXIT_USER_ERROR  # SystemExit would have ended this test
    err = capsys.readouterr().err
    assert err.startswith("error: Module file ") and err.count("\n") == 1, err
    assert re.search(said, err), err
    assert not root.exists()


def test_keyboard_interrupt_at_import_still_interrupts(tmp_path):
    from trainer import check_trainer_module

    module = tmp_path / "module.py"
    module.write_text("raise KeyboardInterrupt\n")
    for _ in range(2):  # not remembered as loaded: the second load runs the file again
        with pytest.raises(KeyboardInterrupt):
            check_trainer_module(str(module))


def test_messy_csv_end_to_end_with_rejections_allowed(tmp_path):
    root = str(tmp_path)
    code = cli.main(
        [
            f"--data={os.path.join(TESTDATA, 'messy.csv')}",
            f"--pipeline_root={root}",
            "--max_rejected_fraction=0.1",
            "--split_buckets=train=1,eval=1",
            "--ignore_anomalies",
        ]
    )
    assert code == 0
    run_dir = _run_dir(root)
    stages = _summary(run_dir)
    # Free-text and id-like columns get no string domain (values are nearly all unique),
    # so unseen names in eval are no anomaly; the eval split's missing score is.
    with open(os.path.join(run_dir, "anomalies", "summary.txt"), encoding="utf-8") as f:
        anomalies = f.read()
    assert "score" in anomalies
    assert "name:" not in anomalies and "note:" not in anomalies
    eg = stages["ExampleGen"]
    assert eg["rows_in"] == {"all": 47} and eg["rows_rejected"] == 3
    assert sum(eg["rows_out"].values()) + eg["rows_rejected"] == eg["rows_in"]["all"]
    # messy.csv has quoted newlines: read whole, and the summary says why.
    assert "1 CSV file read by one reader: a quoted field spans lines" in eg["note"]
    assert stages["Transform"]["status"] == "skipped"  # no module file given
    rejected = []
    for path in glob.glob(os.path.join(run_dir, "rejected", "*.jsonl")):
        with open(path, encoding="utf-8") as f:
            rejected += [json.loads(line) for line in f]
    assert sorted(r["line"] for r in rejected) == [6, 7, 10]
    total = sum(
        len(read_examples(os.path.join(run_dir, "examples", s, "*.gz"))) for s in ("train", "eval")
    )
    assert total == 44


def test_rejections_over_the_limit_fail_and_publish_only_rejected_rows(tmp_path, capsys):
    root = str(tmp_path)
    code = cli.main([f"--data={os.path.join(TESTDATA, 'messy.csv')}", f"--pipeline_root={root}"])
    assert code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "3 of 47 input rows (6.38%) were rejected" in err
    assert "messy.csv:6 has 4 fields but the header has 6" in err
    run_dir = _run_dir(root)
    assert _published(run_dir) == ["rejected"]
    assert not os.path.exists(os.path.join(run_dir, "examples"))
    assert not os.path.exists(os.path.join(run_dir, ".staging"))


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "make_args, match",
    [
        (lambda d: ["--data", str(d / "missing.csv")], r"matches no file"),
        (lambda d: ["--data", _write(d / "empty.csv", "")], r"empty\.csv is empty"),
        (lambda d: ["--data", _write(d / "nohead.csv", "1,2\n3,4\n")], r"not a header"),
        (
            lambda d: [
                f"--data={PENGUIN_DIR}/penguins.csv",
                "--module_file",
                _write(d / "m.py", "x = 1\n"),
            ],
            r"m\.py defines no preprocessing_fn",
        ),
        (
            lambda d: [
                f"--data={PENGUIN_DIR}/penguins.csv",
                "--module_file",
                _write(
                    d / "m.py", "def preprocessing_fn(inputs):\n    return {'y': inputs['nope']}\n"
                ),
            ],
            r"preprocessing_fn in .*m\.py raised KeyError",
        ),
        (
            lambda d: [f"--data={PENGUIN_DIR}/penguins.csv", f"--schema={d / 'none.pbtxt'}"],
            r"Schema file .*none\.pbtxt does not exist",
        ),
        (lambda d: ["--data", _write(d / "a.csv", "x\n1\n"), "--bogus_flag=1"], r"Unknown flag"),
        (
            lambda d: ["--data", _write(d / "a.csv", "x\n1\n"), "--split_buckets=train"],
            r"train=\.\.\.",
        ),
    ],
    ids=[
        "missing",
        "empty",
        "no-header",
        "no-preprocessing_fn",
        "fn-raises",
        "missing-schema",
        "unknown-flag",
        "bad-split",
    ],
)
def test_bad_input_is_one_sentence_nonzero_exit_and_nothing_published(
    tmp_path, capsys, make_args, match
):
    root = tmp_path / "root"
    args = make_args(tmp_path) + [f"--pipeline_root={root}", "--csv_null_values=NA"]
    code = cli.main(args)
    err = capsys.readouterr().err.strip()
    assert code == EXIT_USER_ERROR
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    import re

    assert re.search(match, err), err
    published = glob.glob(os.path.join(str(root), "runs", "*", "*", "_PUBLISHED"))
    assert glob.glob(os.path.join(str(root), "runs", "*", ".staging")) == []
    if match.startswith("preprocessing_fn in"):
        # The data stages' artifacts are valid and stay (schema.pbtxt shows the function's
        # inputs; a rerun reuses them); nothing of Transform is published.
        names = sorted(os.path.basename(os.path.dirname(p)) for p in published)
        assert names == ["anomalies", "examples", "rejected", "schema", "statistics"]
    else:
        assert published == []


@pytest.fixture(scope="module")
def second_run(bundled_run):
    """The bundled run launched again under the same pipeline root (run id ``again``):
    every data stage reused from the first through the metadata store."""
    root = os.path.dirname(os.path.dirname(bundled_run))
    assert cli.main([*BUNDLED_ARGS, f"--pipeline_root={root}", "--run_id=again"]) == 0
    return os.path.join(root, "runs", "again")


def test_a_second_run_reuses_every_stage_from_the_metadata_store(bundled_run, second_run):
    from beam_pipeline.metadata import ExecutionStatus, MetadataStore, RunStatus

    root = os.path.dirname(os.path.dirname(bundled_run))
    first = os.path.basename(bundled_run)
    again = second_run
    stages = _summary(again)
    assert {stage: s["status"] for stage, s in stages.items()} == {
        n: "skipped" if n in MODEL_STAGES else "cached" for n in ROWS
    }
    assert stages["Transform"]["note"].startswith(f"reused from run {first}")
    assert _published(again) == []  # the first run's folders are reused, nothing copied
    with MetadataStore.for_pipeline_root(str(root)) as store:
        assert {r.run_id: r.status for r in store.list_runs()} == {
            first: RunStatus.COMPLETE,
            "again": RunStatus.COMPLETE,
        }
        made = store.run_executions(first)
        reused = store.run_executions("again")
    # Each stage once (in the order they started: stages beside each other start together).
    made = {e.stage: e for e in made}
    assert sorted(made) == sorted(e.stage for e in reused) == sorted(STAGES)
    assert all(e.status is ExecutionStatus.COMPLETE for e in made.values())
    assert {e.stage: (e.status, e.cached_from) for e in reused} == {
        stage: (ExecutionStatus.CACHED, e.id) for stage, e in made.items()
    }
    transform = made["Transform"]
    assert transform.inputs["Schema"] == made["Schema"].outputs["Schema"]
    assert transform.outputs["TransformGraph"].uri == os.path.join(bundled_run, "transform_graph")
    assert made["ExampleGen+Statistics"].inputs["data"].uri.endswith("penguins.csv")


def _runs(capsys, *argv):
    """``python -m beam_pipeline runs ...`` in process: (exit code, stdout, stderr)."""
    code = cli.main(["runs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_list_show_and_lineage_on_the_two_bundled_runs(bundled_run, second_run, capsys):
    root = os.path.dirname(os.path.dirname(bundled_run))
    first = os.path.basename(bundled_run)
    code, out, _ = _runs(capsys, "list", f"--pipeline_root={root}", "--json")
    assert code == 0
    rows = {r["run_id"]: r for r in json.loads(out)}
    assert rows["again"]["cached"] == STAGES
    assert rows[first]["cached"] == [] and rows[first]["status"] == "complete"
    assert rows[first]["data"] == rows["again"]["data"] and len(rows[first]["data"]) == 64
    assert rows[first]["module"] == rows["again"]["module"] and rows[first]["module"]
    assert rows[first]["metrics"] == {}  # --no_trainer: no eval metrics

    code, out, _ = _runs(capsys, "show", "again", f"--pipeline_root={root}", "--json")
    assert code == 0
    shown = {e["stage"]: e for e in json.loads(out)["executions"]}
    transform = shown["Transform"]
    assert transform["status"] == "cached" and transform["cached_from_run"] == first
    assert transform["inputs"]["Schema"]["uri"] == os.path.join(bundled_run, "schema")
    assert transform["outputs"]["TransformGraph"]["uri"] == os.path.join(
        bundled_run, "transform_graph"
    )
    assert transform["parameters"]["preprocessing_fn"].startswith("function ")  # its code
    code, out, _ = _runs(capsys, "show", "again", f"--pipeline_root={root}")
    assert code == 0 and "Transform" in out and f"cached (from run {first})" in out

    schema = os.path.join(bundled_run, "schema")
    code, out, _ = _runs(capsys, "lineage", schema + "/", f"--pipeline_root={root}", "--json")
    assert code == 0
    found = json.loads(out)
    assert found["artifact"]["uri"] == schema
    assert [(e["stage"], e["run_id"]) for e in found["upstream"]] == [
        ("ExampleGen+Statistics", first), ("Schema", first),
    ]  # fmt: skip
    downstream = {(e["stage"], e["run_id"]) for e in found["downstream"]}
    assert {("Validation", first), ("Transform", first), ("Transform", "again")} <= downstream
    assert ("ExampleGen+Statistics", first) not in downstream

    for argv, match in [
        (["show", "nope"], r"^error: No run 'nope' is recorded in the metadata store sqlite:///"),
        (["diff", first, "nope"], r"^error: No run 'nope' is recorded"),
        (["lineage", "/no/such/uri"], r"^error: No artifact at '/no/such/uri' is recorded"),
    ]:
        code, out, err = _runs(capsys, *argv, f"--pipeline_root={root}")
        assert (code, out) == (EXIT_USER_ERROR, "") and re.search(
            match, err.strip().splitlines()[-1]
        )
    code, _, err = _runs(capsys, "list", f"--pipeline_root={root}/none")
    assert code == EXIT_USER_ERROR and "No metadata store at " in err

    # `runs report RUN` writes the recorded run's report.html again and prints its path.
    report = os.path.join(bundled_run, "report.html")
    os.remove(report)
    code, out, _ = _runs(capsys, "report", first, f"--pipeline_root={root}")
    assert (code, out.strip()) == (0, report) and os.path.getsize(report) > 1000
    code, out, err = _runs(capsys, "report", "nope", f"--pipeline_root={root}")
    assert (code, out) == (EXIT_USER_ERROR, "") and "No run 'nope' is recorded" in err


def test_runs_diff_compares_schemas_statistics_and_metrics_of_recorded_runs(
    bundled_run, tmp_path, capsys
):
    """Two runs recorded through the store API over real artifacts: the bundled run's
    schema and statistics, and copies edited as a changed dataset would change them."""
    import shutil

    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    from beam_pipeline.engine.artifacts import Schema
    from beam_pipeline.engine.summary import StageReport, StageStatus
    from beam_pipeline.metadata import ArtifactSpec, MetadataStore, RunStatus
    from beam_pipeline.stages.trainer.stage import TrainerStage

    b_dir = tmp_path / "b"
    shutil.copytree(os.path.join(bundled_run, "schema"), b_dir / "schema")
    shutil.copytree(os.path.join(bundled_run, "statistics"), b_dir / "statistics")
    schema = Schema.read_file(str(b_dir / "schema" / "schema.pbtxt"))
    kept = [f for f in schema.feature if f.name != "island"]
    del schema.feature[:]
    schema.feature.extend(kept)
    by_name = {f.name: f for f in schema.feature}
    by_name["sex"].presence.min_fraction = 0.5
    schema.feature.add(name="clutch_size", type=schema_pb2.INT)
    (b_dir / "schema" / "schema.pbtxt").write_text(text_format.MessageToString(schema))
    stats_file = b_dir / "statistics" / "train" / "FeatureStats.pb"
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(stats_file.read_bytes())
    mass = next(f for f in stats.datasets[0].features if f.path.step == ["body_mass_g"])
    mean_a, std_a = mass.num_stats.mean, mass.num_stats.std_dev
    mass.num_stats.mean += 100.0
    mass.num_stats.std_dev *= 2
    stats_file.write_bytes(stats.SerializeToString())

    url = f"sqlite:///{tmp_path}/metadata.sqlite"
    with MetadataStore.open(url) as store:
        for run_id, folder, loss in [("a", bundled_run, 0.5), ("b", str(b_dir), 0.25)]:
            run = store.start_run(run_id, properties={"data": f"data-{run_id}", "module": "m"})
            data = store.begin_execution(run, "ExampleGen+Statistics", {"splits": 2}, "k1", {})
            stats_spec = ArtifactSpec(f"{folder}/statistics", "Statistics")
            store.publish_outputs(data, {"Statistics": stats_spec})
            store.complete_execution(data)
            made = store.begin_execution(run, "Schema", {"infer": run_id == "a"}, "k2", {})
            store.publish_outputs(made, {"Schema": ArtifactSpec(f"{folder}/schema", "Schema")})
            store.complete_execution(made)
            trainer = store.begin_execution(run, "Trainer", {"trainer": {"steps": 10}}, "k3", {})
            report = StageReport("Trainer", StageStatus.OK, details={"metrics": {"loss": loss}})
            # As the runner records it: the rows and what the stage shows in the history.
            shown = TrainerStage().history([report]).to_json()
            properties = {"reports": [report.to_json()], "history": shown}
            store.complete_execution(trainer, properties=properties)
            store.finish_run(run, RunStatus.COMPLETE)

    # Recorded through the API: under its default pipeline name.
    where = [f"--metadata_url={url}", "--pipeline_name=beam-pipeline"]
    code, out, _ = _runs(capsys, "diff", "a", "b", *where, "--json")
    assert code == 0
    d = json.loads(out)
    assert d["inputs"]["data"] == ["data-a", "data-b"] and d["inputs"]["module"] == ["m", "m"]
    assert d["parameters"] == {"Schema": {"infer": [True, False]}}
    assert d["schema"]["added"] == ["clutch_size"] and d["schema"]["removed"] == ["island"]
    assert set(d["schema"]["changed"]) == {"sex"}
    assert d["schema"]["changed"]["sex"]["presence"][1] == {"minFraction": 0.5, "minCount": "1"}
    drift = d["drift"]["train"]["body_mass_g"]
    assert drift["mean_a"] == pytest.approx(mean_a) and drift["mean_change"] == pytest.approx(100)
    assert drift["std_change"] == pytest.approx(std_a)
    assert d["drift"]["eval"]["body_mass_g"]["mean_change"] == 0.0
    assert d["metrics"] == {"loss": [0.5, 0.25]}
    code, out, _ = _runs(capsys, "list", *where, "--json")
    assert [(r["run_id"], r["metrics"]) for r in json.loads(out)] == [
        ("b", {"loss": 0.25}), ("a", {"loss": 0.5}),
    ]  # fmt: skip
    code, out, _ = _runs(capsys, "diff", "a", "b", *where)
    assert code == 0
    for line in ["island", "removed", "clutch_size", "added", "body_mass_g", "loss"]:
        assert line in out
    shutil.rmtree(b_dir / "statistics")  # gone from disk: not compared, not an error
    code, out, _ = _runs(capsys, "diff", "a", "b", *where)
    assert code == 0 and "Statistics: not compared (a run has no statistics on disk)" in out


def _corrupt_store(d):
    return f"sqlite:///{_write(d / 'corrupt.sqlite', 'not a database ' * 300)}"


@pytest.mark.parametrize(
    "make_url, match",
    [
        (
            lambda d: f"sqlite:///{d}/missing/metadata.sqlite",
            r"^error: Metadata store sqlite:///.*/missing/metadata\.sqlite: cannot open or write "
            r"the SQLite file .*; make sure its folder .*/missing exists and is writable, or "
            r"pass another --metadata_url\.$",
        ),
        (_corrupt_store, r"^error: Metadata store .*corrupt\.sqlite is not a SQLite database"),
    ],
    ids=["missing-folder", "corrupt-file"],
)
def test_a_bad_metadata_url_stops_the_run_before_anything_is_written(
    tmp_path, capsys, make_url, match
):
    import re

    root = tmp_path / "root"
    code = cli.main(
        [f"--data={PENGUIN_DIR}/penguins.csv", f"--metadata_url={make_url(tmp_path)}"]
        + [f"--pipeline_root={root}", "--no_trainer", "--no_tuner"]
    )
    err = capsys.readouterr().err.strip()
    assert code == EXIT_USER_ERROR and re.search(match, err), err
    assert not root.exists()  # no run directory, no job


def test_blocking_anomalies_stop_the_run_with_exit_3(bundled_run, tmp_path, capsys):
    from tensorflow_metadata.proto.v0 import schema_pb2

    from beam_pipeline.engine.artifacts import Schema
    from beam_pipeline.stages.schema.inference import write_schema

    # The bundled run's schema, made to say 'sex' is always present: the data has NA there.
    schema = Schema.read_file(os.path.join(bundled_run, "schema", "schema.pbtxt"))
    for f in schema.feature:
        if f.name == "sex":
            f.presence.CopyFrom(schema_pb2.FeaturePresence(min_fraction=1.0, min_count=1))
    path = str(tmp_path / "schema.pbtxt")
    write_schema(schema, path)
    root = tmp_path / "second"
    args = [f"--schema={path}", f"--pipeline_root={root}", "--no_trainer", "--no_tuner"]
    code = cli.main(args + ["--run_id=anomalous"])
    assert code == EXIT_ANOMALIES
    err = capsys.readouterr().err
    assert "error: Validation found blocking anomalies in split train: sex (" in err
    assert "--ignore_anomalies" in err and len(err.strip().splitlines()) == 1
    run_dir = _run_dir(str(root))
    assert "transform_graph" not in _published(run_dir)
    assert "anomalies" in _published(run_dir)
    # The failed run's report shows what exists (the anomaly) and says what is missing.
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as f:
        report = f.read()
    assert "<td>train</td><td>sex</td><td>ERROR</td>" in report
    assert "trials: no tuner/trials.json (the Tuner did not run or finish)" in report
    # Resumed with --ignore_anomalies: the data stages and their anomalies are kept.
    code = cli.main(args + ["--run_id=anomalous", "--ignore_anomalies"])
    assert code == 0
    stages = _summary(run_dir)
    assert [stages[s]["status"] for s in ("ExampleGen", "Schema", "Validation")] == ["cached"] * 3
    assert "sex" in stages["Validation"]["note"] and stages["Transform"]["status"] == "ok"


def test_yaml_config_and_flags(tmp_path):
    from beam_pipeline.core.errors import PipelineError

    config = tmp_path / "run.yaml"
    config.write_text(
        f"data: {os.path.join(PENGUIN_DIR, 'penguins.csv')}\n"
        "csv_null_values: [NA]\n"
        "split_buckets: {train: 3, eval: 1}\n"
        "beam_args: ['--direct_running_mode=in_memory']\n"
        "tuner_schedule: rounds\n"
        "search_space:\n"
        "  algorithm: random\n"
        "  objective: val_loss\n"
        "  max_trials: 3\n"
        "  hyperparameters:\n"
        "    learning_rate: {type: float, min: 1.0e-4, max: 1.0e-1, log: true}\n"
        "    units: {type: categorical, values: [8, 16]}\n"
    )
    cfg = cli.parse_config(
        [
            f"--config={config}",
            "--train_steps=7",
            "--trainer_entry_point=PenguinSpec",
            "--runner=DirectRunner",
            "--serving_endpoint=[::1]:8500",
            "--serving_model_name=penguin",
        ]
    )
    assert cfg.trainer.entry_point == "PenguinSpec"
    assert cfg.infra_validator.serving_endpoint == "[::1]:8500"
    assert cfg.infra_validator.serving_model_name == "penguin"
    assert cfg.tuner.schedule is TunerSchedule.ROUNDS
    assert cli.parse_config([f"--config={config}", "--tuner_schedule=rolling"]).tuner.schedule is (
        TunerSchedule.ROLLING
    )
    search_job = cli.parse_config(
        [f"--config={config}", "--tuner_schedule=search_job", "--tuner_lease_seconds=30"]
    ).tuner
    assert search_job.schedule is TunerSchedule.SEARCH_JOB and search_job.lease_seconds == 30
    with pytest.raises(PipelineError, match=r"--tuner_lease_seconds=0 is out of range"):
        cli.parse_config([f"--config={config}", "--tuner_lease_seconds=0"])
    space = cfg.tuner.search_space
    assert space.max_trials == 3
    assert [p.name for p in space.parameters] == ["learning_rate", "units"]
    assert cfg.data.csv_null_values == ("NA",)
    assert [(s.value, n) for s, n in cfg.data.split_buckets] == [("train", 3), ("eval", 1)]
    assert cfg.trainer.train_steps == 7
    assert cfg.beam_args == ("--direct_running_mode=in_memory", "--runner=DirectRunner")
    (tmp_path / "bad.yaml").write_text("dta: x.csv\n")
    with pytest.raises(
        PipelineError,
        match="setting 'dta', which is neither a beam_pipeline setting nor a Beam pipeline "
        "option; did you mean 'data'",
    ):
        cli.parse_config([f"--config={tmp_path / 'bad.yaml'}"])
    (tmp_path / "bad.yaml").write_text("tuner_schedule: async\n")
    with pytest.raises(
        PipelineError, match="'async' is not a schedule; use one of rolling, rounds"
    ):
        cli.parse_config([f"--config={tmp_path / 'bad.yaml'}"])


def test_python_dash_m_exit_code_and_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", f"--data={tmp_path / 'none.csv'}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == EXIT_USER_ERROR
    assert "matches no file" in proc.stderr and "Traceback" not in proc.stderr


# Imported at start-up (site imports a sitecustomize on the path): counts the collector's
# full collections before anything was frozen and its collections of any generation after,
# and at the process's end (after every atexit handler registered later) prints them and
# whether the objects left are frozen.
_COLLECTIONS = """
import atexit, gc
seen = {"full before a freeze": 0, "after": 0}
frozen = []  # get_freeze_count() walks the frozen objects: asked until it is not 0
def count(phase, info):
    if phase != "start":
        return
    if frozen or gc.get_freeze_count():
        frozen[:] = [True]
        seen["after"] += 1
    elif info["generation"] == 2:
        seen["full before a freeze"] += 1
gc.callbacks.append(count)
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, seen))
"""


@pytest.mark.parametrize("entry", ["python_dash_m", "installed_command"])
def test_the_cli_process_ends_with_its_code_and_without_the_collectors_teardown(tmp_path, entry):
    # The interpreter's teardown would run the cyclic collector over every object of
    # TensorFlow, Keras and Beam left at the end of a run, after the run's last line.
    (tmp_path / "sitecustomize.py").write_text(_COLLECTIONS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    if entry == "python_dash_m":
        command = [sys.executable, "-m", "beam_pipeline"]
    else:
        command = [os.path.join(os.path.dirname(sys.executable), "beam-pipeline")]
    for args, code in (
        (["--version"], 0),
        ([f"--data={tmp_path / 'none.csv'}", f"--pipeline_root={tmp_path / 'root'}"], 2),
    ):
        proc = subprocess.run(
            [*command, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
        )
        assert proc.returncode == code, proc.stderr
        assert proc.stdout.splitlines()[-1].startswith("frozen at exit: True"), proc.stdout
    # A caller of main() in its own process (this test's) keeps its collector.
    frozen = gc.get_freeze_count()
    assert cli.main(["--version"]) == 0
    assert gc.get_freeze_count() == frozen


def test_a_cli_run_starts_up_without_full_collections_and_collects_in_its_stages(tmp_path):
    # Each full collection walks every object made so far: several while the start-up
    # imports TensorFlow and Beam, and one every few seconds of a large input's parsing
    # that walked all of TensorFlow's objects again, until the start-up's were frozen.
    (tmp_path / "sitecustomize.py").write_text(_COLLECTIONS)
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", f"--pipeline_root={tmp_path / 'root'}"]
        + ["--no_trainer", "--no_tuner", "--no_progress"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("frozen at exit: True {'full before a freeze': 0, 'after': "), last
    assert int(last.split("'after': ")[1].rstrip("}")) > 0, last  # the collector back on


@pytest.mark.parametrize(
    "files, shadowed",
    [
        ({"trainer/__init__.py": "raise RuntimeError('the user trainer ran')\n"}, "trainer"),
        ({"transforms/notes.txt": ""}, "transforms"),  # a plain folder: a namespace package
        ({"trainer.py": "raise RuntimeError('the user trainer ran')\n"}, "trainer.py"),
        ({"data/trainer.csv": ""}, None),  # nothing named like a package: it starts
    ],
    ids=["trainer_package", "transforms_folder", "trainer_module", "no_shadow"],
)
def test_a_working_directory_that_shadows_a_package_is_refused_at_start_up(
    tmp_path, files, shadowed
):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "--help"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    if shadowed is None:
        assert proc.returncode == 0 and "usage: python -m beam_pipeline" in proc.stdout
        return
    package = shadowed.removesuffix(".py")
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert proc.stderr == (
        f"error: {tmp_path / shadowed} shadows beam-pipeline's own '{package}' package "
        "(python -m puts the working directory first on sys.path); run from another folder, "
        "rename that one, or run the installed beam-pipeline command instead of python -m.\n"
    )


def test_the_installed_command_is_not_shadowed_by_the_working_directory(tmp_path):
    # A beam_pipeline folder, which python -m would run instead of this project (no code of
    # ours runs to say so): the installed command does not look in the working directory.
    (tmp_path / "beam_pipeline").mkdir()
    (tmp_path / "beam_pipeline" / "__init__.py").write_text("raise RuntimeError('shadowed')\n")
    command = os.path.join(os.path.dirname(sys.executable), "beam-pipeline")
    proc = subprocess.run(
        [command, "--help"], capture_output=True, text=True, cwd=str(tmp_path), timeout=120
    )
    assert proc.returncode == 0 and "usage: beam-pipeline" in proc.stdout, proc.stderr


def test_a_bad_data_flag_on_a_first_run_is_refused_before_tensorflow_is_imported(tmp_path):
    # A first run warms its fork server before its checks; a launcher that forks the
    # server from itself imports TensorFlow for it, which must wait until the checks pass:
    # a mistyped --data took seconds of imports before its one sentence.
    code = (
        "import runpy, sys; sys.argv = ['beam_pipeline', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('beam_pipeline', run_name='__main__')\n"
        "finally:\n"
        "    print('tensorflow' in sys.modules)\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            f"--data={tmp_path / 'missing.csv'}",
            f"--pipeline_root={tmp_path / 'root'}",
            "--no_progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "matches no file" in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stdout[-2000:]
