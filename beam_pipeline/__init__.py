"""beam-pipeline: a TFX-style ML pipeline (ExampleGen, statistics, schema, validation,
tf.Transform, tuning, training) run as Apache Beam work on any Beam runner.

Example::

    python -m beam_pipeline --runner=DirectRunner
"""
