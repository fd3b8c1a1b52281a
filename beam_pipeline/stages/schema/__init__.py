"""The Schema stage: its declaration (``stage.py``) and the inference (``inference.py``)."""
