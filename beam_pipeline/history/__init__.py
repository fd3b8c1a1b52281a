"""Run history for people: ``beam-pipeline runs list|show|lineage|diff``.

Reads the metadata store (:mod:`beam_pipeline.metadata`) and the recorded schema and
statistics artifacts; writes nothing. :mod:`~beam_pipeline.history.views` turns the store's
records into JSON values (what ``--json`` prints), :mod:`~beam_pipeline.history.compare`
compares two runs, :mod:`~beam_pipeline.history.command` parses the command and prints
tables with rich.

Example::

    python -m beam_pipeline runs list --pipeline_root=pipeline_runs
    python -m beam_pipeline runs diff RUN_A RUN_B --json
"""

from beam_pipeline.history.command import main

__all__ = ["main"]
