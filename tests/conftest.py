"""Shared test helpers: pipelines on the real DirectRunner and readers of artifacts."""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(REPO, "tests", "testdata")
PENGUIN_DIR = os.path.join(REPO, "beam_pipeline", "examples", "penguin")
# The bundled penguins.csv's columns.
PENGUIN_FEATURES = (
    "species",
    "island",
    "bill_length_mm",
    "bill_depth_mm",
    "flipper_length_mm",
    "body_mass_g",
    "sex",
    "year",
)


def make_pipeline(*beam_args: str):
    """A Beam pipeline on the DirectRunner (FnApiRunner, no Prism attempt)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.runtime.options import create_pipeline

    return create_pipeline(PipelineOptions(list(beam_args)))


def fn_api_pipeline(*flags: str):
    """A TestPipeline on Beam's FnApiRunner (the DirectRunner minus its Prism attempt),
    with ``flags`` as its options (``--direct_running_mode``, ``--direct_num_workers``)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.testing import test_pipeline

    options = PipelineOptions(list(flags))
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return test_pipeline.TestPipeline(
        runner=fn_runner.FnApiRunner(provision_info=provision), options=options
    )


def statistics_in_process(
    batches,
    name: str = "train",
    *,
    num_top_values: int = 20,
    num_quantiles: int = 10,
    num_histogram_buckets: int = 10,
    num_rank_histogram_buckets: int = 1000,
):
    """GenerateStatistics' steps applied in-process, in the order its Beam graph runs them:
    the statistics CombineFn over all batches; the per-batch value counts summed per
    (feature, value); the top values CombineFn per feature; the two joined. (For unit
    tests of what the statistics say; tests/test_statistics.py runs the transform itself
    on Beam.)"""
    import collections

    from transforms import statistics as st
    from transforms import top_values as tv

    fn = st.StatisticsCombineFn(name, num_quantiles, num_histogram_buckets)
    acc = fn.create_accumulator()
    counts = collections.Counter()
    for batch in batches:
        acc = fn.add_input(acc, batch)
        for key, count in tv.string_value_counts(batch):
            counts[key] += count
    top_fn = tv.TopValuesCombineFn(max(num_top_values, num_rank_histogram_buckets))
    per_feature = {}
    for key, count in counts.items():
        feature, pair = tv.by_feature(key, count)
        per_feature[feature] = top_fn.add_input(
            per_feature.get(feature) or top_fn.create_accumulator(), pair
        )
    top = {feature: top_fn.extract_output(a) for feature, a in per_feature.items()}
    return tv.add_top_values(
        fn.extract_output(acc), top, num_top_values, num_rank_histogram_buckets
    )


def read_examples(pattern: str) -> list:
    """All tf.train.Examples in the gzip TFRecord files matching ``pattern``."""
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, f"no files match {pattern}"
    out = []
    for f in files:
        for record in tf.data.TFRecordDataset(f, compression_type="GZIP"):
            out.append(tf.train.Example.FromString(record.numpy()))
    return out


def feature_value(example, name: str):
    """The single value of ``name`` in ``example`` (None if missing)."""
    f = example.features.feature.get(name)
    if f is None:
        return None
    kind = f.WhichOneof("kind")
    values = list(getattr(f, kind).value) if kind else []
    return values[0] if values else None


# Test files by the test-seconds they took in a whole suite run (pytest-xdist's three
# processes on a 2-core machine; junit XML times, setup included), longest first: the order
# below. Only the order depends on these figures: stale ones cost balance, never a result;
# but a long file missing here runs after all of these and holds its process to the end.
_FILE_SECONDS = {
    "test_user_code.py": 93,
    "test_trainer_multiworker.py": 87,
    "test_tuner_stage.py": 83,
    "test_cached_rerun.py": 82,
    "test_continuous_training.py": 81,
    "test_cli_runs.py": 72,
    "test_spans.py": 69,
    "test_damaged_artifacts.py": 64,
    "test_metadata_server.py": 61,
    "test_interrupted_runs.py": 58,
    "test_gpu_env.py": 56,
    "test_tfx_portable.py": 48,
    "test_user_code_staging.py": 47,
    "test_docs.py": 45,
    "test_tuner_early_stopping.py": 43,
    "test_cli_trust.py": 42,
    "test_evaluator_defaults.py": 42,
    "test_stage_switches.py": 37,
    "test_tfx_modules.py": 36,
    "test_unclear_endings.py": 35,
    "test_runners.py": 34,
    "test_evaluator_kinds.py": 31,
    "test_tuner.py": 31,
    "test_trainer_stage.py": 30,
    "test_resume.py": 30,
    "test_cli.py": 30,
    "test_csv_ranges.py": 27,
    "test_stage_declarations.py": 27,
    "test_evaluator.py": 26,
    "test_python_api_output.py": 23,
    "test_parallel_stages.py": 22,
    "test_watchdog.py": 21,
    "test_runs_commands.py": 20,
    "test_trainer_distributed.py": 19,
    "test_transform_vocabulary.py": 17,
    "test_example_gen.py": 16,
    "test_history_columns.py": 14,
    "test_mixed_precision.py": 14,
    "test_metadata_secrets.py": 13,
    "test_trainer_resume.py": 12,
    "test_worker_errors.py": 12,
    "test_exact_string_stats.py": 10,
    "test_trainer_data.py": 9,
    "test_drift.py": 9,
    "test_ci_services.py": 8,
    "test_tfrecords.py": 8,
    "test_bad_tfrecords.py": 7,
}


