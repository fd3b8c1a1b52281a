"""A module file whose preprocessing_fn traces fine but fails on the data (tests).

Its assertion holds for no penguin of TFX's processed data with a body mass above 0.9
(min-max scaled), so the Transform job fails on a worker, in TensorFlow, with no line
of this file in TensorFlow's error.
"""

import tensorflow as tf


def preprocessing_fn(inputs):
    mass = inputs["body_mass_g"]
    check = tf.debugging.assert_less(mass, 0.9, message="body mass too high")
    with tf.control_dependencies([check]):
        mass = tf.identity(mass)
    return {"mass": mass, "species": inputs["species"]}
