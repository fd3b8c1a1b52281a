"""``python -m beam_pipeline.runtime.worker_pool``: Beam's worker pool, minus two traps.

A pool of SDK worker processes for ``--environment_type=EXTERNAL``, as Beam's own
``python -m apache_beam.runners.worker.worker_pool_main`` (same flags, same service), with
two fixes, both of which make a run hang with the stock pool, and one speed-up:

- each worker runs with the pool's own interpreter (``sys.executable``), not the ``python``
  found on ``PATH``: a pool started as ``.venv/bin/python -m ...`` without activating the
  venv would otherwise start workers with a ``python`` that has no Apache Beam, and each
  would die with ``ModuleNotFoundError`` in the pool's log while the job waited forever;
- a worker's standard output goes to the pool's standard error (its log), not to a pipe:
  Beam's pool opens ``stdout=PIPE`` and never reads it, so a worker that prints more than
  the pipe holds (64 KiB on Linux: Keras progress bars, a chatty DoFn) blocks for good;
- every worker is a fork of the pool's **zygote**, a process that imported Beam's SDK
  harness, TensorFlow and this project's steps once (``beam_pipeline.runtime.pool_zygote``,
  the DirectRunner pool's preload; seconds of CPU), and a **spare worker** waits ready
  (``--spare_workers``, default 1). Every job of a run asks the pool for new workers, and
  Beam's stock pool starts each as a fresh interpreter; here a worker is forked in a
  fraction of a second and the spare is handed to the next
  ``StartWorker`` at once. The pool adopts the workers (``PR_SET_CHILD_SUBREAPER``), so they
  are its children as with Beam's pool: it waits for them, and the watchdog
  (:mod:`beam_pipeline.runtime.watchdog`) reads how one ended. A spare that waits is named
  ``bp-spare`` and the zygote ``bp-zygote`` in ``/proc/<pid>/comm`` (Linux ``prctl``), which
  the watchdog reads to tell them from workers; handed a job, a spare names itself
  ``python`` and is a worker like any other. ``--spare_workers=0`` forks each worker on
  request. Not on Linux, workers start as Beam's pool starts them (with this interpreter).

Example::

    .venv/bin/python -m beam_pipeline.runtime.worker_pool --service_port=50000 &
    .venv/bin/python -m beam_pipeline --runner=PortableRunner --job_endpoint=embed \\
        --environment_type=EXTERNAL --environment_config=localhost:50000
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Optional

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import (
    BeamFnExternalWorkerPoolServicer,
    kill_process_gracefully,
)
from apache_beam.utils import thread_pool_executor

from beam_pipeline.console import quiet_environment
from beam_pipeline.core.gpus import gpu_environment
from beam_pipeline.runtime.inspection import SPARE_NAME, ZYGOTE_NAME

__all__ = ["WorkerPoolServicer", "main", "serve"]

_LOG = logging.getLogger(__name__)

# The zygote needs Linux (prctl's process names and child subreaper, socket.send_fds).
_ZYGOTE_PLATFORM = sys.platform.startswith("linux")

# The zygote's program (a fresh interpreter, started by the pool before its gRPC server
# runs: it inherits no thread). It imports what every worker needs once
# (beam_pipeline.runtime.pool_zygote, the preload of the DirectRunner's pool), then forks a
# worker for each request that arrives on its socket: a message carrying the read end of a
# pipe, on which the worker will get the job's endpoints. Each worker is forked twice (the
# middle process exits at once) so that it is orphaned and adopted by the pool, which set
# PR_SET_CHILD_SUBREAPER: the worker is then the pool's own child, as with Beam's pool, so
# the pool waits for it and the watchdog reads how it ended (inspection.pool_children).
# A worker names itself SPARE_NAME while it waits for its line (the watchdog leaves it
# out), takes back the name "python" on it, and runs Beam's SdkHarness exactly as Beam's
# pool's command line does; on end of input (the pool went away) it exits.
_ZYGOTE_PROGRAM = f"""
import ctypes, json, os, socket, sys, traceback
_log = os.dup(2)  # the pool's log: pool_zygote points this process's 1 and 2 at /dev/null
import beam_pipeline.runtime.pool_zygote  # noqa: F401
_prctl = ctypes.CDLL(None).prctl
_prctl(15, {ZYGOTE_NAME.encode()!r}, 0, 0, 0)  # PR_SET_NAME
_sock = socket.socket(fileno=int(sys.argv[1]))

