"""The run-level hooks of a stage: what it prepares before anything is written
(``Stage.prepare``, read back with ``ctx.prepared(self)``), what it starts for the run
(``Stage.start``, closed by the stage or at the run's end) and the Tuner's early pool.

The graphs here are stages of the test's own, run through ``beam_pipeline.pipeline.run``
(no Beam job: they only record what the run did with their hooks)."""

from __future__ import annotations

import contextlib
import os

import pytest
from conftest import PENGUIN_DIR

import beam_pipeline as bp
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine import Stage, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.pipeline import run

EVENTS: list[tuple] = []


class _Recorder(Stage):
    """Records its hooks' calls in EVENTS; ``fail`` makes its run raise."""

    fail = False

    def prepare(self, config, options):
        EVENTS.append(("prepare", self.name, os.path.exists(config.pipeline_root)))
        if config.run_id == "bad-input":
            raise PipelineError(f"{self.name}'s input is bad; pass a good one.")
        return f"{self.name}'s value"

    def start(self, ctx):
        EVENTS.append(("start", self.name, os.path.isdir(ctx.run_dir.root)))

        @contextlib.contextmanager
        def resource():
            EVENTS.append(("opened", self.name))
            try:
                yield f"{self.name}'s resource"
            finally:
                EVENTS.append(("closed", self.name))

        return resource()

    def run(self, ctx, inputs, out):
        EVENTS.append(("run", self.name, ctx.prepared(self)))
        other = First() if self.name != "First" else Second()
        with pytest.raises(ValueError, match="a stage reads only its own"):
            ctx.prepared(other)
        with ctx.started(self) as value:
            EVENTS.append(("uses", self.name, value))
        EVENTS.append(("done with", self.name))
        if self.fail:
            raise RuntimeError(f"{self.name} failed")
        return StageResult([StageReport(self.name, StageStatus.OK)])


class First(_Recorder):
    name = "First"


class Second(_Recorder):
    name = "Second"
    fail = True


def _config(root, run_id):
    return bp.make_config(
        data=os.path.join(PENGUIN_DIR, "penguins.csv"),
        pipeline_root=str(root),
        run_id=run_id,
        beam_args=["--runner=DirectRunner"],
    )


def test_prepared_values_come_before_anything_is_written_and_stay_the_stages_own(tmp_path):
    EVENTS.clear()
    root = tmp_path / "root"
    with pytest.raises(PipelineError, match="First's input is bad"):
        run(_config(root, "bad-input"), graph=(First(), Second()))
    assert EVENTS == [("prepare", "First", False)]  # the first bad input stops the run
    assert not root.exists()
    EVENTS.clear()
    with pytest.raises(RuntimeError, match="Second failed"):
        run(_config(root, "r1"), graph=(First(), Second()))
    prepares = [e for e in EVENTS if e[0] == "prepare"]
    assert prepares == [("prepare", "First", False), ("prepare", "Second", False)]
    runs = sorted(e for e in EVENTS if e[0] == "run")  # they run side by side
    assert runs == [("run", "First", "First's value"), ("run", "Second", "Second's value")]


def test_a_started_resource_lives_until_its_stage_closes_it_or_the_run_ends(tmp_path):
    EVENTS.clear()
    root = tmp_path / "root"
    with pytest.raises(RuntimeError, match="Second failed"):
        run(_config(root, "r1"), graph=(First(), Second()))
    # Started once the run directory exists, before any stage runs; each stage closes its
    # own when done with it; nothing is closed twice.
    starts = EVENTS[: next(i for i, e in enumerate(EVENTS) if e[0] == "run")]
    assert starts[2:] == [
        ("start", "First", True),
        ("opened", "First"),
        ("start", "Second", True),
        ("opened", "Second"),
    ]
    assert EVENTS.count(("closed", "First")) == EVENTS.count(("closed", "Second")) == 1
    for name in ("First", "Second"):
        uses = EVENTS.index(("uses", name, f"{name}'s resource"))
        assert uses < EVENTS.index(("closed", name)) < EVENTS.index(("done with", name))

    # A resumed run starts nothing for the stage its first attempt finished; a resource
    # its stage never closes (the stage fails before) is closed at the run's end.
    class Unused(Second):
        def run(self, ctx, inputs, out):
            raise RuntimeError("Second failed before using it")

    EVENTS.clear()
    with pytest.raises(RuntimeError, match="Second failed before using it"):
        run(_config(root, "r1"), graph=(First(), Unused()))
    assert [e for e in EVENTS if e[0] in ("start", "opened", "closed")] == [
        ("start", "Second", True),
        ("opened", "Second"),
        ("closed", "Second"),
    ]


def test_the_tuner_starts_its_pool_with_the_run_only_when_the_module_tunes(tmp_path):
    import dataclasses

    from beam_pipeline.engine import StageContext
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.runtime.pool import LocalWorkerPool
    from beam_pipeline.stages.tuner.stage import TunerStage

    tunes = tmp_path / "tunes.py"
    tunes.write_text("def run_fn(fn_args):\n    pass\n\n\ndef tuner_fn(fn_args):\n    pass\n")
    trains = tmp_path / "trains.py"
    trains.write_text("def run_fn(fn_args):\n    pass\n")
    options = parse_beam_args(["--runner=DirectRunner"])
    run_dir = RunDirectory.create(str(tmp_path / "root"), "r")
    stage = TunerStage()
    for module, expected in ((tunes, True), (trains, False)):
        config = _config(tmp_path / "root", "r").replace(module_file=str(module))
        config = dataclasses.replace(
            config, tuner=dataclasses.replace(config.tuner, parallel_trials=2)
        )
        ctx = StageContext(config, options, run_dir, {}, stage=stage.name)
        pool = stage.start(ctx)
        assert isinstance(pool, LocalWorkerPool) is expected, module
        if pool is not None:
            assert pool.num_workers == min(2, os.cpu_count() or 1)
