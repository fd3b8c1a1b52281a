"""The Python API: the same run as the command line, for your own code or scheduler.

Settings have the command line's names (its flags without ``--``, the YAML keys of
``--config``), so a flag you know is a keyword you know; Beam's options go in
``beam_args``. :func:`run` runs the stage graph (the bundled one, or yours) and returns the
run's summary; it writes the run's ``report.html`` as the command line does. The command
line (:mod:`beam_pipeline.cli`) is this API plus flag parsing, progress lines and exit codes.

Example::

    import beam_pipeline as bp

    config = bp.make_config(
        data="data/*.csv",
        module_file="my_module.py",
        train_steps=200,
        beam_args=["--runner=DirectRunner"],
    )
    summary = bp.run(config)
    print(summary.format())
    summary.stage("Trainer").status          # StageStatus.OK

    # A nightly job with a stage of your own after the bundled ones:
    bp.run(config, graph=(*bp.STAGE_GRAPH, MyStage()))
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.events import RunEvents
from beam_pipeline.engine.stage import Stage
from beam_pipeline.engine.summary import RunSummary
from beam_pipeline.stages.graph import STAGE_GRAPH

__all__ = ["make_config", "run", "STAGE_GRAPH"]


def make_config(
    settings: Optional[Mapping[str, Any]] = None,
    *,
    beam_args: Sequence[str] = (),
    graph: Sequence[Stage] = STAGE_GRAPH,
    **more: Any,
) -> PipelineConfig:
    """A run's config from settings named as the flags are (``data``, ``train_steps``,
    ``no_tuner`` is ``tuner=False``), given as Python values or as the text a flag takes.

    Args:
      settings: the settings, a mapping (e.g. read from your own config source).
      beam_args: Beam's pipeline options, as flags (``["--runner=DirectRunner"]``).
      graph: the stages whose settings may be given (yours too).
      **more: more settings, as keywords (they win over ``settings``).

    Raises:
      PipelineError: a name that is no setting (with the closest one), or a bad value.
    """
    from beam_pipeline.flags import build_config, flag_table

    table = flag_table(graph)
    given = {**(settings or {}), **more}
    for name in given:
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PipelineError(
                f"make_config got {name!r}, which is no setting; {hint}use the command "
                "line's flag names without '--' (python -m beam_pipeline --help)."
            )
    return build_config(given, graph, table, beam_args=beam_args)


def run(
    config: PipelineConfig,
    *,
    graph: Optional[Sequence[Stage]] = None,
    events: Optional[RunEvents] = None,
    report: bool = True,
    quiet: bool = True,
) -> RunSummary:
    """Runs the pipeline ``config`` describes; returns its summary (also on disk as the run
    directory's ``summary.json``).

    Args:
      config: from :func:`make_config` (or the command line's parser).
      graph: the stages to run; default: ``config.graph`` (``--graph``) or the bundled ones.
      events: hears of the run's directory and each stage as it starts and ends.
      report: write the run's ``report.html``, also for a failed run (as the command line
        does).
      quiet: while the run goes, this process's stderr descriptor (which the processes it
        starts inherit) points at the run's ``run.log``, as the command line's does:
        TensorFlow's C++ lines, its libraries' log lines and notices go there, not onto
        your terminal. Python's logging and stdout stay yours (nothing is added to them).
        False: stderr is left alone.

    Raises:
      PipelineError: bad settings, inputs, module file or data; one sentence with the fix.
      Whatever a stage raised, after the run was recorded as failed.
    """
    import contextlib

    from beam_pipeline.console import OutputConfig, RunLog
    from beam_pipeline.pipeline import run as run_pipeline

    events = events if events is not None else RunEvents()
    log = RunLog(OutputConfig(), for_api=True) if quiet else None
    with log if log is not None else contextlib.nullcontext():
        if log is not None:
            events.subscribe(run_started=log.attach)
        try:
            return run_pipeline(config, events, graph)
        finally:
            if report and events.run_dir:  # a failed run's report too: it shows what exists
                from beam_pipeline.report import write_report

                write_report(events.run_dir, events.graph or None)
