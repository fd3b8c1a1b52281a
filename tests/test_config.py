"""Flag checks at parse time: a bad value is one sentence, exit 2, and nothing is written.

These run the real CLI entry point; they fail before any Beam import or job, so they are
fast.
"""

from __future__ import annotations

import os

import pytest
from conftest import one_sentence

from beam_pipeline import cli
from beam_pipeline.core.errors import EXIT_USER_ERROR, PipelineError


def _fails(tmp_path, capsys, args):
    """Runs the CLI with ``args``; returns its one-line stderr (asserting exit 2, no files)."""
    root = tmp_path / "root"
    code = cli.main([*args, f"--pipeline_root={root}", "--data=unused.csv"])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR, err
    err = "error: " + one_sentence(err)
    assert "<Split" not in err
    assert not root.exists()  # refused before anything is written
    return err


_BAD_NUMBERS = [
    # (flag as given, phrase the message must hold)
    ("--max_rejected_fraction=-1", r"--max_rejected_fraction=-1\.0 is out of range: .* 0 to 1"),
    ("--max_rejected_fraction=nan", r"--max_rejected_fraction=nan is out of range"),
    ("--max_rejected_fraction=1.5", r"--max_rejected_fraction=1\.5 is out of range"),
    ("--max_rejected_fraction=inf", r"--max_rejected_fraction=inf is out of range"),
    ("--max_module_folder_mib=0", r"--max_module_folder_mib=0\.0 is out of range: .* above 0"),
    ("--max_module_folder_mib=nan", r"--max_module_folder_mib=nan is out of range"),
    ("--train_steps=-5", r"--train_steps=-5 is out of range: .* at least 1 \(0 only with"),
    ("--train_steps=0", r"--train_steps=0 is out of range"),
    ("--eval_steps=0", r"--eval_steps=0 is out of range: .* at least 1"),
    ("--tuner_parallel_trials=0", r"--tuner_parallel_trials=0 is out of range"),
    ("--tuner_max_trials=0", r"--tuner_max_trials=0 is out of range"),
    ("--tuner_train_steps=0", r"--tuner_train_steps=0 is out of range"),
    ("--tuner_eval_steps=-1", r"--tuner_eval_steps=-1 is out of range"),
    ("--asha_reduction_factor=1", r"--asha_reduction_factor=1 is out of range.* at least 2"),
    ("--asha_min_epochs=0", r"--asha_min_epochs=0 is out of range.* at least 1"),
    ("--max_string_domain_size=-1", r"--max_string_domain_size=-1 is out of range.* at least 0"),
    ("--csv_max_field_bytes=0", r"--csv_max_field_bytes=0 is out of range.* at least 1"),
    ("--worker_start_timeout=0", r"--worker_start_timeout=0\.0 is not a positive number of"),
    ("--worker_start_timeout=nan", r"--worker_start_timeout=nan is not a positive number"),
    ("--split_buckets=train=0,eval=1", r"gives train 0 buckets"),
    ("--split_buckets=train=2,eval=-1", r"gives eval -1 buckets"),
    ("--split_buckets=train=2,train=1", r"names split train twice"),
    ("--split_buckets=eval=1", r"--split_buckets has no train split; add train=N"),
    ("--split_buckets=train=x", r"gives train 'x', which is not a whole number"),
    ("--split_buckets=bogus=1", r"names split 'bogus'; use train, eval or test"),
    ("--input_splits=eval=a.csv", r"--input_splits has no train split"),
    ("--input_splits=train=a.csv,train=b.csv", r"--input_splits names split train twice"),
    ("--serving_endpoint=localhost", r"--serving_endpoint=localhost is not HOST:PORT; pass"),
    ("--serving_endpoint=http://h:1", r"--serving_endpoint=http://h:1 is not HOST:PORT"),
    ("--serving_model_name=", r"--serving_model_name is empty; pass the name"),
]


@pytest.mark.parametrize("flag, match", _BAD_NUMBERS, ids=[f for f, _ in _BAD_NUMBERS])
def test_numeric_flags_are_range_checked_at_parse_time(tmp_path, capsys, flag, match):
    import re

    err = _fails(tmp_path, capsys, [flag])
    assert re.search(match, err), err


