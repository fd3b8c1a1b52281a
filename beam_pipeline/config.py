"""Typed pipeline configuration: the run's settings and each stage's section.

Flags and YAML config files are turned into one frozen
:class:`~beam_pipeline.engine.config.PipelineConfig` at the entry point
(:mod:`beam_pipeline.flags`, or :func:`beam_pipeline.api.run` from Python); every stage
receives typed config, never loose dicts or JSON strings. Each stage declares its own
section (a frozen dataclass of :func:`~beam_pipeline.core.settings.setting` fields) in
its home under :mod:`beam_pipeline.stages`; this module gathers them for callers who build
a config in Python.

Example::

    cfg = PipelineConfig(data=DataConfig(data="data/*.csv"), module_file="my_module.py")
    cfg.trainer.train_steps        # 100: the Trainer's section, its defaults
"""

from __future__ import annotations

import os

from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES, Split
from beam_pipeline.engine.config import PipelineConfig, check_run_id
from beam_pipeline.stages.common.model_job import parse_custom_config
from beam_pipeline.stages.graph import STAGE_GRAPH
from beam_pipeline.stages.tuner.settings import TunerSchedule

BUNDLED_EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "examples", "penguin")
BUNDLED_CONFIG = os.path.join(BUNDLED_EXAMPLE_DIR, "pipeline.yaml")

# Each stage's Config class by its name (DataConfig, TrainerConfig, ...), read from the
# stage declarations: a new stage's settings appear here without an edit.
_SECTIONS = {s.Config.__name__: s.Config for s in STAGE_GRAPH if s.Config is not None}
globals().update(_SECTIONS)

__all__ = [  # noqa: PLE0604 - the section classes are the graph's
    "PipelineConfig",
    *_SECTIONS,
    "TunerSchedule",
    "STAGE_GRAPH",
    "BUNDLED_EXAMPLE_DIR",
    "BUNDLED_CONFIG",
    "DEFAULT_CSV_MAX_FIELD_BYTES",
    "Split",
    "check_run_id",
    "parse_custom_config",
]