def pytest_sessionstart(session):
    """In a pytest-xdist process, before any test: the fork server of the DirectRunner's
    pool and of the runs' user code, forked from this process while it has one thread
    (beam_pipeline.core.forked.warm_fork_server). A test's run started it later, when
    Beam's thread pools of an earlier test were still alive: a fresh interpreter that
    imported the ML stack a second time. (Only in pytest-xdist's processes: a run of one
    light test file in one process does not import the stack for nothing.)"""
    # (workerinput, not the PYTEST_XDIST_WORKER variable: a pytest that a test starts
    # inherits the variable.)
    if hasattr(session.config, "workerinput"):
        from beam_pipeline.core.forked import warm_fork_server

        warm_fork_server()


def pytest_collection_modifyitems(items):
    """Orders the tests by file, longest file first (see _FILE_SECONDS); stable within.

    pytest.ini runs ``--dist loadfile --no-loadscope-reorder``: pytest-xdist hands each
    process one file at a time in collection order, so the longest files start first and
    the short ones fill in at the end (longest-processing-time-first scheduling).
    (``--dist loadgroup`` with xdist_group marks, to spread a long file's tests over the
    processes, groups nothing with pytest 9.2 and pytest-xdist 3.8: xdist marks a group
    in ``item._nodeid``, which pytest 9 no longer reads; pytest-xdist issue 1386.)
    """
    items.sort(key=lambda item: -_FILE_SECONDS.get(os.path.basename(str(item.fspath)), 0))


@pytest.fixture
def tmp_root(tmp_path):
    return str(tmp_path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def worker_pool_process(argv, log_path, env=None, cwd=None):
    """A worker-pool process (Beam's, ours, or a test's), its output in ``log_path``.

    Waits until something listens on the port given as ``--service_port=N`` (or as the last
    argument) and yields the Popen; the pool and its workers (its own process group) are
    stopped afterwards.
    """
    port = next((a.split("=", 1)[1] for a in argv if a.startswith("--service_port=")), argv[-1])
    with open(log_path, "wb") as log:
        pool = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the pool and its workers
        )
    try:
        deadline = time.time() + 120
        while True:
            assert pool.poll() is None, open(log_path).read()[-3000:]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                if s.connect_ex(("127.0.0.1", int(port))) == 0:
                    break
            assert time.time() < deadline, "the worker pool did not start in 120 s"
            time.sleep(0.2)
        yield pool
    finally:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(pool.pid, sig)  # the group this helper created, by its id
            except ProcessLookupError:
                break
            try:
                pool.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


