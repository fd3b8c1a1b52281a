"""The Transform stage: its declaration (``stage.py``), its job (``executor.py``) and
tf.Transform's analyzer cache (``analyzer_cache.py``)."""
