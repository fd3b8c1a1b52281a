"""beam_pipeline/stages/transform."""
