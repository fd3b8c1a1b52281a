"""Running Beam jobs on this machine and watching them: plumbing any stage's jobs can use.

- :mod:`~beam_pipeline.runtime.pool`: :class:`LocalWorkerPool`, warm worker processes that
  serve many DirectRunner jobs, with their own gRPC dispatch (Beam's multi_processing
  mode starts fresh processes per job);
- :mod:`~beam_pipeline.runtime.watchdog`: :func:`watch`, a job no live worker serves
  for ``--worker_start_timeout`` seconds is cancelled with one sentence (Beam waits forever);
- :mod:`~beam_pipeline.runtime.preflight`: a local EXTERNAL pool must start a worker that
  imports this project before the first job;
- :mod:`~beam_pipeline.runtime.inspection`: what this machine can read about a job's
  environment and a local pool's processes (``/proc``);
- :mod:`~beam_pipeline.runtime.background`: a call on a daemon thread, its outcome handed
  back;
- :mod:`~beam_pipeline.runtime.counters`: what a finished job counted.

``python -m beam_pipeline.runtime.worker_pool`` (the EXTERNAL pool users start) stays a top-level
command. Import the modules themselves: this ``__init__`` imports none of them, so that
importing one (the options, say) does not load the others (the pool's gRPC dispatch).
"""

__all__: list[str] = []
