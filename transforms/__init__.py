"""Beam PTransforms of the pipeline's data-parallel stages (no orchestration here)."""