_BAD_RUN_IDS = ["../../x", "/tmp/abs", "..", ".", "a/b", "", "a\\b", " x", "-x", "x" * 129, "é"]


@pytest.mark.parametrize("run_id", _BAD_RUN_IDS)
def test_run_id_must_be_one_safe_path_segment(tmp_path, capsys, run_id):
    err = _fails(tmp_path, capsys, [f"--run_id={run_id}"])
    assert f"--run_id={run_id!r} is not a run name" in err


def test_run_id_from_a_config_file_is_checked_too(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("run_id: ../escape\n")
    err = _fails(tmp_path, capsys, [f"--config={config}"])
    assert "'../escape' is not a run name" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--max_rejected_fraction=0", "--max_rejected_fraction=1"],
        ["--run_id=2026-11-22_run.1", "--tuner_parallel_trials=1", "--tuner_max_trials=1"],
        ["--train_steps=0", "--base_model=some/model"],  # export the warm-started model
        ["--max_string_domain_size=0", "--csv_max_field_bytes=1", "--split_buckets=train=1"],
    ],
)
def test_values_at_the_edge_of_their_range_are_accepted(args):
    config = cli.parse_config([*args, "--data=unused.csv"])
    assert config.run_id in ("", "2026-11-22_run.1")


def test_yaml_number_written_in_exponent_form_is_read_as_a_number(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("data: x.csv\nmax_rejected_fraction: 1e-2\n")  # a string to PyYAML
    assert cli.parse_config([f"--config={config}"]).data.max_rejected_fraction == 0.01
    assert os.path.basename(cli.parse_config([f"--config={config}"]).data.data) == "x.csv"


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, ()),  # not given: every stage may be reused
        ("--no_cache", "all"),
        ("--no_cache=all", "all"),
        ("--no_cache=Trainer,tuner", ("Trainer", "Tuner")),
        ("--no_cache=ExampleGen,Statistics", ("ExampleGen+Statistics",)),
    ],
)
def test_no_cache_names_stages(value, expected):
    from beam_pipeline.stages.graph import STAGE_GRAPH

    config = cli.parse_config(["--data=d.csv"] + ([value] if value else []))
    every = tuple(s.name for s in STAGE_GRAPH)
    want = every if expected == "all" else tuple(expected)
    assert config.no_cache == want


def test_no_cache_and_metadata_url_from_a_config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("data: d.csv\nno_cache: [Transform]\nmetadata_url: sqlite:////x/m.sqlite\n")
    config = cli.parse_config([f"--config={path}"])
    assert config.no_cache == ("Transform",)
    assert config.metadata_url == "sqlite:////x/m.sqlite"


def test_an_unknown_no_cache_stage_is_refused(tmp_path, capsys):
    err = _fails(tmp_path, capsys, ["--no_cache=Trainer,Deployer"])
    assert err == (
        "error: --no_cache names stage 'Deployer', which is not one; pass all or some of "
        "ExampleGen+Statistics,Schema,Validation,Transform,Tuner,Trainer,Evaluator,"
        "InfraValidator,Pusher,BulkInferrer (or no value: all)."
    )


def test_stage_beam_args_from_a_config_file_and_the_command_line(tmp_path):
    from beam_pipeline.engine.manifest import RunManifest, run_identity

    path = tmp_path / "run.yaml"
    path.write_text(
        "data: d.csv\nstage_beam_args:\n  Trainer: [--machine_type=a2-highgpu-1g]\n"
        "  transform: --num_workers=20\n"
    )
    argv = [f"--config={path}", "--stage_beam_args=Trainer:--machine_type=n1-standard-8"]
    config = cli.parse_config(argv)
    # Per stage in graph order; the command line's after the file's (later flags win).
    assert config.stage_beam_args == (
        ("Transform", ("--num_workers=20",)),
        ("Trainer", ("--machine_type=a2-highgpu-1g", "--machine_type=n1-standard-8")),
    )
    # Part of the run's identity: a resume with other stage flags is refused.
    root = str(tmp_path / "root")
    RunManifest.open(root, "r", run_identity(config, "data", None))
    other = cli.parse_config([f"--config={path}"])
    with pytest.raises(PipelineError, match=r"per-stage Beam flags \(stage_beam_args\)"):
        RunManifest.open(root, "r", run_identity(other, "data", None))
    # Without them the identity is what it was before they existed.
    assert "stage_beam_args" not in run_identity(cli.parse_config(["--data=d.csv"]), "d", None)


