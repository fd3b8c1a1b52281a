"""The InfraValidator stage: its declaration (``stage.py``), its run (``executor.py``), the
serving check (``checks.py``), its sandbox (``sandbox.py``) and a TF Serving client
(``endpoint.py``).
"""
