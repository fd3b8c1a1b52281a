"""Scale-out runners without a cloud account.

- Which runners count as remote, and the up-front refusal of local paths with them.
- The module file staged beside the run's artifacts and verified by its sha256.
- Job ids and console links.
- Dataflow: the job graphs of the data phase, the Transform phase and the training step,
  built offline (``--dry_run``) from the orchestrator's own builders, and checked on the
  pipeline proto Dataflow would receive: the steps, the container image, the resource hints
  (on the training step only), the staged module; and every pickled function and coder of
  those graphs is loaded in a fresh process, as a Dataflow worker would.
- Portable runners (what Flink and Spark execute): the whole pipeline runs on
  ``PortableRunner --job_endpoint=embed --environment_type=EXTERNAL`` against the README's
  worker pool in ``tests/test_tfx_modules.py`` (with TFX's own penguin module file).
"""

from __future__ import annotations

import base64
import bz2
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zlib

import pytest
from conftest import PENGUIN_DIR, REPO, TESTDATA, dataflow_environment

from beam_pipeline.config import DataConfig, PipelineConfig, TrainerConfig, TunerConfig
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import (
    fetch_module_folder,
    fetch_staged_module,
    read_staged_module,
    stage_module_file,
)
from beam_pipeline.core.types import DataFormat, Split
from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
from beam_pipeline.runtime.runners import (
    JobInfo,
    check_remote_paths,
    dataflow_console_url,
    describe_job,
    job_info,
    remote_runner_reason,
)

MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")
PENGUINS = os.path.join(PENGUIN_DIR, "penguins.csv")
IMAGE = "us-central1-docker.pkg.dev/placeholder-project/beam/beam-pipeline:0.1.0"
ACCELERATOR = "type:nvidia-l4;count:1;install-nvidia-driver"
T4 = "type:nvidia-tesla-t4;count:1;install-nvidia-driver"
ACCELERATOR_URN = "beam:resources:accelerator:v1"
MIN_RAM_URN = "beam:resources:min_ram_bytes:v1"
# Placeholders: --dry_run builds the job without credentials (bucket names need 3+
# characters, or Beam looks for a default bucket online).
DATAFLOW = (
    "--runner=DataflowRunner",
    "--dry_run=True",
    "--project=placeholder-project",
    "--region=us-central1",
    "--temp_location=gs://placeholder-bucket/tmp",
)
RUN_ROOT = "gs://placeholder-bucket/runs"


# --- which runners are remote -------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, remote",
    [
        ([], False),
        (["--runner=DirectRunner", "--direct_running_mode=multi_processing"], False),
        (["--runner=PrismRunner"], False),
        (list(DATAFLOW), True),
        (["--runner=apache_beam.runners.dataflow.dataflow_runner.DataflowRunner"], True),
        (["--runner=PortableRunner", "--job_endpoint=embed"], True),  # DOCKER by default
        (["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"], False),
        (
            [
                "--runner=PortableRunner",
                "--job_endpoint=embed",
                "--environment_type=EXTERNAL",
                "--environment_config=localhost:50000",
            ],
            False,
        ),
        (
            [
                "--runner=PortableRunner",
                "--job_endpoint=embed",
                "--environment_type=EXTERNAL",
                "--environment_config=pool.internal:50000",
            ],
            True,
        ),
        (
            [
                "--runner=PortableRunner",
                "--job_endpoint=jobs.internal:8099",
                "--environment_type=PROCESS",
            ],
            True,
        ),
        (["--runner=FlinkRunner"], False),  # [auto]: in-process Flink, LOOPBACK workers
        (["--runner=FlinkRunner", "--flink_master=[local]", "--environment_type=DOCKER"], True),
        (["--runner=FlinkRunner", "--flink_master=flink.internal:8081"], True),
        (
            [
                "--runner=FlinkRunner",
                "--flink_master=flink.internal:8081",
                "--environment_type=EXTERNAL",
                "--environment_config=localhost:50000",
            ],
            True,  # the pool beside each task manager, on the cluster
        ),
        (["--runner=SparkRunner"], False),  # local[4]: LOOPBACK workers
        (["--runner=SparkRunner", "--spark_master_url=spark://spark.internal:7077"], True),
        (["--runner=mycompany.runners.CustomRunner"], True),
    ],
)
def test_which_runners_cannot_read_this_machines_files(flags, remote):
    reason = remote_runner_reason(parse_beam_args(flags))
    assert (reason is not None) is remote, reason


def _config(**data_kwargs) -> PipelineConfig:
    root = data_kwargs.pop("pipeline_root", RUN_ROOT)
    base_model = data_kwargs.pop("base_model", None)
    return PipelineConfig(
        data=DataConfig(**{"data": "gs://placeholder-bucket/penguins.csv", **data_kwargs}),
        module_file=MODULE,  # local on purpose: the launcher stages it
        pipeline_root=root,
        trainer=TrainerConfig(base_model=base_model),
    )


