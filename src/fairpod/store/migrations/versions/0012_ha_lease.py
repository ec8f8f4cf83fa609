"""The lease of standby control planes (``ha_lease``) and their heartbeats (``ha_members``): see
fairpod.store.lease.

Revision ID: 0012
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ha_lease",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("url", sa.String(400), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "ha_members",
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("url", sa.String(400), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.Column("fenced", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ha_members")
    op.drop_table("ha_lease")
