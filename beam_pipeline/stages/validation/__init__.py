"""The Validation stage: its declaration (``stage.py``), the checks (``checks.py``) and the
anomalies file (``anomalies.py``)."""