@pytest.mark.parametrize(
    "config, flags, match",
    [
        (
            _config(pipeline_root="pipeline_runs"),
            DATAFLOW,
            r"^--pipeline_root pipeline_runs is on this machine's disk, but --runner="
            r"DataflowRunner runs on Google Cloud workers, which cannot read it; pass "
            r"--pipeline_root=gs://BUCKET/\.\.\. ",
        ),
        (_config(data=PENGUINS), DATAFLOW, r"^--data .*penguins\.csv is on this machine's disk"),
        (
            _config(data="", input_splits=((Split.TRAIN, "gs://b/t*"), (Split.EVAL, "/d/e*"))),
            DATAFLOW,
            r"^--input_splits eval=/d/e\* is on this machine's disk.*--input_splits=train=gs://",
        ),
        (_config(base_model="/models/m"), DATAFLOW, r"^--base_model /models/m is on this"),
        (
            _config(pipeline_root="file:///tmp/runs"),
            ["--runner=FlinkRunner", "--flink_master=flink.internal:8081"],
            r"^--pipeline_root file:///tmp/runs .* runs on the cluster at "
            r"--flink_master=flink.internal:8081, which cannot read it",
        ),
        (
            _config(pipeline_root="/tmp/runs"),
            ["--runner=PortableRunner", "--job_endpoint=embed"],
            r"--environment_type=DOCKER \(Beam's default\) runs its workers in containers",
        ),
    ],
)
def test_remote_runner_with_local_paths_is_refused_in_one_sentence(config, flags, match):
    with pytest.raises(PipelineError, match=match) as e:
        check_remote_paths(config, parse_beam_args(list(flags)))
    one_sentence = re.search(r"\.\s+[A-Z]", str(e.value)) is None
    assert one_sentence and str(e.value).endswith(".")


@pytest.mark.parametrize(
    "config, flags",
    [
        (_config(), DATAFLOW),  # gs:// everywhere; the module file may stay local
        (_config(pipeline_root="pipeline_runs", data=PENGUINS), ["--runner=DirectRunner"]),
        (
            _config(pipeline_root="/tmp/runs", data=PENGUINS),
            ["--runner=FlinkRunner", "--flink_master=[local]"],
        ),
    ],
)
def test_shared_paths_or_local_runners_pass(config, flags):
    check_remote_paths(config, parse_beam_args(list(flags)))


def test_run_refuses_before_creating_anything(tmp_path):
    from beam_pipeline.pipeline import run

    root = tmp_path / "root"
    config = dataclasses.replace(
        _config(pipeline_root=str(root), data=PENGUINS), beam_args=DATAFLOW
    )
    with pytest.raises(PipelineError, match="--pipeline_root .* is on this machine's disk"):
        run(config)
    assert not root.exists()  # no run directory, no staged module, no job


# --- module staging -------------------------------------------------------------------------


def test_module_is_staged_by_content_and_workers_verify_it(tmp_path):
    module = tmp_path / "user" / "my_module.py"
    module.parent.mkdir()
    module.write_bytes(b"def run_fn(fn_args):\n    return None\n")
    run_root = str(tmp_path / "runs" / "r1")
    sha = hashlib.sha256(module.read_bytes()).hexdigest()

    staged = stage_module_file(str(module), run_root)

    assert staged.sha256 == sha and staged.source == str(module)
    assert staged.path == os.path.join(run_root, "module", sha, "my_module.py")
    assert open(staged.path, "rb").read() == module.read_bytes()
    assert stage_module_file(str(module), run_root) == staged  # a rerun: same copy
    assert read_staged_module(staged.path, sha) == module.read_bytes()

    # The user edits the file meanwhile: a new stage is a new copy, the old one is intact.
    module.write_bytes(b"def run_fn(fn_args):\n    return 1\n")
    edited = stage_module_file(str(module), run_root)
    assert edited.sha256 != sha and edited.path != staged.path
    assert read_staged_module(staged.path, sha).endswith(b"return None\n")

    # A worker gets a local copy of exactly the fingerprinted bytes, reused afterwards.
    cache = str(tmp_path / "worker_tmp")
    local = fetch_staged_module(staged.path, sha, local_dir=cache)
    assert local == os.path.join(cache, sha, "my_module.py")
    assert open(local, "rb").read().endswith(b"return None\n")
    assert fetch_staged_module(staged.path, sha, local_dir=cache) == local

    # A staged copy changed after staging is refused on the worker.
    with open(staged.path, "ab") as f:
        f.write(b"# edited in place\n")
    with pytest.raises(PipelineError, match=r"^Staged module file .* has sha256 \w{12}, not "):
        fetch_staged_module(staged.path, sha, local_dir=str(tmp_path / "other_worker"))
    with pytest.raises(PipelineError, match="--module_file .*missing.py does not exist"):
        stage_module_file(str(tmp_path / "missing.py"), run_root)


