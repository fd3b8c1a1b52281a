"""A TrainSpec as a keras-tuner HyperModel: tuning a module without ``tuner_fn``.

With a :class:`trainer.tuning.SearchSpace` from the pipeline config, the module's
:class:`trainer.TrainSpec` builds, compiles and fits each trial's model, and the space's
algorithm picks the keras-tuner tuner (RandomSearch, GridSearch, BayesianOptimization,
Hyperband). The spec's default hyperparameters that the space does not search stay fixed.

Example::

    result = spec_tuner(PenguinSpec, space, fn_args)   # TunerFnResult(tuner=..., fit_kwargs=...)
"""

from __future__ import annotations

from trainer.fn_args import FnArgs, TunerFnResult
from trainer.tuning.search_space import SearchAlgorithm, SearchSpace

__all__ = ["spec_tuner"]


def spec_tuner(spec_class: type, space: SearchSpace, fn_args: FnArgs) -> TunerFnResult:
    """A keras-tuner tuner over ``space`` whose trials train with the module's TrainSpec."""
    import keras_tuner

    from trainer.spec import compile_model, make_spec, model_datasets

    class SpecHyperModel(keras_tuner.HyperModel):
        """Builds and fits a trial's model with the TrainSpec (made once per process)."""

        def __init__(self) -> None:
            super().__init__(name=spec_class.__name__)
            self._spec = None

        def spec(self):
            if self._spec is None:
                self._spec = make_spec(spec_class, fn_args)
            return self._spec

        def build(self, hp):
            return compile_model(self.spec(), hp)

        def fit(self, hp, model, *args, **kwargs):
            train, validation = model_datasets(self.spec(), hp, model)
            return model.fit(
                train,
                steps_per_epoch=fn_args.train_steps,
                validation_data=validation,
                validation_steps=fn_args.eval_steps,
                **kwargs,
            )

    hypermodel = SpecHyperModel()
    # The spec's defaults that the space does not search stay fixed at their values.
    hp = keras_tuner.HyperParameters()
    searched = {p.name for p in space.parameters}
    defaults = hypermodel.spec().default_hyperparameters()
    for name, value in defaults.values.items():
        if name not in searched:
            hp.Fixed(name, value)
    hp.merge(space.hyperparameters())
    objective = (
        keras_tuner.Objective(space.objective, space.direction.value)
        if space.direction is not None
        else space.objective
    )
    common = dict(
        hypermodel=hypermodel,
        objective=objective,
        hyperparameters=hp,
        tune_new_entries=False,
        seed=space.seed,
        directory=fn_args.working_dir,
        project_name=f"{spec_class.__name__}_tuning",
    )
    if space.algorithm is SearchAlgorithm.HYPERBAND:
        tuner = keras_tuner.Hyperband(max_epochs=space.max_epochs, **common)
    else:
        kind = {
            SearchAlgorithm.RANDOM: keras_tuner.RandomSearch,
            SearchAlgorithm.GRID: keras_tuner.GridSearch,
            SearchAlgorithm.BAYESIAN: keras_tuner.BayesianOptimization,
        }[space.algorithm]
        tuner = kind(max_trials=space.max_trials, **common)
    return TunerFnResult(tuner=tuner, fit_kwargs={"verbose": 0})
