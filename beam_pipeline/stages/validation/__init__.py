"""beam_pipeline/stages/validation."""
