"""Running on workers that are not this machine: path checks, module staging, job links.

A run on Dataflow, Flink, Spark or another portable runner executes its Beam steps on
workers that do not share the launching machine's disk or Python process. This module
holds what the orchestrator needs for that:

- :func:`check_remote_paths` refuses, before any job is created, a runner whose workers
  cannot read this machine's files together with a local ``--pipeline_root`` or local
  input data (see :func:`remote_runner_reason` for which runners count as remote).
- :func:`stage_module_file` copies the user's module file beside the run's artifacts, as
  ``<run_dir>/module/<sha256>/<file name>``, and the Python files of its folder (the helper
  modules it may import, as TFX's wheel of the module's folder) as one zip archive,
  ``<run_dir>/module/<sha256 of the archive>/module_folder.zip``; workers load them with
  :func:`fetch_staged_module` and :func:`fetch_module_folder`, which refuse any copy whose
  sha256 is not the one the run fingerprinted, so every worker runs exactly the code the
  launcher checked.
- :func:`wait_for_job`, :func:`job_info` and :func:`describe_job` give each submitted
  job's id and console link (logged as soon as the job is submitted, so a user can watch a
  long Dataflow job while the launcher waits).

Example::

    options = parse_beam_args(config.beam_args)
    check_remote_paths(config, options)          # before RunDirectory.create
    run_dir = RunDirectory.create(config.pipeline_root, config.run_id)
    staged = stage_module_file(config.module_file, run_dir.root)
    ...
    result = p.run()
    job = wait_for_job(result, options, "Transform")  # logs the id and link at submission
    describe_job(result, options)
    # 'DataflowRunner job 2026-01-01_00_00_00-123: https://console.cloud.google.com/...'

    # on a worker:
    local_path = fetch_staged_module(staged.path, staged.sha256)
    folder = fetch_module_folder(staged.folder_archive, staged.folder_sha256)
    # (trainer.load_trainer_module(..., staged=staged) does both and adds the folder to
    # sys.path, so the module's helper modules import)

Beam and TensorFlow are imported inside the functions: the worker-side helpers are called
from :mod:`trainer`, which must stay importable without Beam.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError, first_line
from beam_pipeline.runtime.beam_flags import option

__all__ = [
    "JobInfo",
    "RunnerFamily",
    "check_remote_paths",
    "dataflow_console_url",
    "describe_job",
    "is_local_path",
    "job_info",
    "remote_runner_reason",
    "worker_per_element",
    "runner_family",
    "wait_for_job",
]

_LOG = logging.getLogger(__name__)

# Runner names (the last part of a class path, lower case) by where their workers run.
_IN_PROCESS_RUNNERS = {
    "",
    "direct",
    "directrunner",
    "switchingdirectrunner",
    "bundlebaseddirectrunner",
    "testdirectrunner",
    "fnapirunner",
    "prism",
    "prismrunner",
    "interactiverunner",
}
_DATAFLOW_RUNNERS = {"dataflow", "dataflowrunner", "testdataflowrunner"}
_PORTABLE_RUNNERS = {
    "portable",
    "portablerunner",
    "flink",
    "flinkrunner",
    "spark",
    "sparkrunner",
}
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}
_FLINK_IN_PROCESS = {"[local]", "[auto]"}  # Beam's FlinkRunner MAGIC_HOST_NAMES
_SPARK_LOCAL = re.compile(r"^local(\[.+\])?$")  # Beam's SparkRunner LOCAL_MASTER_PATTERN


def _runner_name(options) -> str:
    runner = option(options, "StandardOptions", "runner")
    if runner is None:
        return ""
    if not isinstance(runner, str):  # a runner instance
        runner = type(runner).__name__
    return runner.rsplit(".", 1)[-1]


class RunnerFamily(enum.Enum):
    """How a runner runs its jobs, as far as the launcher can talk to them."""

    IN_PROCESS = "in_process"  # DirectRunner, FnApiRunner, Prism: in (or under) this process
    DATAFLOW = "dataflow"  # Google Cloud Dataflow, through its API
    PORTABLE = "portable"  # PortableRunner, Flink, Spark: a Beam job service
    OTHER = "other"  # a runner class this module does not know


def runner_family(options) -> RunnerFamily:
    """The :class:`RunnerFamily` of ``options``' ``--runner``."""
    kind = _runner_name(options).lower()
    if kind in _IN_PROCESS_RUNNERS:
        return RunnerFamily.IN_PROCESS
    if kind in _DATAFLOW_RUNNERS:
        return RunnerFamily.DATAFLOW
    if kind in _PORTABLE_RUNNERS:
        return RunnerFamily.PORTABLE
    return RunnerFamily.OTHER


