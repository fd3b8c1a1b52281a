"""The store's tables at the newest schema revision, as SQLAlchemy Core tables.

The queries use these; the database itself is created and changed only by the migrations
in ``migrations/versions/`` (``tests/test_metadata_store.py`` checks that the two agree).
Times are milliseconds since the epoch (as ML Metadata stores them); statuses and kinds
are the values of the enums in :mod:`~beam_pipeline.metadata.records`; JSON columns hold
parameters and context properties, which are read and shown whole. Artifact properties
are rows of their own (as ML Metadata's), so that one can be queried (``blessed``) on any
database: their value is JSON text, compared as text.

Tables (ML Metadata's names):

- ``types``: artifact, execution (one per stage) and context types by name.
- ``artifacts`` and ``artifact_properties``: uri, type, state, fingerprint; properties.
- ``executions``: stage (type), status, parameters, cache key, start/end, Beam job ids,
  properties (what the runner keeps of it: summary rows, ...).
- ``events``: execution <-> artifact, input or output, under a role name.
- ``contexts`` and ``parent_contexts``: pipelines and runs, a run's pipeline.
- ``attributions`` (context <-> artifact), ``associations`` (context <-> execution).
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["METADATA"]

METADATA = sa.MetaData()

types = sa.Table(
    "types",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.UniqueConstraint("kind", "name", name="uq_types_kind_name"),
)

artifacts = sa.Table(
    "artifacts",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
    sa.Column("uri", sa.String(2048), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("fingerprint", sa.String(128)),
    sa.Column("create_time_ms", sa.BigInteger, nullable=False),
    sa.Column("update_time_ms", sa.BigInteger, nullable=False),
    sa.Index("ix_artifacts_uri", "uri", mysql_length=255),
)

artifact_properties = sa.Table(
    "artifact_properties",
    METADATA,
    sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), primary_key=True),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("is_custom", sa.Boolean, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

executions = sa.Table(
    "executions",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("cache_key", sa.String(128)),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("cached_from_id", sa.Integer, sa.ForeignKey("executions.id")),
    sa.Column("start_time_ms", sa.BigInteger, nullable=False),
    sa.Column("end_time_ms", sa.BigInteger),
    # Revision 0002:
    sa.Column("beam_job_ids", sa.JSON, nullable=False, server_default=sa.text("'[]'")),
    # Revision 0003:
    sa.Column("properties", sa.JSON, nullable=False, server_default=sa.text("'{}'")),
    sa.Index("ix_executions_cache", "type_id", "cache_key"),
)

events = sa.Table(
    "events",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("execution_id", sa.Integer, sa.ForeignKey("executions.id"), nullable=False),
    sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), nullable=False),
    sa.Column("type", sa.String(8), nullable=False),
    sa.Column("role", sa.String(255), nullable=False),
    sa.Column("time_ms", sa.BigInteger, nullable=False),
    sa.Index("ix_events_execution", "execution_id"),
    sa.Index("ix_events_artifact", "artifact_id"),
)

contexts = sa.Table(
    "contexts",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("properties", sa.JSON, nullable=False),
    sa.Column("create_time_ms", sa.BigInteger, nullable=False),
    sa.Column("update_time_ms", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("type_id", "name", name="uq_contexts_type_name"),
)

parent_contexts = sa.Table(
    "parent_contexts",
    METADATA,
    sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
    sa.Column("parent_context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
)

attributions = sa.Table(
    "attributions",
    METADATA,
    sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
    sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), primary_key=True),
)

associations = sa.Table(
    "associations",
    METADATA,
    sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
    sa.Column("execution_id", sa.Integer, sa.ForeignKey("executions.id"), primary_key=True),
)
