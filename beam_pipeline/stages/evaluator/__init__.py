"""beam_pipeline/stages/evaluator."""