def _module_folder(folder, helper: str) -> str:
    """A module file that imports a helper module and a package beside it; returns its path."""
    folder.mkdir(parents=True)
    (folder / f"{helper}.py").write_text("GREETING = 'from the helper'\n")
    (folder / f"{helper}_pkg").mkdir()
    (folder / f"{helper}_pkg" / "__init__.py").write_text("")
    (folder / f"{helper}_pkg" / "tail.py").write_text("TAIL = '!'\n")
    module = folder / "my_module.py"
    module.write_text(
        f"import {helper}\n"
        f"from {helper}_pkg.tail import TAIL\n"
        "\n"
        "\n"
        "def greet():\n"
        f"    return {helper}.GREETING + TAIL\n"
        "\n"
        "\n"
        "def fail():\n"
        "    raise KeyError('species_xf')\n"
        "\n"
        "\n"
        "def preprocessing_fn(inputs):\n"
        "    return dict(inputs)\n"
    )
    # Not staged: data files, folders that are not packages, caches, hidden files.
    (folder / "data.csv").write_text("a,b\n1,2\n")
    (folder / "notes").mkdir()
    (folder / "notes" / "draft.py").write_text("")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".secret.py").write_text("")
    return str(module)


def test_module_folder_is_staged_by_content_and_its_helpers_import_on_a_worker(tmp_path):
    import zipfile

    module = _module_folder(tmp_path / "user", "staged_helper_a")
    run_root = str(tmp_path / "runs" / "r1")

    staged = stage_module_file(module, run_root)

    with open(staged.folder_archive, "rb") as f:
        archive = f.read()
    assert staged.folder_sha256 == hashlib.sha256(archive).hexdigest()
    assert staged.folder_archive == os.path.join(
        run_root, "module", staged.folder_sha256, "module_folder.zip"
    )
    with zipfile.ZipFile(staged.folder_archive) as z:
        assert sorted(z.namelist()) == [
            "my_module.py",
            "staged_helper_a.py",
            "staged_helper_a_pkg/__init__.py",
            "staged_helper_a_pkg/tail.py",
        ]
    assert stage_module_file(module, run_root) == staged  # same content: same copies
    # An edited helper is a new archive; the module file's own copy stays the same.
    (tmp_path / "user" / "staged_helper_a.py").write_text("GREETING = 'edited'\n")
    edited = stage_module_file(module, run_root)
    assert edited.sha256 == staged.sha256 and edited.folder_sha256 != staged.folder_sha256

    # A worker without the user's folder (deleted here; nothing of it was imported in this
    # process): the helpers import from the staged archive, and a traceback names the
    # user's file, not the staged copy.
    import traceback

    from trainer import load_trainer_module

    shutil.rmtree(tmp_path / "user")
    loaded = load_trainer_module(module, staged=staged).module
    assert loaded.greet() == "from the helper!"
    assert loaded.__file__.endswith(os.path.join(staged.folder_sha256, "my_module.py"))
    with pytest.raises(KeyError) as raised:
        loaded.fail()
    assert traceback.extract_tb(raised.value.__traceback__)[-1].filename == module

    # An archive changed after staging is refused.
    with open(staged.folder_archive, "ab") as f:
        f.write(b"tampered")
    with pytest.raises(PipelineError, match=r"^Staged module file .*module_folder.zip has sha256"):
        fetch_module_folder(staged.folder_archive, staged.folder_sha256, str(tmp_path / "w2"))


_UNPICKLE = textwrap.dedent(
    """
    import base64, json, sys
    from apache_beam.internal import pickler

    fn = pickler.loads(base64.b64decode(sys.argv[1]))
    print(json.dumps(fn({"bill": 1})))
    """
)


