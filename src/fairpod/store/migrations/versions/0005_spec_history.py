"""Spec history (``fairpod policy history`` / ``rollback``): every applied spec is kept, with who and when.
The spec in force when this migration runs becomes the first entry.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Json = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "spec_history",
        sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("applied_at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
    )
    op.execute("INSERT INTO spec_history (version, spec, applied_at, actor, action) "
               "SELECT version, spec, updated_at, 'fairpod', 'spec.apply' FROM cluster")


def downgrade() -> None:
    op.drop_table("spec_history")
