"""The Tuner stage's launcher side with Beam: its schedules and its trials' files.

The declaration is :mod:`~beam_pipeline.stages.tuner.stage` (its settings
:mod:`~beam_pipeline.stages.tuner.settings`), the work its hooks delegate to
:mod:`~beam_pipeline.stages.tuner.executor`; the search itself is
:func:`beam_pipeline.stages.tuner.tuning.run_tuning_stage`; the trial's plain-Python halves
(oracle driver, trial runner) are in :mod:`trainer.tuning`.

- :mod:`~beam_pipeline.stages.tuner.search`: what a search did (:class:`Search`) and the results
  its trials' workers wrote;
- :mod:`~beam_pipeline.stages.tuner.rounds`: the rounds schedule (a job per round);
- :mod:`~beam_pipeline.stages.tuner.rolling`: the rolling schedule (a job per trial, slots refill);
- :mod:`~beam_pipeline.stages.tuner.trials`: ``trials.csv`` / ``trials.json``, ``objective.svg``,
  the text table and the stage's summary row.
"""

__all__: list[str] = []
