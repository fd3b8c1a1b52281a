"""The tuner's two sides without Beam: OracleDriver (launcher) and TrialRunner (worker).

A real keras-tuner search in this process on a tiny in-memory classifier
(``tests/testdata/tiny_tuner_module.py``): rounds, max_trials, the best trial, failed and
fatal trials, Hyperband's resumed trials, seeds, a retried worker reusing a finished
trial, and a search job's worker loops (SearchLoop) claiming and reporting trials. The
Beam stage itself is tested in ``test_tuner_stage.py``.
"""

from __future__ import annotations

import dataclasses
import gc
import glob
import json
import os
import re

import pytest

from beam_pipeline.config import PipelineConfig, TunerConfig
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.stages.tuner.tuning import run_tuning_stage
from trainer.tuning import (
    Claim,
    Direction,
    OracleDriver,
    ParameterType,
    SearchAlgorithm,
    SearchLoop,
    SearchParameter,
    SearchSpace,
    TrialRunner,
    TrialSpec,
    TrialStatus,
    TuningJob,
    finished_driver,
    load_tuner,
    read_state,
    read_trial_result,
    start_search_state,
    state_path,
)
from transforms.tuner import RunTrials

TINY = os.path.join(os.path.dirname(__file__), "testdata", "tiny_tuner_module.py")


@pytest.fixture(autouse=True, scope="module")
def _heap_frozen():
    """The trials here run in the test process, whose heap holds everything the suite has
    imported and built so far. Frozen (the collector's permanent generation), as a pool
    worker's heap is (the fork server froze its imports: beam_pipeline.runtime.pool_zygote):
    the trial runner then skips its own full collection, and keras-tuner's two collections
    before each trial walk only what these tests made. Unfrozen when the module ends.
    (The trials' libraries imported first, so that their objects are frozen too.)"""
    import keras_tuner  # noqa: F401
    import tensorflow  # noqa: F401

    gc.freeze()
    yield
    gc.unfreeze()


def _job(tmp_path, module_file: str = TINY, **custom) -> TuningJob:
    return TuningJob(
        module_file=module_file,
        module_source=None,
        train_files=(),
        eval_files=(),
        transform_graph_path="unused",
        schema_path=None,
        tuner_dir=str(tmp_path / "tuner"),
        train_steps=1,
        eval_steps=1,
        custom_config=custom,
    )


def _search(job: TuningJob, parallel: int, max_trials=None):
    """Runs a whole search in this process; returns the driver and the round sizes."""
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, parallel, max_trials, "tiny")
    runner, sizes = TrialRunner(job), []
    while specs := oracle.next_round():
        sizes.append(len(specs))
        oracle.report({s.trial_id: runner.run(s) for s in specs})
    return oracle, sizes


@pytest.mark.slow
def test_rounds_ask_up_to_parallel_trials_until_max_trials(tmp_path):
    """The tuner's own max_trials=3 ends the search; --tuner_max_trials capping it is
    test_a_failing_hyperparameter_value_fails_its_trial_only."""
    sizes = [2, 1]
    oracle, got = _search(_job(tmp_path, max_trials=3), 2)
    assert got == sizes
    records = oracle.records()
    assert [r.trial_id for r in records] == [str(i) for i in range(sum(sizes))]
    assert all(r.status is TrialStatus.COMPLETED and r.attempts == 1 for r in records)
    assert [r.round for r in records] == [i for i, n in enumerate(sizes) for _ in range(n)]
    # The best hyperparameters are the completed trial with the highest objective.
    best = max(records, key=lambda r: r.objective)
    assert oracle.best_trial_id() == best.trial_id
    assert oracle.best_hyperparameters()["values"] == best.hyperparameters
    # The oracle's state is saved in the shared tuner project.
    assert os.path.exists(os.path.join(oracle.project_dir, "oracle.json"))


