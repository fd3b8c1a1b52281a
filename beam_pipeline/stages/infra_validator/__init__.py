"""beam_pipeline/stages/infra_validator."""
