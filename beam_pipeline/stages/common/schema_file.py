"""The Schema artifact's file: a tensorflow_metadata ``Schema`` as a text proto.

The Schema stage writes it (``schema/schema.pbtxt``, as TFX's SchemaGen does); the
Validation, Transform, Evaluator and BulkInferrer stages and ``runs diff`` read it. The
user's ``--schema`` is one too (:func:`user_schema`): ExampleGen types the CSV columns with
it, the Schema stage publishes it, Validation and the BulkInferrer read it.

Example::

    write_schema(schema, "schema/schema.pbtxt")
    schema = read_schema("schema/schema.pbtxt")
"""

from __future__ import annotations

from typing import Optional

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.config import PipelineConfig

__all__ = ["read_schema", "user_schema", "write_schema"]


def write_schema(schema: schema_pb2.Schema, path: str) -> None:
    """Writes ``schema`` as a text proto (``schema.pbtxt``, as TFX's SchemaGen does).

    Args:
      schema: the schema to write.
      path: the file to create or overwrite; its folder is created when missing;
        ``gs://`` paths work.

    Raises:
      TypeError: ``schema`` is not a tensorflow_metadata Schema.
    """
    if not isinstance(schema, schema_pb2.Schema):
        raise TypeError(f"write_schema takes a Schema, got {type(schema).__name__}.")
    fileio.write_file(path, text_format.MessageToString(schema))


def read_schema(path: str) -> schema_pb2.Schema:
    """Reads a text-proto schema such as the one :func:`write_schema` writes.

    Args:
      path: the ``schema.pbtxt`` file; ``gs://`` paths work.

    Returns:
      The schema.

    Raises:
      PipelineError: the file does not exist or is not a text-format Schema.
    """
    if not fileio.exists(path):
        raise PipelineError(
            f"Schema file {path} does not exist; pass the path of an existing schema.pbtxt "
            "or let the pipeline infer one."
        )
    try:
        return text_format.Parse(fileio.read_file(path), schema_pb2.Schema())
    except text_format.ParseError as err:
        raise PipelineError(
            f"Schema file {path} is not a valid text-format tensorflow_metadata Schema "
            f"({err}); fix that line or delete the file to infer the schema again."
        ) from err


def user_schema(config: PipelineConfig) -> Optional[schema_pb2.Schema]:
    """The ``--schema`` file's schema, or None without one.

    Raises:
      PipelineError: the file does not exist or is not a text-format Schema.
    """
    return read_schema(config.schema.file) if config.schema.file else None
