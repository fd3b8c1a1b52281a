"""The Tuner stage on the DirectRunner in multi_processing mode with two worker processes.

Real Beam, TensorFlow and keras-tuner on the penguin run directory; the module file is
``tests/testdata/tuner_module.py`` (the penguin model; ``--custom_config`` picks the tuner
and the failures). Trials run two at a time on two warm worker processes.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import conftest_trainer
import keras_tuner
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.config import PipelineConfig, TrainerConfig, TunerConfig, TunerSchedule
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import stage_module_file
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.stages.trainer.training import run_training_stage
from beam_pipeline.stages.tuner.trials import OBJECTIVE_PLOT, TRIALS_CSV, TRIALS_JSON
from beam_pipeline.stages.tuner.tuning import (
    BEST_HYPERPARAMETERS_FILE,
    build_tuning_job,
    default_schedule,
    run_tuning_stage,
    with_schedule,
)
from trainer import load_hyperparameters
from trainer.tuning import (
    OracleDriver,
    SearchSpace,
    load_tuner,
)
from trainer.tuning.shared_state import open_shared_state
from transforms.tuner import RunTrials

penguin_run_dir = conftest_trainer.penguin_run_dir

MODULE = os.path.join(os.path.dirname(__file__), "testdata", "tuner_module.py")
OPTIONS = ["--runner=DirectRunner", "--direct_running_mode=multi_processing"]
TWO_WORKERS = parse_beam_args([*OPTIONS, "--direct_num_workers=2"])

ACCELERATOR = "type:nvidia-l4;count:1;install-nvidia-driver"
DATAFLOW_DRY_RUN = [
    # Placeholders: --dry_run builds the job without credentials (bucket names need 3+
    # characters, or Beam goes looking for a default bucket online).
    "--runner=DataflowRunner",
    "--dry_run=True",
    "--project=placeholder-project",
    "--region=us-central1",
    "--temp_location=gs://placeholder-bucket/tmp",
]

pytestmark = pytest.mark.slow


def _config(
    max_trials=None, parallel=2, schedule=TunerSchedule.ROLLING, **custom
) -> PipelineConfig:
    return PipelineConfig(
        module_file=MODULE,
        tuner=TunerConfig(
            parallel_trials=parallel,
            schedule=schedule,
            max_trials=max_trials,
            train_steps=5,
            eval_steps=2,
        ),
        trainer=TrainerConfig(train_steps=5, eval_steps=2, custom_config=json.dumps(custom)),
    )


def _trials(run_dir) -> list[dict]:
    with open(run_dir.path(Artifact.TUNER, TRIALS_JSON)) as f:
        return json.load(f)["trials"]


def _best(run_dir) -> dict:
    with open(run_dir.path(Artifact.TUNER, BEST_HYPERPARAMETERS_FILE)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def pool():
    """Two warm worker processes shared by the searches of this file.

    (The stage making and stopping its own pool is tested in test_worker_errors.py.)
    """
    with LocalWorkerPool(2, threads_per_worker=1) as warm:
        yield warm


_UNGUARDED_SCRIPT = """
import json, os, sys
from beam_pipeline.runtime.pool import LocalWorkerPool

with open(sys.argv[1], "a") as f:  # once per run of this file's top level
    f.write(f"{os.getpid()}\\n")
