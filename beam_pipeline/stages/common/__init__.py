"""What several stages share, so that no stage imports another.

- :mod:`~beam_pipeline.stages.common.blessings`: the model checks' history verdict and why
  a model was not evaluated (the blessings read themselves: ``ModelBlessing.read()``);
- :mod:`~beam_pipeline.stages.common.feature_stats`: reading feature statistics (Schema,
  Validation);
- :mod:`~beam_pipeline.stages.common.model_job`: the Trainer's and Tuner's inputs and job
  fields;
- :mod:`~beam_pipeline.stages.common.span_cache`: the per-span ExampleGen + Statistics
  units of a ``{SPAN}`` input (ExampleGen writes them, Transform keys its analyzer cache
  by them);
- :mod:`~beam_pipeline.stages.common.metadata_store`: the run's metadata store as a stage opens it.
"""