@pytest.mark.parametrize(
    "flag, error",
    [
        (
            "--stage_beam_args=Deployer:--num_workers=2",
            "error: stage_beam_args names stage 'Deployer' (--stage_beam_args=Deployer:"
            "--num_workers=2), which is not one; use one of ExampleGen+Statistics, Schema, "
            "Validation, Transform, Tuner, Trainer, Evaluator, InfraValidator, Pusher, "
            "BulkInferrer.",
        ),
        (
            "--stage_beam_args=Trainer",
            "error: --stage_beam_args=Trainer is not STAGE:--flag=value; pass e.g. "
            "--stage_beam_args=Trainer:--machine_type=a2-highgpu-1g.",
        ),
    ],
)
def test_a_bad_stage_beam_args_flag_is_refused(tmp_path, capsys, flag, error):
    assert _fails(tmp_path, capsys, [flag]) == error


def test_output_flags_are_read_apart_from_the_runs_identity(tmp_path):
    from beam_pipeline.console import OutputConfig

    argv = ["-v", "--log_file=/tmp/x.log", "--no_progress", "--runner=DirectRunner", "--data=a.csv"]
    assert cli.parse_output(argv) == OutputConfig(
        verbose=True, log_file="/tmp/x.log", progress=False
    )
    assert cli.parse_output(["--data=a.csv"]) == OutputConfig()
    # They shape no artifact: the run's configuration (its identity) is the same without them.
    assert cli.parse_config(argv) == cli.parse_config(["--runner=DirectRunner", "--data=a.csv"])


def test_a_flag_error_with_log_file_still_writes_the_log(tmp_path, capsys):
    log = tmp_path / "logs" / "run.log"
    err = _fails(tmp_path, capsys, [f"--log_file={log}", "--train_steps=0"])
    assert "--train_steps" in err
    assert log.exists()  # the (short) log of a run that stopped at its flags


def test_an_unreachable_serving_endpoint_stops_the_run_before_anything_is_written(tmp_path, capsys):
    from conftest import free_port

    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    err = _fails(tmp_path, capsys, [f"--serving_endpoint={endpoint}"])
    assert err == (
        f"error: --serving_endpoint {endpoint} cannot be reached (the connection failed); start "
        "TF Serving there (its gRPC port, 8500 by default) or drop the flag to validate the "
        "model in the sandbox."
    )


def test_the_python_api_refuses_each_setting_of_the_wrong_type_in_one_sentence():
    import beam_pipeline as bp

    with pytest.raises(PipelineError) as raised:
        bp.make_config(
            tuner="no",
            mixed_precision="yes",
            beam_args="--runner=DirectRunner",
            data=123,
            run_id=5,
        )
    assert str(raised.value) == (
        "make_config gives tuner='no' (text; it takes true or false), mixed_precision='yes' "
        "(text; it takes true or false), data=123 (a number; it takes text), run_id=5 (a "
        "number; it takes text), beam_args='--runner=DirectRunner' (text; it takes a list of "
        "flags, e.g. ['--runner=DirectRunner']); pass each as the type it takes."
    )


@pytest.mark.parametrize(
    "lines, section, field, value",
    [
        # YAML 1.1 reads an unquoted 1:3 as the base-60 number 63: read as written.
        ("spans: 1:3", "data", "spans", (1, 3)),
        ("ignore_anomalies: false", "validation", "ignore_anomalies", False),
        ("train_steps: '50'", "trainer", "train_steps", 50),  # a flag's text
    ],
)
def test_config_file_values_are_read_as_written(tmp_path, lines, section, field, value):
    config = tmp_path / "run.yaml"
    config.write_text(f"data: 'span-{{SPAN}}/*.csv'\n{lines}\n")
    parsed = cli.parse_config([f"--config={config}"])
    assert getattr(getattr(parsed, section), field) == value
