"""A module file whose every tuning trial raises, for the tests of errors raised in workers.

``preprocessing_fn`` passes TFX's processed penguin columns through (no analyzers: a
fast Transform); ``tuner_fn`` returns a RandomSearch whose model-building function raises
``ValueError`` for every trial (the tuner's own first build, which reads the search space
on the launcher, succeeds). ``fn_args.custom_config["tf_keras"]`` builds a tf_keras
(Keras 2) model instead, which keras-tuner refuses.
"""

from __future__ import annotations

import keras
import keras_tuner

from trainer import FnArgs, TunerFnResult

FEATURES = ("culmen_length_mm", "culmen_depth_mm", "flipper_length_mm", "body_mass_g")


def preprocessing_fn(inputs):
    return {name: inputs[name] for name in (*FEATURES, "species")}


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    builds = []

    def build(hp):
        hp.Choice("units", [4, 8])
        trial = bool(builds)
        builds.append(1)
        if trial and fn_args.custom_config.get("tf_keras"):
            import tf_keras

            inputs = tf_keras.Input((1,))
            return tf_keras.Model(inputs, tf_keras.layers.Dense(3)(inputs))
        if trial:
            raise ValueError(f"no penguin model with {hp.get('units')} units")
        inputs = keras.Input((1,))
        return keras.Model(inputs, keras.layers.Dense(3)(inputs))

    tuner = keras_tuner.RandomSearch(
        build,
        objective="val_loss",
        max_trials=4,
        seed=1,
        directory=fn_args.working_dir,
        project_name="raising",
    )
    return TunerFnResult(tuner=tuner, fit_kwargs={"x": [[0.0]], "y": [0]})


def run_fn(fn_args: FnArgs) -> None:
    """Never reached (every trial fails first); defined because a module that trains
    nothing is not tuned either."""
    raise AssertionError("the search fails before training")
