"""beam_pipeline/stages/common."""
