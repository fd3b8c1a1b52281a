"""Diamonds' price as a regression label passed through unchanged (an INT column, values
326..18823), as a user following getting-started writes it: the Evaluator must tell it
from a binary label by its values."""

import keras
import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

from trainer import FnArgs, export_serving_model

NUMERIC = ["carat", "depth", "table", "x", "y", "z"]
CATEGORIES = ["cut", "color", "clarity"]


def preprocessing_fn(inputs):
    out = {k + "_xf": tft.scale_to_z_score(tf.cast(inputs[k], tf.float32)) for k in NUMERIC}
    for k in CATEGORIES:
        out[k + "_xf"] = tft.compute_and_apply_vocabulary(inputs[k], vocab_filename=k)
    out["price_xf"] = inputs["price"]  # the label, passed through: int64
    return out


def run_fn(fn_args: FnArgs) -> None:
    keras.utils.set_random_seed(0)
    output = tft.TFTransformOutput(fn_args.transform_output)

    def dataset(files):
        options = tfxio.TensorFlowDatasetOptions(batch_size=32, label_key="price_xf")
        data = fn_args.data_accessor.tf_dataset_factory(
            files, options, output.transformed_metadata.schema
        )
        return data.map(lambda x, y: (x, tf.cast(y, tf.float32)))

    inputs = {k + "_xf": keras.Input(shape=(1,), name=k + "_xf") for k in NUMERIC}
    codes = {k + "_xf": keras.Input(shape=(1,), name=k + "_xf", dtype="int64") for k in CATEGORIES}
    parts = list(inputs.values()) + [
        keras.layers.CategoryEncoding(num_tokens=12, output_mode="one_hot")(v)
        for v in codes.values()
    ]
    hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()(parts))
    price = keras.layers.Dense(1)(hidden)
    model = keras.Model({**inputs, **codes}, price)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    model.fit(
        dataset(fn_args.train_files),
        steps_per_epoch=fn_args.train_steps,
        epochs=1,
        validation_data=dataset(fn_args.eval_files),
        validation_steps=fn_args.eval_steps,
        verbose=0,
    )
    export_serving_model(model, output, fn_args.serving_model_dir, raw_label_keys=["price"])
