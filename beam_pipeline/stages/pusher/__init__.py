"""The Pusher stage: its declaration (``stage.py``) and the copy (``push.py``)."""
