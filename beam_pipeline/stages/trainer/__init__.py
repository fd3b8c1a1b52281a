"""The Trainer stage: its declaration (``stage.py``) and its Beam job (``training.py``)."""