# Dataflow runs one Python SDK process per vCPU and several bundles per process unless
# told otherwise (apache_beam/runners/dataflow/internal/apiclient.py adds
# use_multiple_sdk_containers); a trial, a search loop or a training worker must have
# its worker to itself.
_ONE_SDK_PROCESS = "no_use_multiple_sdk_containers"


def worker_per_element(options: Any, elements: int) -> Any:
    """A copy of ``options`` whose Dataflow job runs its ``elements`` elements (trials,
    search loops, training workers) one per worker VM, each VM running one at a time;
    other runners' options unchanged.

    Left to itself, Dataflow sizes a batch job by its input, and a job of a few long
    elements is small input: it would start one worker and run several trials at once on
    its vCPUs (and share its GPU) while the others wait. So the job gets exactly
    ``elements`` workers (no autoscaling: there is never more work than that) and one SDK
    process with one harness thread per worker. The user's ``--num_workers`` /
    ``--max_num_workers`` / ``--number_of_worker_harness_threads`` are meant for the data
    stages and are replaced for this job only.
    """
    import copy

    from apache_beam.options import pipeline_options as po

    own = copy.deepcopy(options)  # the caller's options serve the other jobs unchanged
    if runner_family(own) is not RunnerFamily.DATAFLOW:
        return own
    workers = own.view_as(po.WorkerOptions)
    workers.num_workers = elements
    workers.max_num_workers = elements
    workers.autoscaling_algorithm = "NONE"
    debug = own.view_as(po.DebugOptions)
    debug.number_of_worker_harness_threads = 1
    if _ONE_SDK_PROCESS not in (debug.experiments or []):
        debug.add_experiment(_ONE_SDK_PROCESS)
    return own


def _host(address: Optional[str]) -> str:
    """The host part of ``host:port``, ``http://host:port/...`` or ``[v6]:port``."""
    if not address:
        return ""
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        return rest[: rest.find("]") + 1] if "]" in rest else rest
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def _is_local_host(address: Optional[str]) -> bool:
    return _host(address).lower() in _LOCAL_HOSTS


