"""The Schema stage: its declaration (``stage.py``), its run (``executor.py``) and the
inference (``inference.py``)."""
