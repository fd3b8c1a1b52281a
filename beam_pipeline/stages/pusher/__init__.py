"""The Pusher stage: its declaration (``stage.py``), its run (``executor.py``) and the copy
(``push.py``)."""
