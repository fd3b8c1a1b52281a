"""Executions get the Beam job ids they ran (a JSON list, ``[]`` for rows written before)
and an index for the cache look-up by stage and cache key.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite has it): no table copy, so the rows and the foreign keys
    # pointing at executions stay as they are.
    op.add_column(
        "executions",
        sa.Column("beam_job_ids", sa.JSON, nullable=False, server_default=sa.text("'[]'")),
    )
    op.create_index("ix_executions_cache", "executions", ["type_id", "cache_key"])