def _worker(fd):
    os.dup2(_log, 1)
    os.dup2(_log, 2)
    os.close(_log)
    _sock.close()
    code = 0
    try:
        _prctl(15, {SPARE_NAME.encode()!r}, 0, 0, 0)
        with os.fdopen(fd) as f:
            line = f.readline()
        _prctl(15, b"python", 0, 0, 0)
        if line:
            from apache_beam.runners.worker.sdk_worker import SdkHarness
            args = json.loads(line)
            SdkHarness(args.pop("url"), **args).run()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

while True:
    try:
        msg, fds, _, _ = socket.recv_fds(_sock, 16, 1)
    except OSError:
        break
    if not msg or not fds:  # the pool closed its end: stop
        break
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(r)
        pid = os.fork()
        if pid == 0:
            os.close(w)
            _worker(fds[0])
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        pid = f.read()
    os.waitpid(middle, 0)
    os.close(fds[0])
    _sock.sendall((pid or "0").encode() + b"\\n")
"""


class _ForkedWorker:
    """A worker forked by the pool's zygote and adopted by the pool: the part of
    ``subprocess.Popen`` that the pool and Beam's ``kill_process_gracefully`` use (``pid``,
    ``poll``, ``wait``, ``terminate``, ``kill``). Hand-written: ``Popen`` can only start a
    process, not take one over."""

    def __init__(self, pid: int, stdin) -> None:
        self.pid = pid
        self.stdin = stdin
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone all the same
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    """The pool's zygote (see ``_ZYGOTE_PROGRAM``): :meth:`fork` returns a ready worker.

    Why not multiprocessing's forkserver, as the DirectRunner's pool has it: its processes
    are the fork server's children, which reaps them, so the pool could neither wait for
    its workers as Beam's pool does nor let the watchdog read how one ended.
    """

    def __init__(self) -> None:
        import ctypes

        if ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
            raise OSError("PR_SET_CHILD_SUBREAPER is not available")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = ours
        self._replies = ours.makefile("rb")
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE_PROGRAM, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()

    def fork(self) -> Optional[_ForkedWorker]:
        """A new worker waiting for its job's line, or None when the zygote is gone."""
        r, w = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._sock, [b"f"], [r])
                pid = int(self._replies.readline() or b"0")
        except (OSError, ValueError):
            pid = 0
        finally:
            os.close(r)
        if pid <= 0:
            os.close(w)
            return None
        return _ForkedWorker(pid, os.fdopen(w, "wb"))

    def close(self) -> None:
        self._sock.close()
        self._replies.close()
        kill_process_gracefully(self.process)


