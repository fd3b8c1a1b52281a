"""A toy stage of a user's own, as docs/add-a-stage.md walks through: three touch points.

1. Its declaration (``CountStage``: name, inputs, outputs, settings, ``run``, and its
   section of the run's report);
2. its Beam side (``CountExamples``, a PTransform);
3. one line in a graph (``GRAPH``), which ``--graph tests/testdata/toy_stage.py:GRAPH``
   (or ``beam_pipeline.run(config, graph=GRAPH)``) runs.

It counts the examples of each split that ExampleGen wrote, keeping every ``--count_every``
th, and publishes the counts as an artifact of its own.
"""

from __future__ import annotations

import dataclasses
import json
import zlib

import apache_beam as beam

from beam_pipeline.core import fileio
from beam_pipeline.core.settings import setting
from beam_pipeline.engine import Input, Stage, StageResult
from beam_pipeline.engine.artifacts import Examples, TypedArtifact
from beam_pipeline.engine.history_entry import HistoryEntry
from beam_pipeline.engine.report_sections import ReportSection, Table
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.runtime.options import create_pipeline, run_pipeline
from beam_pipeline.stages.graph import STAGE_GRAPH


class ExampleCounts(TypedArtifact):
    """``counts.json``: split -> the examples counted."""

    FOLDER = "example_counts"


@dataclasses.dataclass(frozen=True)
class CountConfig:
    every: int = setting(1, flag="count_every", help="Count every Nth example.", kind="int")


class CountExamples(beam.PTransform):
    """(split, serialized example) -> (split, count of every ``every``-th example)."""

    def __init__(self, every: int):
        super().__init__()
        self.every = every

    def expand(self, pcoll):
        every = self.every
        return (
            pcoll
            | "Number" >> beam.Map(lambda kv: (kv[0], zlib.crc32(kv[1]) % every == 0))
            | "Keep" >> beam.Filter(lambda kv: kv[1])
            | "Count" >> beam.combiners.Count.PerKey()
        )


class CountStage(Stage):
    name = "CountExamples"
    Config = CountConfig
    config_key = "count"
    inputs = (Input(Examples, key="examples"),)
    outputs = (ExampleCounts,)

    def parameters(self, ctx):
        return {"every": ctx.config.count.every}

    def run(self, ctx, inputs, out):
        examples = inputs[Examples]
        folder = out.folder(ExampleCounts)
        p = create_pipeline(ctx.options)
        splits = [
            p
            | f"Read{split.value}" >> beam.io.ReadFromTFRecord(examples.file_pattern(split))
            | f"Key{split.value}" >> beam.Map(lambda e, s=split.value: (s, e))
            for split in examples.split_names
        ]
        (
            splits
            | beam.Flatten()
            | CountExamples(ctx.config.count.every)
            | beam.combiners.ToDict()
            | beam.Map(lambda d: json.dumps(d, sort_keys=True))
            | beam.io.WriteToText(fileio.join(folder, "counts"), ".json", num_shards=1)
        )
        run_pipeline(p, self.name)
        [written] = fileio.glob(fileio.join(folder, "counts*.json"))
        with fileio.open(written) as f:
            counts = json.load(f)
        total = sum(counts.values())
        row = StageReport(
            self.name,
            StageStatus.OK,
            artifact=out.uri(ExampleCounts),
            note=f"{total} examples counted",
            details={"counted": total},
        )
        return StageResult([row], outputs=(out.artifact(ExampleCounts, counts=counts),))

    history_columns = {"counted": None}  # its column in `runs list`, for every run

    def history(self, reports):
        # A column of `runs list` and a line of `runs show`, kept with the execution.
        total = reports[0].details.get("counted") if reports else None
        return HistoryEntry(columns={"counted": total}, lines=[f"Counted: {total} examples"])

    def report_sections(self, view):
        section = ReportSection(
            "counts",
            "Example counts",
            artifacts=(ExampleCounts,),  # the report names the run a cached one came from
            empty="No counts (the stage did not run).",
        )
        with section.reading("the example counts"):  # unreadable: one line, not a failure
            if view.published(ExampleCounts):
                [written] = fileio.glob(view.path(ExampleCounts, "counts*.json"))
                with fileio.open(written) as f:
                    counts = json.load(f)
                rows = sorted(counts.items())
                section.parts.append(Table(["split", "examples counted"], rows))
        return [section]


# After ExampleGen, whose examples it reads (a run without a module file stops after
# Transform).
GRAPH = (STAGE_GRAPH[0], CountStage(), *STAGE_GRAPH[1:])
