"""What the data stages tell of a Beam job: that it was submitted (with its link and a
way to read its counters while it runs), its counters once finished, and its note.

Example::

    result = run_pipeline(p, "Transform", timeout)
    announce_job(ctx, result)          # the progress line shows its link (and live rows)
    rows = counter(result, "example_gen.rows_read")
    note = job_note(wait_for_job(result, options, "Transform"))  # '' on this machine
"""

from __future__ import annotations

from apache_beam.metrics.metric import MetricsFilter

from beam_pipeline.runtime.counters import live_counters
from beam_pipeline.runtime.runners import JobInfo, job_info
from transforms.metrics import NAMESPACE

__all__ = ["announce_job", "counter", "job_note"]


def announce_job(ctx, result) -> None:
    """Tells the run's listeners (the progress display) that the running stage's job was
    submitted: its id and console link, and where the runner reports them, its counters.

    Call it right after ``run_pipeline``: on Dataflow and portable runners the job is
    running then; on the DirectRunner it has already ended (nothing live to show).

    Args:
      ctx: the stage's :class:`~beam_pipeline.engine.stage.StageContext`.
      result: what ``run_pipeline`` returned.
    """
    stage = ctx.stage  # two may run at once
    ctx.events.job_submitted(
        job_info(result, ctx.options), live_counters(result, ctx.options), stage=stage
    )


def counter(result, name: str) -> int:
    """The committed value of one of this project's Beam counters (0 when never set)."""
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))
    return int(sum(c.committed or 0 for c in found["counters"]))


def job_note(job: JobInfo) -> str:
    """The job id and link for a stage's note; empty for a run on this machine."""
    if not job.job_id and not job.url and not job.note.startswith("dry run"):
        return ""
    text = f"{job.runner} job {job.job_id}" if job.job_id else job.runner
    return text + (f": {job.url}" if job.url else "") + (f" ({job.note})" if job.note else "")
