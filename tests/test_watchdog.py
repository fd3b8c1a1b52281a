"""No job waits forever: worker pools whose workers cannot start, die, or print a lot.

Real worker pools (Beam's stock ``worker_pool_main`` and ``beam_pipeline.runtime.worker_pool``) as
separate processes on this machine, real jobs on ``PortableRunner --job_endpoint=embed``.
Each job that must fail runs in a thread with a generous hang guard: without the watchdog
Beam waits for its worker forever, and the guard turns that into a test failure.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from conftest import REPO, free_port, worker_pool_process

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.options import create_pipeline, parse_beam_args, run_pipeline

_HANG_GUARD_S = 240  # far above the few seconds these failures take; only a hang reaches it


def _portable(address: str):
    return parse_beam_args(
        [
            "--runner=PortableRunner",
            "--job_endpoint=embed",
            "--environment_type=EXTERNAL",
            f"--environment_config={address}",
        ]
    )


def _outcome(call) -> dict:
    """``call()`` in a daemon thread; its result or error, or a test failure if it hangs."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call()
        except BaseException as e:  # noqa: BLE001  handed to the test
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=_HANG_GUARD_S)
    assert not thread.is_alive(), "the job hung: no watchdog fired"
    return out


@pytest.fixture(scope="module")
def pool_without_beam(tmp_path_factory):
    """Beam's stock pool, started with the venv's python but a PATH whose `python` has no Beam.

    The issue's set-up: the pool starts its workers with the `python` found on PATH; here
    that is this interpreter with ``-I -S`` (no site-packages, no PYTHONPATH), which is what
    a fresh shell's system python amounts to.
    """
    folder = tmp_path_factory.mktemp("pool_without_beam")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    python.chmod(0o755)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    argv = [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main"]
    log = folder / "pool.log"
    with worker_pool_process([*argv, f"--service_port={port}"], log, env=env, cwd=str(folder)):
        yield f"localhost:{port}", str(python)


@pytest.fixture(scope="module")
def own_pool(tmp_path_factory):
    """``python -m beam_pipeline.runtime.worker_pool`` as the README starts it (venv not
    activated)."""
    folder = tmp_path_factory.mktemp("own_pool")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = "/usr/bin:/bin"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    log = folder / "pool.log"
    argv = [sys.executable, "-m", "beam_pipeline.runtime.worker_pool", f"--service_port={port}"]
    with worker_pool_process(argv, log, env=env, cwd=REPO):
        yield f"localhost:{port}", log


def test_run_on_such_a_pool_stops_before_creating_anything_with_the_workers_error(
    pool_without_beam, tmp_path, capsys
):
    """The pre-flight check: exit 2 and one sentence, in the time one worker takes to die."""
    from beam_pipeline import cli

    address, python = pool_without_beam
    root = tmp_path / "root"
    argv = [
        "--runner=PortableRunner",
        "--job_endpoint=embed",
        "--environment_type=EXTERNAL",
        f"--environment_config={address}",
        f"--pipeline_root={root}",
        "--worker_start_timeout=60",
    ]
    out = _outcome(lambda: cli.main(argv))
    assert out.get("result") == 2, out
    message = capsys.readouterr().err.strip()
    assert message.startswith(
        f"error: The worker pool at --environment_type=EXTERNAL --environment_config={address} "
        "cannot run this project's steps: its worker exited at start (ModuleNotFoundError: "
        "No module named 'apache_beam')"
    ), message
    assert message.endswith(
        f"the worker pool runs `python` from PATH ({python}) without apache_beam; start it "
        "with the environment's python or activate the venv (e.g. `.venv/bin/python -m "
        f"beam_pipeline.runtime.worker_pool --service_port={address.rsplit(':', 1)[1]}`)."
    ), message
    assert not root.exists()


def _watchdog_message(p, what: str) -> str:
    """Runs ``p`` watched with a 3 s --worker_start_timeout; the watchdog's error message."""
    out = _outcome(lambda: run_pipeline(p, what, worker_start_timeout=3).wait_until_finish())
    error = out.get("error")
    assert isinstance(error, PipelineError), out
    message = str(error)
    assert message.startswith(f"The {what} job (PortableRunner job "), message
    return message


def test_watchdog_cancels_a_job_whose_workers_die_at_import(pool_without_beam):
    """No pre-flight here: the job itself is submitted and its worker never comes up."""
    address, python = pool_without_beam
    p = create_pipeline(_portable(address))
    _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
    message = _watchdog_message(p, "Probe")
    assert (
        f"was cancelled after 3 s (--worker_start_timeout) without a live worker on "
        f"--environment_type=EXTERNAL --environment_config={address}: its workers ended: "
        "exited with code 1 "
        "(ModuleNotFoundError: No module named 'apache_beam')"
    ) in message
    assert f"the worker pool runs `python` from PATH ({python}) without apache_beam" in message


def test_a_worker_killed_mid_job_fails_the_run_in_bounded_time(own_pool, tmp_path):
    address, _ = own_pool
    killing = str(tmp_path / "killing")

    def _kill_own_worker(x: int) -> int:  # nested: pickled by value (the pool cannot import us)
        if x == 3:
            open(killing, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return x

    p = create_pipeline(_portable(address))
    _ = p | beam.Create(list(range(8))) | beam.Reshuffle() | beam.Map(_kill_own_worker)
    # The worker may take long to come up on a loaded machine: the job is watched with a
    # generous bound until the worker says it is about to die, then with 3 s, the bound
    # whose message this checks (the watchdog reads its bound on every poll).
    result = run_pipeline(p, "Doomed", worker_start_timeout=_HANG_GUARD_S)
    deadline = time.monotonic() + _HANG_GUARD_S
    while not os.path.exists(killing):
        assert time.monotonic() < deadline, "the worker never ran the step"
        time.sleep(0.05)
    result._timeout = 3
    out = _outcome(result.wait_until_finish)
    error = out.get("error")
    assert isinstance(error, PipelineError), out
    message = str(error)
    assert message.startswith("The Doomed job (PortableRunner job "), message
    assert "was cancelled after 3 s (--worker_start_timeout)" in message
    assert (
        "without a live worker on --environment_type=EXTERNAL "
        f"--environment_config={address}: its workers ended: killed by SIGKILL (out of memory, "
        "most likely)"
    ) in message
    assert message.endswith(
        "give the workers more memory or make the step smaller (fewer trials at once, a smaller "
        "model or batch), then rerun with the same --run_id."
    ), message


def _children(pool_pid: int) -> dict[int, str]:
    """The pool's child processes and their names (``/proc/<pid>/comm``)."""
    kids = []
    for task in os.listdir(f"/proc/{pool_pid}/task"):
        with open(f"/proc/{pool_pid}/task/{task}/children") as f:
            kids += [int(k) for k in f.read().split()]
    names = {}
    for kid in kids:
        try:
            with open(f"/proc/{kid}/comm") as f:
                names[kid] = f.read().strip()
        except OSError:
            pass  # ended meanwhile
    return names


def _spares(pool_pid: int) -> list[int]:
    from beam_pipeline.runtime.inspection import SPARE_NAME

    return [kid for kid, name in _children(pool_pid).items() if name == SPARE_NAME]


def _wait_for_spare(pool_pid: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spares = _spares(pool_pid)
        if spares:
            return spares[0]
        time.sleep(0.2)
    raise AssertionError(f"no spare worker of pool {pool_pid} within {timeout} s")


def test_the_own_pool_hands_a_job_its_ready_spare_and_a_chatty_worker_does_not_block(own_pool):
    """The pool hands the job its ready spare and readies the next. The job's worker prints
    ~120 KB per element: Beam's stock pool pipes a worker's stdout and never reads it, so
    this job would block there; ours sends it to the pool's log.

    (This pool passing the pre-flight check is shown by test_runners' whole portable run.)
    """
    from beam_pipeline.runtime.inspection import inspect_pool, pool_pid

    address, log = own_pool
    pool = pool_pid(address)
    assert pool is not None
    spare = _wait_for_spare(pool)
    # Idle, it is no worker: a job with none alive is still seen as having none.
    assert spare not in inspect_pool(address).alive
    line = "chatty worker line " + "x" * 100

    def _chatty(x: int) -> int:  # nested: pickled by value (the pool cannot import us)
        for _ in range(1000):  # ~120 KB per element, above a 64 KiB pipe
            print(line)
        sys.stdout.flush()
        return x * 2

    p = create_pipeline(_portable(address))
    assert_that(p | beam.Create([1, 2]) | beam.Map(_chatty), equal_to([2, 4]))
    out = _outcome(lambda: run_pipeline(p, "Spare", worker_start_timeout=60).wait_until_finish())
    assert out.get("result") == "DONE", out
    text = log.read_text()
    assert f"is spare worker {spare}\n" in text
    assert text.count(line) == 2000  # the output went to the pool's log
    assert _wait_for_spare(pool) != spare  # the next one is made ready


# A sitecustomize that holds only the pool's zygote (``python -c PROGRAM FD``; sys.argv is
# ["-c", FD] when site runs) for a minute, as if its imports took that long.
_SLOW_ZYGOTE = """
import sys, time
if sys.argv[:1] == ["-c"] and len(sys.argv) == 2 and sys.argv[1].isdigit():
    time.sleep(60)
"""


def test_the_own_pool_answers_while_its_zygote_still_imports(tmp_path):
    """The pool's service answers at once while its zygote is still busy. It once answered
    only after the zygote's first fork (the spare was readied in the service's constructor),
    and a pre-flight check on a loaded machine found the pool silent."""
    import grpc

    (tmp_path / "sitecustomize.py").write_text(_SLOW_ZYGOTE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2")
    port = free_port()
    argv = [sys.executable, "-m", "beam_pipeline.runtime.worker_pool", f"--service_port={port}"]
    with worker_pool_process(argv, tmp_path / "pool.log", env=env, cwd=REPO) as pool:
        channel = grpc.insecure_channel(f"localhost:{port}")
        try:
            # The pre-flight check's own bound (runtime/preflight.py: at most 10 s).
            grpc.channel_ready_future(channel).result(timeout=10)
        finally:
            channel.close()
        # ... while the zygote is still held: the pool has a child, none named bp-zygote yet.
        names = list(_children(pool.pid).values())
        assert names and "bp-zygote" not in names, names