def test_helper_modules_travel_by_value_with_the_preprocessing_fn(tmp_path):
    """tf.Transform's jobs carry the preprocessing_fn pickled: a helper module it uses must
    travel with it to workers that never saw the module's folder."""
    from apache_beam.internal import pickler

    from beam_pipeline.core.user_module import get_preprocessing_fn, load_module

    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "pickled_helper_d.py").write_text("SUFFIX = '_xf'\n")
    module = folder / "module.py"
    module.write_text(
        "import pickled_helper_d\n\n\ndef preprocessing_fn(inputs):\n"
        "    return {k + pickled_helper_d.SUFFIX: v for k, v in inputs.items()}\n"
    )
    fn = get_preprocessing_fn(load_module(str(module)), str(module))
    payload = base64.b64encode(pickler.dumps(fn)).decode()
    shutil.rmtree(folder)
    done = subprocess.run(
        [sys.executable, "-c", _UNPICKLE, payload],
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == '{"bill_xf": 1}'


def test_a_module_folder_over_the_size_limit_is_refused_before_the_run_starts(tmp_path):
    from beam_pipeline.pipeline import run

    module = _module_folder(tmp_path / "user", "staged_helper_b")
    (tmp_path / "user" / "big.py").write_bytes(b"#" * 300_000)
    root = tmp_path / "root"
    config = PipelineConfig(
        data=DataConfig(data=PENGUINS, csv_null_values=("", "NA")),
        module_file=module,
        pipeline_root=str(root),
        max_module_folder_mib=0.25,
    )
    with pytest.raises(
        PipelineError,
        match=(
            r"^The folder .*user of --module_file .*my_module.py holds more than 0.25 MiB of "
            r"Python files to stage for the workers; put the module file and the helper "
            r"modules it imports in a folder of their own, or raise --max_module_folder_mib\.$"
        ),
    ):
        run(config)
    assert not root.exists()
    # Under the limit (the default is 20 MiB), it stages.
    staged = stage_module_file(module, str(tmp_path / "r"), max_folder_mib=0.5)
    assert os.path.getsize(staged.folder_archive) > 0


# --- job ids and links ----------------------------------------------------------------------


def test_dataflow_job_id_and_console_link():
    from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult
    from google.cloud import dataflow as dataflow_api

    options = parse_beam_args(
        ["--runner=DataflowRunner", "--project=my-project", "--region=europe-west4"]
    )
    result = DataflowPipelineResult(dataflow_api.Job(id="2026-01-02_03_04_05-67"), None)
    url = (
        "https://console.cloud.google.com/dataflow/jobs/europe-west4/2026-01-02_03_04_05-67"
        "?project=my-project"
    )
    assert dataflow_console_url("2026-01-02_03_04_05-67", "europe-west4", "my-project") == url
    assert job_info(result, options) == JobInfo("DataflowRunner", "2026-01-02_03_04_05-67", url)
    assert describe_job(result, options) == f"DataflowRunner job 2026-01-02_03_04_05-67: {url}"


def test_direct_and_dry_run_jobs_are_described():
    import apache_beam as beam

    options = parse_beam_args(["--runner=DirectRunner"])
    p = create_pipeline(options)
    _ = p | beam.Create([1])
    assert describe_job(p.run(), options) == "DirectRunner (ran on this machine)"

    options = parse_beam_args(list(DATAFLOW))
    p = create_pipeline(options)
    _ = p | beam.Create([1])
    assert describe_job(p.run(), options) == (
        "DataflowRunner (dry run: job graph built, nothing submitted)"
    )


def test_wait_for_job_returns_the_finished_jobs_info():
    import apache_beam as beam

    from beam_pipeline.runtime.runners import wait_for_job

    options = parse_beam_args(["--runner=DirectRunner"])
    p = create_pipeline(options)
    _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x + 1)
    assert wait_for_job(p.run(), options, "Test") == JobInfo(
        "DirectRunner", note="ran on this machine"
    )


# --- Dataflow job graphs, offline ------------------------------------------------------------


def _environments(proto) -> dict:
    """transform name -> (container image, resource hints) for every transform with an env."""
    from apache_beam.portability.api import beam_runner_api_pb2

    out = {}
    for t in proto.components.transforms.values():
        if not t.environment_id:
            continue
        env = proto.components.environments[t.environment_id]
        assert env.urn == "beam:env:docker:v1", (t.unique_name, env.urn)
        image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
        out[t.unique_name] = (image, dict(env.resource_hints))
    return out


def _decoded_fn_payloads(proto) -> dict[str, bytes]:
    """transform name -> the decoded pickle of its DoFn (ParDo steps)."""
    from apache_beam.portability.api import beam_runner_api_pb2

    out = {}
    for t in proto.components.transforms.values():
        if t.spec.urn != "beam:transform:pardo:v1":
            continue
        raw = base64.b64decode(
            beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn.payload
        )
        for decompress in (zlib.decompress, bz2.decompress):
            try:
                raw = decompress(raw)
                break
            except (zlib.error, OSError, ValueError):
                continue
        out[t.unique_name] = raw
    return out


def _dry_run(build, *extra_flags):
    """Builds a pipeline with ``build(p)`` and runs it on Dataflow with --dry_run.

    Returns the pipeline proto Dataflow would receive (after its overrides).
    """
    p = create_pipeline(parse_beam_args([*DATAFLOW, *extra_flags]))
    build(p)
    p.run().wait_until_finish()  # dry run: the job is built, nothing is submitted
    return p.runner.proto_pipeline


