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
import hashlib
import io
import logging
import os
import posixpath
import re
import shutil
import tempfile
import uuid
import zipfile
from typing import Any, Optional

from beam_pipeline.errors import PipelineError

__all__ = [
    "DEFAULT_MAX_MODULE_FOLDER_MIB",
    "MODULE_DIR",
    "MODULE_FOLDER_ARCHIVE",
    "ModuleBundle",
    "JobInfo",
    "StagedModule",
    "bundle_module_file",
    "check_remote_paths",
    "dataflow_console_url",
    "describe_job",
    "fetch_module_folder",
    "fetch_staged_module",
    "is_local_path",
    "job_info",
    "read_staged_module",
    "remote_runner_reason",
    "stage_module_file",
    "wait_for_job",
]

_LOG = logging.getLogger(__name__)

# Folder of the run directory that holds the staged module files, one per sha256.
MODULE_DIR = "module"
# File name of the staged archive of the module file's folder (in its own sha256 folder).
MODULE_FOLDER_ARCHIVE = "module_folder.zip"
# Default of --max_module_folder_mib: the Python files of a module's folder are small; a
# folder above this is most likely a whole project (or a home folder) by mistake.
DEFAULT_MAX_MODULE_FOLDER_MIB = 20.0
# Not staged from the module's folder: caches and hidden folders (.git, .venv, ...).
_SKIPPED_NAMES = ("__pycache__",)

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
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return ""
    if not isinstance(runner, str):  # a runner instance
        runner = type(runner).__name__
    return runner.rsplit(".", 1)[-1]


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
    from apache_beam.options import pipeline_options as po

    name = _runner_name(options)
    kind = name.lower()
    if kind in _IN_PROCESS_RUNNERS:
        return None
    if kind in _DATAFLOW_RUNNERS:
        return f"--runner={name} runs on Google Cloud workers"
    if kind not in _PORTABLE_RUNNERS:
        return f"--runner={name} is not a runner known to run on this machine"

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
    ``--pipeline_root``, ``--data`` (or every ``--input_splits`` pattern) and
    ``--base_model``, which workers read or write. ``--module_file``, ``--schema`` and
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
    data = config.data
    paths = [("--pipeline_root", config.pipeline_root)]
    if data.input_splits:
        paths += [("--input_splits", f"{split.value}={p}") for split, p in data.input_splits]
    else:
        paths.append(("--data", data.data))
    paths.append(("--base_model", config.trainer.base_model or ""))
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
class StagedModule:
    """A module file and its folder's Python files copied into the run directory.

    Attributes:
      path: the staged module file, ``<run_dir>/module/<sha256>/<file name>``.
      sha256: hex sha256 of its bytes; workers refuse a copy that does not match.
      source: the module file as the user named it (for messages and tracebacks).
      folder_archive: the zip of the module's folder (its ``.py`` files and packages,
        the module file included), ``<run_dir>/module/<folder_sha256>/module_folder.zip``;
        empty when not staged.
      folder_sha256: hex sha256 of the archive's bytes.
    """

    path: str
    sha256: str
    source: str
    folder_archive: str = ""
    folder_sha256: str = ""


def _gfile():
    import tensorflow as tf  # gfile reads and writes gs:// as well as local paths

    return tf.io.gfile


def _join(*parts: str) -> str:
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def _read_bytes(path: str, flag: str) -> bytes:
    gfile = _gfile()
    if not gfile.exists(path):
        raise PipelineError(
            f"{flag} {path} does not exist; pass an existing Python file with --module_file."
        )
    with gfile.GFile(path, "rb") as f:
        return f.read()


def _folder_python_files(folder: str, module_name: str, limit: int) -> dict[str, str]:
    """``{path in the archive: file}`` of what is staged from a module file's folder.

    As TFX's wheel of the module's folder (``py_modules`` of its ``.py`` files, plus its
    packages): the folder's ``.py`` files and every package below it (a folder with an
    ``__init__.py``, recursively), without ``__pycache__`` or hidden entries. Data files
    are not staged. Walking stops as soon as the files exceed ``limit`` bytes.

    Raises:
      PipelineError: the files exceed ``limit`` bytes (the message names the folder).
    """
    gfile = _gfile()
    files: dict[str, str] = {}
    total = 0

    def add(rel: str, path: str) -> None:
        nonlocal total
        total += gfile.stat(path).length
        if total > limit:
            raise PipelineError(
                f"The folder {folder} of --module_file {module_name} holds more than "
                f"{limit / 2**20:g} MiB of Python files to stage for the workers; put the "
                "module file and the helper modules it imports in a folder of their own, or "
                "raise --max_module_folder_mib."
            )
        files[rel] = path

    def visible(name: str) -> bool:
        return not name.startswith(".") and name not in _SKIPPED_NAMES

    def walk_package(rel_dir: str, path: str) -> None:
        for name in sorted(gfile.listdir(path)):
            name = name.rstrip("/")
            if not visible(name):
                continue
            child = _join(path, name)
            rel = f"{rel_dir}/{name}"
            if gfile.isdir(child):
                if gfile.exists(_join(child, "__init__.py")):
                    walk_package(rel, child)
            elif name.endswith(".py"):
                add(rel, child)

    for name in sorted(gfile.listdir(folder)):
        name = name.rstrip("/")
        if not visible(name):
            continue
        child = _join(folder, name)
        if gfile.isdir(child):
            if gfile.exists(_join(child, "__init__.py")):
                walk_package(name, child)
        elif name.endswith(".py"):
            add(name, child)
    return files


