"""The DirectRunner's ``multi_processing`` workers as forks of the launcher's fork server.

Beam's FnApiRunner starts each worker of a ``multi_processing`` job as a fresh
``python -m apache_beam.runners.worker.sdk_worker_main`` (its ``SubprocessSdkWorker``), and
every job gets new ones: each pays Beam's SDK harness import (seconds of CPU) and its
steps' imports (tf.Transform's and TensorFlow's for a Transform job)
before it reads a row. Here, once the fork server of
:mod:`beam_pipeline.core.forked` is warm (a pool of this launcher started it, or a
multi_processing run did, first thing: ``warm_fork_server``; its imports done once: Beam's
SDK harness, TensorFlow, tf.Transform, the project's steps), a worker is a fork of it that
runs ``sdk_worker_main.main`` as the command line would, with the environment, working
directory and standard output and error that Beam's ``Popen`` gives it. Before that (the
jobs that start before the server answers), the workers are Beam's fresh interpreters, as
:func:`_start` says why.

What Beam sees is unchanged: ``run`` below is ``SubprocessSdkWorker.run`` (Beam 2.77,
pinned in the lock file) with the ``Popen`` replaced, so a worker that exits unasked still
raises "Worker subprocess exited with return code N" in Beam's ``run_worker`` thread,
which :func:`beam_pipeline.runtime.options.run_pipeline` turns into one sentence (a killed
worker's code is -9, as a ``Popen``'s). Beam offers no hook for how that worker starts
(the command line is fixed in ``FnApiRunner.run_pipeline``, and the class is looked up on
its module when a job starts its workers), hence the subclass installed on that module.
Any other command line, or a platform without ``fork`` (the fork server needs one), runs
Beam's own code.
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401  before the atexit handler below: see _stop_live
import os
import sys
import tempfile
import threading

from beam_pipeline.core.forked import InheritedFd, fork_server_warm, start_forked

__all__ = ["install", "serve_sdk_worker"]

_BEAM_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
_installed = threading.Lock()
_live: set = set()  # the workers not yet seen to end


@atexit.register
def _stop_live() -> None:
    """At exit, kills the workers still running: a job abandoned after one of its workers
    died (``run_pipeline`` fails it, Beam would wait forever) keeps its other workers
    alive, and multiprocessing's own exit handler, which runs after this one (registered
    earlier, by the import above), would wait for them forever. A fresh interpreter, as
    Beam started, never held up the launcher's exit."""
    for worker in list(_live):
        worker.kill()


def serve_sdk_worker(env: dict, cwd: str, stdout: int, stderr: int) -> None:
    """Runs in the fork: Beam's SDK worker, as ``python -m ...sdk_worker_main`` would.

    Args:
      env: the environment Beam gives the worker (its control, logging and options
        variables among it).
      cwd: the launcher's working directory when the worker was asked for.
      stdout, stderr: the launcher's standard output and error, as this process has them.
    """
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.close(stdout)
    os.close(stderr)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the fork server's may be cached: Beam's TMPDIR now
    from apache_beam.runners.worker import sdk_worker_main

    sys.argv = [sdk_worker_main.__file__]
    sdk_worker_main.main(sys.argv)


class _Forked:
    """The part of ``subprocess.Popen`` that ``SubprocessSdkWorker.run`` uses, for a
    multiprocessing process."""

    def __init__(self, process) -> None:
        self._process = process
        _live.add(self)

    @property
    def returncode(self):
        return self._process.exitcode

    def wait(self):
        self._process.join()
        _live.discard(self)
        return self._process.exitcode

    def poll(self):
        return self._process.exitcode

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()


def _start(env: dict):
    """A forked worker where the fork server is warm, else Beam's ``Popen``.

    Only a warm server: one started for this job would make it wait for the server's
    imports (TensorFlow's among them), where two fresh workers of a data job import only
    Beam's harness, in parallel, and a data job in a fresh process finished later with a
    server started for it than without one (bench_scaling.py).
    """
    import subprocess

    if fork_server_warm():
        try:
            streams = (InheritedFd(1), InheritedFd(2))
            return _Forked(
                start_forked(serve_sdk_worker, (env, os.getcwd(), *streams), name="sdk-worker")
            )
        except OSError:  # the server is gone: Beam's way, as below
            pass
    return subprocess.Popen(_BEAM_COMMAND, shell=True, env=env)  # noqa: S602  Beam's own


def install() -> None:
    """Makes the DirectRunner's ``multi_processing`` workers forks (idempotent)."""
    if not hasattr(os, "fork"):
        return
    from apache_beam.runners.portability import local_job_service

    with _installed:
        if getattr(local_job_service.SubprocessSdkWorker, "beam_pipeline_forked", False):
            return
        local_job_service.SubprocessSdkWorker = _forked_worker_class(
            local_job_service.SubprocessSdkWorker
        )


def _forked_worker_class(beam_class):
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
    from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer
    from apache_beam.utils import thread_pool_executor
    from google.protobuf import json_format, text_format

    class ForkedSdkWorker(beam_class):
        """Beam's ``SubprocessSdkWorker``; its worker forked when the command is Beam's."""

        beam_pipeline_forked = True

        def run(self) -> None:
            if self._worker_command_line != _BEAM_COMMAND:
                return super().run()
            # From here: Beam's run(), with _start(env_dict) for its Popen.
            options = [
                ("grpc.http2.max_pings_without_data", 0),
                ("grpc.http2.max_ping_strikes", 0),
            ]
            logging_server = grpc.server(
                thread_pool_executor.shared_unbounded_instance(), options=options
            )
            logging_port = logging_server.add_insecure_port("[::]:0")
            logging_server.start()
            logging_servicer = BeamFnLoggingServicer()
            beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(
                logging_servicer, logging_server
            )
            logging_descriptor = text_format.MessageToString(
                endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{logging_port}")
            )
            control_descriptor = text_format.MessageToString(
                endpoints_pb2.ApiServiceDescriptor(url=self._control_address)
            )
            pipeline_options = json_format.MessageToJson(
                self._provision_info.provision_info.pipeline_options
            )
            env_dict = dict(
                os.environ,
                CONTROL_API_SERVICE_DESCRIPTOR=control_descriptor,
                LOGGING_API_SERVICE_DESCRIPTOR=logging_descriptor,
                PIPELINE_OPTIONS=pipeline_options,
            )
            if self._worker_id:
                env_dict["WORKER_ID"] = self._worker_id
            p = _start(env_dict)
            try:
                p.wait()
                if p.returncode:
                    raise RuntimeError(f"Worker subprocess exited with return code {p.returncode}")
            finally:
                if p.poll() is None:
                    p.kill()
                logging_server.stop(0)

    return ForkedSdkWorker
