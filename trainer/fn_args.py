"""``FnArgs`` and ``TunerFnResult``: what a module file's ``run_fn`` / ``tuner_fn`` receive and
return, with TFX's names so a TFX module file ports by changing its import lines only.

Example (a module file)::

    from trainer import FnArgs   # was: from tfx import v1 as tfx; tfx.components.FnArgs

    def run_fn(fn_args: FnArgs):
        tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
        ...
        model.fit(train_ds, steps_per_epoch=fn_args.train_steps, ...)
        tf.saved_model.save(model, fn_args.serving_model_dir, signatures=...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from beam_pipeline.core import fileio
from trainer.data_accessor import DataAccessor

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["FnArgs", "TunerFnResult", "ExampleCounts"]


class TunerFnResult(NamedTuple):
    """What ``tuner_fn(fn_args)`` returns, as in TFX.

    Attributes:
      tuner: a Keras Tuner ``BaseTuner`` (its oracle decides the trials).
      fit_kwargs: keyword arguments for ``tuner.search`` (``x``, ``validation_data``,
        ``steps_per_epoch``, ...).
    """

    tuner: Any
    fit_kwargs: dict[str, Any]


class ExampleCounts(Mapping[str, int]):
    """Number of examples per split, counted from the split's files on first access.

    Counting reads the split's files once (a pass over the data), so it is done only when a
    module asks: ``fn_args.num_examples["train"]``.

    Example::

        counts = ExampleCounts({"train": ["/run/transformed_examples/train/*.gz"]})
        steps_per_epoch = counts["train"] // batch_size
    """

    def __init__(self, files: Mapping[str, Sequence[str]]):
        self._files = {split: list(patterns) for split, patterns in files.items()}
        self._counts: dict[str, int] = {}

    def __getitem__(self, split: str) -> int:
        if split not in self._counts:
            patterns = self._files[split]  # KeyError for an unknown split, as a dict would.
            self._counts[split] = _count_records(patterns)
        return self._counts[split]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        known = {s: self._counts.get(s, "?") for s in self._files}
        return f"ExampleCounts({known})"


def _count_records(patterns: Sequence[str]) -> int:
    import tensorflow as tf

    files = [f for p in patterns for f in fileio.glob(p)]
    if not files:
        return 0
    compression = "GZIP" if all(f.endswith(".gz") for f in files) else ""
    dataset = tf.data.TFRecordDataset(
        files, compression_type=compression, num_parallel_reads=tf.data.AUTOTUNE
    )
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())


@dataclasses.dataclass(frozen=True)
class FnArgs:
    """Arguments of ``run_fn`` and ``tuner_fn`` (TFX's ``FnArgs`` fields).

    Attributes:
      working_dir: the run's working folder (the same as ``model_run_dir``, as in TFX).
      train_files / eval_files: lists of file patterns of the transformed examples.
      train_steps / eval_steps: from ``--train_steps`` / ``--eval_steps``.
      schema_path: the raw data schema (``schema.pbtxt``); ``schema_file`` is its
        deprecated twin and always holds the same value.
      transform_graph_path: the tf.Transform output folder (``tft.TFTransformOutput``);
        ``transform_output`` is its deprecated twin and always holds the same value.
      data_accessor: makes the datasets (see :class:`DataAccessor`).
      serving_model_dir: where ``run_fn`` must write the serving SavedModel (with
        ``--train_workers`` above 1: the chief's is the run's, another worker's a folder in
        its scratch, removed after training).
      eval_model_dir: a folder for an evaluation model, if the module writes one.
      model_run_dir: TensorBoard logs and checkpoints; it survives a killed attempt, so a
        retried ``run_fn`` can resume from what it left there. Every worker of a
        multi-worker training gets the same folder (Keras 2's ``BackupAndRestore`` and
        ``TensorBoard`` keep the chief's there and remove the others' temporary copies).
      base_model: a SavedModel folder to warm-start from, or None.
      hyperparameters: a Keras Tuner ``HyperParameters`` config dict (for
        ``keras_tuner.HyperParameters.from_config``), or None.
      custom_config: the ``--custom_config`` JSON object as a dict.
      num_examples: examples per split (``{"train": n, "eval": m}``), counted on access.
      strategy: the distribution strategy the runner chose for this worker
        (MirroredStrategy over the local GPUs, the default strategy on CPU; with
        ``--train_workers`` above 1, this worker's ``MultiWorkerMirroredStrategy``, under
        which the model must be a Keras 2 ``tf_keras`` one). Module files may ignore it and
        create their own, as TFX module files do (on several workers: a
        ``MultiWorkerMirroredStrategy``, or the workers train apart).
      mixed_precision: the Keras dtype policy of ``--mixed_precision`` for this worker
        (``mixed_float16`` on GPU, ``mixed_bfloat16`` on CPU), or None (off). The runner
        builds a TrainSpec's model under it and sets it as Keras's global policy while
        ``run_fn`` runs.
      early_stopping: ``tuner_fn`` only: the ``--tuner_early_stopping`` rule (``asha``,
        ``median``), or None (off). Trials stop only between epochs, so a module may fit
        its steps in more epochs when it is on (the bundled module does).
    """

    working_dir: Optional[str] = None
    train_files: list[str] = dataclasses.field(default_factory=list)
    eval_files: list[str] = dataclasses.field(default_factory=list)
    train_steps: Optional[int] = None
    eval_steps: Optional[int] = None
    schema_path: Optional[str] = None
    schema_file: Optional[str] = None
    transform_graph_path: Optional[str] = None
    transform_output: Optional[str] = None
    data_accessor: DataAccessor = dataclasses.field(default_factory=DataAccessor)
    serving_model_dir: Optional[str] = None
    eval_model_dir: Optional[str] = None
    model_run_dir: Optional[str] = None
    base_model: Optional[str] = None
    hyperparameters: Optional[dict[str, Any]] = None
    custom_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    num_examples: Mapping[str, int] = dataclasses.field(default_factory=dict)
    strategy: Optional[tf.distribute.Strategy] = None
    mixed_precision: Optional[str] = None
    early_stopping: Optional[str] = None

    def __post_init__(self) -> None:
        twins = (("schema_path", "schema_file"), ("transform_graph_path", "transform_output"))
        for new, old in twins:
            a, b = getattr(self, new), getattr(self, old)
            if a is not None and b is not None and a != b:
                raise ValueError(f"FnArgs.{new}={a!r} and its deprecated twin {old}={b!r} differ.")
            value = a if a is not None else b
            object.__setattr__(self, new, value)
            object.__setattr__(self, old, value)