def remote_runner_reason(options) -> Optional[str]:
    """Why the workers of ``options``' runner cannot read this machine's files, or None.

    The rule, runner by runner:

    - DirectRunner, FnApiRunner, PrismRunner, InteractiveRunner: the workers run on this
      machine (threads or subprocesses), so local paths work: None.
    - DataflowRunner: Google Cloud workers: always remote.
    - PortableRunner, FlinkRunner, SparkRunner: decided by where the SDK workers run.
      ``--environment_type=LOOPBACK`` runs them inside this process: local. ``DOCKER``
      (Beam's default for a cluster) runs them in containers that do not see this
      machine's files, even on this machine: remote. ``PROCESS`` and ``EXTERNAL`` are local
      only when the runner itself runs here (``--job_endpoint=embed`` or a localhost
      endpoint, ``--flink_master=[local]``/``[auto]``/localhost, a ``local[N]`` or
      localhost Spark master) and, for EXTERNAL, the worker pool address is localhost.
    - Any other runner (a class path this module does not know): remote, to be safe.

    Args:
      options: the run's ``PipelineOptions``.

    Returns:
      None when the workers share this machine's disk; otherwise a phrase for an error
      message, such as ``"--runner=DataflowRunner runs on Google Cloud workers"``.
    """
    name = _runner_name(options)
    kind, family = name.lower(), runner_family(options)
    if family is RunnerFamily.IN_PROCESS:
        return None
    if family is RunnerFamily.DATAFLOW:
        return f"--runner={name} runs on Google Cloud workers"
    if family is not RunnerFamily.PORTABLE:
        return f"--runner={name} is not a runner known to run on this machine"
    from apache_beam.options import pipeline_options as po

    portable = options.view_as(po.PortableOptions)
    env = (portable.environment_type or "").upper()
    if kind.startswith("flink"):
        master = options.view_as(po.FlinkRunnerOptions).flink_master
        runner_here = master in _FLINK_IN_PROCESS or _is_local_host(master)
        where = f"--flink_master={master}"
        if not env and master in _FLINK_IN_PROCESS:
            env = "LOOPBACK"  # what Beam's FlinkRunner picks for an in-process Flink
    elif kind.startswith("spark"):
        master = options.view_as(po.SparkRunnerOptions).spark_master_url
        runner_here = bool(_SPARK_LOCAL.match(master)) or _is_local_host(master)
        where = f"--spark_master_url={master}"
        if not env and _SPARK_LOCAL.match(master):
            env = "LOOPBACK"  # what Beam's SparkRunner picks for a local master
    else:
        endpoint = portable.job_endpoint
        runner_here = endpoint == "embed" or _is_local_host(endpoint)
        where = f"--job_endpoint={endpoint}"
    env = {"": "DOCKER", "BEAM:ENV:DOCKER:V1": "DOCKER", "BEAM:ENV:PROCESS:V1": "PROCESS"}.get(
        env, "EXTERNAL" if env == "BEAM:ENV:EXTERNAL:V1" else env
    )
    if env == "LOOPBACK":
        return None
    if not runner_here:
        return f"--runner={name} runs on the cluster at {where}"
    if env == "DOCKER":
        return (
            f"--runner={name} with --environment_type=DOCKER (Beam's default) runs its "
            "workers in containers"
        )
    if env == "EXTERNAL" and not _is_local_host(portable.environment_config):
        return (
            f"--runner={name} runs its workers at "
            f"--environment_config={portable.environment_config}"
        )
    return None


def is_local_path(path: str) -> bool:
    """True for a path on this machine's disk (no scheme, or ``file://``)."""
    return "://" not in path or path.startswith("file://")


def check_remote_paths(config, options) -> None:
    """Refuses a remote runner with artifacts or inputs on this machine's disk.

    Call it right after parsing the Beam flags, before creating the run directory or any
    Beam job. Checked, when the runner is remote (:func:`remote_runner_reason`):
    ``--pipeline_root``, ``--data`` (or every ``--input_splits`` pattern),
    ``--base_model``, ``--infer_data`` and an ``--infer_model`` folder, which workers read or
    write. ``--module_file``, ``--schema`` and
    ``--hyperparameters`` may stay local: the launcher reads them (the module file is
    then staged into the run directory by :func:`stage_module_file`).

    Args:
      config: the run's ``PipelineConfig``.
      options: the run's ``PipelineOptions``.

    Raises:
      PipelineError: one of those paths is local and the runner's workers cannot read it.
    """
    reason = remote_runner_reason(options)
    if reason is None:
        return
    # Every setting declared a path the workers read (Setting.worker_path).
    paths = []
    for _, _, setting, value in config.settings():
        if not setting.worker_path or not value or value in setting.keywords:
            continue
        flag = f"--{setting.flag}"
        if isinstance(value, tuple):  # (split, pattern) pairs: --input_splits
            paths += [(flag, f"{split.value}={p}") for split, p in value]
        else:
            paths.append((flag, str(value)))
    # The run's root and its input data first: the first thing to fix.
    paths.sort(key=lambda p: p[0] not in ("--pipeline_root", "--data", "--input_splits"))
    for flag, value in paths:
        path = value.split("=", 1)[1] if flag == "--input_splits" else value
        if path and is_local_path(path):
            example = "train=gs://BUCKET/..." if flag == "--input_splits" else "gs://BUCKET/..."
            raise PipelineError(
                f"{flag} {value} is on this machine's disk, but {reason}, which cannot read "
                f"it; pass {flag}={example} (storage every worker reads) or run with "
                "--runner=DirectRunner."
            )


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """Where a submitted Beam job runs and how to look at it.

    Attributes:
      runner: the runner's name (``DataflowRunner``, ``FlinkRunner``, ...).
      job_id: the runner's job id; empty when the runner has none (DirectRunner, dry run).
      url: a console or web UI link; empty when there is none.
      note: what happened when there is no job to look at (e.g. a dry run).
    """

    runner: str
    job_id: str = ""
    url: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def dataflow_console_url(job_id: str, region: str, project: str) -> str:
    """The Cloud console page of a Dataflow job.

    Example::

        dataflow_console_url("2026-01-01_01_02_03-123", "us-central1", "my-project")
        # https://console.cloud.google.com/dataflow/jobs/us-central1/2026-01-01_01_02_03-123?project=my-project
    """
    return f"https://console.cloud.google.com/dataflow/jobs/{region}/{job_id}?project={project}"


