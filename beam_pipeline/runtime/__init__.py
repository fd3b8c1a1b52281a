"""Running Beam jobs on this machine and watching them: plumbing any stage's jobs can use.

- :mod:`~beam_pipeline.runtime.pool`: :class:`LocalWorkerPool`, warm worker processes that
  serve many DirectRunner jobs, with their own gRPC dispatch (Beam's multi_processing
  mode starts fresh processes per job);
- :mod:`~beam_pipeline.runtime.counters`: what a finished job counted.

Import the modules themselves: this package's ``__init__`` imports none of them, because
:mod:`beam_pipeline.beam_options` (which the pool uses) imports the watchdog from here.
"""

__all__: list[str] = []
