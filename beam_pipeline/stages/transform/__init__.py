"""The Transform stage: its declaration and job (``stage.py``) and tf.Transform's analyzer
cache (``analyzer_cache.py``)."""
