"""Executions get properties: what the runner keeps of an execution besides its
parameters (its summary rows, facts a later run needs when it reuses it), ``{}`` for rows
written before.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "executions",
        sa.Column("properties", sa.JSON, nullable=False, server_default=sa.text("'{}'")),
    )
