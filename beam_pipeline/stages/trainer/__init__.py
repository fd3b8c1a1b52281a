"""The Trainer stage: its declaration (``stage.py``), the work its hooks delegate to
(``executor.py``) and its Beam job (``training.py``)."""
