"""ExampleGen + Statistics per span: each span of a ``{SPAN}`` input is its own cached unit.

A span's unit, keyed by its files' content, ExampleGen's settings and the pipeline's code
(:attr:`SpanInput.key`), lives under ``<pipeline_root>/cache/spans/<key>/``:

- ``examples/<split>/*.tfrecord.gz`` and ``rejected/rejected-*.jsonl``, as ExampleGen
  writes them for the whole input;
- ``statistics/<split>/``: the mergeable state of the span's statistics
  (``transforms.statistics_files.WriteStatisticsState``: the combine's accumulator with its
  quantile sketches, and the exact count of every string value);
- ``span.json``: the span, its files, its rows per split and rejected rows.

A run reads only the spans of its window that have no valid unit (one Beam job for all of
them), then builds its artifacts from the units: the examples and rejected rows are
linked (or copied) into the run's folders as ``span-<n>-...``, so readers see the usual
layout (``<split>/*.tfrecord.gz``) and Transform finds each span's train files; the
statistics are the merge of the spans' states, in span order, so a run whose older spans
were reused writes the statistics a run reading every span anew does. Units are written
and checked the kill-safe way of ``engine.cache_entries``: a half-written or damaged unit
is removed and computed again, never read.

Example::

    plan = SpanPlan(run_dir.cache_path("spans"), data.span_inputs)
    work = plan.open()                   # the units to compute: plan.missing
    build_span_pipeline(p, config.data, data, csv_format, user_schema, plan)   # then run it
    plan.publish(splits)
    plan.assemble(splits, staging)       # the run's examples, rejected rows, statistics
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.types import Artifact, Split
from beam_pipeline.engine.cache_entries import (
    new_work_dir,
    publish,
    remove_abandoned,
    valid_listing,
)

__all__ = ["SpanInput", "SpanPlan", "build_span_pipeline", "span_label"]

_SPAN_FILE = "span.json"
_EXAMPLE_FILES = "*.tfrecord.gz"


@dataclasses.dataclass(frozen=True)
class SpanInput:
    """One span of the window: its number, its files, its unit's key and the version read
    (``{VERSION}``: the span's latest)."""

    span: int
    files: tuple[str, ...]
    key: str
    version: Optional[int] = None


def span_label(spans: Sequence[int]) -> str:
    """'span 3', 'spans 1-3', or 'spans 1, 3' (not a range)."""
    spans = sorted(spans)
    if len(spans) == 1:
        return f"span {spans[0]}"
    if spans == list(range(spans[0], spans[-1] + 1)):
        return f"spans {spans[0]}-{spans[-1]}"
    return "spans " + ", ".join(str(s) for s in spans)


class SpanPlan:
    """Which spans' units are reused and which are computed, and their folders.

    Args:
      cache_dir: ``<pipeline_root>/cache/spans``.
      inputs: the window's spans, ascending.
    """

    def __init__(self, cache_dir: str, inputs: Sequence[SpanInput]):
        self.cache_dir = cache_dir
        self.inputs = tuple(inputs)
        self.work_dir: Optional[str] = None
        self.reused: tuple[SpanInput, ...] = ()
        self.missing: tuple[SpanInput, ...] = ()
        # Why a unit was removed unread, per span.
        self.removed: dict[int, str] = {}

    def final(self, unit: SpanInput) -> str:
        return fileio.join(self.cache_dir, unit.key)

    def work(self, unit: SpanInput) -> str:
        """Where the job writes ``unit`` (inside this run's private folder)."""
        assert self.work_dir is not None
        return fileio.join(self.work_dir, unit.key)

    def open(self) -> None:
        """Checks every span's unit; those missing or damaged are to be computed."""
        fileio.makedirs(self.cache_dir)
        remove_abandoned(self.cache_dir)
        reused, missing = [], []
        for unit in self.inputs:
            listing, problem = valid_listing(self.final(unit), _SPAN_FILE)
            if problem:
                self.removed[unit.span] = problem
            (reused if listing else missing).append(unit)
        self.reused, self.missing = tuple(reused), tuple(missing)
        if self.missing:
            self.work_dir = new_work_dir(self.cache_dir)

    def to_compute(self) -> list[SpanInput]:
        """The missing units, one per key (two spans of identical content share one)."""
        seen, out = set(), []
        for unit in self.missing:
            if unit.key not in seen:
                seen.add(unit.key)
                out.append(unit)
        return out

    def publish(self, splits: Sequence[Split]) -> None:
        """Records each computed unit's ``span.json`` and publishes it (after the job)."""
        from transforms.statistics_files import state_num_examples

        for unit in self.to_compute():
            work = self.work(unit)
            rows = {}
            for split in splits:
                state = fileio.join(work, "statistics", split.value)
                rows[split.value] = state_num_examples(state)
            rejected = 0
            for path in fileio.glob(fileio.join(work, "rejected", "rejected-*")):
                with fileio.open(path) as f:
                    rejected += sum(1 for line in f if line.strip())
            record = {"span": unit.span, "version": unit.version, "files": list(unit.files)}
            record["rows"] = rows
            record["rejected"] = rejected
            fileio.write_file(fileio.join(work, _SPAN_FILE), json.dumps(record, indent=1))
            publish(work, self.final(unit), self.work_dir)
        self.discard()

    def discard(self) -> None:
        """Deletes this run's private folder (a failed job's, or what publish left)."""
        if self.work_dir is not None and fileio.exists(self.work_dir):
            fileio.rmtree(self.work_dir)
        self.work_dir = None

    def record(self, unit: SpanInput) -> dict:
        return json.loads(fileio.read_file(fileio.join(self.final(unit), _SPAN_FILE)))

    def assemble(self, splits: Sequence[Split], staging: Mapping[Artifact, str]) -> dict:
        """Fills the run's examples, rejected rows and statistics from the published units.

        Returns:
          {"rows": split -> rows, "rejected": n, "read": n} of the whole window.
        """
        from transforms.statistics_files import statistics_from_states, write_statistics

        rows = {s.value: 0 for s in splits}
        rejected = 0
        for unit in self.inputs:
            final = self.final(unit)
            record = self.record(unit)
            for split in splits:
                rows[split.value] += record["rows"][split.value]
                out = fileio.join(staging[Artifact.EXAMPLES], split.value)
                fileio.makedirs(out)
                for path in fileio.glob(
                    fileio.join(final, "examples", split.value, _EXAMPLE_FILES)
                ):
                    _link(path, fileio.join(out, f"span-{unit.span}-{os.path.basename(path)}"))
            rejected += record["rejected"]
            fileio.makedirs(staging[Artifact.REJECTED])
            for path in fileio.glob(fileio.join(final, "rejected", "rejected-*")):
                name = os.path.basename(path).replace("rejected-", f"rejected-span-{unit.span}-", 1)
                _link(path, fileio.join(staging[Artifact.REJECTED], name))
        for split in splits:
            stats = statistics_from_states(
                [fileio.join(self.final(u), "statistics", split.value) for u in self.inputs],
                split.value,
            )
            write_statistics(
                stats, fileio.join(staging[Artifact.STATISTICS], split.value, "FeatureStats.pb")
            )
        return {"rows": rows, "rejected": rejected, "read": sum(rows.values()) + rejected}


def _link(src: str, dst: str) -> None:
    """A hard link where both are on one local disk (a unit's files are never changed in
    place, and the link outlives the unit's removal); a copy otherwise."""
    if not (fileio.is_remote(src) or fileio.is_remote(dst)):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another disk, or a file system without links
    fileio.copy(src, dst, overwrite=True)


def build_span_pipeline(
    p,
    data_settings,
    inputs,
    csv_format,
    user_schema,
    plan: SpanPlan,
) -> None:
    """Wires ExampleGen + the statistics state of each span to compute into ``p``.

    ``p`` is a ``beam.Pipeline`` (Beam is imported here only: ``runs show`` imports this
    module for :func:`span_label`); ``data_settings``: ExampleGen's (``config.data``). Each
    span is read, typed and split as ExampleGen reads a whole input (the hash split of a row
    does not depend on the span it came in), into the span's unit folder.
    """

    from transforms import example_gen as eg
    from transforms.rows import batches_of
    from transforms.statistics_files import WriteStatisticsState

    splits = data_settings.splits
    input_format = eg.FORMATS[inputs.data_format]
    settings = eg.ReadSettings(csv=csv_format, schema=user_schema)
    for unit in plan.to_compute():
        work = plan.work(unit)
        tag = f"span-{unit.span}"
        splitter = eg.HashSplitter(
            buckets=data_settings.split_buckets,
            partition_feature=data_settings.partition_feature,
        )
        result = p | f"ExampleGen[{tag}]" >> input_format.read(
            unit.files, inputs.header, splitter, settings
        )
        batches = result.batches
        _ = batches | f"WriteExamples[{tag}]" >> eg.WriteSplitExamples(
            fileio.join(work, "examples"), splits
        )
        _ = result.rejected | f"WriteRejected[{tag}]" >> eg.WriteRejectedRows(
            fileio.join(work, "rejected")
        )
        for split in splits:
            _ = (
                batches
                | f"Select[{tag}][{split.value}]" >> batches_of(split)
                | f"StatisticsState[{tag}][{split.value}]"
                >> WriteStatisticsState(fileio.join(work, "statistics", split.value))
            )
