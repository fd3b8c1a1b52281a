"""The bottom layer: what ``beam_pipeline``, ``transforms`` and ``trainer`` all use.

Modules here import nothing of this project outside ``beam_pipeline.core`` (and
``beam_pipeline/__init__.py`` imports nothing), so ``transforms/`` and ``trainer/`` can use
them without depending on the orchestration above them; ``tests/test_layers.py`` checks
the direction of every import.

- :mod:`~beam_pipeline.core.errors`: :class:`PipelineError` and the translation of
  filesystem, Transform and code errors into one sentence a user can act on.
- :mod:`~beam_pipeline.core.types`: the enums every layer shares (splits, input formats,
  artifacts of a run).
- :mod:`~beam_pipeline.core.fileio`: the one way this project touches files (local or
  ``gs://``).
- :mod:`~beam_pipeline.core.user_module`, :mod:`~beam_pipeline.core.keras3`: loading a
  user's module file, with one Keras.
- :mod:`~beam_pipeline.core.module_staging`: the module file and its folder copied beside
  the run's artifacts and fetched, verified, on workers.

Example::

    from beam_pipeline.core import fileio
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.core.types import Split

    if not fileio.exists(path):
        raise PipelineError(f"--data {path} does not exist; pass an existing file.")
"""