@pytest.fixture(scope="module")
def dataflow_graphs(tmp_path_factory):
    """The Dataflow protos of the three Beam jobs of a run, built offline from the same
    builders the orchestrator uses; also the module file the training job names.

    The run directory is local: building a job already lists its input files (tf.Transform's
    TFXIO source and analyzer cache do), which on gs:// would need credentials. Its
    examples and transform graph are empty placeholder files: nothing is read in a dry run.
    """
    import keras_tuner
    import tensorflow_transform.beam as tft_beam

    from beam_pipeline.core.types import Artifact
    from beam_pipeline.core.user_module import get_preprocessing_fn, load_module
    from beam_pipeline.engine.artifacts import Schema
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.stages.example_gen.executor import DataInputs, build_data_pipeline
    from beam_pipeline.stages.trainer.training import build_training_job
    from beam_pipeline.stages.transform.executor import build_transform_pipeline
    from beam_pipeline.stages.tuner.tuning import build_tuning_job
    from trainer.tuning import TrialSpec, state_path
    from transforms import example_gen as eg
    from transforms.trainer import TrainModel
    from transforms.tuner import RunSearch, RunTrials

    config = PipelineConfig(
        data=DataConfig(data=PENGUINS, csv_null_values=("", "NA")),
        module_file=MODULE,
        trainer=TrainerConfig(accelerator=ACCELERATOR, min_ram="16GB"),
        tuner=TunerConfig(accelerator=T4, min_ram="8GB"),
    )
    run_dir = RunDirectory(str(tmp_path_factory.mktemp("pipeline_root")), "r1")
    for artifact in (Artifact.EXAMPLES, Artifact.TRANSFORMED_EXAMPLES):
        for split in config.data.splits:
            os.makedirs(run_dir.path(artifact, split.value))
            open(run_dir.path(artifact, split.value, "data-0.tfrecord.gz"), "wb").close()
    os.makedirs(run_dir.path(Artifact.TRANSFORM_GRAPH))
    staging = {a: os.path.join(run_dir.root, ".staging", a.value) for a in Artifact}
    image = f"--sdk_container_image={IMAGE}"

    csv_format = eg.CsvFormat(
        config.data.csv_delimiter, config.data.csv_null_values, config.data.csv_max_field_bytes
    )
    header = tuple(eg.read_csv_header([PENGUINS], csv_format))
    inputs = DataInputs(((None, (PENGUINS,)),), DataFormat.CSV, header, "fingerprint")
    graphs = {
        "data": _dry_run(
            lambda p: build_data_pipeline(p, config, inputs, csv_format, None, staging), image
        )
    }

    module = load_module(MODULE)  # registers its functions to be pickled by value
    preprocessing_fn = get_preprocessing_fn(module, MODULE)
    schema = Schema.read_file(os.path.join(TESTDATA, "schema_penguins.pbtxt"))
    examples = {
        s: run_dir.path(Artifact.EXAMPLES, s.value, "*.tfrecord.gz") for s in config.data.splits
    }
    with tft_beam.Context(temp_dir=os.path.join(run_dir.root, ".staging", "tft-tmp")):
        graphs["transform"] = _dry_run(
            lambda p: build_transform_pipeline(
                p,
                examples,
                schema,
                preprocessing_fn,
                MODULE,
                "fingerprint",
                run_dir.cache_path("transform"),
                staging[Artifact.TRANSFORM_GRAPH],
                staging[Artifact.TRANSFORMED_EXAMPLES],
            ),
            image,
        )

    staged = stage_module_file(MODULE, run_dir.root)  # as the orchestrator does
    tuning = build_tuning_job(config, run_dir, MODULE, staging[Artifact.TUNER], staged=staged)
    trials = [
        TrialSpec(i, 0, keras_tuner.HyperParameters().get_config(), staging[Artifact.TUNER])
        for i in ("00", "01")
    ]
    tuner = config.tuner
    # A synchronous round (two trials, Reshuffled to workers) and a rolling schedule's
    # job (one trial).
    for phase, specs in (("tuning round", trials), ("rolling trial", trials[:1])):
        graphs[phase] = _dry_run(
            lambda p, specs=specs: (
                p
                | "RunTrials"
                >> RunTrials(tuning, specs, accelerator=tuner.accelerator, min_ram=tuner.min_ram)
            ),
            image,
        )
    # The search_job schedule: the whole search is this one job, a worker loop per slot.
    graphs["search job"] = _dry_run(
        lambda p: (
            p
            | "RunSearch"
            >> RunSearch(
                tuning,
                state_path(os.path.join(staging[Artifact.TUNER], "project")),
                2,
                accelerator=tuner.accelerator,
                min_ram=tuner.min_ram,
            )
        ),
        image,
    )
    job = build_training_job(config, run_dir, staged=staged)
    trainer = config.trainer
    graphs["training"] = _dry_run(
        lambda p: (
            p
            | "TrainModel"
            >> TrainModel(job, accelerator=trainer.accelerator, min_ram=trainer.min_ram)
        ),
        image,
    )
    return graphs, staged