@pytest.mark.slow
def test_rolling_asks_fill_only_the_freed_slots(tmp_path):
    job = _job(tmp_path)  # the tiny tuner's own max_trials=4
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 2, None, "tiny")
    runner = TrialRunner(job)
    first = oracle.ask()
    assert [s.trial_id for s in first] == ["0", "1"] and oracle.ask() == []  # no slot free
    oracle.report({"1": runner.run(first[1])}, [first[1]])  # trial 1 ends first
    assert [s.trial_id for s in oracle.running] == ["0"]
    (second,) = oracle.ask()  # the freed slot gets trial 2 while trial 0 still runs
    assert second.trial_id == "2" and second.round == 1
    with pytest.raises(PipelineError, match="before the previous round's results"):
        oracle.next_round()  # synchronous rounds need every trial reported
    oracle.report({"0": runner.run(first[0])}, [first[0]])
    (third,) = oracle.ask()
    oracle.report({s.trial_id: runner.run(s) for s in (second, third)})  # default: all running
    assert oracle.ask() == [] and oracle.running == []  # max_trials reached, nothing runs
    records = oracle.records()
    assert [(r.trial_id, r.round) for r in records] == [("0", 0), ("1", 0), ("2", 1), ("3", 2)]
    assert all(r.status is TrialStatus.COMPLETED and r.started > 0 for r in records)


def test_a_retried_worker_reuses_the_finished_trial(tmp_path):
    job = _job(tmp_path)
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 1, 1, "tiny")
    (spec,) = oracle.next_round()
    first = TrialRunner(job).run(spec)
    again = TrialRunner(job).run(spec)  # a new worker process, as after a retry
    assert first.status is TrialStatus.COMPLETED and not first.reused
    assert again.reused and again.metrics == first.metrics and again.worker == first.worker
    assert read_trial_result(spec.project_dir, spec.trial_id, 0) == first


@pytest.mark.slow
def test_a_failing_hyperparameter_value_fails_its_trial_only(tmp_path):
    """Also: --tuner_max_trials=3 caps the tuner's own max_trials=8 (the last round short)."""
    oracle, sizes = _search(_job(tmp_path, fail_on_units=4, max_trials=8, seed=14), 2, 3)
    assert sizes == [2, 1]
    records = oracle.records()
    failed = [r for r in records if r.hyperparameters["units"] == 4]
    # seed 14 tries units 2, 4, 2: the failed trial is the second, and the search goes on
    assert len(records) == 3 and [r.trial_id for r in failed] == ["1"]
    for r in failed:
        assert r.status is TrialStatus.FAILED and r.objective is None
        assert r.error.startswith("ValueError: no model with units=4 (")
        assert "tiny_tuner_module.py:" in r.error
    assert all(r.status is TrialStatus.COMPLETED for r in records if r not in failed)


@pytest.mark.parametrize(
    "custom, message",
    [
        ({"fail_all": True, "max_trials": 5}, r"Tuning stopped: 3 trials in a row failed"),
        ({"not_a_model": True}, r"Trial 0 hit an error that stops the whole search"),
    ],
)
def test_hopeless_searches_stop_with_a_clear_error(tmp_path, custom, message):
    with pytest.raises(PipelineError, match=message):
        _search(_job(tmp_path, **custom), 2)


@pytest.mark.slow
def test_hyperband_resumes_trials_from_their_parents_checkpoints(tmp_path):
    """Asked as the rolling schedule asks (its oracle lives in the launcher, as here): one
    trial reported at a time, the freed slot asked again. A search job's Hyperband, whose
    oracle state travels between processes, runs on the pool in test_tuner_stage.py."""
    job = _job(tmp_path, tuner="hyperband")
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 2, None, "tiny")
    runner = TrialRunner(job)
    while oracle.ask() or oracle.running:
        oldest = oracle.running[0]
        oracle.report({oldest.trial_id: runner.run(oldest)}, [oldest])
    records = {r.trial_id: r for r in oracle.records()}
    assert len(records) == 5  # max_epochs=2, factor=2: brackets of 3 + 2
    assert all(r.status is TrialStatus.COMPLETED for r in records.values())
    resumed = [r for r in records.values() if "tuner/trial_id" in r.hyperparameters]
    assert len(resumed) == 1
    child = resumed[0].hyperparameters
    parent = child["tuner/trial_id"]
    assert (child["tuner/initial_epoch"], child["tuner/epochs"]) == (1, 2)
    assert records[parent].round < resumed[0].round
    assert os.path.exists(
        os.path.join(oracle.project_dir, f"trial_{parent}", "checkpoint.weights.h5")
    )


