"""The ExampleGen+Statistics stage: its declaration (``stage.py``), the Beam job it runs
(``executor.py``) and its report sections (``report.py``)."""