@pytest.mark.parametrize(
    "phase, steps",
    [
        (
            "data",
            [
                "ExampleGen/CountTypes",
                "ExampleGen/SpreadRanges",
                "ExampleGen/ReadRanges",
                "WriteExamples",
                "WriteRejected",
                "Statistics[train]",
                "WriteStatistics[train]",
                "Statistics[eval]",
                "WriteStatistics[eval]",
            ],
        ),
        (
            "transform",
            [
                "Transform/ReadForAnalysis",
                "Transform/Analyze",
                # One tf.Transform step for both splits, then each batch to its split.
                "Transform/Transform",
                "Transform/BySplit",
                "WriteTransformFn",
                "Write[train]",
                "Write[eval]",
                "WriteCache",
            ],
        ),
        ("tuning round", ["RunTrials/CreateTrials", "RunTrials/Reshuffle", "RunTrials/RunTrial"]),
        ("rolling trial", ["RunTrials/CreateTrials", "RunTrials/RunTrial"]),
        ("search job", ["RunSearch/CreateSlots", "RunSearch/Reshuffle", "RunSearch/SearchLoop"]),
        ("training", ["TrainModel/CreateJob", "TrainModel/Reshuffle", "TrainModel/Train"]),
    ],
)
def test_dataflow_graph_steps_image_and_hints(dataflow_graphs, phase, steps):
    proto = dataflow_graphs[0][phase]
    names = {t.unique_name for t in proto.components.transforms.values()}
    for step in steps:
        assert any(n == step or n.startswith(step + "/") for n in names), (step, sorted(names))
    if phase == "rolling trial":  # one trial needs no spreading
        assert not any("Reshuffle" in n for n in names), sorted(names)
    envs = _environments(proto)
    assert {image for image, _ in envs.values()} == {IMAGE}
    hinted = {name: hints for name, (_, hints) in envs.items() if hints}
    # Only the trial and training steps get GPU workers (right fitting): Dataflow gives a
    # step with its own hints its own worker pool; every other step keeps ordinary workers.
    assert (
        hinted
        == {
            "data": {},
            "transform": {},
            "tuning round": {
                "RunTrials/RunTrial": {ACCELERATOR_URN: T4.encode(), MIN_RAM_URN: b"8000000000"}
            },
            "rolling trial": {
                "RunTrials/RunTrial": {ACCELERATOR_URN: T4.encode(), MIN_RAM_URN: b"8000000000"}
            },
            "search job": {
                "RunSearch/SearchLoop": {
                    ACCELERATOR_URN: T4.encode(),
                    MIN_RAM_URN: b"8000000000",
                }
            },
            "training": {
                "TrainModel/Train": {
                    ACCELERATOR_URN: ACCELERATOR.encode(),
                    MIN_RAM_URN: b"16000000000",
                }
            },
        }[phase]
    )


def test_dataflow_data_job_reads_csv_ranges_spread_over_workers(dataflow_graphs):
    # The read is splittable: the typing pass's byte ranges go through a Reshuffle to
    # the range reader, so Dataflow hands them to all its workers.
    transforms = dataflow_graphs[0]["data"].components.transforms.values()
    producers: dict[str, set[str]] = {}
    for t in transforms:
        for pcoll in t.outputs.values():
            producers.setdefault(pcoll, set()).add(t.unique_name)
    (read,) = [t for t in transforms if t.unique_name == "ExampleGen/ReadRanges"]
    (source,) = read.inputs.values()
    assert "ExampleGen/SpreadRanges" in producers[source], producers[source]
    (scan,) = [t for t in transforms if t.unique_name == "ExampleGen/CountTypes"]
    assert any(source in producers and "ranges" in tag for tag, source in scan.outputs.items())
    # A large file's typing pass is split too: its chunks go through a Reshuffle to the
    # chunk scanner, whose results meet per file (GroupByKey) to become its ranges.
    (chunks,) = [t for t in transforms if t.unique_name == "ExampleGen/ScanChunks"]
    (source,) = chunks.inputs.values()
    assert "ExampleGen/SpreadChunks" in producers[source], producers[source]
    (plan,) = [t for t in transforms if t.unique_name == "ExampleGen/PlanRanges"]
    assert any("ExampleGen/ChunksByFile" in producers[pcoll] for pcoll in plan.inputs.values())