class WorkerPoolServicer(BeamFnExternalWorkerPoolServicer):
    """Beam's worker-pool service; its process workers are forks of a zygote that imported
    the ML stack once (or, where none runs, Beam's command line with this interpreter) and
    write to the pool's log, not to a pipe.

    Args:
      spare_workers: how many ready workers to keep waiting (0: fork each on request).
      Everything else as Beam's ``BeamFnExternalWorkerPoolServicer``.
    """

    def __init__(self, *args, spare_workers: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._zygote: Optional[_Zygote] = None
        if self._use_process and not self._container_executable and _ZYGOTE_PLATFORM:
            try:
                self._zygote = _Zygote()
            except OSError as e:
                _LOG.warning("No zygote (%s): each worker starts a fresh interpreter", e)
        self._spare_count = spare_workers if self._zygote else 0
        self._spares: list[_ForkedWorker] = []
        self._spares_lock = threading.Lock()
        self._filling = threading.Lock()
        self._top_up_spares()

    def _fork(self) -> Optional[_ForkedWorker]:
        return self._zygote.fork() if self._zygote else None

    def _top_up_spares(self) -> None:
        """Readies spares on a thread of its own: a fork waits for the zygote, which takes
        seconds to import the ML stack after the pool starts, and neither the pool's gRPC
        service (which serves once the constructor returns) nor a job's ``StartWorker``
        must wait for that."""
        if self._spare_count:
            threading.Thread(target=self._fill_spares, name="spares", daemon=True).start()

    def _fill_spares(self) -> None:
        with self._filling:  # one filler at a time
            while True:
                with self._spares_lock:
                    self._spares = [s for s in self._spares if s.poll() is None]
                    if len(self._spares) >= self._spare_count:
                        return
                spare = self._fork()
                if spare is None:
                    return
                with self._spares_lock:
                    if self._spare_count:
                        self._spares.append(spare)
                        continue
                kill_process_gracefully(spare)  # the pool stopped meanwhile
                return

    def _take_spare(self) -> Optional[_ForkedWorker]:
        with self._spares_lock:
            while self._spares:
                spare = self._spares.pop(0)
                if spare.poll() is None:
                    return spare
        return None

    def stop(self) -> None:
        """Ends the idle spares, the workers still running and the zygote."""
        with self._spares_lock:
            spares, self._spares, self._spare_count = self._spares, [], 0
        for process in [*spares, *self._worker_processes.values()]:
            kill_process_gracefully(process)
        if self._zygote:
            self._zygote.close()

    def StartWorker(self, request, context):  # noqa: N802  gRPC method name
        if not self._use_process or self._container_executable:
            return super().StartWorker(request, context)
        spare, how = self._take_spare(), "spare worker"
        if spare is None:
            spare, how = self._fork(), "forked worker"
        if spare is not None:
            try:
                harness = {
                    "url": request.control_endpoint.url,
                    "worker_id": request.worker_id,
                    "state_cache_size": self._state_cache_size,
                    "data_buffer_time_limit_ms": self._data_buffer_time_limit_ms,
                }
                spare.stdin.write((json.dumps(harness) + "\n").encode())
                spare.stdin.close()
                _LOG.info("Worker %s is %s %d", request.worker_id, how, spare.pid)
                self._worker_processes[request.worker_id] = spare
                return beam_fn_api_pb2.StartWorkerResponse()
            except OSError:  # it died as it was handed the job: start one as Beam does
                pass
            finally:
                self._top_up_spares()
        try:
            # Beam's own command line (worker_pool_main), run by sys.executable.
            code = (
                "from apache_beam.runners.worker.sdk_worker import SdkHarness; "
                f"SdkHarness({request.control_endpoint.url!r}, "
                f"worker_id={request.worker_id!r}, "
                f"state_cache_size={self._state_cache_size:d}, "
                f"data_buffer_time_limit_ms={self._data_buffer_time_limit_ms:d}).run()"
            )
            _LOG.info("Starting worker %s with %s", request.worker_id, sys.executable)
            self._worker_processes[request.worker_id] = subprocess.Popen(
                [sys.executable, "-c", code], stdout=sys.stderr, close_fds=True
            )
            return beam_fn_api_pb2.StartWorkerResponse()
        except Exception:  # noqa: BLE001  reported to the runner, as Beam's pool does
            return beam_fn_api_pb2.StartWorkerResponse(error=traceback.format_exc())


def serve(
    port: int,
    container_executable: Optional[str] = None,
    spare_workers: int = 1,
) -> tuple[str, grpc.Server, WorkerPoolServicer]:
    """Starts the pool's gRPC service on ``port`` (0: any free port).

    The set-up of Beam's ``BeamFnExternalWorkerPoolServicer.start``, which builds the
    service with a fixed argument list and does not hand it back; this one passes
    ``spare_workers`` and returns the service, whose :meth:`~WorkerPoolServicer.stop` ends
    its spares and workers.

    Returns:
      ``(address, server, service)``.
    """
    options = [("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)]
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(), options=options)
    address = f"localhost:{server.add_insecure_port(f'[::]:{port}')}"
    service = WorkerPoolServicer(
        use_process=True,
        container_executable=container_executable,
        data_buffer_time_limit_ms=-1,  # Beam's start() default
        spare_workers=spare_workers,
    )
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(service, server)
    server.start()
    atexit.register(service.stop)
    return address, server, service


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Serves until interrupted; the flags are those of Beam's ``worker_pool_main``."""
    parser = argparse.ArgumentParser(prog="python -m beam_pipeline.runtime.worker_pool")
    parser.add_argument("--service_port", type=int, required=True, dest="port")
    parser.add_argument("--container_executable", default=None)
    parser.add_argument(
        "--spare_workers",
        type=int,
        default=1,
        help="ready workers kept waiting for the next job (0: start each job's from scratch)",
    )
    args = parser.parse_args(argv)
    if args.spare_workers < 0:
        parser.error(f"--spare_workers={args.spare_workers} must be 0 or more")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # The workers inherit it: TensorFlow's C++ INFO/WARNING lines stay out of the pool's log
    # (unless the user set a level).
    quiet_environment(os.environ)
    gpu_environment(os.environ)  # GPU memory growth in every worker: beam_pipeline.core.gpus
    address, server, service = serve(args.port, args.container_executable, args.spare_workers)
    _LOG.info("Worker pool serving at %s (workers run %s)", address, sys.executable)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)
        service.stop()


if __name__ == "__main__":
    main()
