"""Idempotent submits: the ``submit_keys`` table (a retried submit with the same key gets the first job).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submit_keys",
        sa.Column("user", sa.String(64), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_submit_keys_created_at", "submit_keys", ["created_at"])


def downgrade() -> None:
    op.drop_table("submit_keys")