def _zip(files: dict[str, bytes]) -> bytes:
    """A zip of ``files`` whose bytes depend on their names and contents only.

    Sorted names, a fixed timestamp and mode: the same folder gives the same archive, so
    its sha256 names its content (a rerun reuses the staged copy).
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def _write_once(path: str, data: bytes, digest: str) -> None:
    """Writes ``data`` to ``path`` (temp name + rename) unless a matching copy is there."""
    gfile = _gfile()
    if gfile.exists(path):
        with gfile.GFile(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == digest:
                return
    gfile.makedirs(posixpath.dirname(path) if "://" in path else os.path.dirname(path))
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with gfile.GFile(tmp, "wb") as f:
        f.write(data)
    gfile.rename(tmp, path, overwrite=True)


@dataclasses.dataclass(frozen=True)
class ModuleBundle:
    """A module file and its folder's Python files, read and checked, not yet written.

    Made by :func:`bundle_module_file` before the run directory exists (so a folder too
    big fails before anything is written); :meth:`stage` writes it into a run directory.

    Attributes:
      module_file: the module file as the user named it.
      data / sha256: its bytes and their sha256.
      archive / archive_sha256: the zip of its folder's Python files and its sha256.
    """

    module_file: str
    data: bytes
    sha256: str
    archive: bytes
    archive_sha256: str

    def stage(self, run_root: str) -> StagedModule:
        """Writes the module file and the archive under ``<run_root>/module/``.

        Each copy is written to a temporary name and renamed, so a reader never sees half
        a file; a copy already there with the right sha256 is kept.
        """
        name = posixpath.basename(self.module_file.replace("\\", "/"))
        path = _join(run_root, MODULE_DIR, self.sha256, name)
        archive = _join(run_root, MODULE_DIR, self.archive_sha256, MODULE_FOLDER_ARCHIVE)
        _write_once(path, self.data, self.sha256)
        _write_once(archive, self.archive, self.archive_sha256)
        return StagedModule(path, self.sha256, self.module_file, archive, self.archive_sha256)


def bundle_module_file(
    module_file: str, max_folder_mib: float = DEFAULT_MAX_MODULE_FOLDER_MIB
) -> ModuleBundle:
    """Reads ``module_file`` and zips the Python files of its folder, for :meth:`stage`.

    The archive holds the folder's ``.py`` files and its packages (folders with an
    ``__init__.py``), as TFX's wheel of the module's folder does, the module file included
    with the very bytes read here; its bytes depend only on the files' names and contents,
    so its sha256 names its content.

    Raises:
      PipelineError: the module file does not exist, or its folder's Python files exceed
        ``max_folder_mib`` MiB.
    """
    data = _read_bytes(module_file, "--module_file")
    name = posixpath.basename(module_file.replace("\\", "/"))
    folder = (
        posixpath.dirname(module_file)
        if "://" in module_file
        else os.path.dirname(os.path.abspath(module_file))
    )
    limit = int(max_folder_mib * 2**20)
    contents = {
        rel: data if rel == name else _read_bytes(path, "Module folder file")
        for rel, path in _folder_python_files(folder, module_file, limit).items()
    }
    contents[name] = data  # also when its name does not end in .py
    archive = _zip(contents)
    return ModuleBundle(
        module_file,
        data,
        hashlib.sha256(data).hexdigest(),
        archive,
        hashlib.sha256(archive).hexdigest(),
    )


def stage_module_file(
    module_file: str,
    run_root: str,
    max_folder_mib: float = DEFAULT_MAX_MODULE_FOLDER_MIB,
) -> StagedModule:
    """Copies ``module_file`` and its folder's Python files into ``<run_root>/module/``.

    The module file goes to ``<run_root>/module/<sha256>/<file name>``; the ``.py`` files
    and packages of its folder (the helper modules it imports, as in TFX's penguin example)
    go, as one zip, to ``<run_root>/module/<archive sha256>/module_folder.zip``. Both sit
    beside the run's artifacts, so every worker that can read the run directory (gs:// on
    Dataflow) can read them, and both are named by their content, so a rerun of the same
    ``--run_id`` with an edited module or helper stages distinct copies.
    ``bundle_module_file(module_file, max_folder_mib).stage(run_root)``.

    Args:
      module_file: the user's module file (local or gs://).
      run_root: the run directory (``RunDirectory.root``).
      max_folder_mib: the most the folder's Python files may weigh (``--max_module_folder_mib``).

    Returns:
      the :class:`StagedModule` (paths and sha256s) to hand to the workers.

    Raises:
      PipelineError: as :func:`bundle_module_file`.
    """
    return bundle_module_file(module_file, max_folder_mib).stage(run_root)


def read_staged_module(path: str, sha256: str) -> bytes:
    """The bytes of a staged module file, checked against the run's fingerprint.

    Args:
      path: the staged copy (:attr:`StagedModule.path`).
      sha256: the fingerprint the run recorded (:attr:`StagedModule.sha256`).

    Raises:
      PipelineError: the file is missing or its sha256 differs (it was changed after the
        run staged it).
    """
    data = _read_bytes(path, "Staged module file")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise PipelineError(
            f"Staged module file {path} has sha256 {actual[:12]}, not {sha256[:12]} as this "
            "run fingerprinted, so it was changed after staging; start a new run (a new "
            "--run_id) instead of editing files in a run directory."
        )
    return data


def fetch_staged_module(path: str, sha256: str, local_dir: Optional[str] = None) -> str:
    """A local copy of a staged module file whose bytes match ``sha256``; on a worker.

    The copy is ``<local_dir>/<sha256>/<file name>`` (``local_dir`` defaults to
    ``<tmp>/beam_pipeline_modules``); an existing, matching copy is reused, so the many
    trials of a tuning round on one worker read the staged file once. Loading this copy
    executes exactly the verified bytes (no second read of the shared file).

    Args:
      path: the staged copy (:attr:`StagedModule.path`, local or gs://).
      sha256: the fingerprint the run recorded.
      local_dir: where to keep verified copies.

    Returns:
      the local path to load (e.g. with ``trainer.load_trainer_module``).

    Raises:
      PipelineError: as :func:`read_staged_module`.
    """
    local_dir = local_dir or os.path.join(tempfile.gettempdir(), "beam_pipeline_modules")
    folder = os.path.join(local_dir, sha256)
    local = os.path.join(folder, posixpath.basename(path))
    if os.path.exists(local):
        with open(local, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == sha256:
                return local
    data = read_staged_module(path, sha256)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{local}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, local)
    return local


def fetch_module_folder(archive: str, sha256: str, local_dir: Optional[str] = None) -> str:
    """A local folder holding the staged module folder's files; on a worker.

    The archive is read once, checked against ``sha256`` and unpacked into
    ``<local_dir>/<sha256>/`` (``local_dir`` defaults to ``<tmp>/beam_pipeline_modules``)
    through a temporary folder renamed into place, so a folder of that name is always
    complete and the many trials of one worker unpack it once. The caller puts the folder
    on ``sys.path`` (:func:`trainer.load_trainer_module` does), so the module's helper
    modules import as they do beside the user's file.

    Args:
      archive: the staged archive (:attr:`StagedModule.folder_archive`, local or gs://).
      sha256: its fingerprint (:attr:`StagedModule.folder_sha256`).
      local_dir: where to keep unpacked folders.

    Returns:
      the local folder.

    Raises:
      PipelineError: the archive is missing or its sha256 differs.
    """
    local_dir = local_dir or os.path.join(tempfile.gettempdir(), "beam_pipeline_modules")
    folder = os.path.join(local_dir, sha256)
    if os.path.isdir(folder):
        return folder
    data = read_staged_module(archive, sha256)
    os.makedirs(local_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{sha256[:12]}.tmp-", dir=local_dir)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(tmp)
        os.rename(tmp, folder)
    except OSError:
        if not os.path.isdir(folder):  # not a worker beside us that unpacked it first
            raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


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
    kind = runner.lower()
    if kind in _DATAFLOW_RUNNERS:
        if options.view_as(po.TestOptions).dry_run or not hasattr(result, "job_id"):
            return JobInfo(runner, note="dry run: job graph built, nothing submitted")
        job_id = result.job_id() or ""
        gcp = options.view_as(po.GoogleCloudOptions)
        url = dataflow_console_url(job_id, gcp.region, gcp.project) if job_id else ""
        return JobInfo(runner, job_id, url)
    if kind in _PORTABLE_RUNNERS:
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
    except PipelineError:  # already one sentence (beam_pipeline.watchdog: no live worker)
        raise
    except Exception as e:  # noqa: BLE001  any runner's failure; re-raised with the job's link
        if not remote:
            raise
        raise PipelineError(
            f"The {what} job failed on {describe_job(result, options)} "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}); "
            "read the worker logs of that job, fix the cause and rerun with the same --run_id."
        ) from e
    if state in (PipelineState.FAILED, PipelineState.CANCELLED, PipelineState.STOPPED):
        raise PipelineError(
            f"The {what} job ended {state} on {describe_job(result, options)}; read the worker "
            "logs of that job, fix the cause and rerun with the same --run_id."
        )
    return info
