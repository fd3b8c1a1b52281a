"""What the data stages read back from a finished Beam job: counters and the job's note.

Example::

    rows = counter(result, "example_gen.rows_read")
    note = job_note(wait_for_job(result, options, "Transform"))  # '' on this machine
"""

from __future__ import annotations

from apache_beam.metrics.metric import MetricsFilter

from beam_pipeline.remote import JobInfo
from transforms.metrics import NAMESPACE

__all__ = ["counter", "job_note"]


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
