"""A CLI run or a script in a process forked from the pool's fork server, not a fresh one.

For tests that need a separate process to kill (SIGKILL of its process group) or to hold
to a time limit, but not a fresh interpreter: a fresh ``python -m beam_pipeline`` pays
TensorFlow's, tf.Transform's and Beam's imports (6.5-8 s of CPU) before it does anything.
The fork server of :mod:`beam_pipeline.runtime.pool` (preloaded with
:mod:`beam_pipeline.runtime.pool_zygote`: the ML stack imported, TensorFlow's runtime not
started) is already there in a test process that used a pool, and is shared with it.

The forked process gets its own session (``os.killpg(proc.pid, ...)`` reaches it and the
processes it starts), working directory, environment, ``sys.argv`` and standard streams,
and runs ``python -m beam_pipeline``'s ``__main__`` (the shadowing check, then the CLI) or
a script's code. Tests whose point is a fresh interpreter (import order, the Keras switch,
shadowing by the working directory, README commands as written, a model served in a
fresh process) launch a real ``subprocess`` instead.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import tempfile
import time
from typing import Optional

__all__ = ["ForkedProcess", "launch_cli", "launch_code"]


def _child(argv: list, cwd: str, env: dict, out_path: str, err_path: str, code) -> None:
    """Runs in the fork: becomes its own session, then the CLI's ``__main__`` or ``code``."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # The fork server may have cached the temporary folder of the run it started in
    # (removed since): the caller's TMPDIR, as a fresh process would read it.
    tempfile.tempdir = None
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    _fork_own_fork_server()
    status = 0
    try:
        if code is None:
            # As `python -m beam_pipeline ARGS` has them: argv, and the working directory
            # first on sys.path (what the shadowing check looks at).
            sys.argv = ["-m", *argv]
            sys.path.insert(0, cwd)
            runpy.run_module("beam_pipeline", run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv]
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  as the interpreter would: traceback, exit 1
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        atexit._run_exitfuncs()  # the CLI's own exit handlers (pools, logs), as at exit
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110
                pass
        os._exit(status)


def _fork_own_fork_server() -> None:
    """Gives this process a fork server of its own: a fork of itself, made now.

    The run would start one as multiprocessing does (``ForkServer.ensure_running``: a
    fresh interpreter that imports the preload, ``pool_zygote``: seconds of CPU, once per
    forked run, most of a short run's cost). This process is, at this point, what that
    server is once its preload is done: a fork of a server that imported the ML stack
    and started nothing. So the server here is a fork of it, set up as ``pool_zygote``
    sets up a server (the quiet and GPU environment, output to /dev/null) and registered
    where ``ensure_running`` looks. It is in this process's session, as the one the run
    would start, so a kill of the session reaches it and every process it forks.
    Everything a forked process gets from the run (its environment, working directory,
    output) comes with each request, as before; only the stages' worker modules are not
    preloaded (each forked worker imports them itself).
    """
    import socket
    from multiprocessing import connection, forkserver

    # Imported by the server this process is a fork of (importing it anew would send this
    # process's output to /dev/null).
    pool_zygote = sys.modules["beam_pipeline.runtime.pool_zygote"]

    server = forkserver._forkserver
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(alive_w)
                pool_zygote.server_environment()
                forkserver.main(listener.fileno(), alive_r, [])
            finally:
                os._exit(0)
        os.close(alive_r)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid


class ForkedProcess:
    """The forked process, with the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, process, out_path: str, err_path: str) -> None:
        self._process = process
        self.pid: int = process.pid
        self.out_path, self.err_path = out_path, err_path
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None and not self._process.is_alive():
            self._process.join()
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
            self._process.join(0.05)
        return self.returncode

    @property
    def stdout(self) -> str:
        with open(self.out_path, errors="replace") as f:
            return f.read()

    @property
    def stderr(self) -> str:
        with open(self.err_path, errors="replace") as f:
            return f.read()


def _launch(argv, cwd, env, log_dir, code) -> ForkedProcess:
    from beam_pipeline.runtime import pool

    os.makedirs(log_dir, exist_ok=True)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    out_path = os.path.join(log_dir, f"forked-{stamp}.out")
    err_path = os.path.join(log_dir, f"forked-{stamp}.err")
    process = pool.start_forked(_child, (list(argv), cwd, dict(env), out_path, err_path, code))
    return ForkedProcess(process, out_path, err_path)


def launch_cli(argv: list, cwd: str, env: dict, log_dir: str) -> ForkedProcess:
    """``python -m beam_pipeline *argv`` in ``cwd`` with ``env``, in a forked process."""
    return _launch(argv, cwd, env, log_dir, None)


def launch_code(code: str, argv: list, cwd: str, env: dict, log_dir: str) -> ForkedProcess:
    """``python -c code *argv`` in ``cwd`` with ``env``, in a forked process."""
    return _launch(argv, cwd, env, log_dir, code)


def run_code(
    code: str, *args: str, log_dir: str, timeout: float = 240, env: Optional[dict] = None
) -> dict:
    """``conftest_trainer.run_python`` in a forked process: ``code`` run to its end (killed
    with its process group past ``timeout``, which fails the test), with ``env`` added to
    this process's environment; returns the JSON object it printed on the last line of its
    standard output. TensorFlow is imported there but not initialized (the fork server
    never ran an op), so the code may still configure logical devices first."""
    import signal

    import conftest_trainer
    from conftest import REPO

    env = dict(os.environ, **(env or {}))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = launch_code(code, list(args), REPO, env, log_dir)
    try:
        proc.wait(timeout)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        raise AssertionError(f"still running after {timeout} s:\n{proc.stderr[-4000:]}") from None
    return conftest_trainer.last_json(proc.returncode, proc.stdout, proc.stderr)
