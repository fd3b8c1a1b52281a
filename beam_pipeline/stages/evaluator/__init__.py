"""The Evaluator stage: its declaration (``stage.py``) and the TFMA work (``evaluation.py``)."""