def test_the_same_seed_gives_the_same_trials(tmp_path):
    """The oracle's draws: asked, not run (a rerun of a whole search on the worker pool,
    under another schedule, is test_tuner_stage.py's rounds test)."""

    def asked(folder: str, seed: int) -> list[dict]:
        job = _job(tmp_path / folder, seed=seed)
        oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 3, 3, "tiny")
        return [spec.hyperparameters["values"] for spec in oracle.ask()]

    first, second, other = asked("a", 11), asked("b", 11), asked("c", 12)
    assert first == second and len(first) == 3
    assert first != other


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n", r"defines no tuner_fn\(fn_args\)"),
        (
            "def tuner_fn(fn_args):\n    return {}['tuner']\n",
            r"tuner_fn in .*bad\.py:2 raised KeyError",
        ),
        ("def tuner_fn(fn_args):\n    return 42\n", r"returned int, not TunerFnResult"),
    ],
)
def test_tuner_fn_errors_name_the_module_and_line(tmp_path, source, message):
    module = tmp_path / "bad.py"
    module.write_text(source)
    with pytest.raises(PipelineError, match=message):
        load_tuner(_job(tmp_path, module_file=str(module)), str(tmp_path))


@pytest.mark.parametrize(
    "tuner_config, module, note",
    [
        (TunerConfig(enabled=False), TINY, "tuning is disabled"),
        (TunerConfig(), None, "no module file, nothing to tune"),
        (TunerConfig(), "no_tuner_fn", "defines no tuner_fn"),
    ],
)
def test_stage_skips(tmp_path, tuner_config, module, note):
    if module == "no_tuner_fn":
        module = str(tmp_path / "m.py")
        (tmp_path / "m.py").write_text("def run_fn(fn_args):\n    pass\n")
    config = PipelineConfig(module_file=module, tuner=tuner_config)
    report, best = run_tuning_stage(config, RunDirectory.create(str(tmp_path)), None)
    assert report.status is StageStatus.SKIPPED and note in report.note and best is None


def test_a_published_tuner_is_never_overwritten(tmp_path):
    """Reuse is the runner's; the stage refuses to write over a published search."""
    run_dir = RunDirectory.create(str(tmp_path))
    with run_dir.stage(Artifact.TUNER) as staging:
        with open(os.path.join(staging, "best_hyperparameters.json"), "w") as f:
            json.dump({"space": [], "values": {"units": 4}}, f)
    with pytest.raises(PipelineError, match=r"Artifact 'tuner' already exists"):
        run_tuning_stage(PipelineConfig(module_file=TINY), run_dir, None)


def test_a_bad_resource_hint_is_refused(tmp_path):
    job = _job(tmp_path)
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 1, 1, "tiny")
    message = r"--tuner_min_ram 'lots' is not a valid Beam resource hint"
    with pytest.raises(PipelineError, match=message):
        RunTrials(job, oracle.next_round(), min_ram="lots")


SPACE = {
    "algorithm": "Bayesian",
    "objective": "val_sparse_categorical_accuracy",
    "direction": "max",
    "max_trials": 8,
    "seed": 42,
    "hyperparameters": {
        "learning_rate": {"type": "float", "min": 1e-4, "max": 1e-1, "log": True},
        "num_layers": {"type": "int", "min": 1, "max": 3},
        "units": {"type": "categorical", "values": [8, 16, 32]},
    },
}


def test_a_search_space_reads_from_config():
    space = SearchSpace.from_mapping(SPACE)
    assert space.algorithm is SearchAlgorithm.BAYESIAN and space.direction is Direction.MAX
    assert (space.objective, space.max_trials, space.seed) == (SPACE["objective"], 8, 42)
    assert space.parameters == (
        SearchParameter("learning_rate", ParameterType.FLOAT, min=1e-4, max=1e-1, log=True),
        SearchParameter("num_layers", ParameterType.INT, min=1, max=3),
        SearchParameter("units", ParameterType.CATEGORICAL, values=(8, 16, 32)),
    )
    hp = space.hyperparameters()
    configs = {p.name: p.get_config() for p in hp.space}
    assert configs["learning_rate"]["sampling"] == "log"
    assert (configs["num_layers"]["min_value"], configs["num_layers"]["max_value"]) == (1, 3)
    assert configs["units"]["values"] == [8, 16, 32]


