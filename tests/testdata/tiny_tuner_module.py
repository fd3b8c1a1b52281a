"""A module file for fast tuner tests: a tiny classifier on in-memory arrays (no input files).

``fn_args.custom_config`` picks the search: ``tuner`` (``random`` or ``hyperband``),
``max_trials``, ``seed``, ``max_consecutive_failed_trials``; ``fail_on_units`` makes the
model raise for that ``units`` value, ``fail_all`` every trial, ``not_a_model`` makes the
hypermodel return a string (keras-tuner's fatal error). For early stopping: ``epochs``
(each trial's fit), ``objective`` (default ``val_accuracy``) and ``learning_rates``: a
grid search over exactly these learning rates (``units`` fixed at 4), where a rate of 0 is
the planted bad region: its model's output starts at zero and cannot learn (its loss stays
ln 2 whatever the weights' random start). ``fits``: a folder where each fit leaves a
file as it starts (count the trainings); ``exit_once_stopped``: a file path; the first fit
that early stopping ends kills its own process as it ends, before its result is written
(a worker lost after its trial was stopped).
"""

from __future__ import annotations

import os
import time

import keras
import keras_tuner
import numpy as np

from trainer import FnArgs, TunerFnResult


class _CountFits(keras.callbacks.Callback):
    def __init__(self, folder: str):
        super().__init__()
        self.folder = folder

    def on_train_begin(self, logs=None):
        open(os.path.join(self.folder, f"{os.getpid()}.{time.time_ns()}"), "x").close()


class _ExitOnceStopped(keras.callbacks.Callback):
    def __init__(self, marker: str):
        super().__init__()
        self.marker = marker

    def on_train_end(self, logs=None):
        if not self.model.stop_training:  # trained to its end: not stopped early
            return
        try:
            open(self.marker, "x").close()  # exclusive create: once per search
        except FileExistsError:
            return
        os._exit(3)  # the worker process dies before the trial's result is written


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    custom = fn_args.custom_config
    x = np.random.RandomState(0).normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int64")

    builds = []  # the first build is the tuner's own (it reads the search space)

    rates = custom.get("learning_rates")

    def build(hp):
        if rates:
            units = hp.Fixed("units", 4)
            rate = hp.Choice("learning_rate", rates)
        else:
            units = hp.Int("units", 2, 8, step=2)
            rate = hp.Float("learning_rate", 1e-3, 1e-1, sampling="log")
        trial = bool(builds)
        builds.append(units)
        if trial and custom.get("not_a_model"):
            return "not a model"
        if trial and custom.get("fail_all"):
            raise ValueError("this model never builds")
        if custom.get("fail_on_units") == units:
            raise ValueError(f"no model with units={units}")
        start = "zeros" if rate == 0 else "glorot_uniform"
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(units, activation="relu"),
                keras.layers.Dense(2, kernel_initializer=start),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            run_eagerly=True,  # a few steps: tracing would cost more than it saves
        )
        return model

    common = dict(
        hypermodel=build,
        objective=custom.get("objective", "val_accuracy"),
        directory=fn_args.working_dir,
        project_name="tiny",
        seed=custom.get("seed", 7),
        max_consecutive_failed_trials=custom.get("max_consecutive_failed_trials", 3),
    )
    if rates:
        tuner = keras_tuner.GridSearch(max_trials=len(rates), **common)
    elif custom.get("tuner") == "hyperband":
        tuner = keras_tuner.Hyperband(max_epochs=2, factor=2, **common)
    else:
        tuner = keras_tuner.RandomSearch(max_trials=custom.get("max_trials", 4), **common)
    callbacks = []
    if custom.get("fits"):
        callbacks.append(_CountFits(custom["fits"]))
    if custom.get("exit_once_stopped"):
        callbacks.append(_ExitOnceStopped(custom["exit_once_stopped"]))
    return TunerFnResult(
        tuner=tuner,
        fit_kwargs={
            "callbacks": callbacks,
            "x": x,
            "y": y,
            "validation_data": (x, y),
            "batch_size": 16,
            "epochs": custom.get("epochs", 1),
            "verbose": 0,
        },
    )