@pytest.mark.parametrize("phase", ["tuning round", "rolling trial", "search job", "training"])
def test_dataflow_model_jobs_carry_the_staged_module(dataflow_graphs, phase):
    graphs, staged = dataflow_graphs
    payloads = _decoded_fn_payloads(graphs[phase])
    # The job travels inside the graph (the elements of a Create, or the DoFn holding it)
    # and names the staged copy, whose folder is the module's sha256, and the staged
    # archive of the module's folder (its helper modules), named by its own sha256.
    assert any(staged.path.encode() in raw for raw in payloads.values()), sorted(payloads)
    assert any(staged.folder_archive.encode() in raw for raw in payloads.values())
    assert f"/module/{staged.sha256}/penguin_module.py" in staged.path
    assert staged.folder_archive.endswith(f"/module/{staged.folder_sha256}/module_folder.zip")
    with open(staged.folder_archive, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == staged.folder_sha256
    with open(staged.path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == staged.sha256
    with open(MODULE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == staged.sha256


_LOAD_ON_A_FRESH_WORKER = textwrap.dedent(
    """
    import sys
    from apache_beam.internal import pickler
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners import pipeline_context

    loaded = 0
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            proto = beam_runner_api_pb2.Pipeline.FromString(f.read())
        context = pipeline_context.PipelineContext(proto.components)
        for coder_id in proto.components.coders:
            context.coders.get_by_id(coder_id)
            loaded += 1
        for t in proto.components.transforms.values():
            if t.spec.urn == "beam:transform:pardo:v1":
                fn = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn
            elif t.spec.urn.startswith("beam:transform:combine_"):
                fn = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload).combine_fn
            else:
                continue
            if "pickled" in fn.urn:
                pickler.loads(fn.payload)
                loaded += 1
    print(loaded)
    """
)


def test_every_pickled_function_of_the_dataflow_graphs_loads_in_a_fresh_process(
    dataflow_graphs, tmp_path
):
    # A Dataflow worker has the project installed (image or --setup_file) but none of the
    # launcher's state: no module file on sys.path, no objects created at launch.
    paths = []
    for phase, proto in dataflow_graphs[0].items():
        path = tmp_path / f"{phase}.pb"
        path.write_bytes(proto.SerializeToString())
        paths.append(str(path))
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_ON_A_FRESH_WORKER, *paths],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 50


def test_setup_file_stages_the_project_and_the_default_image_is_dataflows(tmp_path):
    """--setup_file instead of an image: Beam builds this project's sdist into the job."""
    import apache_beam as beam

    project = tmp_path / "project"
    for name in ("setup.py", "README.md"):
        project.joinpath(name).parent.mkdir(exist_ok=True)
        project.joinpath(name).write_bytes(open(os.path.join(REPO, name), "rb").read())
    for package in ("beam_pipeline", "transforms", "trainer"):
        _copy_package(os.path.join(REPO, package), str(project / package))
    proto = _dry_run(
        lambda p: p | beam.Create([1]) | beam.Map(str), f"--setup_file={project / 'setup.py'}"
    )
    (image, _), *_ = _environments(proto).values()
    assert image == f"gcr.io/cloud-dataflow/v1beta3/beam_python3.{sys.version_info[1]}_sdk:2.77.0"
    env = next(iter(proto.components.environments.values()))
    from apache_beam.portability.api import beam_runner_api_pb2

    staged = [
        beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload).staged_name
        for d in env.dependencies
        if d.role_urn == "beam:artifact:role:staging_to:v1"
    ]
    assert "workflow.tar.gz" in staged, staged


def _copy_package(src: str, dst: str) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


# --- the whole pipeline on a portable runner with a worker pool -------------------------------

_WORKER_EXITS = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from beam_pipeline.runtime.options import create_pipeline, parse_beam_args, run_pipeline
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.config import DataConfig, PipelineConfig
    from beam_pipeline.pipeline import run
    from beam_pipeline.runtime import pool

    def dies(how):
        def step(x):
            if x == 3:
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(3)
            return x
        return step

    options = parse_beam_args(
        ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
         "--direct_num_workers=2"]
    )
    out = {}
    for server in ("cold", "warm"):
        if server == "warm":
            # A multi_processing run starts the fork server first thing (here one that
            # stops at its missing input); once it answers, the workers are its forks.
            config = PipelineConfig(
                data=DataConfig(data=os.path.join(sys.argv[1], "none.csv")),
                beam_args=("--runner=DirectRunner", "--direct_running_mode=multi_processing"),
            )
            try:
                run(config)
            except PipelineError as e:
                assert "none.csv" in str(e), e
            for _ in range(1200):
                if pool.fork_server_warm():
                    break
                time.sleep(0.1)
        errors = {}
        # Cold, only a killed worker (Beam's own start, the message is the same code path).
        for how in ("kill", "exit") if server == "warm" else ("kill",):
            p = create_pipeline(options)
            _ = p | beam.Create(list(range(8))) | beam.Reshuffle() | beam.Map(dies(how))
            try:
                run_pipeline(p, "Test")
                errors[how] = None
            except PipelineError as e:
                errors[how] = str(e)
        # The next job of the same process runs as usual; its workers say whether they
        # are forks of the pool's fork server (which preloaded pool_zygote) or fresh.
        p = create_pipeline(options)
        folder = os.path.join(sys.argv[1], server)
        doubled = p | beam.Create([1, 2, 3]) | beam.Reshuffle() | beam.Map(lambda x: 2 * x)
        assert_that(doubled, equal_to([2, 4, 6]))
        _ = (
            doubled
            | beam.Map(lambda _: str("beam_pipeline.runtime.pool_zygote" in sys.modules))
            | beam.io.WriteToText(os.path.join(folder, "forked"))
        )
        state = run_pipeline(p, "Next").wait_until_finish()
        forked = sorted({line.strip() for f in os.listdir(folder) for line in open(
            os.path.join(folder, f))})
        out[server] = {"errors": errors, "next": str(state), "forked": forked}
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_a_dead_multi_processing_worker_fails_the_job_instead_of_hanging_it(tmp_path):
    """In a process of its own with a time limit: a hang (Beam's own behaviour) fails this
    test. (Forked from the warm fork server, tests/forked_launch.py: the process's own
    start is not the subject; its Beam workers start fresh or as forks of a fork server
    it starts itself, as in a fresh process.)

    A worker killed (out of memory, most likely) and one that exits, a job each; then the
    process's next job runs as usual. Cold first: no pool ran, the workers are Beam's fresh
    interpreters (a killed one only). Then warm: a multi_processing run started the fork
    server (warm_fork_server), and the workers are its forks
    (beam_pipeline.runtime.forked_sdk_worker); the process still exits, though the killed
    jobs' other workers never ended on their own.
    """
    import forked_launch

    runs = forked_launch.run_code(
        _WORKER_EXITS, str(tmp_path), log_dir=str(tmp_path / "logs"), timeout=240
    )
    said = {
        "kill": "was killed while the job ran (out of memory, most likely); rerun with a smaller",
        "exit": "exited with code 3 while the job ran (its output is above); rerun with",
    }
    for server, out in runs.items():
        assert out["forked"] == [str(server == "warm")]
        assert list(out["errors"]) == (["kill", "exit"] if server == "warm" else ["kill"])
        for how, error in out["errors"].items():
            text = said[how]
            assert error and error.startswith("A worker process of the Test job " + text), out
        assert out["next"] == "DONE"


