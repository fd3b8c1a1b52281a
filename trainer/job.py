"""One description of a model job and one ``FnArgs`` builder, for training and tuning alike.

:class:`ModelJob` holds what a training job (:class:`trainer.TrainingJob`) and a tuning
job (:class:`trainer.tuning.TuningJob`) both need: the module file (its text and staged
copy, so a worker without the launcher's disk loads it), the transformed data, the step
counts and ``custom_config``. Each adds its own folders on top. :func:`common_fn_args`
builds the ``FnArgs`` fields both hand the module, as TFX's ``get_common_fn_args`` ("Get
common args of training and tuning") does.

Example::

    fn_args = common_fn_args(job, job.model_run_dir, strategy=strategy,
                             serving_model_dir=job.serving_model_dir)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from beam_pipeline.core.module_staging import StagedModule
from trainer.data_accessor import DataAccessor
from trainer.fn_args import ExampleCounts, FnArgs
from trainer.module_loader import TrainerModule, load_trainer_module
from trainer.precision import CUSTOM_CONFIG_KEY, precision_policy

__all__ = ["ModelJob", "common_fn_args"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelJob:
    """What every job that runs a module's model needs (plain values: it travels to workers).

    Attributes:
      module_file: the module file's path as the user gave it.
      module_source: its text, so a worker without the launcher's disk can load it.
      staged: the run's staged copy of the module and its folder, which workers load (so
        the module's helper modules import there too); None: ``module_file`` itself.
      train_files / eval_files: file patterns of the transformed examples.
      transform_graph_path: the tf.Transform output folder.
      schema_path: the raw schema (``schema.pbtxt``), or None.
      train_steps / eval_steps: reach ``fn_args``.
      custom_config: reaches ``fn_args.custom_config``.
      entry_point: the run_fn-like function or TrainSpec class to use (default: run_fn,
        else the only TrainSpec subclass).
      mixed_precision: compute in 16 bits (see :mod:`trainer.precision`).
    """

    module_file: str
    module_source: Optional[str]
    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    transform_graph_path: str
    schema_path: Optional[str]
    train_steps: int
    eval_steps: int
    custom_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    entry_point: Optional[str] = None
    staged: Optional[StagedModule] = None
    mixed_precision: bool = False

    def load_module(self) -> TrainerModule:
        """Loads the job's module file (its staged copy, else its text, else its path).

        Raises:
          PipelineError: the module fails to load or its entry point is wrong.
        """
        return load_trainer_module(
            self.module_file,
            source=self.module_source,
            entry_point=self.entry_point,
            staged=self.staged,
        )


def common_fn_args(
    job: ModelJob,
    working_dir: str,
    *,
    strategy: Any = None,
    data_accessor: Optional[DataAccessor] = None,
    **fields: Any,
) -> FnArgs:
    """The ``FnArgs`` of ``job``: the fields training and tuning share, plus ``fields``.

    Args:
      job: the training or tuning job.
      working_dir: ``fn_args.working_dir``.
      strategy: the distribution strategy the runner chose for this worker.
      data_accessor: the module's data accessor (default: a plain :class:`DataAccessor`).
      **fields: the job's own ``FnArgs`` fields (training: ``serving_model_dir``,
        ``model_run_dir``, ``hyperparameters``...).
    """
    policy = precision_policy(job.mixed_precision)
    custom_config = dict(job.custom_config)
    if policy is not None:  # a TFX module's FnArgs has no field for it
        custom_config.setdefault(CUSTOM_CONFIG_KEY, policy)
    return FnArgs(
        working_dir=working_dir,
        train_files=list(job.train_files),
        eval_files=list(job.eval_files),
        train_steps=job.train_steps,
        eval_steps=job.eval_steps,
        schema_path=job.schema_path,
        transform_graph_path=job.transform_graph_path,
        data_accessor=data_accessor or DataAccessor(),
        custom_config=custom_config,
        num_examples=ExampleCounts({"train": job.train_files, "eval": job.eval_files}),
        strategy=strategy,
        mixed_precision=policy,
        **fields,
    )
