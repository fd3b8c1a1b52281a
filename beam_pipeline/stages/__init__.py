"""The stages of a run, one home each; :mod:`beam_pipeline.stages.graph` lists them.

A stage's launcher side is ``stages/<stage>.py`` or ``stages/<stage>/`` (its declaration in
``stage.py``); its Beam side is ``transforms/<stage>``; code shared by several stages is in
:mod:`beam_pipeline.stages.common`. The generic machinery they build on is
:mod:`beam_pipeline.engine`.
"""