@pytest.mark.parametrize("elements", [1, 3])
def test_a_dataflow_tuner_job_gets_a_worker_per_trial_or_search_loop(elements):
    """Left to itself, Dataflow would start one worker for a job of a few elements and run
    them side by side on its vCPUs; a trial job, a round or a search job gets a worker VM
    per element instead, each running one element at a time."""
    import apache_beam as beam
    from apache_beam.options import pipeline_options as po

    from beam_pipeline.stages.tuner.search import worker_per_element

    given = parse_beam_args([*DATAFLOW, "--num_workers=20", "--max_num_workers=50"])
    p = create_pipeline(worker_per_element(given, elements))
    _ = p | beam.Create(list(range(elements))) | beam.Reshuffle() | beam.Map(str)
    environment = dataflow_environment(p.run().job)  # dry run: built, not submitted
    (pool,) = environment.worker_pools
    assert pool.num_workers == elements
    assert pool.autoscaling_settings.max_num_workers == elements
    assert pool.autoscaling_settings.algorithm.name == "AUTOSCALING_ALGORITHM_NONE"
    assert pool.num_threads_per_worker == 1
    experiments = list(environment.experiments)
    assert "no_use_multiple_sdk_containers" in experiments
    assert "use_multiple_sdk_containers" not in experiments
    # The data stages' options stay the user's.
    assert given.view_as(po.WorkerOptions).num_workers == 20
    assert given.view_as(po.DebugOptions).number_of_worker_harness_threads is None
    # Other runners' options are copied unchanged.
    direct = parse_beam_args(["--runner=DirectRunner", "--direct_num_workers=2"])
    assert worker_per_element(direct, 3).get_all_options() == direct.get_all_options()


# Run in a fork of the fork server: import_stack with one more module of the stages' Beam
# steps to import, a module that makes reference cycles (so a collector that is on runs
# while it imports), then what the collector did and how it was left.
_STACK_IMPORT_COLLECTIONS = """
import gc, json, os, sys
from beam_pipeline.core.forked import WORKER_MODULES_ENV
from beam_pipeline.runtime.stack_imports import import_stack

sys.path.insert(0, {folder!r})
os.environ[WORKER_MODULES_ENV] = "makes_cycles"
gc.unfreeze()
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(1))
import_stack()
seen = {{"collections": len(collections), "frozen": gc.get_freeze_count() > 0,
        "enabled": gc.isenabled()}}
gc.disable()
import_stack()
seen["left_disabled"] = not gc.isenabled()
with open({out!r}, "w") as f:
    json.dump(seen, f)
"""


def test_the_stack_import_runs_no_collection_and_leaves_its_objects_frozen(tmp_path):
    # Each full collection walks every object made so far: the launcher ran several while
    # it imported TensorFlow and Beam, and every later one walked all of the imports'
    # objects until they were frozen.
    from beam_pipeline.core.forked import start_forked

    (tmp_path / "makes_cycles.py").write_text(
        "cycles = []\nfor _ in range(20000):\n    a = []\n    a.append(a)\n    cycles.append(a)\n"
    )
    out = tmp_path / "seen.json"
    code = _STACK_IMPORT_COLLECTIONS.format(folder=str(tmp_path), out=str(out))
    process = start_forked(exec, (code, {}))
    process.join(timeout=120)
    assert process.exitcode == 0
    assert json.loads(out.read_text()) == {
        "collections": 0,
        "frozen": True,
        "enabled": True,
        "left_disabled": True,
    }