def _with(hyperparameters=None, **top):
    """SPACE with top-level keys replaced and hyperparameters added or replaced."""
    data = {**SPACE, **top}
    if hyperparameters is not None:
        data["hyperparameters"] = {**SPACE["hyperparameters"], **hyperparameters}
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        (_with(budget=3), r"search_space has unknown key\(s\) \['budget'\]"),
        ({**SPACE, "hyperparameters": {}}, r"search_space.hyperparameters is missing or empty"),
        (_with(algorithm="annealing"), r"search_space.algorithm is 'annealing'; use one of"),
        (_with(max_trials=0), r"search_space.max_trials is 0; use a whole number"),
        (
            _with({"units": {"type": "choice", "values": [1]}}),
            r"hyperparameters.units.type is 'choice'; use one of: categorical, int, float",
        ),
        (
            _with({"units": {"type": "categorical"}}),
            r"hyperparameters.units.values is missing or empty",
        ),
        (
            _with({"num_layers": {"type": "int", "min": 3, "max": 1}}),
            r"hyperparameters.num_layers has min 3 above max 1; swap them",
        ),
        (
            _with({"num_layers": {"type": "int", "min": 1.5, "max": 3}}),
            r"hyperparameters.num_layers.min is 1.5; give a whole number",
        ),
        (
            _with({"learning_rate": {"type": "float", "min": 0, "max": 1, "log": True}}),
            r"hyperparameters.learning_rate samples log-uniformly from min 0; use a min above 0",
        ),
    ],
)
def test_a_bad_search_space_names_the_key(data, message):
    with pytest.raises(PipelineError, match=message):
        SearchSpace.from_mapping(data)


def test_a_search_space_needs_a_trainspec_module_and_no_tuner_fn(tmp_path):
    space = SearchSpace.from_mapping(SPACE)
    run_fn_module = tmp_path / "run_fn_module.py"
    run_fn_module.write_text("def run_fn(fn_args):\n    pass\n")
    job = dataclasses.replace(_job(tmp_path, module_file=str(run_fn_module)), search_space=space)
    with pytest.raises(PipelineError, match=r"trains with run_fn, not a TrainSpec subclass"):
        load_tuner(job, str(tmp_path))
    job = dataclasses.replace(_job(tmp_path), search_space=space)
    with pytest.raises(PipelineError, match=r"defines tuner_fn and the pipeline config declares"):
        load_tuner(job, str(tmp_path))


def test_trial_jobs_running_side_by_side_get_their_own_job_names():
    from apache_beam.options.pipeline_options import (
        DebugOptions,
        GoogleCloudOptions,
        StandardOptions,
    )

    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.stages.tuner.rolling import job_options

    named = parse_beam_args(["--runner=DataflowRunner", "--job_name=Penguin_Tuning"])
    renamed = job_options(named, "07")
    assert renamed.view_as(GoogleCloudOptions).job_name == "penguin-tuning-trial-07"
    assert renamed.view_as(StandardOptions).runner == "DataflowRunner"
    unnamed = parse_beam_args(["--runner=DataflowRunner", "--experiments=a", "--experiments=b"])
    own = job_options(unnamed, "07")  # a copy: each trial's job is built in its own thread
    assert own is not unnamed and own.view_as(GoogleCloudOptions).job_name is None
    # Beam names each job itself; the trial gets one worker VM to itself (one SDK process,
    # one harness thread), the rest is the search's options.
    one_worker = {
        "num_workers": 1,
        "max_num_workers": 1,
        "autoscaling_algorithm": "NONE",
        "number_of_worker_harness_threads": 1,
        "experiments": ["a", "b", "no_use_multiple_sdk_containers"],
    }
    assert own.get_all_options() == {**unnamed.get_all_options(), **one_worker}
    # A later job of the search: without the stager's `pip freeze` list of the launcher's
    # packages (the first job has it), through Beam's own experiment.
    later = job_options(unnamed, "08", first=False).view_as(DebugOptions).experiments
    assert later == [*one_worker["experiments"], "disable_logging_submission_environment"]
    assert unnamed.view_as(DebugOptions).experiments == ["a", "b"]


# A search job's worker loops (SearchLoop) on the oracle's shared state, in this process;
# the whole search job on the worker pool is tested in test_tuner_stage.py.


