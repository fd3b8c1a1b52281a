"""beam_pipeline/stages/trainer."""
