"""beam_pipeline/stages/schema."""
