"""The BulkInferrer stage: its declaration (``stage.py``), its artifact types
(``artifacts.py``) and the scoring job (``executor.py``)."""