def test_a_trial_whose_lease_ran_out_is_reissued_and_counts_once(tmp_path):
    """A loop that stops renewing its lease (lost, or hung) loses its trial to the next
    loop that claims: same trial, same attempt; the old holder's late report is dropped
    and the new holder's run reuses the attempt's result file, so it counts once."""
    job = _job(tmp_path)
    driver = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 2, 2, "tiny")
    path = state_path(driver.project_dir)
    start_search_state(driver, path)
    runner = TrialRunner(job)
    lost = SearchLoop(job, path, runner, lease_seconds=-1)  # its leases end as they start
    taker = SearchLoop(job, path, runner)
    # The launcher asked each slot's first trial; each loop takes its own.
    spec = lost.claim(0, "lost-loop")
    first = taker.claim(1, "taker-loop")
    assert isinstance(spec, TrialSpec) and isinstance(first, TrialSpec)
    assert (spec.trial_id, first.trial_id) == ("0", "1")
    assert taker.report(first, runner.run(first), "taker-loop") is True
    again = taker.claim(1, "taker-loop")
    assert again == spec  # re-issued: the same trial and attempt
    result = runner.run(spec)  # the lost loop's run finished after all
    assert lost.report(spec, result, "lost-loop") is False  # dropped: no longer its trial
    rerun = runner.run(again)
    assert rerun.reused and rerun.seconds == result.seconds  # its result file, no training
    assert taker.report(again, rerun, "taker-loop") is True
    assert taker.claim(1, "taker-loop") is Claim.OVER
    state = read_state(path)
    assert state["done"] and state["reissued"] == 1 and state["dropped_reports"] == 1
    records = finished_driver(driver, state).records()
    assert [(r.trial_id, r.status.value, r.attempts) for r in records] == [
        ("0", "COMPLETED", 1),
        ("1", "COMPLETED", 1),
    ]


def test_a_search_job_on_one_worker_runs_every_slots_trials(tmp_path):
    """The runner may run the slots one after another (one worker): the first loop runs
    the other slot's first trial too once it has nothing new to ask, without waiting for
    that trial's lease to run out."""
    job = _job(tmp_path)
    driver = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 2, 3, "tiny")
    path = state_path(driver.project_dir)
    start_search_state(driver, path)  # trials 0 and 1 asked, one per slot
    results = list(SearchLoop(job, path, TrialRunner(job)).run(0))
    assert [r.trial_id for r in results] == ["0", "2", "1"]  # its own, a new one, slot 1's
    state = read_state(path)
    assert state["done"] and not state["leases"] and state["reissued"] == 0
    assert [r.status.value for r in finished_driver(driver, state).records()] == ["COMPLETED"] * 3


def test_eval_labels_the_train_split_lacks_stop_the_search_at_once_in_one_sentence(
    tmp_path, capsys
):
    """The data's fault, not a trial's: every trial would fail on it, so the first one's
    failure ends the search with the Trainer's sentence (not three failed trials and
    "Graph execution error"). tests/test_user_code.py has the Trainer's case."""
    from conftest import PENGUIN_DIR, one_sentence

    from beam_pipeline import cli

    with open(os.path.join(PENGUIN_DIR, "penguins.csv")) as f:
        lines = f.read().splitlines()
    data = tmp_path / "three.csv"  # the eval split's one species is not the train split's
    data.write_text("\n".join([lines[0], lines[1], lines[159], lines[299]]) + "\n")
    module = os.path.join(PENGUIN_DIR, "penguin_module.py")
    code = cli.main([
        f"--data={data}", "--csv_null_values=,NA", f"--module_file={module}",
        "--ignore_anomalies", "--no_infra_validator", "--train_steps=2", "--no_progress",
        f"--pipeline_root={tmp_path / 'root'}", "--run_id=three",
    ])  # fmt: skip
    sentence = one_sentence(capsys.readouterr().err)
    assert code == 2, sentence
    assert re.match(rf"Trial \d+'s fit in {re.escape(module)}", sentence), sentence
    assert sentence.endswith(
        "was given label -1, outside the model's 2 classes (TensorFlow: Received a label "
        "value of -1 which is outside the valid range of [0, 2)): the eval split holds a "
        "label value that no train row has, which the vocabulary tf.Transform builds from "
        "the train split maps to -1; give the train split rows of every label value (more "
        "rows: a data set this small splits unevenly) or drop the rare label's rows."
    ), sentence
    trials = os.path.join(tmp_path, "root", "runs", "three", ".staging")
    assert not glob.glob(os.path.join(trials, "*"))
