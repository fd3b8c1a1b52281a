"""The generic trainer that runs inside a worker (no Beam imports here).

A module file trains either with a TFX-style ``run_fn(fn_args)`` or with one
:class:`TrainSpec` subclass (the runner owns the loop). :func:`run_trainer` runs one
:class:`TrainingJob` in a plain process: the Beam training step calls it on a worker.

Example (a module file ported from TFX by changing its imports)::

    from trainer import FnArgs            # was: tfx.components.FnArgs
    from tfx_bsl.public import tfxio

    def run_fn(fn_args: FnArgs):
        dataset = fn_args.data_accessor.tf_dataset_factory(
            fn_args.train_files, tfxio.TensorFlowDatasetOptions(batch_size=64, label_key="y"),
            tft.TFTransformOutput(fn_args.transform_output).transformed_metadata.schema)
        ...
"""

from trainer.data_accessor import DataAccessor
from trainer.export import (
    SERVING_SIGNATURE,
    check_base_model,
    check_serving_model,
    export_serving_model,
    warm_start,
)
from trainer.fn_args import ExampleCounts, FnArgs, TunerFnResult
from trainer.module_loader import (
    ModuleKind,
    TrainerModule,
    check_trainer_module,
    load_trainer_module,
)
from trainer.run_training import (
    RESULT_FILE,
    TrainingJob,
    TrainingResult,
    load_hyperparameters,
    read_result,
    run_trainer,
)
from trainer.spec import SpecOutcome, TrainSpec, run_spec
from trainer.strategy import StrategyInfo, choose_strategy, configure_devices, describe
from trainer.tuning import (
    OracleDriver,
    SearchSpace,
    TrialRecord,
    TrialResult,
    TrialRunner,
    TrialSpec,
    TrialStatus,
    TuningJob,
)

__all__ = [
    "check_base_model",
    "check_serving_model",
    "check_trainer_module",
    "choose_strategy",
    "configure_devices",
    "DataAccessor",
    "describe",
    "ExampleCounts",
    "export_serving_model",
    "FnArgs",
    "load_hyperparameters",
    "load_trainer_module",
    "ModuleKind",
    "OracleDriver",
    "read_result",
    "RESULT_FILE",
    "run_spec",
    "run_trainer",
    "SearchSpace",
    "SERVING_SIGNATURE",
    "SpecOutcome",
    "StrategyInfo",
    "TrainerModule",
    "TrainingJob",
    "TrainingResult",
    "TrainSpec",
    "TrialRecord",
    "TrialResult",
    "TrialRunner",
    "TrialSpec",
    "TrialStatus",
    "TunerFnResult",
    "TuningJob",
    "warm_start",
]
