"""``python -m beam_pipeline.worker_pool``: Beam's worker pool, minus two traps.

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
- a **spare worker** waits ready (``--spare_workers``, default 1): a process that has already
  imported Beam's SDK harness and TensorFlow (about 2 s and 5 s of CPU) and waits on its
  standard input for a job's endpoints. Every job of a run asks the pool for new workers
  (Beam's stock pool starts each from scratch), so a run of several jobs on the portable
  runner paid that start-up once per job, mostly while a core sat idle; the spare is made
  ready while the previous job runs and is handed to the next ``StartWorker`` at once. A
  spare that waits, imports done, is named ``bp-spare`` in ``/proc/<pid>/comm`` (Linux
  ``prctl``), which the watchdog (:mod:`beam_pipeline.runtime.watchdog`) reads to tell it from a
  worker; handed a job it takes back its own name and is a worker like any other. It costs one idle
  process's memory (about 0.5 GB with TensorFlow); ``--spare_workers=0`` turns it off.

Example::

    .venv/bin/python -m beam_pipeline.worker_pool --service_port=50000 &
    .venv/bin/python -m beam_pipeline --runner=PortableRunner --job_endpoint=embed \\
        --environment_type=EXTERNAL --environment_config=localhost:50000
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
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
from beam_pipeline.runtime.inspection import SPARE_NAME

__all__ = ["WorkerPoolServicer", "main", "serve"]

_LOG = logging.getLogger(__name__)

# The spare's program. It imports what every job's worker imports, then names itself
# SPARE_NAME only while it waits for one line of JSON on standard input (the job's
# endpoints): the watchdog leaves out a process of that name, and one that is still
# importing counts as a worker, which is what it is when a job was handed to it meanwhile
# (and an import that fails is then seen as that worker's failure, as without a spare). On
# the line it takes back its own name and runs Beam's SdkHarness exactly as Beam's pool's
# command line does; on end of input (the pool went away) it exits. prctl(PR_SET_NAME) is
# Linux's; elsewhere the pool keeps no spare.
_SPARE_PROGRAM = f"""
import ctypes, json, sys
from apache_beam.runners.worker.sdk_worker import SdkHarness
try:
    import tensorflow  # noqa: F401  the jobs' steps import it; a failure is theirs
except Exception:
    pass
_prctl = ctypes.CDLL(None).prctl
with open("/proc/self/comm", "rb") as f:
    _own = f.read().strip()
_prctl(15, {SPARE_NAME.encode()!r}, 0, 0, 0)  # PR_SET_NAME
_line = sys.stdin.readline()
_prctl(15, _own, 0, 0, 0)
if _line:
    _args = json.loads(_line)
    SdkHarness(_args.pop("url"), **_args).run()
"""


class WorkerPoolServicer(BeamFnExternalWorkerPoolServicer):
    """Beam's worker-pool service; its process workers use this interpreter and no pipe.

    Args:
      spare_workers: how many ready workers to keep waiting (0: start each from scratch).
      Everything else as Beam's ``BeamFnExternalWorkerPoolServicer``.
    """

    def __init__(self, *args, spare_workers: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._spare_count = spare_workers if sys.platform.startswith("linux") else 0
        self._spares: list[subprocess.Popen] = []
        self._spares_lock = threading.Lock()
        self._top_up_spares()

    def _top_up_spares(self) -> None:
        with self._spares_lock:
            self._spares = [s for s in self._spares if s.poll() is None]
            while self._use_process and len(self._spares) < self._spare_count:
                self._spares.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _SPARE_PROGRAM],
                        stdin=subprocess.PIPE,
                        stdout=sys.stderr,
                        close_fds=True,
                    )
                )

    def _take_spare(self) -> Optional[subprocess.Popen]:
        with self._spares_lock:
            while self._spares:
                spare = self._spares.pop(0)
                if spare.poll() is None:
                    return spare
        return None

    def stop(self) -> None:
        """Ends the idle spares and the workers still running."""
        with self._spares_lock:
            spares, self._spares, self._spare_count = self._spares, [], 0
        for process in [*spares, *self._worker_processes.values()]:
            kill_process_gracefully(process)

    def StartWorker(self, request, context):  # noqa: N802  gRPC method name
        if not self._use_process or self._container_executable:
            return super().StartWorker(request, context)
        spare = self._take_spare()
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
                _LOG.info("Worker %s is spare worker %d", request.worker_id, spare.pid)
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
    parser = argparse.ArgumentParser(prog="python -m beam_pipeline.worker_pool")
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