def job_info(result, options) -> JobInfo:
    """The :class:`JobInfo` of a ``PipelineResult`` returned by ``pipeline.run()``.

    Dataflow: ``result.job_id()`` and the console link (project and region from the
    options). A ``--dry_run`` Dataflow result has no job: its note says so. Portable
    runners: the job service's job id (Beam's id, not Flink's or Spark's own), and for a
    Flink cluster its web UI. DirectRunner: no id.
    """
    from apache_beam.options import pipeline_options as po

    runner = _runner_name(options) or "DirectRunner"
    kind, family = runner.lower(), runner_family(options)
    if family is RunnerFamily.DATAFLOW:
        if options.view_as(po.TestOptions).dry_run or not hasattr(result, "job_id"):
            return JobInfo(runner, note="dry run: job graph built, nothing submitted")
        job_id = result.job_id() or ""
        gcp = options.view_as(po.GoogleCloudOptions)
        url = dataflow_console_url(job_id, gcp.region, gcp.project) if job_id else ""
        return JobInfo(runner, job_id, url)
    if family is RunnerFamily.PORTABLE:
        # Beam's portable PipelineResult keeps the job service's id only privately.
        job_id = str(getattr(result, "_job_id", "") or "")
        url = ""
        if kind.startswith("flink"):
            master = options.view_as(po.FlinkRunnerOptions).flink_master
            if master not in _FLINK_IN_PROCESS:
                url = master if "://" in master else f"http://{master}"
        return JobInfo(runner, job_id, url)
    return JobInfo(runner, note="ran on this machine")


def describe_job(result, options) -> str:
    """One line for the run summary: the runner, the job id and its link.

    Example::

        describe_job(result, options)
        # 'DataflowRunner job 2026-01-01_01_02_03-123: https://console.cloud.google.com/...'
    """
    info = job_info(result, options)
    text = f"{info.runner} job {info.job_id}" if info.job_id else info.runner
    if info.url:
        text += f": {info.url}"
    if info.note:
        text += f" ({info.note})"
    return text


def wait_for_job(result, options, what: str) -> JobInfo:
    """Logs the job's id and link at once, waits for it, and names the link on failure.

    Args:
      result: what ``pipeline.run()`` returned.
      options: the run's ``PipelineOptions``.
      what: the job's name in messages, e.g. ``"ExampleGen+Statistics"``.

    Returns:
      the finished job's :class:`JobInfo` (for ``StageReport.details``).

    Raises:
      PipelineError: the job failed or was cancelled on a remote runner; the message names
        the job and where its worker logs are. On in-process runners the runner's own
        exception propagates unchanged (its traceback is the useful part).
    """
    from apache_beam.runners.runner import PipelineState

    info = job_info(result, options)
    _LOG.info("%s job submitted: %s", what, describe_job(result, options))
    remote = remote_runner_reason(options) is not None
    try:
        state = result.wait_until_finish()
    except PipelineError:  # already one sentence (beam_pipeline.runtime.watchdog: no live worker)
        raise
    except Exception as e:  # noqa: BLE001  any runner's failure; re-raised with the job's link
        if not remote:
            raise
        raise PipelineError(
            f"The {what} job failed on {describe_job(result, options)} "
            f"({type(e).__name__}: {first_line(e)}); "
            "read the worker logs of that job, fix the cause and rerun with the same --run_id."
        ) from e
    if state in (PipelineState.FAILED, PipelineState.CANCELLED, PipelineState.STOPPED):
        raise PipelineError(
            f"The {what} job ended {state} on {describe_job(result, options)}; read the worker "
            "logs of that job, fix the cause and rerun with the same --run_id."
        )
    return info
