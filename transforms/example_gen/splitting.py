"""Assigning rows to splits: a deterministic hash of each row's content.

Example::

    splitter = HashSplitter(buckets=((Split.TRAIN, 2), (Split.EVAL, 1)))
    splitter.assign([b"row 1", b"row 2"])   # index into splitter.splits, per row
    yield from split_batch(batch, keys, splitter, split_counters(splitter))
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics.metricbase import Counter

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Split
from transforms.metrics import NAMESPACE
from transforms.rows import SplitBatch

__all__ = ["HashSplitter", "split_batch", "split_counters"]


@dataclasses.dataclass(frozen=True)
class HashSplitter:
    """Deterministic hash split: a row's split depends only on its content.

    The key is the whole raw row, or the ``partition_feature`` value so related rows stay
    together. blake2b (not Python's ``hash``, which is salted per process) makes the
    assignment identical on every runner, worker and run.

    Attributes:
      buckets: (split, bucket count) pairs, e.g. ((TRAIN, 2), (EVAL, 1)) for 2:1.
      partition_feature: the column whose value is hashed instead of the whole row.
      fixed_split: every row goes to this split (input already split by file pattern).
    """

    buckets: tuple[tuple[Split, int], ...] = ((Split.TRAIN, 2), (Split.EVAL, 1))
    partition_feature: Optional[str] = None
    fixed_split: Optional[Split] = None

    def __post_init__(self):
        if self.fixed_split is None:
            if not self.buckets or any(n <= 0 for _, n in self.buckets):
                given = ",".join(f"{s.value}={n}" for s, n in self.buckets)
                raise PipelineError(
                    f"--split_buckets={given} must give each split a positive bucket count; "
                    "pass e.g. --split_buckets=train=2,eval=1."
                )
            if len({s for s, _ in self.buckets}) != len(self.buckets):
                raise PipelineError(
                    "--split_buckets names a split twice; name each split once, e.g. "
                    "--split_buckets=train=2,eval=1."
                )

    @property
    def splits(self) -> tuple[Split, ...]:
        return (self.fixed_split,) if self.fixed_split else tuple(s for s, _ in self.buckets)

    def assign(self, keys: Sequence[bytes]) -> np.ndarray:
        """The split index (into ``splits``) of each key."""
        if self.fixed_split is not None:
            return np.zeros(len(keys), dtype=np.int64)
        total = sum(n for _, n in self.buckets)
        bounds = np.cumsum([n for _, n in self.buckets])
        hashes = np.fromiter(
            (
                int.from_bytes(hashlib.blake2b(k, digest_size=8).digest(), "little") % total
                for k in keys
            ),
            dtype=np.int64,
            count=len(keys),
        )
        return np.searchsorted(bounds, hashes, side="right")


def split_counters(splitter: HashSplitter) -> dict[Split, Counter]:
    """The ``example_gen.rows_out.<split>`` counter of each split (create in a DoFn's init)."""
    return {
        s: beam.metrics.Metrics.counter(NAMESPACE, f"example_gen.rows_out.{s.value}")
        for s in splitter.splits
    }


def split_batch(
    batch: pa.RecordBatch,
    keys: Sequence[bytes],
    splitter: HashSplitter,
    counters: Mapping[Split, Counter],
) -> Iterator[SplitBatch]:
    """The rows of ``batch`` per split (one key per row), each split's rows counted."""
    assignment = splitter.assign(keys)
    for idx, split in enumerate(splitter.splits):
        mask = assignment == idx
        count = int(mask.sum())
        if count:
            counters[split].inc(count)
            yield SplitBatch(split, batch.filter(pa.array(mask)) if count < len(mask) else batch)