def readme_portable_commands() -> tuple[list[str], list[str]]:
    """The docs' two portable-runner commands (pool, run), as argument lists: the runners
    page's "Portable runner" section, which the README links to."""
    with open(os.path.join(REPO, "docs", "runners.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## Portable runner", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    pool_line, *run_lines = block.replace("\\\n", " ").strip().splitlines()
    assert len(run_lines) == 1, block
    return shlex.split(pool_line), shlex.split(run_lines[0])


@pytest.fixture(scope="module")
def readme_worker_pool(tmp_path_factory):
    """The docs' worker pool, started exactly as written, as a user would without the venv.

    From the repository's root, with a PATH that does not lead to the venv and no
    PYTHONPATH; only the port is replaced by a free one. Yields ``(address, log path,
    the README's run command with that port)``; the pool and its workers are stopped
    afterwards.
    """
    pool, run = readme_portable_commands()
    assert pool[-1] == "&" and pool[0] == run[0] == ".venv/bin/python", (pool, run)
    assert run[1:3] == ["-m", "beam_pipeline"], run
    port = str(free_port())
    pool = [a.replace("50000", port) for a in pool[:-1]]
    run = [a.replace("50000", port) for a in run]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PATH="/usr/bin:/bin", TF_CPP_MIN_LOG_LEVEL="2")
    log_path = tmp_path_factory.mktemp("worker_pool") / "pool.log"
    with worker_pool_process(pool, log_path, env=env, cwd=REPO):
        yield f"localhost:{port}", log_path, run


# ``python -m beam_pipeline`` as a terminal's command has it: Ctrl-C raises
# KeyboardInterrupt (a fork of a server that a pytest worker started, which may ignore
# SIGINT, would inherit the ignoring). faulthandler prints the threads' stacks on SIGABRT,
# which a test sends a run that does not stop (where it hung).
_AS_A_TERMINAL_RUNS_IT = """
import faulthandler, runpy, signal

faulthandler.enable()
signal.signal(signal.SIGINT, signal.default_int_handler)
runpy.run_module("beam_pipeline", run_name="__main__", alter_sys=True)
"""


def launch_terminal_cli(*args: str, cwd, log_dir, env: dict | None = None):
    """``python -m beam_pipeline ARGS`` started as from a terminal (Ctrl-C raises
    KeyboardInterrupt), in ``cwd``, in a process forked from the warm fork server with a
    session of its own (``os.killpg(proc.pid, signal.SIGINT)`` is a terminal's Ctrl-C);
    returns the started :class:`forked_launch.ForkedProcess`."""
    import forked_launch

    env = dict(os.environ if env is None else env)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return forked_launch.launch_code(
        _AS_A_TERMINAL_RUNS_IT, list(args), str(cwd), env, str(log_dir)
    )


def one_sentence(stderr: str) -> str:
    """The one ``error:`` sentence that ``stderr`` must be, without its ``error: ``.

    Asserts what the project promises of an error a user can act on: a single line (no
    traceback, no second message, no usage text), starting with ``error: ``, ending with a
    full stop.
    """
    text = stderr.strip()
    assert "Traceback" not in text, text
    assert len(text.splitlines()) == 1, f"not one line:\n{text}"
    assert text.startswith("error: "), text
    assert text.endswith("."), text
    return text[len("error: ") :]


def forked_cli(
    args, *, cwd: str = REPO, env=None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` in ``cwd``, run to its end in a process of its own:
    a fork of the warm fork server (tests/forked_launch.py), so the CLI's ``__main__``, exit
    code and descriptors 1 and 2 are its own, as a user's command, without a fresh
    interpreter's imports of the ML stack. ``env``: the process's whole environment (this
    one's by default). Past ``timeout`` it is killed with its process group, which fails
    the test. Tests whose subject is a fresh interpreter use ``subprocess`` instead."""
    import tempfile

    import forked_launch

    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="forked-cli-") as log_dir:
        proc = forked_launch.launch_cli(list(args), cwd, env, log_dir)
        try:
            proc.wait(timeout)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)  # the session the fork made, by its id
            proc.wait(60)
            raise AssertionError(
                f"still running after {timeout} s: {args}\n{proc.stderr[-4000:]}"
            ) from None
        return subprocess.CompletedProcess(
            ["python", "-m", "beam_pipeline", *args], proc.returncode, proc.stdout, proc.stderr
        )


def dataflow_environment(job):
    """The environment part of the request of a Dataflow job built offline
    (``--dry_run``): its worker pools and experiments, made as Dataflow's client makes it
    at submission (``apiclient.DataflowApplicationClient.create_job``)."""
    from apache_beam.runners.dataflow.internal import apiclient

    environment = apiclient.Environment(
        packages=[],
        options=job.options,
        environment_version="placeholder",
        proto_pipeline_staged_url="gs://placeholder-bucket/staging/pipeline.pb",
        proto_pipeline=job.proto_pipeline,
    ).proto
    return environment


# Set by .ci/run: a test whose service (a database server, Chromium, a tmpfs to fill) is
# missing fails instead of skipping, so that a green CI means those tests ran. The README's
# own `pytest` keeps skipping them for a user without the services.
REQUIRE_SERVICES = "BEAM_PIPELINE_TEST_REQUIRE_SERVICES"


def service_missing(reason: str):
    """Skips the test for ``reason`` (a service it needs is missing), or fails it where
    :data:`REQUIRE_SERVICES` is 1 (CI, where scripts/test_deps.sh was to start it)."""
    if os.environ.get(REQUIRE_SERVICES) == "1":
        pytest.fail(
            f"{reason} ({REQUIRE_SERVICES}=1: CI needs this service, see .ci/run)", pytrace=False
        )
    pytest.skip(reason)


# Debian's chromium package (see docs/development.md), in which report pages are rendered.
@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path. Session-scoped: set up (skipping or failing the test, see
    service_missing) before a test's module-scoped runs, which it would waste. Here, not in
    one test file, so that every file rendering a report in Chromium has it."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        service_missing(
            "no chromium on PATH: install Debian's package (apt-get install -y chromium) to "
            "render the run report in a headless browser"
        )
    return path
