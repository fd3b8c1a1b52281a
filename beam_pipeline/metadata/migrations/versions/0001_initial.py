"""The first schema: ML Metadata's tables (types, artifacts and their properties,
executions, events, contexts, parent contexts, attributions, associations).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "types",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.UniqueConstraint("kind", "name", name="uq_types_kind_name"),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
        sa.Column("uri", sa.String(2048), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("fingerprint", sa.String(128)),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
        sa.Column("update_time_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_artifacts_uri", "artifacts", ["uri"], mysql_length=255)
    op.create_table(
        "artifact_properties",
        sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("is_custom", sa.Boolean, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "executions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cache_key", sa.String(128)),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("cached_from_id", sa.Integer, sa.ForeignKey("executions.id")),
        sa.Column("start_time_ms", sa.BigInteger, nullable=False),
        sa.Column("end_time_ms", sa.BigInteger),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("execution_id", sa.Integer, sa.ForeignKey("executions.id"), nullable=False),
        sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), nullable=False),
        sa.Column("type", sa.String(8), nullable=False),
        sa.Column("role", sa.String(255), nullable=False),
        sa.Column("time_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_events_execution", "events", ["execution_id"])
    op.create_index("ix_events_artifact", "events", ["artifact_id"])
    op.create_table(
        "contexts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("type_id", sa.Integer, sa.ForeignKey("types.id"), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("properties", sa.JSON, nullable=False),
        sa.Column("create_time_ms", sa.BigInteger, nullable=False),
        sa.Column("update_time_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("type_id", "name", name="uq_contexts_type_name"),
    )
    op.create_table(
        "parent_contexts",
        sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
        sa.Column("parent_context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
    )
    op.create_table(
        "attributions",
        sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
        sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id"), primary_key=True),
    )
    op.create_table(
        "associations",
        sa.Column("context_id", sa.Integer, sa.ForeignKey("contexts.id"), primary_key=True),
        sa.Column("execution_id", sa.Integer, sa.ForeignKey("executions.id"), primary_key=True),
    )
