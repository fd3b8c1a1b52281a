"""The Validation stage: its declaration (``stage.py``), its run (``executor.py``), the
checks (``checks.py``) and the anomalies file (``anomalies.py``)."""
