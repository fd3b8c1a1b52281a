"""The Evaluator stage: its declaration (``stage.py``), its run (``executor.py``) and the
TFMA work (``evaluation.py``)."""
