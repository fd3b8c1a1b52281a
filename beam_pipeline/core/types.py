"""The enums every layer shares: example splits, input formats, the artifacts of a run.

Example::

    from beam_pipeline.core.types import Artifact, DataFormat, Split

    Split.TRAIN.value          # 'train'
    DataFormat("csv")          # DataFormat.CSV
    Artifact.SCHEMA.value      # 'schema', the artifact's folder in a run directory
"""

from __future__ import annotations

import enum

__all__ = ["Artifact", "DataFormat", "DEFAULT_CSV_MAX_FIELD_BYTES", "PUBLISHED_MARKER", "Split"]

# Written last into every published artifact; on object stores (no atomic folder rename)
# its presence is what tells a finished artifact from a partly copied one.
PUBLISHED_MARKER = "_PUBLISHED"

# Default of --csv_max_field_bytes (the CLI's flag and ExampleGen's reader share it): large
# enough for real data (a long free-text or JSON cell), small enough that a runaway quote is
# reported as one oversized field instead of a row holding the rest of the file.
DEFAULT_CSV_MAX_FIELD_BYTES = 16 << 20


class Split(str, enum.Enum):
    """Names of the example splits."""

    TRAIN = "train"
    EVAL = "eval"
    TEST = "test"


class DataFormat(str, enum.Enum):
    """Input formats ExampleGen reads."""

    AUTO = "auto"
    CSV = "csv"
    TFRECORD = "tfrecord"


class Artifact(str, enum.Enum):
    """The core artifacts of a run, by folder name inside the run directory (a stage may
    name its own artifacts' folders with a string)."""

    EXAMPLES = "examples"
    REJECTED = "rejected"
    STATISTICS = "statistics"
    SCHEMA = "schema"
    ANOMALIES = "anomalies"
    TRANSFORM_GRAPH = "transform_graph"
    TRANSFORMED_EXAMPLES = "transformed_examples"
    TUNER = "tuner"
    MODEL = "model"
    MODEL_RUN = "model_run"
    EVALUATION = "evaluation"
    BLESSING = "blessing"
    INFRA_BLESSING = "infra_blessing"
    PUSHED_MODEL = "pushed_model"
