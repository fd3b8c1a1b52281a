"""beam_pipeline/stages/pusher."""