pool = LocalWorkerPool(2, threads_per_worker=1).start()
pool.wait_ready()
ppids = [int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) for p in pool.pids]
print(json.dumps({"launcher": os.getpid(), "ppids": ppids, "tf": "tensorflow" in sys.modules}))
# No pool.close(): the pool's processes must still stop when the script ends.
"""


def test_pool_processes_fork_from_one_server_and_a_script_without_a_main_guard_runs_once(
    tmp_path,
):
    """The pool's processes are forks of one server that imported the ML stack (not of the
    launcher, which never imports TensorFlow for them); the launcher's script is not run
    again in them (multiprocessing would); and a script that never closes its pool exits."""
    script, marker = tmp_path / "user_script.py", tmp_path / "ran"
    script.write_text(_UNGUARDED_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(marker)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert marker.read_text().split() == [str(facts["launcher"])]
    assert len(set(facts["ppids"])) == 1 and facts["ppids"][0] != facts["launcher"]
    assert facts["tf"] is False


@pytest.fixture(scope="module")
def tuned(penguin_run_dir, pool, tmp_path_factory):
    """A rolling random search of 4 trials, 2 at a time, read by several tests.

    Trial 0 or 1 is slow: it waits until the three others have started (120 s at most), so
    what runs meanwhile does not depend on how fast a loaded machine starts them. Each
    trial prints 200 KB (a worker whose output nobody reads must not block). The options
    record the threads that read them.
    """
    folder = tmp_path_factory.mktemp("tuned")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(folder / "root"))
    slow = {"marker": str(folder / "slow"), "seconds": 120, "until_started": 3}
    config = _config(max_trials=4, seed=3, slow_once=slow, print_kb=200)
    options = _ThreadRecordingOptions([*OPTIONS, "--direct_num_workers=2"])
    report, best = run_tuning_stage(config, run_dir, options, worker_pool=pool)
    return config, run_dir, report, best, options


@pytest.fixture
def run_dir(penguin_run_dir, tmp_path):
    return conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))


def _running_at_once(trials: list[dict]) -> int:
    """The most trials whose [started, started + seconds] intervals overlap at one time."""
    return max(
        sum(u["started"] <= t["started"] < u["started"] + u["seconds"] for u in trials)
        for t in trials
    )


def _slow_trial_held_up_only_its_own_worker(trials: list[dict]) -> None:
    """Trials 2 and 3 ran on the other worker while the slow one (0 or 1) waited for them:
    it did not wait out its 120 s (which it would, had they waited for it)."""
    first, later = trials[:2], trials[2:]
    slowest = max(first, key=lambda t: t["seconds"])
    assert slowest["seconds"] < 120
    assert all(t["started"] < slowest["started"] + slowest["seconds"] for t in later)
    assert {t["worker"] for t in later} == {next(t for t in first if t is not slowest)["worker"]}


def test_trials_run_two_at_a_time_in_two_worker_processes(tuned):
    """Rolling: a slow trial holds up only its own worker; the freed one gets the next."""
    _, run_dir, report, _, options = tuned
    trials = _trials(run_dir)
    assert report.status is StageStatus.OK
    assert [t["status"] for t in trials] == ["COMPLETED"] * 4
    # Rolling: the first two trials are asked together, then one per freed worker.
    assert [t["round"] for t in trials] == [0, 0, 1, 2]
    assert _running_at_once(trials) == 2
    _slow_trial_held_up_only_its_own_worker(trials)
    workers = {t["worker"] for t in trials}
    assert len(workers) == 2 and f"{os.uname().nodename}:{os.getpid()}" not in workers
    assert trials[0]["worker"] != trials[1]["worker"]
    assert report.details["schedule"] == "rolling" and report.details["local_pool_workers"] == 2
    assert set(report.details["trial_job_seconds"]) == {"0", "1", "2", "3"}
    assert report.details["counters"]["tuner.trials_run"] == 4
    assert report.details["counters"]["tuner.trials_completed"] == 4
    # Trial jobs are built in threads of their own, from copies made in the caller's thread.
    assert options.readers == {threading.current_thread().name}


def test_in_rounds_a_slow_trial_holds_up_the_next_round_and_the_seed_gives_the_same_trials(
    run_dir, pool, tmp_path, tuned
):
    """Rounds: the next round waits for the slow trial (it cannot start before it ends, so
    the trial sleeps a fixed 3 s). The same seed as ``tuned`` gives the same trials on
    this rerun, whatever the schedule."""
    config = _config(
        max_trials=4,
        schedule=TunerSchedule.ROUNDS,
        seed=3,
        slow_once={"marker": str(tmp_path / "slow"), "seconds": 3},
    )
    options = _ThreadRecordingOptions([*OPTIONS, "--direct_num_workers=2"])
    report, _ = run_tuning_stage(config, run_dir, options, worker_pool=pool)
    trials = _trials(run_dir)
    assert [t["status"] for t in trials] == ["COMPLETED"] * 4
    assert report.details["schedule"] == "rounds"
    slowest = max(trials[:2], key=lambda t: t["seconds"])
    assert slowest["seconds"] >= 3
    assert all(t["started"] >= slowest["started"] + slowest["seconds"] for t in trials[2:])
    assert [t["round"] for t in trials] == [0, 0, 1, 1]
    assert report.details["round_seconds"][0] >= 3
    assert options.readers == {threading.current_thread().name}
    seeded = [t["hyperparameters"] for t in _trials(tuned[1])]
    assert [t["hyperparameters"] for t in trials] == seeded


@pytest.mark.parametrize(
    "trainer",
    [{"custom_config": '{"epochs": 3}'}, {"entry_point": "Spec"}, {"mixed_precision": True}],
)
def test_the_trainer_settings_the_trials_run_with_are_in_the_tuners_cache_key(trainer):
    # A search run with another --custom_config (which tuner_fn reads), entry point or
    # precision is another search: a later run must not reuse it.
    from beam_pipeline.engine.manifest import run_identity
    from beam_pipeline.engine.stage import StageContext
    from beam_pipeline.stages.tuner.stage import TunerStage

    def key(**settings):
        config = PipelineConfig(module_file="m.py", trainer=TrainerConfig(**settings))
        identity = run_identity(config, "data", "digest")  # as the run records it
        ctx = StageContext(config, None, None, identity, module_digest="digest")
        return TunerStage().key_parameters(ctx)

    assert key() == key()
    assert key(**trainer) != key()


def test_best_hyperparameters_are_the_best_completed_trials(tuned):
    _, run_dir, report, best_path, _ = tuned
    assert best_path == run_dir.path(Artifact.TUNER, BEST_HYPERPARAMETERS_FILE)
    best_trial = max(_trials(run_dir), key=lambda t: t["objective"])
    best = _best(run_dir)
    assert best["values"] == best_trial["hyperparameters"]
    assert keras_tuner.HyperParameters.from_config(best).values == best_trial["hyperparameters"]
    assert load_hyperparameters(best_path) == best
    assert report.details["best_trial"] == best_trial["trial_id"]
    assert report.details["best_hyperparameters"] == best_trial["hyperparameters"]


def test_artifacts_and_report(tuned):
    _, run_dir, report, _, _ = tuned
    tuner_dir = run_dir.path(Artifact.TUNER)
    assert run_dir.is_published(Artifact.TUNER) and report.artifact == tuner_dir
    with open(os.path.join(tuner_dir, TRIALS_CSV)) as f:
        rows = list(csv.DictReader(f))
    assert [r["trial_id"] for r in rows] == ["0", "1", "2", "3"]
    assert {"objective", "learning_rate", "num_layers", "seconds", "worker"} <= set(rows[0])
    with open(os.path.join(tuner_dir, OBJECTIVE_PLOT), encoding="utf-8") as f:
        plot = f.read()
    # The 4 trials and the best so far: two polylines of 4 points each.
    assert plot.startswith('<svg class="bp-curve"') and plot.count("<polyline ") == 2
    assert all(len(p.split()) == 4 for p in re.findall(r'points="([^"]*)"', plot)), plot
    assert os.path.exists(os.path.join(tuner_dir, "test_tuning", "oracle.json"))
    assert report.note.startswith(
        "4 trials (4 completed, 0 failed) 2 at a time (rolling) on 2 worker"
    )
    head = report.details["table_head"].splitlines()
    assert head[0].split()[:3] == ["trial", "status", "val_sparse_categorical_accuracy"]
    assert head[1].split()[0] == report.details["best_trial"]


def test_the_trainer_receives_the_best_hyperparameters(tuned):
    config, run_dir, _, best_path, _ = tuned
    report = run_training_stage(
        config, run_dir, parse_beam_args(["--runner=DirectRunner"]), best_path
    )
    assert report.status is StageStatus.OK
    with open(run_dir.path(Artifact.MODEL_RUN, "received_hyperparameters.json")) as f:
        assert json.load(f) == _best(run_dir)


def test_a_second_search_into_a_published_tuner_is_refused(tuned):
    """Reuse is the runner's (a rerun finds the execution in the store or the manifest and
    reports it cached: test_resume, test_cli_runs); the stage itself never overwrites a
    published search."""
    config, run_dir, _, best_path, _ = tuned
    with pytest.raises(PipelineError, match=r"Artifact 'tuner' already exists in run directory"):
        run_tuning_stage(config, run_dir, TWO_WORKERS)
    assert os.path.exists(best_path)


@pytest.mark.parametrize(
    "custom, trials, failed",
    [
        # max_epochs=2, factor=2: brackets of 3 and 2 trials
        ({"tuner": "hyperband"}, 5, 0),
        ({"tuner": "bayesian", "max_trials": 3}, 3, 0),
        ({"tuner": "grid", "fail_on": {"num_layers": 3}}, 3, 1),
    ],
)
def test_oracles_complete_their_searches(run_dir, pool, tmp_path, custom, trials, failed):
    """In a search job, the workers load the oracle's state (its attributes, GridSearch's
    ordered trial list among them) into their own oracle for every ask and report: each
    oracle's state must come through. (Rolling and rounds keep the oracle in the launcher,
    as test_tuner.py's in-process searches do, Hyperband's asked rolling among them.)"""
    schedule = TunerSchedule.SEARCH_JOB
    # Each loop claims once its worker is up: the first trial waits (120 s at most)
    # until another has started, so both workers run trials however loaded the machine.
    custom = {**custom, "slow_once": _wait_for_another_trial(tmp_path)}
    config = _config(schedule=schedule, **custom)
    report, best = run_tuning_stage(config, run_dir, TWO_WORKERS, worker_pool=pool)
    rows = _trials(run_dir)
    assert report.status is StageStatus.OK and best is not None
    assert report.details["schedule"] == schedule.value
    assert len(rows) == trials
    assert [r["status"] for r in rows].count("FAILED") == failed
    assert len({r["worker"] for r in rows}) == 2
    for r in rows:
        if r["status"] == "FAILED":
            assert r["hyperparameters"]["num_layers"] == 3
            assert r["error"].startswith("ValueError: this model cannot be built with")
            assert "tuner_module.py:" in r["error"]
        if "tuner/trial_id" in r["hyperparameters"]:  # Hyperband's resumed trial
            parent = r["hyperparameters"]["tuner/trial_id"]
            assert r["status"] == "COMPLETED"
            assert next(p for p in rows if p["trial_id"] == parent)["round"] < r["round"]
    if custom["tuner"] == "hyperband":
        assert any("tuner/trial_id" in r["hyperparameters"] for r in rows)


def test_a_search_job_whose_trials_all_fail_stops_with_a_clear_error(run_dir, pool):
    """(Rolling: the next test, whose search stops the same way and is checked the same.)"""
    config = _config(max_trials=4, schedule=TunerSchedule.SEARCH_JOB, fail_all=True)
    message = r"Tuning stopped: 3 trials in a row failed .* RuntimeError: training diverged"
    with pytest.raises(PipelineError, match=message):
        run_tuning_stage(config, run_dir, TWO_WORKERS, worker_pool=pool)
    assert not os.path.exists(run_dir.path(Artifact.TUNER))
    assert os.listdir(os.path.join(run_dir.root, ".staging")) == []


def test_a_rolling_search_that_stops_kills_the_trial_still_running_before_it_cleans_up(
    run_dir, pool, tmp_path
):
    """Three trials fail while the other slot's first trial waits (60 s): the search stops
    on the third failure; that trial's process is killed (and replaced) instead of
    training on and writing into the staging folder the stage deletes. (It was left to
    run: the delete then raced with its writes, and once failed with "directory not
    empty" over the error the user must read.)"""
    marker = str(tmp_path / "slow")
    config = _config(max_trials=6, fail_all=True, slow_once={"marker": marker, "seconds": 60})
    pids = pool.pids
    message = r"Tuning stopped: 3 trials in a row failed .* RuntimeError: training diverged"
    with pytest.raises(PipelineError, match=message):
        run_tuning_stage(config, run_dir, TWO_WORKERS, worker_pool=pool)
    assert os.path.exists(marker)  # the slow trial was running when the search stopped
    assert sum(a != b for a, b in zip(pids, pool.pids)) == 1  # its process, killed
    pool.wait_ready()  # and replaced: the pool serves the next search
    time.sleep(1.0)  # nothing writes into the deleted staging folder afterwards
    assert not os.path.exists(run_dir.path(Artifact.TUNER))
    assert os.listdir(os.path.join(run_dir.root, ".staging")) == []


class _ThreadRecordingOptions(PipelineOptions):
    """Pipeline options that record which threads read or copy them (this object only).

    Beam's PipelineOptions are not thread-safe: ``view_as`` fills the shared option dict
    lazily while a ``beam.Pipeline`` deep-copies it, and two jobs built at once from one
    options object can come out with the DirectRunner instead of the runner asked for.
    """

    def __init__(self, flags):
        super().__init__(flags)
        object.__setattr__(self, "readers", set())  # PipelineOptions takes options only

    def _record(self):
        self.__dict__["readers"].add(threading.current_thread().name)

    def view_as(self, cls):
        self._record()
        return super().view_as(cls)

    def get_all_options(self, *args, **kwargs):
        self._record()
        return super().get_all_options(*args, **kwargs)

    def __deepcopy__(self, memo):
        self._record()
        copy = PipelineOptions(self._flags)
        memo[id(self)] = copy
        return copy


# The abandoned job's gRPC reader threads raise when its worker process dies.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("schedule", [TunerSchedule.ROLLING, TunerSchedule.SEARCH_JOB])
def test_a_lost_worker_process_is_replaced_and_no_trial_counts_twice(
    run_dir, pool, tmp_path, schedule
):
    """Rolling reruns the trial's job; a search job gives the lost process's slot a job on
    the new process, whose loop takes the slot's trial back (same attempt)."""
    marker = str(tmp_path / "exited-once")
    restarts = pool.restarts
    config = _config(max_trials=2, schedule=schedule, exit_once=marker)
    report, _ = run_tuning_stage(config, run_dir, TWO_WORKERS, worker_pool=pool)
    rows = _trials(run_dir)
    assert os.path.exists(marker) and pool.restarts == restarts + 1
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert [r["attempts"] for r in rows] == [1, 1]
    assert report.details["worker_restarts"] == restarts + 1
    assert os.path.exists(run_dir.path(Artifact.TUNER, PUBLISHED_MARKER))
    if schedule is TunerSchedule.SEARCH_JOB:  # the search's job, and the slot's own
        assert report.details["jobs"] == 2 and report.details["reissued"] == 1


def test_trials_import_the_helper_modules_staged_with_the_module(run_dir, pool, tmp_path):
    """The module's code lives in a helper module beside it (TFX's penguin example does
    so); once staged, the user's folder is deleted: the pool's worker processes (and the
    launcher's oracle) import the helper from the staged archive of the module's folder."""
    folder = tmp_path / "user"
    folder.mkdir()
    shutil.copy(MODULE, folder / "pool_tuning_helpers.py")
    module = folder / "uses_helpers.py"
    module.write_text("from pool_tuning_helpers import run_fn, tuner_fn  # noqa: F401\n")
    staged = stage_module_file(str(module), run_dir.root)
    shutil.rmtree(folder)
    config = dataclasses.replace(_config(max_trials=2), module_file=str(module))
    report, best = run_tuning_stage(config, run_dir, TWO_WORKERS, worker_pool=pool, staged=staged)
    rows = _trials(run_dir)
    assert report.status is StageStatus.OK and best is not None, report.note
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"], rows
    assert f"{os.uname().nodename}:{os.getpid()}" not in {r["worker"] for r in rows}


def test_in_memory_mode_runs_the_trials_one_at_a_time_outside_the_launching_process(run_dir):
    # A trial is the user's code: an exit call in it must end a pool process, not the run.
    options = parse_beam_args(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    report, best = run_tuning_stage(_config(max_trials=2), run_dir, options)
    rows = _trials(run_dir)
    assert report.status is StageStatus.OK and best is not None
    assert report.details["local_pool_workers"] == 1
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert f"{os.uname().nodename}:{os.getpid()}" not in {r["worker"] for r in rows}


def test_dataflow_job_graph_puts_the_hints_on_the_trial_step_only(run_dir):
    config = _config(max_trials=2)
    job = build_tuning_job(config, run_dir, MODULE, str(run_dir.path(Artifact.TUNER)))
    specs = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 2).next_round()
    p = create_pipeline(parse_beam_args(DATAFLOW_DRY_RUN))
    _ = p | "RunTrials" >> RunTrials(job, specs, accelerator=ACCELERATOR, min_ram="16GB")
    p.run().wait_until_finish()  # dry run: the job is built, nothing is submitted
    for proto in (p.to_runner_api(), p.runner.proto_pipeline):  # ours, and what Dataflow gets
        hints = conftest_trainer.step_hints(proto)
        assert hints["RunTrials/RunTrial"] == {
            "beam:resources:accelerator:v1": ACCELERATOR.encode(),
            "beam:resources:min_ram_bytes:v1": b"16000000000",
        }
        others = {name: h for name, h in hints.items() if name != "RunTrials/RunTrial"}
        assert others and all(h == {} for h in others.values()), others


def test_a_dataflow_dry_run_of_a_rolling_search_builds_the_first_round_only(run_dir):
    options = parse_beam_args(DATAFLOW_DRY_RUN)
    report, best = run_tuning_stage(_config(max_trials=2), run_dir, options)
    assert report.status is StageStatus.SKIPPED
    assert report.note == (
        "dry run: the first round's job graph (2 trials) built only; rolling runs a job per trial"
    )
    assert best is None and not os.path.exists(run_dir.path(Artifact.TUNER))


def test_on_dataflow_a_search_without_a_schedule_is_one_search_job(run_dir):
    """Left unset, the schedule is Dataflow's default: the whole search one job, not a job
    (and its workers' start-up) per trial."""
    options = parse_beam_args(DATAFLOW_DRY_RUN)
    report, best = run_tuning_stage(_config(max_trials=4, schedule=None), run_dir, options)
    assert report.status is StageStatus.SKIPPED and best is None
    assert report.note == "dry run: the whole search is 1 job of 2 worker loops; built only"


_PORTABLE = ["--runner=PortableRunner", "--environment_type=EXTERNAL"]


@pytest.mark.parametrize(
    "args, root, expected",
    [
        (["--runner=DirectRunner"], "runs", TunerSchedule.ROLLING),
        (["--runner=DirectRunner", "--direct_running_mode=in_memory"], "runs", "rolling"),
        (DATAFLOW_DRY_RUN, "gs://bucket/runs", TunerSchedule.SEARCH_JOB),
        (["--runner=FlinkRunner", "--flink_master=host:8081"], "/shared/runs", "search_job"),
        (["--runner=SparkRunner"], "gs://bucket/runs", "search_job"),
        ([*_PORTABLE, "--job_endpoint=host:8099"], "gs://bucket/runs", "search_job"),
        # The embedded job service gives a job one worker process: loops would take turns.
        ([*_PORTABLE, "--job_endpoint=embed"], "runs", "rolling"),
        # No compare-and-swap store for the search job's state on hdfs://.
        (["--runner=FlinkRunner"], "hdfs://nn/runs", "rolling"),
    ],
)
def test_the_default_schedule_is_one_search_job_where_each_job_starts_workers(args, root, expected):
    options = parse_beam_args(args)
    assert default_schedule(options, root) is TunerSchedule(expected)
    config = dataclasses.replace(_config(schedule=None), pipeline_root=root)
    assert with_schedule(config, options).tuner.schedule is TunerSchedule(expected)
    # A schedule given is kept on every runner.
    given = dataclasses.replace(_config(schedule=TunerSchedule.ROUNDS), pipeline_root=root)
    assert with_schedule(given, options) is given


def test_a_dataflow_dry_run_of_a_search_job_builds_the_whole_search_as_one_job(run_dir):
    config = _config(max_trials=6, parallel=3, schedule=TunerSchedule.SEARCH_JOB)
    report, best = run_tuning_stage(config, run_dir, parse_beam_args(DATAFLOW_DRY_RUN))
    assert report.status is StageStatus.SKIPPED and best is None
    assert report.note == "dry run: the whole search is 1 job of 3 worker loops; built only"
    assert not os.path.exists(run_dir.path(Artifact.TUNER))


def test_a_config_search_space_tunes_a_trainspec_without_tuner_fn(run_dir, pool):
    module = os.path.join(os.path.dirname(__file__), "testdata", "spec_tuner_module.py")
    space = SearchSpace.from_mapping(
        {
            "algorithm": "random",
            "objective": "val_sparse_categorical_accuracy",
            "direction": "max",
            "max_trials": 2,
            "seed": 3,
            "hyperparameters": {
                "learning_rate": {"type": "float", "min": 1e-3, "max": 1e-1, "log": True},
                "num_layers": {"type": "int", "min": 1, "max": 2},
            },
        }
    )
    config = dataclasses.replace(_config(), module_file=module)
    report, best_path = run_tuning_stage(
        config, run_dir, TWO_WORKERS, worker_pool=pool, search_space=space
    )
    rows = _trials(run_dir)
    assert report.status is StageStatus.OK
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert len({r["worker"] for r in rows}) == 2
    best = _best(run_dir)
    # The spec's default that the space does not search stays fixed in every trial.
    assert all(r["hyperparameters"]["units"] == 8 for r in rows)
    assert set(best["values"]) == {"learning_rate", "num_layers", "units"}
    # The trainer's TrainSpec runner builds its model with them.
    options = parse_beam_args(["--runner=DirectRunner"])
    assert run_training_stage(config, run_dir, options, best_path).status is StageStatus.OK
    with open(run_dir.path(Artifact.MODEL_RUN, "spec_hyperparameters.json")) as f:
        assert json.load(f) == best["values"]


def _wait_for_another_trial(tmp_path) -> dict:
    return {"marker": str(tmp_path / "wait"), "seconds": 120, "until_started": 1}


def test_a_search_job_runs_the_whole_search_as_one_job(run_dir, pool, tmp_path):
    """search_job: one job, a loop per worker process; each claims, runs and reports trials
    on the oracle's state in the run's storage until the oracle is done."""
    slow = {"marker": str(tmp_path / "slow"), "seconds": 120, "until_started": 3}
    # Trial 0 or 1 waits until the three others have started: a slow trial holds up only
    # its own loop, the other loop claims and runs the rest meanwhile.
    config = _config(max_trials=4, schedule=TunerSchedule.SEARCH_JOB, seed=3, slow_once=slow)
    options = _ThreadRecordingOptions([*OPTIONS, "--direct_num_workers=2"])
    report, best = run_tuning_stage(config, run_dir, options, worker_pool=pool)
    trials = _trials(run_dir)
    _slow_trial_held_up_only_its_own_worker(trials)
    assert options.readers == {threading.current_thread().name}
    assert report.status is StageStatus.OK and best is not None
    assert [t["status"] for t in trials] == ["COMPLETED"] * 4
    assert report.details["schedule"] == "search_job" and report.details["jobs"] == 1
    # The launcher asks each slot's first trial, then each claim asks for one.
    assert [t["round"] for t in trials] == [0, 0, 1, 2]
    assert _running_at_once(trials) == 2
    assert len({t["worker"] for t in trials}) == 2
    assert f"{os.uname().nodename}:{os.getpid()}" not in {t["worker"] for t in trials}
    assert report.details["counters"]["tuner.trials_completed"] == 4
    assert set(report.details["trial_job_seconds"]) == {"0", "1", "2", "3"}
    assert report.note.startswith("4 trials (4 completed, 0 failed) 2 at a time (search_job: 1 job")
    with open(run_dir.path(Artifact.TUNER, "test_tuning", "beam_search_state.json")) as f:
        state = json.load(f)
    assert state["done"] and not state["leases"] and state["stopped"] is None


def test_a_search_job_state_has_a_compare_and_swap_store_locally_only_or_on_gcs(tmp_path):
    """Local: a lock file makes read-change-write atomic across processes (here: threads of
    one, each with its own store object, each increment a separate locked update)."""
    path = str(tmp_path / "state.json")
    open_shared_state(path).create({"n": 0})

    def add(times: int) -> None:
        store = open_shared_state(path)
        for _ in range(times):
            store.update(lambda doc: ({"n": doc["n"] + 1}, None))

    threads = [threading.Thread(target=add, args=(50,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert open_shared_state(path).read() == {"n": 200}
    with pytest.raises(PipelineError, match=r"local path or gs://, not s3:// .* --tuner_schedule"):
        open_shared_state("s3://bucket/run/tuner/project/beam_search_state.json")
