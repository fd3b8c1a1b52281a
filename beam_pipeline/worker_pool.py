"""``python -m beam_pipeline.worker_pool``: Beam's worker pool, minus two traps.

A pool of SDK worker processes for ``--environment_type=EXTERNAL``, as Beam's own
``python -m apache_beam.runners.worker.worker_pool_main`` (same flags, same service), with
two differences, both of which make a run hang with the stock pool:

- each worker runs with the pool's own interpreter (``sys.executable``), not the ``python``
  found on ``PATH``: a pool started as ``.venv/bin/python -m ...`` without activating the
  venv would otherwise start workers with a ``python`` that has no Apache Beam, and each
  would die with ``ModuleNotFoundError`` in the pool's log while the job waited forever;
- a worker's standard output goes to the pool's standard error (its log), not to a pipe:
  Beam's pool opens ``stdout=PIPE`` and never reads it, so a worker that prints more than
  the pipe holds (64 KiB on Linux: Keras progress bars, a chatty DoFn) blocks for good.

Example::

    .venv/bin/python -m beam_pipeline.worker_pool --service_port=50000 &
    .venv/bin/python -m beam_pipeline --runner=PortableRunner --job_endpoint=embed \\
        --environment_type=EXTERNAL --environment_config=localhost:50000
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Optional

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

__all__ = ["WorkerPoolServicer", "main"]

_LOG = logging.getLogger(__name__)


class WorkerPoolServicer(BeamFnExternalWorkerPoolServicer):
    """Beam's worker-pool service; its process workers use this interpreter and no pipe."""

    def StartWorker(self, request, context):  # noqa: N802  gRPC method name
        if not self._use_process or self._container_executable:
            return super().StartWorker(request, context)
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


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Serves until interrupted; the flags are those of Beam's ``worker_pool_main``."""
    parser = argparse.ArgumentParser(prog="python -m beam_pipeline.worker_pool")
    parser.add_argument("--service_port", type=int, required=True, dest="port")
    parser.add_argument("--container_executable", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    address, server = WorkerPoolServicer.start(
        use_process=True, port=args.port, container_executable=args.container_executable
    )
    _LOG.info("Worker pool serving at %s (workers run %s)", address, sys.executable)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
